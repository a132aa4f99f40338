"""One request, the stage order written once: per-message stages on what is new, view-wide stages,
compaction when due, fit, then validation and repair.

`Pipeline` is configuration (the log, the counter, the policy, the sinks) and the logic of a request;
what it reads and changes between calls is the engine's `Runtime` (its `branch`), which it does not
own. Every decision a stage takes is appended to the log as a `DecisionEntry` and folded into the state
through the one reducer (`record`, the one way state changes), exactly as on reopen.
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
from ctxwin.messages.pairing import Problem
from ctxwin.pipeline import budget, dedup, fit, mask, prune, spill, turns
from ctxwin.pipeline.events import CheckpointRequested, Compacted, CompactionFailure, SystemChanged
from ctxwin.pipeline.validate import common_prefix
from ctxwin.pipeline.view import Event, Item, StageContext, StageResult, total_tokens
from ctxwin.policies.model import Policy
from ctxwin.store.base import Entry, SessionLog
from ctxwin.store.entries import DecisionEntry, LogEntry, MessageEntry, epoch, parse
from ctxwin.tokens import CachedCounter

from .budget import Budget
from .cache import view
from .prepared import Prepared, StageRun
from .repair import validate_and_repair
from .runtime import Runtime
from .state import apply

Stage = Callable[[list[Item], StageContext], StageResult]


@dataclass
class Pipeline:
    log: SessionLog
    counter: CachedCounter
    policy: Policy
    rt: Runtime
    """The engine's runtime state, read and written here, owned by the engine (which replaces its
    `branch` when it derives everything from the log again)."""
    sinks: list[Callable[[Entry], Any]] = field(default_factory=list)
    """Called with every message entry as it is logged (the memory index)."""

    def record(self, entry: LogEntry) -> str:
        """Append an entry to the log and fold it into the state: the one way state changes."""
        stored = self.log.append(entry.kind, entry.to_payload())
        branch = self.rt.branch
        apply(branch.state, stored.id, entry, counter=self.counter, strategy=strategy_for(self.policy.compaction),
              policy=self.policy)
        branch.read = (stored.id, branch.read[1] + 1)
        if self.sinks and isinstance(entry, MessageEntry):
            for sink in self.sinks:
                sink(stored)
        return stored.id

    def replay(self, entries: Sequence[Entry], ctx_for: Callable[[], StageContext]) -> int:
        """Fold entries read from the log (a path's, or what another writer appended after the ones
        already folded in) into the state, as opening the log would: the per-message stages count as
        having run on every message logged (their decisions are in the log), dedup's memory takes in
        the logged outputs, and the last entry's time stands in for the last call's (the log does not
        record calls, but every call is followed by an append; cache-TTL pruning needs it). Returns
        how many entries were folded in."""
        branch, policy = self.rt.branch, self.policy
        strategy = strategy_for(policy.compaction)
        first_new = len(branch.state.records)
        last: Entry | None = None
        for entry in entries:
            apply(branch.state, entry.id, parse(entry.kind, entry.payload, entry_id=entry.id),
                  counter=self.counter, strategy=strategy, policy=policy)
            last = entry
        if last is None:
            return 0
        count = len(entries)
        branch.read = (last.id, branch.read[1] + count)
        branch.last_call_at = epoch(last.timestamp)
        records = branch.state.records
        branch.processed = len(records)
        if policy.dedup.enabled and len(records) > first_new:
            items = [Item(r.entry_id, r.message, 0) for r in records[first_new:]]
            dedup.stage(items, policy.dedup, ctx_for(), branch.dedup, self.originals(items), {})
        return count

    # --------------------------------------------------------------------------------------------
    # The request

    def context(self, system: str, tools_json: str, overhead_tokens: int, now: float | None,
                budget: Budget | None = None) -> StageContext:
        """What the stages read besides the view, for a request with `budget` (default: the session's).
        They count in counter units; the overhead (a harness's own prompt and schemas, which the engine
        does not see) is given in the model's own tokens."""
        branch = self.rt.branch
        state = branch.state
        budget = budget or state.budget
        factor = self.factor()
        system_tokens = round(overhead_tokens / factor) + (self.counter.count_text(system) if system else 0) + (
            self.counter.count_text(tools_json) if tools_json else 0)
        return StageContext(counter=self.counter, window=budget.window, budget=int(budget.tokens / factor),
                            system_tokens=system_tokens, now=now, last_call_at=branch.last_call_at,
                            blobs=self.log.blobs, calls=state.calls, pins=frozenset(state.pins))

    def health(self, prepared: Prepared) -> str:
        """The state a request is in: ok, warn, compaction due, over budget or unlimited window."""
        compaction, state = self.policy.compaction, self.rt.branch.state
        if self.policy.unlimited_window:
            return "unlimited window"
        if prepared.tokens > prepared.budget:
            return "over budget"
        if compaction.enabled and strategy_for(compaction).due(prepared.raw_tokens, prepared.window, compaction,
                                                               state.calibrator.factor,
                                                               self.turns(prepared.items)) is not None:
            return "compaction due"
        return "warn" if prepared.tokens >= 0.75 * prepared.window else "ok"

    def prepare(self, ctx: StageContext, budget: Budget, system: str, tools_json: str, tools: list[dict[str, Any]], *,
                compaction: Callable[[list[Item], StageContext, list[Event], str], list[Item]]) -> Prepared:
        """The request for `ctx` (built for `budget`), after running every stage in order."""
        branch, policy = self.rt.branch, self.policy
        state = branch.state
        events: list[Event] = []

        # 1. Per-message stages, once per message, in log order.
        new = [r.item for r in state.records[branch.processed:] if r.item is not None]
        if new:
            for name, run in self.message_stages():
                started = time.time_ns()
                result = run(new, ctx)
                self.commit(name, result, events)
                if result.events or result.decisions:
                    self.ran(name, started, result, total_tokens(new), total_tokens(result.items))
                new = [item for i in result.items if (item := state.records[state.index[i.entry_id]].item)]
        branch.processed = len(state.records)

        # 2. View-wide stages. `total` follows the view's tokens: the stages that change it say so (events
        # or decisions), so a view they pass on unchanged is not added up again (a pass over the view).
        items = self.view()
        total = branch.view.tokens
        if new:  # only after the agent had a turn
            items, total = self.request_agent_summary(items, total, ctx, events)
        if policy.mask.enabled:
            scan = branch.mask_scan(policy.mask)  # after the view is current: a rebuilt view starts a new scan
            items, total = self.view_stage("mask", lambda view, c: mask.stage(view, policy.mask, c, scan), items,
                                           total, ctx, events)
        if policy.prune.enabled:
            items, total = self.view_stage("prune", lambda view, c: prune.stage(view, policy.prune, c), items, total,
                                           ctx, events)
        max_turns = policy.compaction.max_turns
        if policy.compaction.enabled and max_turns is not None and policy.compaction.summary_after is None:
            items, total = self.view_stage("turns", lambda view, c: turns.stage(view, max_turns, c), items, total,
                                           ctx, events)
        trigger = self.compaction_due(items, ctx, total) if policy.compaction.enabled else None
        if trigger is not None:
            items = compaction(items, ctx, events, trigger)
            total = total_tokens(items)

        def fitted(view: list[Item], context: StageContext) -> StageResult:
            return fit.stage(view, policy.fit, context)

        if policy.fit.enabled:
            items, total = self.view_stage("fit", fitted, items, total, ctx, events)

        # 3. Validate (incrementally: usually only the new tail); repair what cuts left behind.
        def refit(view: list[Item], tighter: StageContext) -> list[Item]:
            return self.view_stage("fit", fitted, view, total_tokens(view), tighter, events)[0]

        def collapse(view: list[Item], context: StageContext) -> list[Item]:
            return self.view_stage("fit", fit.collapse_unanswered, view, total_tokens(view), context, events)[0]

        started, emitted, unrepaired, at = time.time_ns(), len(events), total, len(branch.runs)
        items, keys, problems, total = validate_and_repair(branch.repair, items, ctx, events, refit, collapse,
                                                           fit_enabled=policy.fit.enabled, counter=self.counter,
                                                           tokens=total)
        repairs = tuple(e for e in events[emitted:] if e.is_repair)
        if repairs:  # before the fit runs it made itself (refit, collapse): the runs stay in the order they started
            branch.runs.insert(at, StageRun("repair", started, time.time_ns(), ctx.system_tokens + unrepaired,
                                            ctx.system_tokens + total, repairs))
        tokens = ctx.system_tokens + total
        if tokens > ctx.budget and not policy.unlimited_window:
            # Without fit the policy promised nothing; with it, repair added more than fit took back.
            raise ContextBudgetError(
                f"the request is {tokens:,} tokens, over its budget of {ctx.budget:,}"
                + ("" if policy.fit.enabled else ", and the policy's fit stage is off"),
                tokens=tokens, budget=ctx.budget,
                hint=None if policy.fit.enabled else "enable [fit] in the policy, or compaction")
        return self.finish(items, keys, total, ctx, budget, events, problems, system, tools_json, tools)

    def view(self) -> list[Item]:
        """The current view (a copy)."""
        branch = self.rt.branch
        return view(branch.view, branch.state, self.counter)

    def failed(self) -> None:
        """The request being built raised: what its stages did is not the next one's to report."""
        self.rt.branch.runs.clear()

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
                items, p.dedup, ctx, self.rt.branch.dedup, self.originals(items),
                self.visible_by_id() if p.dedup.idempotent_tools else {})))
        return stages

    def commit(self, stage: str, result: StageResult, events: list[Event]) -> None:
        """Record a stage's decisions in the log (one entry per stage run) and apply them."""
        events.extend(result.events)
        if result.decisions:
            self.record(DecisionEntry(stage, {d.entry_id: d.message for d in result.decisions},
                                      [e.to_dict() for e in result.events]))

    def view_stage(self, stage: str, run: Stage, items: list[Item], tokens: int, ctx: StageContext,
                   events: list[Event]) -> tuple[list[Item], int]:
        """Run a stage over the whole view (of `tokens` tokens), record what it decided, and return the
        new view and its tokens."""
        started = time.time_ns()
        result = run(items, ctx)
        if not result.events and not result.decisions:
            return result.items, tokens  # a stage that changes nothing says nothing: the same view
        self.commit(stage, result, events)
        after = self.view() if result.decisions else result.items
        after_tokens = self.rt.branch.view.tokens if result.decisions else total_tokens(after)
        self.ran(stage, started, result, tokens, after_tokens, ctx.system_tokens)
        return after, after_tokens

    def ran(self, stage: str, started_ns: int, result: StageResult, before: int, after: int, base: int = 0) -> None:
        """Keep the run of a stage that acted (events or decisions) for the request being built, with the
        tokens of what it worked on before and after."""
        self.rt.branch.runs.append(StageRun(stage, started_ns, time.time_ns(), base + before, base + after,
                                            tuple(result.events)))

    def originals(self, items: Sequence[Item]) -> dict[str, Message]:
        state = self.rt.branch.state
        records, index = state.records, state.index
        return {i.entry_id: records[index[i.entry_id]].message for i in items if i.entry_id in index}

    def visible_by_id(self) -> dict[str, Item]:
        branch = self.rt.branch
        return {r.entry_id: r.item for r in branch.state.records[: branch.processed] if r.item is not None}

    def finish(self, items: list[Item], keys: list[str], total: int, ctx: StageContext, budget: Budget,
               events: list[Event], problems: list[Problem], system: str, tools_json: str,
               tools: list[dict[str, Any]]) -> Prepared:
        branch = self.rt.branch
        system_key = f"{system}\x00{tools_json}"
        same_system = system_key == branch.last_system_key
        if branch.last_system_key is not None and not same_system:
            # A workspace file changed (bootstrap) or the harness changed its system prompt or tools:
            # the whole prompt is new to the provider's cache.
            events.append(SystemChanged((), 0, ctx.system_tokens, "the system prompt or tool schemas changed"))
        stable = common_prefix(keys, branch.last_keys) if same_system else 0
        raw = ctx.system_tokens + total
        calibrator = branch.state.calibrator
        factor = calibrator.factor if calibrator.factor > 0 else 1.0
        prepared = Prepared(
            system=system, items=items, tokens=round(raw * factor), raw_tokens=raw,
            budget=budget.tokens, window=budget.window, events=events, problems=problems,
            tools=tools, system_tokens=ctx.system_tokens, stable_prefix=stable,
            stable_prefix_tokens=raw - total_tokens(items[stable:]) if same_system else 0,
            prefix_kept=same_system and stable == len(branch.last_keys), stages=branch.runs,
        )
        branch.runs = []
        branch.last_keys = keys
        branch.last_system_key = system_key
        return prepared

    # --------------------------------------------------------------------------------------------
    # Compaction

    def factor(self) -> float:
        return self.rt.branch.state.calibrator.factor or 1.0

    def compaction_due(self, items: Sequence[Item], ctx: StageContext, total: int | None = None) -> str | None:
        """The trigger a compaction is due for now (`budget`: the view is past the request budget), or None.
        `total`: the view's tokens, when the caller has them."""
        tokens = ctx.system_tokens + (total_tokens(items) if total is None else total)
        # Circuit breaker (Claude Code stops after 3 consecutive failures): it stays open until the
        # view has grown by a tenth of the window, so a stuck session does not retry on every call
        # (`compact` closes it again on the next attempt).
        breaker = self.rt.branch.breaker
        if (breaker.failures >= self.policy.compaction.max_failures
                and tokens - breaker.failed_at_tokens < ctx.window * 0.1):
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

    def request_agent_summary(self, items: list[Item], total: int, ctx: StageContext,
                              events: list[Event]) -> tuple[list[Item], int]:
        """Ask the agent for its own state summary when its strategy wants one now (Alyx's checkpoint):
        a user message, logged like any other (the model sees it), that the next compaction uses.
        Returns the view and its tokens."""
        policy, branch = self.policy.compaction, self.rt.branch
        state = branch.state
        if (not policy.enabled or state.summary_requested or state.agent_summary is not None or not items
                or items[-1].message.tool_calls):
            return items, total
        tokens = ctx.system_tokens + total
        request = strategy_for(policy).summary_request(tokens, ctx.window, policy, self.factor())
        if request is None:
            return items, total
        entry_id = self.record(MessageEntry(request))
        branch.processed = len(state.records)
        events.append(CheckpointRequested((entry_id,), 0, 0, f"view at {round(tokens * self.factor()):,} tokens: "
                                          "the agent is asked to write its checkpoint"))
        return self.view(), branch.view.tokens

    def compact(self, items: list[Item], ctx: StageContext, events: list[Event], *, summarizer: Summarizer | None,
                focus: str | None, trigger: str, force: bool = False,
                memory_flush: Callable[[list[Message]], None] | None = None) -> list[Item]:
        branch = self.rt.branch
        state, breaker = branch.state, branch.breaker
        started, before = time.time_ns(), ctx.system_tokens + total_tokens(items)
        previous = state.compaction.summary if state.compaction else None
        try:
            outcome = compact_view(items, self.policy.compaction, ctx, summarizer=summarizer, previous=previous,
                                   focus=focus, pins=state.pins, force=force, memory_flush=memory_flush,
                                   trigger=trigger, factor=self.factor(), originals=self.originals(items),
                                   agent_summary=state.agent_summary)
        except CompactionFailed as failure:
            # A /compact that finds nothing to do says so; only automatic attempts count for the breaker.
            breaker.failures += trigger != "manual"
            breaker.failed_at_tokens = failure.tokens_before
            if failure.message != breaker.last_failure:  # reported once, not on every call it repeats
                failed = CompactionFailure((), failure.tokens_before, failure.tokens_before, failure.message,
                                           consecutive_failures=breaker.failures)
                events.append(failed)
                branch.runs.append(StageRun("compaction", started, time.time_ns(), before, before, (failed,)))
            breaker.last_failure = failure.message
            return items
        self.record(outcome.entry())
        breaker.failures = 0
        breaker.last_failure = ""
        new_items = self.view()
        after = ctx.system_tokens + total_tokens(new_items)
        event = Compacted(outcome.summary.covered_ids, outcome.tokens_before, after, outcome.reason,
                          strategy=outcome.strategy, details=outcome.details)
        events.append(event)
        branch.runs.append(StageRun("compaction", started, time.time_ns(), before, after, (event,)))
        return new_items


def tools_json(tools: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps(list(tools), sort_keys=True) if tools else ""

