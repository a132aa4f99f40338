"""The proxy's live page: `/ctxwin` (a self-contained HTML dashboard), `/ctxwin/sessions.json` (its JSON
twin), and a report page per session (`/ctxwin/sessions/{key}`, JSON at `/ctxwin/session.json?id=KEY`).

Everything is read from the session store the proxy writes (each request it handles is a
`ProxyRequestEntry` in the session's log), never from a worker's memory, so whichever worker answers
shows every worker's sessions. Mount it with `dashboard_routes(source_for(config, sessions=...))`. What
the numbers mean (and the money estimate) is in `session_stats.py`.

Reading is incremental: a source says, per session, a stamp that changes when its log grows (the
JSONL file's size and mtime, the PostgreSQL entry count, an in-memory log's length), and only the
entries appended since the last look are read, by kind where the store can (messages never are). The
pages fetch their JSON every few seconds; a listing is reused for `MIN_RESCAN_S` however many pages
poll it, answers 304 when unchanged, and reads for at most `SCAN_BUDGET_S` (a fresh worker over a
large store shows the most recent sessions first and the rest over the next polls).
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
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from ctxwin.errors import CtxwinError, InputError
from ctxwin.proxy.config import ProxyConfig
from ctxwin.proxy.session_stats import Record, SessionSummary, kept_for_summary, records_of, session_report, summarize
from ctxwin.store.base import Entry, SessionLog
from ctxwin.store.entries import KINDS
from ctxwin.store.jsonl import SESSION_FILE
from ctxwin.store.session import Session, is_session_dir

PREFIX = "/ctxwin"
REFRESH_S = 5.0  # how often an open page fetches its JSON again (doubling after failures, up to BACKOFF_MAX_S)
BACKOFF_MAX_S = 60.0
MIN_RESCAN_S = 1.0  # a listing of the store is reused this long, however many pages poll it
SCAN_BUDGET_S = 2.0  # a listing reads changed sessions this long at most; the rest on the next poll
REPORTS_KEPT = 8  # session pages kept built (rebuilt when their log changes)
TEMPLATE = "dashboard.html"


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


def _entries_from(log: SessionLog, start: int) -> Iterator[Entry]:
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
                     scan_budget_s: float = SCAN_BUDGET_S,
                     notices: Callable[[], list[dict[str, str]]] | None = None) -> list[BaseRoute]:
    """`GET /ctxwin`, `/ctxwin/sessions.json`, `/ctxwin/sessions/{key}` and `/ctxwin/session.json?id=KEY`
    over `source`, for the proxy's app to mount. While a listing is still reading a large store,
    `/ctxwin/sessions.json` says how many sessions are left in its `X-Ctxwin-Pending` header.
    `/ctxwin/notices.json`: what the serving process has to tell its operator (`notices`: a refused
    edit of the live policy file), newest last; every page shows them."""
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

    async def notices_json(request: Request) -> Response:
        return _json(request, notices() if notices is not None else [])

    return [Route(PREFIX, index, methods=["GET"]),
            Route(f"{PREFIX}/sessions.json", sessions_json, methods=["GET"]),
            Route(f"{PREFIX}/notices.json", notices_json, methods=["GET"]),
            Route(f"{PREFIX}/session.json", session_json, methods=["GET"]),
            Route(f"{PREFIX}/sessions/{{key:path}}", session_page, methods=["GET"])]


__all__ = ["Chunk", "Dashboard", "DashboardSource", "JsonlSource", "MemorySource", "PostgresSource",
           "dashboard_routes", "source_for"]
