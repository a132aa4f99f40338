"""OpenClaw's safeguard compaction: Pi's cut, with the kept history also bounded by `history_share` of
the window (older chunks go into the summary)."""

from __future__ import annotations

from ctxwin.compaction.pi import KeepsRecentStrategy
from ctxwin.pipeline.view import StageContext
from ctxwin.policies.model import OpenClawCompaction


class OpenClawStrategy(KeepsRecentStrategy[OpenClawCompaction]):
    section = OpenClawCompaction

    def keep_tokens(self, policy: OpenClawCompaction, ctx: StageContext, factor: float) -> int:
        return min(policy.keep_recent_tokens, int(ctx.window * policy.history_share / factor))
