"""The extractive summarizer: content, budget, determinism, merging."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import shared_path
from ctxwin.compaction.base import RefBlindCounter, Summary
from ctxwin.compaction.extractive import (
    COMMANDS,
    CURRENT,
    DECISIONS,
    ERRORS,
    GOAL,
    IDENTIFIERS,
    MODIFIED,
    OPEN,
    READ,
    STATE,
    STATE_KEY,
    USER,
    ExtractiveSummarizer,
    command_entries,
    command_line,
    cut_note,
    group_paths,
)
from ctxwin.compaction.identifiers import extract_file_ops, normalize, survives, user_text
from ctxwin.compaction.summary import (
    clip,
    fit_sections,
    parse_sections,
    render_item,
    render_sections,
    sections_as_items,
)
from ctxwin.engine import ContextEngine
from ctxwin.messages import Message, ToolCall, assign_ids, assistant, tool_result, user
from ctxwin.pipeline.failures import error_line, error_lines
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.tokens.encodings import get_encoding


class Cl100k:
    name = "tiktoken:cl100k_base"
    exact = True

    def __init__(self) -> None:
        self.encoding = get_encoding("cl100k_base")

    def count_text(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def count_message(self, message: Message) -> int:
        return 4 + self.count_text(message.text)


COUNTER = Cl100k()
SUMMARIZER = ExtractiveSummarizer()


def session() -> list[Message]:
    """A small coding session touching every section."""
    return assign_ids([
        user("Add retry logic to the HTTP client in /repo/src/client.py; keep the public API unchanged."),
        assistant("Let me look at the client.", ToolCall("c1", "Read", {"file_path": "/repo/src/client.py"}),
                  ToolCall("c2", "Read", {"file_path": "/repo/src/util.py"})),
        tool_result("c1", "class Client: ..."),
        tool_result("c2", "def backoff(): ..."),
        assistant("I decided to use exponential backoff instead of a fixed delay because the API rate-limits.",
                  ToolCall("c3", "Edit", {"file_path": "/repo/src/client.py", "old_string": "a", "new_string": "b"})),
        tool_result("c3", "ok"),
        assistant("", ToolCall("c4", "Bash", {"command": "cd /repo && pytest tests/test_client.py -q"})),
        tool_result("c4", "Exit code 1\n....F\nE   AssertionError: expected 3 retries, got 2\n1 failed, 4 passed",
                    is_error=True),
        assistant("", ToolCall("c5", "Edit", {"file_path": "/repo/src/client.py", "old_string": "2",
                                               "new_string": "3"})),
        tool_result("c5", "ok"),
        assistant("", ToolCall("c6", "Bash", {"command": "cd /repo && pytest tests/test_client.py -q"})),
        tool_result("c6", "5 passed"),
        assistant("", ToolCall("c7", "TodoWrite", {"todos": [
            {"content": "Add retries", "status": "completed"},
            {"content": "Document the retry setting", "status": "in_progress"},
            {"content": "Release 2.4.1", "status": "pending"}]})),
        tool_result("c7", "Todos updated"),
        user("<system-reminder>internal</system-reminder>"),
        user("Also log each retry at debug level, ticket OPS-4411."),
        assistant("Retries now work. Next steps:\n1. Add debug logging\n2. Update the changelog"),
        user("and what about timeouts?"),
    ])


def summarize(span: list[Message], budget: int = 2_000, **kwargs: object) -> Summary:
    return SUMMARIZER.summarize(span, budget_tokens=budget, counter=COUNTER, **kwargs)


def test_every_section_says_what_it_should() -> None:
    span = session()
    summary = summarize(span)
    s = summary.sections
    assert s[GOAL] == ["Add retry logic to the HTTP client in /repo/src/client.py; keep the public API unchanged."]
    assert s[USER] == ["Also log each retry at debug level, ticket OPS-4411.", "and what about timeouts?"]
    assert s[MODIFIED] == ["/repo/src/client.py"] and s[READ] == ["/repo/src/util.py"]
    # Deduplicated with a count, by the first line, the directory said once.
    assert s[COMMANDS] == ["(in /repo)", "`pytest tests/test_client.py -q` (×2)"]
    # Every error line, grouped by the command that printed it, with the evidence of the fix.
    assert s[ERRORS] == ["`pytest tests/test_client.py -q` — fixed: passed later, after editing src/client.py:\n"
                         "E   AssertionError: expected 3 retries, got 2 · 1 failed, 4 passed"]
    # The document opens with the state of the work: the ask, what is done, what fails, what is next.
    assert s[STATE] == ["The user asked: \u201cAdd retry logic to the HTTP client in /repo/src/client.py; keep the "
                        "public API unchanged.\u201d. Latest request: \u201cand what about timeouts?\u201d. Done: 1 "
                        "file modified (latest: src/client.py). No error is open. Next: Add debug logging"]
    assert summary.text.startswith("## State of the work\nThe user asked:")
    assert s[DECISIONS] == ["I decided to use exponential backoff instead of a fixed delay because the API "
                            "rate-limits."]
    assert s[OPEN][0] == "Unanswered: and what about timeouts?"
    assert s[OPEN][1:] == ["[in progress] Document the retry setting", "[ ] Release 2.4.1", "[x] Add retries",
                           "Next: Add debug logging", "Next: Update the changelog"]
    assert s[CURRENT][0].startswith("Last assistant message: Retries now work.")
    assert s[CURRENT][-1] == ("Last tool calls: Edit /repo/src/client.py; Bash: cd /repo && pytest "
                              "tests/test_client.py -q (failed); Bash: cd /repo && pytest tests/test_client.py -q; "
                              "TodoWrite")  # one line, not one "Last tool call:" per call
    assert "OPS-4411" not in s.get(IDENTIFIERS, [])  # shown in a user message already: not repeated
    assert summary.modified_files == ("/repo/src/client.py",) and summary.read_files == ("/repo/src/util.py",)
    assert summary.covered_ids == tuple(m.id for m in span)
    assert summary.tokens == COUNTER.count_text(summary.text) <= 2_000
    assert parse_sections(summary.text) == summary.sections  # the text is exactly its sections
    assert summary.summarizer == "extractive"


def test_the_same_input_gives_the_same_bytes() -> None:
    span = session()
    first = summarize(span, 300)
    assert ExtractiveSummarizer().summarize(list(span), budget_tokens=300, counter=COUNTER).text == first.text
    assert summarize(span, 300).details == first.details


def test_user_messages_are_verbatim_up_to_the_cap() -> None:
    long = "please " + "x" * 3_000
    summary = ExtractiveSummarizer(per_message_chars=500).summarize(
        [user("goal"), user(long)], budget_tokens=5_000, counter=COUNTER)
    shown = summary.sections[USER][0]
    assert shown.startswith("please xxx") and shown.endswith(" […]") and len(shown) <= 505


def test_error_line_picks_the_distinctive_line() -> None:
    assert error_line("Exit code 1\nCompiling\n  1) test handles invalid id\n  ** (RuntimeError) boom") == \
        "** (RuntimeError) boom"
    traceback = "Traceback (most recent call last):\n  File \"a.py\", line 1\n    x()\nValueError: bad x\n"
    assert error_line("warning: something failed earlier\n" + traceback) == "ValueError: bad x"
    assert error_line("Exit code 128\nfatal: not a git repository") == "fatal: not a git repository"
    assert error_line("Exit code 3\nsomething odd") == "something odd"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget=st.integers(min_value=0, max_value=700))
def test_the_budget_is_never_exceeded(budget: int) -> None:
    summary = summarize(session(), budget)
    # Counted blind to the entry ids of its refs (as dear as any id can be), so never below the real count.
    assert summary.tokens == (RefBlindCounter.of(COUNTER).count_text(summary.text) if summary.text else 0)
    assert (COUNTER.count_text(summary.text) if summary.text else 0) <= summary.tokens <= budget


def test_tiny_budgets_keep_whole_sections_and_their_headers() -> None:
    for budget in (0, 1, 5, 12, 30, 60, 120):
        summary = summarize(session(), budget)
        assert summary.tokens <= budget
        for heading, items in summary.sections.items():
            assert items and f"## {heading}\n" in summary.text  # no header without content, no content without
    assert summarize(session(), 0).text == ""


def test_with_room_for_headers_every_section_with_content_appears() -> None:
    summary = summarize(session(), 600)  # (the notes get at most a quarter of the budget)
    assert set(summary.sections) >= {GOAL, USER, MODIFIED, READ, COMMANDS, ERRORS, DECISIONS, OPEN, CURRENT}
    assert summary.details["omitted"]  # and something had to give


def span_ids(span: list[Message]) -> list[str]:
    return [m.id for m in span]


def test_lower_priority_items_go_first() -> None:
    span = assign_ids([user("the goal")] + [m for i in range(40) for m in (
        assistant("", ToolCall(f"c{i}", "Bash", {"command": f"echo step-{i:02d}"})), tool_result(f"c{i}", "ok"))])
    summary = summarize(span, 200)
    *commands, note = summary.sections[COMMANDS]
    assert 0 < len(commands) < 40
    assert commands[-1] == "`echo step-39`"  # the most recent survive, shown in order
    assert commands == sorted(commands)
    # ... and the section says how many it left out, and the ref that returns them all.
    assert note == cut_note(40 - len(commands), COMMANDS, span_ids(span)[-1])
    assert note.endswith(f'recall("entry:{span_ids(span)[-1]}#commands") returns them all')
    assert len(summary.details[STATE_KEY][COMMANDS]) == 40


def test_focus_keeps_matching_items_first() -> None:
    span = [user("the goal")] + [m for i in range(40) for m in (
        assistant("", ToolCall(f"c{i}", "Bash", {"command": f"echo step-{i:02d}"})), tool_result(f"c{i}", "ok"))]
    span.insert(5, assistant("", ToolCall("x", "Bash", {"command": "alembic upgrade head"})))
    span.insert(6, tool_result("x", "ok"))
    plain = summarize(assign_ids(span), 150)
    focused = summarize(assign_ids(span), 150, focus="the alembic migration")
    assert "alembic upgrade head" not in plain.text and "alembic upgrade head" in focused.text
    assert focused.details["focus"] == "the alembic migration"


# --------------------------------------------------------------------------------------------------
# Merging


def test_merging_carries_everything_forward() -> None:
    span = session()
    first = summarize(span[:8], 3_000)
    second = summarize(span[8:], 3_000, previous=first)
    assert second.sections[GOAL] == first.sections[GOAL]  # the goal is kept
    assert "/repo/src/util.py" in second.read_files and "/repo/src/client.py" in second.modified_files
    # The first span's error stays, and the second span's passing run is the evidence of its fix.
    assert first.sections[ERRORS][0].startswith("`pytest tests/test_client.py -q` — not fixed in this span:\n")
    fixed = first.sections[ERRORS][0].replace("not fixed in this span", "fixed: passed later, after editing "
                                              "src/client.py")
    assert second.sections[ERRORS] == [fixed]
    assert second.covered_ids == tuple(m.id for m in span[8:])
    # A file read in the first span and modified in the second leaves the read-only list.
    third = summarize([assistant("", ToolCall("z", "Write", {"file_path": "/repo/src/util.py", "content": ""}))],
                      3_000, previous=second)
    assert "/repo/src/util.py" in third.modified_files and "/repo/src/util.py" not in third.read_files


def test_merging_with_a_model_summary_maps_its_sections() -> None:
    previous = Summary(
        text="## Goal\n- Ship v2\n\n## Next Steps\n1. Tag the release\n\n## Critical Context\n- DB is pg15",
        sections={"Goal": ["Ship v2"], "Next Steps": ["Tag the release"], "Critical Context": ["DB is pg15"]},
        modified_files=("/r/a.py",),
    )
    merged = summarize([user("now fix the docs")], 1_000, previous=previous)
    assert merged.sections[GOAL] == ["Ship v2"]
    assert merged.sections["Critical Context"] == ["DB is pg15"]
    assert merged.sections[OPEN][0] == "Unanswered: now fix the docs"  # the span's open tasks replace the old
    assert merged.modified_files == ("/r/a.py",)


WORDS = ["alpha", "beta", "gamma", "delta"]


@st.composite
def spans(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    for index in range(draw(st.integers(min_value=0, max_value=8))):
        kind = draw(st.sampled_from(["user", "read", "edit", "bash", "fail", "text"]))
        word = draw(st.sampled_from(WORDS))
        call_id = f"{word}{index}"
        if kind == "user":
            messages.append(user(f"please handle {word} {index % 3}"))
        elif kind == "text":
            messages.append(assistant(f"I will use {word} because it is simpler than the rest."))
        else:
            tool = {"read": "Read", "edit": "Edit"}.get(kind, "Bash")
            arguments = {"command": f"make {word}"} if tool == "Bash" else {"file_path": f"/p/{word}.py"}
            messages.append(assistant("", ToolCall(call_id, tool, arguments)))
            messages.append(tool_result(call_id, f"Exit code 2\nerror: {word} broke" if kind == "fail" else "ok",
                                        is_error=kind == "fail"))
    return assign_ids(messages)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=spans(), second=spans(), budget=st.integers(min_value=20, max_value=600))
def test_merging_is_idempotent(first: list[Message], second: list[Message], budget: int) -> None:
    previous = summarize(first, budget)
    merged = summarize(second, budget, previous=previous)
    # Merging a summary with itself changes nothing.
    itself = summarize([], budget, previous=merged)
    assert itself.text == merged.text and itself.details[STATE_KEY] == merged.details[STATE_KEY]
    # Merging the same span again changes nothing either.
    again = summarize(second, budget, previous=merged)
    assert again.text == merged.text and again.details[STATE_KEY] == merged.details[STATE_KEY]
    assert merged.tokens <= budget


# --------------------------------------------------------------------------------------------------
# Real sessions


def _real(folder: str, name: str):
    from ctxwin.transcripts import load_transcript

    return load_transcript(shared_path(folder, name))


def test_at_the_real_claude_code_compaction_point_the_summary_keeps_the_artifacts() -> None:
    transcript = _real("claude-code", "258c7280-ae70-4798-800f-63464d01a85d.jsonl")
    record = transcript.compactions[0]
    span = transcript.messages[:record.index]
    budget = COUNTER.count_text(record.summary)  # no larger than Claude Code's own summary
    summary = summarize(span, budget)
    assert summary.tokens <= budget
    text = normalize(summary.text)
    read, modified = extract_file_ops(span)
    assert all(survives(p, text) for p in modified + read)
    commands = [c.arguments["command"] for m in span for c in m.tool_calls if c.name == "Bash"]
    assert sum(normalize(c) in text for c in commands) / len(commands) >= 0.9
    asks = [t for t in (user_text(m) for m in span) if t]
    assert all(normalize(a[:80]) in text for a in asks)
    assert summary.covered_ids == tuple(m.id for m in span)


def test_two_real_pi_compactions_in_a_row() -> None:
    transcript = _real("pi", "before-compaction.jsonl")
    first, second = transcript.compactions[:2]
    budget = 2 * COUNTER.count_text(first.summary)
    s1 = summarize(transcript.messages[:first.first_kept_index], budget)
    # The second starts at the first one's first kept message (Pi's lost-messages bug made impossible).
    s2 = summarize(transcript.messages[first.first_kept_index:second.first_kept_index], budget, previous=s1)
    assert s2.tokens <= budget
    text = normalize(s2.text)
    evicted = transcript.messages[:second.first_kept_index]
    _, modified = extract_file_ops(evicted)
    assert all(survives(p, text) for p in modified)
    asks = [t for t in (user_text(m) for m in evicted) if t]
    shown = sum(normalize(a[:80]) in text for a in asks)
    # Most on the page (the notes' ways back take their share of this tight budget), the rest behind the ref.
    assert shown / len(asks) >= 0.8
    assert shown == len(asks) or f'recall("entry:{s2.details["anchor"]}#user-messages")' in s2.text
    assert re.search(r"^## Goal\n- alright, read", s2.text, re.M)  # the first goal carried through


# --------------------------------------------------------------------------------------------------
# Sections: rendering, parsing and fitting (ctxwin.compaction.summary)

_LINE = st.text(alphabet=st.characters(blacklist_categories=["Cs", "Zl", "Zp", "Cc"]), min_size=1,
                max_size=30).map(str.strip).filter(bool)
_ITEM = st.lists(st.one_of(_LINE, st.just("")), min_size=1, max_size=4).map(
    lambda lines: "\n".join(lines).strip()).filter(bool)
_SECTIONS = st.dictionaries(st.from_regex(r"[A-Z][a-z]{2,12}", fullmatch=True), st.lists(_ITEM, min_size=1,
                            max_size=5), max_size=5)


@settings(max_examples=150, deadline=None)
@given(sections=_SECTIONS)
def test_rendered_sections_parse_back_to_themselves(sections: dict[str, list[str]]) -> None:
    sections = {k: [re.sub(r"\n{3,}", "\n\n", i) for i in v] for k, v in sections.items()}
    assert parse_sections(render_sections(sections)) == sections


@settings(max_examples=100, deadline=None)
@given(sections=_SECTIONS, budget=st.integers(min_value=0, max_value=150))
def test_fitting_never_exceeds_the_budget_and_keeps_item_order(sections: dict[str, list[str]], budget: int) -> None:
    fitted = fit_sections(sections_as_items(sections, min_chars=10), budget, COUNTER)
    assert fitted.tokens <= budget and fitted.tokens == (COUNTER.count_text(fitted.text) if fitted.text else 0)
    for key, items in fitted.sections.items():
        remaining = iter(sections[key])  # shown items are a subsequence of the section, in order
        assert all(any(o.startswith(i.removesuffix(" […]").rstrip()) for o in remaining) for i in items)
    # The fitter's own cost of every header with its first item, shortest form: when that fits, no
    # section with content is dropped.
    # (The shortest form is the clipped one: fewer characters, though not always fewer tokens.)
    heads = sum(COUNTER.count_text(f"## {k}") + 2 + COUNTER.count_text(render_item(clip(v[0], 10))) + 1
                for k, v in sections.items())
    if budget >= heads:
        assert set(fitted.sections) == set(sections)


# --------------------------------------------------------------------------------------------------
# Every command and every error line (issue 12), on fixtures written for them


def bash(call_id: str, command: str) -> Message:
    return assistant("", ToolCall(call_id, "Bash", {"command": command}))


def test_every_distinct_command_is_kept_by_its_first_line() -> None:
    span = assign_ids([
        user("run the checks"),
        bash("c1", "cd /repo && npm run check"), tool_result("c1", "ok"),
        bash("c2", "cd /repo && npm run check"), tool_result("c2", "ok"),
        bash("c3", "cd /repo/pkg && cat > /tmp/x.py << 'EOF'\nprint(1)\nprint(2)\nEOF"), tool_result("c3", ""),
        bash("c4", "git status"), tool_result("c4", "clean"),
    ])
    assert command_line("cd /a && cd b && make\nmore") == ("make", "b", 1)
    assert command_entries(span) == ["(in /repo, /repo/pkg)", "`npm run check` (×2)",
                                     "`cat > /tmp/x.py << 'EOF'` (+3 lines)", "`git status`"]
    summary = summarize(span, 400)
    assert summary.sections[COMMANDS] == command_entries(span)


def test_long_commands_are_compressed_before_any_is_dropped() -> None:
    paths = " ".join(f"lib/spotter/services/module_number_{i}_with_a_long_name.ex" for i in range(12))
    span = assign_ids([user("commit it")] + [m for i in range(30) for m in (
        bash(f"c{i}", f"git add {paths} && git commit -m 'step {i:02d}: a commit message that goes on and on'"),
        tool_result(f"c{i}", "ok"))])
    whole = summarize(span, 20_000).sections[COMMANDS]
    assert len(whole) == 30 and all(len(c) > 500 for c in whole)
    tight = summarize(span, 1_400)
    commands = tight.sections[COMMANDS]
    assert len(commands) == 30 and not tight.details["omitted"].get(COMMANDS)  # all there ...
    assert sum(len(c) < 300 for c in commands) > 20  # ... most compressed: the paths once, long arguments cut
    assert commands[0] == ("`git add lib/spotter/services/{module_number_0_wi… && git commit -m 'step 00: a "
                           "commit message that goes on …`")
    assert "'step 29: a commit message that goes on and on'`" in commands[-1]  # the newest has room to grow
    assert group_paths("git add a/b/x.ex a/b/y.ex c.md") == "git add a/b/{x.ex,y.ex} c.md"


def test_every_distinct_error_line_is_kept_with_its_command_and_fix() -> None:
    span = assign_ids([
        user("make the tests pass"),
        bash("c1", "cd /repo && mix test"),
        tool_result("c1", "Exit code 1\n  1) test parses (ParserTest)\n  ** (RuntimeError) no config found\n"
                          "Finished in 0.1s\n3 tests, 1 failure"),
        bash("c2", "npm run build"),
        tool_result("c2", '{"message": "Build failed\\nerror TS2304: Cannot find name \'join\'."}', is_error=True),
        assistant("", ToolCall("c3", "Edit", {"file_path": "/repo/lib/parser.ex", "old_string": "a",
                                               "new_string": "b"})),
        tool_result("c3", "ok"),
        bash("c4", "mix test"), tool_result("c4", "3 tests, 0 failures"),
        bash("c5", "npm run build"),
        tool_result("c5", '{"message": "Build failed\\nerror TS2304: Cannot find name \'join\'."}', is_error=True),
    ])
    assert error_lines("Exit code 1\n  1) test parses (ParserTest)\n  ** (RuntimeError) no config found\n"
                       "3 tests, 1 failure") == ["** (RuntimeError) no config found", "3 tests, 1 failure"]
    assert error_lines("  × expected a semicolon\n    204 │ code") == ["× expected a semicolon"]
    assert error_lines("Assertion with =~ failed\n<html class=\"phx-error\">" + "x" * 600) == [
        "Assertion with =~ failed"]  # a page dump that happens to say "error" is not an error line
    summary = summarize(span, 600)
    assert summary.sections[ERRORS] == [
        "`mix test` — fixed: passed later, after editing lib/parser.ex:\n"
        "1) test parses (ParserTest) · ** (RuntimeError) no config found · 3 tests, 1 failure",
        # The same error twice: once, with its two runs; escaped line breaks split the JSON text.
        "`npm run build` (2 failed runs) — not fixed in this span:\n"
        "{\"message\": \"Build failed · error TS2304: Cannot find name 'join'.\"}",
    ]


def test_under_pressure_the_recent_and_the_referenced_stay_and_the_rest_is_counted() -> None:
    span = [user("the goal")]
    for i in range(40):
        span += [bash(f"c{i}", f"make target_{i:02d}"), tool_result(f"c{i}", "ok")]
    span += [assistant("Next I will look at target_03 again."),
             bash("z", "grep -n target_03 Makefile"), tool_result("z", "3: target_03:")]
    span = assign_ids(span)
    summary = summarize(span, 320)  # (room for the state of the work and the references' ref, then commands)
    *commands, note = summary.sections[COMMANDS]
    assert "`grep -n target_03 Makefile`" in commands and "`make target_39`" in commands  # the most recent
    assert "`make target_03`" in commands  # old, but the end of the history refers to it
    assert "`make target_10`" not in commands
    left_out = 41 - len(commands)
    assert note == cut_note(left_out, COMMANDS, span[-1].id) and summary.details["omitted"][COMMANDS] == left_out
    assert len(summary.details[STATE_KEY][COMMANDS]) == 41  # the full list, kept with the compaction


def test_the_summary_reads_the_logged_messages_not_their_masked_renderings(tmp_path: Path) -> None:
    policy = tmp_path / "mask-then-compact.toml"
    policy.write_text('name = "mask-then-compact"\n[mask]\nenabled = true\nkeep_last = 0\nbatch = 1\n'
                      'min_tokens = 0\n[compaction]\nenabled = true\nstrategy = "ctxwin"\nkeep_recent_tokens = 50\n')
    engine = ContextEngine(MemorySessionLog(), model="gpt-4o", policy=str(policy), window=60_000, max_output=2_000)
    for message in assign_ids([
        user("fix the build"),
        bash("c1", "npm run build -- --filter core"),
        tool_result("c1", "Exit code 2\nsrc/a.ts(3,1): error TS2304: Cannot find name 'join'.\n" + "x\n" * 300),
        assistant("Looking at it."),
        user("go on"),
        assistant("Done."),
    ]):
        engine.append(message)
    placeholder = engine.prepare().messages[2].tool_results[0].text
    assert placeholder.startswith("[Old output of Bash")  # the output is a placeholder in the view
    engine.compact()
    summary = next(e for e in engine.session.path() if e.kind == "compaction").payload["summary"]
    assert "src/a.ts: error TS2304: Cannot find name 'join'. (line 3)" in summary
    assert "`npm run build -- --filter core`" in summary
    assert "cleared" not in summary.split("## Recall index")[0]


LINE_PARTS = ["error", "Error:", "FAILED", "fail", "1) test x (M.T)", "12) test", "● a › b", "● Console", "--- FAIL:",
              "src/a.ts(3,1): ", "lib/x.ex:12: ", "panicked at", "Segmentation fault", "** (Mix)", "E   assert",
              "× bad", "exit code 1", "0 failed", "3 failures", "no such file or directory", "ok", "word", " ", "\\n"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(LINE_PARTS), max_size=5).map("".join), max_size=8).map("\n".join))
def test_the_quick_look_finds_every_line_the_rules_accept(text: str) -> None:
    """`_candidate_lines` (str.find on a few words) may only skip lines none of the error rules accept:
    with every line looked at closely, `diagnostics` finds the same."""
    from ctxwin.compaction.extractive import errors

    original = errors._candidate_lines
    try:
        errors._candidate_lines = errors._lines  # every line, no quick look
        every = errors.diagnostics(text)
    finally:
        errors._candidate_lines = original
    assert errors.diagnostics(text) == every

