"""Compaction: run a strategy's plan, call the summarizer (the edge), guard and index the result.

Every strategy (one module each: `pi`, `openclaw`, `claude_code`, `letta`, `checkpoint`, `ctxwin`)
reproduces one anchor's choices of trigger, cut and budget; they share one cut-point rule (never
between a tool call and its result, `cuts`), one summarizer interface, and one identifier guard.
The view a compaction produces is `[summary, pinned..., attachments..., kept tail...]`; nothing is
deleted from the log, and the compaction is a single log entry, so a crash before it is written
leaves the session exactly as it was.

Because the engine's view already starts at the previous compaction's first kept entry, a second
compaction summarizes from there, merged with the previous summary: Pi's lost-messages bug (#2608),
where the first compaction's kept messages vanished, cannot happen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwin.compaction.base import Summarizer, Summary
from ctxwin.compaction.checkpoint import CheckpointStrategy
from ctxwin.compaction.claude_code import ClaudeCodeStrategy
from ctxwin.compaction.ctxwin import CtxwinStrategy
from ctxwin.compaction.cuts import CutPlan
from ctxwin.compaction.extractive import ExtractiveSummarizer
from ctxwin.compaction.identifiers import call_arguments, guard
from ctxwin.compaction.letta import LettaStrategy
from ctxwin.compaction.openclaw import OpenClawStrategy
from ctxwin.compaction.pi import PiStrategy
from ctxwin.compaction.strategy import AgentSummary, Strategy, summary_budget
from ctxwin.errors import CompactionFailed, InputError
from ctxwin.messages import Message, Text
from ctxwin.pipeline.view import CHARS_PER_TOKEN, Item, StageContext, describe_call, recall_ref, total_tokens
from ctxwin.store.entries import CompactionEntry

STRATEGIES: Mapping[str, Strategy] = {s.name: s for s in (
    PiStrategy(), OpenClawStrategy(), ClaudeCodeStrategy(), LettaStrategy(), CheckpointStrategy(), CtxwinStrategy())}
"""Every strategy by the name a policy gives in `compaction.strategy`."""

GUARD_SHARE = 0.1
"""Share of the summary budget held back from the summarizer so the identifier guard has room to
append what the summary lost."""
INDEX_SHARE = 0.15
"""Share of the summary budget for the recall index: where the largest evicted outputs can be read
back, byte for byte (the page table of what left the view)."""
INDEX_MIN_TOKENS = 150
"""Outputs and inputs smaller than about this many tokens are not worth an index line."""
INDEX_HEADING = "## Recall index"
SPLIT_PREFIX_SHARE = 0.35
"""Share of the summary budget given to a split turn's prefix summary (Pi runs both in parallel)."""
SPLIT_TURN_HEADER = "**Turn Context (split turn):**"


MERGE_STATE_KEYS = ("extractive",)
"""Keys of `Summary.details` that summarizers read back from the previous summary."""


