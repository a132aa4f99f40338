"""Unmodified official SDK clients (`anthropic`, `openai` Chat and Responses; streamed and not; sync
and async) talk through the proxy, over real sockets, to the fake provider for 300 turns in all of a
scripted tool-using conversation in a window the conversation outgrows many times over:

- no overflow reaches a client (every call succeeds, and the fake rejects what does not fit);
- masked or compacted content comes back byte for byte through `ctxwin_recall` when the scripted
  model asks for it (the model checks what it got against the file it read);
- no client ever sees the recall tool, in a whole answer or in a stream event.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest

from ctxwin.messages import Message
from ctxwin.proxy.apis import RECALL_TOOL
from ctxwin.testing import Call, FakeProvider, ModelRequest, Reply
from proxy_server import Served, proxy_for

WINDOW = 16_000
MAX_TOKENS = 500
FILE_LINES = 60  # about 1,300 tokens per file read: the conversation outgrows the window in ~12 reads
ANTHROPIC_MODEL = "claude-sonnet-4-5"
OPENAI_MODEL = "deepseek-chat"  # an OpenAI-compatible provider; counted by the estimator, not tiktoken (test time)
READ_TOOL = {"name": "read", "description": "Read a file of the project.",
             "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
REF = re.compile(r'recall\("((?:entry|blob):[^"]+)"\)')


def file_content(path: str) -> str:
    """What the client's `read` tool returns for `path`: unique, deterministic lines."""
    seed = hashlib.sha256(path.encode()).hexdigest()
    lines = [f"FILE {path}", f"NEEDLE {seed[:16]}"]
    lines += [f"{n:04d} def step_{n}_{seed[n % 40:n % 40 + 8]}(value): return value * {n} + 0x{seed[:6]}"
              for n in range(FILE_LINES)]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- the model


def _texts(message: Message) -> Iterator[str]:
    yield message.text
    for result in message.tool_results:
        yield result.text


def scripted_model(request: ModelRequest) -> Reply:
    """Reads files, says a step is done every third call, and every fifth call asks ctxwin_recall for
    something the view names only by ref; after a recall it says whether the content came back
    byte for byte. Every 13th call mixes a recall with its own read (the proxy then drops the recall)."""
    messages = request.messages
    last = messages[-1]
    calls = {c.id: c for m in messages for c in m.tool_calls}
    if last.role == "tool":
        answered = [calls.get(r.call_id) for r in last.tool_results]
        if any(c is not None and c.name == RECALL_TOOL for c in answered):
            text = last.tool_results[0].text
            path = text.split("\n", 1)[0].removeprefix("FILE ")
            verdict = "OK" if text == file_content(path) else "BAD"
            return Reply(f"RECALL-{verdict} {path}")
    read = Call("read", {"path": f"src/pkg/mod_{request.call:04d}.py"})
    if RECALL_TOOL in request.tools and request.call % 5 == 4:
        refs = [ref for m in messages for text in _texts(m) for ref in REF.findall(text)]
        reads = [ref for ref in refs if "#" in ref]
        if reads:
            recall = Call(RECALL_TOOL, {"ref": reads[request.call % len(reads)]})
            return Reply(calls=(recall, read) if request.call % 13 == 9 else (recall,))
    if last.role == "tool" and request.call % 3 == 2:
        return Reply(f"Step {request.call} done.")
    return Reply(f"Reading step {request.call}.", calls=(read,))


# ---------------------------------------------------------------------------------------------- the clients


@dataclass
class Transcript:
    """What one client saw."""

    texts: list[str] = field(default_factory=list)
    tool_names: list[str] = field(default_factory=list)
    stream_tool_names: list[str] = field(default_factory=list)


def _anthropic_turns(history: list[dict[str, Any]], content: list[dict[str, Any]], seen: Transcript,
                     turn: int) -> None:
    history.append({"role": "assistant", "content": content})
    results = []
    for block in content:
        if block["type"] == "text":
            seen.texts.append(block["text"])
        elif block["type"] == "tool_use":
            seen.tool_names.append(block["name"])
            results.append({"type": "tool_result", "tool_use_id": block["id"],
                            "content": file_content(block["input"]["path"])})
    history.append({"role": "user", "content": results or f"Go on with step {turn}."})


def _dump(block: Any) -> dict[str, Any]:
    return block.model_dump(exclude_none=True, exclude={"parsed_output"})


