"""Sleep-time consolidation (issue 25): notes and session logs become a short, current, sourced
MEMORY.md and wiki pages; a second run is a no-op; a flush written meanwhile is kept; the model path
(over real HTTP, the scripted fake provider) gives the same layout; the lock, hand edits, the
scheduler, the refs."""

from __future__ import annotations

import json
import re
import threading
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ctxwin.cli.main import app
from ctxwin.errors import InputError, SessionLockedError
from ctxwin.memory import MemoryIndex, MemoryTools, daily_notes, resolve_ref
from ctxwin.memory.consolidate import ModelExtractor, SleepConfig, SleepTime, consolidate, parse_entry
from ctxwin.memory.consolidate.dates import resolve
from ctxwin.memory.consolidate.run import STATE_DIR, STATE_FILE
from ctxwin.memory.tools import parse_file_ref
from ctxwin.messages import Message, assistant, user
from ctxwin.providers.base import RetryPolicy
from ctxwin.providers.openai import OpenAIChatClient
from ctxwin.store import Session
from ctxwin.testing.fake_provider import FakeProvider
from ctxwin.testing.scripted import Reply, server_error

REF = re.compile(r"\[((?:memory/[^\]\s]+\.md:\d+(?:-\d+)?)|(?:entry:[^\]\s]+@[^\]\s]+))\]")


# --------------------------------------------------------------------------------------------------
# The multi-session fixture: a preference changed, a decision reversed, a task opened and closed,
# a value changed, relative dates; notes and two ctxwin sessions.


def note(root: Path, day: str, text: str) -> None:
    path = root / "memory" / f"{day}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def session(root: Path, name: str, day: str, messages: list[Message]) -> None:
    with Session.open(root / ".ctxwin" / "sessions" / name) as log:
        for n, message in enumerate(messages):
            log.append("message", message.to_dict(), timestamp=f"{day}T10:{n:02d}:00.000000Z")


def fixture(root: Path) -> Path:
    note(root, "2026-11-02", "# 2026-11-02\n\n"
         "- The user prefers tabs for indentation.\n"
         "- Decided to use PostgreSQL for the session store, because several workers share it.\n"
         "- TODO: migrate the CI to GitHub Actions.\n"
         "- The release is next Friday.\n"
         "- Alice owns the billing service.\n")
    session(root, "chat-0001", "2026-11-10", [
        user("Actually I now prefer spaces over tabs for indentation."),
        assistant("Noted, I will indent with spaces."),
        user("Remember that the staging port is 8443."),
        assistant("Got it."),
    ])
    note(root, "2026-11-15", "## Notes before compaction, 18:20\n\n## Decisions\n"
         "- Reversed the store decision: use SQLite instead of PostgreSQL, because the store runs on one laptop.\n\n"
         "## Goal\n"
         "- Done: migrated the CI to GitHub Actions.\n"
         "- Meeting with Dana tomorrow about the billing API.\n"
         "- The user prefers spaces over tabs for indentation.\n")
    session(root, "chat-0002", "2026-11-20", [
        user("The staging port is now 9443."),
        assistant("I decided to pin Python 3.12 because the CI image ships it."),
    ])
    return root


def bullets(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith("- ")]


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))
            if p.is_file() and "lock" not in p.name}


def tools(root: Path) -> MemoryTools:
    return MemoryTools(root, MemoryIndex.open(":memory:"), sessions_root=root / ".ctxwin" / "sessions")


