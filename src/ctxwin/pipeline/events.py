"""What the engine did, as a closed set of frozen event types (one per kind).

Every event says which log entries it touched, the tokens before and after, and why; its type says
what it was. Questions about an event ("was this a compaction?") are answered here, once, by its
type: `is_compaction` (a compaction that happened: not a failure, not a checkpoint request),
`is_compaction_failure`, `is_checkpoint_request`. Consumers never compare `stage`/`action` strings.

`to_dict()` is the JSON every reader of ctxwin's output knows (`stage`, `action`, `entry_ids`,
`tokens_before`, `tokens_after`, `reason`, `breaks_prefix`, and `details` when the kind carries
any); `from_dict()` reads it back into its type (the decisions in the log store events that way).
A new kind of event is one new class here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from ctxwin.errors import EntryFormatError


@dataclass(frozen=True, slots=True)
class Event:
    """What a stage (or the engine around it) did. The base of the closed set: never built itself.

    `breaks_prefix` is true for the kinds that change content the previous request had already sent
    (a prompt-cache miss from that point on); stages that only touch new messages, or only append,
    emit kinds where it is false."""

    stage: ClassVar[str] = ""
    """The stage (or part of the engine) that acted."""
    kind_action: ClassVar[str] = ""
    """What it did, as the JSON's `action` says it."""
    breaks_prefix: ClassVar[bool] = False
    is_compaction: ClassVar[bool] = False
    """A compaction that happened (a summary now stands for part of the history)."""
    is_compaction_failure: ClassVar[bool] = False
    """A compaction that was due and failed (history kept as it was)."""
    is_checkpoint_request: ClassVar[bool] = False
    """The agent was asked to write its own checkpoint (the `checkpoint` strategy's first step)."""
    is_repair: ClassVar[bool] = False
    """The pairing repair changed the view (orphan results dropped, unanswered calls answered)."""

    entry_ids: tuple[str, ...]
    tokens_before: int
    tokens_after: int
    reason: str

    def __post_init__(self) -> None:
        if not type(self).stage:
            raise TypeError("Event is the base of the event types; build one of its kinds (e.g. Masked)")

    @property
    def action(self) -> str:
        return self.kind_action

    @property
    def details(self) -> Mapping[str, Any]:
        """The numbers and names this kind carries besides the common fields (its JSON `details`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _COMMON}

    @property
    def saved(self) -> int:
        return self.tokens_before - self.tokens_after

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "stage": self.stage,
            "action": self.action,
            "entry_ids": list(self.entry_ids),
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "reason": self.reason,
            "breaks_prefix": self.breaks_prefix,
        }
        details = self.details
        if details:
            out["details"] = dict(details)
        return out

    @classmethod
    def _from(cls, data: Mapping[str, Any]) -> Event:
        details = data.get("details") or {}
        extra = {f.name: tuple(v) if isinstance(v := details[f.name], list) else v
                 for f in fields(cls) if f.name not in _COMMON and f.name in details}
        return cls(tuple(data.get("entry_ids") or ()), int(data.get("tokens_before") or 0),
                   int(data.get("tokens_after") or 0), str(data.get("reason") or ""), **extra)


_COMMON = frozenset({"entry_ids", "tokens_before", "tokens_after", "reason"})


# ------------------------------------------------------------------------------------------ stages


@dataclass(frozen=True, slots=True)
class SystemChanged(Event):
    """The system prompt or the tool schemas differ from the previous request's."""

    stage = "bootstrap"
    kind_action = "system_changed"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class ResultCapped(Event):
    """A tool result over the result budget was cut to its head and tail."""

    stage = "result_budget"
    kind_action = "cap"


@dataclass(frozen=True, slots=True)
class Spilled(Event):
    """Large results went to the blob store; the view keeps a preview and a handle."""

    stage = "spill"
    kind_action = "spill"


@dataclass(frozen=True, slots=True)
class DedupStubbed(Event):
    """An identical output of an identical earlier call became a stub pointing at it."""

    stage = "dedup"
    kind_action = "stub"


