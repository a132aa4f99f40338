"""The request budget as one frozen value: the window, the output limit, the reserve kept free for the
answer, and the shrink factor overflow recoveries applied. Every change makes a new value, so the
three places that used to mutate window, output and reserve now share one rule."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ctxwin.errors import CtxwinError
from ctxwin.policies.model import Policy

UNLIMITED_WINDOW = 10**12
"""The window of a policy with `unlimited_window` (the raw baseline)."""
RECOVERY_SHRINK = 0.85
"""Each recovery shrinks the request budget by this factor, on top of what it learned from the
error: the provider counted more than we did, so we aim lower."""


@dataclass(frozen=True, slots=True)
class Budget:
    window: int
    max_output: int
    reserve: int
    scale: float = 1.0

    @property
    def tokens(self) -> int:
        """The most tokens a request may have: the window minus the reserve, times the scale."""
        return int((self.window - self.reserve) * self.scale)

    @classmethod
    def for_policy(cls, policy: Policy, window: int, max_output: int) -> Budget:
        if policy.unlimited_window:
            return cls(UNLIMITED_WINDOW, max_output, 0)
        budget = cls(window, max_output, policy.reserve(max_output))
        if budget.window <= budget.reserve:
            raise CtxwinError(
                f"the context window ({window:,} tokens) is not larger than the reserve kept free for the "
                f"answer ({budget.reserve:,}: output {min(policy.output_reserve_tokens, max_output):,} "
                f"+ margin {policy.safety_margin_tokens:,})",
                "give a larger window, or a smaller max_output / policy output_reserve_tokens")
        return budget

    def after_overflow(self, policy: Policy, limit_tokens: int | None) -> Budget:
        """The budget after the provider rejected a request as too long, naming its real window
        (`limit_tokens`) or not."""
        budget = self
        if limit_tokens and limit_tokens < self.window:
            budget = replace(budget, window=limit_tokens)  # the provider knows its window better than we do
            if budget.reserve >= budget.window // 2:
                # Our output reserve was sized for the window we believed in: keep the answer's share
                # of the real window what it would be on a normal one (a quarter at most), and never let
                # the safety margin alone eat a tiny window (the budget would go below zero).
                max_output = min(budget.max_output, budget.window // 4)
                reserve = min(policy.reserve(max_output), budget.window // 2)
                budget = replace(budget, max_output=max_output, reserve=reserve)
        return replace(budget, scale=budget.scale * RECOVERY_SHRINK)

    def restored(self, policy: Policy, window: int, max_output: int, scale: float) -> Budget:
        """This budget with a logged recovery applied (limits only ever go down)."""
        window = min(self.window, window or self.window)
        max_output = min(self.max_output, max_output or self.max_output)
        reserve = 0 if policy.unlimited_window else policy.reserve(max_output)
        if window < self.window and reserve >= window // 2:  # as `after_overflow` sized it
            reserve = min(reserve, window // 2)
        return Budget(window, max_output, reserve, scale)
