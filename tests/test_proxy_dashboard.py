"""The proxy's live page: the pure aggregation (hypothesis), the incremental cache over each store kind,
the routes through Starlette's TestClient, and the page in a real headless Chromium served by a real
uvicorn on 127.0.0.1 over sessions written by real ContextEngines."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.testclient import TestClient

from ctxwin import ContextEngine
from ctxwin.errors import InputError
from ctxwin.messages import Message, Text, ToolCall, ToolResult, text_message
from ctxwin.proxy.config import ProxyConfig
from ctxwin.proxy.dashboard import (
    Chunk,
    Dashboard,
    JsonlSource,
    MemorySource,
    dashboard_routes,
    render_page,
    source_for,
)
from ctxwin.proxy.session_stats import (
    Record,
    SessionSummary,
    Unreadable,
    estimate_usd,
    kept_for_summary,
    records_of,
    session_report,
    summarize,
)
from ctxwin.store import Session
from ctxwin.store.entries import CustomEntry, LabelEntry, PinEntry, ProxyRequestEntry
from ctxwin.store.jsonl import JsonlSessionLog
from store_backends import LOG_BACKENDS, unique_id
from test_browser import WINDOW, chromium, decode_png, run_browser  # noqa: F401  (chromium: the fixture)

EVIL = '<img src=x onerror="document.body.dataset.pwned=1">'
"""A session id as hostile traffic could send it: it must show as text and never run."""
TOKEN = "s3cret&token"  # what a proxy started with --auth-token guards its pages with
TOKEN_Q = quote(TOKEN, safe="")
JSON_FIELDS = {"session", "requests", "tokens_received", "tokens_forwarded", "cache_prefix_reuse", "compactions",
               "recoveries", "invalid_forwarded"}


# --------------------------------------------------------------------------------------------------
# The pure aggregation


def proxy_entries() -> st.SearchStrategy[ProxyRequestEntry]:
    return st.builds(
        ProxyRequestEntry,
        api=st.sampled_from(["anthropic", "openai-chat", "openai-responses"]),
        model=st.sampled_from(["claude-sonnet-4-5", "gpt-5", "some-local-model", ""]),
        status=st.sampled_from([200, 200, 200, 400, 429, 502]),
        tokens_received=st.integers(0, 300_000),
        tokens_forwarded=st.integers(0, 300_000),
        cache_prefix_reuse=st.floats(0.0, 1.0),
        compactions=st.integers(0, 3),
        recoveries=st.integers(0, 2),
        recall_calls=st.integers(0, 4),
        invalid_forwarded=st.booleans(),
        streamed=st.booleans(),
        input_tokens=st.none() | st.integers(0, 300_000),
        added_ms=st.floats(0.0, 50.0),
    )


OTHER_ENTRIES = st.sampled_from([PinEntry("e1"), LabelEntry("mark", "e2"), CustomEntry("custom", {"type": "x"}),
                                 Unreadable("custom", "broken")])


@st.composite
def record_lists(draw: st.DrawFn) -> list[Record]:
    entries = draw(st.lists(proxy_entries() | OTHER_ENTRIES, max_size=25))
    start = 1_790_000_000
    gaps = draw(st.lists(st.integers(0, 900), min_size=len(entries), max_size=len(entries)))
    out, now = [], start
    for index, (entry, gap) in enumerate(zip(entries, gaps, strict=True)):
        now += gap
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(now))
        out.append(Record(f"e{index:04d}", stamp, entry))
    return out


def proxies(records: list[Record]) -> list[ProxyRequestEntry]:
    return [r.entry for r in records if isinstance(r.entry, ProxyRequestEntry)]


@given(record_lists())
@settings(max_examples=100, deadline=None)
def test_summary_sums_the_proxy_records(records: list[Record]) -> None:
    summary = summarize("s", records)
    requests = proxies(records)
    assert summary.requests == len(requests)
    assert summary.tokens_received == sum(r.tokens_received for r in requests)
    assert summary.tokens_forwarded == sum(r.tokens_forwarded for r in requests)
    assert summary.compactions == sum(r.compactions for r in requests)
    assert summary.recoveries == sum(r.recoveries for r in requests)
    assert summary.recall_calls == sum(r.recall_calls for r in requests)
    assert summary.invalid_forwarded == sum(r.invalid_forwarded for r in requests)
    assert summary.errors == sum(r.status >= 400 for r in requests)
    assert summary.unreadable == sum(isinstance(r.entry, Unreadable) for r in records)
    assert 0.0 <= summary.cache_prefix_reuse <= 1.0
    reused = sum(r.tokens_forwarded * r.cache_prefix_reuse for r in requests)
    assert summary.cache_prefix_reuse * summary.tokens_forwarded == pytest.approx(reused, rel=1e-9, abs=1e-6)
    assert summary.saved_usd == pytest.approx(summary.baseline_usd - summary.forwarded_usd)
    assert summary.baseline_usd >= 0 and summary.forwarded_usd >= 0
    # What the cache keeps of a log is enough: the summary of the kept records is the same.
    assert summarize("s", [r for r in records if kept_for_summary(r)]) == summary
    json.dumps(summary.to_dict(), allow_nan=False)  # the JSON twin always serializes


@given(record_lists(), record_lists())
@settings(max_examples=50, deadline=None)
def test_sums_add_up_over_a_log_read_in_two_parts(first: list[Record], second: list[Record]) -> None:
    """The cache appends what a later read found to what it had: counts are additive over the split."""
    whole, a, b = summarize("s", first + second), summarize("s", first), summarize("s", second)
    for name in ("requests", "tokens_received", "tokens_forwarded", "compactions", "recoveries",
                 "invalid_forwarded", "recall_calls", "errors"):
        assert getattr(whole, name) == getattr(a, name) + getattr(b, name), name


@given(st.lists(OTHER_ENTRIES, max_size=10))
def test_a_session_with_no_proxy_records_sums_to_zero(entries: list[Any]) -> None:
    records = [Record(f"e{i}", "2026-12-01T10:00:00Z", e) for i, e in enumerate(entries)]
    summary = summarize("quiet", records)
    assert summary.requests == summary.tokens_received == summary.tokens_forwarded == 0
    assert summary.saved_usd == summary.baseline_usd == summary.forwarded_usd == 0.0
    assert summary.last_seen is None and summary.models == ()
    assert summarize("empty", []) == SessionSummary("empty")


@given(record_lists())
@settings(max_examples=50, deadline=None)
def test_failed_requests_are_not_priced(records: list[Record]) -> None:
    timed = [(None, r) for r in proxies(records)]
    billed = [(None, r) for r in proxies(records) if r.status < 400]
    assert estimate_usd(timed) == estimate_usd(billed)


def test_money_by_hand() -> None:
    """Sonnet ($3 per million input tokens), three requests a minute apart, Anthropic's cache: reads at
    0.1x, writes at 1.25x. Unmanaged, each request re-reads the previous one and writes the rest."""
    requests = [ProxyRequestEntry("anthropic", "claude-sonnet-4-5", 200, 10_000 * n, 6_000 * n, 0.8) for n in (1, 2, 3)]
    money = estimate_usd([(1_790_000_000.0 + 60 * i, r) for i, r in enumerate(requests)])
    baseline_units = 10_000 * 1.25 + (10_000 * 0.1 + 10_000 * 1.25) + (20_000 * 0.1 + 10_000 * 1.25)
    forwarded_units = 6_000 * 1.25 + (9_600 * 0.1 + 2_400 * 1.25) + (14_400 * 0.1 + 3_600 * 1.25)
    assert money.baseline_usd == pytest.approx(baseline_units * 3 / 1e6)
    assert money.forwarded_usd == pytest.approx(forwarded_units * 3 / 1e6)
    assert money.prices_known
    # Past the cache lifetime nothing is read: the same requests 10 minutes apart cost more.
    apart = estimate_usd([(1_790_000_000.0 + 600 * i, r) for i, r in enumerate(requests)])
    assert apart.baseline_usd > money.baseline_usd and apart.forwarded_usd > money.forwarded_usd
    assert not estimate_usd([(None, ProxyRequestEntry("anthropic", "mystery-model", 200, 10, 5, 0.0))]).prices_known


# --------------------------------------------------------------------------------------------------
# Sessions written by real engines


def agent_turns(engine: ContextEngine, turns: int, *, api: str = "anthropic", lines: int = 150,
                statuses: dict[int, int] | None = None) -> None:
    """A tool-using conversation; after each turn the request ctxwin would forward is recorded as the
    proxy records it."""
    first = text_message("user", "fix the failing test in src/app.py")
    engine.append(first)
    history = engine.counter.count_message(first)  # what the agent sends: its whole history
    for turn in range(turns):
        call = ToolCall(f"c{turn}", "read", {"path": f"src/file{turn}.py"})
        engine.append(Message(role="assistant", blocks=(Text(f"reading file {turn}"), call)))
        body = "".join(f"line {j} of file {turn}: some code here = {j * turn}\n" for j in range(lines))
        result = Message(role="tool", blocks=(ToolResult(f"c{turn}", (Text(body),), name="read"),))
        asked = Message(role="assistant", blocks=(Text(f"reading file {turn}"), call))
        engine.append(result)
        history += engine.counter.count_message(asked) + engine.counter.count_message(result)
        prepared = engine.prepare()
        compactions = sum(1 for e in prepared.events if e.stage == "compaction")
        engine.note(ProxyRequestEntry(
            api, engine.model or "", (statuses or {}).get(turn, 200), history, prepared.tokens,
            prepared.stable_prefix_tokens / prepared.tokens if prepared.tokens else 0.0, compactions=compactions,
            streamed=turn % 2 == 0, added_ms=1.5, upstream_ms=250.0))


def jsonl_session(root: Path, folder: str, session_id: str, turns: int, **kwargs: Any) -> None:
    log = JsonlSessionLog(root / folder, session_id=session_id, durability="batch")
    try:
        agent_turns(ContextEngine(session=log, model="claude-sonnet-4-5", **kwargs), turns)
    finally:
        log.close()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A JSONL store: a long masked session, a compacted one, one whose id is an HTML injection, one
    stored under a folder named like one, and a session with no proxy records."""
    root = tmp_path / "sessions"
    jsonl_session(root, "masked", "masked", 30)
    jsonl_session(root, "compacted", "compacted", 30, window=60_000)
    jsonl_session(root, "evil", EVIL, 3)
    jsonl_session(root, EVIL, "named-evil", 2)
    with Session.open(root / "quiet") as log:
        log.append("message", text_message("user", "hello").to_dict())
    return root


