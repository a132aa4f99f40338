"""Letta's compaction: a sliding window that evicts 30 % of the messages, then 10 % more per step,
each time snapping back to an assistant message, until the rest fits `target_ratio` of the window;
or, in `all` mode (`mode = "all"`), everything but the system prompt (and, inside a tool loop, the
newest round)."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.compaction.cuts import CutPlan, first_content, plan_at
from ctxwin.compaction.pi import turns_cut
from ctxwin.compaction.strategy import AgentSummary, Strategy
from ctxwin.pipeline.view import Item, StageContext, total_tokens
from ctxwin.policies.model import LettaCompaction

START_EVICT = 0.3
STEP = 0.1
DEFAULT_TARGET = 0.7


def letta_cut(items: Sequence[Item], start: int, target: int, fixed: int) -> int:
    """Letta's sliding window: starting from 30 %, evict 10 % more of the messages per step (so the
    first cut tried is at 40 %, as in Letta's code), each time snapping back to an assistant message,
    until the rest fits `target` tokens (`fixed`: tokens that stay whatever is evicted)."""
    n = len(items) - start
    evict = START_EVICT
    cut = start
    while evict < 1.0:
        evict += STEP
        index = start + round(evict * n)
        candidate = next((i for i in range(min(index, len(items) - 1), start, -1)
                          if items[i].message.role == "assistant"), None)
        if candidate is None:
            continue
        cut = candidate
        if fixed + total_tokens(items[cut:]) < target:
            return cut
    return len(items)


def all_cut(items: Sequence[Item]) -> int:
    """Letta's `all` mode: everything is summarized but, inside a tool loop, the newest round (the call
    and the results the model is waiting to read; Letta keeps a trailing pending approval the same
    way): an agent in a tool loop would otherwise lose its place."""
    if not items or items[-1].message.role != "tool":
        return len(items)
    for index in range(len(items) - 1, -1, -1):
        if items[index].message.role == "assistant" and items[index].message.tool_calls:
            return index if index > first_content(items) else len(items)
    return len(items)


class LettaStrategy(Strategy[LettaCompaction]):
    section = LettaCompaction

    def plan(self, items: Sequence[Item], policy: LettaCompaction, ctx: StageContext, pins: set[str],
             factor: float = 1.0, agent_summary: AgentSummary | None = None) -> CutPlan:
        if policy.mode == "all":
            return plan_at(items, all_cut(items), pins, split_turns=False)
        target = int(ctx.window * (policy.target_ratio or DEFAULT_TARGET) / factor)
        cut = letta_cut(items, first_content(items), target, ctx.system_tokens)
        # The turn caps hold for every strategy: a tail past the turn trigger would compact again at once.
        return plan_at(items, turns_cut(items, cut, policy, float("inf"), keep_turns=0), pins, split_turns=False)