def run_anthropic(served: Served, turns: int, *, stream: bool, use_async: bool) -> Transcript:
    seen, history = Transcript(), [{"role": "user", "content": "Read the project, one module at a time."}]
    options = {"model": ANTHROPIC_MODEL, "max_tokens": MAX_TOKENS, "tools": [READ_TOOL],
               "system": "You are a careful engineer."}
    if not use_async:
        client = anthropic.Anthropic(base_url=served.url, api_key="sk-ant-test", max_retries=0)
        for turn in range(turns):
            if stream:
                with client.messages.stream(messages=history, **options) as events:
                    for event in events:
                        if event.type == "content_block_start" and event.content_block.type == "tool_use":
                            seen.stream_tool_names.append(event.content_block.name)
                    message = events.get_final_message()
            else:
                message = client.messages.create(messages=history, **options)
            _anthropic_turns(history, [_dump(b) for b in message.content], seen, turn)
        return seen

    async def main() -> None:
        client = anthropic.AsyncAnthropic(base_url=served.url, api_key="sk-ant-test", max_retries=0)
        for turn in range(turns):
            if stream:
                async with client.messages.stream(messages=history, **options) as events:
                    async for event in events:
                        if event.type == "content_block_start" and event.content_block.type == "tool_use":
                            seen.stream_tool_names.append(event.content_block.name)
                    message = await events.get_final_message()
            else:
                message = await client.messages.create(messages=history, **options)
            _anthropic_turns(history, [_dump(b) for b in message.content], seen, turn)
        await client.close()

    asyncio.run(main())
    return seen


CHAT_TOOL = {"type": "function", "function": {"name": "read", "description": READ_TOOL["description"],
                                              "parameters": READ_TOOL["input_schema"]}}


def _chat_turn(history: list[dict[str, Any]], message: Any, seen: Transcript, turn: int) -> None:
    calls = message.tool_calls or []
    entry: dict[str, Any] = {"role": "assistant", "content": message.content}
    if calls:
        entry["tool_calls"] = [{"id": c.id, "type": "function", "function": {
            "name": c.function.name, "arguments": c.function.arguments}} for c in calls]
    history.append(entry)
    if message.content:
        seen.texts.append(message.content)
    for call in calls:
        seen.tool_names.append(call.function.name)
        history.append({"role": "tool", "tool_call_id": call.id,
                        "content": file_content(json.loads(call.function.arguments)["path"])})
    if not calls:
        history.append({"role": "user", "content": f"Go on with step {turn}."})


def run_chat(served: Served, turns: int, *, stream: bool, use_async: bool) -> Transcript:
    seen = Transcript()
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful engineer."},
                                     {"role": "user", "content": "Read the project, one module at a time."}]
    options = {"model": OPENAI_MODEL, "max_tokens": MAX_TOKENS, "tools": [CHAT_TOOL]}

    def note_chunk(chunk: Any) -> None:
        for choice in chunk.choices:
            for piece in choice.delta.tool_calls or ():
                if piece.function is not None and piece.function.name:
                    seen.stream_tool_names.append(piece.function.name)

    if not use_async:
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="sk-openai-test", max_retries=0)
        for turn in range(turns):
            if stream:
                with client.chat.completions.stream(messages=history, **options) as events:
                    for event in events:
                        if event.type == "chunk":
                            note_chunk(event.chunk)
                    completion = events.get_final_completion()
            else:
                completion = client.chat.completions.create(messages=history, **options)
            _chat_turn(history, completion.choices[0].message, seen, turn)
        return seen

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="sk-openai-test", max_retries=0)
        for turn in range(turns):
            if stream:
                async with client.chat.completions.stream(messages=history, **options) as events:
                    async for event in events:
                        if event.type == "chunk":
                            note_chunk(event.chunk)
                    completion = await events.get_final_completion()
            else:
                completion = await client.chat.completions.create(messages=history, **options)
            _chat_turn(history, completion.choices[0].message, seen, turn)
        await client.close()

    asyncio.run(main())
    return seen


RESPONSES_TOOL = {"type": "function", "name": "read", "description": READ_TOOL["description"],
                  "parameters": READ_TOOL["input_schema"]}


def _responses_turn(history: list[Any], response: Any, seen: Transcript, turn: int) -> None:
    calls = []
    for item in response.output:
        history.append(item.model_dump(exclude_none=True))
        if item.type == "function_call":
            calls.append(item)
            seen.tool_names.append(item.name)
        elif item.type == "message":
            seen.texts.append("".join(p.text for p in item.content if p.type == "output_text"))
    for call in calls:
        history.append({"type": "function_call_output", "call_id": call.call_id,
                        "output": file_content(json.loads(call.arguments)["path"])})
    if not calls:
        history.append({"role": "user", "content": f"Go on with step {turn}."})


