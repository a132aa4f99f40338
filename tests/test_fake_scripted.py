"""The fake provider's scripted model over real HTTP: tool calls and text from a script or a function of
the request, faults at chosen turns with each API's real status, body and retry headers, streaming that
the official SDKs' own stream parsers accept, prefix-cache accounting in streamed usage, the built-in
demo model driving real tools, and `python -m ctxwin.testing`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxwin.testing import (
    Call,
    FakeProvider,
    ModelRequest,
    Reply,
    Script,
    demo_model,
    faults_at,
    overflow,
    overloaded,
    rate_limited,
    server_error,
)
from ctxwin.testing.fake_provider import CHAT, MESSAGES, RESPONSES

WINDOW, MAX_OUTPUT = 20_000, 2_000
OPENAI_HEADERS = {"authorization": "Bearer test-key"}
ANTHROPIC_HEADERS = {"x-api-key": "test-key", "anthropic-version": "2023-06-01"}
PATHS = {"anthropic": MESSAGES, "chat": CHAT, "responses": RESPONSES}
READ = Call("read", {"path": "src/app.py", "offset": 1})


@pytest.fixture(scope="module")
def server() -> Iterator[FakeProvider]:
    with FakeProvider(context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeProvider) -> Iterator[FakeProvider]:
    server.reset()
    yield server
    server.model = None


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as client:
        yield client


def sdk(name: str) -> Any:
    return pytest.importorskip(name, reason=f"the {name} SDK is a test-only dependency: pip install {name}")


@pytest.fixture(scope="module")
def openai_client(server: FakeProvider) -> Any:
    return sdk("openai").OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=0)


@pytest.fixture(scope="module")
def anthropic_client(server: FakeProvider) -> Any:
    return sdk("anthropic").Anthropic(base_url=server.anthropic_base_url, api_key="sk-test", max_retries=0)


def post(fake: FakeProvider, http: httpx.Client, api: str, text: str = "hi", **extra: Any) -> httpx.Response:
    if api == "anthropic":
        body: dict[str, Any] = {"model": "claude-test", "max_tokens": 200,
                                "messages": [{"role": "user", "content": text}]}
        headers = ANTHROPIC_HEADERS
    elif api == "chat":
        body, headers = {"model": "gpt-test", "messages": [{"role": "user", "content": text}]}, OPENAI_HEADERS
    else:
        body, headers = {"model": "gpt-test", "input": text}, OPENAI_HEADERS
    return http.post(fake.base_url + PATHS[api], json={**body, **extra}, headers=headers)


# --------------------------------------------------------------------------------------------------
# Scripts and functions of the request


def test_a_script_answers_in_order_then_falls_back_to_the_default(fake: FakeProvider, http: httpx.Client) -> None:
    script = Script([Reply("first", (READ,)), "second"])
    fake.model = script
    anthropic = post(fake, http, "anthropic").json()
    assert anthropic["stop_reason"] == "tool_use"
    assert anthropic["content"][0] == {"type": "text", "text": "first"}
    use = anthropic["content"][1]
    assert use["type"] == "tool_use" and use["name"] == "read" and use["input"] == READ.arguments
    assert use["id"].startswith("toolu_")
    assert post(fake, http, "chat").json()["choices"][0]["message"]["content"] == "second"
    assert script.remaining == 0
    assert post(fake, http, "responses").json()["output"][0]["content"][0]["text"].startswith("OK.")


def test_tool_calls_in_each_apis_shape(fake: FakeProvider, http: httpx.Client) -> None:
    fake.model = lambda request: Reply(calls=(READ, Call("grep", {"pattern": "def"}, id="call_given")))
    chat = post(fake, http, "chat").json()["choices"][0]
    assert chat["finish_reason"] == "tool_calls" and chat["message"]["content"] is None
    calls = chat["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["read", "grep"] and calls[1]["id"] == "call_given"
    assert json.loads(calls[0]["function"]["arguments"]) == READ.arguments
    output = post(fake, http, "responses").json()["output"]
    assert [item["type"] for item in output] == ["function_call", "function_call"]
    assert output[1]["call_id"] == "call_given" and json.loads(output[0]["arguments"]) == READ.arguments


def test_the_model_sees_the_request(fake: FakeProvider, http: httpx.Client) -> None:
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> Reply:
        seen.append(request)
        return Reply(f"call {request.call}: {request.last_user_text}; tools {','.join(request.tools)}")

    fake.model = model
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
    answer = post(fake, http, "chat", "look at this", tools=tools).json()
    assert answer["choices"][0]["message"]["content"] == "call 0: look at this; tools read"
    post(fake, http, "anthropic", "again")
    assert [r.call for r in seen] == [0, 1] and [r.api for r in seen] == ["chat", "anthropic"]
    assert seen[0].input_tokens == fake.requests[0].input_tokens and seen[0].stream is False


def test_the_model_is_not_asked_for_a_request_over_the_window(fake: FakeProvider, http: httpx.Client) -> None:
    script = Script(["never"])
    fake.model = script
    response = post(fake, http, "anthropic", "x " * (4 * WINDOW))
    assert response.status_code == 400 and "prompt is too long" in response.json()["error"]["message"]
    assert script.remaining == 1


# --------------------------------------------------------------------------------------------------
# Faults with the real statuses, bodies and headers


@pytest.mark.parametrize(("api", "fault", "status", "kind"), [
    ("anthropic", rate_limited(2), 429, "rate_limit_error"),
    ("anthropic", server_error(), 500, "api_error"),
    ("anthropic", overloaded(), 529, "overloaded_error"),
    ("chat", rate_limited(2), 429, "requests"),
    ("chat", server_error(), 500, "server_error"),
    ("responses", overloaded(), 503, "server_error"),
])
def test_faults_have_the_real_status_and_body(fake: FakeProvider, http: httpx.Client, api: str, fault: Any,
                                              status: int, kind: str) -> None:
    fake.model = Script([fault, "after"])
    failed = post(fake, http, api)
    assert failed.status_code == status and failed.json()["error"]["type"] == kind
    if fault.kind == "rate_limit":
        assert failed.headers["retry-after"] == "2"
    if api == "anthropic":
        assert failed.json()["type"] == "error" and failed.headers["request-id"]
    assert post(fake, http, api).status_code == 200


def test_retry_after_ms_and_faults_at_chosen_calls(fake: FakeProvider, http: httpx.Client) -> None:
    fake.model = faults_at(lambda r: Reply("fine"), {1: rate_limited(None, retry_after_ms=250), 2: overflow()})
    assert post(fake, http, "chat").status_code == 200
    limited = post(fake, http, "chat")
    assert limited.status_code == 429 and limited.headers["retry-after-ms"] == "250"
    assert "retry-after" not in limited.headers
    over = post(fake, http, "chat")
    assert over.status_code == 400 and over.json()["error"]["code"] == "context_length_exceeded"
    assert post(fake, http, "chat").json()["choices"][0]["message"]["content"] == "fine"


def test_sdk_exceptions_for_scripted_faults(fake: FakeProvider, openai_client: Any, anthropic_client: Any) -> None:
    openai, anthropic = sdk("openai"), sdk("anthropic")
    fake.model = Script([rate_limited(1), overloaded()])
    with pytest.raises(openai.RateLimitError):
        openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(anthropic.APIStatusError) as caught:
        anthropic_client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 529


# --------------------------------------------------------------------------------------------------
# Streaming, read by the official SDKs' own stream parsers


def test_anthropic_stream_through_the_sdk(fake: FakeProvider, anthropic_client: Any) -> None:
    reply = Reply("Let me read the file " * 3, (READ,))
    fake.model = lambda r: reply
    plain = anthropic_client.messages.create(model="m", max_tokens=200, messages=[{"role": "user", "content": "go"}])
    with anthropic_client.messages.stream(model="m", max_tokens=200,
                                          messages=[{"role": "user", "content": "go"}]) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop", "message_delta"} <= set(kinds)
    assert final.content[0].text == reply.text and final.content[1].input == READ.arguments
    assert final.stop_reason == "tool_use" and final.content[1].name == "read"
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == \
        plain.usage.input_tokens + plain.usage.cache_read_input_tokens


def test_chat_stream_through_the_sdk_with_usage(fake: FakeProvider, openai_client: Any) -> None:
    fake.model = lambda r: Reply("Reading two files now.", (READ, Call("grep", {"pattern": "x" * 60})))
    chunks = list(openai_client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "go"}], stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == fake.requests[-1].input_tokens
    assert all(c.usage is None for c in chunks[:-1])
    with openai_client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "go"}]) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "Reading two files now." and final.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in message.tool_calls] == ["read", "grep"]
    assert json.loads(message.tool_calls[1].function.arguments) == {"pattern": "x" * 60}


def test_responses_stream_through_the_sdk(fake: FakeProvider, openai_client: Any) -> None:
    fake.model = lambda r: Reply("Looking.", (READ,))
    with openai_client.responses.stream(model="m", input="go") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert {"response.output_item.added", "response.output_text.delta",
            "response.function_call_arguments.delta"} <= set(kinds)
    assert final.output_text == "Looking."
    call = final.output[1]
    assert call.type == "function_call" and call.name == "read" and json.loads(call.arguments) == READ.arguments
    assert final.usage.input_tokens == fake.requests[-1].input_tokens


def test_a_mid_stream_fault_reaches_the_sdks(fake: FakeProvider, openai_client: Any, anthropic_client: Any) -> None:
    anthropic, openai = sdk("anthropic"), sdk("openai")
    fake.model = lambda r: overloaded(mid_stream=True)
    with pytest.raises(anthropic.APIStatusError), anthropic_client.messages.stream(
            model="m", max_tokens=20, messages=[{"role": "user", "content": "go"}]) as stream:
        for _ in stream:
            pass
    with pytest.raises(openai.APIError):
        for _ in openai_client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}],
                                                        stream=True):
            pass


def test_anthropic_cache_reads_at_breakpoints_or_at_every_boundary_when_auto(fake: FakeProvider,
                                                                            http: httpx.Client) -> None:
    """A fork's first request shares the parent's prefix up to the cloned assistant message: the cache
    read is exactly that prefix. Without breakpoints Anthropic reads nothing, as the real API."""
    shared = [{"role": "user", "content": "context " * 1500}, {"role": "assistant", "content": "noted"}]
    parent = [*shared, {"role": "user", "content": "parent's own question"}]
    child = [*shared, {"role": "user", "content": "the child's directive"}]

    def send(messages: list[dict[str, Any]]) -> dict[str, Any]:
        return http.post(fake.base_url + MESSAGES, headers=ANTHROPIC_HEADERS, json={
            "model": "claude-test", "max_tokens": 20, "messages": messages}).json()["usage"]

    send(parent)
    assert send(child)["cache_read_input_tokens"] == 0
    fake.anthropic_auto_cache = True
    try:
        first = send(parent)
        assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 1_024
        again = send(child)
        assert again["cache_read_input_tokens"] > 1_024
        assert again["cache_read_input_tokens"] + again["cache_creation_input_tokens"] + again["input_tokens"] == \
            fake.requests[-1].input_tokens
    finally:
        fake.anthropic_auto_cache = False


def test_streamed_usage_proves_a_prefix_cache_hit(fake: FakeProvider, openai_client: Any) -> None:
    history = [{"role": "system", "content": "rules " * 900}, {"role": "user", "content": "first question"}]
    openai_client.chat.completions.create(model="m", messages=history)
    longer = [*history, {"role": "assistant", "content": "an answer"}, {"role": "user", "content": "next"}]
    chunks = list(openai_client.chat.completions.create(model="m", messages=longer, stream=True,
                                                        stream_options={"include_usage": True}))
    cached = chunks[-1].usage.prompt_tokens_details.cached_tokens
    assert cached >= 1_024 and cached <= fake.requests[0].input_tokens


# --------------------------------------------------------------------------------------------------
# The demo model, driving real tools


def test_the_demo_model_runs_a_long_task_over_a_real_workspace(fake: FakeProvider, http: httpx.Client,
                                                               tmp_path: Path) -> None:
    from ctxwin.messages import Message
    from ctxwin.messages.providers import from_openai_chat, to_openai_chat
    from ctxwin.tools.registry import run_tool, schemas
    from ctxwin.tools.workspace import Workspace

    for name in ("app.py", "util.py"):
        (tmp_path / "src").mkdir(exist_ok=True)
        (tmp_path / "src" / name).write_text("".join(f"def f{i}():\n    return {i}\n" for i in range(50)))
    ws = Workspace(roots=[tmp_path], allow_shell=True)
    tools = schemas("openai", ws=ws)
    turns = 24
    fake.model = demo_model(turns)
    messages = [{"role": "user", "content": "Survey the code and keep notes."}]
    used: list[str] = []
    for _ in range(turns + 2):
        answer = http.post(fake.base_url + CHAT, headers=OPENAI_HEADERS,
                           json={"model": "gpt-test", "messages": messages, "tools": tools}).json()
        reply = from_openai_chat([answer["choices"][0]["message"]])[0]
        results = [Message("tool", (run_tool(c.name, c.arguments, ws).to_tool_result(c.id, c.name),))
                   for c in reply.tool_calls]
        used += [c.name for c in reply.tool_calls]
        messages += to_openai_chat([reply, *results])
        if not reply.tool_calls:
            break
    assert len(used) == turns and "finished after 24 model calls" in reply.text
    assert {"ls", "find", "read", "grep", "shell"} <= set(used)
    notes = (tmp_path / "NOTES.md").read_text()  # appended to, then edited in place, through the shell
    assert notes.count("- step ") == 3 and notes.count("checked at src/") == 2 and "looked at src/" in notes


def test_the_demo_model_continues_from_its_latest_call_after_the_history_is_cut(fake: FakeProvider,
                                                                                http: httpx.Client) -> None:
    fake.model = demo_model(10)
    cut = [{"role": "user", "content": "[summary of earlier work]"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_demo_t0_s6_0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
           {"role": "tool", "tool_call_id": "call_demo_t0_s6_0", "content": "src/app.py"}]
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("read", "grep", "shell")]
    answer = http.post(fake.base_url + CHAT, headers=OPENAI_HEADERS,
                       json={"model": "gpt-test", "messages": cut, "tools": tools}).json()
    assert answer["choices"][0]["message"]["tool_calls"][0]["id"] == "call_demo_t0_s7_0"
    cut.append({"role": "user", "content": "a new task"})
    answer = http.post(fake.base_url + CHAT, headers=OPENAI_HEADERS,
                       json={"model": "gpt-test", "messages": cut, "tools": tools}).json()
    assert answer["choices"][0]["message"]["tool_calls"][0]["id"] == "call_demo_t1_s0_0"


def test_python_m_ctxwin_testing_serves_the_demo(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parents[1] / "src"
    process = subprocess.Popen([sys.executable, "-m", "ctxwin.testing", "--port", "0", "--window", "50000",
                                "--script", "demo"], stdout=subprocess.PIPE, text=True,
                               env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    try:
        line = process.stdout.readline()
        url = line.split("listening on ", 1)[1].split(" ", 1)[0]
        tools = [{"name": "ls", "input_schema": {"type": "object"}}]
        answer = httpx.post(url + MESSAGES, headers=ANTHROPIC_HEADERS, timeout=10, json={
            "model": "claude-test", "max_tokens": 100, "tools": tools,
            "messages": [{"role": "user", "content": "go"}]}).json()
        assert answer["content"][1] == {"type": "tool_use", "id": "call_demo_t0_s0_0", "name": "ls", "input": {}}
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0


def test_the_demo_model_answers_service_turns_without_losing_its_place(fake: FakeProvider,
                                                                      http: httpx.Client) -> None:
    """A memory flush or checkpoint request in the middle of the task gets text, and the task goes on
    from where it was; a summarizer's request (no tools) gets the fake's deterministic summary."""
    fake.model = demo_model(10)
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("read", "ls", "shell")]
    history = [{"role": "user", "content": "Survey the code."},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_demo_t0_s3_0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "call_demo_t0_s3_0", "content": "src/app.py"},
               {"role": "user", "content": "Before the history is compacted, write what you must keep to memory."}]

    def ask(messages: list[dict[str, Any]], offered: Any = tools) -> dict[str, Any]:
        body = {"model": "gpt-test", "messages": messages, **({"tools": offered} if offered else {})}
        return http.post(fake.base_url + CHAT, headers=OPENAI_HEADERS, json=body).json()["choices"][0]["message"]

    flush = ask(history)
    assert flush.get("tool_calls") is None and flush["content"]
    history += [{"role": "assistant", "content": flush["content"]}]
    assert ask(history)["tool_calls"][0]["id"] == "call_demo_t0_s4_0"
    summary = ask([{"role": "user", "content": "Summarize this conversation: reading src/app.py"}], offered=None)
    assert summary["content"].startswith("## Summary") and "src/app.py" in summary["content"]


def test_the_demo_model_writes_the_checkpoint_the_engine_asks_for_and_carries_on(fake: FakeProvider,
                                                                                http: httpx.Client) -> None:
    from ctxwin.compaction.compact import CHECKPOINT_REQUEST

    fake.model = demo_model(10)
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in ("read", "ls", "shell")]
    history = [{"role": "user", "content": "Survey the code."},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_demo_t0_s3_0", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "call_demo_t0_s3_0", "content": "src/app.py"},
               {"role": "user", "content": CHECKPOINT_REQUEST.format(tokens=90_000)}]
    answer = http.post(fake.base_url + CHAT, headers=OPENAI_HEADERS,
                       json={"model": "gpt-test", "messages": history, "tools": tools}).json()["choices"][0]
    content = answer["message"]["content"]
    assert content.startswith("<checkpoint>") and "</checkpoint>" in content and "src/app.py" in content
    assert answer["message"]["tool_calls"][0]["id"] == "call_demo_t0_s4_0"
