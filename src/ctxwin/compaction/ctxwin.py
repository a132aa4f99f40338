"""ctxwin's compaction: compact early to a small view. The kept tail is sized to what is left of
`target_ratio` of the window after the system prompt and the summary, so a harness with a 26K system
prompt keeps little verbatim and one with a small prompt keeps much more; `keep_recent_tokens` is the
floor. The whole span is read at once by the extractive summarizer, so a turn is never split."""

from __future__ import annotations

from typing import ClassVar

from ctxwin.compaction.pi import KeepsRecentStrategy
from ctxwin.compaction.strategy import summary_budget
from ctxwin.pipeline.view import StageContext
from ctxwin.policies.model import CtxwinCompaction


class CtxwinStrategy(KeepsRecentStrategy[CtxwinCompaction]):
    section = CtxwinCompaction
    split_turns: ClassVar[bool] = False

    def keep_tokens(self, policy: CtxwinCompaction, ctx: StageContext, factor: float) -> int:
        keep = policy.keep_recent_tokens
        if policy.target_ratio is None:
            return keep
        target = int(ctx.window * policy.target_ratio / factor)
        return max(keep, target - ctx.system_tokens - summary_budget(policy, ctx.window, factor))
