"""The data every pipeline stage reads and returns.

The *view* is the list of messages the model will see, as `Item`s that remember which log entry each
message renders (so anything removed from the view can be found again). A stage is a function
`(items, context) -> StageResult`: the new items, the events that say what it did in numbers, and the
decisions to record in the log so that later requests replay them byte for byte.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, overload

from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.pipeline.events import Event
from ctxwin.store.base import BlobStore
from ctxwin.tokens.base import TokenCounter


@dataclass(frozen=True, slots=True)
class Item:
    """One message of the view. `entry_id` is the log entry it renders (for synthetic messages, such
    as a compaction summary, the entry that made them); `tokens` is its count by the engine's
    counter, before calibration."""

    entry_id: str
    message: Message
    tokens: int
    synthetic: bool = False
    rendered_by: str = ""
    """The stage whose recorded decision this rendering is ("" for the message as logged)."""
    key: str = field(default="", compare=False)
    """The message's content key, taken once here: the engine compares requests by their keys on
    every call."""
    shape: tuple[Any, ...] = field(default=(), compare=False)
    """What validity depends on (role, block kinds, call ids, empty texts), taken once here: a
    placeholder that replaces an output keeps the shape, so the view need not be validated again."""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.message.content_key)
        if not self.shape:
            object.__setattr__(self, "shape", message_shape(self.message))


@dataclass(frozen=True, slots=True)
class Decision:
    """From now on, log entry `entry_id` renders as `message` (`None`: it leaves the view). Recorded
    in the session log; applied before the stages run on every later request."""

    stage: str
    entry_id: str
    message: Message | None


@dataclass(frozen=True, slots=True)
class StageResult:
    items: list[Item]
    events: list[Event] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)


@dataclass
class StageContext:
    """What stages may read besides the view. `budget` is the request's token limit in counter units
    (the window minus the reserve, divided by the calibration factor); `system_tokens` what the system
    prompt and tool schemas already use of it."""

    counter: TokenCounter
    window: int
    budget: int
    system_tokens: int = 0
    now: float | None = None
    last_call_at: float | None = None
    blobs: BlobStore | None = None  # when the session has one
    calls: Mapping[str, ToolCall] = field(default_factory=dict)
    """Every tool call of the session by id (results name their call only by id)."""
    pins: frozenset[str] = frozenset()
    """Entries the user pinned: never summarized, masked or dropped."""

    def count(self, message: Message) -> int:
        return self.counter.count_message(message)


CHARS_PER_TOKEN = 4
"""The anchors' convention for turning token shares of a window into character budgets."""
def message_shape(message: Message) -> tuple[Any, ...]:
    """A message as the pairing validator sees it: equal shapes validate alike."""
    parts: list[Any] = [message.role]
    for block in message.blocks:
        if isinstance(block, Text):
            parts.append(("text", not block.text or block.text.isspace()))
        elif isinstance(block, ToolCall):
            parts.append(("call", block.id))
        elif isinstance(block, ToolResult):
            parts.append(("result", block.call_id, tuple(
                (not p.text or p.text.isspace()) if isinstance(p, Text) else block_shape(p) for p in block.content)))
        else:
            parts.append((block.type, block_shape(block)))
    return tuple(parts)


def block_shape(block: Any) -> Any:
    """Thinking and images: whether the provider takes them back (signature, data) is what counts."""
    if block.type == "thinking":
        return (bool(block.signature), block.redacted, tuple(sorted(block.extra)))
    return (bool(getattr(block, "data", None)), bool(getattr(block, "url", None)))


_TOKENS = attrgetter("tokens")
_SHAPE = attrgetter("shape")
_KEY = attrgetter("key")


def total_tokens(items: Iterable[Item]) -> int:
    return sum(map(_TOKENS, items))  # map + attrgetter: the loop stays in C (this runs on every call)


def keys_of(items: Iterable[Item]) -> list[str]:
    return list(map(_KEY, items))


def shapes_of(items: Iterable[Item]) -> list[tuple[Any, ...]]:
    return list(map(_SHAPE, items))


class MessagesView(Sequence[Message]):
    """The messages of a list of items, read lazily: validation usually looks at a few of them."""

    __slots__ = ("_items",)

    def __init__(self, items: Sequence[Item]) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...

    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [item.message for item in self._items[index]]
        return self._items[index].message


def message_chars(message: Message) -> int:
    """Characters a message carries, the way OpenClaw's pruning measures context."""
    total = 0
    for block in message.blocks:
        if isinstance(block, Text):
            total += len(block.text)
        elif isinstance(block, ToolResult):
            total += sum(len(p.text) if isinstance(p, Text) else 8_000 for p in block.content)
        elif isinstance(block, ToolCall):
            total += len(block.name) + len(str(block.arguments))
        else:
            total += len(getattr(block, "thinking", "")) or 256
    return total


def tool_matches(name: str | None, allow: Sequence[str], deny: Sequence[str]) -> bool:
    """Whether a tool is eligible under allow/deny glob lists (case-insensitive; deny wins)."""
    lowered = (name or "").lower()
    if any(fnmatch.fnmatchcase(lowered, pattern.lower()) for pattern in deny):
        return False
    return not allow or any(fnmatch.fnmatchcase(lowered, pattern.lower()) for pattern in allow)


def with_results(message: Message, results: dict[int, ToolResult]) -> Message:
    """A copy of a tool message with some of its blocks (by index) replaced."""
    blocks = tuple(results.get(i, block) for i, block in enumerate(message.blocks))
    return message.replace(blocks=blocks)


def text_result(result: ToolResult, text: str) -> ToolResult:
    """`result` with its content replaced by one text part (images dropped: they stay in the log)."""
    return ToolResult(result.call_id, (Text(text),), result.is_error, result.name, result.extra)


def recall_ref(entry_id: str, call_id: str | None = None) -> str:
    """The handle of a log entry (or one tool result in it) for `engine.recall`."""
    return f"entry:{entry_id}#{call_id}" if call_id else f"entry:{entry_id}"


def describe_call(call: ToolCall | None) -> str:
    """`read(path="src/app.py", offset=10)`: a call in one short line, for notices."""
    if call is None:
        return "a tool call"
    arguments = call.arguments if isinstance(call.arguments, dict) else {"input": call.arguments}
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)[:80]}" for k, v in list(arguments.items())[:3])
    return f"{call.name}({shown})"


def rerender(item: Item, message: Message, ctx: StageContext, stage: str) -> Item:
    return Item(item.entry_id, message, ctx.count(message), item.synthetic, stage)


@dataclass
class Rewrite:
    """A stage's edits of the view, written once for every stage: each edit replaces an item's
    rendering in `items` and records the decision that replays it on later requests."""

    stage: str
    ctx: StageContext
    items: list[Item]
    events: list[Event] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    def render(self, index: int, message: Message, rendered_by: str | None = None) -> Item:
        """From now on `items[index]` renders as `message`; returns its new item."""
        old = self.items[index]
        new = rerender(old, message, self.ctx, rendered_by or self.stage)
        self.items[index] = new
        self.decisions.append(Decision(self.stage, old.entry_id, message))
        return new

    def record(self, entry_id: str, message: Message | None) -> None:
        """A decision about an entry outside `items` (None: it leaves the view)."""
        self.decisions.append(Decision(self.stage, entry_id, message))

    def result(self) -> StageResult:
        return StageResult(self.items, self.events, self.decisions)