def client(source: Any) -> TestClient:
    return TestClient(Starlette(routes=dashboard_routes(source, min_rescan_s=0)))


def test_jsonl_sessions_json(store: Path) -> None:
    rows = client(source_for(ProxyConfig(upstream="http://127.0.0.1:9", store_dir=store))).get(
        "/ctxwin/sessions.json").json()
    by_id = {row["session"]: row for row in rows}
    assert set(by_id) == {"masked", "compacted", EVIL, "named-evil", "quiet"}
    for row in rows:
        assert row.keys() >= JSON_FIELDS
    masked, compacted = by_id["masked"], by_id["compacted"]
    assert masked["requests"] == 30 and compacted["requests"] == 30
    assert compacted["compactions"] >= 1 and masked["compactions"] == 0
    assert masked["tokens_forwarded"] < masked["tokens_received"]
    assert masked["saved_usd"] > 0 and masked["prices_known"]
    assert by_id["quiet"]["requests"] == 0 and by_id["quiet"]["last_seen"] is None
    assert by_id["named-evil"]["url"] == "/ctxwin/sessions/" + quote(EVIL, safe="")
    # The numbers are the sums of what the engines recorded, read back from the files.
    with Session.open(store / "masked", readonly=True) as log:
        recorded = [r.entry for r in records_of(log) if isinstance(r.entry, ProxyRequestEntry)]
    assert masked["tokens_received"] == sum(r.tokens_received for r in recorded)