@dataclass(frozen=True)
class Outcome:
    strategy: str
    summary: Summary
    plan: CutPlan
    tokens_before: int
    tokens_after: int
    reason: str
    attachments: list[dict[str, str]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def entry(self) -> CompactionEntry:
        """The compaction's log entry: everything needed to rebuild the view and audit the compaction."""
        summary = self.summary
        return CompactionEntry(
            summary=summary.text,
            first_kept_id=self.plan.first_kept_id,
            tokens_before=self.tokens_before,
            tokens_after=self.tokens_after,
            strategy=self.strategy,
            covered_ids=summary.covered_ids,
            pinned_ids=tuple(i.entry_id for i in self.plan.pinned),
            read_files=summary.read_files,
            modified_files=summary.modified_files,
            identifiers=summary.identifiers,
            sections=summary.sections,
            summary_tokens=summary.tokens,
            summarizer=summary.summarizer,
            attachments=tuple(self.attachments),
            reason=self.reason,
            details=self.details,
            summarizer_state={k: v for k, v in summary.details.items() if k in MERGE_STATE_KEYS},
        )


def summary_from_entry(entry: CompactionEntry) -> Summary:
    """The summary a logged compaction stands for (the inverse of `Outcome.entry`), with the
    summarizer's merge state, so the next compaction merges into it exactly."""
    return Summary(
        text=entry.summary,
        read_files=entry.read_files,
        modified_files=entry.modified_files,
        identifiers=entry.identifiers,
        covered_ids=entry.covered_ids,
        tokens=entry.summary_tokens,
        summarizer=entry.summarizer,
        sections={k: list(v) for k, v in entry.sections.items()},
        details=dict(entry.summarizer_state),
    )


def strategy_for(policy: Any) -> Strategy:
    """The strategy a compaction section names."""
    found = STRATEGIES.get(policy.strategy)
    if found is None:
        raise InputError(f"unknown compaction strategy {policy.strategy!r}", f"choose one of {', '.join(STRATEGIES)}")
    return found


def threshold(window: int, policy: Any) -> int:
    """Tokens above which a compaction is due (model tokens)."""
    return strategy_for(policy).threshold(window, policy)


def plan_cut(items: Sequence[Item], policy: Any, ctx: StageContext, pins: set[str], factor: float = 1.0,
             agent_summary: AgentSummary | None = None) -> CutPlan:
    """Where this policy's strategy cuts the view."""
    return strategy_for(policy).plan(items, policy, ctx, pins, factor, agent_summary)


# --------------------------------------------------------------------------------------------------
# Running it


def compact_view(
    items: Sequence[Item],
    policy: Any,
    ctx: StageContext,
    *,
    summarizer: Summarizer | None,
    previous: Summary | None,
    focus: str | None,
    pins: set[str],
    force: bool = False,
    memory_flush: Callable[[list[Message]], None] | None = None,
    trigger: str = "threshold",
    factor: float = 1.0,
    originals: Mapping[str, Message] | None = None,
    agent_summary: AgentSummary | None = None,
) -> Outcome:
    """Plan, summarize, guard. Raises `CompactionFailed` (history untouched) when there is nothing
    to summarize, the summarizer fails, or the result would not shrink the view enough."""
    strategy = strategy_for(policy)
    before = ctx.system_tokens + total_tokens(items)
    plan = strategy.plan(items, policy, ctx, pins, factor, agent_summary)
    if not plan.summarized:
        raise CompactionFailed("nothing to compact: the recent history alone is within the kept budget", before)
    if memory_flush is not None and trigger != "manual":
        memory_flush([i.message for i in plan.summarized])
    summarizer = summarizer or ExtractiveSummarizer()
    budget = summary_budget(policy, ctx.window, factor)
    summarizer_budget = max(int(budget * (1 - GUARD_SHARE - INDEX_SHARE)), 1)
    # The summarizer reads the messages as logged, not their masked or spilled renderings in the view.
    logged = originals or {}
    span_messages = [logged.get(i.entry_id, i.message) for i in plan.span]
    prefix_messages = [logged.get(i.entry_id, i.message) for i in plan.prefix]
    try:
        if agent_summary is not None and plan.first_kept_id != agent_summary.entry_id \
                and any(i.entry_id == agent_summary.entry_id for i in plan.span):
            # The agent's own summary stands for the span (Alyx); the guard and the index still apply.
            summary = Summary(text=agent_summary.text, summarizer="agent checkpoint",
                              tokens=ctx.counter.count_text(agent_summary.text))
            if summary.tokens > summarizer_budget:
                summary = summarizer.summarize([Message("assistant", (Text(agent_summary.text),))], previous=None,
                                               focus=focus, budget_tokens=summarizer_budget, counter=ctx.counter)
        elif plan.prefix:
            history_budget = int(summarizer_budget * (1 - SPLIT_PREFIX_SHARE))
            history = summarizer.summarize(span_messages, previous=previous, focus=focus,
                                           budget_tokens=history_budget, counter=ctx.counter) \
                if span_messages else previous
            turn = summarizer.summarize(prefix_messages, previous=None, focus=focus,
                                        budget_tokens=summarizer_budget - history_budget, counter=ctx.counter)
            summary = join_split_turn(history, turn, ctx)
        else:
            summary = summarizer.summarize(span_messages, previous=previous, focus=focus,
                                           budget_tokens=summarizer_budget, counter=ctx.counter)
    except Exception as error:  # a failed summary never deletes history
        raise CompactionFailed(f"summarizer {getattr(summarizer, 'name', '?')} failed: {error}", before) from error
    if policy.identifier_policy == "strict":
        summary = guard(summary, span_messages + prefix_messages, ctx.counter, int(budget * (1 - INDEX_SHARE)))
    summary = with_recall_index(summary, plan.summarized, ctx, budget, originals)
    covered = tuple(dict.fromkeys([*(previous.covered_ids if previous else ()),
                                   *(i.entry_id for i in plan.summarized)]))
    summary = replace(summary, covered_ids=covered)
    attachments = strategy.attachments(plan, policy, ctx)

    summary_tokens = ctx.count(summary_message(summary.text))
    attachment_tokens = sum(ctx.counter.count_text(a["text"]) for a in attachments)
    after = (ctx.system_tokens + summary_tokens + attachment_tokens + total_tokens(plan.pinned)
             + total_tokens(plan.kept))
    if not force and after > before * (1 - policy.min_gain_ratio):
        raise CompactionFailed(
            f"compaction would only go from {before:,} to {after:,} tokens (less than "
            f"{policy.min_gain_ratio:.0%} saved)", before)
    reason = f"{trigger}: view at {before:,} tokens" + (f", focus: {focus}" if focus else "")
    details = {"trigger": trigger, "span_messages": len(plan.span), "prefix_messages": len(plan.prefix),
               "kept_messages": len(plan.kept), "summary_tokens": summary.tokens,
               "identifier_guard": summary.details.get("identifier_guard", {})}
    if "input_tokens" in summary.details:  # a model wrote it: what its calls cost (telemetry reports it)
        details["summarizer_usage"] = {k: summary.details.get(k) for k in ("model", "calls", "input_tokens",
                                                                           "output_tokens")}
    return Outcome(policy.strategy, summary, plan, before, after, reason, attachments, details)


def recall_index(items: Sequence[Item], ctx: StageContext, budget_tokens: int,
                 originals: Mapping[str, Message] | None = None) -> list[str]:
    """Index lines for the largest outputs and call inputs of the summarized span (largest first,
    listed in conversation order) within `budget_tokens`: what each was and the ref that returns
    it byte for byte. Sizes are those of the messages as logged (`originals`, by entry id): an output
    already masked in the view is still worth indexing."""
    candidates: list[tuple[int, int, str]] = []  # (size in characters, position, line)
    for position, item in enumerate(items):
        message = (originals or {}).get(item.entry_id, item.message)
        for result in message.tool_results:
            size = len(result.text)
            if size >= INDEX_MIN_TOKENS * CHARS_PER_TOKEN:
                candidates.append((size, position, f"- output of {describe_call(ctx.calls.get(result.call_id))}: "
                                                   f"recall(\"{recall_ref(item.entry_id, result.call_id)}\")"))
        for call in message.tool_calls:
            size = sum(len(v) for v in call_arguments(call).values() if isinstance(v, str))
            if size >= INDEX_MIN_TOKENS * CHARS_PER_TOKEN:
                candidates.append((size, position, f"- input of {describe_call(call)}: "
                                                   f"recall(\"{recall_ref(item.entry_id, call.id)}\")"))
    chosen: list[tuple[int, str]] = []
    used = 0
    for _, position, line in sorted(candidates, key=lambda c: (-c[0], c[1])):
        cost = ctx.counter.count_text(line) + 1
        if used + cost <= budget_tokens:
            chosen.append((position, line))
            used += cost
    return [line for _, line in sorted(chosen)]


def with_recall_index(summary: Summary, items: Sequence[Item], ctx: StageContext, budget: int,
                      originals: Mapping[str, Message] | None = None) -> Summary:
    room = budget - ctx.counter.count_text(summary.text) - ctx.counter.count_text(INDEX_HEADING) - 2
    lines = recall_index(items, ctx, room, originals)
    if not lines:
        return summary
    text = f"{summary.text.rstrip()}\n\n{INDEX_HEADING}\n" + "\n".join(lines)
    return replace(summary, text=text, tokens=ctx.counter.count_text(text),
                   details={**summary.details, "recall_index": len(lines)})


def join_split_turn(history: Summary | None, turn: Summary, ctx: StageContext) -> Summary:
    """Pi's layout: the history summary, a rule, then the split turn's prefix summary."""
    head = history.text if history is not None else "No prior history."
    text = f"{head}\n\n---\n\n{SPLIT_TURN_HEADER}\n\n{turn.text}"
    base = history or turn
    return replace(
        base,
        text=text,
        read_files=tuple(dict.fromkeys([*base.read_files, *turn.read_files])),
        modified_files=tuple(dict.fromkeys([*base.modified_files, *turn.modified_files])),
        identifiers=tuple(dict.fromkeys([*base.identifiers, *turn.identifiers])),
        tokens=ctx.counter.count_text(text),
    )


SUMMARY_PREAMBLE = "The conversation history before this point was compacted into the following summary:"


def summary_message(text: str) -> Message:
    """The user message that carries a compaction summary into the view (Pi's framing)."""
    return Message("user", (Text(f"{SUMMARY_PREAMBLE}\n\n<summary>\n{text}\n</summary>"),), id="summary")


def attachment_message(attachment: dict[str, str]) -> Message:
    return Message("user", (Text(f"[Re-attached after compaction: {attachment['path']}, as last read]\n"
                                 f"{attachment['text']}"),), id="attachment")
