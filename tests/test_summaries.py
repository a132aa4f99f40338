"""Summaries an engineer would trust (issue 23), rule by rule, on small fixtures: errors found by what
they say (an exit-0 pipe), every error of a 49-error `tsc` run kept and grouped, a grep that found
nothing is no error, a failed edit is fixed only by an edit, every cut list ends with a ref that
`recall` (the engine's, the proxy's `ctxwin_recall`, MCP's `recall`) resolves in full, the document
opens with the state of the work, names are decoded tokens, and no line is repeated."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin import policies
from ctxwin.compaction.extractive import (
    COMMANDS,
    CURRENT,
    ERRORS,
    RECENT,
    STATE,
    ExtractiveSummarizer,
    Facts,
    message_facts,
)
from ctxwin.compaction.extractive.errors import Diagnostic, diagnostics
from ctxwin.engine import ContextEngine
from ctxwin.evaluation.probes import extract, haystack, score
from ctxwin.mcp.recall import RecallSource, recall
from ctxwin.messages import Message, ToolCall, assign_ids, assistant, tool_result, user
from ctxwin.proxy.recall import answer
from ctxwin.store.base import SessionLog
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.store.session import Session
from ctxwin.tokens import counter_for

COUNTER = counter_for("gpt-4o")
SUMMARIZER = ExtractiveSummarizer()


def bash(call_id: str, command: str) -> Message:
    return assistant("", ToolCall(call_id, "Bash", {"command": command}))


def edit(call_id: str, path: str) -> Message:
    return assistant("", ToolCall(call_id, "Edit", {"file_path": path, "old_string": "a", "new_string": "b"}))


def summarize(span: list[Message], budget: int = 4_000) -> dict[str, list[str]]:
    return SUMMARIZER.summarize(span, budget_tokens=budget, counter=COUNTER).sections


def tsc_output(errors: int) -> str:
    names = ["settingsManager", "agent", "queuedMessages", "bashProcess", "scopedModels", "fileCommands", "join"]
    lines = [f"src/modes/interactive/interactive-mode.ts({100 + 7 * n},{n % 40 + 1}): error TS{2300 + n % 9}: "
             f"Cannot find name '{names[n % len(names)]}{n // len(names)}'." for n in range(errors)]
    return "\n".join(lines) + f"\nFound {errors} errors in 1 file."


def test_an_error_printed_by_a_command_that_exits_0_is_an_error() -> None:
    # `| tail` makes the exit status tail's: 0. Only the content says the check failed.
    span = assign_ids([
        user("fix the types"),
        bash("c1", "npx tsc --noEmit 2>&1 | tail -5"),
        tool_result("c1", "src/a.ts(3,1): error TS2304: Cannot find name 'join'.\n"
                          "** (Mix) Could not start application spotter: exited in: Spotter.start"),
    ])
    errors = summarize(span)[ERRORS]
    assert errors == ["`npx tsc --noEmit` — not fixed in this span:\n"
                      "src/a.ts: error TS2304: Cannot find name 'join'. (line 3)\n"
                      "** (Mix) Could not start application spotter: exited in: Spotter.start"]
    # The scorer finds them the same way, without the summarizer's code.
    probes = extract(span, len(span), len(span))
    assert {(p.file, p.text) for p in probes.probes["errors"]} == {
        ("src/a.ts", "error TS2304: Cannot find name 'join'."),
        ("", "** (Mix) Could not start application spotter: exited in: Spotter.start")}


def test_failed_tests_and_compile_banners_are_error_lines_whatever_the_runner() -> None:
    # Lines that name a failure without an error word at their start: ExUnit's numbered failures and its
    # compilation banner, Go's --- FAIL, Jest's bullet, a panic, a segfault. The independent checker
    # (benchmarks/independent_retention.py) counts each of them; the summary must keep each of them.
    output = "\n".join([
        "== Compilation error in file test/app_web/live/page_live_test.exs ==",
        "  1) test mount renders the page (AppWeb.PageLiveTest)",
        "     test/app_web/live/page_live_test.exs:12",
        "--- FAIL: TestParseHeader (0.00s)",
        "  ● parser › reads the header",
        "thread 'main' panicked at src/main.rs:4:5:",
        "Segmentation fault (core dumped)",
        "Finished in 0.1 seconds",
    ])
    span = assign_ids([user("run the tests"), bash("c1", "mix test 2>&1 | tail -40"), tool_result("c1", output)])
    kept = "\n".join(summarize(span)[ERRORS])
    for line in ("== Compilation error in file test/app_web/live/page_live_test.exs ==",
                 "1) test mount renders the page (AppWeb.PageLiveTest)", "--- FAIL: TestParseHeader (0.00s)",
                 "● parser › reads the header", "thread 'main' panicked at src/main.rs:4:5:",
                 "Segmentation fault (core dumped)"):
        assert line in kept, (line, kept)
    assert "Finished in 0.1 seconds" not in kept
    # The same marks in output that reports no failure are no error lines.
    for fine in ("● nginx.service - A high performance web server", "  ● Console", "1) test the parser first",
                 "12) test: run the suite"):
        assert diagnostics(fine) == [], fine
    assert [d.message for d in diagnostics("ran 1) tests, 0 failures\n2) test x (T)")] == ["2) test x (T)"]


def test_a_49_error_tsc_run_is_kept_whole_grouped_by_file_with_its_lines() -> None:
    output = tsc_output(49)
    span = assign_ids([user("make it compile"), bash("c1", "npx tsc --noEmit"), tool_result("c1", output)])
    assert len(diagnostics(output)) == 50  # the 49 errors and tsc's tally
    (group,) = summarize(span)[ERRORS]
    *lines, tally = group.split("\n")[1:]
    assert len(lines) == 49 and all(line.startswith("interactive/interactive-mode.ts: error TS") for line in lines)
    assert tally == "Found 49 errors in 1 file."
    assert "interactive/interactive-mode.ts: error TS2300: Cannot find name 'settingsManager0'. (line 100)" in lines
    # The same run twice: still 49 messages, each with both of its lines (the second run reports them 2 later).
    shifted = re.sub(r"\((\d+),", lambda m: f"({int(m.group(1)) + 2},", output)
    twice = span + assign_ids([bash("c2", "npx tsc --noEmit"), tool_result("c2", shifted)], prefix="again")
    (group,) = summarize(twice)[ERRORS]
    assert group.startswith("`npx tsc --noEmit` (2 failed runs) — not fixed in this span:")
    assert ("interactive/interactive-mode.ts: error TS2300: Cannot find name 'settingsManager0'. (lines 100, 102)"
            in group)


def test_under_pressure_the_grouping_shrinks_before_any_error_is_dropped() -> None:
    span = assign_ids([user("make it compile"), bash("c1", "npx tsc --noEmit"), tool_result("c1", tsc_output(49))])
    full = summarize(span)[ERRORS][0]
    whole = SUMMARIZER.summarize(span, budget_tokens=100_000, counter=COUNTER)
    room = COUNTER.count_text(whole.text) - COUNTER.count_text(full) + COUNTER.count_text(re.sub(r" \(lines? [^)]*\)",
                                                                                             "", full))
    tight = SUMMARIZER.summarize(span, budget_tokens=room + 40, counter=COUNTER).sections[ERRORS][0]
    assert "(line" not in tight  # the line numbers went ...
    assert len(tight.split("\n")) == 51  # ... and every one of the 49 messages (and the tally) stayed
    tiny = SUMMARIZER.summarize(span, budget_tokens=room // 2, counter=COUNTER).sections[ERRORS][0]
    assert "more error lines: recall(\"entry:" in tiny  # only then are messages left out, with the way back


def test_a_grep_that_found_nothing_is_not_an_error() -> None:
    span = assign_ids([
        user("find the handler"),
        bash("c1", "grep -rn handle_event lib/"), tool_result("c1", "Exit code 1", is_error=True),
        bash("c2", "rg -n handle_click lib/"), tool_result("c2", "lib/a.ex:12:  def handle_click(x)"),
    ])
    sections = summarize(span)
    assert ERRORS not in sections
    assert "`grep -rn handle_event lib/`" in sections[COMMANDS]
    assert extract(span, len(span), len(span)).probes["errors"] == []


def test_a_failed_edit_is_fixed_by_a_later_edit_not_by_a_read() -> None:
    failed = ("<tool_use_error>String to replace not found in file.\nString: a</tool_use_error>")
    span = assign_ids([
        user("rename it"),
        edit("c1", "/repo/lib/a.ex"), tool_result("c1", failed, is_error=True),
        assistant("", ToolCall("c2", "Read", {"file_path": "/repo/lib/a.ex"})), tool_result("c2", "defmodule A"),
    ])
    (group,) = summarize(span)[ERRORS]
    assert group.startswith("Edit lib/a.ex — not fixed in this span:")  # a read is no evidence
    redone = span + assign_ids([edit("c3", "/repo/lib/a.ex"), tool_result("c3", "ok")], prefix="redo")
    (group,) = summarize(redone)[ERRORS]
    assert group.startswith("Edit lib/a.ex — fixed: a later Edit succeeded:")
    # A check that failed, then passed after an edit, says which edit.
    check = assign_ids([
        user("go"), bash("c1", "mix test"), tool_result("c1", "  1) test x\n  ** (RuntimeError) boom\nExit code 2"),
        edit("c2", "/repo/lib/b.ex"), tool_result("c2", "ok"),
        bash("c3", "mix test 2>&1 | tail -3"), tool_result("c3", "3 tests, 0 failures"),
    ])
    (group,) = summarize(check)[ERRORS]
    assert group.startswith("`mix test` — fixed: passed later, after editing lib/b.ex:")


def test_a_command_not_seen_passing_says_what_happened_since_it_failed() -> None:
    # Neither is "fixed" (no same command passed), nor is either known to fail now: the summary says
    # what is known, a longer form of the command passed, the file the errors name was edited.
    span = assign_ids([
        user("push it, then fix the types"),
        bash("c1", "git push 2>&1"), tool_result("c1", "fatal: The current branch x has no upstream branch.",
                                                 is_error=True),
        bash("c2", "git push --set-upstream origin x 2>&1"),
        tool_result("c2", "branch 'x' set up to track 'origin/x'."),
        bash("c3", "npx tsc --noEmit"), tool_result("c3", "src/a.ts(3,1): error TS2304: Cannot find name 'join'.\n"
                                                          "Exit code 2", is_error=True),
        edit("c4", "/repo/src/a.ts"), tool_result("c4", "ok"),
        assistant("Both done."),
    ])
    summary = SUMMARIZER.summarize(span, budget_tokens=2_000, counter=COUNTER)
    push, tsc = summary.sections[ERRORS]
    assert push.startswith("`git push` — not fixed in this span; a later `git push --set-upstream origin x` passed:")
    assert tsc.startswith("`npx tsc --noEmit` — not fixed in this span; edited since: src/a.ts:")
    (state,) = summary.sections[STATE]
    assert ("Failed when last run: `git push`: fatal: The current branch x has no upstream branch (a later "
            "`git push --set-upstream origin x` passed); `npx tsc --noEmit`: error TS2304: Cannot find name 'join' "
            "(edited since: src/a.ts).") in state
    # The same across two compactions: the longer form passes in the next span.
    first = SUMMARIZER.summarize(span[:3], budget_tokens=2_000, counter=COUNTER)
    later = SUMMARIZER.summarize(span[3:5], previous=first, budget_tokens=2_000, counter=COUNTER)
    (group,) = later.sections[ERRORS]
    assert group.startswith("`git push` — not fixed in this span; a later `git push --set-upstream origin x` passed:")


def compacted_engine(log: SessionLog | None = None) -> tuple[ContextEngine, list[Message]]:
    """An engine that compacted 60 distinct commands into a summary too small for them."""
    policy = policies.from_dict({"name": "tight", "compaction": {
        "enabled": True, "strategy": "pi", "keep_recent_tokens": 10, "summary_max_tokens": 400, "trigger_ratio": 0.9}})
    engine = ContextEngine(log if log is not None else MemorySessionLog(), model="gpt-4o", policy=policy,
                           window=50_000, max_output=1_000)
    messages = [user("run every step")]
    for n in range(60):
        messages += [bash(f"c{n}", f"make step_{n:02d} TARGET=build/{n}"), tool_result(f"c{n}", "ok")]
    messages += [assistant("All steps ran."), user("thanks, now the docs")]
    for message in assign_ids(messages):
        engine.append(message)
    engine.compact()
    return engine, messages


def summary_text(engine: ContextEngine) -> str:
    return next(e for e in reversed(engine.session.path()) if e.kind == "compaction").payload["summary"]


def test_a_cut_list_ends_with_a_ref_that_recall_resolves_in_full_and_paged(tmp_path: Path) -> None:
    engine, _ = compacted_engine()
    text = summary_text(engine)
    note = re.search(r"(\d+) more commands not shown: recall\(\"(entry:[\w-]+#commands)\"\) returns them all", text)
    assert note is not None, text
    ref = note.group(2)
    full = engine.recall(ref)
    commands = [f"`make step_{n:02d} TARGET=build/{n}`" for n in range(60)]
    assert [line.removeprefix("- ") for line in full.splitlines()] == commands
    shown = sum(c in text for c in commands)
    assert shown + int(note.group(1)) == 60 and 0 < shown < 60
    assert engine.recall(ref, offset=10, limit=25) == full[10:35]  # paged like any recall
    # The proxy's ctxwin_recall answers the same ref from the same engine.
    reply, is_error = answer(engine, ToolCall("r1", "ctxwin_recall", {"ref": ref}))
    assert not is_error and reply.startswith(full[:200])
    # The compaction entry itself: its summary, and its lists by name.
    compaction_id = next(e.id for e in reversed(engine.session.path()) if e.kind == "compaction")
    assert engine.recall(f"entry:{compaction_id}") == text
    assert engine.recall(f"entry:{compaction_id}#commands") == full


def test_mcp_recall_resolves_a_cut_list_from_the_stored_session(tmp_path: Path) -> None:
    folder = tmp_path / "session"
    with Session.open(folder) as log:
        engine, _ = compacted_engine(log)
        ref = re.search(r"recall\(\"(entry:[\w-]+#commands)\"\)", summary_text(engine))
        assert ref is not None
        expected = engine.recall(ref.group(1))
    served = recall(RecallSource(session=folder), ref.group(1))
    assert not served.is_error and served.text.startswith(expected[:500])
    assert served.details["chars"] == len(expected)


def test_the_summary_opens_with_the_state_of_the_work_and_repeats_no_line() -> None:
    span = assign_ids([
        user("Add retries to the client"),
        bash("c1", "pytest -q"), tool_result("c1", "E   AssertionError: expected 3\n1 failed", is_error=True),
        *[m for n in range(6) for m in (bash(f"r{n}", "pytest -q"), tool_result(f"r{n}", "E   AssertionError: "
                                                                                     "expected 3\n1 failed"))],
        assistant("The retry count is off by one. Next I will fix the loop in client.py."),
    ])
    summary = SUMMARIZER.summarize(span, budget_tokens=2_000, counter=COUNTER)
    assert summary.text.startswith("## State of the work\nThe user asked: \u201cAdd retries to the client\u201d.")
    (state,) = summary.sections[STATE]
    assert "Failed when last run: `pytest -q`: E   AssertionError: expected 3 (+1 more)." in state
    assert state.endswith("Next: Next I will fix the loop in client.py.")
    bullets = [line for line in summary.text.splitlines() if line.startswith("- ")]
    assert len(bullets) == len(set(bullets))
    assert sum(line.startswith("- Last tool calls:") for line in bullets) == 1
    assert len(summary.sections[CURRENT]) == 2


def test_names_are_decoded_tokens_not_escape_debris() -> None:
    escaped = '{"log": "Build done\\\\nFinding modules\\\\nFix applied in lib/spotter_web/live/page_live.ex", ' \
              '"html": "<div class=\\\\"x\\\\">text</div>", "env": "${PORT}/healthCheck"}'
    span = assign_ids([user("check the page"), bash("c1", "curl localhost:4000/page"), tool_result("c1", escaped),
                       assistant("Now look at handleEvent in page_live.ex.")])
    references = ", ".join(summarize(span)[RECENT])
    assert "lib/spotter_web/live/page_live.ex" in references and "handleEvent" in references
    for debris in ("nFinding", "nFix", "/div", "${PORT", "PORT}"):
        assert debris not in references


def test_errors_score_by_content_in_the_view(tmp_path: Path) -> None:
    # The scorer's own error probes, on the summary of an exit-0 failing check: every one is found.
    span = assign_ids([user("fix the build please"), bash("c1", "npm run check 2>&1 | head -40"),
                       tool_result("c1", tsc_output(12) + "\nnpm error code 2\nnpm error command failed")])
    text = SUMMARIZER.summarize(span, budget_tokens=4_000, counter=COUNTER).text
    probes = extract(span, len(span), len(span))
    assert len(probes.probes["errors"]) == 15  # 12 errors, the tally, two npm lines
    assert score(probes, haystack([text]))["errors"].recall == 1.0


# --------------------------------------------------------------------------------------------------
# The model summarizer, end to end through the fake provider, checked by the same probes


CLAUDE_CODE_REPLY = """<analysis>
The user wants the type errors fixed. SCRATCHPAD-ONLY: I looked at interactive-mode.ts first.
</analysis>
<summary>
1. Primary Request and Intent:
   The user asked: "fix the type errors in the interactive mode, then run the checks again".
