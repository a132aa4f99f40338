"""The ctxwin_recall tool: answered in the proxy from the stored bytes, never shown to the agent,
dropped from an answer that mixes it with the agent's own calls; and with the tool off, placeholders
that say how to read the file again with the agent's own tool."""

from __future__ import annotations

import json
import warnings

import anthropic
import httpx

from ctxwin.messages import Message, ToolCall
from ctxwin.pipeline.mask import reread_call
from ctxwin.proxy.apis import RECALL_TOOL
from ctxwin.testing import Call, FakeProvider, Reply
from ctxwin.testing.scripted import ModelRequest
from proxy_server import proxy_for
from test_proxy_sdk import ANTHROPIC_MODEL, READ_TOOL, file_content


def test_a_mixed_answer_goes_to_the_agent_without_the_recall_call() -> None:
    """An answer with the agent's own call and a recall call: the agent gets its call, the recall
    call is dropped unanswered (the same in a stream: see the variants above, whose model mixes
    every 13th call)."""
    mixed = Reply("Both.", calls=(Call(RECALL_TOOL, {"ref": "entry:x"}), Call("read", {"path": "a.py"})))
    with FakeProvider(model=lambda request: mixed) as fake, proxy_for(fake) as served:
        client = anthropic.Anthropic(base_url=served.url, api_key="sk-ant-test", max_retries=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            message = client.messages.create(model=ANTHROPIC_MODEL, max_tokens=100, tools=[READ_TOOL],
                                             messages=[{"role": "user", "content": "go"}])
            with client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=100, tools=[READ_TOOL],
                                        messages=[{"role": "user", "content": "go again"}]) as events:
                streamed = events.get_final_message()
        entries = served.entries()
    for answer in (message, streamed):
        assert [b.name for b in answer.content if b.type == "tool_use"] == ["read"]
        assert answer.stop_reason == "tool_use"
        assert [b.index if hasattr(b, "index") else None for b in answer.content]  # contiguous, parsed
    assert len(fake.requests) == 2 and all(e["recall_calls"] == 0 for e in entries)


def test_recall_results_are_the_stored_bytes() -> None:
    """A unit of the recall tool itself: a ref from a placeholder gives the logged result byte for
    byte, paged; a bad ref is an error result the model can read, never an exception."""
    from ctxwin.engine import ContextEngine
    from ctxwin.proxy.recall import answer

    engine = ContextEngine(window=100_000)
    engine.append({"role": "user", "content": "read it"})
    ids = engine.append([Message("assistant", (ToolCall("c1", "read", {"path": "a.py"}),)),
                         {"role": "tool", "tool_call_id": "c1", "content": file_content("a.py")}])
    text, error = answer(engine, ToolCall("r1", RECALL_TOOL, {"ref": f"entry:{ids[1]}#c1"}))
    assert (text, error) == (file_content("a.py"), False)
    page, _ = answer(engine, ToolCall("r2", RECALL_TOOL, {"ref": f"entry:{ids[1]}#c1", "offset": 5, "limit": 10}))
    assert page.startswith(file_content("a.py")[5:15]) and "offset=15" in page
    bad, error = answer(engine, ToolCall("r3", RECALL_TOOL, {"ref": "entry:nope"}))
    assert error and "no such entry" in bad
    missing, error = answer(engine, ToolCall("r4", RECALL_TOOL, {}))
    assert error and "ref" in missing


def test_a_recall_query_can_chain_searches_with_hops() -> None:
    """`hops` (memory.hops): the second search starts from what the first found, so a fact that
    shares no word with the question is found through the one that does."""
    from ctxwin.engine import ContextEngine
    from ctxwin.proxy.recall import answer

    engine = ContextEngine(window=100_000)
    engine.append({"role": "user", "content": "Note: the release checklist lives in the file kestrel.md."})
    engine.append({"role": "assistant", "content": "Noted."})
    for n in range(20):
        engine.append([{"role": "user", "content": f"filler message {n} about unrelated gardening and weather"},
                       {"role": "assistant", "content": f"ok {n}"}])
    engine.append({"role": "user", "content": "Also: kestrel.md got its sign-off from Marguerite."})
    question = {"query": "who approved the release checklist"}
    once, _ = answer(engine, ToolCall("r1", RECALL_TOOL, question))
    chained, error = answer(engine, ToolCall("r2", RECALL_TOOL, {**question, "hops": 2}))
    assert "kestrel.md" in once and "Marguerite" not in once
    assert not error and "Marguerite" in chained
    too_many, error = answer(engine, ToolCall("r3", RECALL_TOOL, {**question, "hops": 99}))
    assert not error and "Marguerite" in too_many  # capped at MAX_HOPS, not refused


