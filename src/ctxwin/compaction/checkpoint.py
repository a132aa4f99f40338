"""Alyx's checkpoint: past a token mark the agent is asked to write its own state summary; the next
compaction lets that summary stand for everything up to the reply (the extractive summarizer stands
in when the agent never answers)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ctxwin.compaction.cuts import CutPlan, is_cut_point, plan_at
from ctxwin.compaction.pi import KeepsRecentStrategy
from ctxwin.compaction.strategy import AgentSummary
from ctxwin.messages import Message, Text
from ctxwin.pipeline.view import Item, StageContext
from ctxwin.policies.model import CheckpointCompaction

TAG = re.compile(r"<checkpoint>(.*?)(?:</checkpoint>|$)", re.S)
SHARE = 0.75
"""Without `checkpoint_tokens`, the agent is asked for its checkpoint at this share of the trigger."""
META = "checkpoint_request"
"""`meta["ctxwin"]` of the user message that asks the agent for its checkpoint."""
REQUEST = (
    "[ctxwin] The context is at {tokens:,} tokens and older history will soon be trimmed. Before anything "
    "else in your next reply, write a state summary of the work so far inside <checkpoint>...</checkpoint>: "
    "the goal and the user's constraints, files read and changed, what is done, what failed and why, what "
    "comes next, and every exact identifier (paths, ids, hashes, URLs, numbers) still needed. It will stand "
    "in for the older history. Then continue the task."
)


def checkpoint_text(message: Message) -> str | None:
    """The state summary an agent wrote into `message` when asked, if any."""
    if message.role != "assistant":
        return None
    found = TAG.search(message.text)
    return found.group(1).strip() if found and found.group(1).strip() else None


def checkpoint_cut(items: Sequence[Item], reply_id: str, pins: set[str]) -> CutPlan | None:
    """Everything up to and including the agent's checkpoint reply is summarized (by that reply);
    the history after it is kept, from the first cut point after the reply (its tool results go with
    it, into the summarized span)."""
    position = next((i for i, item in enumerate(items) if item.entry_id == reply_id), None)
    if position is None:
        return None
    cut = next((i for i in range(position + 1, len(items)) if is_cut_point(items, i)), len(items))
    return plan_at(items, cut, pins, split_turns=False)


def request_message(tokens: int) -> Message:
    """The user message that asks the agent for its checkpoint now (the view at `tokens` model tokens);
    the agent loop's `/checkpoint` sends it too."""
    return Message("user", (Text(REQUEST.format(tokens=tokens)),), meta={"ctxwin": META})


class CheckpointStrategy(KeepsRecentStrategy[CheckpointCompaction]):
    section = CheckpointCompaction

    def plan(self, items: Sequence[Item], policy: CheckpointCompaction, ctx: StageContext, pins: set[str],
             factor: float = 1.0, agent_summary: AgentSummary | None = None) -> CutPlan:
        fallback = super().plan(items, policy, ctx, pins, factor)
        if agent_summary is None:
            return fallback
        return checkpoint_cut(items, agent_summary.entry_id, pins) or fallback

    def agent_summary_in(self, entry_id: str, message: Message) -> AgentSummary | None:
        text = checkpoint_text(message)
        return AgentSummary(entry_id, text) if text is not None else None

    def is_summary_request(self, message: Message) -> bool:
        return message.meta.get("ctxwin") == META

    def summary_request(self, tokens: int, window: int, policy: CheckpointCompaction,
                        factor: float) -> Message | None:
        mark = policy.checkpoint_tokens or int(self.threshold(window, policy) * SHARE)
        if tokens * factor <= mark:
            return None
        return request_message(round(tokens * factor))

    def written_summary(self, plan: CutPlan, agent_summary: AgentSummary | None) -> str | None:
        """The agent's checkpoint stands for the span that ends with its reply (Alyx); a plan that
        keeps the reply, or does not reach it, is summarized as usual."""
        if agent_summary is None or plan.first_kept_id == agent_summary.entry_id:
            return None
        if not any(item.entry_id == agent_summary.entry_id for item in plan.span):
            return None
        return agent_summary.text