def test_session_report_shows_masking_with_its_refs(store: Path) -> None:
    web = client(JsonlSource(store))
    report = web.get("/ctxwin/session.json", params={"id": "masked"}).json()
    assert report["requests_total"] == 30 and len(report["requests"]) == 30
    assert [r["n"] for r in report["requests"]] == list(range(1, 31))
    assert report["decisions_total"] >= 1
    masked = [m for d in report["decisions"] if d["stage"] == "mask" for m in d["masked"]]
    assert masked and all(ref.startswith("entry:") for m in masked for ref in m["refs"])
    first = masked[0]
    assert first["refs"][0] in first["now"]  # the placeholder names the ref that brings it back
    with Session.open(store / "masked", readonly=True) as log:
        engine = ContextEngine(session=log, model="claude-sonnet-4-5")
        assert "line 3 of file" in engine.recall(first["refs"][0])  # and the ref does bring it back
    compacted = web.get("/ctxwin/session.json", params={"id": "compacted"}).json()
    assert compacted["compactions_total"] >= 1
    assert all(ref.startswith("entry:") for c in compacted["compactions"] for ref in c["refs"])


def test_pages_escape_what_came_from_traffic(store: Path) -> None:
    web = client(JsonlSource(store))
    page = web.get("/ctxwin/sessions/" + quote(EVIL, safe=""))
    assert page.status_code == 200
    assert EVIL not in page.text and "&lt;img src=x onerror=&quot;" in page.text
    assert "script-src 'sha256-" in page.headers["content-security-policy"]
    assert "unsafe-inline" not in page.headers["content-security-policy"]
    assert web.get("/ctxwin/session.json", params={"id": EVIL}).json()["summary"]["session"] == "named-evil"
    # One pass: a value that looks like a placeholder is not substituted again.
    assert render_page("<p>{{a}} {{b}}</p>", a="{{b}}", b="<i>") == "<p>{{b}} &lt;i&gt;</p>"


