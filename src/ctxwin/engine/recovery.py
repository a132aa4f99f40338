"""Overflow recovery, decided purely: from the provider's error and the current budget, what the
engine learns (the real window, the provider's count), the budget it keeps from now on, and the
event that reports it. Bounded: the caller counts attempts and this refuses past the limit."""

from __future__ import annotations

from dataclasses import dataclass

from ctxwin.errors import ContextOverflowError, CtxwinError
from ctxwin.pipeline.events import OverflowRecovery
from ctxwin.pipeline.view import Event
from ctxwin.policies.model import Policy
from ctxwin.providers.overflow import OverflowMatch
from ctxwin.store.entries import RecoveryEntry

from .budget import Budget
from .inputs import describe_error

MAX_RECOVERY_ATTEMPTS = 3
"""Overflow recoveries allowed in a row before `recover` gives up (OpenClaw's 3 attempts); a
successful call (`record_usage`) resets the count."""


@dataclass(frozen=True)
class Recovery:
    match: OverflowMatch
    entry: RecoveryEntry
    event: Event


def plan_recovery(error: object, match: OverflowMatch | None, budget: Budget, policy: Policy,
                  attempt: int, failed_tokens: int | None = None) -> Recovery:
    """The recovery for attempt number `attempt` (1-based) after `error`, for a request of
    `failed_tokens` (the engine's count, calibrated; None when unknown). What bounds the real window:
    the window the error names; else the tokens the provider says it counted (unless the overflow was
    silent: then the provider took the request, and counted more than the window we believe in); else
    the failed request's own size (the Responses API and local OpenAI-compatible servers say no number:
    shrinking from the registry's window would take many attempts to reach a small real one)."""
    if match is None:
        raise CtxwinError(f"not a context overflow error: {describe_error(error)}",
                          "recover() handles overflow errors only; retry or surface other errors")
    if attempt > MAX_RECOVERY_ATTEMPTS:
        raise ContextOverflowError(
            f"the provider still rejects the request as too long after {MAX_RECOVERY_ATTEMPTS} recoveries "
            f"({match.provider}: {match.pattern})",
            "start a new session with a summary (engine.compact), use a model with a larger window, "
            "or shorten the system prompt and tool schemas")
    bound = match.limit_tokens or (None if match.silent else match.observed_tokens or failed_tokens or None)
    after = budget.after_overflow(policy, bound)
    entry = RecoveryEntry(after.window, after.max_output, after.scale, match.provider, match.observed_tokens,
                          match.limit_tokens)
    event = OverflowRecovery((), match.observed_tokens or 0, 0,
                             f"{match.provider} overflow ({'silent' if match.silent else match.pattern}); "
                             f"attempt {attempt} of {MAX_RECOVERY_ATTEMPTS}")
    return Recovery(match, entry, event)