def test_memory_states_only_current_values_with_history_in_the_wiki(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    report = consolidate(root)
    memory = (root / "MEMORY.md").read_text()
    wiki = root / "memory" / "wiki"
    assert report.sessions_read == ["chat-0001", "chat-0002"] and len(report.notes_read) == 2
    assert len(memory) <= 12_000

    # A preference changed: only the new one in MEMORY.md, the old one in the wiki's history, both dated.
    preferences = [line for line in bullets(memory) if "indentation" in line]
    assert len(preferences) == 1 and "prefers spaces over tabs" in preferences[0]
    assert "memory/2026-11-02.md:3" not in memory
    history = (wiki / "preferences.md").read_text().split("## History")[1]
    assert re.search(r"The user prefers tabs for indentation\. \(stated 2026-11-02, superseded 2026-11-10", history)

    # A decision reversed.
    decisions = [line for line in bullets(memory) if "store" in line]
    assert len(decisions) == 1 and "SQLite instead of PostgreSQL" in decisions[0]
    history = (wiki / "decisions.md").read_text().split("## History")[1]
    assert "Decided to use PostgreSQL" in history and "superseded 2026-11-15" in history

    # A value changed (in a session log): 9443 current, 8443 kept as history.
    assert "9443" in memory and "8443" not in memory
    assert "8443" in (wiki / "project.md").read_text().split("## History")[1]

    # A task opened and closed: gone from the open list, kept with both days.
    assert "GitHub Actions" not in memory
    tasks = (wiki / "tasks.md").read_text()
    assert "## Open" not in tasks
    assert re.search(r"\[x\] Migrate the CI to GitHub Actions\. \(opened 2026-11-02, done 2026-11-15\)", tasks)

    # Relative dates made absolute against the day they were written.
    assert "The release is on 2026-11-06." in memory  # "next Friday", written on Monday 2026-11-02
    assert "Meeting with Dana on 2026-11-16 about the billing API." in memory
    assert not re.search(r"\b(tomorrow|yesterday|next friday)\b", memory, re.I)

    # The assistant's decision (a session entry) is in, with its entry ref.
    assert re.search(r"pin Python 3\.12 .*\[entry:[0-9a-f]{8}@chat-0002\]", memory)


def test_every_line_is_sourced_and_every_ref_resolves(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    consolidate(root)
    memory_tools = tools(root)
    pages = sorted((root / "memory" / "wiki").glob("*.md"))
    texts = [(root / "MEMORY.md").read_text(), *(p.read_text() for p in pages)]
    checked = 0
    for text in texts:
        for line in text.split("\n"):
            if not line.strip() or line.startswith(("#", "<!--")):
                continue
            refs = REF.findall(line)
            assert refs, f"a line without a source: {line!r}"
            words = {w.lower() for w in re.findall(r"[A-Za-z]{5,}", line.split(" (")[0])}
            for ref in refs:
                out = memory_tools.run("memory_get", {"path": ref})
                assert not out.is_error and out.text.strip(), (ref, out.text)
                got = {w.lower() for w in re.findall(r"[A-Za-z]{5,}", out.text)}
                assert words & got, f"{ref} resolves to {out.text!r}, which is not where {line!r} came from"
                checked += 1
    assert checked >= 15


def test_a_second_run_with_no_new_input_changes_no_byte(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    first = consolidate(root)
    assert first.written
    before = snapshot(root)
    second = consolidate(root)
    assert not second.changed and second.units == 0 and second.merge.added == 0
    assert snapshot(root) == before  # bytes and mtimes: not even rewritten with the same bytes


def test_new_input_is_merged_from_the_watermark(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    consolidate(root)
    note(root, "2026-11-20", "- From now on the user prefers tabs again for indentation, not spaces.\n")
    report = consolidate(root)
    assert report.notes_read == ["2026-11-20.md"] and report.units == 1 and report.sessions_read == []
    memory = (root / "MEMORY.md").read_text()
    current = next(line for line in bullets(memory) if "indentation" in line)
    assert current.startswith("- From now on the user prefers tabs")
    history = (root / "memory" / "wiki" / "preferences.md").read_text().split("## History")[1]
    assert "superseded 2026-11-20" in history and "superseded 2026-11-10" in history


def test_since_rereads_without_counting_twice(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    consolidate(root)
    before = snapshot(root)
    report = consolidate(root, since="2026-11-01")
    assert report.units > 0 and report.merge.skipped == report.observations and report.merge.added == 0
    assert {k: v[0] for k, v in snapshot(root).items() if "state" not in k} == \
        {k: v[0] for k, v in before.items() if "state" not in k}


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    before = snapshot(root)
    report = consolidate(root, dry_run=True)
    assert "MEMORY.md" in report.would_write and not report.written
    assert "SQLite instead of PostgreSQL" in report.memory_text
    assert snapshot(root) == before and not (root / "memory" / STATE_DIR).exists()


def test_memory_md_stays_under_the_cap_by_rank(tmp_path: Path) -> None:
    root = tmp_path
    for day in range(1, 29):
        note(root, f"2026-10-{day:02d}", "".join(
            f"- Service svc{day}-{n} listens on port {8000 + day * 10 + n} behind proxy{n}.\n" for n in range(12)))
    note(root, "2026-10-28", "- The user prefers pnpm over npm.\n")
    report = consolidate(root, max_chars=3_000)
    memory = (root / "MEMORY.md").read_text()
    assert len(memory) <= 3_000 and report.wiki_only > 0
    assert "prefers pnpm over npm" in memory  # a preference outranks the many project facts
    project = (root / "memory" / "wiki" / "project.md").read_text()
    assert len(bullets(project)) == report.current - 1  # every current fact is in the wiki
    assert "svc28" in memory and "svc1-" not in memory  # the recent before the old


# --------------------------------------------------------------------------------------------------
# Concurrency: the lock, and a flush appended while a consolidation runs


def blocking_model(started: threading.Event, release: threading.Event) -> Any:
    """A scripted model that waits, inside the consolidation's model call, until the test releases it;
    then names the first statement's fact."""

    def answer(request: Any) -> Reply:
        started.set()
        release.wait(30)
        first = re.search(r"^\[1\] \S+ \(\S+\) (.*)$", request.last_user_text, re.M)
        facts = [{"n": 1, "kind": "note", "text": first.group(1) if first else "x", "key": None, "replaces": [],
                  "done": False}]
        return Reply(json.dumps(facts))

    return answer


def test_a_flush_written_during_a_consolidation_is_kept(tmp_path: Path) -> None:
    root = tmp_path
    note(root, "2026-11-20", "# 2026-11-20\n\n- The user prefers dark mode in every editor.\n")
    started, release = threading.Event(), threading.Event()
    with FakeProvider(model=blocking_model(started, release)) as fake:
        client = OpenAIChatClient(fake.openai_base_url, "test-key", "gpt-test")
        result: dict[str, Any] = {}
        extractor = ModelExtractor(client)
        worker = threading.Thread(target=lambda: result.update(report=consolidate(root, extractor=extractor)))
        worker.start()
        assert started.wait(30), "the consolidation reached its model call"
        # Meanwhile: the pre-compaction flush appends to the very note being consolidated...
        noon = datetime(2026, 11, 20, 12, tzinfo=UTC).timestamp()  # 2026-11-20 in every time zone within 11 h
        flush = daily_notes(root, clock=lambda: noon)
        path = flush([user("Remember: the staging database is pg-staging-02 on port 6432.")])
        assert path == root / "memory" / "2026-11-20.md"  # the very note being consolidated
        note(root, "2026-11-20", "- The user now prefers light mode in every editor.\n")
        # ...and a second consolidation is refused by the lock, changing nothing.
        with pytest.raises(SessionLockedError, match="being consolidated"):
            consolidate(root)
        release.set()
        worker.join(30)
    flushed = path.read_text()
    assert "pg-staging-02" in flushed and "6432" in flushed  # nothing of the flush lost or overwritten
    assert "light mode" not in (root / "MEMORY.md").read_text()  # written after the watermark: next run's
    report = consolidate(root)
    memory = (root / "MEMORY.md").read_text()
    assert "pg-staging-02" in memory and "light mode" in memory and "dark mode" not in memory
    assert report.units >= 2


# --------------------------------------------------------------------------------------------------
# The model path: same layout, over real HTTP; failures fall back to the rules


def facts_model(request: Any) -> Reply:
    """A scripted model that names one fact per statement, as a model would."""
    out = []
    for match in re.finditer(r"^\[(\d+)\] \S+ \((\S+)\) (.*)$", request.last_user_text, re.M):
        n, text = int(match.group(1)), match.group(3)
        low = text.lower()
        kind = ("task" if "todo" in low or "done" in low else "preference" if "prefer" in low else
                "decision" if "decid" in low or "revers" in low else "project" if "port" in low or "owns" in low
                else "event" if "release" in low or "meeting" in low else "note")
        replaces = ["tabs"] if "spaces over tabs" in low else ["PostgreSQL"] if "instead of postgresql" in low else []
        key = "staging port" if "staging port" in low else None
        out.append({"n": n, "kind": kind, "text": re.sub(r"^(?:TODO|Done):\s*", "", text), "key": key,
                    "replaces": replaces, "done": low.startswith("done")})
    return Reply("Here are the facts:\n" + json.dumps(out))


def test_model_path_gives_the_same_layout_over_real_http(tmp_path: Path) -> None:
    rules_root = fixture(tmp_path / "rules")
    model_root = fixture(tmp_path / "model")
    consolidate(rules_root)
    with FakeProvider(model=facts_model) as fake:
        extractor = ModelExtractor(OpenAIChatClient(fake.openai_base_url, "test-key", "gpt-test"), batch_chars=400)
        report = consolidate(model_root, extractor=extractor)
        assert len(fake.requests) == extractor.calls >= 2  # batched
    assert report.extractor == "model:gpt-test" and not report.problems

    def layout(root: Path) -> tuple[list[str], list[str]]:
        files = [*sorted(str(p.relative_to(root)) for p in (root / "memory" / "wiki").glob("*.md")), "MEMORY.md"]
        headings = [line for line in (root / "MEMORY.md").read_text().split("\n") if line.startswith("#")]
        return files, headings

    assert layout(model_root)[0] == layout(rules_root)[0]
    memory = (model_root / "MEMORY.md").read_text()
    assert "9443" in memory and "8443" not in memory and "SQLite instead of PostgreSQL" in memory
    assert "2026-11-16" in memory and "tomorrow" not in memory  # dates resolved after the model too
    assert all(REF.search(line) for line in bullets(memory))
    before = snapshot(model_root)
    assert not consolidate(model_root, extractor=extractor).changed and snapshot(model_root) == before


def test_model_failures_fall_back_to_the_rules(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    with FakeProvider(model=lambda request: server_error()) as fake:
        client = OpenAIChatClient(fake.openai_base_url, "test-key", "gpt-test", retry=RetryPolicy(attempts=1))
        extractor = ModelExtractor(client, batch_chars=300, max_failures=2)
        report = consolidate(root, extractor=extractor)
    assert extractor.calls == 2 and len(report.problems) >= 3  # the breaker opened after two failures
    assert "ProviderError" in report.problems[0] and "rules used" in report.problems[-1]
    assert "SQLite instead of PostgreSQL" in (root / "MEMORY.md").read_text()


def test_the_model_breaker_and_its_problems_are_one_runs(tmp_path: Path) -> None:
    # One ModelExtractor serves every run of a SleepTime (a chat, a proxy): an outage that opened the
    # breaker in one run must not keep the model out of every later run, nor its problems be reported
    # again by each of them.
    root = fixture(tmp_path)
    down = threading.Event()
    down.set()
    with FakeProvider(model=lambda request: server_error() if down.is_set() else facts_model(request)) as fake:
        client = OpenAIChatClient(fake.openai_base_url, "test-key", "gpt-test", retry=RetryPolicy(attempts=1))
        extractor = ModelExtractor(client, batch_chars=300, max_failures=2)
        first = consolidate(root, extractor=extractor)
        assert extractor.calls == 2 and any("rules used" in p for p in first.problems)
        down.clear()  # the provider is back
        note(root, "2026-11-21", "- The staging port is now 10443.\n")
        second = consolidate(root, extractor=extractor)
    assert extractor.calls == 3 and second.problems == []  # the model read the new note; nothing of the outage
    assert "10443" in (root / "MEMORY.md").read_text()


def test_a_model_fact_citing_no_statement_is_dropped() -> None:
    from ctxwin.memory.consolidate.extract import Unit
    from ctxwin.memory.consolidate.llm import parse_answer

    unit = Unit("The staging port is 9443.", date(2026, 11, 20), "memory/2026-11-20.md:3")
    answer = json.dumps([{"n": 1, "kind": "project", "text": "The staging port is 9443."},
                         {"n": 7, "kind": "project", "text": "An invented fact."},
                         {"n": 1, "kind": "nonsense", "text": "x"}])
    assert [o.text for o in parse_answer(answer, [unit])] == ["The staging port is 9443."]
    with pytest.raises(ValueError):
        parse_answer("I could not find any facts.", [unit])


# --------------------------------------------------------------------------------------------------
# Hand edits, refs, the CLI, the scheduler


def test_hand_edits_of_memory_md_are_kept_as_a_note(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    consolidate(root)
    path = root / "MEMORY.md"
    path.write_text(path.read_text() + "- The on-call rotation changes every Monday at 09:00.\n")
    report = consolidate(root)
    assert len(report.archived) == 1 and report.archived[0].startswith("memory/archive/MEMORY-")
    archived = (root / report.archived[0]).read_text()
    assert "on-call rotation" in archived and "SQLite" not in archived  # only the lines no run wrote
    assert re.search(r"on-call rotation .*\[memory/archive/MEMORY-[\d-]+-[0-9a-f]{8}\.md:\d+\]", path.read_text())
    assert not consolidate(root).changed


def test_refs_parse_and_resolve(tmp_path: Path) -> None:
    assert parse_file_ref("memory/2026-11-30.md:12-14") == ("memory/2026-11-30.md", 12, 3)
    entry = parse_entry("entry:0a1b2c3d#call_1@chat-0002")
    assert entry is not None and entry.ref == "entry:0a1b2c3d#call_1" and entry.session == "chat-0002"
    root = fixture(tmp_path)
    with Session.open(root / ".ctxwin" / "sessions" / "chat-0002", readonly=True) as log:
        first = next(iter(log))
        assert resolve_ref(log, f"entry:{first.id}@chat-0002") == "The staging port is now 9443."  # type: ignore[arg-type]
        with pytest.raises(InputError, match="not of chat-0002"):
            resolve_ref(log, f"entry:{first.id}@chat-0001")  # type: ignore[arg-type]
    out = tools(root).run("memory_get", {"path": f"entry:{first.id}@chat-0002"})
    assert out.text == "The staging port is now 9443."
    out = tools(root).run("memory_get", {"path": "memory/2026-11-02.md:3-4"})
    assert out.text.split("\n") == ["- The user prefers tabs for indentation.",
                                    "- Decided to use PostgreSQL for the session store, because several workers "
                                    "share it."]
    assert tools(root).run("memory_get", {"path": "entry:ffffffff@nowhere"}).is_error


def test_cli_consolidate(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["memory", "consolidate", "--workspace", str(root), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["dry_run"] and "MEMORY.md" in data["would_write"] and "SQLite" in data["memory_md"]
    result = runner.invoke(app, ["memory", "consolidate", "--workspace", str(root)])
    assert result.exit_code == 0 and "wrote:" in result.output
    result = runner.invoke(app, ["memory", "consolidate", "--workspace", str(root)])
    assert result.exit_code == 0 and "nothing new" in result.output
    result = runner.invoke(app, ["memory", "consolidate", "--workspace", str(root), "--since", "yesterday"])
    assert result.exit_code == 2 and "YYYY-MM-DD" in result.output


def test_sleep_time_runs_after_a_session_and_when_idle(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    sleep = SleepTime(root, SleepConfig(idle_seconds=0.05))
    try:
        assert sleep.runs == 0 and not (root / "MEMORY.md").exists()  # nothing before any activity
        sleep.activity()
        assert sleep.wait_for(1, timeout=30)
        assert (root / "MEMORY.md").exists() and sleep.reports[-1].written
        note(root, "2026-11-21", "- Bob is our release manager.\n")
        sleep.session_ended()
        assert sleep.wait_for(2, timeout=30)
        assert "Bob is our release manager" in (root / "MEMORY.md").read_text()
    finally:
        sleep.close()
    assert not sleep.errors


def test_sleep_time_skips_while_another_process_consolidates(tmp_path: Path) -> None:
    from ctxwin.store.locks import FileLock

    root = fixture(tmp_path)
    (root / "memory" / STATE_DIR).mkdir(parents=True)
    held = FileLock(root / "memory" / STATE_DIR / "lock")
    held.acquire(0, "held by the test", "")
    sleep = SleepTime(root, SleepConfig())
    try:
        sleep.session_ended()
        assert sleep.wait_for(1, timeout=30)
        assert sleep.skipped == 1 and sleep.runs == 0 and not (root / "MEMORY.md").exists()
    finally:
        held.release()
        sleep.close()


def test_a_session_ended_during_a_run_gets_a_run_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One worker's runs follow each other: a session that ends while a run is under way is consolidated
    by a second run, never skipped (`ctxwin chat` keeps one SleepTime for all its sessions so)."""
    from ctxwin.memory.consolidate import schedule

    started, release, calls = threading.Event(), threading.Event(), []
    real = schedule.consolidate

    def slow_first(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("lock_timeout"))
        if len(calls) == 1:
            started.set()
            assert release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(schedule, "consolidate", slow_first)
    sleep = SleepTime(fixture(tmp_path), SleepConfig())
    try:
        sleep.session_ended()
        assert started.wait(30)
        sleep.session_ended()  # the second session ends while the first run holds the lock
        release.set()
        assert sleep.wait_for(2, timeout=30)
    finally:
        sleep.close()
    assert len(calls) == 2 and sleep.runs == 2 and sleep.skipped == 0 and not sleep.errors


def test_the_cli_says_what_to_do_while_another_consolidation_runs(tmp_path: Path) -> None:
    from ctxwin.store.locks import FileLock

    root = fixture(tmp_path)
    (root / "memory" / STATE_DIR).mkdir(parents=True)
    held = FileLock(root / "memory" / STATE_DIR / "lock")
    held.acquire(0, "held by the test", "")
    try:
        result = CliRunner().invoke(app, ["memory", "consolidate", "--workspace", str(root)])
    finally:
        held.release()
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "is being consolidated" in said and "run again once it has finished" in said
    assert "lock timeout" not in said  # no option of that name: the hint names only what a CLI user can do


def test_a_damaged_state_says_what_to_do(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    consolidate(root)
    (root / "memory" / STATE_DIR / STATE_FILE).write_text("{not json")
    with pytest.raises(InputError, match="move it aside"):
        consolidate(root)


# --------------------------------------------------------------------------------------------------
# Properties and dates


def test_relative_dates_are_written_as_dates() -> None:
    monday = date(2026, 11, 2)
    assert resolve("Deploy tomorrow", monday).text == "Deploy on 2026-11-03"
    assert resolve("by tomorrow", monday).text == "by 2026-11-03"
    assert resolve("I saw it yesterday.", monday).text == "I saw it on 2026-11-01."
    assert resolve("Yesterday we shipped", monday).text == "On 2026-11-01 we shipped"
    assert resolve("next Monday", monday).text == "on 2026-11-09"
    assert resolve("last Friday", monday).text == "on 2026-10-30"
    assert resolve("in 3 days", monday).text == "on 2026-11-05"
    assert resolve("two weeks ago", monday).text == "the week of 2026-10-19"
    assert resolve("last month", monday).text == "in October 2026"
    assert resolve("next week", monday).text == "the week of 2026-11-09"
    assert resolve("last weekend", monday).text == "the weekend of 2026-10-31"
    assert resolve("last year", monday).text == "in 2025"
    assert resolve("Yesterday and again yesterday", monday).text == "On 2026-11-01 and again on 2026-11-01"
    assert resolve("on Friday", monday).text == "on Friday"  # which Friday is not knowable: left as written


STATEMENTS = [
    "The user prefers tabs for indentation.", "The user now prefers spaces over tabs for indentation.",
    "Decided to use PostgreSQL for the store.", "Use SQLite instead of PostgreSQL for the store.",
    "TODO: write the parser tests.", "Done: wrote the parser tests.", "The staging port is 8443.",
    "The staging port is now 9443.", "Alice owns the billing service.", "The demo is tomorrow.",
    "We met Carol yesterday.", "Wow, great!", "Deploy with `make deploy`.",
]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 9), st.sampled_from(STATEMENTS)), min_size=1, max_size=25),
       st.integers(1, 3))
def test_any_notes_idempotent_sourced_and_incremental(tmp_path_factory: Any, lines: list[tuple[int, str]],
                                                      runs: int) -> None:
    """Whatever the notes, consolidated in one run or in several as they grow: every line is sourced to
    an existing note line, and a run with nothing new changes nothing."""
    root = tmp_path_factory.mktemp("ws")
    ordered = sorted(lines, key=lambda item: item[0])
    step = max(1, len(ordered) // runs)
    for start in range(0, len(ordered), step):
        for day, text in ordered[start:start + step]:
            note(root, f"2026-11-{day:02d}", f"- {text}\n")
        consolidate(root)
    memory = (root / "MEMORY.md").read_text() if (root / "MEMORY.md").exists() else ""
    for line in bullets(memory):
        ref = REF.search(line)
        assert ref, line
        path, first, _ = parse_file_ref(ref.group(1))
        source = (root / path).read_text().split("\n")[first - 1]
        assert source.startswith("- ")
    state = json.loads((root / "memory" / STATE_DIR / STATE_FILE).read_text()) if memory else {"facts": []}
    current = {f["text"] for f in state["facts"] if f["status"] == "current"}
    for fact in state["facts"]:  # nothing superseded or done is stated as current
        if fact["status"] != "current" and fact["text"] not in current:
            assert not any(f"{mark}{fact['text']} {end}" in memory for mark in ("- ", "- [ ] ") for end in "[(")
    before = snapshot(root)
    assert not consolidate(root).changed and snapshot(root) == before


def test_a_curated_memory_md_from_before_is_kept_as_a_note(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    curated = "# My memory\n\n## Preferences\n\n- Always run the tests with -x before a commit.\n"
    (root / "MEMORY.md").write_text(curated)
    report = consolidate(root)
    assert len(report.archived) == 1
    archived = (root / report.archived[0]).read_text()
    assert "## Preferences" in archived and "Always run the tests with -x" in archived
    memory = (root / "MEMORY.md").read_text()
    assert re.search(r"Always run the tests with -x before a commit\. .*\[memory/archive/MEMORY-", memory)
    assert "SQLite instead of PostgreSQL" in memory and not consolidate(root).changed


def test_facts_left_out_of_memory_md_are_found_by_memory_search(tmp_path: Path) -> None:
    root = tmp_path
    for day in range(1, 29):
        note(root, f"2026-10-{day:02d}", "".join(
            f"- Service svc{day}-{n} listens on port {8000 + day * 10 + n} behind proxy{n}.\n" for n in range(12)))
    report = consolidate(root, max_chars=2_000)
    assert "svc2-7" not in (root / "MEMORY.md").read_text() and report.wiki_only > 0
    out = tools(root).run("memory_search", {"query": "which port does svc2-7 listen on"})
    hits = out.details["results"]
    assert any(h["path"] == "memory/wiki/project.md" and "8027" in h["snippet"] for h in hits), hits


def test_a_damaged_session_or_a_link_out_of_the_folder_is_not_read(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    broken = root / ".ctxwin" / "sessions" / "chat-0009"
    broken.mkdir()
    (broken / "session.jsonl").write_text("this is not a session\n")
    secret = tmp_path / "secret.md"
    secret.write_text("- The root password is hunter2.\n")
    (root / "memory" / "2026-11-25.md").symlink_to(secret)
    report = consolidate(root)
    assert any("chat-0009" in p for p in report.problems)
    assert report.sessions_read == ["chat-0001", "chat-0002"]
    assert "hunter2" not in (root / "MEMORY.md").read_text() and "2026-11-25.md" not in report.notes_read


def test_cli_consolidate_with_a_model(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    with FakeProvider(model=facts_model) as fake:
        result = CliRunner().invoke(app, ["memory", "consolidate", "--workspace", str(root), "--json", "--model",
                                          "gpt-test", "--api", "openai", "--base-url", fake.openai_base_url,
                                          "--api-key", "test-key"])
        assert result.exit_code == 0, result.output
        assert len(fake.requests) >= 1
    data = json.loads(result.output)
    assert data["extractor"] == "model:gpt-test" and not data["problems"] and "MEMORY.md" in data["written"]


def test_a_preference_with_a_word_swapped_replaces_the_old_one(tmp_path: Path) -> None:
    root = tmp_path
    note(root, "2026-11-01", "- The user prefers dark mode in the editor.\n- The user prefers short answers.\n"
         "- Alice owns the billing service.\n- Ana: I love camping with my kids.\n")
    note(root, "2026-11-09", "- The user prefers light mode in the editor.\n- Alice owns the search service.\n"
         "- Ana: I love painting with my kids.\n")
    consolidate(root)
    memory = (root / "MEMORY.md").read_text()
    assert "light mode" in memory and "dark mode" not in memory and "short answers" in memory
    assert "billing service" in memory and "search service" in memory  # two owners' facts, both true
    assert "camping" in memory and "painting" in memory  # a speaker's likes add up
    history = (root / "memory" / "wiki" / "preferences.md").read_text().split("## History")[1]
    assert "dark mode in the editor. (stated 2026-11-01, superseded 2026-11-09" in history


def test_a_fact_the_agent_reads_back_counts_as_used(tmp_path: Path) -> None:
    from ctxwin.messages import ToolCall

    root = fixture(tmp_path)
    consolidate(root)
    ref = "memory/2026-11-02.md:7"  # Alice owns the billing service.
    session(root, "chat-0003", "2026-11-21", [
        user("Who owns billing?"),
        assistant("Let me check my memory.", ToolCall("c1", "memory_get", {"path": ref})),
    ])
    report = consolidate(root)
    assert report.merge.used == 1
    state = json.loads((root / "memory" / STATE_DIR / STATE_FILE).read_text())
    assert [f["uses"] for f in state["facts"] if ref in f["refs"]] == [1]
    assert consolidate(root, since="2026-11-01").merge.used == 0  # the same call read again: counted once


def test_sleep_time_is_never_idle_during_work(tmp_path: Path) -> None:
    root = fixture(tmp_path)
    sleep = SleepTime(root, SleepConfig(idle_seconds=0.02, after_session=False))
    try:
        sleep.begin()
        assert not sleep.wait_for(1, timeout=0.3)  # a turn longer than idle_seconds: no run meanwhile
        sleep.end()
        assert sleep.wait_for(1, timeout=30) and (root / "MEMORY.md").exists()
    finally:
        sleep.close()


# --------------------------------------------------------------------------------------------------
# Bad input: one clear error (exit 2), nothing written or created, nothing lost


def everything(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every path under `root`, folders and lock files included, with its bytes and mtime (a lock file's
    mtime left out: taking the lock touches it)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"",
                                       0 if p.name == "lock" else p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


BAD_NOTES = {
    "binary": (b"- The user prefers \x00\x01\x02 binary\n" + bytes(range(256)) * 4 + b"\n", "binary data"),
    "utf8": (b"- The caf\xe9 opens at 9 and the user prefers it.\n", "not valid UTF-8 (line 1"),
    "huge": (b"- The user prefers " + b"x" * 200_000 + b"\n", "line 1 of memory/2026-11-21.md is 200,019 characters"),
}


@pytest.mark.parametrize("first_run", [True, False], ids=["first-run", "later-run-with-hand-edits"])
@pytest.mark.parametrize("bad", sorted(BAD_NOTES))
def test_a_note_that_is_no_text_is_refused_and_nothing_is_written(bad: str, first_run: bool, tmp_path: Path) -> None:
    root = fixture(tmp_path)
    if not first_run:
        consolidate(root)
        with open(root / "MEMORY.md", "a") as handle:  # a hand edit: a run would archive it before the rest
            handle.write("- The user's cat is called Miso.\n")
    data, said = BAD_NOTES[bad]
    (root / "memory" / "2026-11-21.md").write_bytes(data)
    before = everything(root)
    with pytest.raises(InputError, match=re.escape(said)) as raised:
        consolidate(root)
    assert "memory/2026-11-21.md" in raised.value.message and "nothing was written" in (raised.value.hint or "")
    assert everything(root) == before
    result = CliRunner().invoke(app, ["memory", "consolidate", "--workspace", str(root)])
    assert result.exit_code == 2 and said in " ".join(result.output.split()) and everything(root) == before
    (root / "memory" / "2026-11-21.md").write_text("- Carol is our new designer.\n")  # fixed: it goes through
    assert consolidate(root).changed and "Carol is our new designer" in (root / "MEMORY.md").read_text()


def test_a_folder_that_is_no_workspace_is_refused_and_nothing_is_created(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "README.txt").write_text("not a workspace\n")
    before = everything(tmp_path)
    with pytest.raises(InputError, match="is not a workspace"):
        consolidate(tmp_path)
    result = CliRunner().invoke(app, ["memory", "consolidate", "--workspace", str(tmp_path)])
    assert result.exit_code == 2 and "is not a workspace" in result.output
    assert everything(tmp_path) == before
    (tmp_path / "memory").mkdir()  # a memory folder, even empty, makes it one
    assert not consolidate(tmp_path).changed
