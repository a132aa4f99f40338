"""`ContextEngine`: between an agent loop and its model client.

The harness appends messages as they happen and asks for the request to send; the engine runs the
pipeline and returns a provider-ready request that fits, with a report of what it did.

State is derived from the session log, never the other way round: message entries are the history,
`decision` entries say how an entry renders in the view from then on, `compaction` entries say where
the view starts and what summary stands for the rest. Opening a session replays them, so a resumed
engine sends byte for byte what it would have sent before.

Work per `prepare()` is proportional to what changed: new messages go through the per-message stages
once; token counts are cached by content; the view-wide stages are linear passes over cached items.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ctxwin import policy as policies
from ctxwin.compaction.base import Summarizer, Summary
from ctxwin.compaction.compact import (
    CHECKPOINT_REQUEST,
    attachment_message,
    checkpoint_due,
    checkpoint_text,
    summary_message,
)
from ctxwin.errors import CtxwinError, InputError
from ctxwin.messages import Message, Text, ToolCall
from ctxwin.messages.pairing import repair
from ctxwin.pipeline import bootstrap, budget, dedup, fit, mask, prune, spill
from ctxwin.pipeline.validate import IncrementalValidator, common_prefix
from ctxwin.pipeline.view import (
    Decision,
    Event,
    Item,
    MessagesView,
    StageContext,
    StageResult,
    keys_of,
    shapes_of,
    total_tokens,
)
from ctxwin.policy.model import Policy
from ctxwin.store.base import SessionLog
from ctxwin.store.memory import MemorySessionLog
from ctxwin.tokens import CachedCounter, Calibrator, counter_for, model_info
from ctxwin.tokens.base import TokenCounter

from .prepared import Prepared

UNLIMITED_WINDOW = 10**12
"""The window of a policy with `unlimited_window` (the raw baseline)."""
PROVIDER_FOR_VALIDATION = "anthropic"
"""The view is kept valid for Anthropic (roles, zones, ids); the OpenAI converters of `Prepared`
repair what their own rules need on top (consecutive assistant turns answered one by one)."""
CHECKPOINT_META = "checkpoint_request"
"""`meta["ctxwin"]` of the user message that asks the agent for its checkpoint."""
MAX_RECOVERY_ATTEMPTS = 3
"""Overflow recoveries allowed in a row before `recover` gives up (OpenClaw's 3 attempts); a
successful call (`record_usage`) resets the count."""
REPAIR_FIT_ROUNDS = 3
"""Times fit runs again when what repair adds pushes a request back over its budget."""
RECOVERY_SHRINK = 0.85
"""Each recovery shrinks the request budget by this factor, on top of what it learned from the
error: the provider counted more than we did, so we aim lower."""


class ContextOverflowError(CtxwinError):
    """The provider keeps rejecting the request as too long after every recovery step."""


@dataclass
class _Record:
    """One message entry of the current branch and how it renders now (`item` None: left the view)."""

    entry_id: str
    message: Message
    item: Item | None


@dataclass
class _CompactionState:
    entry_id: str
    summary: Summary
    first_kept: int  # index into records
    pinned: tuple[str, ...] = ()
    attachments: tuple[Message, ...] = ()
    lead: list[Item] = field(default_factory=list)  # the summary and attachment items, built once
    overrides: dict[str, Message] = field(default_factory=dict)  # later decisions about lead items

    def lead_ids(self) -> list[str]:
        """Ids of the summary item and of each attachment item (decisions refer to them)."""
        return [self.entry_id, *(f"{self.entry_id}#attachment{n}" for n in range(len(self.attachments)))]


@dataclass
class _State:
    records: list[_Record] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    calls: dict[str, ToolCall] = field(default_factory=dict)
    system_parts: list[str] = field(default_factory=list)
    processed: int = 0
    compaction: _CompactionState | None = None
    dedup: dedup.DedupState = field(default_factory=dedup.DedupState)
    last_call_at: float | None = None
    last_keys: list[str] = field(default_factory=list)
    last_system_key: str | None = None
    compaction_failures: int = 0
    failed_at_tokens: int = 0
    last_failure: str = ""
    pins: set[str] = field(default_factory=set)
    last_repairs: frozenset[tuple[str, str | None, str]] = frozenset()
    recovery_attempts: int = 0
    budget_scale: float = 1.0
    checkpoint_requested: bool = False  # the agent was asked for its checkpoint and has not answered
    checkpoint: tuple[str, str] | None = None  # (reply entry id, its summary) since the last compaction
    # (keys of the last unrepaired view, its repaired items, their keys): reused while views extend it.
    repair_cache: tuple[list[str], list[Item], list[str]] | None = None
    # The view as of the last call, extended in place while only appends happen (the common case):
    # rebuilt only after a decision about an item already in it, a compaction or a pin.
    view: list[Item] | None = None
    view_records: int = 0  # records the cached view covers


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
        self.policy = policies.get(policy)
        self.model = model
        info = model_info(model)
        self.window = UNLIMITED_WINDOW if self.policy.unlimited_window else (window or info.context_window)
        self.max_output = max_output or info.max_output
        self.reserve = 0 if self.policy.unlimited_window else self.policy.reserve(self.max_output)
        if self.window <= self.reserve:
            raise CtxwinError(
                f"the context window ({self.window:,} tokens) is not larger than the reserve kept free for the "
                f"answer ({self.reserve:,}: output {min(self.policy.output_reserve_tokens, self.max_output):,} "
                f"+ margin {self.policy.safety_margin_tokens:,})",
                "give a larger window, or a smaller max_output / policy output_reserve_tokens")
        self.counter = counter if isinstance(counter, CachedCounter) else CachedCounter(counter or counter_for(model))
        self.calibrator = Calibrator()
        self.summarizer = summarizer
        self.tools = [dict(t) for t in tools or ()]
        self._tools_json = json.dumps(self.tools, sort_keys=True) if self.tools else ""
        self.workspace = Path(workspace) if workspace is not None else None
        self.clock = clock or time.time
        self.memory_flush = memory_flush
        self._base_system = system
        self.overhead_tokens = overhead_tokens
        self._state = _State()
        self._validator = IncrementalValidator(PROVIDER_FOR_VALIDATION)
        self._last: Prepared | None = None
        self._load()

    # ------------------------------------------------------------------------------------------
    # Building state from the log

    def _load(self) -> None:
        path = self.session.path()
        if path:
            # The log does not record calls, but every call is followed by an append: the last entry's
            # time stands in for the last call's (cache-TTL pruning needs it).
            self._state.last_call_at = epoch(path[-1].timestamp)
        for entry in path:
            if entry.kind == "message":
                message = Message.from_dict(entry.payload)
                self._add_record(entry.id, message)
                self._note_checkpoint(entry.id, message)
            elif entry.kind == "decision":
                self._apply_logged_decision(entry.payload)
            elif entry.kind == "compaction":
                self._apply_compaction(entry.id, entry.payload)
            elif entry.kind == "pin":
                self._state.pins.add(entry.payload["target"])
                self._state.view = None
            elif entry.kind == "custom" and entry.payload.get("type") == "calibration":
                self.calibrator = Calibrator.from_dict(entry.payload["state"])
            elif entry.kind == "custom" and entry.payload.get("type") == "recovery":
                self.window = min(self.window, entry.payload.get("window") or self.window)
                self.max_output = min(self.max_output, entry.payload.get("max_output") or self.max_output)
                self.reserve = 0 if self.policy.unlimited_window else self.policy.reserve(self.max_output)
                self._state.budget_scale = entry.payload.get("budget_scale", 1.0)
        # Per-message stages ran on everything logged before (their decisions are in the log);
        # dedup's memory of what it has seen is rebuilt from the logged outputs.
        self._state.processed = len(self._state.records)
        if self.policy.dedup.enabled and self._state.records:
            originals = {r.entry_id: r.message for r in self._state.records}
            items = [Item(r.entry_id, r.message, 0) for r in self._state.records]
            dedup.stage(items, self.policy.dedup, self._context(), self._state.dedup, originals, {})

    def _add_record(self, entry_id: str, message: Message) -> None:
        state = self._state
        if message.role == "system":
            state.system_parts.append(message.text)
            return
        for call in message.tool_calls:
            state.calls[call.id] = call
        state.index[entry_id] = len(state.records)
        state.records.append(_Record(entry_id, message, Item(entry_id, message, self.counter.count_message(message))))

    def _apply_to_summary(self, entry_id: str, message: Message | None) -> None:
        """A decision about the compaction's summary or an attachment (fit cut it): it renders so
        from now on."""
        compaction = self._state.compaction
        if compaction is not None and entry_id in compaction.lead_ids() and message is not None:
            compaction.overrides[entry_id] = message
            compaction.lead = []
            self._state.view = None

    def _apply_logged_decision(self, payload: Mapping[str, Any]) -> None:
        renders = payload["renders"].items()
        self._apply_decisions(
            (Decision(payload["stage"], entry_id, None if rendered is None else Message.from_dict(rendered))
             for entry_id, rendered in renders), payload["stage"])

    def _apply_compaction(self, entry_id: str, payload: Mapping[str, Any]) -> None:
        first = self._state.index.get(payload["first_kept_id"], len(self._state.records)) \
            if payload.get("first_kept_id") else len(self._state.records)
        summary = Summary(
            text=payload["summary"],
            read_files=tuple(payload.get("read_files", ())),
            modified_files=tuple(payload.get("modified_files", ())),
            identifiers=tuple(payload.get("identifiers", ())),
            covered_ids=tuple(payload.get("covered_ids", ())),
            tokens=payload.get("summary_tokens", 0),
            summarizer=payload.get("summarizer", ""),
            sections={k: list(v) for k, v in payload.get("sections", {}).items()},
            details=dict(payload.get("summarizer_state", {})),
        )
        self._state.compaction = _CompactionState(
            entry_id, summary, first, tuple(payload.get("pinned_ids", ())),
            tuple(attachment_message(a) for a in payload.get("attachments", ())))
        self._state.view = None
        self._state.checkpoint = None  # a checkpoint serves one compaction
        self._state.checkpoint_requested = False

    # ------------------------------------------------------------------------------------------
    # Public API

    def append(self, message: Message | Mapping[str, Any] | Iterable[Message | Mapping[str, Any]]) -> list[str]:
        """Log one message (canonical, or a provider-format dict, which is converted) or several.
        Returns the entry ids, each durable when the call returns."""
        ids = []
        for item in _as_messages(message):
            entry = self.session.append("message", item.to_dict())
            self._add_record(entry.id, item)
            ids.append(entry.id)
            self._note_checkpoint(entry.id, item)
        return ids

    def _note_checkpoint(self, entry_id: str, message: Message) -> None:
        """An agent's answer to a checkpoint request: remember it for the next compaction."""
        if self.policy.compaction.strategy != "checkpoint":
            return
        if message.meta.get("ctxwin") == CHECKPOINT_META:
            self._state.checkpoint_requested = True
            return
        text = checkpoint_text(message)
        if text is not None:
            self._state.checkpoint = (entry_id, text)
            self._state.checkpoint_requested = False

    def pin(self, entry_id: str) -> None:
        """Never summarize this entry away, nor drop it to fit: it stays verbatim in the view. A tool
        call and its results stay together (the pairing is resolved when a compaction or fit runs,
        so results that arrive after the pin are kept too)."""
        if entry_id not in self._state.index:
            raise CtxwinError(f"no message entry {entry_id!r} in this session", "pin an id that append() returned")
        if entry_id not in self._state.pins:
            self.session.append("pin", {"target": entry_id})
            self._state.pins.add(entry_id)
            self._state.view = None

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
    def budget(self) -> int:
        """The most tokens a request may have: the window minus the reserve (shrunk after overflow
        errors showed the provider counts more than we do)."""
        return int((self.window - self.reserve) * self._state.budget_scale)

    def prepare(self) -> Prepared:
        """The request to send now. Never raises for size when a fit exists; raises
        `ContextBudgetError` when none does (the system prompt and tools alone are over the budget),
        or when the policy turned the fit stage off and the request is over its budget."""
        started = time.perf_counter()
        state = self._state
        now = self.clock()
        system = self.system_prompt  # read once: with bootstrap it reads the workspace files
        ctx = self._context(now, system)
        events: list[Event] = []

        # 1. Per-message stages, once per message, in log order.
        new = [r.item for r in state.records[state.processed:] if r.item is not None]
        if new:
            for name, run in self._message_stages():
                result = run(new, ctx)
                self._commit(name, result, events)
                new = [self._state.records[self._state.index[i.entry_id]].item for i in result.items]
                new = [i for i in new if i is not None]
        state.processed = len(state.records)

        # 2. View-wide stages.
        items = self._items()
        if new and self._checkpoint_wanted(items, ctx):  # only after the agent had a turn
            items = self._request_checkpoint(items, ctx, events)
        if self.policy.mask.enabled:
            items = self._run_view_stage("mask", mask.stage(items, self.policy.mask, ctx), events, ctx)
        if self.policy.prune.enabled:
            items = self._run_view_stage("prune", prune.stage(items, self.policy.prune, ctx), events, ctx)
        if self.policy.compaction.enabled and self._compaction_due(items, ctx):
            items = self._compact(items, ctx, events, focus=None, trigger="threshold")
        if self.policy.fit.enabled:
            items = self._run_view_stage("fit", fit.stage(items, self.policy.fit, ctx), events, ctx)

        # 3. Validate (incrementally: usually only the new tail); repair what cuts left behind.
        items, keys, problems = self._validate_and_repair(items, ctx, events)

        tokens = ctx.system_tokens + total_tokens(items)
        if tokens > ctx.budget and not self.policy.unlimited_window:
            # Without fit the policy promised nothing; with it, repair added more than fit took back.
            raise fit.ContextBudgetError(
                f"the request is {tokens:,} tokens, over its budget of {ctx.budget:,}"
                + ("" if self.policy.fit.enabled else ", and the policy's fit stage is off"),
                tokens=tokens, budget=ctx.budget,
                hint=None if self.policy.fit.enabled else "enable [fit] in the policy, or compaction")
        prepared = self._finish(items, keys, ctx, events, problems, system)
        state.last_call_at = now
        prepared.elapsed_ms = (time.perf_counter() - started) * 1000
        return prepared

    def record_usage(self, usage: Any) -> float:
        """Calibrate counts from the usage the provider reported for the last prepared request
        (input plus cache reads and writes). Returns the new calibration factor."""
        from ctxwin.providers.overflow import reported_context_tokens

        reported = reported_context_tokens(usage)
        if self._last is None or reported is None or reported <= 0:
            return self.calibrator.factor
        if self.calibrator.observe(self._last.raw_tokens, reported):
            self.session.append("custom", {"type": "calibration", "state": self.calibrator.to_dict()})
        self._state.recovery_attempts = 0
        return self.calibrator.factor

    def is_overflow_error(self, error: object) -> bool:
        """Whether `error` (an SDK exception, an httpx response, an error body, a message, or a usage
        record reporting more input than the window) says the request did not fit."""
        from ctxwin.providers.overflow import is_overflow_error

        return is_overflow_error(error, context_window=self.window) is not None

    def recover(self, error: object) -> Prepared:
        """After an overflow error: learn from it (the provider's count, its real window), compact,
        shrink the budget, and return a smaller request to retry with. Bounded: after
        MAX_RECOVERY_ATTEMPTS in a row without a successful call it raises `ContextOverflowError`."""
        from ctxwin.providers.overflow import is_overflow_error

        match = is_overflow_error(error, context_window=self.window)
        if match is None:
            raise CtxwinError(f"not a context overflow error: {str(error)[:200]}",
                              "recover() handles overflow errors only; retry or surface other errors")
        state = self._state
        state.recovery_attempts += 1
        if state.recovery_attempts > MAX_RECOVERY_ATTEMPTS:
            raise ContextOverflowError(
                f"the provider still rejects the request as too long after {MAX_RECOVERY_ATTEMPTS} recoveries "
                f"({match.provider}: {match.pattern})",
                "start a new session with a summary (engine.compact), use a model with a larger window, "
                "or shorten the system prompt and tool schemas")
        if match.limit_tokens and match.limit_tokens < self.window:
            self.window = match.limit_tokens  # the provider knows its window better than our registry
            if self.reserve >= self.window // 2:
                # Our output reserve was sized for the window we believed in: keep the answer's share
                # of the real window what it would be on a normal one (a quarter at most).
                self.max_output = min(self.max_output, self.window // 4)
                self.reserve = self.policy.reserve(self.max_output)
        if match.observed_tokens and self._last is not None and self._last.raw_tokens:
            self.calibrator.observe(self._last.raw_tokens, match.observed_tokens)
        state.budget_scale *= RECOVERY_SHRINK
        self.session.append("custom", {"type": "recovery", "window": self.window, "max_output": self.max_output,
                                       "budget_scale": state.budget_scale, "provider": match.provider,
                                       "observed_tokens": match.observed_tokens, "limit_tokens": match.limit_tokens})
        events: list[Event] = [Event("recovery", "overflow", (), match.observed_tokens or 0, 0,
                                     f"{match.provider} overflow ({'silent' if match.silent else match.pattern}); "
                                     f"attempt {state.recovery_attempts} of {MAX_RECOVERY_ATTEMPTS}")]
        if self.policy.compaction.enabled:
            ctx = self._context(self.clock())
            self._compact(self._items(), ctx, events, focus=None, trigger="overflow", force=True)
        prepared = self.prepare()
        prepared.events[:0] = events
        return prepared

    def compact(self, focus: str | None = None) -> Prepared:
        """Compact now (a manual `/compact`), optionally focused, and return the new request."""
        ctx = self._context(self.clock())
        events: list[Event] = []
        items = self._items()
        self._compact(items, ctx, events, focus=focus, trigger="manual", force=True)
        prepared = self.prepare()
        prepared.events[:0] = events
        return prepared

    def recall(self, ref: str, offset: int = 0, limit: int | None = None) -> str:
        """What a placeholder points at, byte for byte: `entry:<id>` (a message as logged),
        `entry:<id>#<call id>` (one tool result), or `blob:<hash>` (a spilled output). `offset` and
        `limit` page the text by characters."""
        if offset < 0 or (limit is not None and limit < 0):
            raise InputError(f"recall offset and limit must not be negative (got {offset}, {limit})",
                             "page forward from 0: offset=0, then offset+limit")
        text = self._resolve(ref)
        return text[offset: None if limit is None else offset + limit]

    def _resolve(self, ref: str) -> str:
        if ref.startswith("blob:"):
            if self.session.blobs is None:
                raise CtxwinError(f"{ref}: this session has no blob store", "open the session with a blob store")
            return self.session.blobs.get(ref).decode("utf-8", "surrogatepass")
        if ref.startswith("entry:"):
            entry_id, _, call_id = ref[len("entry:"):].partition("#")
            position = self._state.index.get(entry_id)
            if position is None:
                raise CtxwinError(f"{ref}: no such entry in this session", "use a ref from a placeholder or notice")
            message = self._state.records[position].message
            if call_id:
                for result in message.tool_results:
                    if result.call_id == call_id:
                        return result.text
                for call in message.tool_calls:  # a cleared call input: the call as it was made
                    if call.id == call_id:
                        return json.dumps(call.arguments, ensure_ascii=False)
                raise CtxwinError(f"{ref}: entry has no result or call {call_id}")
            return message.text or "\n".join(r.text for r in message.tool_results) or json.dumps(message.to_dict())
        raise CtxwinError(f"not a recall reference: {ref!r}",
                          "refs look like entry:<id>, entry:<id>#<call> or blob:<hash>")

    def health(self) -> str:
        """One line: `Token usage: 180K / 200K (90%) — compaction due`, for what would be sent now."""
        from ctxwin.compaction.compact import compaction_due

        fresh = self._last is not None and self._state.processed == len(self._state.records)
        prepared = self._last if fresh and self._last is not None else self.prepare()
        share = prepared.tokens / self.window if self.window else 0.0
        if self.policy.unlimited_window:
            state = "unlimited window"
        elif prepared.tokens > self.budget:
            state = "over budget"
        elif self.policy.compaction.enabled and compaction_due(prepared.raw_tokens, self._context(),
                                                               self.policy.compaction, self.calibrator.factor):
            state = "compaction due"
        elif share >= 0.75:
            state = "warn"
        else:
            state = "ok"
        return f"Token usage: {_k(prepared.tokens)} / {_k(self.window)} ({share:.0%}) — {state}"

    @property
    def messages(self) -> list[Message]:
        """Every message of the current branch as logged (not as the model sees it)."""
        return [r.message for r in self._state.records]

    # ------------------------------------------------------------------------------------------
    # Pipeline plumbing

    def _context(self, now: float | None = None, system: str | None = None) -> StageContext:
        system = self.system_prompt if system is None else system
        factor = self.calibrator.factor if self.calibrator.factor > 0 else 1.0
        # Stages count in counter units; the overhead is given in the model's own tokens.
        system_tokens = round(self.overhead_tokens / factor) + (self.counter.count_text(system) if system else 0) + (
            self.counter.count_text(self._tools_json) if self.tools else 0)
        return StageContext(
            counter=self.counter,
            window=self.window,
            budget=int(self.budget / factor),
            system_tokens=system_tokens,
            now=now,
            last_call_at=self._state.last_call_at,
            blobs=self.session.blobs,
            calls=self._state.calls,
            pins=frozenset(self._state.pins),
        )

    def _message_stages(self) -> list[tuple[str, Callable[[list[Item], StageContext], StageResult]]]:
        p = self.policy
        stages: list[tuple[str, Callable[[list[Item], StageContext], StageResult]]] = []
        if p.result_budget.enabled:
            stages.append(("result_budget", lambda items, ctx: budget.stage(items, p.result_budget, ctx)))
        if p.spill.enabled:
            stages.append(("spill", lambda items, ctx: spill.stage(items, p.spill, ctx)))
        if p.dedup.enabled:
            # Superseding older outputs needs the visible older items; skip building that map unless
            # the policy declares idempotent tools.
            stages.append(("dedup", lambda items, ctx: dedup.stage(
                items, p.dedup, ctx, self._state.dedup, self._originals(items),
                self._visible_by_id() if p.dedup.idempotent_tools else {})))
        return stages

    def _originals(self, items: Sequence[Item]) -> dict[str, Message]:
        return {i.entry_id: self._state.records[self._state.index[i.entry_id]].message for i in items
                if i.entry_id in self._state.index}

    def _visible_by_id(self) -> dict[str, Item]:
        return {r.entry_id: r.item for r in self._state.records[: self._state.processed] if r.item is not None}

    def _commit(self, stage: str, result: StageResult, events: list[Event]) -> None:
        """Record a stage's decisions in the log (one entry per stage run) and apply them."""
        events.extend(result.events)
        if not result.decisions:
            return
        renders = {d.entry_id: (None if d.message is None else d.message.to_dict()) for d in result.decisions}
        self.session.append("decision", {"stage": stage, "renders": renders,
                                         "events": [e.to_dict() for e in result.events]})
        self._apply_decisions(result.decisions, stage)

    def _apply_decisions(self, decisions: Iterable[Decision], stage: str) -> None:
        for decision in decisions:
            position = self._state.index.get(decision.entry_id)
            if position is None:
                self._apply_to_summary(decision.entry_id, decision.message)
                self._state.view = None
                continue
            if position < self._state.view_records:
                self._state.view = None
            record = self._state.records[position]
            if decision.message is None:
                record.item = None
            else:
                record.item = Item(decision.entry_id, decision.message,
                                   self.counter.count_message(decision.message), rendered_by=stage)

    def _run_view_stage(self, stage: str, result: StageResult, events: list[Event], ctx: StageContext) -> list[Item]:
        self._commit(stage, result, events)
        if not result.decisions:
            return result.items
        return self._items()

    def _items(self) -> list[Item]:
        """The view: the summary of the latest compaction, a marker where rounds were dropped, then
        every kept record's current rendering. A copy: callers and past `Prepared`s may keep it."""
        state = self._state
        records = state.records
        if state.view is not None:
            state.view.extend(r.item for r in records[state.view_records:] if r.item is not None)
            state.view_records = len(records)
            return list(state.view)
        start = state.compaction.first_kept if state.compaction else 0
        out: list[Item] = []
        if state.compaction is not None:
            compaction = state.compaction
            if not compaction.lead:
                lead = [summary_message(compaction.summary.text), *compaction.attachments]
                compaction.lead = []
                for lead_id, message in zip(compaction.lead_ids(), lead, strict=True):
                    message = compaction.overrides.get(lead_id, message)
                    compaction.lead.append(Item(lead_id, message, self.counter.count_message(message), synthetic=True))
            out.append(compaction.lead[0])
            for entry_id in compaction.pinned:
                record = records[state.index[entry_id]]
                if record.item is not None and state.index[entry_id] < start:
                    out.append(record.item)
            out.extend(compaction.lead[1:])
        kept = records[start:]
        dropped = sum(1 for r in kept if r.item is None)
        if dropped:
            marker = fit.dropped_marker(dropped)
            out.append(Item(fit.MARKER_ID, marker, self.counter.count_message(marker), synthetic=True))
        out.extend(r.item for r in kept if r.item is not None)
        state.view = out
        state.view_records = len(records)
        return list(out)

    def _validate_and_repair(self, items: list[Item], ctx: StageContext,
                             events: list[Event]) -> tuple[list[Item], list[str], list]:
        """The view made valid, its keys, and what is still wrong (nothing, unless repair failed).

        A request usually extends the previous one. Then the previous repair (say, error results for
        calls the history never answered) is reused for the unchanged prefix and only the new tail is
        validated; the full validation and repair run when the prefix changed or the tail needs it."""
        state = self._state
        keys = keys_of(items)
        cached = state.repair_cache
        if cached is not None and len(keys) >= len(cached[0]) and keys[: len(cached[0])] == cached[0]:
            extended = cached[1] + items[len(cached[0]):]
            extended_keys = cached[2] + keys[len(cached[0]):]
            fits = not self.policy.fit.enabled or ctx.system_tokens + total_tokens(extended) <= ctx.budget
            if fits and not self._validator.check(MessagesView(extended), shapes_of(extended)):
                state.repair_cache = (keys, extended, extended_keys)
                return extended, extended_keys, []
        problems = self._validator.check(MessagesView(items), shapes_of(items))
        if not problems and not state.last_repairs:
            state.repair_cache = (keys, items, keys)
            return items, keys, []
        repaired, repair_events = self._repair(items)
        slack = 0
        for attempt in range(REPAIR_FIT_ROUNDS):
            over = ctx.system_tokens + total_tokens(repaired) - ctx.budget
            if not self.policy.fit.enabled or over <= 0:
                break
            # What repair adds (error results for calls the history never answered) must fit too:
            # fit the unrepaired view with that much less room, then repair the smaller view; if a
            # residue remains (the dropped-rounds marker grew a digit), squeeze that much more.
            slack += over if attempt else 0
            added = total_tokens(repaired) - total_tokens(items)
            tighter = replace(ctx, budget=ctx.budget - max(added, 0) - slack)
            items = self._run_view_stage("fit", fit.stage(items, self.policy.fit, tighter), events, ctx)
            repaired, repair_events = self._repair(items)
        events.extend(repair_events)
        repaired_keys = keys_of(repaired)
        problems = self._validator.check(MessagesView(repaired), shapes_of(repaired))
        state.repair_cache = None if problems else (keys_of(items), repaired, repaired_keys)
        return repaired, repaired_keys, problems

    def _repair(self, items: list[Item]) -> tuple[list[Item], list[Event]]:
        messages = [i.message for i in items]
        result = repair(messages, PROVIDER_FOR_VALIDATION)
        # Repair is not recorded (it is a pure function of the view), so it re-fixes the same things
        # on every request; its event is emitted only when what it fixes changes.
        signature = frozenset((c.kind, c.call_id, c.detail) for c in result.changes)
        repeated = signature == self._state.last_repairs
        self._state.last_repairs = signature
        if not result.changes:
            return items, []
        before = total_tokens(items)
        by_key = {id(i.message): i for i in items}
        fixed = []
        for message in result.messages:
            item = by_key.get(id(message))
            fixed.append(item if item is not None else
                         Item(message.id or "repair", message, self.counter.count_message(message), synthetic=True))
        if repeated:
            return fixed, []
        event = Event("repair", "repair", tuple(sorted({c.call_id or "" for c in result.changes})), before,
                      total_tokens(fixed), "; ".join(sorted({c.kind for c in result.changes})),
                      details={"changes": [c.__dict__ for c in result.changes]})
        return fixed, [event]

    def _finish(self, items: list[Item], keys: list[str], ctx: StageContext, events: list[Event],
                problems: list, system: str) -> Prepared:
        state = self._state
        system_key = f"{system}\x00{self._tools_json}"
        same_system = system_key == state.last_system_key
        if state.last_system_key is not None and not same_system:
            # A workspace file changed (bootstrap) or the harness changed its system prompt or tools:
            # the whole prompt is new to the provider's cache.
            events.append(Event("bootstrap", "system_changed", (), 0, ctx.system_tokens,
                                "the system prompt or tool schemas changed", breaks_prefix=True))
        stable = common_prefix(keys, state.last_keys) if same_system else 0
        prefix_kept = same_system and stable == len(state.last_keys)
        total = total_tokens(items)
        raw = ctx.system_tokens + total
        factor = self.calibrator.factor if self.calibrator.factor > 0 else 1.0
        stable_tokens = ctx.system_tokens + total - total_tokens(items[stable:]) if same_system else 0
        prepared = Prepared(
            system=system,
            items=items,
            tokens=round(raw * factor),
            raw_tokens=raw,
            budget=self.budget,
            window=self.window,
            events=events,
            problems=problems,
            tools=self.tools,
            system_tokens=ctx.system_tokens,
            stable_prefix=stable,
            stable_prefix_tokens=stable_tokens,
            prefix_kept=prefix_kept,
        )
        state.last_keys = keys
        state.last_system_key = system_key
        self._last = prepared
        return prepared

    # ------------------------------------------------------------------------------------------
    # Compaction

    def _checkpoint_wanted(self, items: Sequence[Item], ctx: StageContext) -> bool:
        policy = self.policy.compaction
        state = self._state
        return (policy.enabled and policy.strategy == "checkpoint" and not state.checkpoint_requested
                and state.checkpoint is None and bool(items) and not items[-1].message.tool_calls
                and checkpoint_due(ctx.system_tokens + total_tokens(items), ctx.window, policy,
                                   self.calibrator.factor or 1.0))

    def _request_checkpoint(self, items: list[Item], ctx: StageContext, events: list[Event]) -> list[Item]:
        """Ask the agent for its own state summary (Alyx's checkpoint): a user message, logged like any
        other (the model sees it), that the next compaction will look for an answer to."""
        tokens = round((ctx.system_tokens + total_tokens(items)) * (self.calibrator.factor or 1.0))
        request = Message("user", (Text(CHECKPOINT_REQUEST.format(tokens=tokens)),), meta={"ctxwin": CHECKPOINT_META})
        [entry_id] = self.append(request)
        self._state.processed = len(self._state.records)
        events.append(Event("compaction", "checkpoint_request", (entry_id,), 0, 0,
                            f"view at {tokens:,} tokens: the agent is asked to write its checkpoint"))
        return self._items()

    def _compaction_due(self, items: Sequence[Item], ctx: StageContext) -> bool:
        from ctxwin.compaction.compact import compaction_due

        tokens = ctx.system_tokens + total_tokens(items)
        state = self._state
        # Circuit breaker (Claude Code stops after 3 consecutive failures): it stays open until the
        # view has grown by a tenth of the window, so a stuck session does not retry on every call
        # (`_compact` closes it again on the next attempt).
        if (state.compaction_failures >= self.policy.compaction.max_failures
                and tokens - state.failed_at_tokens < self.window * 0.1):
            return False
        # Past the request budget, compacting beats letting fit drop history, whatever the trigger.
        return tokens > ctx.budget or compaction_due(tokens, ctx, self.policy.compaction,
                                                     self.calibrator.factor or 1.0)

    def _compact(self, items: list[Item], ctx: StageContext, events: list[Event], *, focus: str | None,
                 trigger: str, force: bool = False) -> list[Item]:
        from ctxwin.compaction.compact import CompactionFailed, compact_view

        previous = self._state.compaction.summary if self._state.compaction else None
        try:
            outcome = compact_view(items, self.policy.compaction, ctx, summarizer=self.summarizer,
                                   previous=previous, focus=focus, pins=self._state.pins, force=force,
                                   memory_flush=self.memory_flush, trigger=trigger,
                                   factor=self.calibrator.factor or 1.0, originals=self._originals(items),
                                   checkpoint=self._state.checkpoint)
        except CompactionFailed as failure:
            state = self._state
            state.compaction_failures += 1
            state.failed_at_tokens = failure.tokens_before
            if failure.message != state.last_failure:  # reported once, not on every call it repeats
                events.append(Event("compaction", "failed", (), failure.tokens_before, failure.tokens_before,
                                    failure.message, details={"consecutive_failures": state.compaction_failures}))
            state.last_failure = failure.message
            return items
        payload = outcome.entry_payload()
        entry = self.session.append("compaction", payload)
        self._state.compaction_failures = 0
        self._state.last_failure = ""
        self._apply_compaction(entry.id, payload)
        new_items = self._items()
        events.append(Event("compaction", outcome.strategy, outcome.summary.covered_ids, outcome.tokens_before,
                            ctx.system_tokens + total_tokens(new_items), outcome.reason, breaks_prefix=True,
                            details=outcome.details))
        return new_items


def _as_messages(value: Any) -> list[Message]:
    if isinstance(value, Message):
        return [value]
    if isinstance(value, str | bytes):
        raise InputError("append() takes messages, not text",
                         'wrap it: Message("user", (Text(...),)) or {"role": "user", "content": ...}')
    if isinstance(value, Mapping):
        from ctxwin.messages.providers import from_provider_dict

        return from_provider_dict(value)
    out: list[Message] = []
    for item in value:
        out.extend(_as_messages(item))
    return out


def epoch(value: Any) -> float | None:
    """Seconds since the epoch from a recorded timestamp: ISO 8601 text or epoch milliseconds."""
    if isinstance(value, int | float):
        return value / 1000 if value > 10**11 else float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.0f}K" if tokens >= 1000 else str(tokens)
