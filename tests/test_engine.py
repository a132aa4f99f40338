"""The engine's invariants, as properties over random sessions and on every preset:

1. every prepared request is valid for OpenAI and Anthropic;
2. it fits window - reserve (by the engine's count);
3. preparing twice gives identical bytes, and so does a fresh engine on the same log;
4. between two consecutive calls the earlier bytes change only at events that say they break the prefix;
5. everything removed from the view can be reached again (entry id or blob handle, byte-identical).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin import policies
from ctxwin.engine import ContextEngine
from ctxwin.messages import Image, Message, Text, ToolCall, ToolResult
from ctxwin.messages.pairing import validate
from ctxwin.pipeline.fit import ContextBudgetError
from ctxwin.store.blobs import FileBlobStore
from ctxwin.store.in_memory import MemorySessionLog

PRESETS = [n for n in policies.names() if n != "raw"]

# --------------------------------------------------------------------------------------------------
# Random sessions

words = st.sampled_from(["build", "error", "src/app.py", "def", "{", "}", "日本語", "🙂", "42", "failed",
                         "Traceback", "0xdeadbeef", "https://example.com/x", "\n", "  ", "total"])
texts = st.lists(words, min_size=1, max_size=40).map(" ".join)


@st.composite
def outputs(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["small", "small", "medium", "huge", "lines"]))
    base = draw(texts)
    if kind == "small":
        return base
    if kind == "medium":
        return (base + "\n") * draw(st.integers(20, 300))
    if kind == "lines":
        return "".join(f"{i}: {base}\n" for i in range(draw(st.integers(100, 2000))))
    return (base + "\n") * draw(st.integers(2_000, 6_000))


@dataclass
class Round:
    calls: list[tuple[str, str, bool, bool]]  # (tool, output, is_error, with image)


@st.composite
def sessions(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    call_no = 0
    for turn in range(draw(st.integers(1, 6))):
        messages.append(Message("user", (Text(f"turn {turn}: " + draw(texts)),)))
        for _ in range(draw(st.integers(0, 4))):
            calls = []
            results = []
            for _ in range(draw(st.integers(1, 3))):
                call_no += 1
                call_id = f"call_{call_no}"
                tool = draw(st.sampled_from(["read", "bash", "grep"]))
                args = {"path": draw(st.sampled_from(["a.py", "b.py", "c.md"]))} if tool == "read" else \
                    {"command": draw(texts)}
                calls.append(ToolCall(call_id, tool, args))
                parts: tuple = (Text(draw(outputs())),)
                if draw(st.integers(0, 9)) == 0:
                    parts += (Image("image/png", "iVBORw0KGgo=", width=64, height=64),)
                results.append(ToolResult(call_id, parts, draw(st.booleans()), tool))
            thought = draw(st.one_of(st.just(""), texts))
            messages.append(Message("assistant", ((Text(thought),) if thought else ()) + tuple(calls)))
            if draw(st.booleans()):
                messages.append(Message("tool", tuple(results)))
            else:
                messages.extend(Message("tool", (r,)) for r in results)
        messages.append(Message("assistant", (Text("done with turn " + draw(texts)),)))
    return messages


def payload(engine: ContextEngine) -> str:
    prepared = engine.prepare()
    return json.dumps([prepared.to_anthropic(), prepared.to_openai_chat()], sort_keys=True)


def check_call(engine: ContextEngine, previous: list[str] | None) -> list[str]:
    prepared = engine.prepare()
    messages = prepared.messages
    for provider in ("anthropic", "openai_chat", "openai_responses"):
        sent = prepared._for(provider)  # what the converter for that provider sends
        assert validate(sent, provider) == [], (provider, validate(sent, provider))
    assert prepared.tokens <= prepared.budget, (prepared.tokens, prepared.budget)
    keys = [m.content_key for m in messages]
    if previous is not None and keys[: len(previous)] != previous:
        assert any(e.breaks_prefix for e in prepared.events), [e.to_dict() for e in prepared.events]
    # Preparing again with nothing new gives the same bytes and no events.
    again = engine.prepare()
    assert [m.content_key for m in again.messages] == keys
    assert not again.events
    return keys


def check_recoverable(engine: ContextEngine) -> None:
    view = engine.prepare()
    visible = "\n".join(
        m.text + "\n" + "\n".join(r.text for r in m.tool_results) for m in view.messages)
    compaction_covered: set[str] = set()
    for entry in engine.session.path():
        if entry.kind == "compaction":
            compaction_covered.update(entry.payload["covered_ids"])
    for entry in engine.session.path():
        if entry.kind != "message":
            continue
        message = Message.from_dict(entry.payload)
        for result in message.tool_results:
            if result.text and result.text not in visible:
                assert engine.recall(f"entry:{entry.id}#{result.call_id}") == result.text
        if message.role in ("user", "assistant") and message.text and message.text not in visible:
            assert entry.id in compaction_covered or engine.recall(f"entry:{entry.id}") == message.text
    for word in visible.split():
        if word.startswith("blob:"):
            handle = word.strip(".,;)(\"'")
            assert engine.recall(handle)  # every handle shown resolves


def run_session(messages: list[Message], policy: str, window: int, tmp_path) -> ContextEngine:
    blobs = FileBlobStore(tmp_path / "blobs")
    session = MemorySessionLog(blobs=blobs)
    engine = ContextEngine(session, model="gpt-4o", policy=policy, window=window, max_output=1_000)
    previous = None
    for message in messages:
        if message.role == "assistant":
            previous = check_call(engine, previous)
        engine.append(message)
    check_call(engine, previous)
    return engine


@pytest.mark.parametrize("policy", PRESETS)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(messages=sessions(), window=st.sampled_from([6_000, 16_000, 60_000]))
def test_invariants_on_random_sessions(policy: str, messages: list[Message], window: int, tmp_path) -> None:
    engine = run_session(messages, policy, window, tmp_path)
    check_recoverable(engine)
    # A fresh engine on the same log sends exactly the same bytes.
    reopened = ContextEngine(engine.session, model="gpt-4o", policy=policy, window=window, max_output=1_000)
    assert payload(reopened) == payload(engine)


def test_system_prompt_over_window_is_one_typed_error() -> None:
    engine = ContextEngine(model="gpt-4o", policy="ctxwin", window=4_000, max_output=500,
                           system="You are a careful assistant. " * 2_000)
    engine.append(Message("user", (Text("hello"),)))
    with pytest.raises(ContextBudgetError, match="system prompt"):
        engine.prepare()
    with pytest.raises(ContextBudgetError):  # and again: no loop, no state corrupted
        engine.prepare()


def test_raw_policy_changes_nothing() -> None:
    engine = ContextEngine(model="gpt-4o", policy="raw")
    messages = [Message("user", (Text("x" * 100_000),)), Message("assistant", (Text("ok"),))]
    for m in messages:
        engine.append(m)
    prepared = engine.prepare()
    assert [m.blocks for m in prepared.messages] == [m.blocks for m in messages]
    assert not prepared.events


def test_provider_dicts_are_accepted() -> None:
    engine = ContextEngine(model="gpt-4o", policy="ctxwin")
    engine.append({"role": "user", "content": "list files"})
    engine.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"path\": \".\"}"}}]})
    engine.append({"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py"})
    body = engine.prepare().to_anthropic()
    assert body["messages"][1]["content"][0]["type"] == "tool_use"
    assert body["messages"][2]["content"][0]["type"] == "tool_result"


def test_record_usage_calibrates_the_count() -> None:
    engine = ContextEngine(model="claude-sonnet-4-5", policy="ctxwin")
    engine.append(Message("user", (Text("some words to count " * 500),)))
    first = engine.prepare()
    for _ in range(5):
        engine.record_usage({"input_tokens": int(first.raw_tokens * 1.25), "cache_read_input_tokens": 0})
    assert abs(engine.prepare().tokens - first.raw_tokens * 1.25) <= first.raw_tokens * 0.05
    # Calibration persists with the session.
    reopened = ContextEngine(engine.session, model="claude-sonnet-4-5", policy="ctxwin")
    assert reopened.calibrator.factor == pytest.approx(engine.calibrator.factor)


def test_pin_survives_compaction(tmp_path) -> None:
    engine = ContextEngine(model="gpt-4o", policy="pi", window=30_000, max_output=1_000)
    ids = engine.append(Message("user", (Text("The deploy key is K-7781; never lose it."),)))
    engine.pin(ids[0])
    for n in range(40):
        engine.append(Message("assistant", (Text(f"step {n}"), ToolCall(f"c{n}", "bash", {"command": f"ls {n}"}))))
        engine.append(Message("tool", (ToolResult(f"c{n}", (Text(f"file{n}\n" * 300),), name="bash"),)))
        engine.prepare()
    view = engine.prepare()
    assert any(e.entry_id == ids[0] and not e.synthetic for e in view.items)
    assert any(entry.kind == "compaction" for entry in engine.session.path())


# --------------------------------------------------------------------------------------------------
# Edge cases a user can hit


def test_append_refuses_plain_text_with_a_hint() -> None:
    from ctxwin.errors import InputError

    engine = ContextEngine(model="gpt-4o", policy="ctxwin")
    with pytest.raises(InputError, match="takes messages"):
        engine.append("hello")


def test_pinned_call_keeps_results_that_arrive_after_the_pin() -> None:
    engine = ContextEngine(model="gpt-4o", policy="pi", window=30_000, max_output=1_000)
    engine.append(Message("user", (Text("start"),)))
    [call_entry] = engine.append(Message("assistant", (ToolCall("keep", "bash", {"command": "deploy --id D-77"}),)))
    engine.pin(call_entry)
    engine.append(Message("tool", (ToolResult("keep", (Text("deployed D-77 to prod-eu-3"),), name="bash"),)))
    for n in range(60):
        engine.append(Message("assistant", (ToolCall(f"c{n}", "bash", {"command": f"ls {n}"}),)))
        engine.append(Message("tool", (ToolResult(f"c{n}", (Text(f"file{n}\n" * 300),), name="bash"),)))
        prepared = engine.prepare()
        assert prepared.tokens <= prepared.budget
    assert any(e.kind == "compaction" for e in engine.session.path())
    shown = "\n".join(r.text for m in engine.prepare().messages for r in m.tool_results)
    assert "deployed D-77 to prod-eu-3" in shown  # the real result, not a synthetic error
    assert "SYNTHETIC" not in shown and "missing from the conversation" not in shown


def test_fit_cuts_a_giant_tool_call_argument() -> None:
    engine = ContextEngine(model="gpt-4o", policy="truncate", window=8_000, max_output=1_000)
    engine.append(Message("user", (Text("write the file"),)))
    big = ToolCall("w", "write", {"path": "big.txt", "content": "lorem ipsum " * 8_000})
    engine.append(Message("assistant", (big,)))
    engine.append(Message("tool", (ToolResult("w", (Text("written"),), name="write"),)))
    prepared = engine.prepare()
    assert prepared.tokens <= prepared.budget
    call = prepared.messages[1].tool_calls[0]
    assert call.arguments["path"] == "big.txt" and "cut to fit the context window" in call.arguments["content"]
    assert json.loads(engine.recall(call.arguments["content"].split("Full text: ")[1].split("]")[0]))[
        "content"] == "lorem ipsum " * 8_000


def test_health_is_fresh_after_append() -> None:
    engine = ContextEngine(model="gpt-4o", policy="raw")
    engine.append(Message("user", (Text("short"),)))
    engine.prepare()
    engine.append(Message("user", (Text("word " * 40_000),)))
    assert "Token usage: 4" in engine.health()  # ~40K, not the stale few tokens


def test_recover_from_a_window_smaller_than_the_reserve() -> None:
    engine = ContextEngine(model="gpt-4o", policy="pi", window=128_000)
    engine.append(Message("user", (Text("hello " * 2_000),)))
    engine.prepare()
    prepared = engine.recover("This model's maximum context length is 8192 tokens. However, your messages "
                              "resulted in 9000 tokens. Please reduce the length of the messages.")
    assert engine.window == 8_192 and engine.reserve < engine.window // 2
    assert prepared.tokens <= prepared.budget > 0


def test_recall_refuses_negative_offsets() -> None:
    from ctxwin.errors import InputError

    engine = ContextEngine(model="gpt-4o", policy="raw")
    [entry] = engine.append(Message("user", (Text("abcdef"),)))
    assert engine.recall(f"entry:{entry}", offset=2, limit=2) == "cd"
    with pytest.raises(InputError):
        engine.recall(f"entry:{entry}", offset=-2)


def test_recall_of_a_blob_that_is_not_utf8_is_a_typed_error_and_its_bytes_stay(tmp_path) -> None:
    from ctxwin.errors import BlobNotTextError

    blobs = FileBlobStore(tmp_path / "blobs")
    engine = ContextEngine(MemorySessionLog(blobs=blobs), model="gpt-4o", policy="raw")
    latin1 = ("caf\xe9 latin-1 log line\n" * 50).encode("latin-1")
    handle = blobs.put(latin1).handle
    with pytest.raises(BlobNotTextError, match="not UTF-8 text") as raised:
        engine.recall(handle)
    assert "read_spilled" in (raised.value.hint or "") and "at 3" in raised.value.message
    assert blobs.get(handle) == latin1  # nothing lost: the exact bytes are still there
    text = "tabs\tand émoji 🚀 and a lone surrogate \ud800 survive"
    surrogate = blobs.put(text.encode("utf-8", "surrogatepass")).handle
    assert engine.recall(surrogate) == text
