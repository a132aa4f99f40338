"""`health(path)`: the token breakdown of the context a recorded session would send next.

The view is what the model sees at the end of the session: after the last recorded compaction, the
summary plus the messages kept after it; otherwise every message. Counts use the model's best
counter, calibrated on the session's own recorded usage when it has enough of it (Claude has no
public tokenizer). The system prompt and tool schemas are not in session files; when usage was
recorded, their size is inferred from the first call (reported context minus the messages before it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwin.messages import Message, Text
from ctxwin.tokens import (
    Breakdown,
    CachedCounter,
    CalibratedCounter,
    Calibrator,
    TokenCounter,
    UsageObservation,
    counter_for,
    model_info,
    usage_breakdown,
    usage_observations,
)
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.model import Transcript

MIN_CALIBRATION_PAIRS = 3  # usage-delta pairs needed before the session's own calibration is used


@dataclass(frozen=True)
class HealthReport:
    source: str
    format: str
    model: str | None
    breakdown: Breakdown
    view_messages: int  # messages in the view (after the last compaction)
    total_messages: int
    compaction: dict[str, Any] | None  # the last recorded compaction, if any
    recorded_context: int | None  # the provider's count at the last recorded call
    calibration: dict[str, Any] | None  # factor and pairs, when the session calibrated its counts

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "format": self.format, "model": self.model, "view_messages": self.view_messages,
                "total_messages": self.total_messages, "compaction": self.compaction,
                "recorded_context": self.recorded_context, "calibration": self.calibration,
                **self.breakdown.to_dict()}


def context_view(transcript: Transcript) -> tuple[list[Message], str | None, dict[str, Any] | None]:
    """The messages the model sees at the end, the summary text in front of them, and the facts of
    the compaction that produced it (None for both when the session never compacted). Answers the
    harness does not send again (Pi's aborted and failed ones) are not in the transcript at all."""
    if not transcript.compactions:
        return list(transcript.messages), None, None
    last = max(transcript.compactions, key=lambda c: c.index)
    first_kept = last.first_kept_index if last.first_kept_index is not None else last.index
    facts = {"index": last.index, "first_kept_index": first_kept, "tokens_before": last.tokens_before,
             "trigger": last.trigger, "summary_chars": len(last.summary)}
    return list(transcript.messages[first_kept:]), last.summary, facts


def _inferred_overhead(transcript: Transcript, counter: TokenCounter) -> int:
    """System prompt + tool schemas + anything else unrecorded, from the first recorded call."""
    if not transcript.usage:
        return 0
    first = min(transcript.usage, key=lambda u: u.message_index)
    seen = sum(counter.count_message(m) for m in transcript.messages[: first.message_index])
    return max(first.context_tokens - seen, 0)


def transcript_observations(transcript: Transcript, counter: TokenCounter) -> list[UsageObservation]:
    """The calibration pairs of a recorded session (`ctxwin.tokens.usage_observations` on its messages,
    usage and compaction points)."""
    return usage_observations(transcript.messages, transcript.usage, counter,
                              compacted_at=[c.index for c in transcript.compactions])


def health_of(transcript: Transcript, model: str | None = None, counter: TokenCounter | None = None) -> HealthReport:
    """The health report of an already loaded transcript."""
    name = model or transcript.model
    info = model_info(name)
    base = CachedCounter(counter or counter_for(name))
    calibration = None
    active: TokenCounter = base
    if counter is None and not base.exact and transcript.usage and (model is None or model == transcript.model):
        pairs = transcript_observations(transcript, base)
        if len(pairs) >= MIN_CALIBRATION_PAIRS:
            calibrator = Calibrator()
            for pair in pairs:
                calibrator.observe(pair.counted, pair.reported)
            active = CalibratedCounter(base, calibrator)
            calibration = {"factor": round(calibrator.factor, 4), "pairs": len(pairs), "inliers": calibrator.inliers}
    view, summary, compaction = context_view(transcript)
    overhead = _inferred_overhead(transcript, active) if model is None or model == transcript.model else 0
    extra = {"system_prompt": (overhead, "system prompt and tool schemas, inferred from the first call's usage")} \
        if overhead else None
    if summary is not None:
        view = [Message("user", (Text(summary),), meta={"summary": True}), *view]
    breakdown = usage_breakdown(view, model=info, counter=active, extra=extra)
    recorded = max(transcript.usage, key=lambda u: u.message_index).context_tokens if transcript.usage else None
    return HealthReport(transcript.source or "", transcript.format, name, breakdown, len(view),
                        len(transcript.messages), compaction, recorded, calibration)


def health(path: str | Path, model: str | None = None, format: str | None = None) -> HealthReport:
    """Read a session file and report the token breakdown of the context it would send next."""
    return health_of(load_transcript(path, format=format), model=model)
