"""Replay one session under several policies and compare what each would have sent and cost.

Every policy is measured in the same unit: the model's tokens. For a transcript with recorded usage
(Claude Code, Pi, Codex), the engine's counter is calibrated on it (`replay_setup`: the usage-delta
pairs of `ctxwin.tokens.usage_observations`, through a `Calibrator`), and what the file does not hold
(the harness's system prompt and tool schemas) is a fixed overhead measured on the first call: the
recorded context of that call minus the engine's count of the same request. The overhead is added to
every policy alike, so `recorded` (what the harness really sent, from its usage records) sits on the
same scale as the replays.

Baselines next to the presets: `raw` (nothing managed, unlimited window), `truncate` (drop the oldest
rounds), `masking` (last-10 observation masking), `recorded`, and the Python ecosystem's own answers
(`ctxwin.evaluation.baselines`): `langchain` (LangChain's real SummarizationMiddleware and
ContextEditingMiddleware) and `anthropic-edits` (Anthropic's `clear_tool_uses_20250919`).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwin import policies
from ctxwin.engine import Prepared
from ctxwin.engine.engine import UNLIMITED_WINDOW
from ctxwin.errors import InputError
from ctxwin.evaluation import baselines
from ctxwin.evaluation.cost import (
    CallCost,
    CallTokens,
    Pricing,
    call_costs,
    model_pricing,
    pricing_for,
    recorded_cost,
    summarize,
)
from ctxwin.evaluation.replay import CallRecord, PrefixCaches, call_model, call_record, iter_replay, model_calls
from ctxwin.pipeline.view import Event
from ctxwin.store.blobs import FileBlobStore
from ctxwin.tokens import Calibrator, counter_for, model_info
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.health import transcript_observations
from ctxwin.transcripts.model import Transcript

RECORDED = "recorded"
"""The name of the baseline that is what the real harness sent (from its usage records)."""
BASELINES = ("raw", "truncate", "masking", RECORDED, *baselines.NAMES)
DEFAULT_POLICIES = (*policies.names(), RECORDED)
PREFIX_KEPT_SHARE = 0.95
"""A recorded call kept the prefix when its cache reads cover this share of the previous call's context."""
HARNESS_FOLDERS: dict[str, tuple[str, str]] = {
    "claude-code": ("~/.claude/projects", "*.jsonl"),
    "pi": ("~/.pi/agent/sessions", "*.jsonl"),
    "codex": ("~/.codex/sessions", "*.jsonl"),
}
"""Where each harness keeps its session files (folder, file pattern searched recursively)."""

Progress = Callable[[str, int, int], None]
"""`progress(task, done, total)`: called as work advances (a task is a policy name or a file)."""


# --------------------------------------------------------------------------------------------------
# Setup shared by compare, retention and needles


@dataclass(frozen=True, slots=True)
class ReplaySetup:
    """How a transcript is replayed so that every policy counts in the model's tokens.

    `factor` multiplies the engine's counter (1.0 when there is no usage to calibrate on or the
    counter is exact); `overhead_tokens` (model tokens) is what every request carries that the file
    does not hold."""

    model: str | None
    window: int | None
    factor: float
    calibration_pairs: int
    counter: str
    overhead_tokens: int
    first_call_recorded: int | None
    first_call_counted: int | None

    def replay_options(self) -> dict[str, Any]:
        return {"model": self.model, "window": self.window, "overhead_tokens": self.overhead_tokens,
                "calibration": self.factor}

    def to_dict(self) -> dict[str, Any]:
        return {"factor": round(self.factor, 4), "pairs": self.calibration_pairs, "counter": self.counter,
                "overhead_tokens": self.overhead_tokens, "first_call_recorded_tokens": self.first_call_recorded,
                "first_call_counted_tokens": self.first_call_counted}


def as_transcript(source: Transcript | str | Path) -> Transcript:
    return source if isinstance(source, Transcript) else load_transcript(source)


def calibration_factor(transcript: Transcript, model: str | None = None) -> tuple[float, int, str]:
    """(factor, pairs used, counter name): how far the engine's counter is from the provider's count
    on this transcript. An exact counter, or a transcript without usable usage, gets 1.0."""
    counter = counter_for(model or transcript.model)
    if counter.exact or not transcript.usage:
        return 1.0, 0, counter.name
    calibrator = Calibrator()
    pairs = transcript_observations(transcript, counter)
    used = sum(1 for pair in pairs if calibrator.observe(pair.counted, pair.reported))
    return (calibrator.factor if used else 1.0), used, counter.name


