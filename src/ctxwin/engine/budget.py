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
    def for_policy(cls, policy: Policy, window: int, max_output: int, default_output: bool = False) -> Budget:
        """The budget of a window and an output limit under `policy`. `default_output`: the output
        limit is the registry's, not one the caller gave; when it leaves no room in the window (a
        registry's 32K answer and `window=16_000`), the answer is given the share of the window it
        gets after an overflow instead (a quarter), not refused: each request can still ask for its own
        (`for_output`)."""
        if policy.unlimited_window:
            return cls(UNLIMITED_WINDOW, max_output, 0)
        budget = cls(window, max_output, policy.reserve(max_output))
        if budget.window <= budget.reserve and default_output:
            return budget._answer_share(policy)
        if budget.window <= budget.reserve:
            raise CtxwinError(
                f"the context window ({window:,} tokens) is not larger than the reserve kept free for the "
                f"answer ({budget.reserve:,}: output {min(policy.output_reserve_tokens, max_output):,} "
                f"+ margin {policy.safety_margin_tokens:,})",
                "give a larger window, or a smaller max_output / policy output_reserve_tokens")
        return budget

    def for_output(self, policy: Policy, max_output: int) -> Budget:
        """This budget for one request that asks for `max_output` tokens of answer: the reserve follows
        it (larger or smaller than the engine's), the window and what recoveries learned stay. The
        reserve is at most half the window: an answer that asks for more of a small window still
        leaves the request the other half (the provider cuts the answer short, or refuses and recovery
        learns from it)."""
        if policy.unlimited_window:
            return replace(self, max_output=max_output)
        return replace(self, max_output=max_output, reserve=min(policy.reserve(max_output), self.window // 2))

    def _answer_share(self, policy: Policy) -> Budget:
        """This budget with the answer's share of the window what it would be on a normal one (a quarter
        at most), and the safety margin never eating a tiny window (the budget would go below zero)."""
        max_output = min(self.max_output, self.window // 4)
        return replace(self, max_output=max_output, reserve=min(policy.reserve(max_output), self.window // 2))

    def after_overflow(self, policy: Policy, limit_tokens: int | None) -> Budget:
        """The budget after the provider rejected a request as too long: `limit_tokens` is the most
        its window can be (the window it named, or else what it counted, or else the failed request's
        own size), None when nothing bounds it."""
        budget = self
        if limit_tokens and limit_tokens < self.window:
            budget = replace(budget, window=limit_tokens)  # the provider knows its window better than we do
            if budget.reserve >= budget.window // 2:
                budget = budget._answer_share(policy)  # our reserve was sized for the window we believed in
        return replace(budget, scale=budget.scale * RECOVERY_SHRINK)

    def restored(self, policy: Policy, window: int, max_output: int, scale: float) -> Budget:
        """This budget with a logged recovery applied (limits only ever go down)."""
        window = min(self.window, window or self.window)
        max_output = min(self.max_output, max_output or self.max_output)
        reserve = 0 if policy.unlimited_window else policy.reserve(max_output)
        if window < self.window and reserve >= window // 2:  # as `after_overflow` sized it
            reserve = min(reserve, window // 2)
        return Budget(window, max_output, reserve, scale)
