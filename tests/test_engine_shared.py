"""The engine's invariants on every shared transcript under every preset, at every model call the
real agent made: valid for OpenAI and Anthropic, within the budget, prefix changes only at events
that declare them, the same bytes when prepared twice or reopened, and nothing lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import TRANSCRIPTS, shared_path
from ctxwin import policies
from ctxwin.engine import ContextEngine
from ctxwin.evaluation.replay import iter_replay
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.messages.pairing import validate
from ctxwin.pipeline.validate import IncrementalValidator
from ctxwin.store.blobs import FileBlobStore
from ctxwin.transcripts import load_transcript

PRESETS = policies.names()


def transcript_files() -> list[str]:
    if not TRANSCRIPTS.exists():
        return ["claude-code/short.jsonl"]  # shared_path skips (or fails in CI) with the reason
    files = sorted(TRANSCRIPTS.glob("*/*.jsonl")) + sorted(TRANSCRIPTS.glob("*/*.traj"))
    return [str(p.relative_to(TRANSCRIPTS)) for p in files if "letta-filesystem" not in str(p)]


@pytest.mark.filterwarnings("ignore::ctxwin.tokens.UnknownModelWarning")  # SWE-agent's "replay" model
@pytest.mark.parametrize("name", transcript_files())
@pytest.mark.parametrize("policy", PRESETS)
def test_every_call_of_every_session_under_every_preset(name: str, policy: str, tmp_path: Path) -> None:
    path = shared_path(*name.split("/"))
    transcript = load_transcript(path)
    if not any(m.role == "assistant" for m in transcript.messages):
        pytest.skip(f"{name} has no model calls")
    blobs = FileBlobStore(tmp_path / "blobs")
    previous: list[str] | None = None
    engine = None
    for _, prepared, engine in iter_replay(transcript, policy, blobs=blobs):
        messages = prepared.messages
        assert validate(messages, "anthropic") == []
        assert validate(messages, "openai_chat") == []
        if not engine.policy.unlimited_window:
            assert prepared.tokens <= prepared.budget
        keys = [m.content_key for m in messages]
        if previous is not None and keys[: len(previous)] != previous:
            assert any(e.breaks_prefix for e in prepared.events), [e.to_dict() for e in prepared.events]
        previous = keys
    assert engine is not None
    final = json.dumps(engine.prepare().to_anthropic(), sort_keys=True)
    assert json.dumps(engine.prepare().to_anthropic(), sort_keys=True) == final
    reopened = ContextEngine(engine.session, model=engine.model, policy=policy, window=engine.window,
                             clock=engine.clock)  # cache-TTL pruning depends on the time
    assert json.dumps(reopened.prepare().to_anthropic(), sort_keys=True) == final
    # Nothing lost: every tool output not shown verbatim comes back byte for byte from its ref.
    shown = "\n".join(m.text + "\n".join(r.text for r in m.tool_results) for m in engine.prepare().messages)
    for entry in engine.session.path():
        if entry.kind == "message":
            for result in Message.from_dict(entry.payload).tool_results:
                if result.text and result.text not in shown:
                    assert engine.recall(f"entry:{entry.id}#{result.call_id}") == result.text


# --------------------------------------------------------------------------------------------------
# The incremental validator answers exactly like the full pass


def _message(kind: int, n: int) -> Message:
    if kind == 0:
        return Message("user", (Text(f"u{n}"),))
    if kind == 1:
        return Message("assistant", (Text(f"a{n}"), ToolCall(f"c{n % 7}", "t", {})))
    if kind == 2:
        return Message("tool", (ToolResult(f"c{n % 7}", (Text(f"r{n}"),)),))
    return Message("assistant", (Text(f"a{n}"),))


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20)),
                                                        max_size=6)), min_size=1, max_size=12))
def test_incremental_validation_equals_full_validation(steps) -> None:
    validator = IncrementalValidator("anthropic")
    view: list[Message] = []
    for restart, additions in steps:
        if restart and view:
            view = view[: len(view) // 2]  # a prefix-breaking edit
        view = view + [_message(k, n) for k, n in additions]
        keys = [m.content_key for m in view]
        full = validate(view, "anthropic")
        incremental = validator.check(view, keys)
        assert bool(full) == bool(incremental)
        assert {(p.kind, p.call_id) for p in full} <= {(p.kind, p.call_id) for p in incremental} or not full