@dataclass(frozen=True, slots=True)
class DedupSuperseded(Event):
    """An idempotent call was repeated: the older output became a stub."""

    stage = "dedup"
    kind_action = "supersede"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class Masked(Event):
    """Old tool outputs replaced by placeholders (a batch)."""

    stage = "mask"
    kind_action = "mask"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class SoftTrimmed(Event):
    """OpenClaw's soft trim: old tool outputs cut to their head and tail."""

    stage = "prune"
    kind_action = "soft_trim"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class HardCleared(Event):
    """OpenClaw's hard clear: old tool outputs replaced by a placeholder."""

    stage = "prune"
    kind_action = "hard_clear"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class TurnsDropped(Event):
    """Turns past the policy's `max_turns` left the view."""

    stage = "turns"
    kind_action = "drop_turns"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class Compacted(Event):
    """A compaction: a summary now stands for `entry_ids`. `strategy` is the one that wrote it (the
    JSON's `action`); `details` what it reports (trigger, summary tokens, identifier guard ...)."""

    stage = "compaction"
    breaks_prefix = True
    is_compaction = True

    strategy: str = field(kw_only=True)
    details: Mapping[str, Any] = field(default_factory=dict, kw_only=True)

    @property
    def action(self) -> str:
        return self.strategy

    @classmethod
    def _from(cls, data: Mapping[str, Any]) -> Event:
        return cls(tuple(data.get("entry_ids") or ()), int(data.get("tokens_before") or 0),
                   int(data.get("tokens_after") or 0), str(data.get("reason") or ""),
                   strategy=str(data.get("action") or ""), details=dict(data.get("details") or {}))


@dataclass(frozen=True, slots=True)
class CompactionFailure(Event):
    """A compaction was due and its summary failed; the history stays as it was."""

    stage = "compaction"
    kind_action = "failed"
    is_compaction_failure = True

    consecutive_failures: int = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class CheckpointRequested(Event):
    """The view reached the checkpoint mark: the agent is asked to write its own state summary
    (`entry_ids`: the request appended to the log). Not a compaction: that comes after."""

    stage = "compaction"
    kind_action = "checkpoint_request"
    is_checkpoint_request = True


@dataclass(frozen=True, slots=True)
class UnansweredCollapsed(Event):
    """A turn of unanswered tool calls too large to send was collapsed."""

    stage = "fit"
    kind_action = "collapse_unanswered"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class RoundsDropped(Event):
    """The oldest API rounds left the view (head-drop) to fit the budget."""

    stage = "fit"
    kind_action = "drop_rounds"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class ResultsClamped(Event):
    """Tool results clamped to the fit policy's characters to fit the budget."""

    stage = "fit"
    kind_action = "clamp_results"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class MiddleTruncated(Event):
    """The largest messages cut to their head and tail to fit the budget."""

    stage = "fit"
    kind_action = "middle_truncate"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class Repaired(Event):
    """The pairing repair fixed what a cut left behind (`changes`: one record per fix)."""

    stage = "repair"
    kind_action = "repair"
    is_repair = True

    changes: tuple[Mapping[str, Any], ...] = field(kw_only=True)

    @property
    def details(self) -> Mapping[str, Any]:
        return {"changes": [dict(c) for c in self.changes]}


# ------------------------------------------------------------------------------------------ the engine


@dataclass(frozen=True, slots=True)
class OverflowRecovery(Event):
    """The provider said the request overflowed; the engine shrinks the budget and rebuilds."""

    stage = "recovery"
    kind_action = "overflow"


@dataclass(frozen=True, slots=True)
class BranchSwitched(Event):
    """A resent history extends another branch of the session: continued there."""

    stage = "session"
    kind_action = "switched"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class Branched(Event):
    """A resent history no longer extends the stored one: continued on a new branch."""

    stage = "session"
    kind_action = "branched"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class Rewound(Event):
    """The session went back to a restore point."""

    stage = "session"
    kind_action = "rewound"
    breaks_prefix = True


