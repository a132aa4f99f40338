"""Replay fidelity of the readers (issue 12): each transcript reads as what the harness really sent.
Small fixtures written inline for each item."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_path
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.messages.pairing import PROVIDERS, TRAILING_USER_TEXT, repair, validate
from ctxwin.transcripts import DamagedInputWarning, load_transcript


def _jsonl(path: Path, records: list[dict[str, Any]] | list[str]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def _load(path: Path, format: str | None = None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedInputWarning)
        return load_transcript(path, format)


# --- Pi: errored and aborted answers are not sent again -----------------------------------------------


def _pi_entry(n: int, parent: int | None, message: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "id": f"e{n}", "parentId": f"e{parent}" if parent is not None else None,
            "timestamp": f"2026-01-10T09:00:{n:02d}.000Z", "message": message}


def _pi_answer(text: str, stop: str, calls: tuple[str, ...] = (), input_tokens: int = 100) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    content += [{"type": "toolCall", "id": c, "name": "bash", "arguments": {"command": "ls"}} for c in calls]
    return {"role": "assistant", "content": content, "stopReason": stop, "model": "claude-sonnet-4-5",
            "usage": {"input": input_tokens, "output": 10, "cacheRead": 0, "cacheWrite": 0},
            **({"errorMessage": "Request was aborted."} if stop == "aborted" else {})}


def test_pi_errored_and_aborted_answers_are_dropped_as_pi_drops_them(tmp_path: Path) -> None:
    header = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-10T09:00:00.000Z", "cwd": "/w"}
    path = _jsonl(tmp_path / "pi.jsonl", [
        header,
        _pi_entry(1, None, {"role": "user", "content": "list the files"}),
        _pi_entry(2, 1, _pi_answer("let me", "aborted", ("c1",), input_tokens=70)),
        _pi_entry(3, 2, {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "content": "a b"}),
        _pi_entry(4, 3, {"role": "user", "content": "go on"}),
        _pi_entry(5, 4, _pi_answer("", "error", input_tokens=0)),
        _pi_entry(6, 5, {"role": "user", "content": "again"}),
        _pi_entry(7, 6, _pi_answer("done", "stop")),
    ])
    transcript = _load(path)
    assert [(m.role, m.text) for m in transcript.messages] == [("user", "list the files"), ("user", "go on"),
                                                               ("user", "again"), ("assistant", "done")]
    assert transcript.skipped["unsent_answer:aborted"] == 1 and transcript.skipped["unsent_answer:error"] == 1
    assert transcript.skipped["unsent_result"] == 1
    assert transcript.metadata["unsent_usage"] == {"calls": 2, "input": 70, "output": 20, "cacheRead": 0,
                                                   "cacheWrite": 0}
    assert [u.input_tokens for u in transcript.usage] == [100]  # usage stays on the answer that was kept
    assert not transcript.warnings  # what Pi does, not damage


def test_the_real_pi_session_loses_its_unsent_answers() -> None:
    transcript = _load(shared_path("pi", "before-compaction.jsonl"))
    assert transcript.skipped["unsent_answer:aborted"] == 18 and transcript.skipped["unsent_answer:error"] == 1
    assert not any(m.meta.get("stop_reason") in ("error", "aborted") for m in transcript.messages)


# --- glued records are split and read -----------------------------------------------------------------


def test_a_glued_message_and_compaction_are_both_read(tmp_path: Path) -> None:
    header = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-10T09:00:00.000Z", "cwd": "/w"}
    first = _pi_entry(1, None, {"role": "user", "content": "hello"})
    answer = _pi_entry(2, 1, _pi_answer("hi", "stop"))
    compaction = {"type": "compaction", "id": "e3", "parentId": "e2", "timestamp": "2026-01-10T09:00:03.000Z",
                  "summary": "they said hello", "firstKeptEntryId": "e2", "tokensBefore": 1234}
    after = _pi_entry(4, 3, {"role": "user", "content": "next"})
    path = _jsonl(tmp_path / "glued.jsonl", [json.dumps(header), json.dumps(first),
                                             json.dumps(answer) + json.dumps(compaction), json.dumps(after)])
    transcript = _load(path)
    assert [m.text for m in transcript.messages] == ["hello", "hi", "next"]
    assert len(transcript.compactions) == 1 and transcript.compactions[0].tokens_before == 1234
    assert transcript.repaired == {"glued_json_lines": 1, "glued_json_records": 2}
    assert transcript.read_report().to_dict()["repaired"] == {"glued_json_lines": 1, "glued_json_records": 2}


def test_trailing_junk_after_a_record_keeps_the_record(tmp_path: Path) -> None:
    header = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-10T09:00:00.000Z", "cwd": "/w"}
    first = _pi_entry(1, None, {"role": "user", "content": "hello"})
    path = _jsonl(tmp_path / "junk.jsonl", [json.dumps(header), json.dumps(first) + '{"type": "mess'])
    transcript = _load(path)
    assert [m.text for m in transcript.messages] == ["hello"]
    assert transcript.damaged == {"malformed_json": 1}
    assert "1 JSON value(s) read, then not valid JSON" in transcript.warnings[0]


# --- SWE-agent thought/action trajectories ------------------------------------------------------------


def test_swe_agent_thought_action_steps_become_calls_and_results(tmp_path: Path) -> None:
    history = [
        {"role": "system", "content": "You are SWE-agent.", "agent": "primary"},
        {"role": "user", "content": "Here is a demonstration", "agent": "primary", "is_demo": True},
        {"role": "assistant", "content": "DISCUSSION\ndemo\n```\nls\n```", "thought": "demo", "action": "ls",
         "agent": "primary", "is_demo": True},
        {"role": "user", "content": "Fix the bug in foo.py", "agent": "primary", "message_type": "observation"},
        {"role": "assistant", "content": "DISCUSSION\nLet me look.\n```\nopen foo.py\n```",
         "thought": "DISCUSSION\nLet me look.\n", "action": "open foo.py\n", "agent": "primary",
         "message_type": "action"},
        {"role": "user", "content": "[File: foo.py (3 lines total)]\n1:x = 1", "agent": "primary",
         "message_type": "observation"},
        {"role": "assistant", "content": "Done.\n```\nsubmit\n```", "thought": "Done.", "action": "submit",
         "agent": "primary", "message_type": "action"},
    ]
    path = tmp_path / "run.traj"
    path.write_text(json.dumps({"history": history, "info": {"exit_status": "submitted",
                                                             "submission": "diff --git a/foo.py b/foo.py"}}))
    transcript = _load(path)
    roles = [m.role for m in transcript.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "tool", "assistant", "tool"]
    call = transcript.messages[4].tool_calls[0]
    # SWE-agent's own commands are what they are: `open` reads foo.py (the action itself is kept).
    assert (call.name, call.arguments) == ("open", {"path": "foo.py", "action": "open foo.py\n"})
    assert transcript.messages[4].text == "DISCUSSION\nLet me look."
    result = transcript.messages[5].tool_results[0]
    assert result.call_id == call.id and result.name == "open" and "1:x = 1" in result.text
    assert transcript.messages[2].text.startswith("DISCUSSION\ndemo")  # demonstrations stay as they were
    # The last action, `submit`, has no observation: it is a call all the same, answered by the patch.
    (submit,) = transcript.messages[6].tool_calls
    assert submit.name == "submit" and transcript.messages[7].tool_results[0].text == "diff --git a/foo.py b/foo.py"
    assert transcript.metadata["thought_action_calls"] == 2
    assert not validate(transcript.messages, "anthropic") and not transcript.warnings


def test_function_calling_trajectories_are_unchanged() -> None:
    transcript = _load(shared_path("swe-agent", "function_calling_simple.traj"))
    assert "thought_action_calls" not in transcript.metadata and transcript.tool_calls > 0


# --- Codex "text" content -----------------------------------------------------------------------------


def test_codex_text_content_is_kept(tmp_path: Path) -> None:
    def item(payload: dict[str, Any], second: int) -> dict[str, Any]:
        return {"timestamp": f"2026-02-03T10:00:{second:02d}.000Z", "type": "response_item", "payload": payload}

    path = _jsonl(tmp_path / "rollout-x.jsonl", [
        {"timestamp": "2026-02-03T10:00:00.000Z", "type": "session_meta", "payload": {"id": "r1", "cwd": "/w"}},
        {"timestamp": "2026-02-03T10:00:01.000Z", "type": "turn_context", "payload": {"model": "gpt-5.2-codex"}},
        item({"type": "message", "role": "user", "content": [{"type": "text", "text": "what is 2+2"}]}, 2),
        item({"type": "message", "role": "assistant", "content": [{"type": "text", "text": "4"}]}, 3),
    ])
    transcript = _load(path)
    assert [(m.role, m.text) for m in transcript.messages] == [("user", "what is 2+2"), ("assistant", "4")]
    assert "omitted" not in json.dumps([m.to_dict() for m in transcript.messages])


# --- a request that ends with an assistant message ----------------------------------------------------

ENDS_WITH_ANSWER = [Message("user", (Text("hi"),)), Message("assistant", (Text("first"),)),
                    Message("assistant", (Text("second"),))]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_request_ending_with_an_assistant_message_is_flagged_and_repaired(provider: str) -> None:
    request = ENDS_WITH_ANSWER[:2]  # the request for the second answer: it ends with the first
    problems = validate(request, provider, request=True)  # type: ignore[arg-type]
    assert [p.kind for p in problems] == ["ends_with_assistant"] and problems[0].index == 1
    result = repair(request, provider, request=True)  # type: ignore[arg-type]
    assert [c.kind for c in result.changes] == ["append_user"]
    assert result.messages[:2] == request and result.messages[-1].text == TRAILING_USER_TEXT
    assert not validate(result.messages, provider, request=True)  # type: ignore[arg-type]
    assert repair(result.messages, provider, request=True).changes == []  # type: ignore[arg-type]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_stored_history_may_end_with_an_answer(provider: str) -> None:
    assert validate(ENDS_WITH_ANSWER, provider) == []  # type: ignore[arg-type]
    assert repair(ENDS_WITH_ANSWER, provider).changes == []  # type: ignore[arg-type]


def test_a_final_call_is_missing_its_result_not_an_ending_answer() -> None:
    messages = [Message("user", (Text("hi"),)), Message("assistant", (ToolCall("c1", "ls", {}),))]
    assert [p.kind for p in validate(messages, "anthropic", request=True)] == ["missing_result"]
    repaired = repair(messages, "anthropic", request=True)
    assert [c.kind for c in repaired.changes] == ["synthetic_result"]
    assert isinstance(repaired.messages[-1].blocks[0], ToolResult)


def test_a_replayed_call_that_ends_in_an_answer_is_flagged_invalid() -> None:
    """Two assistant messages in a row in the source: the request before the second ends with the
    first, which a provider would take as a prefill to continue, not as a request for an answer."""
    from ctxwin.evaluation.replay import replay
    from ctxwin.messages import Message, Text
    from ctxwin.transcripts.model import Transcript

    transcript = Transcript(messages=[Message("user", (Text("hi"),)), Message("assistant", (Text("one"),)),
                                      Message("assistant", (Text("two"),))], format="openai")
    result = replay(transcript, "raw")
    assert [c.valid for c in result.calls] == [True, False]
