"""Reading real session files into `Transcript`s: every format, the shared real sessions, and
malformed input."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import TRANSCRIPTS, shared_path
from ctxwin.errors import InputError
from ctxwin.messages import Image, Message, Thinking, pairing
from ctxwin.transcripts import FORMATS, Transcript, detect_format, load_transcript
from ctxwin.transcripts.inspect import inspect_transcript

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).parents[1] / "src" / "ctxwin" / "examples" / "claude-code-session.jsonl"
SESSION_SUFFIXES = (".jsonl", ".traj")
NO_TRANSCRIPTS = ("letta-filesystem",)  # a folder of the shared set with no session files


def _shared_files() -> list[str]:
    """Every session file of the shared set, relative to it; one placeholder when the set is absent
    (the test then skips, or fails under CTXWIN_REQUIRE_SHARED=1)."""
    if not TRANSCRIPTS.is_dir():
        return ["<absent>/<absent>.jsonl"]
    return sorted(
        str(p.relative_to(TRANSCRIPTS)) for p in TRANSCRIPTS.glob("*/*")
        if p.suffix in SESSION_SUFFIXES and p.parent.name not in NO_TRANSCRIPTS
    )


def _calls_and_results(transcript: Transcript) -> tuple[Counter[str], Counter[str]]:
    calls = Counter(c.id for m in transcript.messages for c in m.tool_calls)
    results = Counter(r.call_id for m in transcript.messages for r in m.tool_results)
    return calls, results


# --------------------------------------------------------------------------------------------------
# The shared real sessions


@pytest.mark.shared
@pytest.mark.parametrize("relative", _shared_files())
def test_every_shared_session_imports(relative: str) -> None:
    path = shared_path(*relative.split("/"))
    expected = {"claude-code": "claude-code", "claude-code-edge-cases": "claude-code", "pi": "pi",
                "swe-agent": "swe-agent"}[path.parent.name]
    assert detect_format(path) == expected
    transcript = load_transcript(path)
    assert transcript.format == expected
    assert transcript.messages
    assert all(m.blocks for m in transcript.messages), "no message comes out empty"
    assert len({m.id for m in transcript.messages}) == len(transcript.messages), "ids are unique"
    assert all(0 <= u.message_index < len(transcript.messages) for u in transcript.usage)
    assert all(transcript.messages[u.message_index].role == "assistant" for u in transcript.usage)
    # Results are named after their calls (the latest call with that id: some files reuse ids).
    calls: dict[str, str] = {}
    for message in transcript.messages:
        calls.update((c.id, c.name) for c in message.tool_calls)
        for result in message.tool_results:
            if result.call_id in calls:
                assert result.name == calls[result.call_id]
    # Importing twice gives the same messages, ids included.
    again = load_transcript(path)
    assert [m.id for m in again.messages] == [m.id for m in transcript.messages]
    assert [m.content_key for m in again.messages] == [m.content_key for m in transcript.messages]


@pytest.mark.shared
@pytest.mark.parametrize("relative", _shared_files())
def test_every_tool_call_has_one_result_after_repair(relative: str) -> None:
    path = shared_path(*relative.split("/"))
    messages = load_transcript(path).messages
    for provider in pairing.PROVIDERS:
        repaired = pairing.repair(messages, provider).messages
        assert pairing.validate(repaired, provider) == []
        calls = Counter(c.id for m in repaired for c in m.tool_calls)
        results = Counter(r.call_id for m in repaired for r in m.tool_results)
        assert calls == results and set(calls.values()) <= {1}, provider
        # Nothing the user or the model said is lost on the way.
        said = [m.text for m in messages if m.role in ("user", "assistant") and m.text.strip()]
        kept = {m.text for m in repaired}
        assert all(text in kept for text in said), provider


@pytest.mark.shared
@pytest.mark.parametrize(("name", "tokens_before"), [
    ("258c7280-ae70-4798-800f-63464d01a85d.jsonl", 167_094),
    ("4d5611e5-241a-462a-8d15-5122611a9569.jsonl", 170_251),
    ("8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl", 167_731),
])
def test_claude_code_compaction_is_found(name: str, tokens_before: int) -> None:
    transcript = load_transcript(shared_path("claude-code", name))
    assert len(transcript.compactions) == 1
    compaction = transcript.compactions[0]
    assert compaction.tokens_before == tokens_before
    assert compaction.trigger == "auto"
    assert compaction.summary.startswith("This session is being continued from a previous conversation")
    assert compaction.first_kept_index == compaction.index
    # The summary is the harness's artifact: it is not among the messages.
    assert all("This session is being continued" not in m.text for m in transcript.messages)
    # The last call before the cut read close to what the harness reported as the tokens before.
    before = [u for u in transcript.usage if u.message_index < compaction.index]
    assert 0.9 * tokens_before < before[-1].context_tokens + before[-1].output_tokens <= tokens_before * 1.01
    assert any(u.message_index >= compaction.index for u in transcript.usage), "the session goes on after it"


@pytest.mark.shared
def test_claude_code_long_session_in_detail() -> None:
    path = shared_path("claude-code", "258c7280-ae70-4798-800f-63464d01a85d.jsonl")
    transcript = load_transcript(path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    main = [r for r in records if r["type"] == "assistant" and not r.get("isSidechain")]
    # One assistant message per API response (lines sharing message.id are merged) ...
    assert sum(m.role == "assistant" for m in transcript.messages) == len({r["message"]["id"] for r in main})
    # ... and one usage record per model call, with the final output count of its last line.
    assert len(transcript.usage) == len({r["message"]["id"] for r in main})
    last_line = {r["message"]["id"]: r["message"]["usage"] for r in main}
    for usage in transcript.usage:
        api_id = transcript.messages[usage.message_index].meta["api_message_id"]
        assert usage.output_tokens == last_line[api_id]["output_tokens"]
        assert usage.cache_read_tokens == last_line[api_id]["cache_read_input_tokens"]
        one_hour = last_line[api_id].get("cache_creation", {}).get("ephemeral_1h_input_tokens", 0)
        assert usage.cache_write_1h_tokens == one_hour
    assert any(u.cache_write_1h_tokens for u in transcript.usage)
    calls, results = _calls_and_results(transcript)
    assert sum(calls.values()) == sum(results.values()) == 186
    assert transcript.skipped["progress"] == sum(r["type"] == "progress" for r in records)
    assert transcript.skipped["file-history-snapshot"] == 28
    assert transcript.model == "claude-opus-4-6"
    assert transcript.session_id == "258c7280-ae70-4798-800f-63464d01a85d"
    assert transcript.started_at and transcript.ended_at and transcript.started_at < transcript.ended_at
    # Claude Code's uuids are the ids.
    uuids = {r["uuid"] for r in records if "uuid" in r}
    assert all(m.id.split("#")[0] in uuids for m in transcript.messages)
    # The sub-agent that ran in this session is kept apart, from its progress records.
    assert list(transcript.sidechains) == ["a881341"]
    assert transcript.sidechains["a881341"][0].role == "user"


@pytest.mark.shared
def test_claude_code_subagent_file_is_imported_as_the_conversation() -> None:
    transcript = load_transcript(shared_path("claude-code", "258c7280-subagent-a881341.jsonl"))
    assert transcript.metadata["sidechain"] is True
    assert transcript.metadata["agent_id"] == "a881341"
    assert [m.role for m in transcript.messages][:2] == ["user", "assistant"]
    assert transcript.model == "claude-sonnet-4-5-20250929"
    assert not transcript.sidechains


@pytest.mark.shared
def test_pi_session_compactions() -> None:
    transcript = load_transcript(shared_path("pi", "before-compaction.jsonl"))
    assert transcript.format == "pi"
    assert [c.tokens_before for c in transcript.compactions] == [175_004, 185_014]
    first, second = transcript.compactions
    # firstKeptEntryIndex 293 and 551 count the header as entry 0: file lines 294 and 552.
    assert transcript.messages[first.first_kept_index].meta["line"] == 294
    assert transcript.messages[second.first_kept_index].meta["line"] == 552
    assert first.first_kept_index < first.index < second.first_kept_index < second.index
    assert first.summary.startswith("# Context Checkpoint")
    assert transcript.messages[first.index].meta["line"] == 361  # the first entry after the compaction
    assert sum(m.role == "tool" for m in transcript.messages) == 448
    assert max(u.context_tokens for u in transcript.usage) == 184_915
    assert transcript.skipped["model_change"] == 5
    assert transcript.skipped["thinking_level_change"] == 5
    bash = [m for m in transcript.messages if m.meta.get("pi_bash_execution")]
    assert len(bash) == 3
    assert bash[0].text.startswith("Ran `ls`\n```\nAGENTS.md")
    assert "[Output truncated. Full output: " in bash[2].text


@pytest.mark.shared
def test_swe_agent_trajectory() -> None:
    transcript = load_transcript(shared_path("swe-agent", "marshmallow-1867-function-calling.traj"))
    assert transcript.format == "swe-agent"
    assert [m.role for m in transcript.messages[:4]] == ["system", "user", "assistant", "tool"]
    calls, results = _calls_and_results(transcript)
    assert calls == results and sum(calls.values()) == 13
    assert transcript.messages[3].meta["message_type"] == "observation"
    assert transcript.messages[3].tool_results[0].name == "bash"
    assert transcript.metadata["steps"] == 13


# --------------------------------------------------------------------------------------------------
# Claude Code details, on files of our own


def test_claude_code_edge_fixture() -> None:
    transcript = load_transcript(FIXTURES / "claude_code_edge.jsonl")
    roles = [m.role for m in transcript.messages]
    assert roles == ["user", "assistant", "tool", "user", "assistant", "tool", "user", "user", "user",
                     "assistant", "assistant"]
    first_call = transcript.messages[1]
    assert isinstance(first_call.blocks[0], Thinking) and first_call.blocks[0].redacted
    assert first_call.meta["lines"] == [3, 4, 5]  # three lines of one API response
    # A record with a tool result and text: the tool message first, then the user message.
    result = transcript.messages[2].tool_results[0]
    assert result.name == "Read" and isinstance(result.content[1], Image)
    assert transcript.messages[3].text == "also check the footer on mobile"
    assert transcript.messages[3].id == transcript.messages[2].id + "#1"
    assert transcript.messages[5].tool_results[0].is_error
    assert transcript.messages[6].meta["claude_code_system"] == "local_command"
    assert transcript.messages[8].meta["is_meta"] is True
    assert transcript.messages[9].meta["is_api_error"] is True
    assert [u.message_index for u in transcript.usage] == [1, 4, 10]  # no usage for the synthetic message
    assert transcript.usage[0].output_tokens == 57
    (compaction,) = transcript.compactions
    assert (compaction.index, compaction.tokens_before, compaction.trigger) == (8, 1234, "manual")
    assert "Element is covered" in compaction.summary
    assert [m.text for m in transcript.sidechains["a1b2c3d"]] == ["Which CSS file styles the footer?",
                                                                  "src/styles/footer.css"]
    assert transcript.skipped == Counter({"file-history-snapshot": 1, "progress": 1, "queue-operation": 1,
                                          "summary": 1, "other:custom-title": 1, "blank_text_block": 1,
                                          "system:compact_boundary": 1, "compact_summary": 1})
    assert transcript.warnings == []


def test_example_session_that_ships_with_the_package() -> None:
    transcript = load_transcript(EXAMPLE)
    assert transcript.format == "claude-code"
    assert 20 <= len(transcript.messages) <= 40
    names = Counter(c.name for m in transcript.messages for c in m.tool_calls)
    assert names["Read"] >= 2 and names["Edit"] >= 2 and names["Bash"] >= 2
    errors = [r for m in transcript.messages for r in m.tool_results if r.is_error]
    assert any(r.name == "Bash" for r in errors), "it shows a failing command"
    calls, results = _calls_and_results(transcript)
    assert calls == results
    # Two reads in one response, their results interleaved with the lines: one message.
    parallel = [m for m in transcript.messages if len(m.tool_calls) == 2]
    assert len(parallel) == 1 and len(parallel[0].meta["lines"]) == 3
    assert transcript.warnings == []
    assert len(transcript.usage) == sum(m.role == "assistant" for m in transcript.messages)


# --------------------------------------------------------------------------------------------------
# Pi, every version


def test_pi_v3_follows_the_branch_that_ends_at_the_last_entry() -> None:
    transcript = load_transcript(FIXTURES / "pi_v3_tree.jsonl")
    assert transcript.format == "pi" and transcript.metadata["version"] == 3
    ids = [m.id for m in transcript.messages]
    assert ids == ["a1000003", "a1000004", "a1000005", "a1000008", "a1000009", "a1000010", "a1000012",
                   "a1000013", "a1000014", "a1000015", "a1000017", "a1000018", "a1000019", "a1000020",
                   "a1000023"]
    assert "a1000006" not in ids and transcript.skipped["other_branch"] == 2
    messages = {m.id: m for m in transcript.messages}
    assert messages["a1000008"].text.startswith("The following is a summary of a branch")
    assert messages["a1000012"].text == "Run the whole suite before you commit."  # custom_message
    assert messages["a1000013"].text.startswith("Ran `git log --oneline -3`\n```\n9d41c07")
    assert messages["a1000018"].role == "user" and messages["a1000018"].text == "CI is green on main."
    assert messages["a1000005"].tool_results[0].is_error
    assert messages["a1000005"].tool_results[0].name == "bash"
    thinking = messages["a1000004"].blocks[0]
    assert isinstance(thinking, Thinking) and thinking.signature == "sig-a1000004"
    (compaction,) = transcript.compactions
    assert compaction.index == 10 and compaction.first_kept_index == 7
    assert transcript.messages[compaction.first_kept_index].id == "a1000013"
    assert compaction.tokens_before == 48_211
    assert compaction.details == {"readFiles": ["kvstore/log.py"], "modifiedFiles": ["kvstore/log.py"]}
    for reason in ("model_change", "thinking_level_change", "custom", "label", "session_info"):
        assert transcript.skipped[reason] == 1
    assert transcript.metadata["name"] == "segment roll-over fix"
    assert [u.message_index for u in transcript.usage] == [1, 4, 8, 12, 14]
    assert transcript.usage[0].cache_write_tokens == 1180
    assert transcript.cwd == "/home/dev/kvstore" and transcript.model == "claude-sonnet-4-5"


def test_pi_v2_hook_message_and_first_kept_id() -> None:
    transcript = load_transcript(FIXTURES / "pi_v2_tree.jsonl")
    assert [m.role for m in transcript.messages] == ["user", "assistant", "tool", "user", "assistant"]
    assert transcript.messages[3].text == "2 drafts have spelling errors."  # role hookMessage (v2)
    (compaction,) = transcript.compactions
    assert (compaction.index, compaction.first_kept_index, compaction.tokens_before) == (4, 2, 30_120)


def test_pi_v1_first_kept_index_and_aborted_empty_message() -> None:
    transcript = load_transcript(FIXTURES / "pi_v1.jsonl")
    assert transcript.metadata["version"] == 1
    assert [m.text for m in transcript.messages if m.role == "user"] == ["count the TODOs", "and in the archive?"]
    assert transcript.skipped["unsent_answer:aborted"] == 1  # an aborted call: Pi does not send it again
    (compaction,) = transcript.compactions
    # firstKeptEntryIndex 5 is the 6th line (the header is entry 0): "and in the archive?".
    assert transcript.messages[compaction.first_kept_index].text == "and in the archive?"
    assert compaction.index == 4


# --------------------------------------------------------------------------------------------------
# Codex, OpenAI-format JSON, SWE-agent


def test_codex_rollout() -> None:
    path = FIXTURES / "codex_rollout.jsonl"
    assert detect_format(path) == "codex"
    transcript = load_transcript(path)
    assert [m.role for m in transcript.messages] == ["system", "user", "user", "assistant", "tool", "assistant",
                                                     "tool", "assistant", "user", "assistant", "tool", "assistant"]
    assert transcript.messages[0].meta["openai_responses"] == {"role": "developer"}
    assert transcript.messages[1].meta["is_meta"] is True  # Codex's environment context
    first = transcript.messages[3]
    assert isinstance(first.blocks[0], Thinking)
    assert [c.name for c in first.tool_calls] == ["exec_command", "exec_command"]
    assert first.tool_calls[0].arguments == {"cmd": "pytest tests/test_log.py -x -q", "workdir": "/home/dev/kvstore"}
    assert [r.name for r in transcript.messages[4].tool_results] == ["exec_command", "exec_command"]
    assert transcript.messages[5].tool_calls[0].name == "apply_patch"
    assert transcript.messages[10].tool_results[0].text.endswith("42 passed in 1.31s\n")
    # One usage record per model call (the repeated token_count is not a second call).
    assert [u.message_index for u in transcript.usage] == [3, 5, 7, 9, 11]
    assert (transcript.usage[0].input_tokens, transcript.usage[0].cache_read_tokens) == (9120 - 2048, 2048)
    (compaction,) = transcript.compactions
    assert compaction.index == 8 and compaction.tokens_before == 9790 + 61
    assert compaction.summary.startswith("Summary of the work so far")
    assert compaction.details["replacement_history_items"] == 2
    assert transcript.model == "gpt-5.2-codex"
    assert transcript.session_id == "0199d2a4-6b1e-7c3d-9e8f-0a1b2c3d4e5f"
    assert transcript.skipped["event_msg:token_count"] == 6 and transcript.warnings == []


def test_codex_legacy_rollout(tmp_path: Path) -> None:
    path = tmp_path / "rollout-2025-05-01.jsonl"
    lines = [{"id": "5a1f", "timestamp": "2025-05-01T10:00:00Z", "instructions": None},
             {"record_type": "state"},
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]},
             {"type": "local_shell_call", "call_id": "c1", "status": "completed",
              "action": {"type": "exec", "command": ["ls"]}},
             {"type": "function_call_output", "call_id": "c1", "output": "README.md"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "One file."}]}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    transcript = load_transcript(path)
    assert transcript.format == "codex"
    assert [m.role for m in transcript.messages] == ["user", "assistant", "tool", "assistant"]
    call = transcript.messages[1].tool_calls[0]
    assert call.name == "local_shell" and call.arguments == {"type": "exec", "command": ["ls"]}
    assert transcript.messages[2].tool_results[0].name == "local_shell"
    assert transcript.session_id == "5a1f"


CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "size of /var/log?"}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "shell", "arguments": "{\"cmd\": \"du -sh /var/log\"}"}},
        {"id": "call_2", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\": \"df -h\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "1.2G\t/var/log"},
    {"role": "tool", "tool_call_id": "call_2", "content": "/dev/sda1  40G  31G"},
    {"role": "assistant", "content": "1.2 GB."},
]


@pytest.mark.parametrize("shape", ["list", "object", "jsonl"])
def test_openai_format(tmp_path: Path, shape: str) -> None:
    path = tmp_path / f"chat.{'jsonl' if shape == 'jsonl' else 'json'}"
    if shape == "list":
        path.write_text(json.dumps(CHAT, indent=2))
    elif shape == "object":
        path.write_text(json.dumps({"model": "gpt-4.1", "messages": CHAT}))
    else:
        path.write_text("".join(json.dumps(m) + "\n" for m in CHAT))
    assert detect_format(path) == "openai"
    transcript = load_transcript(path)
    assert [m.role for m in transcript.messages] == ["system", "user", "assistant", "tool", "assistant"]
    tool = transcript.messages[3]
    assert [(r.call_id, r.name) for r in tool.tool_results] == [("call_1", "shell"), ("call_2", "shell")]
    assert tool.meta["source"] in (["message 3", "message 4"], ["messages[3]", "messages[4]"], ["line 4", "line 5"])
    assert transcript.model == ("gpt-4.1" if shape == "object" else None)
    assert transcript.warnings == []


def test_openai_bad_messages_are_skipped_with_warnings(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([CHAT[1], {"role": "robot", "content": "beep"}, 7,
                                {"role": "assistant", "tool_calls": [{"id": 5}]}, CHAT[5]]))
    transcript = load_transcript(path)
    assert [m.text for m in transcript.messages] == ["size of /var/log?", "1.2 GB."]
    assert transcript.skipped == Counter({"not_a_message": 2, "malformed_message": 1})
    assert [w.split(":")[0].split(",")[0] for w in transcript.warnings] == ["message 1", "message 2", "message 3"]
    assert transcript.warnings[2] == "message 3, tool call 0, id: text must be a string, got int; skipped"


def test_swe_agent_observation_for_several_calls(tmp_path: Path) -> None:
    path = tmp_path / "run.traj"
    history = [
        {"role": "system", "content": "SETTING: ...", "agent": "main", "message_type": "system_prompt"},
        {"role": "assistant", "content": "Two searches.", "thought": "Two searches.", "action": "find",
         "agent": "main", "message_type": "action", "tool_calls": [
             {"id": "c1", "type": "function",
              "function": {"name": "find_file", "arguments": "{\"file_name\": \"a.py\"}"}},
             {"id": "c2", "type": "function",
              "function": {"name": "find_file", "arguments": "{\"file_name\": \"b.py\"}"}}]},
        {"role": "tool", "content": [{"type": "text", "text": "Found a.py and b.py"}], "agent": "main",
         "message_type": "observation", "tool_call_ids": ["c1", "c2"]},
    ]
    path.write_text(json.dumps({"history": history, "info": {"exit_status": "submitted"}}))
    transcript = load_transcript(path)
    assert transcript.format == "swe-agent"
    assert transcript.messages[2].tool_results[0].call_id == "c1"
    assert transcript.messages[2].tool_results[0].text == "Found a.py and b.py"
    assert transcript.warnings == ["history[2]: one observation answers 2 calls; it is kept as the answer to the first"]
    assert transcript.metadata["exit_status"] == "submitted"


# --------------------------------------------------------------------------------------------------
# Robustness


def test_gzip_is_read(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl.gz"
    path.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    transcript = load_transcript(path)
    assert transcript.metadata["compressed"] is True
    assert [m.content_key for m in transcript.messages] == [m.content_key for m in load_transcript(EXAMPLE).messages]


def test_truncated_gzip_reads_what_is_there_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl.gz"
    path.write_bytes(gzip.compress(EXAMPLE.read_bytes())[:-2000])
    transcript = load_transcript(path)
    assert transcript.messages
    assert transcript.warnings[0].startswith("the gzip stream is truncated")


def test_a_line_cut_in_the_middle_is_skipped_with_its_line_number(tmp_path: Path) -> None:
    text = EXAMPLE.read_text()
    path = tmp_path / "cut.jsonl"
    path.write_text(text[: len(text) - 300])  # the last record loses its end
    transcript = load_transcript(path)
    last_line = text[: len(text) - 300].count("\n") + 1
    assert transcript.skipped["malformed_json"] == 1
    assert transcript.warnings == [f"line {last_line}: not valid JSON (the file seems cut off mid-line): "
                                   + transcript.warnings[0].split("mid-line): ", 1)[1]]
    assert len(transcript.messages) >= 25


def test_malformed_lines_in_the_middle(tmp_path: Path) -> None:
    lines = EXAMPLE.read_text().splitlines()
    lines.insert(5, '{"type": "user", "message": {"role": "user", "content": "unterminated')
    lines.insert(9, "not json at all")
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n")
    transcript = load_transcript(path)
    assert transcript.skipped["malformed_json"] == 2
    assert [w.split(":")[0] for w in transcript.warnings] == ["line 6", "line 10"]
    assert len(transcript.messages) == len(load_transcript(EXAMPLE).messages)


def test_invalid_utf8_is_replaced_with_a_warning(tmp_path: Path) -> None:
    data = EXAMPLE.read_bytes().split(b"\n")
    data[1] = data[1].replace(b"fails on CI", b"fails on \xff\xfe CI")
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b"\n".join(data))
    transcript = load_transcript(path)
    assert transcript.warnings == ["line 2: invalid UTF-8 at byte "
                                   + transcript.warnings[0].split("byte ", 1)[1]]
    assert "fails on \ufffd\ufffd CI" in transcript.messages[0].text


def test_huge_lines_are_fine(tmp_path: Path) -> None:
    records = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    for record in records:
        content = record.get("message", {}).get("content")
        if isinstance(content, list) and content and content[0].get("type") == "tool_result":
            content[0]["content"] = "x" * 20_000_000
            break
    path = tmp_path / "huge.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    transcript = load_transcript(path)
    assert max(len(r.text) for m in transcript.messages for r in m.tool_results) == 20_000_000


@pytest.mark.parametrize(("content", "message"), [
    (b"", "is empty"),
    (b"\n  \n", "is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4, "is a binary file"),
    (bytes(range(128, 256)) * 64, "is a binary file"),
    (b"hello world\nthis is a text file\n", "is not JSON or JSONL"),
    (b'{"name": "x", "version": 1}\n', "is one JSON object (keys: name, version)"),
    (b'{"a": 1}\n{"b": 2}\n', "is not a known session format (record types seen: ? (2))"),
    (b'[{"x": 1}, {"y": 2}]', "is a JSON array, but not of chat messages"),
])
def test_unusable_files_give_a_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "input.jsonl"
    path.write_bytes(content)
    with pytest.raises(InputError) as error:
        load_transcript(path)
    assert message in error.value.message
    assert error.value.hint


def test_a_json_array_of_session_records_says_how_to_fix_it(tmp_path: Path) -> None:
    records = [json.loads(line) for line in EXAMPLE.read_text().splitlines()]
    path = tmp_path / "session.json"
    path.write_text(json.dumps(records, indent=1))
    with pytest.raises(InputError) as error:
        load_transcript(path)
    assert "is a JSON array, but claude-code sessions are JSONL" in error.value.message
    assert "jq -c '.[]'" in error.value.hint
    with pytest.raises(InputError, match="pi sessions are JSONL"):
        load_transcript(path, format="pi")


def test_missing_file_directory_and_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_transcript(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="is a folder, not a ctxwin session"):
        load_transcript(tmp_path)
    with pytest.raises(InputError, match="unknown format 'aider'"):
        load_transcript(EXAMPLE, format="aider")


def test_a_forced_format_that_does_not_fit_says_so() -> None:
    with pytest.raises(InputError, match=r"no conversation found in .* read as pi"):
        load_transcript(EXAMPLE, format="pi")


def test_formats_are_the_documented_ones() -> None:
    assert FORMATS == ("claude-code", "pi", "codex", "swe-agent", "openai", "ctxwin")
    for path, expected in [(FIXTURES / "pi_v1.jsonl", "pi"), (FIXTURES / "codex_rollout.jsonl", "codex"),
                           (FIXTURES / "claude_code_edge.jsonl", "claude-code"), (EXAMPLE, "claude-code")]:
        assert detect_format(path) == expected


# Records with the keys the readers look at, and the values that break naive code.
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["type", "role", "content", "text", "id", "tool_use_id", "name", "input", "message", "data"]), inner,
        max_size=4),
    max_leaves=10,
)
_RECORD = st.fixed_dictionaries(
    {"type": st.sampled_from(["user", "assistant", "system", "progress", "message", "compaction", "session",
                              "response_item", "event_msg", "compacted", "model_change", "custom_message"])},
    optional={
        "message": _VALUES | st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "toolResult", "bashExecution", "custom", "robot"]),
             "content": _VALUES},
            optional={"id": _VALUES, "model": _VALUES | st.just("m"), "usage": _VALUES | st.fixed_dictionaries(
                {}, optional={k: _VALUES for k in ("input_tokens", "cache_creation", "input", "cacheRead")})}),
        "payload": _VALUES, "uuid": _VALUES | st.sampled_from(["u1", "u2"]), "id": _VALUES, "parentId": _VALUES,
        "agentId": _VALUES, "sessionId": _VALUES, "timestamp": _VALUES,
        "isSidechain": st.booleans(), "isCompactSummary": st.booleans(), "subtype": st.sampled_from(
            ["compact_boundary", "local_command", "turn_duration"]), "data": _VALUES, "summary": _VALUES,
        "firstKeptEntryId": _VALUES, "firstKeptEntryIndex": _VALUES, "tokensBefore": _VALUES,
        "compactMetadata": _VALUES, "content": _VALUES,
    },
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(_RECORD | _VALUES, min_size=1, max_size=8), format=st.sampled_from((*FORMATS, None)))
def test_arbitrary_records_never_crash_the_reader(tmp_path: Path, records: list, format: str | None) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        transcript = load_transcript(path, format)
    except InputError as error:
        assert error.message
        return
    assert transcript.messages
    for message in transcript.messages:  # whatever was read serializes losslessly
        assert Message.from_dict(json.loads(json.dumps(message.to_dict()))) == message
    report = inspect_transcript(transcript)
    assert report["messages"] == len(transcript.messages)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_arbitrary_bytes_never_crash_the_reader(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.bin"
    path.write_bytes(data)
    try:
        load_transcript(path)
    except InputError as error:
        assert error.message and error.hint


def test_byte_order_mark_and_windows_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "windows.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + EXAMPLE.read_bytes().replace(b"\n", b"\r\n"))
    transcript = load_transcript(path)
    assert transcript.warnings == []
    assert [m.content_key for m in transcript.messages] == [m.content_key for m in load_transcript(EXAMPLE).messages]


# --------------------------------------------------------------------------------------------------
# Formats in summaries (issue 23.8): SWE-agent's commands are reads and edits, Codex reasoning stays
# reasoning


def test_swe_agent_commands_are_reads_and_edits_and_submit_is_kept(tmp_path: Path) -> None:
    from ctxwin.compaction.extractive import COMMANDS, MODIFIED, READ, STATE, ExtractiveSummarizer
    from ctxwin.compaction.identifiers import extract_file_ops
    from ctxwin.evaluation.probes import file_ops

    def step(action: str, observation: str) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": f"```\n{action}\n```", "thought": "next", "action": action},
                {"role": "user", "content": observation, "message_type": "observation"}]

    history = [{"role": "system", "content": "You are SWE-agent."},
               {"role": "user", "content": "Fix the rounding in fields.py", "message_type": "observation"},
               *step("open src/fields.py 1474", "[File: src/fields.py (1997 lines total)]"),
               *step("goto 1480", "[File: src/fields.py (1997 lines total)]"),
               *step("edit 1480:1480\n        return int(round(value))\nend_of_edit", "File updated."),
               *step("create reproduce.py", "[File: reproduce.py (1 lines total)]"),
               *step("insert 1\nprint(1)\nend_of_insert", "File updated."),
               *step("python reproduce.py", "1"),
               {"role": "assistant", "content": "```\nsubmit\n```", "thought": "done", "action": "submit"}]
    path = tmp_path / "run.traj"
    path.write_text(json.dumps({"history": history, "info": {"submission": "diff --git a/src/fields.py"}}))
    transcript = load_transcript(path)
    calls = [c for m in transcript.messages for c in m.tool_calls]
    assert [c.name for c in calls] == ["open", "goto", "edit", "create", "insert", "bash", "submit"]
    assert calls[0].arguments == {"path": "src/fields.py", "line_number": 1474, "action": "open src/fields.py 1474"}
    assert calls[2].arguments["range"] == "1480:1480"
    assert calls[2].arguments["text"] == "        return int(round(value))"
    assert not pairing.validate(transcript.messages, "anthropic")
    # The edit and the insert act on the file last opened or created: the summarizer and the scorer agree.
    read, modified = extract_file_ops(transcript.messages)
    assert (read, modified) == ([], ["src/fields.py", "reproduce.py"])
    assert file_ops(transcript.messages) == (["src/fields.py", "src/fields.py"],  # open, goto
                                             ["src/fields.py", "reproduce.py", "reproduce.py"])  # edit, create, insert
    summary = ExtractiveSummarizer().summarize(transcript.messages, budget_tokens=2_000)
    assert summary.sections[MODIFIED] == ["src/fields.py", "reproduce.py"] and READ not in summary.sections
    assert summary.sections[COMMANDS] == ["`python reproduce.py`", "`submit`"]  # the last step is kept
    assert "the work submitted (`submit`)" in summary.sections[STATE][0]


def test_codex_reasoning_stays_reasoning_and_is_never_sent_as_text(tmp_path: Path) -> None:
    from ctxwin.engine import ContextEngine

    records = [
        {"type": "session_meta", "payload": {"id": "11111111-1111-4111-8111-111111111111", "cwd": "/w"}},
        {"type": "turn_context", "payload": {"cwd": "/w", "model": "gpt-5.2-codex"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": "List the files."}]}},
        {"type": "response_item", "payload": {"type": "reasoning", "summary": [
            {"type": "summary_text", "text": "I will inspect the directory."}], "encrypted_content": "ENC-1"}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "exec_command",
                                              "arguments": "{\"cmd\":\"ls\"}", "call_id": "call-1"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "call-1",
                                              "output": "a.txt\nb.txt"}},
        {"type": "response_item", "payload": {"type": "reasoning", "id": "rs_2", "summary": [],
                                              "content": [{"type": "reasoning_text", "text": "Two files."}],
                                              "encrypted_content": "ENC-2"}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                              "content": [{"type": "output_text", "text": "a.txt and b.txt"}]}},
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps({"timestamp": "2026-01-02T03:04:05Z", **r}) + "\n" for r in records))
    transcript = load_transcript(path)
    thinking = [b for m in transcript.messages for b in m.blocks if isinstance(b, Thinking)]
    assert [t.thinking for t in thinking] == ["I will inspect the directory.", ""] and thinking[0].signature == "ENC-1"
    engine = ContextEngine(model="claude-sonnet-4-5", policy="ctxwin")
    for message in transcript.messages:
        engine.append(message)
    prepared = engine.prepare()
    anthropic = json.dumps(prepared.to_anthropic())
    chat = json.dumps(prepared.to_openai_chat())
    for sent in (anthropic, chat):  # dropped where the provider cannot take it, never turned into text
        assert "reasoning" not in sent and "ENC-" not in sent and "inspect the directory" not in sent
    responses = prepared.to_openai_responses()
    items = responses["input"] if isinstance(responses, dict) else responses
    kept = [i for i in items if i.get("type") == "reasoning"]
    assert [i.get("encrypted_content") for i in kept] == ["ENC-1", "ENC-2"]  # Responses takes its own back
