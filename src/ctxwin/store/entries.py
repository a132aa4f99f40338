"""The session log's entries as a closed set of types (Pi's typed session entries).

Every reader and writer of the log goes through these: `parse(kind, payload)` turns a stored entry
into its type, `record.kind` and `record.to_payload()` are what gets stored. Nothing else reads a
payload dict by hand, and a new kind of entry is one new class here.

Versions: the payloads written today are version 1 and carry no version field (so sessions written
before these types existed read back unchanged); a later layout adds `"v": 2` and a branch in its
`from_payload`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol

from ctxwin.errors import EntryFormatError
from ctxwin.messages import Message
from ctxwin.store.base import EntryKind


@dataclass(frozen=True)
class MessageEntry:
    """A message of the conversation, as it happened (the payload is `Message.to_dict()`)."""

    kind: ClassVar[EntryKind] = "message"
    message: Message

    def to_payload(self) -> dict[str, Any]:
        return self.message.to_dict()

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> MessageEntry:
        return cls(Message.from_dict(dict(payload)))


@dataclass(frozen=True)
class DecisionEntry:
    """A request-time decision of one stage run: from now on each entry id renders as the message
    given (None: it leaves the view). Replayed on every later request, so the prefix stays stable."""

    kind: ClassVar[EntryKind] = "decision"
    stage: str
    renders: dict[str, Message | None]
    events: list[dict[str, Any]] = field(default_factory=list)

    def to_payload(self) -> dict[str, Any]:
        return {"stage": self.stage,
                "renders": {k: None if m is None else m.to_dict() for k, m in self.renders.items()},
                "events": self.events}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> DecisionEntry:
        renders = {str(k): None if v is None else Message.from_dict(v) for k, v in payload["renders"].items()}
        return cls(str(payload["stage"]), renders, list(payload.get("events", ())))


@dataclass(frozen=True)
class CompactionEntry:
    """A compaction: the summary that stands for `covered_ids`, where the kept history starts
    (`first_kept_id`), and what is needed to audit it and merge the next summary into it."""

    kind: ClassVar[EntryKind] = "compaction"
    summary: str
    first_kept_id: str | None
    tokens_before: int
    tokens_after: int
    strategy: str
    covered_ids: tuple[str, ...] = ()
    pinned_ids: tuple[str, ...] = ()
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()
    sections: dict[str, list[str]] = field(default_factory=dict)
    summary_tokens: int = 0
    summarizer: str = ""
    attachments: tuple[dict[str, str], ...] = ()
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    summarizer_state: dict[str, Any] = field(default_factory=dict)
    """The summarizer's own merge state (the extractive summarizer keeps everything it read here,
    untrimmed), so the next compaction merges exactly, even after a reopen."""

    def to_payload(self) -> dict[str, Any]:
        return {
            "summary": self.summary,
            "first_kept_id": self.first_kept_id,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "strategy": self.strategy,
            "covered_ids": list(self.covered_ids),
            "pinned_ids": list(self.pinned_ids),
            "read_files": list(self.read_files),
            "modified_files": list(self.modified_files),
            "identifiers": list(self.identifiers),
            "sections": self.sections,
            "summary_tokens": self.summary_tokens,
            "summarizer": self.summarizer,
            "attachments": list(self.attachments),
            "reason": self.reason,
            "details": self.details,
            "summarizer_state": self.summarizer_state,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> CompactionEntry:
        return cls(
            summary=str(payload["summary"]),
            first_kept_id=payload.get("first_kept_id"),
            tokens_before=int(payload.get("tokens_before", 0)),
            tokens_after=int(payload.get("tokens_after", 0)),
            strategy=str(payload.get("strategy", "")),
            covered_ids=tuple(payload.get("covered_ids", ())),
            pinned_ids=tuple(payload.get("pinned_ids", ())),
            read_files=tuple(payload.get("read_files", ())),
            modified_files=tuple(payload.get("modified_files", ())),
            identifiers=tuple(payload.get("identifiers", ())),
            sections={str(k): list(v) for k, v in payload.get("sections", {}).items()},
            summary_tokens=int(payload.get("summary_tokens", 0)),
            summarizer=str(payload.get("summarizer", "")),
            attachments=tuple(dict(a) for a in payload.get("attachments", ())),
            reason=str(payload.get("reason", "")),
            details=dict(payload.get("details", {})),
            summarizer_state=dict(payload.get("summarizer_state", {})),
        )


@dataclass(frozen=True)
class PinEntry:
    """The user pinned a message entry: never summarized away, masked or dropped."""

    kind: ClassVar[EntryKind] = "pin"
    target: str

    def to_payload(self) -> dict[str, Any]:
        return {"target": self.target}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> PinEntry:
        return cls(str(payload["target"]))


@dataclass(frozen=True)
class LabelEntry:
    """A name for an entry of the log (a restore point)."""

    kind: ClassVar[EntryKind] = "label"
    label: str
    target: str | None

    def to_payload(self) -> dict[str, Any]:
        return {"label": self.label, "target": self.target}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> LabelEntry:
        return cls(str(payload["label"]), payload.get("target"))


@dataclass(frozen=True)
class ModelChangeEntry:
    """From here on the session talks to `model` (`source`: who said so, e.g. `import` for the model a
    transcript recorded)."""

    kind: ClassVar[EntryKind] = "model_change"
    model: str
    source: str = ""

    def to_payload(self) -> dict[str, Any]:
        return {"model": self.model, "source": self.source}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> ModelChangeEntry:
        return cls(str(payload["model"]), str(payload.get("source") or ""))


@dataclass(frozen=True)
class RewindEntry:
    """The session went back to restore point `mark` (entry `target`): this entry is the first of the
    branch that continues from there, so a reopened session resumes on it."""

    kind: ClassVar[EntryKind] = "custom"
    type: ClassVar[str] = "rewind"
    mark: str
    target: str | None

    def to_payload(self) -> dict[str, Any]:
        return {"type": self.type, "mark": self.mark, "target": self.target}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> RewindEntry:
        return cls(str(payload["mark"]), payload.get("target"))


@dataclass(frozen=True)
class CalibrationEntry:
    """The token calibration learned from the provider's usage numbers (the calibrator's state)."""

    kind: ClassVar[EntryKind] = "custom"
    type: ClassVar[str] = "calibration"
    state: dict[str, Any]

    def to_payload(self) -> dict[str, Any]:
        return {"type": self.type, "state": self.state}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> CalibrationEntry:
        return cls(dict(payload["state"]))


@dataclass(frozen=True)
class RecoveryEntry:
    """An overflow recovery: what the provider's error taught (its real window, its count) and the
    budget the engine keeps from then on."""

    kind: ClassVar[EntryKind] = "custom"
    type: ClassVar[str] = "recovery"
    window: int
    max_output: int
    budget_scale: float
    provider: str = ""
    observed_tokens: int | None = None
    limit_tokens: int | None = None

    def to_payload(self) -> dict[str, Any]:
        return {"type": self.type, "window": self.window, "max_output": self.max_output,
                "budget_scale": self.budget_scale, "provider": self.provider,
                "observed_tokens": self.observed_tokens, "limit_tokens": self.limit_tokens}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> RecoveryEntry:
        return cls(int(payload.get("window") or 0), int(payload.get("max_output") or 0),
                   float(payload.get("budget_scale", 1.0)), str(payload.get("provider") or ""),
                   payload.get("observed_tokens"), payload.get("limit_tokens"))


@dataclass(frozen=True)
class ProxyRequestEntry:
    """One request the proxy handled for this session: what the agent sent, what went upstream, and
    how it went. Written after the upstream answered (or failed), so the dashboard and the benchmarks
    read the proxy's work from the log the session already has, whichever worker served it."""

    kind: ClassVar[EntryKind] = "custom"
    type: ClassVar[str] = "proxy_request"
    api: str  # "anthropic" | "openai-chat" | "openai-responses"
    model: str
    status: int  # the status the caller saw
    tokens_received: int  # the history the agent sent, counted as ctxwin counts
    tokens_forwarded: int  # the request that went upstream
    cache_prefix_reuse: float  # share of the forwarded tokens that repeat the previous forwarded prefix
    compactions: int = 0
    recoveries: int = 0
    recall_calls: int = 0  # ctxwin_recall calls the proxy answered itself
    invalid_forwarded: bool = False  # the upstream refused the request as malformed
    streamed: bool = False
    input_tokens: int | None = None  # usage the provider reported
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    added_ms: float = 0.0  # time spent in the proxy, upstream time excluded
    upstream_ms: float = 0.0

    def to_payload(self) -> dict[str, Any]:
        return {"type": self.type, **{name: getattr(self, name) for name in _PROXY_FIELDS}}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> ProxyRequestEntry:
        return cls(**{name: payload[name] for name in _PROXY_FIELDS if name in payload})