def run_responses(served: Served, turns: int, *, stream: bool, use_async: bool) -> Transcript:
    seen = Transcript()
    history: list[Any] = [{"role": "user", "content": "Read the project, one module at a time."}]
    options = {"model": OPENAI_MODEL, "max_output_tokens": MAX_TOKENS, "tools": [RESPONSES_TOOL],
               "instructions": "You are a careful engineer."}

    def note_event(event: Any) -> None:
        if event.type == "response.output_item.added" and event.item.type == "function_call":
            seen.stream_tool_names.append(event.item.name)

    if not use_async:
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="sk-openai-test", max_retries=0)
        for turn in range(turns):
            if stream:
                with client.responses.stream(input=history, **options) as events:
                    for event in events:
                        note_event(event)
                    response = events.get_final_response()
            else:
                response = client.responses.create(input=history, **options)
            _responses_turn(history, response, seen, turn)
        return seen

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=f"{served.url}/v1", api_key="sk-openai-test", max_retries=0)
        for turn in range(turns):
            if stream:
                async with client.responses.stream(input=history, **options) as events:
                    async for event in events:
                        note_event(event)
                    response = await events.get_final_response()
            else:
                response = await client.responses.create(input=history, **options)
            _responses_turn(history, response, seen, turn)
        await client.close()

    asyncio.run(main())
    return seen


RUNNERS = {"anthropic": run_anthropic, "openai-chat": run_chat, "openai-responses": run_responses}
VARIANTS = [(api, stream, use_async) for api in RUNNERS for stream in (False, True) for use_async in (False, True)]
TURNS = {"anthropic": 28, "openai-chat": 28, "openai-responses": 19}
"""Turns per variant: 4 x (28 + 28 + 19) = 300 (the slow run). The Responses variants are shorter
because the openai SDK's own request building for Responses input is the slowest part of those runs."""
SMOKE_TURNS = {"anthropic": 14, "openai-chat": 14, "openai-responses": 14}
"""The default run's turns per variant: enough for the conversation to outgrow the window, compact
and recall (each assertion below still holds), in less time."""


@pytest.mark.parametrize("turns", [pytest.param(SMOKE_TURNS, id="smoke"),
                                   pytest.param(TURNS, id="300-turns", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("api", "stream", "use_async"), VARIANTS,
                         ids=[f"{a}-{'stream' if s else 'whole'}-{'async' if y else 'sync'}" for a, s, y in VARIANTS])
def test_sdk_clients_through_the_proxy(api: str, stream: bool, use_async: bool, turns: dict[str, int]) -> None:
    with FakeProvider(context_window=WINDOW, max_output=MAX_TOKENS * 2, model=scripted_model) as fake, \
            proxy_for(fake, window=WINDOW) as served, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the SDKs' notices about model names
        seen = RUNNERS[api](served, turns[api], stream=stream, use_async=use_async)
        entries = served.entries()
        forwarded = [r for r in fake.requests if r.path != "/v1/messages/count_tokens"]

    # Every call the client made succeeded (an error would have raised in the SDK); the conversation
    # the client holds is far past the window, and what went upstream always fit.
    assert len(entries) == turns[api] and all(e["status"] == 200 for e in entries)
    assert max(e["tokens_received"] for e in entries) > WINDOW
    assert all(r.status == 200 for r in forwarded), [r.response for r in forwarded if r.status != 200][:1]
    assert max(r.input_tokens for r in forwarded) + MAX_TOKENS <= WINDOW
    # The recall tool went upstream, and never to the client.
    assert all(RECALL_TOOL in json.dumps(r.body.get("tools")) for r in forwarded)
    assert RECALL_TOOL not in seen.tool_names + seen.stream_tool_names
    assert set(seen.tool_names) == {"read"}
    if stream:
        assert set(seen.stream_tool_names) == {"read"}
    # What the model asked back came back byte for byte, and the client saw the model say so.
    recalled = [t for t in seen.texts if t.startswith("RECALL-")]
    assert recalled and all(t.startswith("RECALL-OK ") for t in recalled), recalled
    assert sum(e["recall_calls"] for e in entries) >= len(recalled)
    assert any(e["compactions"] for e in entries)
