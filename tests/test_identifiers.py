"""Identifiers, file operations and the identifier guard."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_path
from ctxwin.compaction.base import Summary
from ctxwin.compaction.identifiers import (
    GUARD_HEADING,
    extract_file_ops,
    extract_identifiers,
    guard,
    normalize,
    shell_file_ops,
    survives,
    user_text,
)
from ctxwin.messages import Message, Text, ToolCall, assistant, tool_result, user
from ctxwin.tokens.encodings import get_encoding


class Cl100k:
    """An exact counter (tiktoken cl100k from the vendored ranks)."""

    name = "tiktoken:cl100k_base"
    exact = True

    def __init__(self) -> None:
        self.encoding = get_encoding("cl100k_base")

    def count_text(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def count_message(self, message: Message) -> int:
        return 4 + self.count_text(message.text)


COUNTER = Cl100k()


def call(name: str, call_id: str = "c1", **arguments: object) -> Message:
    return assistant("", ToolCall(call_id, name, dict(arguments)))


# --------------------------------------------------------------------------------------------------
# File operations


def test_file_ops_of_each_harness_tool_set() -> None:
    messages = [
        call("Read", file_path="/repo/a.py"),  # Claude Code
        call("Edit", file_path="/repo/b.py", old_string="x", new_string="y"),
        call("MultiEdit", file_path="/repo/c.py", edits=[]),
        call("NotebookEdit", notebook_path="/repo/n.ipynb"),
        call("Write", file_path="/repo/d.py", content="..."),
        call("read", path="/repo/e.ts"),  # Pi
        call("edit", path="/repo/f.ts", oldText="a", newText="b"),
        call("str_replace_editor", command="view", path="/repo/g.py"),  # SWE-agent
        call("str_replace_editor", command="str_replace", path="/repo/h.py"),
        call("shell", command=["bash", "-lc", "cat /repo/i.md"]),  # Codex
        call("apply_patch", input="*** Begin Patch\n*** Update File: /repo/j.py\n@@\n-a\n+b\n*** End Patch"),
        call("mcp__fs__read_file", path="/repo/k.py"),  # a namespaced tool
    ]
    read, modified = extract_file_ops(messages)
    assert read == ["/repo/a.py", "/repo/e.ts", "/repo/g.py", "/repo/i.md", "/repo/k.py"]
    assert modified == ["/repo/b.py", "/repo/c.py", "/repo/n.ipynb", "/repo/d.py", "/repo/f.ts", "/repo/h.py",
                        "/repo/j.py"]


def test_a_file_read_then_modified_is_only_modified_and_order_is_last_touch() -> None:
    messages = [
        call("Read", "1", file_path="/r/a.py"),
        call("Read", "2", file_path="/r/b.py"),
        call("Edit", "3", file_path="/r/a.py"),
        call("Read", "4", file_path="/r/c.py"),
        call("Read", "5", file_path="/r/b.py"),
    ]
    read, modified = extract_file_ops(messages)
    assert modified == ["/r/a.py"]
    assert read == ["/r/c.py", "/r/b.py"]  # b was touched last


def test_relative_paths_join_the_absolute_path_they_end() -> None:
    read, modified = extract_file_ops([
        call("Edit", "1", file_path="/home/u/proj/src/core/x.ts"),
        call("read", "2", path="src/core/x.ts"),
        call("read", "3", path="src/other.ts"),
    ])
    assert modified == ["/home/u/proj/src/core/x.ts"]
    assert read == ["src/other.ts"]


def test_shell_commands_reveal_cheap_file_operations() -> None:
    assert shell_file_ops("sed -i 's/a/b/' src/x.py && cat README.md") == (["README.md"], ["src/x.py"])
    assert shell_file_ops("echo hi > out.txt; echo more >> log/run.log") == ([], ["out.txt", "log/run.log"])
    assert shell_file_ops("python gen.py | tee build/out.json") == ([], ["build/out.json"])
    assert shell_file_ops("head -n 20 src/a.py") == (["src/a.py"], [])
    # A heredoc body is not parsed as commands; its target file is.
    assert shell_file_ops("cat > notes.md <<'EOF'\n> not a redirect.txt\nEOF") == ([], ["notes.md"])
    assert shell_file_ops("ls -la 2>/dev/null") == ([], [])
    assert shell_file_ops("echo 'unbalanced") == ([], [])  # unparseable: skipped, not guessed


def test_file_ops_in_the_real_claude_code_session() -> None:
    from ctxwin.transcripts import load_transcript

    transcript = load_transcript(shared_path("claude-code", "258c7280-ae70-4798-800f-63464d01a85d.jsonl"))
    point = transcript.compactions[0].index
    read, modified = extract_file_ops(transcript.messages[:point])
    edited = {c.arguments["file_path"] for m in transcript.messages[:point] for c in m.tool_calls
              if c.name in ("Edit", "Write")}
    assert edited <= set(modified)
    assert not set(read) & set(modified)
    assert any(p.endswith("annotation.ex") for p in modified)


# --------------------------------------------------------------------------------------------------
# Identifiers


def test_identifiers_user_given_first_then_agent_then_results() -> None:
    messages = [
        user("Deploy build 4821 to staging-2 at 10.0.0.7:8080, ticket PROJ-1234, see https://example.com/run/9 "
             "and commit 3f2a1b9c. Session 123e4567-e89b-42d3-a456-426614174000."),
        assistant("I'll look at /srv/app/config.yaml and job 99887766.", ToolCall("c1", "Bash", {
            "command": "grep -rn deploy /srv/app/deploy.sh"})),
        tool_result("c1", "Exit code 2\nENOENT: no such file /srv/app/deploy.sh", is_error=True),
        assistant("", ToolCall("c2", "Bash", {"command": "git commit -m fix"})),
        tool_result("c2", "[main 9a8b7c6d] fix\n 1 file changed"),
    ]
    found = extract_identifiers(messages)
    user_part = found[:found.index("ENOENT")]
    for expected in ("4821", "10.0.0.7:8080", "PROJ-1234", "https://example.com/run/9", "3f2a1b9c",
                     "123e4567-e89b-42d3-a456-426614174000"):
        assert expected in user_part
    assert "/srv/app/config.yaml" in found and "99887766" in found and "/srv/app/deploy.sh" in found
    assert found.index("ENOENT") < found.index("/srv/app/config.yaml")  # error codes before agent strings
    assert found[-1] == "9a8b7c6d"  # what a tool printed comes last
    assert len(found) == len(set(found))
    # The digits inside the UUID and the address are not reported again as numbers.
    assert "426614174000" not in found and "8080" not in found


def test_short_numbers_count_only_when_the_user_gave_them() -> None:
    found = extract_identifiers([user("keep 20 files"), assistant("I kept 20 files and 123456 bytes")])
    assert "20" in found and "123456" in found
    assert extract_identifiers([assistant("I kept 20 files")]) == []


def test_code_names_from_the_user_when_the_agent_used_them() -> None:
    messages = [user("Implement spotter-gqc and keep it read-only"),
                call("Bash", command="bd show spotter-gqc")]
    found = extract_identifiers(messages)
    assert "spotter-gqc" in found and "read-only" not in found


def test_file_bodies_are_not_scanned() -> None:
    messages = [call("Edit", file_path="/r/a.ts", old_string="import x from './b.js'", new_string="from '../c.js'")]
    assert extract_identifiers(messages) == ["/r/a.ts"]


def test_user_text_skips_harness_messages() -> None:
    assert user_text(user("<task-notification>\n<task-id>x</task-id>")) == ""
    assert user_text(user("[Request interrupted by user for tool use]")) == ""
    assert user_text(user("fix it<system-reminder>be nice</system-reminder>")) == "fix it"
    assert user_text(user("<command-name>/compact</command-name><command-args>the API</command-args>")) == \
        "/compact the API"
    assert user_text(Message("user", (Text("hi"),), meta={"isMeta": True})) == ""
    assert user_text(assistant("hi")) == ""


def test_a_path_survives_by_its_last_two_components() -> None:
    text = normalize("## Files modified\n- src/core/agent.ts")
    assert survives("/Users/x/proj/src/core/agent.ts", text)
    assert not survives("/Users/x/proj/src/other/agent.ts", text)


# --------------------------------------------------------------------------------------------------
# The guard

SPAN = [
    user("Use bucket gs://data-7781 and the run id 6f1c2e9a-0b3d-4c5e-8f70-9a1b2c3d4e5f; port 5432."),
    assistant("Reading /etc/app/settings.toml", ToolCall("c1", "Read", {"file_path": "/etc/app/settings.toml"})),
    tool_result("c1", "x = 1"),
]


def test_guard_appends_missing_identifiers_verbatim() -> None:
    summary = Summary(text="## Goal\n- use the bucket", tokens=6)
    guarded = guard(summary, SPAN, COUNTER, 500)
    assert guarded.text.startswith("## Goal\n- use the bucket\n\n## " + GUARD_HEADING)
    for identifier in ("6f1c2e9a-0b3d-4c5e-8f70-9a1b2c3d4e5f", "5432", "/etc/app/settings.toml"):
        assert f"\n- {identifier}" in guarded.text
    record = guarded.details["identifier_guard"]
    assert record["appended"] == record["missing"] and record["not_fitted"] == []
    assert guarded.sections[GUARD_HEADING] == record["appended"]
    assert guarded.tokens == COUNTER.count_text(guarded.text)
    # Nothing is missing any more: a second guard changes nothing.
    again = guard(guarded, SPAN, COUNTER, 500)
    assert again.text == guarded.text and again.details["identifier_guard"]["missing"] == []


def test_guard_keeps_what_survived_and_reports_what_did_not_fit() -> None:
    summary = Summary(text="Run 6f1c2e9a-0b3d-4c5e-8f70-9a1b2c3d4e5f on port 5432", tokens=0)
    base = COUNTER.count_text(summary.text)
    tight = guard(summary, SPAN, COUNTER, base + COUNTER.count_text(f"\n\n## {GUARD_HEADING}\n- 7781") + 1)
    record = tight.details["identifier_guard"]
    assert "5432" not in record["missing"]
    assert record["appended"] == record["missing"][:1]  # the most important one
    assert record["not_fitted"] == record["missing"][1:]
    assert tight.tokens <= base + 20


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(min_value=0, max_value=120), text=st.sampled_from(["", "x", "## Exact identifiers\n- a"]))
def test_guard_never_exceeds_the_budget(budget: int, text: str) -> None:
    summary = Summary(text=text, tokens=COUNTER.count_text(text))
    guarded = guard(summary, SPAN, COUNTER, budget)
    if guarded.details["identifier_guard"]["appended"]:
        assert COUNTER.count_text(guarded.text) <= budget
    else:
        assert guarded.text == text
    if text.endswith("- a") and guarded.details["identifier_guard"]["appended"]:
        assert guarded.text.count(f"## {GUARD_HEADING}") == 1  # appended to the existing section