2. Key Technical Concepts:
   - TypeScript, tsc
3. Files and Code Sections:
   - /repo/src/modes/interactive/interactive-mode.ts (read, then edited: the settingsManager import)
   - /repo/src/core/settings.ts (read)
4. Errors and fixes:
   - `npx tsc --noEmit 2>&1 | tail -5` printed:
     interactive-mode.ts(212,28): error TS2304: Cannot find name 'settingsManager'.
   - The first Edit failed (the old text did not match) and was redone.
5. Problem Solving:
   Imported the settings manager.
6. All user messages:
   - fix the type errors in the interactive mode, then run the checks again
7. Pending Tasks:
   - Run the checks again.
8. Current Work:
   Editing /repo/src/modes/interactive/interactive-mode.ts.
9. Optional Next Step:
   Run `npx tsc --noEmit 2>&1 | tail -5` again.
</summary>"""


def llm_session() -> list[Message]:
    path = "/repo/src/modes/interactive/interactive-mode.ts"
    return assign_ids([
        user("fix the type errors in the interactive mode, then run the checks again"),
        bash("c1", "npx tsc --noEmit 2>&1 | tail -5"),
        tool_result("c1", "src/modes/interactive/interactive-mode.ts(212,28): error TS2304: Cannot find name "
                          "'settingsManager'."),
        assistant("", ToolCall("c2", "Read", {"file_path": path}),
                  ToolCall("c3", "Read", {"file_path": "/repo/src/core/settings.ts"})),
        tool_result("c2", "import { x } from './x.js';\n" * 40),
        tool_result("c3", "export class SettingsManager {}\n" * 20),
        edit("c4", path), tool_result("c4", "<tool_use_error>String to replace not found in file.</tool_use_error>",
                                      is_error=True),
        edit("c5", path), tool_result("c5", "The file has been updated."),
        assistant("Fixed the import."),
        user("thanks"),
    ])


def test_the_llm_summary_end_to_end_through_the_fake_provider_checked_by_the_probes() -> None:
    from ctxwin.compaction.llm import LLMSummarizer
    from ctxwin.compaction.prompts import CLAUDE_CODE_SECTIONS
    from ctxwin.evaluation.retention import request_text
    from ctxwin.providers.anthropic import AnthropicClient
    from ctxwin.testing.fake_provider import MESSAGES, FakeProvider

    messages = llm_session()
    with FakeProvider(context_window=200_000) as fake:
        fake.reply(CLAUDE_CODE_REPLY)
        summarizer = LLMSummarizer(AnthropicClient(fake.anthropic_base_url, "test-key", "claude-test"),
                                   style="claude-code", window_tokens=100_000, fallback=None, max_output_tokens=8_192)
        engine = ContextEngine(MemorySessionLog(), model="claude-sonnet-4-5", policy="claude-code",
                               summarizer=summarizer)
        for message in messages:
            engine.append(message)
        prepared = engine.compact()
        (request,) = fake.requests_to(MESSAGES)
    assert any(e.is_compaction for e in prepared.events)
    sent = request.body["messages"][-1]["content"]
    sent = sent if isinstance(sent, str) else "\n".join(p.get("text", "") for p in sent)
    view = request_text(prepared.system, prepared.messages)
    assert "SCRATCHPAD-ONLY" not in view and "<analysis>" not in view  # the scratchpad is stripped ...
    assert "Summary:\n1. Primary Request and Intent:" in view  # ... and the nine sections stand
    assert all(section in view for section in CLAUDE_CODE_SECTIONS)
    # The scorer's probes: every fact of the evicted span reached the model ...
    probes = extract(messages, len(messages), len(messages))
    for kind in ("modified_files", "read_files", "errors", "commands", "user_constraints"):
        assert score(probes, haystack([sent]))[kind].recall == 1.0, kind
    # ... and the view, the model's summary as ctxwin delivered it, keeps what the summary says.
    kept = score(probes, haystack([view]))
    assert {k: kept[k].recall for k in ("modified_files", "read_files", "errors", "commands", "user_constraints")} == {
        "modified_files": 1.0, "read_files": 1.0, "commands": 1.0, "user_constraints": 1.0,
        "errors": 0.5,  # the model quoted the tsc error, and paraphrased the failed Edit's: the probes say so
    }


# --------------------------------------------------------------------------------------------------
# Facts computed once per message (for the engine): the same bytes with or without them


WORDS = ["alpha", "beta", "gamma"]


@st.composite
def spans(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = [user("fix the build in /repo/src/app.py, ticket OPS-4411")]
    for index in range(draw(st.integers(min_value=0, max_value=10))):
        kind = draw(st.sampled_from(["user", "read", "edit", "bash", "fail", "tsc", "text"]))
        word = draw(st.sampled_from(WORDS))
        call_id = f"{kind}{index}"
        if kind == "user":
            messages.append(user(f"please handle {word}_case {index}"))
        elif kind == "text":
            messages.append(assistant(f"I will use {word}Helper because it is simpler. Next I will test it."))
        elif kind == "read":
            messages += [assistant("", ToolCall(call_id, "Read", {"file_path": f"/repo/src/{word}.py"})),
                         tool_result(call_id, f"def {word}():\n    raise ValueError('error: {word}')")]
        elif kind == "edit":
            messages += [edit(call_id, f"/repo/src/{word}.py"), tool_result(call_id, "ok")]
        elif kind == "tsc":
            messages += [bash(call_id, "npx tsc --noEmit | tail"),
                         tool_result(call_id, f"src/{word}.ts({index},1): error TS2304: Cannot find name '{word}'.")]
        else:
            messages += [bash(call_id, f"make {word}"),
                         tool_result(call_id, f"Exit code 2\nerror: {word} broke" if kind == "fail" else "done",
                                     is_error=kind == "fail")]
    return assign_ids(messages)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(span=spans(), budget=st.integers(min_value=50, max_value=1_500), keep=st.floats(min_value=0, max_value=1))
def test_facts_given_or_not_the_summary_is_the_same_bytes(span: list[Message], budget: int, keep: float) -> None:
    plain = SUMMARIZER.summarize(span, budget_tokens=budget, counter=COUNTER)
    some = {m.id: message_facts(m) for m in span[: int(len(span) * keep)]}  # the rest are computed
    given_facts = SUMMARIZER.summarize(span, budget_tokens=budget, counter=COUNTER, facts=some)
    assert given_facts.text == plain.text and given_facts.details == plain.details


def test_the_facts_given_are_the_ones_read() -> None:
    span = assign_ids([user("fix it"), bash("c1", "make"), tool_result("c1", "Exit code 2\nerror: boom")])
    planted = {span[2].id: Facts((), ((), ()), {"c1": (Diagnostic("", None, "error: planted line"),)})}
    (group,) = SUMMARIZER.summarize(span, budget_tokens=1_000, counter=COUNTER, facts=planted).sections[ERRORS]
    assert group.endswith("error: planted line")  # not "error: boom": the map was used, not a new scan


def test_compact_view_passes_the_facts_to_the_extractive_summary_and_the_guard() -> None:
    from ctxwin.compaction.compact import compact_view
    from ctxwin.pipeline.view import Item, StageContext

    messages = assign_ids([user("go to /repo/a.py and fix OPS-4411"), bash("c1", "make a"),
                           tool_result("c1", "error: x in /repo/a.py"), assistant("ok"), user("next")])
    items = [Item(f"e{n}", m, COUNTER.count_message(m)) for n, m in enumerate(messages)]
    ctx = StageContext(counter=COUNTER, window=50_000, budget=40_000,
                       calls={c.id: c for m in messages for c in m.tool_calls})
    policy = policies.get("pi").compaction.model_copy(update={"keep_recent_tokens": 10})
    facts = {f"e{n}": message_facts(m.replace(id=f"e{n}")) for n, m in enumerate(messages)}
    run = {"summarizer": None, "previous": None, "focus": None, "pins": set(), "force": True}
    with_facts = compact_view(items, policy, ctx, facts=facts, **run)  # type: ignore[arg-type]
    without = compact_view(items, policy, ctx, **run)  # type: ignore[arg-type]
    assert with_facts.summary.text == without.summary.text and with_facts.entry() == without.entry()


# --------------------------------------------------------------------------------------------------
# Shortcuts of the scans: the same answers as the regexes they stand in for


ERROR_PIECES = ["error", "ERROR", "Fail", "fatal", "PANIC", "exception", "npm ERR!", "Uncaught", "unhandled", "assert",
                "denied", "not found", "No such", "** (", "EXIT", "E  ", "e   x", "✗", "×", "✘", "❌", "ı", "ſ", "İ",
                "\u212a", " ", "\t", "\n", "\r\n", "\x85", "\u2028", "\\n", "word", "x", ":", "12", "src/a.ts(3,1): "]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(ERROR_PIECES), max_size=30).map("".join))
def test_the_candidate_lines_are_the_lines_the_candidate_regex_matches(text: str) -> None:
    from ctxwin.compaction.extractive import errors

    lines = "\n".join(errors._prepared(text).splitlines()).split("\n")
    expected = [line.strip() for line in lines if line.strip() and errors._CANDIDATE.search(line)]
    assert errors._candidate_lines(text) == expected


IDENTIFIER_PIECES = ["http", "https://x.io/a", "://", "0123abcd-1234-5678-9abc-def012345678", "-", "localhost", ":8080",
                     ":", "C:\\Users\\a.txt", "\\", "/repo/src/a.py", "/", "a.py", ".", "`code`", "`", "#123", "#",
                     "v1.2", "snake_case", "camelCase", "1234567", "deadbeef1", " ", "\n", "word"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(IDENTIFIER_PIECES), max_size=20).map("".join))
def test_an_identifier_pass_skips_only_texts_its_pattern_cannot_match(text: str) -> None:
    from ctxwin.compaction import identifiers

    finders = (*identifiers._STRICT_PASSES, *identifiers._USER_PASSES, *identifiers._OTHER_PASSES,
               identifiers._URLS, identifiers._ERROR_CODES)
    assert any(f.needs for f in finders)
    for finder in finders:
        if finder.pattern.search(text) is not None:
            assert finder.needs in text, (finder.pattern.pattern, text)


# --------------------------------------------------------------------------------------------------
# Prefix stability: a summary does not depend on what its log's (random) entry ids are


def ids_alike(count: int, costly: bool) -> list[str]:
    """`count` entry ids of 8 characters: letters only (cheap to tokenize), or digits and letters
    alternating (dear), as random hex ids can be either."""
    if costly:
        return ["".join(d + c for d, c in zip(f"{n:04d}", "abcd", strict=True)) for n in range(count)]
    return ["aaaa" + "".join(chr(97 + (n // 26 ** k) % 26) for k in range(4)) for n in range(count)]


def test_the_summary_is_the_same_whatever_the_entry_ids() -> None:
    from ctxwin.compaction.compact import compact_view
    from ctxwin.pipeline.view import Item, StageContext

    counter = counter_for("claude-sonnet-4-5")
    messages: list[Message] = [user("run every step")]
    for n in range(40):
        messages += [bash(f"c{n}", f"make step_{n:02d} TARGET=build/{n}" + " -j4" * (n % 3)),
                     tool_result(f"c{n}", f"line of output {n}\n" * (30 + 7 * (n % 5))
                                 + (f"error: step {n} broke in src/mod_{n}/file_{n}.py" if n % 4 == 0 else ""))]
        if n % 7 == 0:
            messages.append(user(f"also check file_{n}.py please"))
    messages += [assistant("All steps ran. Next I will look at helperFunction_3."), user("thanks, now the docs")]
    messages = assign_ids(messages)
    ctx = StageContext(counter=counter, window=50_000, budget=40_000,
                       calls={c.id: c for m in messages for c in m.tool_calls})
    run = {"summarizer": None, "previous": None, "focus": None, "pins": set(), "force": True}
    for budget in (346, 760, 1_200):
        policy = policies.get("pi").compaction.model_copy(update={"keep_recent_tokens": 10,
                                                                  "summary_max_tokens": budget})
        texts = set()
        for costly in (False, True):
            ids = ids_alike(len(messages), costly)
            items = [Item(i, m, counter.count_message(m)) for i, m in zip(ids, messages, strict=True)]
            text = compact_view(items, policy, ctx, **run).summary.text  # type: ignore[arg-type]
            for number, entry_id in enumerate(ids):
                text = text.replace(entry_id, f"<{number}>")
            texts.add(text)
        assert len(texts) == 1, budget


def forty_steps() -> list[Message]:
    """40 commands (every fourth failing), a few asks: more than a small summary holds."""
    messages: list[Message] = [user("run every step")]
    for n in range(40):
        messages += [bash(f"c{n}", f"make step_{n:02d} TARGET=build/{n}" + " -j4" * (n % 3)),
                     tool_result(f"c{n}", f"line of output {n}\n" * (30 + 7 * (n % 5))
                                 + (f"error: step {n} broke in src/mod_{n}/file_{n}.py" if n % 4 == 0 else ""))]
        if n % 7 == 0:
            messages.append(user(f"also check file_{n}.py please"))
    messages += [assistant("All steps ran. Next I will look at helperFunction_3."), user("thanks, now the docs")]
    return assign_ids(messages)


def test_every_list_the_budget_cut_ends_with_its_ref_even_when_the_budget_is_tight() -> None:
    from ctxwin.compaction.extractive.fit import WHAT
    from ctxwin.compaction.extractive.sections import SLUGS

    span = forty_steps()
    counter = counter_for("claude-sonnet-4-5")
    cuts = 0
    for budget in (550, 800, 1_200, 2_000):  # (below ~500 tokens even the notes may not all fit)
        summary = SUMMARIZER.summarize(span, budget_tokens=budget, counter=counter)
        cut = [key for key in summary.details["omitted"] if key in WHAT]
        cuts += len(cut)
        for key in cut:
            assert f'recall("entry:{span[-1].id}#{SLUGS[key]}")' in summary.text, (budget, key)
        assert summary.tokens <= budget and summary.text.startswith("## State of the work")
    assert cuts >= 8