_PROXY_FIELDS = ("api", "model", "status", "tokens_received", "tokens_forwarded", "cache_prefix_reuse",
                 "compactions", "recoveries", "recall_calls", "invalid_forwarded", "streamed", "input_tokens",
                 "output_tokens", "cache_read_tokens", "cache_write_tokens", "added_ms", "upstream_ms")


@dataclass(frozen=True)
class CustomEntry:
    """Anything else: an application's own record (`type` names it), or a `custom` type this release
    does not know. Kept and passed through, never interpreted."""

    kind: EntryKind
    payload: dict[str, Any]

    def to_payload(self) -> dict[str, Any]:
        return self.payload


class KnownEntry(Protocol):
    """What every typed entry class above offers: the kind it is stored as and its payload both ways."""

    kind: ClassVar[EntryKind]

    def to_payload(self) -> dict[str, Any]: ...

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> LogEntry: ...


class KnownCustomEntry(KnownEntry, Protocol):
    """A typed entry stored as a `custom` one: its payload's `type` names it."""

    type: ClassVar[str]


LogEntry = (MessageEntry | DecisionEntry | CompactionEntry | PinEntry | LabelEntry | ModelChangeEntry | RewindEntry
            | CalibrationEntry | RecoveryEntry | ProxyRequestEntry | CustomEntry)
