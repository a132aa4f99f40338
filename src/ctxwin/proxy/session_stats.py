"""What a session's log says the proxy did, as plain data: the typed records the live page reads
(`records_of`), a session's totals (`summarize`), the money they saved (`estimate_usd`) and its report
page's contents (`session_report`). Pure functions over records; `dashboard.py` reads the store and
serves them.

The money estimate, per session, priced with `ctxwin.tokens.prices` (the table and the prompt-caching
model the evaluation uses):
- *without ctxwin*: each request as the agent sent it (`tokens_received`), its cached prefix taken as the
  whole previous request of the same model (an agent's history only grows; where the agent rewound or
  compacted this overstates its cache hits, so the saving is, if anything, understated);
- *with ctxwin*: what went upstream (`tokens_forwarded`), its cached prefix `cache_prefix_reuse` of it;
- requests the caller saw fail (status >= 400) are billed nothing in either. The difference is saved.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ctxwin.errors import CtxwinError
from ctxwin.pipeline.view import recall_ref
from ctxwin.store.base import Entry
from ctxwin.store.entries import (
    CompactionEntry,
    DecisionEntry,
    LogEntry,
    ProxyRequestEntry,
    RecoveryEntry,
    epoch,
    parse,
)
from ctxwin.tokens.prices import CallTokens, call_costs, pricing_for

DETAIL_REQUESTS = 500  # the newest requests a session's page lists
DETAIL_EVENTS = 200  # the newest compactions, decisions and recoveries it lists
EXCERPT_CHARS = 400  # text shown of a summary or a placeholder
REFS_SHOWN = 20  # refs listed per compaction or decision (the rest counted)
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
    for number, (record, sent) in enumerate((r, r.entry) for r in records if isinstance(r.entry, ProxyRequestEntry)):
        row = {"n": number + 1, "time": record.timestamp, "entry": record.entry_id, **sent.to_payload()}
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


__all__ = ["Money", "Record", "SessionSummary", "Unreadable", "estimate_usd", "kept_for_summary", "records_of",
           "session_report", "summarize"]
