"""Pi's compaction: keep about `keep_recent_tokens` of recent history verbatim, cut at the nearest turn
boundary, and summarize a turn the cut falls inside apart (its "turn prefix")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, TypeVar

from ctxwin.compaction.cuts import CutPlan, first_content, plan_at, recent_turns_cut, shrinking_cut, turn_starts
from ctxwin.compaction.strategy import AgentSummary, Strategy
from ctxwin.pipeline.view import Item, StageContext, total_tokens
from ctxwin.policies.model import CompactionSection, KeepsRecentSection, PiCompaction

K = TypeVar("K", bound=KeepsRecentSection)


def keep_tail_cut(items: Sequence[Item], keep: int, fixed: int, threshold: int, factor: float) -> int:
    """Where a cut keeping `keep` recent tokens falls, kept small enough to land under `threshold`
    with the `fixed` tokens (system prompt and summary) a compacted view holds whatever is kept."""
    return shrinking_cut(items, first_content(items), keep, fixed, threshold / factor)


class KeepsRecentStrategy(Strategy[K]):
    """Pi's cut, for every strategy whose section keeps a recent tail (`keep_recent_tokens`,
    `keep_recent_turns`); `keep_tokens` is where they differ."""

    split_turns: ClassVar[bool] = True

    def keep_tokens(self, policy: K, ctx: StageContext, factor: float) -> int:
        return policy.keep_recent_tokens

    def plan(self, items: Sequence[Item], policy: K, ctx: StageContext, pins: set[str],
             factor: float = 1.0, agent_summary: AgentSummary | None = None) -> CutPlan:
        keep = self.keep_tokens(policy, ctx, factor)
        threshold = self.threshold(ctx.window, policy)
        fixed = ctx.system_tokens + self.summary_tokens(policy, ctx, factor)
        cut = keep_tail_cut(items, keep, fixed, threshold, factor)
        limit = threshold / factor - fixed
        cut = turns_cut(items, cut, policy, limit, keep_turns=policy.keep_recent_turns)
        return plan_at(items, cut, pins, split_turns=self.split_turns)


class PiStrategy(KeepsRecentStrategy[PiCompaction]):
    section = PiCompaction


def turns_cut(items: Sequence[Item], cut: int, policy: CompactionSection, limit: float, *, keep_turns: int) -> int:
    """`cut` moved for the turn knobs: back to keep at least `keep_turns` turns (unless that tail
    alone would be over `limit` tokens and compact again at once), then forward so the kept tail
    holds at most `max_turns`, and, under a turn trigger, at most half of it (or `keep_turns`): a
    tail that still passed the trigger would compact again on the next request. The caps win over
    the floor."""
    if keep_turns:
        floor = recent_turns_cut(items, keep_turns)
        if total_tokens(items[floor:]) <= limit:
            cut = min(cut, floor)
    cap = policy.max_turns
    if policy.trigger_turns is not None:
        room = max(keep_turns, policy.trigger_turns // 2)
        cap = room if cap is None else min(cap, room)
    if cap is not None and len(turn_starts(items)) > cap:
        cut = max(cut, recent_turns_cut(items, cap))
    return cut
