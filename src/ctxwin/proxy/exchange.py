"""What one request to a managed endpoint carries, as plain data: the facts for its entry
(`Exchange`), the request about to go upstream (`Outgoing`) and what the process remembers of the
session between its requests (`Memo`). The steps that use them are the request's `Turn`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ctxwin.engine import ContextEngine, Prepared
from ctxwin.providers.base import Usage
from ctxwin.store.entries import ProxyRequestEntry
from ctxwin.telemetry.proxy_spans import ProxySpan

from .apis import Api, Conversion, Rendered


@dataclass
class Memo:
    """What the proxy remembers of a session between its requests (this process only; a worker that
    has none converts the whole history once)."""

    conversion: Conversion = field(default_factory=Conversion)
    overhead: tuple[str, int] = ("", 0)  # (key of the system+tools bytes, their raw token count)
    forwarded_overhead: str | None = None  # the overhead key of the previous forwarded request
    forwarded_keys: list[str] = field(default_factory=list)  # passthrough: the previous request's keys
    rendered: Rendered | None = None  # the turns written for the last forwarded request
    retired: Conversion | None = None
    """The conversion this request replaced, freed once the answer is on its way: dropping the last
    reference to a 170K-token history's parsed dicts takes milliseconds the caller need not wait for."""
    synced: tuple[int, int, int] | None = None
    """(engine id, messages it held, messages of the conversion) right after the last sync: while the
    engine is the same object and holds the same messages, a history that only extends the last one
    is appended without matching it all again."""


@dataclass
class Outgoing:
    """One request about to go upstream, and what ctxwin knows of it."""

    body: bytes
    prepared: Prepared | None
    tokens: int
    reuse: float


@dataclass
class Exchange:
    """Facts about one handled request, for its ProxyRequestEntry."""

    api: Api
    model: str
    started: float
    upstream_s: float = 0.0
    tokens_received: int = 0
    tokens_forwarded: int = 0
    reuse: float = 0.0
    compactions: int = 0
    recoveries: int = 0
    recall_calls: int = 0
    invalid: bool = False
    streamed: bool = False
    usage: Usage | None = None
    pending_usage: Usage | None = None  # usage of the final answer, recorded with the entry before the caller has it
    status: int = 200
    ended: float | None = None  # when the answer was ready for the caller (None: now)
    span: ProxySpan = field(default_factory=ProxySpan)  # the request's telemetry span (off: does nothing)

    def note(self, engine: ContextEngine) -> None:
        """Keep the request's entry in the session log, and put it on the request's span."""
        entry = self.entry()
        engine.note(entry)
        self.span.record(entry)

    def entry(self) -> ProxyRequestEntry:
        usage = self.usage
        elapsed = (self.ended or time.perf_counter()) - self.started
        return ProxyRequestEntry(
            api=self.api.name, model=self.model, status=self.status, tokens_received=self.tokens_received,
            tokens_forwarded=self.tokens_forwarded, cache_prefix_reuse=round(self.reuse, 4),
            compactions=self.compactions, recoveries=self.recoveries, recall_calls=self.recall_calls,
            invalid_forwarded=self.invalid, streamed=self.streamed,
            input_tokens=usage.input_tokens if usage is not None else None,
            output_tokens=usage.output_tokens if usage is not None else None,
            cache_read_tokens=usage.cache_read_tokens if usage is not None else None,
            cache_write_tokens=usage.cache_write_tokens if usage is not None else None,
            added_ms=round(max(0.0, elapsed - self.upstream_s) * 1000, 3),
            upstream_ms=round(self.upstream_s * 1000, 3))


def compactions(prepared: Prepared) -> int:
    return sum(e.is_compaction for e in prepared.events)
