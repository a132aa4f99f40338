"""What a compaction strategy is.

A strategy decides (purely) when a compaction is due and where the view is cut; its optional hooks
let it take part in the rest: files to re-attach after the summary (Claude Code), a summary that
stands for the span without a summarizer (Alyx's checkpoint: the agent wrote one), a message asking
the agent for one. Each strategy is typed against its own policy section (`section`), from which it
takes its name; `compaction.strategies` is the registry, derived from the policy's
(`ctxwin.policies.COMPACTION_SECTIONS`). `compact.compact_view` runs them; the engine only ever talks
to this interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from ctxwin.compaction.cuts import CutPlan
from ctxwin.messages import Message
from ctxwin.pipeline.view import Item, StageContext
from ctxwin.policies.model import CompactionSection, section_name

BY_TURNS = ("turns", "max_turns")
"""Triggers that bound turns, not tokens: their compactions count as a gain whatever they save."""

MIN_THRESHOLD_SHARE = 0.5
"""The trigger never sits below this share of the window, whatever the reserve (a reserve larger than
a small window would otherwise compact on every call)."""
SUMMARY_WINDOW_SHARE = 0.2
"""A summary never gets more than this share of the window, whatever the policy's summary budget
(a 20,000-token Claude Code summary cannot go into an 8,000-token window)."""

P = TypeVar("P", bound=CompactionSection)


@dataclass(frozen=True)
class AgentSummary:
    """A summary the agent wrote itself (Alyx's checkpoint): the reply entry that holds it, and its text."""

    entry_id: str
    text: str


def threshold(window: int, policy: CompactionSection) -> int:
    """Tokens above which a compaction is due (model tokens)."""
    if policy.trigger_ratio is not None:
        return int(window * policy.trigger_ratio)
    return max(window - policy.reserve_tokens, int(window * MIN_THRESHOLD_SHARE))


def summary_budget(policy: CompactionSection, window: int, factor: float = 1.0) -> int:
    """Tokens (counter units) a summary may use."""
    return max(int(min(policy.summary_max_tokens, window * SUMMARY_WINDOW_SHARE) / factor), 1)


class Strategy(Generic[P]):
    """The interface, with the hooks' defaults. `policy` is always the strategy's own section
    (`section`); `name` is that section's strategy name."""

    section: ClassVar[type[CompactionSection]]
    name: ClassVar[str]
    split_turns: ClassVar[bool] = False
    """Whether a turn the cut falls inside is summarized apart (Pi's turn-prefix summary)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "section" in cls.__dict__:
            cls.name = section_name(cls.section)

    def threshold(self, window: int, policy: P) -> int:
        return threshold(window, policy)

    def summary_tokens(self, policy: P, ctx: StageContext, factor: float = 1.0) -> int:
        """Tokens (counter units) this strategy's summary may use here."""
        return summary_budget(policy, ctx.window, factor)

    def due(self, tokens: int, window: int, policy: P, factor: float = 1.0, turns: int = 0) -> str | None:
        """Which trigger a view of `tokens` (counter units, system included) holding `turns` turns has
        passed, if any (the first reached wins): `threshold` (the window's), `tokens` (the absolute
        token trigger), `turns` (the turn trigger), or `max_turns` (the cap plus a `summary_after`
        batch)."""
        model_tokens = tokens * factor
        if model_tokens > self.threshold(window, policy):
            return "threshold"
        if policy.trigger_tokens is not None and model_tokens > policy.trigger_tokens:
            return "tokens"
        if policy.trigger_turns is not None and turns > policy.trigger_turns:
            return "turns"
        if policy.max_turns is not None and policy.summary_after is not None \
                and turns > policy.max_turns + policy.summary_after:
            return "max_turns"
        return None

    def plan(self, items: Sequence[Item], policy: P, ctx: StageContext, pins: set[str],
             factor: float = 1.0, agent_summary: AgentSummary | None = None) -> CutPlan:
        raise NotImplementedError

    def attachments(self, plan: CutPlan, policy: P, ctx: StageContext) -> list[dict[str, str]]:
        """Messages re-attached after the summary (`{"path", "text"}`); none by default."""
        return []

    # The agent-written summary protocol (only the checkpoint strategy takes part).

    def agent_summary_in(self, entry_id: str, message: Message) -> AgentSummary | None:
        """The summary an appended message carries for this strategy, if any."""
        return None

    def is_summary_request(self, message: Message) -> bool:
        """Whether `message` is this strategy's request for an agent-written summary."""
        return False

    def summary_request(self, tokens: int, window: int, policy: P, factor: float) -> Message | None:
        """A message asking the agent for its own summary now, or None."""
        return None

    def written_summary(self, plan: CutPlan, agent_summary: AgentSummary | None) -> str | None:
        """A summary that stands for `plan`'s span as it is, without a summarizer (the agent's own),
        or None: the summarizer writes one."""
        return None
