"""One request, the stage order written once: per-message stages on what is new, view-wide stages,
compaction when due, fit, then validation and repair.

`Pipeline` keeps what a request needs between calls besides derived state: how many records the
per-message stages have seen, dedup's memory, the compaction circuit breaker, and the previous
request's keys (to report prefix stability), and the timed runs of the stages that acted on the request
being built (`Prepared.stages`). Every decision a stage takes is appended to the log as
a `DecisionEntry` and folded into the state through the one reducer, exactly as on reopen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwin.compaction.base import Summarizer
from ctxwin.compaction.compact import compact_view, strategy_for
from ctxwin.compaction.cuts import turn_starts
from ctxwin.errors import CompactionFailed, ContextBudgetError
from ctxwin.messages import Message
from ctxwin.pipeline import budget, dedup, fit, mask, prune, spill, turns
from ctxwin.pipeline.events import CheckpointRequested, Compacted, CompactionFailure, SystemChanged
from ctxwin.pipeline.validate import common_prefix
from ctxwin.pipeline.view import Event, Item, StageContext, StageResult, total_tokens
from ctxwin.policies.model import Policy
from ctxwin.store.base import Entry, SessionLog
from ctxwin.store.entries import DecisionEntry, LogEntry, MessageEntry
from ctxwin.tokens import CachedCounter

from .cache import ViewCache
from .prepared import Prepared, StageRun
from .state import SessionState, apply

Stage = Callable[[list[Item], StageContext], StageResult]


@dataclass
class Pipeline:
    log: SessionLog
    state: SessionState
    counter: CachedCounter
    policy: Policy
    cache: ViewCache
    sinks: list[Callable[[Entry], Any]] = field(default_factory=list)
    """Called with every message entry as it is logged (the memory index)."""
    processed: int = 0  # records the per-message stages have run on
    dedup: dedup.DedupState = field(default_factory=dedup.DedupState)
    last_call_at: float | None = None
    last_keys: list[str] = field(default_factory=list)
    last_system_key: str | None = None
    compaction_failures: int = 0
    failed_at_tokens: int = 0
    last_failure: str = ""
    runs: list[StageRun] = field(default_factory=list)
    """The stages that acted since the last request was built (`finish` hands them to it)."""

    def record(self, entry: LogEntry) -> str:
        """Append an entry to the log and fold it into the state: the one way state changes."""
        stored = self.log.append(entry.kind, entry.to_payload())
        apply(self.state, stored.id, entry, counter=self.counter, strategy=strategy_for(self.policy.compaction),
              policy=self.policy)
        if self.sinks and isinstance(entry, MessageEntry):
            for sink in self.sinks:
                sink(stored)
        return stored.id

    def catch_up(self, ctx: StageContext) -> None:
        """After opening: per-message stages ran on everything logged (their decisions are in the log);
        dedup's memory of what it has seen is rebuilt from the logged outputs."""
        self.processed = len(self.state.records)
        if self.policy.dedup.enabled and self.state.records:
            items = [Item(r.entry_id, r.message, 0) for r in self.state.records]
            dedup.stage(items, self.policy.dedup, ctx, self.dedup, self.originals(items), {})

    # --------------------------------------------------------------------------------------------
    # The request

    def context(self, system: str, tools_json: str, overhead_tokens: int, now: float | None) -> StageContext:
        """What the stages read besides the view. They count in counter units; the overhead (a harness's
        own prompt and schemas, which the engine does not see) is given in the model's own tokens."""
        factor = self.factor()
        system_tokens = round(overhead_tokens / factor) + (self.counter.count_text(system) if system else 0) + (
            self.counter.count_text(tools_json) if tools_json else 0)
        return StageContext(counter=self.counter, window=self.state.budget.window,
                            budget=int(self.state.budget.tokens / factor), system_tokens=system_tokens, now=now,
                            last_call_at=self.last_call_at, blobs=self.log.blobs, calls=self.state.calls,
                            pins=frozenset(self.state.pins))

    def health(self, prepared: Prepared) -> str:
        """The state a request is in: ok, warn, compaction due, over budget or unlimited window."""
        compaction, budget = self.policy.compaction, self.state.budget
        if self.policy.unlimited_window:
            return "unlimited window"
        if prepared.tokens > budget.tokens:
            return "over budget"
        if compaction.enabled and strategy_for(compaction).due(prepared.raw_tokens, budget.window, compaction,
                                                               self.state.calibrator.factor,
                                                               self.turns(prepared.items)) is not None:
            return "compaction due"
        return "warn" if prepared.tokens >= 0.75 * budget.window else "ok"

    def prepare(self, ctx: StageContext, system: str, tools_json: str, tools: list[dict[str, Any]], *,
                compaction: Callable[[list[Item], StageContext, list[Event], str], list[Item]]) -> Prepared:
        state, policy = self.state, self.policy
        events: list[Event] = []

        # 1. Per-message stages, once per message, in log order.
        new = [r.item for r in state.records[self.processed:] if r.item is not None]
        if new:
            for name, run in self.message_stages():
                started = time.time_ns()
                result = run(new, ctx)
                self.commit(name, result, events)
                self.ran(name, started, result, new, result.items)
                new = [item for i in result.items if (item := state.records[state.index[i.entry_id]].item)]
        self.processed = len(state.records)

        # 2. View-wide stages.
        items = self.cache.items(state)
        if new:  # only after the agent had a turn
            items = self.request_agent_summary(items, ctx, events)
        if policy.mask.enabled:
            items = self.view_stage("mask", lambda view, c: mask.stage(view, policy.mask, c), items, ctx, events)
        if policy.prune.enabled:
            items = self.view_stage("prune", lambda view, c: prune.stage(view, policy.prune, c), items, ctx, events)
        max_turns = policy.compaction.max_turns
        if policy.compaction.enabled and max_turns is not None and policy.compaction.summary_after is None:
            items = self.view_stage("turns", lambda view, c: turns.stage(view, max_turns, c), items, ctx, events)
        trigger = self.compaction_due(items, ctx) if policy.compaction.enabled else None
        if trigger is not None:
            items = compaction(items, ctx, events, trigger)

        def fitted(view: list[Item], context: StageContext) -> StageResult:
            return fit.stage(view, policy.fit, context)

        if policy.fit.enabled:
            items = self.view_stage("fit", fitted, items, ctx, events)

        # 3. Validate (incrementally: usually only the new tail); repair what cuts left behind.
        def refit(view: list[Item], tighter: StageContext) -> list[Item]:
            return self.view_stage("fit", fitted, view, tighter, events)

        def collapse(view: list[Item], context: StageContext) -> list[Item]:
            return self.view_stage("fit", fit.collapse_unanswered, view, context, events)

        started, emitted, unrepaired, at = time.time_ns(), len(events), items, len(self.runs)
        items, keys, problems = self.cache.validate_and_repair(items, ctx, events, refit, collapse,
                                                               fit_enabled=policy.fit.enabled)
        repairs = tuple(e for e in events[emitted:] if e.is_repair)
        if repairs:  # before the fit runs it made itself (refit, collapse): the runs stay in the order they started
            self.runs.insert(at, StageRun("repair", started, time.time_ns(), ctx.system_tokens
                                          + total_tokens(unrepaired), ctx.system_tokens + total_tokens(items), repairs))
        tokens = ctx.system_tokens + total_tokens(items)
        if tokens > ctx.budget and not policy.unlimited_window:
            # Without fit the policy promised nothing; with it, repair added more than fit took back.
            raise ContextBudgetError(
                f"the request is {tokens:,} tokens, over its budget of {ctx.budget:,}"
                + ("" if policy.fit.enabled else ", and the policy's fit stage is off"),
                tokens=tokens, budget=ctx.budget,
                hint=None if policy.fit.enabled else "enable [fit] in the policy, or compaction")
        return self.finish(items, keys, ctx, events, problems, system, tools_json, tools)

    def message_stages(self) -> list[tuple[str, Stage]]:
        p = self.policy
        stages: list[tuple[str, Stage]] = []
        if p.result_budget.enabled:
            stages.append(("result_budget", lambda items, ctx: budget.stage(items, p.result_budget, ctx)))
        if p.spill.enabled:
            stages.append(("spill", lambda items, ctx: spill.stage(items, p.spill, ctx)))
        if p.dedup.enabled:
            # Superseding older outputs needs the visible older items; skip building that map unless
            # the policy declares idempotent tools.
            stages.append(("dedup", lambda items, ctx: dedup.stage(
                items, p.dedup, ctx, self.dedup, self.originals(items),
                self.visible_by_id() if p.dedup.idempotent_tools else {})))
        return stages

    def commit(self, stage: str, result: StageResult, events: list[Event]) -> None:
        """Record a stage's decisions in the log (one entry per stage run) and apply them."""
        events.extend(result.events)
        if result.decisions:
            self.record(DecisionEntry(stage, {d.entry_id: d.message for d in result.decisions},
                                      [e.to_dict() for e in result.events]))

    def view_stage(self, stage: str, run: Stage, items: list[Item], ctx: StageContext,
                   events: list[Event]) -> list[Item]:
        """Run a stage over the whole view, record what it decided, and return the new view."""
        started = time.time_ns()
        result = run(items, ctx)
        self.commit(stage, result, events)
        after = self.cache.items(self.state) if result.decisions else result.items
        self.ran(stage, started, result, items, after, ctx.system_tokens)
        return after

    def ran(self, stage: str, started_ns: int, result: StageResult, before: Sequence[Item], after: Sequence[Item],
            base: int = 0) -> None:
        """Keep the run of a stage that acted (events or decisions) for the request being built; counted
        only then (stages copy the view they are given, so `before` is intact)."""
        if result.events or result.decisions:
            self.runs.append(StageRun(stage, started_ns, time.time_ns(), base + total_tokens(before),
                                      base + total_tokens(after), tuple(result.events)))

    def originals(self, items: Sequence[Item]) -> dict[str, Message]:
        records, index = self.state.records, self.state.index
        return {i.entry_id: records[index[i.entry_id]].message for i in items if i.entry_id in index}

    def visible_by_id(self) -> dict[str, Item]:
        return {r.entry_id: r.item for r in self.state.records[: self.processed] if r.item is not None}

    def finish(self, items: list[Item], keys: list[str], ctx: StageContext, events: list[Event], problems: list,
               system: str, tools_json: str, tools: list[dict[str, Any]]) -> Prepared:
        system_key = f"{system}\x00{tools_json}"
        same_system = system_key == self.last_system_key
        if self.last_system_key is not None and not same_system:
            # A workspace file changed (bootstrap) or the harness changed its system prompt or tools:
            # the whole prompt is new to the provider's cache.
            events.append(SystemChanged((), 0, ctx.system_tokens, "the system prompt or tool schemas changed"))
        stable = common_prefix(keys, self.last_keys) if same_system else 0
        total = total_tokens(items)
        raw = ctx.system_tokens + total
        factor = self.state.calibrator.factor if self.state.calibrator.factor > 0 else 1.0
        prepared = Prepared(
            system=system, items=items, tokens=round(raw * factor), raw_tokens=raw,
            budget=self.state.budget.tokens, window=self.state.budget.window, events=events, problems=problems,
            tools=tools, system_tokens=ctx.system_tokens, stable_prefix=stable,
            stable_prefix_tokens=raw - total_tokens(items[stable:]) if same_system else 0,
            prefix_kept=same_system and stable == len(self.last_keys), stages=self.runs,
        )
        self.runs = []
        self.last_keys = keys
        self.last_system_key = system_key
        return prepared

    # --------------------------------------------------------------------------------------------
    # Compaction

    def factor(self) -> float:
        return self.state.calibrator.factor or 1.0

    def compaction_due(self, items: Sequence[Item], ctx: StageContext) -> str | None:
        """The trigger a compaction is due for now (`budget`: the view is past the request budget), or None."""
        tokens = ctx.system_tokens + total_tokens(items)
        # Circuit breaker (Claude Code stops after 3 consecutive failures): it stays open until the
        # view has grown by a tenth of the window, so a stuck session does not retry on every call
        # (`compact` closes it again on the next attempt).
        if (self.compaction_failures >= self.policy.compaction.max_failures
                and tokens - self.failed_at_tokens < ctx.window * 0.1):
            return None
        # Past the request budget, compacting beats letting fit drop history, whatever the trigger.
        if tokens > ctx.budget:
            return "budget"
        return strategy_for(self.policy.compaction).due(tokens, ctx.window, self.policy.compaction, self.factor(),
                                                        self.turns(items))

    def turns(self, items: Sequence[Item]) -> int:
        """The view's turns, counted only when a turn knob needs them (a pass over the whole view)."""
        c = self.policy.compaction
        if c.trigger_turns is None and (c.max_turns is None or c.summary_after is None):
            return 0
        return len(turn_starts(items))

    def request_agent_summary(self, items: list[Item], ctx: StageContext, events: list[Event]) -> list[Item]:
        """Ask the agent for its own state summary when its strategy wants one now (Alyx's checkpoint):
        a user message, logged like any other (the model sees it), that the next compaction uses."""
        policy, state = self.policy.compaction, self.state
        if (not policy.enabled or state.summary_requested or state.agent_summary is not None or not items
                or items[-1].message.tool_calls):
            return items
        tokens = ctx.system_tokens + total_tokens(items)
        request = strategy_for(policy).summary_request(tokens, ctx.window, policy, self.factor())
        if request is None:
            return items
        entry_id = self.record(MessageEntry(request))
        self.processed = len(state.records)
        events.append(CheckpointRequested((entry_id,), 0, 0, f"view at {round(tokens * self.factor()):,} tokens: "
                                          "the agent is asked to write its checkpoint"))
        return self.cache.items(state)

    def compact(self, items: list[Item], ctx: StageContext, events: list[Event], *, summarizer: Summarizer | None,
                focus: str | None, trigger: str, force: bool = False,
                memory_flush: Callable[[list[Message]], None] | None = None) -> list[Item]:
        state = self.state
        started, before = time.time_ns(), ctx.system_tokens + total_tokens(items)
        previous = state.compaction.summary if state.compaction else None
        try:
            outcome = compact_view(items, self.policy.compaction, ctx, summarizer=summarizer, previous=previous,
                                   focus=focus, pins=state.pins, force=force, memory_flush=memory_flush,
                                   trigger=trigger, factor=self.factor(), originals=self.originals(items),
                                   agent_summary=state.agent_summary)
        except CompactionFailed as failure:
            # A /compact that finds nothing to do says so; only automatic attempts count for the breaker.
            self.compaction_failures += trigger != "manual"
            self.failed_at_tokens = failure.tokens_before
            if failure.message != self.last_failure:  # reported once, not on every call it repeats
                failed = CompactionFailure((), failure.tokens_before, failure.tokens_before, failure.message,
                                           consecutive_failures=self.compaction_failures)
                events.append(failed)
                self.runs.append(StageRun("compaction", started, time.time_ns(), before, before, (failed,)))
            self.last_failure = failure.message
            return items
        self.record(outcome.entry())
        self.compaction_failures = 0
        self.last_failure = ""
        new_items = self.cache.items(state)
        after = ctx.system_tokens + total_tokens(new_items)
        event = Compacted(outcome.summary.covered_ids, outcome.tokens_before, after, outcome.reason,
                          strategy=outcome.strategy, details=outcome.details)
        events.append(event)
        self.runs.append(StageRun("compaction", started, time.time_ns(), before, after, (event,)))
        return new_items


def tools_json(tools: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(tools), sort_keys=True) if tools else ""