def replay_setup(transcript: Transcript, *, model: str | None = None, window: int | None = None) -> ReplaySetup:
    """Calibration factor and fixed overhead for replaying `transcript` (see the module docstring)."""
    model = model or transcript.model
    factor, pairs, counter = calibration_factor(transcript, model)
    usage = sorted(transcript.usage, key=lambda u: u.message_index)
    first = usage[0] if usage else None
    if first is None:
        return ReplaySetup(model, window, factor, pairs, counter, 0, None, None)
    counted = None
    for index, prepared, _engine in iter_replay(transcript, "raw", model=model, calibration=factor):
        if index >= first.message_index:
            counted = prepared.tokens
            break
    overhead = max(0, first.context_tokens - (counted or 0))
    return ReplaySetup(model, window, factor, pairs, counter, overhead,
                       first.context_tokens, counted)


@contextmanager
def blob_store() -> Iterator[FileBlobStore]:
    """A temporary blob store, so that spills get real handles that resolve during the replay."""
    with tempfile.TemporaryDirectory(prefix="ctxwin-replay-") as directory:
        yield FileBlobStore(directory)


# --------------------------------------------------------------------------------------------------
# One policy's run


@dataclass
class PolicyRun:
    """What one policy (or the recorded harness) sent at every model call, and what it cost."""

    name: str
    calls: list[dict[str, Any]]
    costs: list[CallCost]
    pricing: Pricing
    compactions: int
    events: dict[str, int]
    valid: bool
    over_budget_calls: int
    prefix_kept_fraction: float
    budget: int | None = None
    window: int | None = None
    latency_ms: list[float] = field(default_factory=list)

    @property
    def cumulative_tokens(self) -> int:
        return sum(c["tokens"] for c in self.calls)

    @property
    def peak_tokens(self) -> int:
        return max((c["tokens"] for c in self.calls), default=0)

    def to_dict(self, *, timeline: bool = True) -> dict[str, Any]:
        cost = summarize(self.costs, self.pricing)
        out: dict[str, Any] = {
            "calls": len(self.calls),
            "cumulative_input_tokens": self.cumulative_tokens,
            "peak_tokens": self.peak_tokens,
            "compactions": self.compactions,
            "prefix_kept_fraction": round(self.prefix_kept_fraction, 4),
            "cost_cached_usd": round(cost.cached_usd, 4),
            "cost_uncached_usd": round(cost.uncached_usd, 4),
            "cost_cached_units": round(cost.cached_units),
            "cache_read_tokens": cost.read_tokens,
            "cache_write_tokens": cost.write_tokens,
            "cache_hit_rate": round(cost.hit_rate, 4),
            "cache_expired_calls": cost.expired_calls,
            "events": dict(sorted(self.events.items())),
            "valid": self.valid,
            "over_budget_calls": self.over_budget_calls,
            "budget": self.budget,
            "window": self.window,
        }
        if self.latency_ms:
            ordered = sorted(self.latency_ms)
            out["latency_ms"] = {"mean": round(statistics.fmean(ordered), 3),
                                 "p95": round(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)], 3),
                                 "max": round(ordered[-1], 3)}
        if timeline:
            out["timeline"] = [{**c, "cost_units": round(k.units)} for c, k in zip(self.calls, self.costs, strict=True)]
        return out


def _event_dict(event: Event, factor: float) -> dict[str, Any]:
    """An event for the timeline: its counts in model tokens, without the (long) entry id lists."""
    return {"stage": event.stage, "action": event.action, "tokens_before": round(event.tokens_before * factor),
            "tokens_after": round(event.tokens_after * factor), "reason": event.reason,
            "breaks_prefix": event.breaks_prefix, "entries": len(event.entry_ids)}


def _compactions(calls: Sequence[CallRecord]) -> int:
    return sum(1 for c in calls for e in c.events if e.is_compaction)


