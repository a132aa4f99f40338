"""ctxwin's compaction: compact early to a small view. The summary gets what `target_ratio` of the
window leaves after the system prompt and the kept floor (`keep_recent_tokens`), between half its
budget and all of it; the kept tail then gets what is left after the summary. So a harness with a
26K system prompt gets a lean summary and little verbatim history (its view stays near what Claude
Code itself sends after compacting), and one with a small prompt keeps much more of both. The whole
span is read at once by the extractive summarizer, so a turn is never split."""

from __future__ import annotations

from typing import ClassVar

from ctxwin.compaction.pi import KeepsRecentStrategy
from ctxwin.compaction.strategy import summary_budget
from ctxwin.pipeline.view import StageContext
from ctxwin.policies.model import CtxwinCompaction

MIN_SUMMARY_SHARE = 0.5
"""The summary never gets less than this share of its budget, whatever the system prompt takes."""


class CtxwinStrategy(KeepsRecentStrategy[CtxwinCompaction]):
    section = CtxwinCompaction
    split_turns: ClassVar[bool] = False

    def summary_tokens(self, policy: CtxwinCompaction, ctx: StageContext, factor: float = 1.0) -> int:
        full = summary_budget(policy, ctx.window, factor)
        if policy.target_ratio is None:
            return full
        room = int(ctx.window * policy.target_ratio / factor) - ctx.system_tokens - policy.keep_recent_tokens
        return max(min(full, room), int(full * MIN_SUMMARY_SHARE), 1)

    def keep_tokens(self, policy: CtxwinCompaction, ctx: StageContext, factor: float) -> int:
        keep = policy.keep_recent_tokens
        if policy.target_ratio is None:
            return keep
        target = int(ctx.window * policy.target_ratio / factor)
        return max(keep, target - ctx.system_tokens - self.summary_tokens(policy, ctx, factor))
