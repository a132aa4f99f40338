"""What the engine caches between requests, none of it state: the view as of the last request
(extended in place while only appends happen), and the repair of its unchanged prefix.

Both are rebuilt from `SessionState` whenever it says a rendering before their end changed, so a
cold engine and a warm one produce the same bytes; the cache only makes the common case (a request
that extends the previous one) cost work proportional to what is new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ctxwin.compaction.compact import summary_message
from ctxwin.errors import ContextBudgetError
from ctxwin.messages.pairing import repair
from ctxwin.pipeline import fit
from ctxwin.pipeline.events import Repaired
from ctxwin.pipeline.validate import IncrementalValidator
from ctxwin.pipeline.view import Event, Item, MessagesView, StageContext, keys_of, shapes_of, total_tokens
from ctxwin.tokens.base import TokenCounter

from .state import SessionState

PROVIDER_FOR_VALIDATION = "anthropic"
"""The view is kept valid for Anthropic (roles, zones, ids); the OpenAI converters of `Prepared`
repair what their own rules need on top (consecutive assistant turns answered one by one)."""
REPAIR_FIT_ROUNDS = 3
"""Times fit runs again when what repair adds pushes a request back over its budget."""

Refit = Callable[[list[Item], StageContext], list[Item]]
"""Runs the fit stage (recording its decisions) on a view with a tighter context."""
Collapse = Callable[[list[Item], StageContext], list[Item]]
"""Runs fit's collapse of unanswered calls (recording its decisions)."""


@dataclass
class ViewCache:
    counter: TokenCounter
    view: list[Item] | None = None
    view_records: int = 0  # records the cached view covers
    lead: list[Item] = field(default_factory=list)  # the summary and attachment items, built once
    # (keys of the last unrepaired view, its repaired items, their keys): reused while views extend it.
    repaired: tuple[list[str], list[Item], list[str]] | None = None
    last_repairs: frozenset[tuple[str, str | None, str]] = frozenset()
    validator: IncrementalValidator = field(default_factory=lambda: IncrementalValidator(PROVIDER_FOR_VALIDATION))

    def items(self, state: SessionState) -> list[Item]:
        """The view: the summary of the latest compaction, pinned items it spared, re-attached files, a
        marker where rounds were dropped, then every kept record's current rendering. A copy: callers
        and past `Prepared`s may keep it."""
        records = state.records
        if state.changed_from is not None and state.changed_from < self.view_records:
            self.view = None
            self.lead = []
        state.changed_from = None
        if self.view is not None:
            self.view.extend(r.item for r in records[self.view_records:] if r.item is not None)
            self.view_records = len(records)
            return list(self.view)
        compaction = state.compaction
        start = compaction.first_kept if compaction else 0
        out: list[Item] = []
        if compaction is not None:
            if not self.lead:
                lead = [summary_message(compaction.summary.text), *compaction.attachments]
                for lead_id, message in zip(compaction.lead_ids(), lead, strict=True):
                    message = compaction.overrides.get(lead_id, message)
                    self.lead.append(Item(lead_id, message, self.counter.count_message(message), synthetic=True))
            out.append(self.lead[0])
            for entry_id in compaction.pinned:
                position = state.index[entry_id]
                record = records[position]
                if record.item is not None and position < start:
                    out.append(record.item)
            out.extend(self.lead[1:])
        kept = records[start:]
        dropped = sum(1 for r in kept if r.item is None)
        if dropped:
            marker = fit.dropped_marker(dropped)
            out.append(Item(fit.MARKER_ID, marker, self.counter.count_message(marker), synthetic=True))
        out.extend(r.item for r in kept if r.item is not None)
        self.view = out
        self.view_records = len(records)
        return list(out)

    def validate_and_repair(self, items: list[Item], ctx: StageContext, events: list[Event],
                            refit: Refit, collapse: Collapse, *,
                            fit_enabled: bool) -> tuple[list[Item], list[str], list]:
        """The view made valid, its keys, and what is still wrong (nothing, unless repair failed).

        A request usually extends the previous one. Then the previous repair (say, error results for
        calls the history never answered) is reused for the unchanged prefix and only the new tail is
        validated; the full validation and repair run when the prefix changed or the tail needs it."""
        keys = keys_of(items)
        cached = self.repaired
        if cached is not None and len(keys) >= len(cached[0]) and keys[: len(cached[0])] == cached[0]:
            extended = cached[1] + items[len(cached[0]):]
            extended_keys = cached[2] + keys[len(cached[0]):]
            fits = not fit_enabled or ctx.system_tokens + total_tokens(extended) <= ctx.budget
            if fits and not self.validator.check(MessagesView(extended), shapes_of(extended)):
                self.repaired = (keys, extended, extended_keys)
                return extended, extended_keys, []
        problems = self.validator.check(MessagesView(items), shapes_of(items))
        if not problems and not self.last_repairs:
            self.repaired = (keys, items, keys)
            return items, keys, []
        repaired, repair_events = self._repair(items)
        slack = 0
        for attempt in range(REPAIR_FIT_ROUNDS):
            over = ctx.system_tokens + total_tokens(repaired) - ctx.budget
            if not fit_enabled or over <= 0:
                break
            # What repair adds (error results for calls the history never answered) must fit too:
            # fit the unrepaired view with that much less room, then repair the smaller view; if a
            # residue remains (the dropped-rounds marker grew a digit), squeeze that much more.
            slack += over if attempt else 0
            added = total_tokens(repaired) - total_tokens(items)
            items = self._refit(items, replace(ctx, budget=ctx.budget - max(added, 0) - slack), refit, collapse)
            repaired, repair_events = self._repair(items)
        events.extend(repair_events)
        repaired_keys = keys_of(repaired)
        problems = self.validator.check(MessagesView(repaired), shapes_of(repaired))
        self.repaired = None if problems else (keys_of(items), repaired, repaired_keys)
        return repaired, repaired_keys, problems

    @staticmethod
    def _refit(items: list[Item], tighter: StageContext, refit: Refit, collapse: Collapse) -> list[Item]:
        """Fit with the room repair's additions leave; when there is none (thousands of unanswered
        calls, whose error results alone would not fit), collapse those turns instead of driving the
        budget below zero."""
        if tighter.budget > tighter.system_tokens:
            try:
                return refit(items, tighter)
            except ContextBudgetError:
                pass  # no fit with this much room: what repair would add must go instead
        return collapse(items, tighter)

    def _repair(self, items: list[Item]) -> tuple[list[Item], list[Event]]:
        result = repair([i.message for i in items], PROVIDER_FOR_VALIDATION)
        # Repair is not recorded (it is a pure function of the view), so it re-fixes the same things
        # on every request; its event is emitted only when what it fixes changes.
        signature = frozenset((c.kind, c.call_id, c.detail) for c in result.changes)
        repeated = signature == self.last_repairs
        self.last_repairs = signature
        if not result.changes:
            return items, []
        before = total_tokens(items)
        by_key = {id(i.message): i for i in items}
        fixed = []
        for message in result.messages:
            item = by_key.get(id(message))
            fixed.append(item if item is not None else
                         Item(message.id or "repair", message, self.counter.count_message(message), synthetic=True))
        if repeated:
            return fixed, []
        event = Repaired(tuple(sorted({c.call_id or "" for c in result.changes})), before,
                         total_tokens(fixed), "; ".join(sorted({c.kind for c in result.changes})),
                         changes=tuple(c.__dict__ for c in result.changes))
        return fixed, [event]