_CUSTOM_TYPES: tuple[type[KnownCustomEntry], ...] = (RewindEntry, CalibrationEntry, RecoveryEntry, ProxyRequestEntry)
ENTRY_TYPES: tuple[type[KnownEntry], ...] = (MessageEntry, DecisionEntry, CompactionEntry, PinEntry, LabelEntry,
                                             ModelChangeEntry, *_CUSTOM_TYPES)
KINDS: tuple[str, ...] = tuple(dict.fromkeys(t.kind for t in ENTRY_TYPES))
"""Every entry kind a log may hold."""
_BY_KIND: dict[str, type[KnownEntry]] = {t.kind: t for t in ENTRY_TYPES if t.kind != "custom"}
_BY_CUSTOM_TYPE: dict[str, type[KnownCustomEntry]] = {t.type: t for t in _CUSTOM_TYPES}


def parse(kind: EntryKind, payload: Mapping[str, Any], *, entry_id: str = "?") -> LogEntry:
    """The typed form of a stored entry. Raises `EntryFormatError` naming the entry when the payload
    does not have its kind's shape."""
    try:
        if kind == "custom":
            custom = _BY_CUSTOM_TYPE.get(str(payload.get("type")))
            return custom.from_payload(payload) if custom is not None else CustomEntry(kind, dict(payload))
        known = _BY_KIND.get(kind)
        return known.from_payload(payload) if known is not None else CustomEntry(kind, dict(payload))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise EntryFormatError(f"log entry {entry_id} ({kind}) is malformed: {type(error).__name__}: {error}",
                               "the entry is kept in the log; repair or remove it by hand") from None


def epoch(timestamp: Any) -> float | None:
    """Seconds since the epoch from a recorded timestamp: ISO 8601 text or epoch milliseconds."""
    if isinstance(timestamp, int | float) and not isinstance(timestamp, bool):
        return timestamp / 1000 if timestamp > 10**11 else float(timestamp)
    if isinstance(timestamp, str):
        try:
            return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None
