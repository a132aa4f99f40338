"""Calibration: learn how far our counts are from what the provider bills, from the usage it reports.

Claude has no public tokenizer, so its counts are estimates. Every response carries the truth for
the request that produced it (input plus cache tokens); `Calibrator.observe(counted, reported)`
takes those pairs and keeps a robust factor: the weighted median ratio picks the centre, pairs far
from it (a request with an injected reminder, a cache accounting quirk) are ignored, and the factor
is the ratio of the totals of the rest. Its state is a small dict, stored with the session.

`usage_observations` derives such pairs from a recorded session: the growth of the reported context
between two calls is what the provider counted for the first call's answer plus the messages
appended after it (the usage-delta method of reference/evals-and-transcripts.md section 3.2, except
that the answer is counted by us rather than taken from `output_tokens`, which Claude Code records
from a partial stream and so often understates).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxwin.errors import ArgumentError
from ctxwin.messages import Message, Thinking
from ctxwin.tokens.base import TokenCounter

MAX_OBSERVATIONS = 64  # the most recent pairs kept: the factor follows a session whose content mix changes
OUTLIER_LOG_RATIO = 0.25  # a pair whose ratio is more than e^0.25 (~28 %) from the median is an outlier
PRIOR_TOKENS = 2_000  # the prior weighs like one pair of this many counted tokens
MIN_COUNTED = 50  # pairs with fewer counted tokens say more about framing noise than about the tokenizer
MAX_RATIO = 20.0  # a reported/counted ratio beyond this (or below its inverse) is a bookkeeping error
MIN_DELTA_TOKENS = 500  # usage deltas smaller than this are too noisy to calibrate on
MIN_RESULT_CHARS = 2_000  # ... and so are pairs whose appended tool results are shorter than this
STATE_VERSION = 1


@dataclass
class Calibrator:
    """A per-model correction factor learned from (counted, reported) token pairs.

    `prior` is the factor before any observation (1.0: trust the counter). `factor` multiplies the
    counter's counts."""

    prior: float = 1.0
    max_observations: int = MAX_OBSERVATIONS
    observations: list[tuple[int, int]] = field(default_factory=list)
    rejected: int = 0  # pairs refused outright (too small, impossible ratio)
    _factor: float | None = field(default=None, init=False, repr=False, compare=False)

    def observe(self, counted: int, reported: int) -> bool:
        """Record one pair. Returns False (and counts it in `rejected`) for a pair that cannot be
        used: too few tokens, or a ratio no tokenizer difference explains."""
        if counted < MIN_COUNTED or reported <= 0 or not 1 / MAX_RATIO <= reported / counted <= MAX_RATIO:
            self.rejected += 1
            return False
        self.observations.append((int(counted), int(reported)))
        del self.observations[: -self.max_observations]
        self._factor = None
        return True

    def set_factor(self, factor: float) -> None:
        """Seed a known factor (from an earlier session of the same model, or a replay's setting):
        it becomes the prior and the kept pairs are dropped, so `factor` is exactly `factor` until
        new pairs arrive, which then refine it."""
        if not math.isfinite(factor) or not 1 / MAX_RATIO <= factor <= MAX_RATIO:
            raise ArgumentError(f"calibration factor {factor!r} is outside [{1 / MAX_RATIO}, {MAX_RATIO}]")
        self.prior = float(factor)
        self.observations.clear()
        self._factor = None

    @property
    def factor(self) -> float:
        if self._factor is None:
            self._factor = robust_factor(self.observations, self.prior)
        return self._factor

    @property
    def inliers(self) -> int:
        """How many of the kept pairs the factor rests on."""
        centre = math.log(self.factor)
        return sum(1 for c, r in self.observations if abs(math.log(r / c) - centre) <= OUTLIER_LOG_RATIO)

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "prior": self.prior, "max_observations": self.max_observations,
                "observations": [list(pair) for pair in self.observations], "rejected": self.rejected,
                "factor": self.factor}

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Calibrator:
        calibrator = Calibrator(prior=float(data.get("prior", 1.0)),
                                max_observations=int(data.get("max_observations", MAX_OBSERVATIONS)),
                                rejected=int(data.get("rejected", 0)))
        calibrator.observations = [(int(c), int(r)) for c, r in data.get("observations", ())]
        return calibrator


