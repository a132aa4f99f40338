"""`ContextEngine`: between an agent loop and its model client.

The harness appends messages as they happen and asks for the request to send; the engine runs the
pipeline and returns a provider-ready request that fits, with a report of what it did.

This class is a façade. Everything it changes between calls is one `Runtime` (`runtime`): beside the
reducer's state (`state`, derived from the session log entry by entry), what the engine remembers of
its own requests and what it caches (the view, `cache`; the repair of its prefix, `repair`). The
request budget is a frozen value (`budget`); the stage order lives in `run`; recall in `recall`. Opening
a session replays its log through the same reducer that live appends go through, so a resumed engine
sends byte for byte what it would have; `catch_up` folds in what another writer appended the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date
from pathlib import Path
from typing import Any

from ctxwin import policies
from ctxwin.compaction.base import Summarizer
from ctxwin.compaction.strategy import BY_TURNS
from ctxwin.errors import ContextOverflowError, InputError
from ctxwin.memory.files import bootstrap_files
from ctxwin.messages import Message
from ctxwin.pipeline import bootstrap
from ctxwin.pipeline.events import Branched, BranchSwitched, Rewound, StoreDamaged
from ctxwin.pipeline.view import Event, Item, StageContext
from ctxwin.policies.model import Policy
from ctxwin.providers.overflow import is_overflow_error, reported_context_tokens
from ctxwin.store.base import SessionLog, StoreProblem
from ctxwin.store.entries import (
    CalibrationEntry,
    CustomEntry,
    MessageEntry,
    PinEntry,
    ProxyRequestEntry,
    epoch,
)
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.tokens import CachedCounter, counter_for, model_info
from ctxwin.tokens.base import TokenCounter

from . import restore
from .budget import UNLIMITED_WINDOW, Budget
from .inputs import (
    as_messages,
    check_callable,
    check_count,
    check_limit,
    check_provides,
    check_text,
    short_tokens,
    tool_schemas,
)
from .observe import MAX_OBSERVER_FAILURES, Observation, Observer, Operation, failed_observer
from .policy_file import PolicyFile
from .prepared import Prepared
from .recall import page, resolve
from .recovery import MAX_RECOVERY_ATTEMPTS, Recovery, plan_recovery
from .run import Pipeline, tools_json
from .runtime import Branch, Runtime
from .state import SessionState
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
        check_provides("session", session, ("append", "branch", "path", "get"),
                       'a session log: Session.open("runs/abc"), Session.postgres(dsn, id)')
        check_text("model", model)
        check_text("system", system)
        check_limit("window", window)
        check_limit("max_output", max_output)
        check_count("overhead_tokens", overhead_tokens)
        check_provides("counter", counter, ("count_text", "count_message"), "a TokenCounter: tokens.counter_for(model)")
        check_provides("summarizer", summarizer, ("summarize",), "a Summarizer: LLMSummarizer(client)")
        check_provides("memory_index", memory_index, ("add_entries",), "a ctxwin.memory.MemoryIndex")
        check_callable("clock", clock, "a function giving seconds since the epoch")
        check_callable("memory_flush", memory_flush, "a function taking the messages to flush")
        self.session: SessionLog = session if session is not None else MemorySessionLog()
        self.model = model
        info = model_info(model)
        # Without an explicit max_output the registry's is a default, shrunk to fit a small explicit window.
        self._limits = (int(window or info.context_window), int(max_output or info.max_output), max_output is None)
        self.counter = counter if isinstance(counter, CachedCounter) else CachedCounter(counter or counter_for(model))
        self.summarizer = summarizer
        self.tools = tool_schemas(tools)
        self._tools_json = tools_json(self.tools)
        if workspace is not None and not isinstance(workspace, str | Path):
            raise InputError(f"workspace is a folder path, not {type(workspace).__name__}", "pass a str or a Path")
        self.workspace = Path(workspace) if workspace is not None else None
        self.clock = clock or time.time
        self.memory_flush = memory_flush
        self._base_system = system
        self.overhead_tokens = overhead_tokens
        self.memory_index = memory_index
        self.observers: list[Observer] = []
        self._policy_file = PolicyFile.watch(policy)
        first = self._policy_file.policy if self._policy_file else policies.get(policy)
        # What the store found damaged on opening (and re-attached) is reported once, on the next request.
        problems = list(getattr(self.session, "problems", ()))
        self._rt = Runtime(self._new_branch(first), problems=problems,
                           pending=[damaged_event(problems)] if problems else [])
        sinks = [] if memory_index is None else [
            lambda entry: memory_index.add_entries([entry], session=self.session.session_id)]
        self._pipeline = Pipeline(self.session, self.counter, first, self._rt, sinks=sinks)
        self._pipeline.replay(self.session.path(), self._context)

    def _new_branch(self, policy: Policy) -> Branch:
        return Branch(SessionState(budget=Budget.for_policy(policy, *self._limits)))

    def _open(self, policy: Policy) -> None:
        """Derive everything from the log again (its leaf moved): a new branch state, through the reducer."""
        self._rt.branch = self._new_branch(policy)
        self._pipeline.policy = policy
        self._pipeline.replay(self.session.path(), self._context)

    @property
    def _state(self) -> SessionState:
        """The reducer's state of the current branch."""
        return self._rt.branch.state

    @property
    def _observer_failures(self) -> set[tuple[str, str]]:
        return self._rt.observer_failures

    @property
    def problems(self) -> list[StoreProblem]:
        """What the store found damaged when the engine opened the log (and what it did about each)."""
        return self._rt.problems

    # ------------------------------------------------------------------------------------------
    # What the engine is configured with

    @property
    def policy(self) -> Policy:
        return self._pipeline.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._set_policy(policy)

    def _set_policy(self, policy: Policy | str | Path) -> None:
        """A new policy for new decisions; recorded ones stay as they were, so the cached prefix holds."""
        policy = policies.get(policy)
        self._rt.last = None
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
            self._rt.last = None

    def prepare(self, *, max_output: int | None = None) -> Prepared:
        """The request to send now. `max_output`: the output limit this request asks for (its
        `max_tokens` / `max_output_tokens`), which the reserve is sized on for this request only; None
        takes the engine's (`max_output`). Never raises for size when a fit exists; raises
        `ContextBudgetError` when none does (the system prompt and tools alone are over the budget, or
        the answer asked for leaves no room), or when the policy turned the fit stage off and the
        request is over its budget."""
        check_limit("max_output", max_output)
        return self._observed("prepare", lambda: (self._prepare(max_output), None))

    def _budget_for(self, max_output: int | None) -> Budget:
        """The budget of a request asking for `max_output` tokens of answer (None: the engine's)."""
        if max_output is None:
            return self._state.budget
        check_limit("max_output", max_output)
        return self._state.budget.for_output(self.policy, int(max_output))

    def _prepare(self, max_output: int | None) -> Prepared:
        started = time.perf_counter()
        rt = self._rt
        events, rt.pending = rt.pending, []
        events += self._policy_file.follow(self._set_policy) if self._policy_file else []
        budget = self._budget_for(max_output)  # after the policy edit just followed, if any
        now = self.clock()
        system = self.system_prompt  # read once: with bootstrap it reads the workspace files
        try:
            prepared = self._pipeline.prepare(self._context(now, system, budget), budget, system, self._tools_json,
                                              self.tools, compaction=self._triggered)
        except BaseException:
            self._pipeline.failed()
            raise
        prepared.events[:0] = events
        rt.branch.last_call_at = now
        rt.last, rt.last_max_output = prepared, max_output
        prepared.elapsed_ms = (time.perf_counter() - started) * 1000
        return prepared

    # ------------------------------------------------------------------------------------------
    # Restore points

    def mark(self, name: str) -> str:
        """Label the current leaf as restore point `name`. Returns the entry it names."""
        entry = restore.new_mark(self.session, name)
        self._pipeline.record(entry)
        self._rt.last = None
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
        self._rt.last = None
        self._rt.pending.append(event)

    def catch_up(self) -> int:
        """Fold in the entries another writer appended to the session log since this engine last read
        it (a proxy's workers share one PostgreSQL log): the log is asked to `refresh()` first when it
        has one, then what follows the last entry this engine read goes through the reducer, as opening
        the log would have taken it in. Only when the log's leaf no longer follows from that entry (the
        log branched under this engine) is everything derived again. Either way the next request is what
        an engine opened on the log now would send. Returns how many entries were folded in (all of the
        path's after a branch; 0 when nothing changed)."""
        refresh = getattr(self.session, "refresh", None)
        if callable(refresh):
            refresh()
        leaf, length = self._rt.branch.read
        path = self.session.path()
        if len(path) == length and (path[-1].id if length else None) == leaf:
            return 0
        self._rt.last = None
        if len(path) > length and (length == 0 or path[length - 1].id == leaf):
            self._rt.branch.forget_own_requests()
            return self._pipeline.replay(path[length:], self._context)
        self._open(self.policy)
        return len(path)

    def compact(self, focus: str | None = None, *, max_output: int | None = None) -> Prepared:
        """Compact now (a manual `/compact`), optionally focused, and return the new request (for an
        answer of `max_output` tokens, as `prepare` takes it)."""
        budget = self._budget_for(max_output)

        def run() -> tuple[Prepared, None]:
            events: list[Event] = []
            self._compaction("manual", focus=focus, force=True)(self._pipeline.view(),
                                                                self._context(self.clock(), budget=budget), events)
            prepared = self._prepare(max_output)
            prepared.events[:0] = events
            return prepared, None
        return self._observed("compact", run)

    def _triggered(self, items: list[Item], ctx: StageContext, events: list[Event], trigger: str) -> list[Item]:
        # A compaction that bounds turns is worth it whatever it saves in tokens.
        return self._compaction("threshold" if trigger in ("threshold", "budget") else trigger,
                                force=trigger in BY_TURNS)(items, ctx, events)

    def _compaction(self, trigger: str, *, focus: str | None = None,
                    force: bool = False) -> Callable[[list[Item], StageContext, list[Event]], list[Item]]:
        def run(items: list[Item], ctx: StageContext, events: list[Event]) -> list[Item]:
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
        last = self._rt.last
        if last is None or reported is None or reported <= 0:
            return calibrator.factor
        if calibrator.observe(last.raw_tokens, reported):
            self._pipeline.record(CalibrationEntry(calibrator.to_dict()))
        self._rt.recovery_attempts = 0
        return self._state.calibrator.factor

    def is_overflow_error(self, error: object) -> bool:
        """Whether `error` (an SDK exception, an httpx response, an error body, a message, or a usage
        record reporting more input than the window) says the request did not fit."""
        return is_overflow_error(error, context_window=self.window) is not None

    def recover(self, error: object, *, max_output: int | None = None) -> Prepared:
        """After an overflow error: learn from it (the provider's count, its real window; with neither
        in the error, the failed request's own size bounds the window), compact, shrink the budget, and
        return a smaller request to retry with, for an answer of `max_output` tokens (None: what the
        failed request asked for). Bounded: after MAX_RECOVERY_ATTEMPTS in a row without a successful
        call it raises `ContextOverflowError`."""
        return self._observed("recover", lambda: self._recover(error, max_output))

    def _recover(self, error: object, max_output: int | None) -> tuple[Prepared, Recovery]:
        rt = self._rt
        match = is_overflow_error(error, context_window=self.window)
        attempt = rt.recovery_attempts + (match is not None)  # only overflows count as attempts
        failed = rt.last
        recovery = plan_recovery(error, match, self._state.budget, self.policy, attempt,
                                 failed_tokens=failed.tokens if failed is not None else None)
        rt.recovery_attempts = attempt
        if max_output is None:
            max_output = rt.last_max_output  # the retry asks for what the failed request asked for
        calibrator = self._state.calibrator
        if recovery.match.observed_tokens and failed is not None and failed.raw_tokens \
                and calibrator.observe(failed.raw_tokens, recovery.match.observed_tokens):
            self._pipeline.record(CalibrationEntry(calibrator.to_dict()))  # logged, as record_usage does
        self._pipeline.record(recovery.entry)
        budget = self._budget_for(max_output)
        events = [recovery.event]
        if self.policy.compaction.enabled:
            self._compaction("overflow", force=True)(self._pipeline.view(),
                                                     self._context(self.clock(), budget=budget), events)
        prepared = self._prepare(max_output)
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
                failures = self._rt.observer_failures
                if key not in failures and len(failures) < MAX_OBSERVER_FAILURES:
                    failures.add(key)
                    self._rt.pending.append(event)

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
        last = self._rt.last
        fresh = last is not None and self._rt.branch.processed == len(self._state.records)
        prepared = last if fresh and last is not None else self.prepare()
        share = prepared.tokens / self.window if self.window else 0.0
        damaged = f"; {len(self.problems)} store problem(s): {self.problems[0].message}" if self.problems else ""
        return (f"Token usage: {short_tokens(prepared.tokens)} / {short_tokens(self.window)} ({share:.0%}) — "
                f"{self._pipeline.health(prepared)}{damaged}")

    def _context(self, now: float | None = None, system: str | None = None,
                 budget: Budget | None = None) -> StageContext:
        system = self.system_prompt if system is None else system
        return self._pipeline.context(system, self._tools_json, self.overhead_tokens, now, budget)


def damaged_event(problems: list[StoreProblem]) -> Event:
    """The event that reports what the store found damaged (and re-attached) when the log was opened."""
    return StoreDamaged(tuple(p.entry_id for p in problems if p.entry_id), 0, 0,
                        "; ".join(p.message for p in problems[:5])
                        + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""),
                        problems=tuple(p.to_dict() for p in problems))


__all__ = ["MAX_RECOVERY_ATTEMPTS", "UNLIMITED_WINDOW", "ContextEngine", "ContextOverflowError", "epoch"]