def test_routes_for_what_is_not_there(store: Path, tmp_path: Path) -> None:
    web = client(JsonlSource(store))
    assert web.get("/ctxwin/sessions/nope").status_code == 404
    assert not Dashboard(JsonlSource(store)).has("..")
    with pytest.raises(InputError, match="no session"):
        JsonlSource(store).read("../sessions/masked")
    missing = web.get("/ctxwin/session.json", params={"id": "nope"})
    assert missing.status_code == 404 and "sessions.json" in missing.json()["hint"]
    assert web.get("/ctxwin/session.json").status_code == 404
    assert web.post("/ctxwin/sessions.json").status_code == 405
    # A store folder the proxy has not made yet is an empty dashboard, not an error.
    assert client(JsonlSource(tmp_path / "not-yet")).get("/ctxwin/sessions.json").json() == []


def test_the_json_answers_304_when_nothing_changed(store: Path) -> None:
    web = client(JsonlSource(store))
    first = web.get("/ctxwin/sessions.json")
    again = web.get("/ctxwin/sessions.json", headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    jsonl_session(store, "later", "later", 1)
    changed = web.get("/ctxwin/sessions.json", headers={"If-None-Match": first.headers["etag"]})
    assert changed.status_code == 200 and "later" in {r["session"] for r in changed.json()}


def test_malformed_proxy_records_are_counted_not_fatal(tmp_path: Path) -> None:
    with Session.open(tmp_path / "s" / "odd") as log:
        log.append("custom", {"type": "proxy_request", "api": "anthropic", "model": "m", "status": 200,
                              "tokens_received": "lots", "tokens_forwarded": 1, "cache_prefix_reuse": 0.5})
        log.append("custom", {"type": "proxy_request"})  # no fields at all
        log.append("custom", ProxyRequestEntry("anthropic", "m", 200, 10, 5, 0.5).to_payload())
    [row] = client(JsonlSource(tmp_path / "s")).get("/ctxwin/sessions.json").json()
    assert row["requests"] == 1 and row["unreadable"] == 2 and row["tokens_received"] == 10


class CountingSource:
    """The JSONL source, with a note of every read (what the cache asked for)."""

    def __init__(self, root: Path) -> None:
        self.inner = JsonlSource(root)
        self.reads: list[tuple[str, int]] = []

    def stamps(self) -> dict[str, Any]:
        return self.inner.stamps()

    def read(self, key: str, start: int = 0) -> Chunk:
        self.reads.append((key, start))
        return self.inner.read(key, start)


def test_the_cache_reads_only_what_was_appended(store: Path) -> None:
    source = CountingSource(store)
    dashboard = Dashboard(source, min_rescan_s=0)
    before = {s.session: s for s in dashboard.summaries()}
    assert sorted(k for k, _ in source.reads) == sorted(["masked", "compacted", "evil", EVIL, "quiet"])
    assert all(start == 0 for _, start in source.reads)
    source.reads.clear()
    assert dashboard.summaries() == list(dashboard.summaries()) and source.reads == []  # nothing changed
    with Session.open(store / "masked", readonly=True) as log:
        seen = len(log)
    with JsonlSessionLog(store / "masked") as log:
        log.append("custom", ProxyRequestEntry("anthropic", "claude-sonnet-4-5", 200, 1_000, 400, 0.5).to_payload())
    after = {s.session: s for s in dashboard.summaries()}
    assert source.reads == [("masked", seen)]
    assert after["masked"].requests == before["masked"].requests + 1
    assert after["masked"].tokens_forwarded == before["masked"].tokens_forwarded + 400
    assert after["compacted"] == before["compacted"]
    # The full read agrees with the incremental one.
    assert Dashboard(JsonlSource(store)).summaries() == dashboard.summaries()


def test_a_session_made_again_is_read_again_from_the_start(store: Path) -> None:
    dashboard = Dashboard(JsonlSource(store), min_rescan_s=0)
    assert {s.session: s.requests for s in dashboard.summaries()}["masked"] == 30
    shutil.rmtree(store / "masked")  # deleted, then a shorter session under the same name
    jsonl_session(store, "masked", "masked", 2)
    assert {s.session: s.requests for s in dashboard.summaries()}["masked"] == 2
    shutil.rmtree(store / "compacted")
    assert "compacted" not in {s.session for s in dashboard.summaries()}


def test_a_broken_session_is_listed_with_its_problem(store: Path) -> None:
    (store / "broken").mkdir()
    (store / "broken" / "session.jsonl").write_bytes(b"this is not a header\n")
    rows = {r["session"]: r for r in client(JsonlSource(store)).get("/ctxwin/sessions.json").json()}
    assert "header" in rows["broken"]["problem"] or "session" in rows["broken"]["problem"]
    assert rows["masked"]["requests"] == 30  # the others are all there
    answer = client(JsonlSource(store)).get("/ctxwin/session.json", params={"id": "broken"})
    assert answer.status_code == 503 and answer.json()["error"]


def test_a_store_that_is_down_answers_503_and_says_why() -> None:
    web = client(source_for(ProxyConfig(upstream="http://127.0.0.1:9", postgres="postgresql://127.0.0.1:1/none")))
    answer = web.get("/ctxwin/sessions.json")
    assert answer.status_code == 503 and "PostgreSQL" in answer.json()["error"] and answer.json()["hint"]
    assert web.get("/ctxwin").status_code == 200  # the page loads, and shows the error it fetches


def test_a_large_store_is_read_over_several_looks_newest_first(store: Path) -> None:
    jsonl_session(store, "newest", "newest", 1)
    source = CountingSource(store)
    dashboard = Dashboard(source, min_rescan_s=60, scan_budget_s=0)  # time for one session per look
    rows, pending = dashboard.listing()
    assert [r.session for r in rows] == ["newest"] and pending == 5
    looks = 1
    while pending:
        rows, pending = dashboard.listing()  # pending sessions are read at once, whatever min_rescan_s says
        looks += 1
    assert looks == 6 and len(source.reads) == 6
    assert dashboard.summaries() == Dashboard(JsonlSource(store)).summaries()
    web = client(JsonlSource(store))
    assert web.get("/ctxwin/sessions.json").headers["x-ctxwin-pending"] == "0"


def test_a_listing_is_reused_for_a_moment(store: Path) -> None:
    now = [100.0]
    source = CountingSource(store)
    dashboard = Dashboard(source, min_rescan_s=1.0, clock=lambda: now[0])
    dashboard.summaries()
    jsonl_session(store, "new", "new", 1)
    assert "new" not in {s.session for s in dashboard.summaries()}
    now[0] += 1.0
    assert "new" in {s.session for s in dashboard.summaries()}


def test_memory_source_over_the_proxys_engines() -> None:
    engines: dict[str, ContextEngine] = {}
    web = client(source_for(ProxyConfig(upstream="http://127.0.0.1:9"), sessions=engines))
    assert web.get("/ctxwin/sessions.json").json() == []
    engines["a"] = ContextEngine(model="gpt-5")
    agent_turns(engines["a"], 4, api="openai-chat", statuses={3: 502})
    [row] = web.get("/ctxwin/sessions.json").json()
    assert row["requests"] == 4 and row["errors"] == 1 and row["apis"] == ["openai-chat"]
    agent_turns(engines["a"], 2, api="openai-chat")
    assert web.get("/ctxwin/sessions.json").json()[0]["requests"] == 6  # the mapping is read live
    report = web.get("/ctxwin/session.json", params={"id": "a"}).json()
    assert report["requests_total"] == 6
    assert MemorySource(engines).read("a", 0).count == len(engines["a"].session)
    with pytest.raises(InputError, match="in memory"):
        source_for(ProxyConfig(upstream="http://127.0.0.1:9"))


def test_session_report_caps_its_lists() -> None:
    records = [Record(f"e{i}", "2026-12-01T10:00:00Z", ProxyRequestEntry("anthropic", "m", 200, 10, 5, 0.5))
               for i in range(600)]
    report = session_report("big", records)
    assert report["requests_total"] == 600 and len(report["requests"]) == 500
    assert report["requests"][-1]["n"] == 600
    assert report["summary"]["requests"] == 600


@pytest.mark.postgres
def test_postgres_sessions(postgres_dsn: str) -> None:
    token = f"dash-{time.time_ns()}"
    for name, turns in ((f"{token}-a", 5), (f"{token}-{EVIL}", 2)):
        with Session.postgres(postgres_dsn, name) as log:
            agent_turns(ContextEngine(session=log, model="claude-sonnet-4-5"), turns)
    source = source_for(ProxyConfig(upstream="http://127.0.0.1:9", postgres=postgres_dsn))
    web = client(source)
    rows = {r["session"]: r for r in web.get("/ctxwin/sessions.json").json() if r["session"].startswith(token)}
    assert rows[f"{token}-a"]["requests"] == 5 and rows[f"{token}-{EVIL}"]["requests"] == 2
    with Session.postgres(postgres_dsn, f"{token}-a", lock_timeout=5) as log:
        log.append("custom", ProxyRequestEntry("anthropic", "claude-sonnet-4-5", 200, 100, 50, 0.0).to_payload())
    rows = {r["session"]: r for r in web.get("/ctxwin/sessions.json").json()}
    assert rows[f"{token}-a"]["requests"] == 6
    report = web.get("/ctxwin/session.json", params={"id": f"{token}-{EVIL}"}).json()
    assert report["requests_total"] == 2
    page = web.get("/ctxwin/sessions/" + quote(f"{token}-{EVIL}", safe=""))
    assert page.status_code == 200 and EVIL not in page.text


def test_records_skip_messages(store: Path) -> None:
    with Session.open(store / "masked", readonly=True) as log:
        kinds = {e.kind for e in log}
        records = list(records_of(log))
    assert "message" in kinds and records
    assert not any(isinstance(r.entry, Message) for r in records)


@pytest.mark.parametrize("backend", LOG_BACKENDS)
def test_reading_by_kind_is_reading_everything_then_filtering(backend: str, tmp_path: Path,
                                                             request: pytest.FixtureRequest) -> None:
    """The store's by-kind read the page relies on (`entries_of_kinds`), on both durable backends."""
    if backend == "jsonl":
        def opened(**kw: Any) -> Any:
            return JsonlSessionLog(tmp_path / "s", **kw)
    else:
        dsn, name = request.getfixturevalue("postgres_dsn"), unique_id("kinds")

        def opened(**kw: Any) -> Any:
            return Session.postgres(dsn, name, **kw)
    with opened() as log:
        agent_turns(ContextEngine(session=log, model="claude-sonnet-4-5"), 12)
        log.branch(log.path()[3].id)  # a branch: positions are append order, not the path
        log.append("custom", ProxyRequestEntry("anthropic", "m", 200, 1, 1, 0.0).to_payload())
    with opened(readonly=True) as log:
        everything = list(log.entries())
        for kinds in (("custom",), ("custom", "decision", "compaction"), ("message",), ("nothing",)):
            for start in (0, 1, 17, len(everything) - 1, len(everything) + 5):
                assert list(log.entries_of_kinds(kinds, start)) == [e for e in everything[start:] if e.kind in kinds]
    if backend == "postgres":
        from ctxwin.store.postgres import postgres_session_counts

        assert postgres_session_counts(dsn)[name] == len(everything)


# --------------------------------------------------------------------------------------------------
# In a real browser, served by a real uvicorn


@contextlib.contextmanager
def serving(app: Starlette) -> Iterator[str]:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def usd(value: float) -> str:
    """The page's money format."""
    sign, size = ("\u2212" if value < 0 else ""), abs(value)
    return f"{sign}${size:.2f}" if size >= 1 else f"{sign}${size:.4f}"


@pytest.mark.slow
def test_dashboard_in_chromium(chromium: str, store: Path, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    rows = {r.session: r for r in Dashboard(JsonlSource(store)).summaries()}
    routes = dashboard_routes(source_for(ProxyConfig(upstream="http://127.0.0.1:9", store_dir=store)),
                              refresh_s=0.5, min_rescan_s=0)
    polls: list[str] = []
    app = Starlette(routes=routes)

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        """The app behind a token as the proxy guards it (the `x-ctxwin-token` header, or `?token=` on
        a page), counting the page's polls; after the first, a new session arrives in the store."""
        if scope["type"] == "http":
            query = parse_qs(scope["query_string"].decode()).get("token", [""])[0]
            given = dict(scope["headers"]).get(b"x-ctxwin-token", b"").decode() or query
            if given != TOKEN:
                await Response("wrong token", 401)(scope, receive, send)
                return
        await app(scope, receive, send)
        if scope["type"] == "http" and scope["path"] == "/ctxwin/sessions.json":
            polls.append(scope["path"])
            if len(polls) == 1:
                jsonl_session(store, "arrived", "arrived-later", 1)

    with serving(counting) as base:
        done = run_browser(chromium, tmp_path / "profile", "--virtual-time-budget=4000", "--dump-dom",
                           f"{base}/ctxwin?token={TOKEN_Q}")
        dom = done.stdout.decode("utf-8")
        shot = tmp_path / "dashboard.png"
        run_browser(chromium, tmp_path / "profile2", "--virtual-time-budget=4000", f"--screenshot={shot}",
                    f"--window-size={WINDOW[0]},{WINDOW[1]}", f"{base}/ctxwin?token={TOKEN_Q}")
        session_dom = run_browser(chromium, tmp_path / "profile3", "--virtual-time-budget=4000", "--dump-dom",
                                  f"{base}/ctxwin/sessions/masked?token={TOKEN_Q}").stdout.decode("utf-8")
        session_shot = tmp_path / "session.png"
        run_browser(chromium, tmp_path / "profile4", "--virtual-time-budget=4000", f"--screenshot={session_shot}",
                    f"--window-size={WINDOW[0]},{WINDOW[1]}", f"{base}/ctxwin/sessions/compacted?token={TOKEN_Q}")
    assert 'data-loaded="1"' in dom, done.stderr.decode("utf-8", "replace")[-2000:]
    # It polls, and shows what arrived meanwhile; politely: at 0.5 s a few in Chromium's 4 s of virtual
    # time (which is not exact: fetches let it run on), never the thousands a loop without a pause makes.
    assert 2 <= len(polls) <= 40, len(polls)
    assert ">arrived-later<" in dom
    assert f'href="/ctxwin/sessions/masked?token={TOKEN_Q}"' in dom  # the token travels with the links
    assert "data-pwned" not in dom  # the injected handler never ran
    assert "&lt;img src=x onerror=" in dom  # it is shown, as text
    for name in ("masked", "compacted", "named-evil", "quiet"):
        assert f">{name}<" in dom, name
    masked = rows["masked"]
    for number in (masked.tokens_received, masked.tokens_forwarded):
        assert f">{number:,}<" in dom
    assert f">{usd(masked.saved_usd)}<" in dom
    assert f">{rows['compacted'].compactions:,}<" in dom
    total = sum(r.tokens_received for r in Dashboard(JsonlSource(store)).summaries())
    assert f">{total:,}<" in dom  # the totals card
    assert 'data-loaded="1"' in session_dom and "<svg" in session_dom and "polyline" in session_dom
    assert "entry:" in session_dom and "Recover it with recall(" in session_dom
    for path in (shot, session_shot):
        pixels = decode_png(path.read_bytes())
        assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
        assert len({bytes(p) for p in pixels.reshape(-1, 3)[::13]}) > 50, f"{path.name}: a blank page?"