def robust_factor(pairs: list[tuple[int, int]], prior: float = 1.0) -> float:
    """The weighted median of reported/counted (weights: counted tokens, the prior included as one
    pair of PRIOR_TOKENS), then the total ratio over the pairs within OUTLIER_LOG_RATIO of it."""
    points = [(math.log(r / c), c) for c, r in pairs] + [(math.log(prior), PRIOR_TOKENS)]
    points.sort()
    half = sum(w for _, w in points) / 2
    running = 0.0
    centre = points[-1][0]
    for log_ratio, weight in points:
        running += weight
        if running >= half:
            centre = log_ratio
            break
    counted = float(PRIOR_TOKENS) if abs(math.log(prior) - centre) <= OUTLIER_LOG_RATIO else 0.0
    reported = prior * counted
    for c, r in pairs:
        if abs(math.log(r / c) - centre) <= OUTLIER_LOG_RATIO:
            counted += c
            reported += r
    return reported / counted if counted else math.exp(centre)


class CalibratedCounter:
    """A counter whose counts are multiplied by a calibrator's current factor."""

    exact = False

    def __init__(self, counter: TokenCounter, calibrator: Calibrator) -> None:
        self.inner = counter
        self.calibrator = calibrator
        self.name = f"{counter.name}+calibrated"

    def count_text(self, text: str) -> int:
        return round(self.inner.count_text(text) * self.calibrator.factor)

    def count_message(self, message: Message) -> int:
        return round(self.inner.count_message(message) * self.calibrator.factor)


@dataclass(frozen=True, slots=True)
class UsageObservation:
    """One calibration pair from a recorded session: the messages appended between two calls, our
    count of them, and what the provider's usage says they cost."""

    first: int  # index of the first call's answer
    end: int  # index after the last
    counted: int
    reported: int


class RecordedUsage(Protocol):
    """What calibration needs of one recorded model call (`ctxwin.transcripts.UsageRecord` is one):
    the index of the answer it produced, its model, and everything the model read on it."""

    @property
    def message_index(self) -> int: ...
    @property
    def model(self) -> str | None: ...
    @property
    def context_tokens(self) -> int: ...


def usage_observations(messages: Sequence[Message], usage: Iterable[RecordedUsage], counter: TokenCounter, *,
                       compacted_at: Iterable[int] = (), min_tokens: int = MIN_DELTA_TOKENS,
                       min_result_chars: int = MIN_RESULT_CHARS) -> list[UsageObservation]:
    """Calibration pairs from a session's recorded usage: `messages` as sent, `usage` of its model calls,
    and the message indices where a compaction took effect (`compacted_at`). A pair is taken between consecutive calls
    of the same model when the first call's answer has no thinking (whose text a session may not
    hold in full), no compaction happened in between, the provider's delta is at least `min_tokens`
    and the appended tool results hold at least `min_result_chars` characters (small deltas are
    dominated by what a harness adds unrecorded, such as Claude Code's reminders after an edit)."""
    calls = sorted(usage, key=lambda u: u.message_index)
    compacted = set(compacted_at)
    out = []
    for before, after in itertools.pairwise(calls):
        start, stop = before.message_index, after.message_index
        if stop <= start or before.model != after.model or _has_thinking(messages[before.message_index]):
            continue
        if any(start < index <= stop for index in compacted):
            continue
        appended = messages[start + 1:stop]
        if sum(len(r.text) for m in appended for r in m.tool_results) < min_result_chars:
            continue
        reported = after.context_tokens - before.context_tokens
        if reported < min_tokens:
            continue
        counted = sum(counter.count_message(m) for m in messages[start:stop])
        out.append(UsageObservation(start, stop, counted, reported))
    return out


def _has_thinking(message: Message) -> bool:
    return any(isinstance(block, Thinking) for block in message.blocks)
