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

from ctxwin.compaction.base import RefBlindCounter, Summarizer, Summary
from ctxwin.compaction.cuts import CutPlan
from ctxwin.compaction.extractive import ExtractiveSummarizer, Facts, message_facts
from ctxwin.compaction.identifiers import call_arguments, guard
from ctxwin.compaction.strategies import strategy_for
from ctxwin.compaction.strategy import AgentSummary
from ctxwin.errors import CompactionFailed
from ctxwin.messages import Message, Text
from ctxwin.pipeline.view import CHARS_PER_TOKEN, Item, StageContext, describe_call, recall_ref, total_tokens
from ctxwin.policies.model import CompactionSection
from ctxwin.store.entries import CompactionEntry

GUARD_SHARE = 0.1
"""Share of the summary budget held back from the summarizer so the identifier guard has room to
append what the summary lost."""
INDEX_SHARE = 0.1
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


def threshold(window: int, policy: CompactionSection) -> int:
    """Tokens above which a compaction is due (model tokens)."""
    return strategy_for(policy).threshold(window, policy)


def plan_cut(items: Sequence[Item], policy: CompactionSection, ctx: StageContext, pins: set[str],
             factor: float = 1.0, agent_summary: AgentSummary | None = None) -> CutPlan:
    """Where this policy's strategy cuts the view."""
    return strategy_for(policy).plan(items, policy, ctx, pins, factor, agent_summary)


# --------------------------------------------------------------------------------------------------
# Running it


def compact_view(
    items: Sequence[Item],
    policy: CompactionSection,
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
    facts: Mapping[str, Facts] | None = None,
) -> Outcome:
    """Plan, summarize, guard. Raises `CompactionFailed` (history untouched) when there is nothing
    to summarize, the summarizer fails, or the result would not shrink the view enough. `facts`:
    `message_facts` of logged messages by entry id, when the caller keeps them (the extractive
    summarizer and the guard read them instead of scanning again; same bytes either way)."""
    strategy = strategy_for(policy)
    before = ctx.system_tokens + total_tokens(items)
    plan = strategy.plan(items, policy, ctx, pins, factor, agent_summary)
    if not plan.summarized:
        raise CompactionFailed("nothing to compact: the recent history alone is within the kept budget", before)
    if memory_flush is not None and trigger != "manual":
        memory_flush([i.message for i in plan.summarized])
    # From here on, the entry ids of recall refs (random in a durable log) weigh the same whatever
    # they are: the summary, its guard and its index fit their budgets alike on every replay of a log.
    ctx = replace(ctx, counter=RefBlindCounter.of(ctx.counter))
    chosen: Summarizer = summarizer or ExtractiveSummarizer()
    budget = strategy.summary_tokens(policy, ctx, factor)
    summarizer_budget = max(int(budget * (1 - GUARD_SHARE - INDEX_SHARE)), 1)
    # The summarizer reads the messages as logged, not their masked or spilled renderings in the view,
    # each with its entry id as its id (what a summary's recall refs name).
    span_messages = logged_messages(plan.span, originals)
    prefix_messages = logged_messages(plan.prefix, originals)
    written = strategy.written_summary(plan, agent_summary)
    try:
        if written is not None:
            # A summary the strategy already has stands for the span; the guard and the index still apply.
            summary = Summary(text=written, summarizer="agent checkpoint", tokens=ctx.counter.count_text(written))
            if summary.tokens > summarizer_budget:
                summary = chosen.summarize([Message("assistant", (Text(written),))], previous=None,
                                               focus=focus, budget_tokens=summarizer_budget, counter=ctx.counter)
        elif plan.prefix:
            history_budget = int(summarizer_budget * (1 - SPLIT_PREFIX_SHARE))
            history = run_summarizer(chosen, span_messages, previous, focus, history_budget, ctx, facts) \
                if span_messages else previous
            turn = run_summarizer(chosen, prefix_messages, None, focus, summarizer_budget - history_budget, ctx, facts)
            summary = join_split_turn(history, turn, ctx)
        else:
            summary = run_summarizer(chosen, span_messages, previous, focus, summarizer_budget, ctx, facts)
    except Exception as error:  # a failed summary never deletes history
        raise CompactionFailed(f"summarizer {chosen.name} failed: {error}", before) from error
    if policy.identifier_policy == "strict":
        guarded = span_messages + prefix_messages
        scanned = [(facts.get(m.id) or message_facts(m)).identifiers for m in guarded] if facts else None
        summary = guard(summary, guarded, ctx.counter, int(budget * (1 - INDEX_SHARE)), scanned)
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


def run_summarizer(summarizer: Summarizer, span: list[Message], previous: Summary | None, focus: str | None,
                   budget: int, ctx: StageContext, facts: Mapping[str, Facts] | None) -> Summary:
    """The summarizer on `span`; the extractive one also reads the facts the caller already has."""
    if facts and isinstance(summarizer, ExtractiveSummarizer):
        return summarizer.summarize(span, previous=previous, focus=focus, budget_tokens=budget, counter=ctx.counter,
                                    facts=facts)
    return summarizer.summarize(span, previous=previous, focus=focus, budget_tokens=budget, counter=ctx.counter)


def logged_messages(items: Sequence[Item], originals: Mapping[str, Message] | None) -> list[Message]:
    """The messages of `items` as logged (`originals`, by entry id, else the view's), each with its
    entry id as its `id`."""
    logged = originals or {}
    out = []
    for item in items:
        message = logged.get(item.entry_id, item.message)
        out.append(message if message.id == item.entry_id else replace(message, id=item.entry_id))
    return out


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
    described: set[str] = set()
    used = 0
    for _, position, line in sorted(candidates, key=lambda c: (-c[0], -c[1])):
        what = line.rsplit(": recall(", 1)[0]
        if what in described:  # the same call made again: one line, the newest ref (no line repeated)
            continue
        cost = ctx.counter.count_text(line) + 1
        if used + cost <= budget_tokens:
            chosen.append((position, line))
            described.add(what)
            used += cost
    return [line for _, line in sorted(chosen)]


def with_recall_index(summary: Summary, items: Sequence[Item], ctx: StageContext, budget: int,
                      originals: Mapping[str, Message] | None = None) -> Summary:
    """The summary with its recall index appended, in what the budget leaves (at most INDEX_SHARE of it:
    a short summary does not grow into a long index)."""
    room = min(budget - ctx.counter.count_text(summary.text), int(budget * INDEX_SHARE)) \
        - ctx.counter.count_text(INDEX_HEADING) - 2
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
