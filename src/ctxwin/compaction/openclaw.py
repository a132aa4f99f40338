"""OpenClaw's safeguard compaction: Pi's cut, with the kept history also bounded by `history_share` of
the window (older chunks go into the summary)."""

from __future__ import annotations

from typing import Any, ClassVar

from ctxwin.compaction.pi import PiStrategy
from ctxwin.pipeline.view import StageContext


class OpenClawStrategy(PiStrategy):
    name: ClassVar[str] = "openclaw"

    def keep_tokens(self, policy: Any, ctx: StageContext, factor: float) -> int:
        return min(policy.keep_recent_tokens, int(ctx.window * policy.history_share / factor))
