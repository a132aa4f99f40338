"""Claude Code's compaction: everything is summarized, then the most recently read files come back
as attachments after the summary, each and all within a token budget."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwin.compaction.cuts import CutPlan, plan_at
from ctxwin.compaction.identifiers import READ_TOOLS, call_arguments, call_path, tool_kind
from ctxwin.compaction.strategy import AgentSummary, Strategy
from ctxwin.messages import ToolResult
from ctxwin.pipeline.cut import head_tail
from ctxwin.pipeline.view import Item, StageContext
from ctxwin.policies.model import ClaudeCodeCompaction

RESTORE_WINDOW_SHARE = 0.25
"""Re-attached files never take more than this share of the window (Claude Code's 50K is a quarter
of 200K)."""


class ClaudeCodeStrategy(Strategy[ClaudeCodeCompaction]):
    section = ClaudeCodeCompaction

    def plan(self, items: Sequence[Item], policy: ClaudeCodeCompaction, ctx: StageContext, pins: set[str],
             factor: float = 1.0, agent_summary: AgentSummary | None = None) -> CutPlan:
        return plan_at(items, len(items), pins, split_turns=False)

    def attachments(self, plan: CutPlan, policy: ClaudeCodeCompaction, ctx: StageContext) -> list[dict[str, str]]:
        return restore_files(plan, policy, ctx) if policy.restore_recent_files else []


def restore_files(plan: CutPlan, policy: ClaudeCodeCompaction, ctx: StageContext) -> list[dict[str, str]]:
    """The most recently read files of the summarized span (as last read), each within
    `restore_file_tokens`, all within `restore_total_tokens`, skipping files the kept tail reads again."""
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
            found = ctx.calls.get(block.call_id)
            if found is None or tool_kind(found.name) not in READ_TOOLS:
                continue
            path = call_path(call_arguments(found))
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
