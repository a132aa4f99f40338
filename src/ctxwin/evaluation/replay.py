"""The replay driver: feed a transcript to an engine message by message and prepare a request at
every point where the real agent called the model (before each assistant message). What each call
would have sent, what the pipeline did, and whether the prompt prefix survived are the raw material
of `ctxwin replay`, the cost model and the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxwin import policies
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.messages import Message
from ctxwin.messages.pairing import validate
from ctxwin.pipeline.validate import common_prefix
from ctxwin.pipeline.view import Event, keys_of, total_tokens
from ctxwin.policies.model import Policy
from ctxwin.store.base import BlobStore
from ctxwin.store.entries import epoch
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.tokens.base import TokenCounter
from ctxwin.transcripts.model import Transcript

if TYPE_CHECKING:  # only the parameter's type: evaluation runs nothing of compaction's (it scores it)
    from ctxwin.compaction.base import Summarizer


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One model call of the replay. Tokens are model tokens (calibrated estimate); `cached_tokens`
    is what a prompt cache could reuse from the previous call's request."""

    index: int
    tokens: int
    messages: int
    cached_tokens: int
    prefix_kept: bool
    valid: bool
    over_budget: bool
    latency_ms: float
    timestamp: float | None
    events: tuple[Event, ...] = ()
    categories: dict[str, int] = field(default_factory=dict)
    model: str | None = None
    """The model that made this call (in the transcript); caches and prices are per model."""


@dataclass
class PrefixCaches:
    """The last request sent to each model: a provider's prompt cache is per model, so a call can
    only reuse the prefix it shares with the previous call *of its own model*, not with a call another
    model made in between."""

    last: dict[str | None, tuple[str, list[str]]] = field(default_factory=dict)

    def shared_tokens(self, model: str | None, prepared: Prepared) -> int:
        """Tokens (raw counter units) of `prepared` that its model's previous request began with, the
        system prompt and tools included when they did not change; then `prepared` is that model's
        last request."""
        system = prepared.system + "\x00" + json.dumps(prepared.tools, sort_keys=True, default=str)
        keys = keys_of(prepared.items)
        previous = self.last.get(model)
        self.last[model] = (system, keys)
        if previous is None or previous[0] != system:
            return 0
        stable = common_prefix(keys, previous[1])
        return prepared.system_tokens + total_tokens(prepared.items[:stable])


def call_model(transcript: Transcript, index: int) -> str | None:
    """The model that produced message `index` (as recorded), else the transcript's model."""
    model = transcript.messages[index].meta.get("model") if index < len(transcript.messages) else None
    return model if isinstance(model, str) and model else transcript.model


@dataclass
class ReplayResult:
    policy: str
    model: str | None
    window: int
    budget: int
    calls: list[CallRecord]
    engine: ContextEngine = field(repr=False)

    @property
    def cumulative_tokens(self) -> int:
        return sum(c.tokens for c in self.calls)

    @property
    def peak_tokens(self) -> int:
        return max((c.tokens for c in self.calls), default=0)


def model_calls(transcript: Transcript) -> list[int]:
    """Indices of the messages the real agent's model calls produced (its assistant messages)."""
    return [i for i, m in enumerate(transcript.messages) if m.role == "assistant"]


def timestamp(message: Message) -> float | None:
    """Seconds since the epoch from a message's recorded timestamp (ISO text or epoch ms)."""
    return epoch(message.meta.get("timestamp"))


def categories(prepared: Prepared) -> dict[str, int]:
    """Tokens of a request by category (system, summary, tool results, messages), calibrated."""
    factor = prepared.tokens / prepared.raw_tokens if prepared.raw_tokens else 1.0
    out = {"system": prepared.system_tokens, "summary": 0, "tool_results": 0, "messages": 0}
    for item in prepared.items:
        key = "summary" if item.synthetic else "tool_results" if item.message.role == "tool" else "messages"
        out[key] += item.tokens
    return {k: round(v * factor) for k, v in out.items()}


def call_record(index: int, prepared: Prepared, engine: ContextEngine, *, model: str | None = None,
                caches: PrefixCaches | None = None) -> CallRecord:
    """The record of one model call of a replay (message `index` is what the real call produced, by
    `model`). With `caches`, the cacheable prefix is the one shared with `model`'s previous request;
    without, the one shared with the previous request, whichever model made it."""
    factor = prepared.tokens / max(prepared.raw_tokens, 1)
    shared = caches.shared_tokens(model, prepared) if caches is not None else prepared.stable_prefix_tokens
    return CallRecord(
        index=index,
        tokens=prepared.tokens,
        messages=len(prepared.items),
        cached_tokens=round(shared * factor),
        prefix_kept=prepared.prefix_kept,
        # A model call is a request for an answer: one that ends in an assistant turn (two answers in a
        # row in the source) would have the model continue it instead, so it counts as invalid here.
        valid=prepared.valid and not (prepared.messages and prepared.messages[-1].role == "assistant"
                                      and validate(prepared.messages[-1:], "anthropic", request=True)),
        over_budget=prepared.tokens > prepared.budget,
        latency_ms=prepared.elapsed_ms,
        timestamp=engine.clock(),
        events=tuple(prepared.events),
        categories=categories(prepared),
        model=model,
    )


def iter_replay(
    transcript: Transcript,
    policy: str | Path | Policy = policies.DEFAULT,
    *,
    model: str | None = None,
    window: int | None = None,
    max_output: int | None = None,
    counter: TokenCounter | None = None,
    summarizer: Summarizer | None = None,
    blobs: BlobStore | None = None,
    overhead_tokens: int = 0,
    calibration: float | None = None,
    engine_factory: Callable[..., ContextEngine] = ContextEngine,
) -> Iterator[tuple[int, Prepared, ContextEngine]]:
    """Yield (message index, prepared request, engine) at every model call of the transcript."""
    clock_value = [0.0]
    session = MemorySessionLog(session_id=transcript.session_id or "replay", blobs=blobs,
                               clock=lambda: clock_value[0])
    engine = engine_factory(session, model=model or transcript.model, policy=policy, counter=counter,
                            window=window, max_output=max_output, summarizer=summarizer,
                            clock=lambda: clock_value[0], overhead_tokens=overhead_tokens)
    if calibration is not None:
        engine.calibrator.set_factor(calibration)
    for index, message in enumerate(transcript.messages):
        stamp = timestamp(message)
        if stamp is not None:
            clock_value[0] = stamp
        if message.role == "assistant":
            prepared = engine.prepare()
            yield index, prepared, engine
        engine.append(message)


def replay(
    transcript: Transcript,
    policy: str | Path | Policy = policies.DEFAULT,
    **options: Any,
) -> ReplayResult:
    """Replay a whole transcript; one `CallRecord` per model call."""
    calls: list[CallRecord] = []
    engine: ContextEngine | None = None
    caches = PrefixCaches()
    for index, prepared, engine in iter_replay(transcript, policy, **options):
        model = options.get("model") or call_model(transcript, index)
        calls.append(call_record(index, prepared, engine, model=model, caches=caches))
    if engine is None:
        engine = ContextEngine(model=options.get("model") or transcript.model, policy=policy)
    return ReplayResult(engine.policy.name, engine.model, engine.window, engine.budget, calls, engine)
