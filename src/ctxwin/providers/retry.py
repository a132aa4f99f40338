"""Retries: how a failed call is tried again (`RetryPolicy`) and the wait a response asks for."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed call is tried again: on a retryable `ProviderError` (429, 5xx, 529, "overloaded")
    or a connection that failed before any answer, at most `attempts` tries in all. The wait is the
    server's `retry-after-ms` / `retry-after` when it gives one, else `base_delay * 2**n` capped at
    `max_delay`, with jitter (half of it random) so that many clients do not retry in step. A server
    asking for more than `max_retry_after` seconds is not waited for: its error is raised."""

    attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float | None:
        """Seconds to wait before attempt `attempt + 1` (attempt is 1-based), or None: do not retry."""
        if attempt >= self.attempts:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return ceiling / 2 + rng.random() * ceiling / 2


NO_RETRY = RetryPolicy(attempts=1)


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait a response asks for: `retry-after-ms` (OpenAI, Anthropic), else `retry-after` in seconds
    or as an HTTP date. Negative or unreadable values are ignored."""
    lowered = {k.lower(): v for k, v in headers.items()}
    for key, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(key)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            parsed = email.utils.parsedate_to_datetime(value) if key == "retry-after" else None
            if parsed is None:
                continue
            seconds = parsed.timestamp() - (time.time() if now is None else now)
        if seconds >= 0 and seconds == seconds:  # not NaN
            return seconds
    return None
