"""The proxy's live page: `/ctxwin` (a self-contained HTML dashboard), `/ctxwin/sessions.json` (its JSON
twin), and a report page per session (`/ctxwin/sessions/{key}`, JSON at `/ctxwin/session.json?id=KEY`).

Everything is read from the session store the proxy writes (each request it handles is a
`ProxyRequestEntry` in the session's log), never from a worker's memory, so whichever worker answers
shows every worker's sessions. Mount it with `dashboard_routes(source_for(config, sessions=...))`.

Reading is incremental: a source says, per session, a stamp that changes when its log grows (the
JSONL file's size and mtime, the PostgreSQL entry count, an in-memory log's length), and only the
entries appended since the last look are read. The pages fetch their JSON every few seconds; a
listing is reused for `MIN_RESCAN_S` however many pages poll it, and answers 304 when unchanged.

The money estimate (`estimate_usd`), per session, priced with `ctxwin.tokens.prices` (the table and the
prompt-caching model the evaluation uses):
- *without ctxwin*: each request as the agent sent it (`tokens_received`), its cached prefix taken as the
  whole previous request of the same model (an agent's history only grows; where the agent rewound or
  compacted this overstates its cache hits, so the saving is, if anything, understated);
- *with ctxwin*: what went upstream (`tokens_forwarded`), its cached prefix `cache_prefix_reuse` of it;
- requests the caller saw fail (status >= 400) are billed nothing in either. The difference is saved.
"""

from __future__ import annotations

import base64
import hashlib
import html
import itertools
import json
import math
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from ctxwin.errors import CtxwinError, InputError
from ctxwin.pipeline.view import recall_ref
from ctxwin.proxy.config import ProxyConfig
from ctxwin.store.base import Entry
from ctxwin.store.entries import (
    KINDS,
    CompactionEntry,
    DecisionEntry,
    LogEntry,
    ProxyRequestEntry,
    RecoveryEntry,
    epoch,
    parse,
)
from ctxwin.store.jsonl import SESSION_FILE
from ctxwin.store.session import Session, is_session_dir
from ctxwin.tokens.prices import CallTokens, call_costs, pricing_for

PREFIX = "/ctxwin"
REFRESH_S = 5.0  # how often an open page fetches its JSON again (doubling after failures, up to BACKOFF_MAX_S)
BACKOFF_MAX_S = 60.0
MIN_RESCAN_S = 1.0  # a listing of the store is reused this long, however many pages poll it
SCAN_BUDGET_S = 2.0  # a listing reads changed sessions this long at most; the rest on the next poll
DETAIL_REQUESTS = 500  # the newest requests a session's page lists
DETAIL_EVENTS = 200  # the newest compactions, decisions and recoveries it lists
EXCERPT_CHARS = 400  # text shown of a summary or a placeholder
REFS_SHOWN = 20  # refs listed per compaction or decision (the rest counted)
REPORTS_KEPT = 8  # session pages kept built (rebuilt when their log changes)
TEMPLATE = "dashboard.html"
SCHEME_OF_API = {"anthropic": "anthropic", "openai-chat": "openai", "openai-responses": "openai"}
"""Which prompt-caching scheme prices a request, by the API the caller spoke."""


