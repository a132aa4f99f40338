"""`ContextEngine`: between an agent loop and its model client.

The harness appends messages as they happen and asks for the request to send; the engine runs the
pipeline and returns a provider-ready request that fits, with a report of what it did.

This class is a façade. State is derived from the session log by one reducer (`state`); the view and
the repair of its prefix are caches (`cache`); the request budget is a frozen value (`budget`); the
stage order lives in `run`; recall in `recall`. Opening a session replays its log through the same
reducer that live appends go through, so a resumed engine sends byte for byte what it would have.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from ctxwin import policies
from ctxwin.compaction.base import Summarizer
from ctxwin.compaction.compact import strategy_for
from ctxwin.compaction.strategy import BY_TURNS
from ctxwin.errors import ContextOverflowError, InputError
from ctxwin.memory.files import bootstrap_files
from ctxwin.messages import Message
from ctxwin.pipeline import bootstrap
from ctxwin.pipeline.events import Branched, BranchSwitched, Rewound, StoreDamaged
from ctxwin.pipeline.view import Event, StageContext
from ctxwin.policies.model import Policy
from ctxwin.providers.overflow import is_overflow_error, reported_context_tokens
from ctxwin.store.base import SessionLog
from ctxwin.store.entries import (
    CalibrationEntry,
    CustomEntry,
    MessageEntry,
    PinEntry,
    ProxyRequestEntry,
    epoch,
    parse,
)
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.tokens import CachedCounter, counter_for, model_info
from ctxwin.tokens.base import TokenCounter

from . import restore
from .budget import UNLIMITED_WINDOW, Budget
from .cache import ViewCache
from .inputs import as_messages, check_count, check_limit, short_tokens, tool_schema
from .observe import MAX_OBSERVER_FAILURES, Observation, Observer, Operation, failed_observer
from .policy_file import PolicyFile
from .prepared import Prepared
from .recall import page, resolve
from .recovery import MAX_RECOVERY_ATTEMPTS, Recovery, plan_recovery
from .run import Pipeline, tools_json
from .state import SessionState, apply
from .sync import common_history, extended_leaf


class ContextEngine:
    """Keeps the right working set in the window at every model call.

    `session`: where the log and blobs live (default: in memory). `model`: looked up in the model
    registry for its window, output limit and tokenizer; `window`/`max_output` override it.
    `policy`: a preset name, a TOML path or a `Policy`. `summarizer`: None gives the deterministic
    extractive summarizer. `system` and `tools`: the system prompt and tool schemas sent with every
    request (counted against the budget). `workspace`: where bootstrap files are read from.
    `clock`: seconds since the epoch (tests and replays pass their own). `overhead_tokens`: model
    tokens sent with every request that the engine does not see (a harness's own system prompt and
    tool schemas, as the provider counts them), counted against the budget. `memory_index`: a
    `ctxwin.memory.MemoryIndex` that every appended message is indexed into as it is logged, so that
    what later leaves the window can be searched for (`conversation_search`).

    `observers`: callables told about every `prepare()`, `compact()` and `recover()` (see
    `engine.observe`); telemetry subscribes here (`ctxwin.telemetry.instrument`).
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
        memory_index: Any = None,
        overhead_tokens: int = 0,
    ) -> None:
        self.session: SessionLog = session if session is not None else MemorySessionLog()
        self.model = model
        info = model_info(model)
        check_limit("window", window)
        check_limit("max_output", max_output)
        check_count("overhead_tokens", overhead_tokens)
        self._limits = (int(window or info.context_window), int(max_output or info.max_output))
        self.counter = counter if isinstance(counter, CachedCounter) else CachedCounter(counter or counter_for(model))
        self.summarizer = summarizer
        self.tools = [tool_schema(t) for t in tools or ()]
        self._tools_json = tools_json(self.tools)
        if workspace is not None and not isinstance(workspace, str | Path):
            raise InputError(f"workspace is a folder path, not {type(workspace).__name__}", "pass a str or a Path")
        self.workspace = Path(workspace) if workspace is not None else None
        self.clock = clock or time.time
        self.memory_flush = memory_flush
        self._base_system = system
        self.overhead_tokens = overhead_tokens
        self.memory_index = memory_index
        self._recovery_attempts = 0
        self._last: Prepared | None = None
        self.observers: list[Observer] = []
        self._observer_failures: set[tuple[str, str]] = set()
        self._policy_file = PolicyFile.watch(policy)
        self._open(self._policy_file.policy if self._policy_file else policies.get(policy))

    def _open(self, policy: Policy) -> None:
        """Derive everything from the log: the state through the reducer, then the caches. What the
        store found damaged on the way (and re-attached) is reported once, on the next request."""
        if not hasattr(self, "problems"):  # once per engine, not again after a rewind or a branch
            self.problems = list(getattr(self.session, "problems", ()))
            self._pending_events: list[Event] = [] if not self.problems else [StoreDamaged(
                tuple(p.entry_id for p in self.problems if p.entry_id), 0, 0,
                "; ".join(p.message for p in self.problems[:5])
                + (f"; and {len(self.problems) - 5} more" if len(self.problems) > 5 else ""),
                problems=tuple(p.to_dict() for p in self.problems))]
        budget = Budget.for_policy(policy, *self._limits)
        self._state = SessionState(budget=budget)
        sinks = [] if self.memory_index is None else [
            lambda entry: self.memory_index.add_entries([entry], session=self.session.session_id)]
        self._pipeline = Pipeline(self.session, self._state, self.counter, policy, ViewCache(self.counter),
                                  sinks=sinks)
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
        self._set_policy(policy)

    def _set_policy(self, policy: Policy | str | Path) -> None:
        policy = policies.get(policy)
        self._last = None
        """A new policy for new decisions; recorded ones stay as they were, so the cached prefix holds."""
        budget = Budget.for_policy(policy, *self._limits)
        current = self._state.budget
        if current.window < budget.window or current.scale != 1.0:  # what recoveries learned still holds
            budget = budget.restored(policy, current.window, current.max_output, current.scale)
        self._state.budget = budget
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
            # The workspace's context files, then MEMORY.md and yesterday's and today's notes, by the clock.
            today = date.fromtimestamp(self.clock())
            section = bootstrap.render(bootstrap_files(self.workspace, today, self.policy.bootstrap),
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
        return [self._pipeline.record(MessageEntry(m)) for m in as_messages(message)]

    def sync(self, messages: Iterable[Message | Mapping[str, Any]], *, other_branches: bool = False) -> list[str]:
        """For callers that resend their whole history on every call (a proxy, a framework adapter):
        append only what the log does not have yet, matched by content. A history that stops
        extending the stored one (the caller compacted, rewound or edited it) continues on a new
        branch from the last message both share, with what was decided about that shared part; nothing
        stored is lost. With `other_branches`, a history that extends another branch's whole history
        goes on on that branch instead (a proxy, where two conversations can share a session; not for
        callers whose own records on a branch change what it holds). Returns the new entry ids."""
        incoming = as_messages(messages)
        history = self._state.history
        stored, shared = common_history(history, incoming)
        if stored < len(history):
            found = extended_leaf(self.session, incoming, shared) if other_branches else None
            if found is not None:  # another branch that this history extends: go on there
                self.session.branch(found[0])
                self._reopen(BranchSwitched((found[0],), 0, 0,
                                            f"the resent history extends another branch of this session ({found[1]} "
                                            "message(s) shared): continued there"))
                return self.append(incoming[found[1]:])
            path = list(self.session.path())
            keep = next(i for i, e in enumerate(path) if e.id == history[stored][0])
            carried = restore.branch_keeping_decisions(self.session, path, keep)
            self._reopen(Branched((history[stored][0],), 0, 0,
                                  f"the resent history no longer extends the stored one after {stored} message(s); "
                                  f"continued on a new branch ({carried} decision(s) carried over)"))
        return self.append(incoming[shared:])

    def pin(self, entry_id: str) -> None:
        """Never summarize this entry away, nor drop it to fit: it stays verbatim in the view. A tool
        call and its results stay together (the pairing is resolved when a compaction or fit runs,
        so results that arrive after the pin are kept too)."""
        if not isinstance(entry_id, str) or entry_id not in self._state.index:
            raise InputError(f"no message entry {entry_id!r} in this session", "pin an id that append() returned")
        if entry_id not in self._state.pins:
            self._pipeline.record(PinEntry(entry_id))
            self._last = None

    def prepare(self) -> Prepared:
        """The request to send now. Never raises for size when a fit exists; raises
        `ContextBudgetError` when none does (the system prompt and tools alone are over the budget),
        or when the policy turned the fit stage off and the request is over its budget."""
        return self._observed("prepare", lambda: (self._prepare(), None))

    def _prepare(self) -> Prepared:
        started = time.perf_counter()
        events, self._pending_events = self._pending_events, []
        events += self._policy_file.follow(self._set_policy) if self._policy_file else []
        now = self.clock()
        system = self.system_prompt  # read once: with bootstrap it reads the workspace files
        try:
            prepared = self._pipeline.prepare(self._context(now, system), system, self._tools_json, self.tools,
                                              compaction=self._triggered)
        except BaseException:
            self._pipeline.runs.clear()  # what the stages of a request that failed did is not the next one's
            raise
        prepared.events[:0] = events
        self._pipeline.last_call_at = now
        self._last = prepared
        prepared.elapsed_ms = (time.perf_counter() - started) * 1000
        return prepared

    # ------------------------------------------------------------------------------------------
    # Restore points

    def mark(self, name: str) -> str:
        """Label the current leaf as restore point `name`. Returns the entry it names."""
        entry = restore.new_mark(self.session, name)
        self._pipeline.record(entry)
        self._last = None
        return entry.target or ""

    def marks(self) -> dict[str, str | None]:
        """Every restore point of the session, on any branch: name -> the entry it names."""
        return restore.marks_of(self.session)

    def rewind(self, name: str) -> Prepared:
        """Go back to restore point `name`: the session continues on a new branch from there, and what
        came after stays on its own. Returns the request to send from there."""
        carried = restore.rewind(self.session, name)
        self._reopen(Rewound((), 0, 0, f"back to restore point {name!r} ({carried} decision(s) carried over)"))
        return self.prepare()

    def _reopen(self, event: Event) -> None:
        """Derive everything again from the log after its leaf moved; `event` is reported next."""
        self._open(self.policy)
        self._last = None
        self._pending_events.append(event)

    def compact(self, focus: str | None = None) -> Prepared:
        """Compact now (a manual `/compact`), optionally focused, and return the new request."""
        def run() -> tuple[Prepared, None]:
            events: list[Event] = []
            self._compaction("manual", focus=focus, force=True)(self._pipeline.cache.items(self._state),
                                                                self._context(self.clock()), events)
            prepared = self._prepare()
            prepared.events[:0] = events
            return prepared, None
        return self._observed("compact", run)

    def _triggered(self, items: list[Any], ctx: StageContext, events: list[Event], trigger: str) -> list[Any]:
        # A compaction that bounds turns is worth it whatever it saves in tokens.
        return self._compaction("threshold" if trigger in ("threshold", "budget") else trigger,
                                force=trigger in BY_TURNS)(items, ctx, events)

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
        try:
            reported = reported_context_tokens(usage)
        except (ValueError, OverflowError) as error:  # NaN or infinite numbers in the usage record
            raise InputError(f"usage record with numbers that are not finite: {error}",
                             "pass the provider's usage as it came (token counts are whole numbers)") from None
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
        return self._observed("recover", lambda: self._recover(error))

    def _recover(self, error: object) -> tuple[Prepared, Recovery]:
        match = is_overflow_error(error, context_window=self.window)
        attempt = self._recovery_attempts + (match is not None)  # only overflows count as attempts
        recovery = plan_recovery(error, match, self._state.budget, self.policy, attempt)
        self._recovery_attempts = attempt
        calibrator = self._state.calibrator
        if recovery.match.observed_tokens and self._last is not None and self._last.raw_tokens \
                and calibrator.observe(self._last.raw_tokens, recovery.match.observed_tokens):
            self._pipeline.record(CalibrationEntry(calibrator.to_dict()))  # logged, as record_usage does
        self._pipeline.record(recovery.entry)
        events = [recovery.event]
        if self.policy.compaction.enabled:
            self._compaction("overflow", force=True)(self._pipeline.cache.items(self._state),
                                                     self._context(self.clock()), events)
        prepared = self._prepare()
        prepared.events[:0] = events
        return prepared, recovery

    def _observed(self, operation: Operation, run: Callable[[], tuple[Prepared, Recovery | None]]) -> Prepared:
        """Run one engine call and tell the observers about it (nothing is timed without observers)."""
        if not self.observers:
            return run()[0]
        started = time.time_ns()
        try:
            prepared, recovery = run()
        except Exception as error:
            self._notify(Observation(operation, started, time.time_ns(), error=error))
            raise
        self._notify(Observation(operation, started, time.time_ns(), prepared, recovery))
        return prepared

    def _notify(self, observation: Observation) -> None:
        for observer in list(self.observers):
            try:
                observer(observation)
            except Exception as error:  # an observer's bug must not break the request it watches
                event = failed_observer(observer, error)
                # Once per observer and kind of error, not per message (one that names the request
                # would be reported on every request): the set stays as small as the observers.
                key = (event.observer, event.error)
                if key not in self._observer_failures and len(self._observer_failures) < MAX_OBSERVER_FAILURES:
                    self._observer_failures.add(key)
                    self._pending_events.append(event)

    # ------------------------------------------------------------------------------------------
    # Looking back

    def recall(self, ref: str, offset: int = 0, limit: int | None = None) -> str:
        """What a placeholder points at, byte for byte: `entry:<id>` (a message as logged),
        `entry:<id>#<call id>` (one tool result), or `blob:<hash>` (a spilled output). `offset` and
        `limit` page the text by characters."""
        page("", offset, limit)  # bad paging is refused before anything is read
        return page(resolve(ref, self._state, self.session.blobs), offset, limit)

    def note(self, entry: ProxyRequestEntry | CustomEntry) -> str:
        """Keep an application's own record in the session log (a proxy's request record, a
        harness's marker). Kept and read back, never rendered into the conversation."""
        if not isinstance(entry, ProxyRequestEntry | CustomEntry):
            raise InputError(f"note() keeps application records, not {type(entry).__name__}",
                             "pass a ProxyRequestEntry or a CustomEntry(kind='custom', payload={'type': ...})")
        return self._pipeline.record(entry)

    def health(self) -> str:
        """One line: `Token usage: 180K / 200K (90%) — compaction due`, for what would be sent now."""
        fresh = self._last is not None and self._pipeline.processed == len(self._state.records)
        prepared = self._last if fresh and self._last is not None else self.prepare()
        share = prepared.tokens / self.window if self.window else 0.0
        damaged = f"; {len(self.problems)} store problem(s): {self.problems[0].message}" if self.problems else ""
        return (f"Token usage: {short_tokens(prepared.tokens)} / {short_tokens(self.window)} ({share:.0%}) — "
                f"{self._pipeline.health(prepared)}{damaged}")

    def _context(self, now: float | None = None, system: str | None = None) -> StageContext:
        system = self.system_prompt if system is None else system
        return self._pipeline.context(system, self._tools_json, self.overhead_tokens, now)


__all__ = ["MAX_RECOVERY_ATTEMPTS", "UNLIMITED_WINDOW", "ContextEngine", "ContextOverflowError", "epoch"]
