"""The last step of every request: the view validated for the provider (incrementally: usually only
the new tail), repaired where cuts left it invalid, and fitted again when what repair added pushed it
over its budget.

What it remembers between requests (`RepairCache`: the previous repair, reused while views extend it;
the validator's memory of the last valid view; what repair fixed last, so its event is emitted only when
that changes) lives in the engine's `Runtime`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ctxwin.errors import ContextBudgetError
from ctxwin.messages.pairing import Problem, Provider, repair
from ctxwin.pipeline.events import Repaired
from ctxwin.pipeline.validate import IncrementalValidator
from ctxwin.pipeline.view import Event, Item, MessagesView, StageContext, keys_of, shapes_of, total_tokens
from ctxwin.tokens.base import TokenCounter

PROVIDER_FOR_VALIDATION: Provider = "anthropic"
"""The view is kept valid for Anthropic (roles, zones, ids); the OpenAI converters of `Prepared`
repair what their own rules need on top (consecutive assistant turns answered one by one)."""
REPAIR_FIT_ROUNDS = 3
"""Times fit runs again when what repair adds pushes a request back over its budget."""

Refit = Callable[[list[Item], StageContext], list[Item]]
"""Runs the fit stage (recording its decisions) on a view with a tighter context."""
Collapse = Callable[[list[Item], StageContext], list[Item]]
"""Runs fit's collapse of unanswered calls (recording its decisions)."""


@dataclass
class RepairCache:
    repaired: tuple[list[str], list[Item], list[str], int] | None = None
    """(keys of the last unrepaired view, its repaired items, their keys, the tokens repair added): reused
    while views extend it."""
    last_repairs: frozenset[tuple[str, str | None, str]] = frozenset()
    """What the last repair fixed: its event is emitted only when this changes."""
    validator: IncrementalValidator = field(default_factory=lambda: IncrementalValidator(PROVIDER_FOR_VALIDATION))


def validate_and_repair(cache: RepairCache, items: list[Item], ctx: StageContext, events: list[Event],
                        refit: Refit, collapse: Collapse, *, fit_enabled: bool, counter: TokenCounter,
                        tokens: int | None = None) -> tuple[list[Item], list[str], list[Problem], int]:
    """The view made valid, its keys, what is still wrong (nothing, unless repair failed), and its
    tokens. `tokens`: those of `items`, when the caller has them.

    A request usually extends the previous one. Then the previous repair (say, error results for
    calls the history never answered) is reused for the unchanged prefix and only the new tail is
    validated; the full validation and repair run when the prefix changed or the tail needs it."""
    keys = keys_of(items)
    tokens = total_tokens(items) if tokens is None else tokens
    cached = cache.repaired
    if cached is not None and len(keys) >= len(cached[0]) and keys[: len(cached[0])] == cached[0] \
            and not _continues_turn(cached, items):
        extended = cached[1] + items[len(cached[0]):]
        extended_keys = cached[2] + keys[len(cached[0]):]
        extended_tokens = tokens + cached[3]
        fits = not fit_enabled or ctx.system_tokens + extended_tokens <= ctx.budget
        if fits and not cache.validator.check(MessagesView(extended), shapes_of(extended)):
            cache.repaired = (keys, extended, extended_keys, cached[3])
            return extended, extended_keys, [], extended_tokens
    problems = cache.validator.check(MessagesView(items), shapes_of(items))
    if not problems and not cache.last_repairs:
        cache.repaired = (keys, items, keys, 0)
        return items, keys, [], tokens
    repaired, repair_events = _repair(cache, items, counter)
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
        items = _refit(items, replace(ctx, budget=ctx.budget - max(added, 0) - slack), refit, collapse)
        repaired, repair_events = _repair(cache, items, counter)
    events.extend(repair_events)
    repaired_keys = keys_of(repaired)
    repaired_tokens = total_tokens(repaired)
    problems = cache.validator.check(MessagesView(repaired), shapes_of(repaired))
    cache.repaired = None if problems else (keys_of(items), repaired, repaired_keys,
                                            repaired_tokens - total_tokens(items))
    return repaired, repaired_keys, problems, repaired_tokens


def _continues_turn(cached: tuple[list[str], list[Item], list[str], int], items: list[Item]) -> bool:
    """Whether the view's new tail continues the cached view's last assistant turn after a repair that
    changed that view. Then the repair of the whole differs from the cached repair plus the tail (for
    Anthropic consecutive assistant messages are one turn, and a call it left unanswered is answered
    after the whole turn), so reusing it would send what an engine opened on the log would not."""
    length = len(cached[0])
    if cached[0] == cached[2] or not 0 < length < len(items):
        return False
    return items[length - 1].message.role == "assistant" and items[length].message.role == "assistant"


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


def _repair(cache: RepairCache, items: list[Item], counter: TokenCounter) -> tuple[list[Item], list[Event]]:
    result = repair([i.message for i in items], PROVIDER_FOR_VALIDATION)
    # Repair is not recorded (it is a pure function of the view), so it re-fixes the same things
    # on every request; its event is emitted only when what it fixes changes.
    signature = frozenset((c.kind, c.call_id, c.detail) for c in result.changes)
    repeated = signature == cache.last_repairs
    cache.last_repairs = signature
    if not result.changes:
        return items, []
    before = total_tokens(items)
    by_key = {id(i.message): i for i in items}
    fixed = []
    for message in result.messages:
        item = by_key.get(id(message))
        fixed.append(item if item is not None else
                     Item(message.id or "repair", message, counter.count_message(message), synthetic=True))
    if repeated:
        return fixed, []
    event = Repaired(tuple(sorted({c.call_id or "" for c in result.changes})), before,
                     total_tokens(fixed), "; ".join(sorted({c.kind for c in result.changes})),
                     changes=tuple(c.__dict__ for c in result.changes))
    return fixed, [event]