# --------------------------------------------------------------------------------------------------
# Records: the typed entries the page reads


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An entry whose payload does not have its kind's shape (kept in the log; counted, not shown)."""

    kind: str
    error: str


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of a session's log, typed, with its id and time. Message entries are never read
    into records: the page shows what ctxwin did, not the conversation."""

    entry_id: str
    timestamp: str
    entry: LogEntry | Unreadable


def records_of(entries: Iterable[Entry]) -> Iterator[Record]:
    """The typed records of stored entries, messages skipped. An entry that cannot be read (a payload
    without its kind's shape, a proxy record with a field of the wrong type) becomes `Unreadable`:
    one odd line never hides the rest of a session."""
    for stored in entries:
        if stored.kind == "message":
            continue
        try:
            entry: LogEntry | Unreadable = parse(stored.kind, stored.payload, entry_id=stored.id)
        except CtxwinError as error:
            entry = Unreadable(stored.kind, error.message)
        if isinstance(entry, ProxyRequestEntry) and (problem := _proxy_problem(entry)) is not None:
            entry = Unreadable(stored.kind, f"log entry {stored.id} (proxy_request) is malformed: {problem}")
        yield Record(stored.id, stored.timestamp, entry)


_COUNTS = ("status", "tokens_received", "tokens_forwarded", "compactions", "recoveries", "recall_calls")
_OPTIONAL_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
_REALS = ("cache_prefix_reuse", "added_ms", "upstream_ms")


def _proxy_problem(entry: ProxyRequestEntry) -> str | None:
    """Why a proxy record cannot be summed (a field of the wrong type: written by hand, or by another
    program), or None. The record's class does not check its payload's types; the sums need them."""
    for name in _COUNTS:
        value = getattr(entry, name)
        if type(value) is not int or value < 0:  # (bool is an int subclass: refused too)
            return f"{name} is {value!r}, not a count"
    for name in _OPTIONAL_COUNTS:
        value = getattr(entry, name)
        if value is not None and (type(value) is not int or value < 0):
            return f"{name} is {value!r}, not a count"
    for name in _REALS:
        value = getattr(entry, name)
        if type(value) not in (int, float) or not math.isfinite(value):
            return f"{name} is {value!r}, not a number"
    if type(entry.api) is not str or type(entry.model) is not str:
        return "api and model must be text"
    return None


def kept_for_summary(record: Record) -> bool:
    """What `summarize` looks at: the rest can be dropped from a cache without changing a summary."""
    return isinstance(record.entry, ProxyRequestEntry | Unreadable)


# --------------------------------------------------------------------------------------------------
# Aggregation (pure)


@dataclass(frozen=True, slots=True)
class Money:
    """A session's estimated input cost, without and with ctxwin (`estimate_usd`)."""

    baseline_usd: float  # what the requests would have cost sent as the agent sent them
    forwarded_usd: float  # what the forwarded requests cost
    prices_known: bool  # every model was in the price table (else priced at the default price)

    @property
    def saved_usd(self) -> float:
        return self.baseline_usd - self.forwarded_usd


def estimate_usd(requests: Sequence[tuple[float | None, ProxyRequestEntry]]) -> Money:
    """The estimated input cost of a session's requests (time, record) with and without ctxwin (see the
    module docstring for the model)."""
    streams: dict[str, tuple[list[CallTokens], list[CallTokens]]] = {}
    previous: dict[tuple[str, str], int] = {}
    known: dict[tuple[str, str | None], bool] = {}
    for when, request in requests:
        if request.status >= 400:
            continue
        scheme = SCHEME_OF_API.get(request.api, "anthropic")
        model = request.model or None
        if (scheme, model) not in known:
            known[scheme, model] = pricing_for(model, scheme).known
        baseline, forwarded = streams.setdefault(scheme, ([], []))
        received = max(0, request.tokens_received)
        sent = max(0, request.tokens_forwarded)
        reuse = min(max(request.cache_prefix_reuse, 0.0), 1.0)
        baseline.append(CallTokens(received, previous.get((scheme, request.model), 0), when, model))
        forwarded.append(CallTokens(sent, round(reuse * sent), when, model))
        previous[(scheme, request.model)] = received
    baseline_usd = forwarded_usd = 0.0
    for scheme, (baseline, forwarded) in streams.items():
        pricing = pricing_for(None, scheme)
        baseline_usd += sum(c.usd for c in call_costs(baseline, pricing))
        forwarded_usd += sum(c.usd for c in call_costs(forwarded, pricing))
    return Money(baseline_usd, forwarded_usd, all(known.values()))


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One row of the dashboard: the totals of a session's proxy requests."""

    session: str
    requests: int = 0
    tokens_received: int = 0
    tokens_forwarded: int = 0
    cache_prefix_reuse: float = 0.0
    """Share of all forwarded tokens that repeated the previous forwarded prefix (weighted by tokens)."""
    compactions: int = 0
    recoveries: int = 0
    invalid_forwarded: int = 0
    recall_calls: int = 0
    errors: int = 0  # requests the caller saw fail (status >= 400)
    streamed: int = 0
    saved_usd: float = 0.0
    baseline_usd: float = 0.0
    forwarded_usd: float = 0.0
    prices_known: bool = True
    models: tuple[str, ...] = ()
    apis: tuple[str, ...] = ()
    first_seen: str | None = None
    last_seen: str | None = None
    added_ms_mean: float = 0.0
    added_ms_max: float = 0.0
    upstream_ms_mean: float = 0.0
    reported_input_tokens: int = 0  # usage the provider reported
    reported_output_tokens: int = 0
    reported_cache_read_tokens: int = 0
    reported_cache_write_tokens: int = 0
    unreadable: int = 0  # entries of the log that could not be read
    problem: str | None = None  # the session could not be read at all (why)
    url: str = ""  # its report page

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["models"], out["apis"] = list(self.models), list(self.apis)
        return out


def summarize(session: str, records: Iterable[Record], *, url: str = "") -> SessionSummary:
    """The totals of a session's proxy requests, in log order. Records of other kinds are ignored, so
    a session with none (or no records at all) sums to zero."""
    requests: list[tuple[float | None, ProxyRequestEntry]] = []
    first = last = None
    unreadable = 0
    for record in records:
        if isinstance(record.entry, Unreadable):
            unreadable += 1
        elif isinstance(record.entry, ProxyRequestEntry):
            requests.append((epoch(record.timestamp), record.entry))
            first = record.timestamp if first is None or record.timestamp < first else first
            last = record.timestamp if last is None or record.timestamp > last else last
    entries = [r for _, r in requests]
    forwarded = sum(r.tokens_forwarded for r in entries)
    reused = sum(r.tokens_forwarded * min(max(r.cache_prefix_reuse, 0.0), 1.0) for r in entries)
    money = estimate_usd(requests)
    count = len(entries)
    return SessionSummary(
        session=session,
        requests=count,
        tokens_received=sum(r.tokens_received for r in entries),
        tokens_forwarded=forwarded,
        cache_prefix_reuse=reused / forwarded if forwarded > 0 else 0.0,
        compactions=sum(r.compactions for r in entries),
        recoveries=sum(r.recoveries for r in entries),
        invalid_forwarded=sum(1 for r in entries if r.invalid_forwarded),
        recall_calls=sum(r.recall_calls for r in entries),
        errors=sum(1 for r in entries if r.status >= 400),
        streamed=sum(1 for r in entries if r.streamed),
        saved_usd=money.saved_usd,
        baseline_usd=money.baseline_usd,
        forwarded_usd=money.forwarded_usd,
        prices_known=money.prices_known,
        models=tuple(dict.fromkeys(r.model for r in entries)),
        apis=tuple(dict.fromkeys(r.api for r in entries)),
        first_seen=first,
        last_seen=last,
        added_ms_mean=sum(r.added_ms for r in entries) / count if count else 0.0,
        added_ms_max=max((r.added_ms for r in entries), default=0.0),
        upstream_ms_mean=sum(r.upstream_ms for r in entries) / count if count else 0.0,
        reported_input_tokens=sum(r.input_tokens or 0 for r in entries),
        reported_output_tokens=sum(r.output_tokens or 0 for r in entries),
        reported_cache_read_tokens=sum(r.cache_read_tokens or 0 for r in entries),
        reported_cache_write_tokens=sum(r.cache_write_tokens or 0 for r in entries),
        unreadable=unreadable,
        url=url,
    )


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _masked(entry_id: str, rendered: Any) -> dict[str, Any]:
    """One entry a decision re-rendered: the refs that recall what it was, and what the model sees now."""
    if rendered is None:
        return {"entry": entry_id, "refs": [recall_ref(entry_id)], "now": None}
    refs = [recall_ref(entry_id, r.call_id) for r in rendered.tool_results]
    refs += [recall_ref(entry_id, c.id) for c in rendered.tool_calls]
    shown = "\n".join([rendered.text, *(r.text for r in rendered.tool_results)]).strip()
    return {"entry": entry_id, "refs": refs or [recall_ref(entry_id)], "now": excerpt(shown)}


def session_report(session: str, records: Sequence[Record], *, url: str = "") -> dict[str, Any]:
    """What a session's page shows: its summary, its requests over time, and what ctxwin did to its
    context (compactions, decisions with the refs that recall what they masked, recoveries), newest
    last, each list capped (the totals say how many there were)."""
    requests, compactions, decisions, recoveries = [], [], [], []
    for number, record in enumerate(r for r in records if isinstance(r.entry, ProxyRequestEntry)):
        row = {"n": number + 1, "time": record.timestamp, "entry": record.entry_id, **record.entry.to_payload()}
        del row["type"]
        requests.append(row)
    for record in records:
        entry = record.entry
        if isinstance(entry, CompactionEntry):
            compactions.append({
                "entry": record.entry_id, "time": record.timestamp, "strategy": entry.strategy,
                "reason": entry.reason, "tokens_before": entry.tokens_before, "tokens_after": entry.tokens_after,
                "covered": len(entry.covered_ids), "first_kept": entry.first_kept_id,
                "refs": [recall_ref(i) for i in entry.covered_ids[:REFS_SHOWN]],
                "summary": excerpt(entry.summary)})
        elif isinstance(entry, DecisionEntry):
            masked = [_masked(i, m) for i, m in itertools.islice(entry.renders.items(), REFS_SHOWN)]
            decisions.append({
                "entry": record.entry_id, "time": record.timestamp, "stage": entry.stage,
                "entries": len(entry.renders), "masked": masked,
                "events": [{"action": str(e.get("action", "")), "reason": str(e.get("reason", "")),
                            "tokens_before": e.get("tokens_before"), "tokens_after": e.get("tokens_after")}
                           for e in entry.events if isinstance(e, Mapping)]})
        elif isinstance(entry, RecoveryEntry):
            recoveries.append({"entry": record.entry_id, "time": record.timestamp, "provider": entry.provider,
                               "window": entry.window, "observed_tokens": entry.observed_tokens,
                               "limit_tokens": entry.limit_tokens, "budget_scale": entry.budget_scale})
    return {
        "summary": summarize(session, records, url=url).to_dict(),
        "requests": requests[-DETAIL_REQUESTS:], "requests_total": len(requests),
        "compactions": compactions[-DETAIL_EVENTS:], "compactions_total": len(compactions),
        "decisions": decisions[-DETAIL_EVENTS:], "decisions_total": len(decisions),
        "recoveries": recoveries[-DETAIL_EVENTS:], "recoveries_total": len(recoveries),
    }


# --------------------------------------------------------------------------------------------------
# Sources: the store kinds


@dataclass(frozen=True, slots=True)
class Chunk:
    """What a source read of one session: its id, the records from entry `start` on, and how many
    entries the log holds now (where the next read starts)."""

    session_id: str
    records: list[Record]
    count: int


class DashboardSource(Protocol):
    """The sessions of one store, read through the store's public API."""

    def stamps(self) -> dict[str, Hashable]:
        """Every session, by key (what its page's URL names), with a stamp that changes whenever its log
        grows; the most recently active first where the store knows (they are read in this order)."""
        ...

    def read(self, key: str, start: int = 0) -> Chunk:
        """The session's records from entry `start` (append order) on. Raises `CtxwinError` for a
        session that cannot be read (it is listed with the reason)."""
        ...


READ_KINDS = tuple(kind for kind in KINDS if kind != "message")
"""What the page reads of a log: everything but the conversation."""


def _entries_from(log: Any, start: int) -> Iterator[Entry]:
    """The log's entries from position `start` on; the durable logs skip the messages' bytes by their
    index (an in-memory log is a list, read as it is)."""
    if hasattr(log, "entries_of_kinds"):
        return log.entries_of_kinds(READ_KINDS, start)
    return itertools.islice(iter(log), start, None)


class JsonlSource:
    """The sessions in a JSONL store folder (one sub-folder each, as `Session.open` makes them). A
    session's stamp is its log file's size, mtime and inode: an unchanged session costs one `stat`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def stamps(self) -> dict[str, Hashable]:
        found: list[tuple[str, tuple[int, int, int]]] = []
        try:
            folders = list(os.scandir(self.root))
        except FileNotFoundError:
            return {}  # nothing served yet: the proxy makes the folder with its first session
        for folder in folders:
            path = Path(folder.path)
            if not folder.is_dir(follow_symlinks=False) or not is_session_dir(path):
                continue
            try:
                info = os.lstat(path / SESSION_FILE)
            except FileNotFoundError:
                continue  # deleted as we looked
            found.append((folder.name, (info.st_size, info.st_mtime_ns, info.st_ino)))
        found.sort(key=lambda item: (-item[1][1], item[0]))  # the newest write first
        return dict(found)

    def read(self, key: str, start: int = 0) -> Chunk:
        folder = self.root / key
        if key in ("", ".", "..") or "/" in key or not is_session_dir(folder):
            raise InputError(f"no session {key!r} in {self.root}", "see /ctxwin for the sessions there are")
        with Session.open(folder, readonly=True) as log:
            return Chunk(log.session_id, list(records_of(_entries_from(log, start))), len(log))


class PostgresSource:
    """The sessions of a PostgreSQL store; a session's stamp is its entry count (one index probe)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def stamps(self) -> dict[str, Hashable]:
        from ctxwin.store.postgres import postgres_session_counts  # psycopg only when PostgreSQL is used

        return dict(postgres_session_counts(self.dsn))

    def read(self, key: str, start: int = 0) -> Chunk:
        with Session.postgres(self.dsn, key, readonly=True) as log:
            return Chunk(log.session_id, list(records_of(_entries_from(log, start))), len(log))


class MemorySource:
    """Sessions held in this process (the proxy with no store): a live mapping of session id to its
    engine or log, read as it is now. A session's stamp is its log's length."""

    def __init__(self, sessions: Mapping[str, Any]) -> None:
        self.sessions = sessions

    def _log(self, value: Any) -> Any:
        return getattr(value, "session", value)  # a ContextEngine keeps its log in `.session`

    def stamps(self) -> dict[str, Hashable]:
        return {str(key): len(self._log(value)) for key, value in list(self.sessions.items())}

    def read(self, key: str, start: int = 0) -> Chunk:
        value = self.sessions.get(key)
        if value is None:
            raise InputError(f"no session {key!r} in this proxy", "see /ctxwin for the sessions there are")
        log = self._log(value)
        count = len(log)
        entries = itertools.islice(_entries_from(log, start), max(0, count - start))
        return Chunk(str(getattr(log, "session_id", key)), list(records_of(entries)), count)


def source_for(config: ProxyConfig, *, sessions: Mapping[str, Any] | None = None) -> DashboardSource:
    """The source over the store `config` chose: PostgreSQL, a JSONL folder, or (neither) the proxy's
    own in-memory `sessions` (its live mapping of session id to engine or log)."""
    if config.postgres:
        return PostgresSource(config.postgres)
    if config.store_dir is not None:
        return JsonlSource(config.store_dir)
    if sessions is None:  # an always-empty page would hide the mistake
        raise InputError("a proxy that keeps its sessions in memory must show the dashboard its sessions",
                         "pass source_for(config, sessions=<the mapping of session id to engine>)")
    return MemorySource(sessions)


# --------------------------------------------------------------------------------------------------
# The cache over a source


@dataclass
class _Seen:
    stamp: Hashable
    count: int
    session_id: str
    records: list[Record] = field(default_factory=list)  # only what `summarize` reads
    summary: SessionSummary | None = None


def page_url(key: str) -> str:
    return f"{PREFIX}/sessions/{quote(key, safe='')}"


class Dashboard:
    """A source with memory: each look reads only what was appended since the last. Thread-safe (the
    routes run it in Starlette's thread pool)."""

    def __init__(self, source: DashboardSource, *, min_rescan_s: float = MIN_RESCAN_S,
                 scan_budget_s: float = SCAN_BUDGET_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.source = source
        self.min_rescan_s = min_rescan_s
        self.scan_budget_s = scan_budget_s
        self.clock = clock
        self.pending = 0
        """Sessions changed (or never read) that the last listing had no time left to read: a fresh
        worker over a large store shows the most recent sessions at once and the rest over the next
        polls, rather than making the first page wait for every log."""
        self._lock = threading.RLock()
        self._seen: dict[str, _Seen] = {}
        self._scanned_at = -math.inf
        self._listing: list[SessionSummary] = []
        self._reports: OrderedDict[str, tuple[Hashable, dict[str, Any]]] = OrderedDict()

    def summaries(self) -> list[SessionSummary]:
        """Every session of the store, the most recently active first."""
        with self._lock:
            if self.pending or self.clock() - self._scanned_at >= self.min_rescan_s:
                self._rescan()
            return self._listing

    def _rescan(self) -> None:
        stamps = self.source.stamps()
        for gone in self._seen.keys() - stamps.keys():
            del self._seen[gone]
        deadline = self.clock() + self.scan_budget_s
        due = [(key, stamp) for key, stamp in stamps.items()
               if (seen := self._seen.get(key)) is None or seen.stamp != stamp]
        self.pending = 0
        for done, (key, stamp) in enumerate(due):
            if done and self.clock() >= deadline:  # (at least one per look, so every look makes progress)
                self.pending = len(due) - done
                break
            self._seen[key] = self._catch_up(key, stamp, self._seen.get(key))
        rows = [seen.summary for seen in self._seen.values() if seen.summary is not None]
        self._listing = sorted(rows, key=lambda s: (s.last_seen or "", s.session), reverse=True)
        self._scanned_at = self.clock()

    def _catch_up(self, key: str, stamp: Hashable, seen: _Seen | None) -> _Seen:
        start = seen.count if seen is not None else 0
        try:
            chunk = self.source.read(key, start)
            if chunk.count < start:  # the log shrank (edited outside ctxwin): read it again from the start
                start, chunk = 0, self.source.read(key, 0)
        except CtxwinError as error:
            name = seen.session_id if seen is not None else key
            problem = SessionSummary(session=name, problem=str(error), url=page_url(key))
            return _Seen(stamp, start, name, seen.records if seen else [], problem)
        records = (seen.records if seen is not None and start else []) + [r for r in chunk.records
                                                                          if kept_for_summary(r)]
        return _Seen(stamp, chunk.count, chunk.session_id, records,
                     summarize(chunk.session_id, records, url=page_url(key)))

    def listing(self) -> tuple[list[SessionSummary], int]:
        """The summaries, and how many changed sessions are still to be read (see `pending`)."""
        with self._lock:
            rows = self.summaries()
            return rows, self.pending

    def has(self, key: str) -> bool:
        return key in self.source.stamps()

    def report(self, key: str) -> dict[str, Any] | None:
        """A session's page, or None when the store has no such session."""
        stamp = self.source.stamps().get(key)
        if stamp is None:
            return None
        with self._lock:
            kept = self._reports.get(key)
            if kept is not None and kept[0] == stamp:
                self._reports.move_to_end(key)
                return kept[1]
        chunk = self.source.read(key, 0)
        built = session_report(chunk.session_id, chunk.records, url=page_url(key))
        with self._lock:
            self._reports[key] = (stamp, built)
            self._reports.move_to_end(key)
            while len(self._reports) > REPORTS_KEPT:
                self._reports.popitem(last=False)
        return built


# --------------------------------------------------------------------------------------------------
# Pages and routes


def _template() -> str:
    return resources.files(__package__).joinpath(TEMPLATE).read_text("utf-8")


def _csp(template: str) -> str:
    """A policy that lets only the page's own inline script and style run (by their hashes) and fetch
    only from this origin: text from the traffic can never run, even if an escape were missed."""
    digest = [hashlib.sha256(m.encode("utf-8")).digest()
              for m in re.findall(r"<(?:script|style)>(.*?)</(?:script|style)>", template, re.S)]
    hashes = " ".join(f"'sha256-{base64.b64encode(d).decode()}'" for d in digest)
    return (f"default-src 'none'; script-src {hashes}; style-src {hashes}; connect-src 'self'; img-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def render_page(template: str, **values: str) -> str:
    """The template with each `{{name}}` replaced by its value, HTML-escaped, in one pass (a value is
    never scanned for placeholders again)."""
    return re.sub(r"\{\{(\w+)\}\}", lambda m: html.escape(values[m[1]], quote=True), template)


def _json(request: Request, data: Any, status: int = 200) -> Response:
    body = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    tag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
    headers = {"ETag": tag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if status == 200 and request.headers.get("if-none-match") == tag:
        return Response(status_code=304, headers=headers)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def dashboard_routes(source: DashboardSource, *, refresh_s: float = REFRESH_S, min_rescan_s: float = MIN_RESCAN_S,
                     scan_budget_s: float = SCAN_BUDGET_S) -> list[BaseRoute]:
    """`GET /ctxwin`, `/ctxwin/sessions.json`, `/ctxwin/sessions/{key}` and `/ctxwin/session.json?id=KEY`
    over `source`, for the proxy's app to mount. While a listing is still reading a large store,
    `/ctxwin/sessions.json` says how many sessions are left in its `X-Ctxwin-Pending` header."""
    dashboard = Dashboard(source, min_rescan_s=min_rescan_s, scan_budget_s=scan_budget_s)
    template = _template()
    headers = {"Content-Security-Policy": _csp(template), "X-Content-Type-Options": "nosniff",
               "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
    refresh_ms = str(int(refresh_s * 1000))

    def page(view: str, title: str, data_url: str, status: int = 200) -> HTMLResponse:
        text = render_page(template, view=view, title=title, data_url=data_url, refresh_ms=refresh_ms,
                           backoff_ms=str(int(BACKOFF_MAX_S * 1000)), home=PREFIX)
        return HTMLResponse(text, status_code=status, headers=headers)

    async def index(request: Request) -> Response:
        return page("sessions", "ctxwin proxy", f"{PREFIX}/sessions.json")

    async def sessions_json(request: Request) -> Response:
        try:
            rows, pending = await run_in_threadpool(dashboard.listing)
        except CtxwinError as error:  # the store is down or unreadable: say so, the page retries
            return _json(request, {"error": error.message, "hint": error.hint}, 503)
        answer = _json(request, [row.to_dict() for row in rows])
        answer.headers["X-Ctxwin-Pending"] = str(pending)
        return answer

    async def session_page(request: Request) -> Response:
        key = request.path_params["key"]
        try:
            known = await run_in_threadpool(dashboard.has, key)
        except CtxwinError:
            known = True  # the page itself fetches the report and shows the store's error
        if not known:
            return page("missing", f"no session {key}", "", status=404)
        return page("session", f"ctxwin session {key}", f"{PREFIX}/session.json?id={quote(key, safe='')}")

    async def session_json(request: Request) -> Response:
        key = request.query_params.get("id", "")
        try:
            report = await run_in_threadpool(dashboard.report, key) if key else None
        except CtxwinError as error:
            return _json(request, {"error": error.message, "hint": error.hint}, 503)
        if report is None:
            return _json(request, {"error": f"no session {key!r}",
                                   "hint": f"see {PREFIX}/sessions.json for the sessions there are"}, 404)
        return _json(request, report)

    return [Route(PREFIX, index, methods=["GET"]),
            Route(f"{PREFIX}/sessions.json", sessions_json, methods=["GET"]),
            Route(f"{PREFIX}/session.json", session_json, methods=["GET"]),
            Route(f"{PREFIX}/sessions/{{key:path}}", session_page, methods=["GET"])]


__all__ = ["Chunk", "Dashboard", "DashboardSource", "JsonlSource", "MemorySource", "PostgresSource", "Record",
           "SessionSummary", "dashboard_routes", "estimate_usd", "records_of", "session_report", "source_for",
           "summarize"]
