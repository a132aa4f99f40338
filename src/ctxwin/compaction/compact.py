"""Compaction: decide what to summarize and what to keep (pure), then call the summarizer (the edge).

Every strategy reproduces one anchor's choices of trigger, cut and budget; they share one cut-point
rule (never between a tool call and its result), one summarizer interface, and one identifier guard.
The view a compaction produces is `[summary, pinned..., attachments..., kept tail...]`; nothing is
deleted from the log, and the compaction is a single log entry, so a crash before it is written
leaves the session exactly as it was.

Because the engine's view already starts at the previous compaction's first kept entry, a second
compaction summarizes from there, merged with the previous summary: Pi's lost-messages bug (#2608),
where the first compaction's kept messages vanished, cannot happen.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwin.compaction.base import Summarizer, Summary
from ctxwin.errors import CtxwinError
from ctxwin.messages import Message, Text, ToolResult
from ctxwin.pipeline.view import CHARS_PER_TOKEN, Item, StageContext, total_tokens
from ctxwin.policy.model import CompactionPolicy

MIN_THRESHOLD_SHARE = 0.5
"""The trigger never sits below this share of the window, whatever the reserve (a reserve larger than
a small window would otherwise compact on every call)."""
KEEP_SHRINK_STEPS = 4
"""If the kept tail leaves the view above the trigger, halve the kept budget up to this many times."""
LETTA_START_EVICT = 0.3
LETTA_STEP = 0.1
SUMMARY_WINDOW_SHARE = 0.2
"""A summary never gets more than this share of the window, whatever the policy's summary budget
(a 20,000-token Claude Code summary cannot go into an 8,000-token window)."""
RESTORE_WINDOW_SHARE = 0.25
"""Re-attached files never take more than this share of the window (Claude Code's 50K is a quarter
of 200K)."""
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


CHECKPOINT_TAG = re.compile(r"<checkpoint>(.*?)(?:</checkpoint>|$)", re.S)
CHECKPOINT_SHARE = 0.75
"""Without `checkpoint_tokens`, the agent is asked for its checkpoint at this share of the trigger."""
CHECKPOINT_REQUEST = (
    "[ctxwin] The context is at {tokens:,} tokens and older history will soon be trimmed. Before anything "
    "else in your next reply, write a state summary of the work so far inside <checkpoint>...</checkpoint>: "
    "the goal and the user's constraints, files read and changed, what is done, what failed and why, what "
    "comes next, and every exact identifier (paths, ids, hashes, URLs, numbers) still needed. It will stand "
    "in for the older history. Then continue the task."
)


def checkpoint_text(message: Message) -> str | None:
    """The state summary an agent wrote into `message` when asked (Alyx's checkpoint), if any."""
    if message.role != "assistant":
        return None
    found = CHECKPOINT_TAG.search(message.text)
    return found.group(1).strip() if found and found.group(1).strip() else None


def checkpoint_due(tokens: int, window: int, policy: CompactionPolicy, factor: float = 1.0) -> bool:
    """Whether to ask the agent for its checkpoint now (view at `tokens`, counter units)."""
    mark = policy.checkpoint_tokens or int(threshold(window, policy) * CHECKPOINT_SHARE)
    return tokens * factor > mark


class CompactionFailed(CtxwinError):
    def __init__(self, message: str, tokens_before: int) -> None:
        super().__init__(message, "history is kept as it was; the fit stage still guarantees the request fits")
        self.tokens_before = tokens_before


@dataclass(frozen=True)
class CutPlan:
    """What a compaction will do. `span` is summarized; `prefix` (a split turn's beginning) is
    summarized separately; `kept` stays verbatim; `pinned` are span items kept verbatim too."""

    span: list[Item]
    prefix: list[Item]
    kept: list[Item]
    pinned: list[Item] = field(default_factory=list)

    @property
    def first_kept_id(self) -> str | None:
        return self.kept[0].entry_id if self.kept else None

    @property
    def summarized(self) -> list[Item]:
        return self.span + self.prefix


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

    def entry_payload(self) -> dict[str, Any]:
        """The compaction entry: everything needed to rebuild the view and audit the compaction."""
        summary = self.summary
        return {
            "summary": summary.text,
            "first_kept_id": self.plan.first_kept_id,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "strategy": self.strategy,
            "covered_ids": list(summary.covered_ids),
            "pinned_ids": [i.entry_id for i in self.plan.pinned],
            "read_files": list(summary.read_files),
            "modified_files": list(summary.modified_files),
            "identifiers": list(summary.identifiers),
            "sections": summary.sections,
            "summary_tokens": summary.tokens,
            "summarizer": summary.summarizer,
            "attachments": self.attachments,
            "reason": self.reason,
            "details": self.details,
            # The summarizer's own merge state (the extractive summarizer keeps everything it read
            # here, untrimmed), so the next compaction merges exactly, even after a reopen.
            "summarizer_state": {k: v for k, v in summary.details.items() if k in MERGE_STATE_KEYS},
        }


# --------------------------------------------------------------------------------------------------
# Trigger


def threshold(window: int, policy: CompactionPolicy) -> int:
    """Tokens above which a compaction is due (model tokens)."""
    if policy.trigger_ratio is not None:
        return int(window * policy.trigger_ratio)
    return max(window - policy.reserve_tokens, int(window * MIN_THRESHOLD_SHARE))


def summary_budget(policy: CompactionPolicy, window: int, factor: float = 1.0) -> int:
    """Tokens (counter units) a summary may use."""
    return max(int(min(policy.summary_max_tokens, window * SUMMARY_WINDOW_SHARE) / factor), 1)


def compaction_due(tokens: int, ctx: StageContext, policy: CompactionPolicy, factor: float = 1.0) -> bool:
    """Whether a view of `tokens` (counter units, system included) is past the trigger."""
    return tokens * factor > threshold(ctx.window, policy)


# --------------------------------------------------------------------------------------------------
# Cut points (pure)


def is_cut_point(items: Sequence[Item], index: int) -> bool:
    """A cut may fall before a user or assistant message, never before a tool result: cutting before
    an assistant message keeps its results with it, so no call is separated from its result."""
    item = items[index]
    return not item.synthetic and item.message.role in ("user", "assistant")


def first_content(items: Sequence[Item]) -> int:
    """Index of the first non-synthetic item (after the previous summary and markers)."""
    index = 0
    while index < len(items) and items[index].synthetic:
        index += 1
    return index


def find_cut(items: Sequence[Item], start: int, keep_tokens: int) -> int:
    """Pi's rule: walk back from the newest message until `keep_tokens` are kept, then move forward
    to the nearest cut point. Returns `start` when everything fits (nothing to summarize) and
    `len(items)` when no cut point is left (summarize everything)."""
    kept = 0
    for index in range(len(items) - 1, start - 1, -1):
        kept += items[index].tokens
        if kept >= keep_tokens:
            for cut in range(index, len(items)):
                if is_cut_point(items, cut):
                    return max(cut, start)
            return len(items)
    return start


def turn_start(items: Sequence[Item], start: int, cut: int) -> int | None:
    """When the cut falls inside a turn (not at a user message), where that turn began."""
    if cut >= len(items) or items[cut].message.role == "user":
        return None
    for index in range(cut - 1, start - 1, -1):
        if items[index].message.role == "user" and not items[index].synthetic:
            return index
    return None


def letta_cut(items: Sequence[Item], start: int, target: int, fixed: int) -> int:
    """Letta's sliding window: starting from 30 %, evict 10 % more of the messages per step (so the
    first cut tried is at 40 %, as in Letta's code), each time snapping back to an assistant message,
    until the rest fits `target` tokens (`fixed`: tokens that stay whatever is evicted)."""
    n = len(items) - start
    evict = LETTA_START_EVICT
    cut = start
    while evict < 1.0:
        evict += LETTA_STEP
        index = start + round(evict * n)
        candidate = next((i for i in range(min(index, len(items) - 1), start, -1)
                          if items[i].message.role == "assistant"), None)
        if candidate is None:
            continue
        cut = candidate
        if fixed + total_tokens(items[cut:]) < target:
            return cut
    return len(items)


def plan_cut(items: Sequence[Item], policy: CompactionPolicy, ctx: StageContext, pins: set[str],
             factor: float = 1.0) -> CutPlan:
    """Where this policy's strategy cuts the view."""
    start = first_content(items)
    limit = threshold(ctx.window, policy) / factor  # counter units
    if policy.strategy == "claude-code" or (policy.strategy == "letta" and policy.mode == "all"):
        cut = len(items)
    elif policy.strategy == "letta":
        target = int(ctx.window * (policy.target_ratio or 0.7) / factor)
        cut = letta_cut(items, start, target, ctx.system_tokens)
    else:
        keep = policy.keep_recent_tokens
        if policy.strategy == "openclaw":
            keep = min(keep, int(ctx.window * policy.history_share / factor))
        elif policy.strategy == "ctxwin" and policy.target_ratio is not None:
            # ctxwin sizes the kept tail to what is left of its target after the system prompt and
            # the summary: a harness with a 26K system prompt keeps little verbatim, one with a
            # small prompt keeps much more. `keep_recent_tokens` is then the floor.
            target = int(ctx.window * policy.target_ratio / factor)
            keep = max(keep, target - ctx.system_tokens - summary_budget(policy, ctx.window, factor))
        cut = find_cut(items, start, keep)
        summary_tokens = summary_budget(policy, ctx.window, factor)
        for _ in range(KEEP_SHRINK_STEPS):
            if ctx.system_tokens + total_tokens(items[cut:]) + summary_tokens <= limit or keep <= 0:
                break
            keep //= 2
            cut = find_cut(items, start, keep)
    # A turn too large to keep is summarized apart (Pi) where the summarizer is a model; ctxwin reads the
    # whole span at once, so the prefix of a split turn is simply part of it.
    split = turn_start(items, start, cut) if policy.strategy in ("pi", "openclaw", "checkpoint") else None
    span_end = split if split is not None else cut
    pinned = pinned_items(items[start:cut], pins)
    held = {i.entry_id for i in pinned}
    span = [i for i in items[start:span_end] if not i.synthetic and i.entry_id not in held]
    prefix = [i for i in items[split:cut] if i.entry_id not in held] if split is not None else []
    return CutPlan(span, prefix, list(items[cut:]), pinned)


def pinned_items(items: Sequence[Item], pins: set[str]) -> list[Item]:
    """The pinned items of a span, with the other halves of their tool calls and results (a pinned
    call is kept with its results, a pinned result with its call), in order. Pinned items are kept
    verbatim and left out of the summary."""
    chosen = {i.entry_id for i in items if i.entry_id in pins}
    if not chosen:
        return []
    call_ids = {c.id for i in items if i.entry_id in chosen for c in i.message.tool_calls} | {
        r.call_id for i in items if i.entry_id in chosen for r in i.message.tool_results}
    for item in items:
        if any(c.id in call_ids for c in item.message.tool_calls) or any(
                r.call_id in call_ids for r in item.message.tool_results):
            chosen.add(item.entry_id)
    return [i for i in items if i.entry_id in chosen]


# --------------------------------------------------------------------------------------------------
# Running it


def compact_view(
    items: Sequence[Item],
    policy: CompactionPolicy,
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
    checkpoint: tuple[str, str] | None = None,
) -> Outcome:
    """Plan, summarize, guard. Raises `CompactionFailed` (history untouched) when there is nothing
    to summarize, the summarizer fails, or the result would not shrink the view enough."""
    from ctxwin.compaction.extractive import ExtractiveSummarizer
    from ctxwin.compaction.identifiers import guard

    before = ctx.system_tokens + total_tokens(items)
    plan = plan_cut(items, policy, ctx, pins, factor)
    if checkpoint is not None and policy.strategy == "checkpoint":
        plan = checkpoint_cut(items, checkpoint[0], pins) or plan
    if not plan.summarized:
        raise CompactionFailed("nothing to compact: the recent history alone is within the kept budget", before)
    if memory_flush is not None and trigger != "manual":
        memory_flush([i.message for i in plan.summarized])
    summarizer = summarizer or ExtractiveSummarizer()
    budget = summary_budget(policy, ctx.window, factor)
    summarizer_budget = max(int(budget * (1 - GUARD_SHARE - INDEX_SHARE)), 1)
    span_messages = [i.message for i in plan.span]
    prefix_messages = [i.message for i in plan.prefix]
    try:
        if checkpoint is not None and policy.strategy == "checkpoint" and plan.first_kept_id != checkpoint[0] \
                and any(i.entry_id == checkpoint[0] for i in plan.span):
            # The agent's own summary stands for the span (Alyx); the guard and the index still apply.
            summary = Summary(text=checkpoint[1], summarizer="agent checkpoint",
                              tokens=ctx.counter.count_text(checkpoint[1]))
            if summary.tokens > summarizer_budget:
                summary = summarizer.summarize([Message("assistant", (Text(checkpoint[1]),))], previous=None,
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
    summary = guard(summary, span_messages + prefix_messages, ctx.counter, int(budget * (1 - INDEX_SHARE)))
    summary = with_recall_index(summary, plan.summarized, ctx, budget, originals)
    covered = tuple(dict.fromkeys([*(previous.covered_ids if previous else ()),
                                   *(i.entry_id for i in plan.summarized)]))
    summary = replace(summary, covered_ids=covered)
    attachments = restore_files(plan, policy, ctx) if policy.restore_recent_files else []

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
    return Outcome(policy.strategy, summary, plan, before, after, reason, attachments, details)


def recall_index(items: Sequence[Item], ctx: StageContext, budget_tokens: int,
                 originals: Mapping[str, Message] | None = None) -> list[str]:
    """Index lines for the largest outputs and call inputs of the summarized span (largest first,
    listed in conversation order) within `budget_tokens`: what each was and the ref that returns
    it byte for byte. Sizes are those of the messages as logged (`originals`, by entry id): an output
    already masked in the view is still worth indexing."""
    from ctxwin.compaction.identifiers import call_arguments
    from ctxwin.pipeline.view import describe_call, recall_ref

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


def checkpoint_cut(items: Sequence[Item], reply_id: str, pins: set[str]) -> CutPlan | None:
    """Everything up to and including the agent's checkpoint reply is summarized (by that reply);
    the history after it is kept, from the first cut point after the reply (its tool results go with
    it, into the summarized span)."""
    start = first_content(items)
    position = next((i for i, item in enumerate(items) if item.entry_id == reply_id), None)
    if position is None:
        return None
    cut = next((i for i in range(position + 1, len(items)) if is_cut_point(items, i)), len(items))
    pinned = pinned_items(items[start:cut], pins)
    held = {i.entry_id for i in pinned}
    span = [i for i in items[start:cut] if not i.synthetic and i.entry_id not in held]
    return CutPlan(span, [], list(items[cut:]), pinned)


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


def restore_files(plan: CutPlan, policy: CompactionPolicy, ctx: StageContext) -> list[dict[str, str]]:
    """Claude Code's re-attachment: the most recently read files of the summarized span (as last
    read), each within `restore_file_tokens`, all within `restore_total_tokens`, skipping files the
    kept tail reads again."""
    from ctxwin.compaction.identifiers import call_arguments, call_path, tool_kind
    from ctxwin.pipeline.cut import head_tail

    kept_paths = set()
    for item in plan.kept:
        for call in item.message.tool_calls:
            path = call_path(call_arguments(call))
            if path:
                kept_paths.add(path)
    latest: dict[str, str] = {}
    for item in plan.summarized:
        for block in item.message.blocks:
            if not isinstance(block, ToolResult) or block.is_error:
                continue
            call = ctx.calls.get(block.call_id)
            if call is None or tool_kind(call.name) not in ("read", "read_file", "view", "open_file", "cat"):
                continue
            path = call_path(call_arguments(call))
            if path and path not in kept_paths:
                latest.pop(path, None)
                latest[path] = block.text
    out: list[dict[str, str]] = []
    total = 0
    total_budget = min(policy.restore_total_tokens, int(ctx.window * RESTORE_WINDOW_SHARE))
    file_budget = min(policy.restore_file_tokens, total_budget)
    for path in reversed(list(latest)):
        if len(out) >= policy.restore_recent_files:
            break
        text = latest[path]
        tokens = ctx.counter.count_text(text)
        if tokens > file_budget:
            chars = int(len(text) * file_budget / tokens)
            text = head_tail(text, chars, 0).head + f"\n[... truncated; read {path} for the rest]"
            tokens = ctx.counter.count_text(text)
        if total + tokens > total_budget:
            break
        total += tokens
        out.append({"path": path, "text": text})
    return out


SUMMARY_PREAMBLE = "The conversation history before this point was compacted into the following summary:"


def summary_message(text: str) -> Message:
    """The user message that carries a compaction summary into the view (Pi's framing)."""
    return Message("user", (Text(f"{SUMMARY_PREAMBLE}\n\n<summary>\n{text}\n</summary>"),), id="summary")


def attachment_message(attachment: dict[str, str]) -> Message:
    return Message("user", (Text(f"[Re-attached after compaction: {attachment['path']}, as last read]\n"
                                 f"{attachment['text']}"),), id="attachment")
