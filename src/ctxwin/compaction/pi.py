"""Pi's compaction: keep about `keep_recent_tokens` of recent history verbatim, cut at the nearest turn
boundary, and summarize a turn the cut falls inside apart (its "turn prefix")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from ctxwin.compaction.cuts import CutPlan, first_content, plan_at, shrinking_cut
from ctxwin.compaction.strategy import AgentSummary, Strategy, summary_budget
from ctxwin.pipeline.view import Item, StageContext


def keep_tail_cut(items: Sequence[Item], keep: int, policy: Any, ctx: StageContext, factor: float,
                  threshold: int) -> int:
    """Where a cut keeping `keep` recent tokens falls, kept small enough to land under `threshold`."""
    fixed = ctx.system_tokens + summary_budget(policy, ctx.window, factor)
    return shrinking_cut(items, first_content(items), keep, fixed, threshold / factor)


class PiStrategy(Strategy):
    name: ClassVar[str] = "pi"
    split_turns: ClassVar[bool] = True

    def keep_tokens(self, policy: Any, ctx: StageContext, factor: float) -> int:
        return policy.keep_recent_tokens

    def plan(self, items: Sequence[Item], policy: Any, ctx: StageContext, pins: set[str],
             factor: float = 1.0, agent_summary: AgentSummary | None = None) -> CutPlan:
        keep = self.keep_tokens(policy, ctx, factor)
        cut = keep_tail_cut(items, keep, policy, ctx, factor, self.threshold(ctx.window, policy))
        return plan_at(items, cut, pins, split_turns=self.split_turns)