def run_policy(transcript: Transcript, name: str, setup: ReplaySetup, pricing: Pricing,
               progress: Progress | None = None, *, per_model: bool = True) -> PolicyRun:
    """Replay `transcript` under one policy (a preset name, a TOML path or one of `baselines.NAMES`)
    and price every call: each at the model that made it, with a cache per model (`per_model`; off
    when the whole replay is for one model given by the caller)."""
    total = len(model_calls(transcript))
    records: list[CallRecord] = []
    last: Prepared | None = None
    caches = PrefixCaches()
    replayed = baselines.iter_baseline if name in baselines.NAMES else iter_replay
    with blob_store() as blobs:
        for index, last, engine in replayed(transcript, name, blobs=blobs, **setup.replay_options()):
            model = call_model(transcript, index) if per_model else setup.model
            records.append(call_record(index, last, engine, model=model, caches=caches))
            if progress is not None:
                progress(name, len(records), total)
    calls = [{"call": n, "message_index": c.index, "model": c.model, "tokens": c.tokens,
              "cached_tokens": c.cached_tokens,
              "categories": dict(c.categories), "prefix_kept": c.prefix_kept,
              "events": [_event_dict(e, setup.factor) for e in c.events]} for n, c in enumerate(records)]
    costs = call_costs([CallTokens(c.tokens, c.cached_tokens, c.timestamp, c.model) for c in records], pricing)
    kept = [c.prefix_kept for c in records[1:]]
    events: dict[str, int] = {}
    for call in records:
        for event in call.events:
            events[event.stage] = events.get(event.stage, 0) + 1
    # The budget of the last request: the engine's after any recovery, or a baseline's own.
    limited = last is not None and last.window < UNLIMITED_WINDOW
    return PolicyRun(
        name=name, calls=calls, costs=costs, pricing=pricing, compactions=_compactions(records), events=events,
        valid=all(c.valid for c in records), over_budget_calls=sum(1 for c in records if c.over_budget),
        prefix_kept_fraction=sum(kept) / len(kept) if kept else 1.0,
        budget=last.budget if limited and last is not None else None,
        window=last.window if limited and last is not None else None,
        latency_ms=[c.latency_ms for c in records])


def recorded_run(transcript: Transcript, setup: ReplaySetup, pricing: Pricing, *,
                 per_model: bool = True) -> PolicyRun:
    """What the real harness sent, call by call, from its usage records: context = input + cache
    reads + cache writes; priced from its own cache reads and writes, at the price of the model each
    record names (`per_model`). Compaction calls and sub-agent calls are not in the records and are
    not counted."""
    usage = sorted(transcript.usage, key=lambda u: u.message_index)
    if not usage:
        raise InputError(f"{transcript.source or 'this transcript'} has no usage records",
                         "the `recorded` baseline needs a session file with usage (Claude Code, Pi, Codex)")
    compaction_calls = {}
    for record in transcript.compactions:
        after = next((u.message_index for u in usage if u.message_index >= record.index), None)
        if after is not None:
            compaction_calls[after] = record
    window = setup.window or model_info(setup.model).context_window
    calls: list[dict[str, Any]] = []
    costs: list[CallCost] = []
    kept: list[bool] = []
    previous = None
    for n, u in enumerate(usage):
        tokens = u.context_tokens
        events = []
        if u.message_index in compaction_calls:
            record = compaction_calls[u.message_index]
            events.append({"stage": "compaction", "action": "recorded", "tokens_before": record.tokens_before or 0,
                           "tokens_after": tokens, "reason": "the harness compacted here", "breaks_prefix": True,
                           "entries": record.index - (record.first_kept_index or record.index)})
        system = min(setup.overhead_tokens, tokens)
        calls.append({"call": n, "message_index": u.message_index, "tokens": tokens,
                      "cached_tokens": u.cache_read_tokens,
                      "categories": {"system": system, "summary": 0, "tool_results": 0, "messages": tokens - system},
                      "prefix_kept": previous is None or u.cache_read_tokens >= PREFIX_KEPT_SHARE * previous,
                      "events": events})
        if previous is not None:
            kept.append(calls[-1]["prefix_kept"])
        price = model_pricing(pricing, u.model) if per_model else pricing
        costs.append(recorded_cost(u.cache_read_tokens, u.cache_write_tokens, u.input_tokens, price,
                                   u.cache_write_1h_tokens))
        previous = tokens
    return PolicyRun(RECORDED, calls, costs, pricing, len(compaction_calls),
                     {"compaction": len(compaction_calls)} if compaction_calls else {}, True,
                     sum(1 for c in calls if c["tokens"] > window),
                     sum(kept) / len(kept) if kept else 1.0, None, window)


# --------------------------------------------------------------------------------------------------
# The comparison