@dataclass(frozen=True, slots=True)
class PolicyRejected(Event):
    """An edit of the live policy file was refused; the last good policy stays in force."""

    stage = "policy"
    kind_action = "rejected"


@dataclass(frozen=True, slots=True)
class PolicyReloaded(Event):
    """The live policy file changed and the engine took the new policy."""

    stage = "policy"
    kind_action = "reloaded"


@dataclass(frozen=True, slots=True)
class ObserverFailed(Event):
    """An observer of the engine raised; the request was built and sent as usual."""

    stage = "engine"
    kind_action = "observer_failed"

    observer: str = field(kw_only=True)
    error: str = field(kw_only=True)
    """The exception's type name."""


@dataclass(frozen=True, slots=True)
class StoreDamaged(Event):
    """The session log had damaged entries when it was opened (`problems`: one record each)."""

    stage = "store"
    kind_action = "damaged"

    problems: tuple[Mapping[str, Any], ...] = field(kw_only=True)

    @property
    def details(self) -> Mapping[str, Any]:
        return {"problems": [dict(p) for p in self.problems]}


# ------------------------------------------------------------------------------------------ baselines


@dataclass(frozen=True, slots=True)
class ToolUsesCleared(Event):
    """The ecosystem's context editing (Anthropic's `clear_tool_uses`, LangChain's
    ContextEditingMiddleware) cleared tool results; only the replay's baselines emit it."""

    stage = "context_editing"
    kind_action = "clear_tool_uses"
    breaks_prefix = True

    cleared_tool_uses: int | None = field(default=None, kw_only=True)
    cleared_input_tokens: int | None = field(default=None, kw_only=True)

    @property
    def details(self) -> Mapping[str, Any]:
        if self.cleared_tool_uses is None and self.cleared_input_tokens is None:
            return {}
        return {"cleared_tool_uses": self.cleared_tool_uses, "cleared_input_tokens": self.cleared_input_tokens}


EVENT_TYPES: tuple[type[Event], ...] = (
    SystemChanged, ResultCapped, Spilled, DedupStubbed, DedupSuperseded, Masked, SoftTrimmed, HardCleared,
    TurnsDropped, Compacted, CompactionFailure, CheckpointRequested, UnansweredCollapsed, RoundsDropped,
    ResultsClamped, MiddleTruncated, Repaired, OverflowRecovery, BranchSwitched, Branched, Rewound,
    PolicyRejected, PolicyReloaded, ObserverFailed, StoreDamaged, ToolUsesCleared,
)
"""Every kind of event, the closed set."""

_BY_NAME: dict[tuple[str, str], type[Event]] = {(t.stage, t.kind_action): t for t in EVENT_TYPES if t.kind_action}


def event_type(stage: str, action: str) -> type[Event] | None:
    """The type of the event a JSON (`stage`, `action`) pair names; any action of the compaction
    stage that is not a failure or a checkpoint request is a strategy's compaction. None: not a kind
    of this set."""
    found = _BY_NAME.get((stage, action))
    if found is None and stage == Compacted.stage:
        return Compacted
    return found


def from_dict(data: Mapping[str, Any]) -> Event:
    """An event read back from its `to_dict()` JSON."""
    kind = event_type(str(data.get("stage", "")), str(data.get("action", "")))
    if kind is None:
        raise EntryFormatError(f"unknown event {data.get('stage')!r}/{data.get('action')!r}",
                               "an event's stage and action must name one of ctxwin.pipeline.events.EVENT_TYPES")
    try:
        return kind._from(data)
    except (TypeError, ValueError) as error:
        raise EntryFormatError(f"malformed {kind.__name__} event: {error}",
                               "write events with Event.to_dict()") from None


def kind_of(data: Mapping[str, Any]) -> type[Event]:
    """The type of an event in its JSON form, for readers of dicts (a replay's timeline): ask it
    `kind_of(d).is_compaction`. A pair this set does not know gives the base, for which every
    question is false."""
    return event_type(str(data.get("stage", "")), str(data.get("action", ""))) or Event
