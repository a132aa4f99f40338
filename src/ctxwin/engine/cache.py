"""The view as of the last request, cached: extended in place while only appends happen, rebuilt from
`SessionState` whenever the reducer says a rendering before its end changed.

The cache's data (`ViewCache`) lives in the engine's `Runtime`; this module is the one function that
reads and fills it. A cold engine and a warm one produce the same view: the cache only makes the
common case (a request that extends the previous one) cost work proportional to what is new.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwin.compaction.compact import summary_message
from ctxwin.pipeline import fit
from ctxwin.pipeline.view import Item, total_tokens
from ctxwin.tokens.base import TokenCounter

from .state import SessionState


@dataclass
class ViewCache:
    """What `view` keeps between requests (all of it rebuildable from `SessionState`)."""

    items: list[Item] | None = None
    records: int = 0
    """Records the cached view covers."""
    lead: list[Item] = field(default_factory=list)
    """The summary and attachment items of the latest compaction, built once."""
    tokens: int = 0
    """The tokens of `items` (kept as they change, so a request does not add them up again)."""
    generation: int = 0
    """Counts rebuilds: a memo of a scan over the view (`mask.MaskScan`) holds while this is unchanged,
    since until then the view has only grown at its end."""


def view(cache: ViewCache, state: SessionState, counter: TokenCounter) -> list[Item]:
    """The view: the summary of the latest compaction, pinned items it spared, re-attached files, a
    marker where rounds were dropped, then every kept record's current rendering. A copy: callers
    and past `Prepared`s may keep it. `cache.tokens` is its total."""
    records = state.records
    if state.changed_from is not None and state.changed_from < cache.records:
        cache.items = None
        cache.lead = []
    state.changed_from = None
    if cache.items is not None:
        added = [r.item for r in records[cache.records:] if r.item is not None]
        cache.items.extend(added)
        cache.tokens += total_tokens(added)
        cache.records = len(records)
        return list(cache.items)
    compaction = state.compaction
    start = compaction.first_kept if compaction else 0
    out: list[Item] = []
    if compaction is not None:
        if not cache.lead:
            lead = [summary_message(compaction.summary.text), *compaction.attachments]
            for lead_id, message in zip(compaction.lead_ids(), lead, strict=True):
                message = compaction.overrides.get(lead_id, message)
                cache.lead.append(Item(lead_id, message, counter.count_message(message), synthetic=True))
        out.append(cache.lead[0])
        for entry_id in compaction.pinned:
            position = state.index[entry_id]
            record = records[position]
            if record.item is not None and position < start:
                out.append(record.item)
        out.extend(cache.lead[1:])
    kept = records[start:]
    dropped = sum(1 for r in kept if r.item is None)
    if dropped:
        marker = fit.dropped_marker(dropped)
        out.append(Item(fit.MARKER_ID, marker, counter.count_message(marker), synthetic=True))
    out.extend(r.item for r in kept if r.item is not None)
    cache.items = out
    cache.tokens = total_tokens(out)
    cache.records = len(records)
    cache.generation += 1
    return list(out)
