"""Session state, derived from the log: one reducer, used both when a session is opened and on every
live append, so a resumed engine and a running one can never disagree.

`apply(state, entry_id, entry, ...)` folds one typed log entry into the state: messages become
records (with their token count), decisions change how a record renders from then on, compactions
say where the view starts and what summary stands for the rest, pins, labels, calibration and
recoveries are remembered. Nothing else changes derived state; what only caches work (the view,
the repair of its prefix) lives in `cache`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxwin.compaction.base import Summary
from ctxwin.compaction.compact import attachment_message, summary_from_entry
from ctxwin.compaction.strategy import AgentSummary, Strategy
from ctxwin.messages import Message, ToolCall
from ctxwin.pipeline.view import Item
from ctxwin.policies.model import Policy
from ctxwin.store.entries import (
    CalibrationEntry,
    CompactionEntry,
    DecisionEntry,
    LabelEntry,
    LogEntry,
    MessageEntry,
    PinEntry,
    RecoveryEntry,
)
from ctxwin.tokens import Calibrator
from ctxwin.tokens.base import TokenCounter

from .budget import Budget

EVERYTHING = -1
"""`SessionState.changed_from` when the whole view must be rebuilt (the summary, a pin)."""


@dataclass(slots=True)
class Record:
    """One message entry of the current branch and how it renders now (`item` None: left the view)."""

    entry_id: str
    message: Message
    item: Item | None


@dataclass
class CompactionState:
    entry_id: str
    summary: Summary
    first_kept: int  # index into records
    pinned: tuple[str, ...] = ()
    attachments: tuple[Message, ...] = ()
    overrides: dict[str, Message] = field(default_factory=dict)  # later decisions about lead items

    def lead_ids(self) -> list[str]:
        """Ids of the summary item and of each attachment item (decisions refer to them)."""
        return [self.entry_id, *(f"{self.entry_id}#attachment{n}" for n in range(len(self.attachments)))]


@dataclass
class SessionState:
    budget: Budget
    calibrator: Calibrator = field(default_factory=Calibrator)
    records: list[Record] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    calls: dict[str, ToolCall] = field(default_factory=dict)
    system_parts: list[str] = field(default_factory=list)
    compaction: CompactionState | None = None
    pins: set[str] = field(default_factory=set)
    labels: dict[str, str | None] = field(default_factory=dict)
    history: list[tuple[str, str, bool]] = field(default_factory=list)
    """Every message entry of the branch, system ones included, in order: (entry id, content key,
    whether ctxwin wrote it itself); what `sync` matches a resent history against."""
    agent_summary: AgentSummary | None = None  # the agent's own summary since the last compaction
    summary_requested: bool = False  # the agent was asked for its summary and has not answered
    changed_from: int | None = None
    """The first record whose rendering changed since the view was last built (None: nothing did)."""

    def changed(self, position: int) -> None:
        self.changed_from = position if self.changed_from is None else min(self.changed_from, position)


def apply(state: SessionState, entry_id: str, entry: LogEntry, *, counter: TokenCounter, strategy: Strategy[Any],
          policy: Policy) -> None:
    """Fold one log entry into `state`."""
    match entry:
        case MessageEntry(message=message):
            _add_message(state, entry_id, message, counter, strategy)
        case DecisionEntry():
            for target, rendered in entry.renders.items():
                render(state, target, rendered, entry.stage, counter)
        case CompactionEntry():
            _apply_compaction(state, entry_id, entry)
        case PinEntry(target=target):
            state.pins.add(target)
            state.changed(EVERYTHING)
        case LabelEntry(label=label, target=target):
            state.labels[label] = target
        case CalibrationEntry(state=calibration):
            state.calibrator = Calibrator.from_dict(calibration)
        case RecoveryEntry():
            state.budget = state.budget.restored(policy, entry.window, entry.max_output, entry.budget_scale)
        case _:
            pass  # other kinds do not change what the model sees


def render(state: SessionState, entry_id: str, message: Message | None, stage: str, counter: TokenCounter) -> None:
    """From now on `entry_id` renders as `message` (None: it leaves the view)."""
    position = state.index.get(entry_id)
    if position is None:
        compaction = state.compaction
        if compaction is not None and entry_id in compaction.lead_ids() and message is not None:
            compaction.overrides[entry_id] = message  # fit cut the summary or an attachment
        state.changed(EVERYTHING)
        return
    state.changed(position)
    record = state.records[position]
    record.item = None if message is None else Item(entry_id, message, counter.count_message(message),
                                                    rendered_by=stage)


def _add_message(state: SessionState, entry_id: str, message: Message, counter: TokenCounter,
                 strategy: Strategy[Any]) -> None:
    state.history.append((entry_id, message.content_key, "ctxwin" in message.meta))
    if message.role == "system":
        state.system_parts.append(message.text)
        return
    for call in message.tool_calls:
        state.calls[call.id] = call
    state.index[entry_id] = len(state.records)
    state.records.append(Record(entry_id, message, Item(entry_id, message, counter.count_message(message))))
    if strategy.is_summary_request(message):
        state.summary_requested = True
        return
    found = strategy.agent_summary_in(entry_id, message)
    if found is not None:
        state.agent_summary = found
        state.summary_requested = False


def _apply_compaction(state: SessionState, entry_id: str, entry: CompactionEntry) -> None:
    first = state.index.get(entry.first_kept_id, len(state.records)) if entry.first_kept_id else len(state.records)
    state.compaction = CompactionState(entry_id, summary_from_entry(entry), first, entry.pinned_ids,
                                       tuple(attachment_message(a) for a in entry.attachments))
    state.changed(EVERYTHING)
    state.agent_summary = None  # an agent's summary serves one compaction
    state.summary_requested = False