def test_without_the_recall_tool_placeholders_say_how_to_read_the_file_again() -> None:
    def reader(request: object) -> Reply:
        call = getattr(request, "call", 0)
        return Reply(f"step {call}", calls=(Call("read", {"path": f"src/m{call}.py"}),))

    with FakeProvider(context_window=40_000, max_output=1_000, model=reader) as fake, \
            proxy_for(fake, window=40_000, recall_tool=False, policy="masking") as served:
        messages: list[dict] = [{"role": "user", "content": "read everything"}]
        for _ in range(16):
            response = httpx.post(f"{served.url}/v1/messages", json={
                "model": ANTHROPIC_MODEL, "max_tokens": 500, "tools": [READ_TOOL], "messages": messages},
                headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}, timeout=30)
            assert response.status_code == 200, response.text
            content = response.json()["content"]
            [use] = [b for b in content if b["type"] == "tool_use"]
            messages += [{"role": "assistant", "content": content},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                                       "content": file_content(use["input"]["path"])}]}]
    last = fake.requests_to("/v1/messages")[-1].body
    assert all(RECALL_TOOL not in json.dumps(r.body["tools"]) for r in fake.requests)
    results = [b["content"] for m in last["messages"] if isinstance(m["content"], list) for b in m["content"]
               if b.get("type") == "tool_result"]
    texts = [r if isinstance(r, str) else "".join(part.get("text", "") for part in r) for r in results]
    placeholders = [t for t in texts if "cleared to save context" in t]
    assert placeholders
    lines = file_content("x").count("\n") + 1
    assert all('Or read the file again: read(path="src/m' in p and f"offset=1, limit={lines})" in p
               for p in placeholders), placeholders


def test_reread_hints_are_for_file_reads_only() -> None:
    read = ToolCall("c", "Read", {"file_path": "/a/b.py", "offset": 40, "limit": 10})
    assert reread_call(read, 10) == 'Read(file_path="/a/b.py", offset=40, limit=10)'
    assert reread_call(ToolCall("c", "Write", {"file_path": "/a/b.py", "content": "x"}), 1) is None
    assert reread_call(ToolCall("c", "Bash", {"command": "cat a"}), 3) is None
    assert reread_call(None, 3) is None


def test_a_model_that_keeps_recalling_gets_a_last_request_without_the_tool() -> None:
    """A model that calls ctxwin_recall whenever it is offered: after MAX_ROUNDS rounds the proxy asks
    once more without the tool, and the agent gets that answer (text, a plain stop), whole or
    streamed, through the official SDKs."""
    import openai

    from ctxwin.proxy.recall import MAX_ROUNDS

    def greedy(request: ModelRequest) -> Reply:
        if RECALL_TOOL in request.tools:
            return Reply("", calls=(Call(RECALL_TOOL, {"query": "anything"}),))
        return Reply("the answer, without recall")

    chat_tool = {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}
    with FakeProvider(model=greedy) as fake, proxy_for(fake) as served:
        client = anthropic.Anthropic(base_url=served.url, api_key="sk-ant-test", max_retries=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            whole = client.messages.create(model=ANTHROPIC_MODEL, max_tokens=100, tools=[READ_TOOL],
                                           messages=[{"role": "user", "content": "go"}])
            with client.messages.stream(model=ANTHROPIC_MODEL, max_tokens=100, tools=[READ_TOOL],
                                        messages=[{"role": "user", "content": "go again"}]) as events:
                streamed = events.get_final_message()
        chat = openai.OpenAI(base_url=f"{served.url}/v1", api_key="sk-test", max_retries=0).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "go, chat"}], tools=[chat_tool])
        entries = served.entries()
    for answer in (whole, streamed):
        assert answer.stop_reason == "end_turn"
        assert [b.text for b in answer.content if b.type == "text"] == ["the answer, without recall"]
    assert chat.choices[0].finish_reason == "stop" and not chat.choices[0].message.tool_calls
    assert chat.choices[0].message.content == "the answer, without recall"
    assert len(fake.requests) == 3 * (MAX_ROUNDS + 1)
    assert [e["recall_calls"] for e in entries] == [MAX_ROUNDS] * 3
    offered = [RECALL_TOOL in json.dumps(r.body.get("tools")) for r in fake.requests]
    assert offered == ([True] * MAX_ROUNDS + [False]) * 3
