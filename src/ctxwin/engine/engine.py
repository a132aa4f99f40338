"""`ContextEngine`: between an agent loop and its model client.

The harness appends messages as they happen and asks for the request to send; the engine runs the
pipeline and returns a provider-ready request that fits, with a report of what it did.

This class is a façade. State is derived from the session log by one reducer (`state`); the view and
the repair of its prefix are caches (`cache`); the request budget is a frozen value (`budget`); the
stage order lives in `run`; recall in `recall`. Opening a session replays its log through the same
reducer that live appends go through, so a resumed engine sends byte for byte what it would have.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxwin import policy as policies
from ctxwin.compaction.base import Summarizer
from ctxwin.compaction.compact import strategy_for
from ctxwin.errors import ContextOverflowError, CtxwinError, InputError
from ctxwin.messages import Message
from ctxwin.messages.providers import from_provider_dict
from ctxwin.pipeline import bootstrap
from ctxwin.pipeline.view import Event, StageContext
from ctxwin.policy.model import Policy
from ctxwin.providers.overflow import is_overflow_error, reported_context_tokens
from ctxwin.store.base import SessionLog
from ctxwin.store.entries import CalibrationEntry, MessageEntry, PinEntry, RecoveryEntry, epoch, parse
from ctxwin.store.memory import MemorySessionLog
from ctxwin.tokens import CachedCounter, counter_for, model_info
from ctxwin.tokens.base import TokenCounter

from .budget import UNLIMITED_WINDOW, Budget
from .cache import ViewCache
from .prepared import Prepared
from .recall import page, resolve
from .run import Pipeline, tools_json
from .state import SessionState, apply
from .sync import common_history

MAX_RECOVERY_ATTEMPTS = 3
"""Overflow recoveries allowed in a row before `recover` gives up (OpenClaw's 3 attempts); a
successful call (`record_usage`) resets the count."""


class ContextEngine:
    """Keeps the right working set in the window at every model call.

    `session`: where the log and blobs live (default: in memory). `model`: looked up in the model
    registry for its window, output limit and tokenizer; `window`/`max_output` override it.
    `policy`: a preset name, a TOML path or a `Policy`. `summarizer`: None gives the deterministic
    extractive summarizer. `system` and `tools`: the system prompt and tool schemas sent with every
    request (counted against the budget). `workspace`: where bootstrap files are read from.
    `clock`: seconds since the epoch (tests and replays pass their own). `overhead_tokens`: model
    tokens sent with every request that the engine does not see (a harness's own system prompt and
    tool schemas, as the provider counts them), counted against the budget.
    """

    def __init__(
        self,
        session: SessionLog | None = None,
        *,
        model: str | None = None,
        policy: str | Path | Policy = policies.DEFAULT,
        summarizer: Summarizer | None = None,
        counter: TokenCounter | None = None,
        window: int | None = None,
        max_output: int | None = None,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        workspace: str | Path | None = None,
        clock: Callable[[], float] | None = None,
        memory_flush: Callable[[list[Message]], None] | None = None,
        overhead_tokens: int = 0,
    ) -> None:
        self.session: SessionLog = session if session is not None else MemorySessionLog()
        self.model = model
        info = model_info(model)
        _check_limit("window", window)
        _check_limit("max_output", max_output)
        self._limits = (window or info.context_window, max_output or info.max_output)
        self.counter = counter if isinstance(counter, CachedCounter) else CachedCounter(counter or counter_for(model))
        self.summarizer = summarizer
        self.tools = [_tool_schema(t) for t in tools or ()]
        self._tools_json = tools_json(self.tools)
        self.workspace = Path(workspace) if workspace is not None else None
        self.clock = clock or time.time
        self.memory_flush = memory_flush
        self._base_system = system
        self.overhead_tokens = overhead_tokens
        self._recovery_attempts = 0
        self._last: Prepared | None = None
        self._open(policies.get(policy))

    def _open(self, policy: Policy) -> None:
        """Derive everything from the log: the state through the reducer, then the caches."""
        budget = Budget.for_policy(policy, *self._limits)
        self._state = SessionState(budget=budget)
        self._pipeline = Pipeline(self.session, self._state, self.counter, policy, ViewCache(self.counter))
        path = self.session.path()
        strategy = strategy_for(policy.compaction)
        for entry in path:
            apply(self._state, entry.id, parse(entry.kind, entry.payload, entry_id=entry.id),
                  counter=self.counter, strategy=strategy, policy=policy)
        if path:
            # The log does not record calls, but every call is followed by an append: the last entry's
            # time stands in for the last call's (cache-TTL pruning needs it).
            self._pipeline.last_call_at = epoch(path[-1].timestamp)
        self._pipeline.catch_up(self._context())

    # ------------------------------------------------------------------------------------------
    # What the engine is configured with

    @property
    def policy(self) -> Policy:
        return self._pipeline.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._pipeline.policy = policy

    @property
    def calibrator(self) -> Any:
        return self._state.calibrator

    @property
    def window(self) -> int:
        return self._state.budget.window

    @property
    def max_output(self) -> int:
        return self._state.budget.max_output

    @property
    def reserve(self) -> int:
        return self._state.budget.reserve

    @property
    def budget(self) -> int:
        """The most tokens a request may have: the window minus the reserve (shrunk after overflow
        errors showed the provider counts more than we do)."""
        return self._state.budget.tokens

    @property
    def system_prompt(self) -> str:
        parts = [p for p in (self._base_system, *self._state.system_parts) if p]
        if self.policy.bootstrap.enabled and self.workspace is not None:
            section = bootstrap.render(bootstrap.read_files(self.workspace, self.policy.bootstrap),
                                       self.policy.bootstrap).text
            if section:
                parts.append(section)
        return "\n\n".join(parts)

    @property
    def messages(self) -> list[Message]:
        """Every message of the current branch as logged (not as the model sees it)."""
        return [r.message for r in self._state.records]

    # ------------------------------------------------------------------------------------------
    # The conversation

    def append(self, message: Message | Mapping[str, Any] | Iterable[Message | Mapping[str, Any]]) -> list[str]:
        """Log one message (canonical, or a provider-format dict, which is converted) or several.
        Returns the entry ids, each durable when the call returns."""
        return [self._pipeline.record(MessageEntry(m)) for m in _as_messages(message)]

    def sync(self, messages: Iterable[Message | Mapping[str, Any]]) -> list[str]:
        """For callers that resend their whole history on every call (a proxy, a framework adapter):
        append only what the log does not have yet, matched by content. A history that stops
        extending the stored one (the caller compacted, rewound or edited it) continues on a new
        branch from the last message both share; nothing stored is lost. Returns the new entry ids."""
        incoming = _as_messages(list(messages))
        stored = [(e.id, Message.from_dict(e.payload)) for e in self.session.path() if e.kind == "message"]
        shared = common_history([m for _, m in stored], incoming)
        if shared < len(stored):
            self.session.branch(stored[shared - 1][0] if shared else None)
            self._open(self.policy)
        return self.append(incoming[shared:])

    def pin(self, entry_id: str) -> None:
        """Never summarize this entry away, nor drop it to fit: it stays verbatim in the view. A tool
        call and its results stay together (the pairing is resolved when a compaction or fit runs,
        so results that arrive after the pin are kept too)."""
        if entry_id not in self._state.index:
            raise CtxwinError(f"no message entry {entry_id!r} in this session", "pin an id that append() returned")
        if entry_id not in self._state.pins:
            self._pipeline.record(PinEntry(entry_id))

    def prepare(self) -> Prepared:
        """The request to send now. Never raises for size when a fit exists; raises
        `ContextBudgetError` when none does (the system prompt and tools alone are over the budget),
        or when the policy turned the fit stage off and the request is over its budget."""
        started = time.perf_counter()
        now = self.clock()
        system = self.system_prompt  # read once: with bootstrap it reads the workspace files
        prepared = self._pipeline.prepare(self._context(now, system), system, self._tools_json, self.tools,
                                          compaction=self._compaction("threshold"))
        self._pipeline.last_call_at = now
        self._last = prepared
        prepared.elapsed_ms = (time.perf_counter() - started) * 1000
        return prepared

    def compact(self, focus: str | None = None) -> Prepared:
        """Compact now (a manual `/compact`), optionally focused, and return the new request."""
        events: list[Event] = []
        self._compaction("manual", focus=focus, force=True)(self._pipeline.cache.items(self._state),
                                                            self._context(self.clock()), events)
        prepared = self.prepare()
        prepared.events[:0] = events
        return prepared

    def _compaction(self, trigger: str, *, focus: str | None = None,
                    force: bool = False) -> Callable[[list[Any], StageContext, list[Event]], list[Any]]:
        def run(items: list[Any], ctx: StageContext, events: list[Event]) -> list[Any]:
            return self._pipeline.compact(items, ctx, events, summarizer=self.summarizer, focus=focus,
                                          trigger=trigger, force=force, memory_flush=self.memory_flush)
        return run

    # ------------------------------------------------------------------------------------------
    # What the provider said

    def record_usage(self, usage: Any) -> float:
        """Calibrate counts from the usage the provider reported for the last prepared request
        (input plus cache reads and writes). Returns the new calibration factor."""
        reported = reported_context_tokens(usage)
        calibrator = self._state.calibrator
        if self._last is None or reported is None or reported <= 0:
            return calibrator.factor
        if calibrator.observe(self._last.raw_tokens, reported):
            self._pipeline.record(CalibrationEntry(calibrator.to_dict()))
        self._recovery_attempts = 0
        return self._state.calibrator.factor

    def is_overflow_error(self, error: object) -> bool:
        """Whether `error` (an SDK exception, an httpx response, an error body, a message, or a usage
        record reporting more input than the window) says the request did not fit."""
        return is_overflow_error(error, context_window=self.window) is not None

    def recover(self, error: object) -> Prepared:
        """After an overflow error: learn from it (the provider's count, its real window), compact,
        shrink the budget, and return a smaller request to retry with. Bounded: after
        MAX_RECOVERY_ATTEMPTS in a row without a successful call it raises `ContextOverflowError`."""
        match = is_overflow_error(error, context_window=self.window)
        if match is None:
            raise CtxwinError(f"not a context overflow error: {_describe(error)}",
                              "recover() handles overflow errors only; retry or surface other errors")
        self._recovery_attempts += 1
        if self._recovery_attempts > MAX_RECOVERY_ATTEMPTS:
            raise ContextOverflowError(
                f"the provider still rejects the request as too long after {MAX_RECOVERY_ATTEMPTS} recoveries "
                f"({match.provider}: {match.pattern})",
                "start a new session with a summary (engine.compact), use a model with a larger window, "
                "or shorten the system prompt and tool schemas")
        budget = self._state.budget.after_overflow(self.policy, match.limit_tokens)
        if match.observed_tokens and self._last is not None and self._last.raw_tokens:
            self._state.calibrator.observe(self._last.raw_tokens, match.observed_tokens)
        self._pipeline.record(RecoveryEntry(budget.window, budget.max_output, budget.scale, match.provider,
                                            match.observed_tokens, match.limit_tokens))
        events = [Event("recovery", "overflow", (), match.observed_tokens or 0, 0,
                        f"{match.provider} overflow ({'silent' if match.silent else match.pattern}); "
                        f"attempt {self._recovery_attempts} of {MAX_RECOVERY_ATTEMPTS}")]
        if self.policy.compaction.enabled:
            self._compaction("overflow", force=True)(self._pipeline.cache.items(self._state),
                                                     self._context(self.clock()), events)
        prepared = self.prepare()
        prepared.events[:0] = events
        return prepared

    # ------------------------------------------------------------------------------------------
    # Looking back

    def recall(self, ref: str, offset: int = 0, limit: int | None = None) -> str:
        """What a placeholder points at, byte for byte: `entry:<id>` (a message as logged),
        `entry:<id>#<call id>` (one tool result), or `blob:<hash>` (a spilled output). `offset` and
        `limit` page the text by characters."""
        page("", offset, limit)  # bad paging is refused before anything is read
        return page(resolve(ref, self._state, self.session.blobs), offset, limit)

    def health(self) -> str:
        """One line: `Token usage: 180K / 200K (90%) — compaction due`, for what would be sent now."""
        fresh = self._last is not None and self._pipeline.processed == len(self._state.records)
        prepared = self._last if fresh and self._last is not None else self.prepare()
        share = prepared.tokens / self.window if self.window else 0.0
        compaction = self.policy.compaction
        if self.policy.unlimited_window:
            state = "unlimited window"
        elif prepared.tokens > self.budget:
            state = "over budget"
        elif compaction.enabled and strategy_for(compaction).due(prepared.raw_tokens, self.window, compaction,
                                                                 self._state.calibrator.factor):
            state = "compaction due"
        elif share >= 0.75:
            state = "warn"
        else:
            state = "ok"
        return f"Token usage: {_k(prepared.tokens)} / {_k(self.window)} ({share:.0%}) — {state}"

    def _context(self, now: float | None = None, system: str | None = None) -> StageContext:
        system = self.system_prompt if system is None else system
        factor = self._state.calibrator.factor if self._state.calibrator.factor > 0 else 1.0
        # Stages count in counter units; the overhead is given in the model's own tokens.
        system_tokens = round(self.overhead_tokens / factor) + (self.counter.count_text(system) if system else 0) + (
            self.counter.count_text(self._tools_json) if self.tools else 0)
        return StageContext(counter=self.counter, window=self.window, budget=int(self.budget / factor),
                            system_tokens=system_tokens, now=now, last_call_at=self._pipeline.last_call_at,
                            blobs=self.session.blobs, calls=self._state.calls, pins=frozenset(self._state.pins))


def _as_messages(value: Any) -> list[Message]:
    if isinstance(value, Message):
        return [value]
    if isinstance(value, str | bytes):
        raise InputError("append() takes messages, not text",
                         'wrap it: Message("user", (Text(...),)) or {"role": "user", "content": ...}')
    if isinstance(value, Mapping):
        return from_provider_dict(value)
    if not isinstance(value, Iterable):
        raise InputError(f"append() takes a message, a provider dict or a list of them, not {type(value).__name__}",
                         'pass Message("user", (Text(...),)) or {"role": "user", "content": ...}')
    out: list[Message] = []
    for item in value:
        out.extend(_as_messages(item))
    return out


def _tool_schema(tool: Any) -> dict[str, Any]:
    if not isinstance(tool, Mapping) or not isinstance(tool.get("name", tool.get("function")), str | Mapping):
        raise InputError(f"a tool schema is a dict with a name, not {tool!r:.80}",
                         'pass provider tool schemas, e.g. {"name": "read", "description": ..., "input_schema": {...}}')
    return dict(tool)


def _check_limit(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise InputError(f"{name} must be a positive number of tokens (got {value!r})",
                         f"leave {name} unset to take the model registry's value")


def _describe(error: object) -> str:
    try:
        return str(error)[:200]
    except Exception:  # an exception whose __str__ raises must not escape recover()
        return f"<{type(error).__name__}>"


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.0f}K" if tokens >= 1000 else str(tokens)


__all__ = ["MAX_RECOVERY_ATTEMPTS", "UNLIMITED_WINDOW", "ContextEngine", "ContextOverflowError", "epoch"]