@dataclass
class Comparison:
    file: str | None
    format: str
    model: str | None
    setup: ReplaySetup
    pricing: Pricing
    runs: dict[str, PolicyRun]

    def to_dict(self, *, timeline: bool = True) -> dict[str, Any]:
        raw = self.runs.get("raw")
        recorded = self.runs.get(RECORDED)
        out: dict[str, Any] = {}
        for name, run in self.runs.items():
            row = run.to_dict(timeline=timeline)
            if raw is not None and raw.cumulative_tokens:
                row["share_of_raw_tokens"] = round(run.cumulative_tokens / raw.cumulative_tokens, 4)
            if recorded is not None and recorded.cumulative_tokens:
                row["share_of_recorded_tokens"] = round(run.cumulative_tokens / recorded.cumulative_tokens, 4)
            out[name] = row
        cheapest = min(out, key=lambda n: out[n]["cost_cached_units"], default=None)
        return {
            "file": self.file,
            "format": self.format,
            "model": self.model,
            "window": self.setup.window or model_info(self.model).context_window,
            "overhead_tokens": self.setup.overhead_tokens,
            "calibration": self.setup.to_dict(),
            "pricing": self.pricing.to_dict(),
            "cheapest_cached": cheapest,
            "policies": out,
        }


def compare(
    transcript: Transcript | str | Path,
    policies: Sequence[str] = DEFAULT_POLICIES,
    *,
    model: str | None = None,
    window: int | None = None,
    pricing: str = "anthropic",
    cache_ttl: str = "5m",
    progress: Progress | None = None,
) -> Comparison:
    """Replay `transcript` under each policy (preset names, TOML paths, or `recorded`) and price every
    call. Raises `InputError` for an unknown policy or pricing scheme before any work is done."""
    names = check_policies(policies, ecosystem=True)
    transcript = as_transcript(transcript)
    try:
        price = pricing_for(model or transcript.model, pricing, cache_ttl)
    except ValueError as error:
        raise InputError(str(error), "pricing is anthropic or openai; the cache lifetime 5m or 1h") from None
    setup = replay_setup(transcript, model=model, window=window)
    runs: dict[str, PolicyRun] = {}
    for name in names:
        if name == RECORDED:
            runs[name] = recorded_run(transcript, setup, price, per_model=model is None)
            if progress is not None:
                progress(name, 1, 1)
        else:
            runs[name] = run_policy(transcript, name, setup, price, progress, per_model=model is None)
    return Comparison(transcript.source, transcript.format, setup.model, setup, price, runs)


def check_policies(names: Sequence[str], *, recorded: bool = True, ecosystem: bool = False) -> list[str]:
    """`names` without repeats, each a preset, a TOML file or (when allowed) `recorded` or one of the
    ecosystem baselines (`baselines.NAMES`). Raises `InputError` naming the presets for the first
    unknown one, before any work is done."""
    out = list(dict.fromkeys(names))
    if not out:
        raise InputError("no policy given", f"name one or more of {', '.join(DEFAULT_POLICIES)}")
    for name in out:
        if name == RECORDED and not recorded:
            raise InputError(f"`{RECORDED}` cannot be scored here",
                             "the harness's own context is only known at its compactions; leave it out")
        if name in baselines.NAMES and not ecosystem:
            raise InputError(f"`{name}` cannot be scored here",
                             "the ecosystem baselines run in `ctxwin replay --compare`")
        if name in baselines.NAMES:
            baselines.require(name)
        if name != RECORDED and name not in baselines.NAMES:
            policies.get(name)
    return out


# --------------------------------------------------------------------------------------------------
# Finding a harness's newest session


def latest_session(harness: str, home: str | Path | None = None) -> Path:
    """The most recently modified session file of `harness` (claude-code, pi, codex) in its default
    folder. Raises `InputError` when the harness is unknown or has no session there."""
    if harness not in HARNESS_FOLDERS:
        raise InputError(f"unknown harness {harness!r}", f"use one of {', '.join(HARNESS_FOLDERS)}")
    folder, pattern = HARNESS_FOLDERS[harness]
    base = Path(os.path.expanduser(folder)) if home is None else Path(home) / folder.removeprefix("~/")
    candidates = [p for p in base.rglob(pattern) if p.is_file() and "subagents" not in p.parts] \
        if base.is_dir() else []
    if not candidates:
        raise InputError(f"no {harness} session found in {base}",
                         "give the session file's path instead, or check that the harness has run on this machine")
    return max(candidates, key=lambda p: p.stat().st_mtime)
