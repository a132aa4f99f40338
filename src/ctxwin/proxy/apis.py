"""The three APIs the proxy speaks, each as the few facts the proxy needs: where the history sits in a
request body, how it converts to ctxwin's messages and back (the converters of `ctxwin.messages`
and the engine's `Prepared` payloads, nothing of its own), where the tools go, how an answer's tool
calls are read and how the proxy's own tool is taken out of an answer.

What ctxwin manages is the conversation: Anthropic's `messages`, Chat's `messages` after the leading
system/developer messages, Responses' `input` after its leading system/developer items. The system
prompt (Anthropic's `system`, Responses' `instructions`, Chat's leading system messages) and the
tool schemas go through untouched, counted as overhead so the engine budgets for them. So do all
other fields.

Converting the whole history on every request would cost as much as the request is long, and the
agent resends all of it each time. `Conversion` remembers the previous request of the session: the
raw messages it had and their canonical form per *segment* (a run of messages that converts on its
own: an assistant turn with the results that answer it, or a user message). A new request is compared
raw message by raw message with the old one (dict equality, in C), and only the segments from the
first difference on are converted again.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from ctxwin.engine import Prepared
from ctxwin.errors import MessageFormatError, ProxyRefusal
from ctxwin.messages import Message
from ctxwin.messages.model import ToolCall
from ctxwin.messages.providers import (
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)
from ctxwin.messages.tools import SchemaFormat, as_tool_schema, to_format
from ctxwin.providers.anthropic import anthropic_stream_events, parse_anthropic_message
from ctxwin.providers.base import SSE, Completion, StreamEvent
from ctxwin.providers.openai import (
    chat_stream_events,
    parse_chat_completion,
    parse_responses_response,
    responses_stream_events,
)

from .body import Body, RawList, append_to_array, json_array
from .errors import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES

RECALL_TOOL = "ctxwin_recall"
RECALL_DESCRIPTION = (
    "Get back, byte for byte, content cleared from this conversation to save context: pass the ref a "
    "placeholder names (recall(\"entry:...\") or blob:...), paged by offset/limit in characters; or a "
    "query to search earlier content. Call it alone: with other tools in the same turn it is not run."
)
RECALL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ref": {"type": "string", "description": "entry:<id>, entry:<id>#<call id> or blob:<hash>, "
                                                 "as a placeholder names it"},
        "offset": {"type": "integer", "minimum": 0, "description": "first character to return (default 0)"},
        "limit": {"type": "integer", "minimum": 1, "description": "characters to return (default 20000)"},
        "query": {"type": "string", "description": "words to search earlier content for (instead of ref)"},
        "hops": {"type": "integer", "minimum": 1, "maximum": 5,
                 "description": "with query: search again from what the first search found, this many times "
                                "in all, for a question that chains facts (default 1)"},
    },
}
LEAD_ROLES = ("system", "developer")
ANTHROPIC_CACHE_BREAKPOINTS = 2
"""At most this many `cache_control` markers are put back on the forwarded messages (the agent's
markers on its messages are stripped before they are synced, since they move every request; the API
takes four in all, and the agent's tools and system keep theirs)."""

@dataclass
class Conversation:
    """What one request body says, split the way the proxy needs it."""

    lead: RawList  # leading system/developer messages sent verbatim (Chat, Responses)
    history: RawList  # the raw messages ctxwin manages
    system_text: str  # the system prompt as text (session identity)
    overhead: bytes  # what goes upstream untouched and counts against the window: system and tools
    breakpoints: int = 0  # Anthropic cache_control markers the agent put on its messages
    markers: list[Any] = field(default_factory=list)
    """Those markers' values, oldest first, as the agent wrote them (`{"type": "ephemeral", "ttl":
    "1h"}`): put back as they were on the messages ctxwin marks."""
    changes: dict[str, bytes | None] = field(default_factory=dict)
    """Fields set (None: dropped) in every body forwarded for this request, besides the history."""
    usage_hidden: bool = False  # Chat stream usage asked for by the proxy, not shown to the caller
    overhead_key: str | None = None  # `overhead_key()`, once computed
    untouched: bool = False
    """Forward as it came: a Responses request that continues a stored response
    (`previous_response_id`) sends only what is new, and the rest of its history lives at the
    provider, out of ctxwin's reach (syncing the piece would make every request a branch)."""


@dataclass
class Conversion:
    """The previous request of a session, converted: raw messages (as bytes spans), segment starts
    (raw index, canonical index, raw tokens before it) and the canonical messages."""

    raw: list[Any] = field(default_factory=list)
    starts: list[tuple[int, int, int]] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    tokens: int = 0  # raw counter tokens of all messages


@dataclass(frozen=True)
class Api:
    name: str
    schema_format: SchemaFormat
    history_key: str  # "messages" or "input"
    convert: Callable[[Sequence[Mapping[str, Any]]], list[Message]]
    is_start: Callable[[Sequence[Any], int], bool]
    parse: Callable[[Mapping[str, Any]], Completion]
    stream_events: Callable[[Any], Any]

    # ---------------------------------------------------------------------------------- requests

    def split(self, body: Body) -> Conversation:
        """The request's conversation; a `MessageFormatError` when the history is not a list of
        messages the converters read."""
        raw = body.raw_list(self.history_key)
        if raw is None and self.name == OPENAI_RESPONSES and isinstance(body.get("input"), str):
            raw = RawList.of([{"role": "user", "content": body["input"]}])
        if raw is None:
            raise MessageFormatError(f"`{self.history_key}` must be a list of messages")
        if self.name == ANTHROPIC:
            system = body.get("system")
            overhead = body.bytes_of("system") + b"\x00" + body.bytes_of("tools")
            markers = [m for i in range(max(0, len(raw) - 4), len(raw))
                       if isinstance(raw[i], Mapping) and (m := _marker(raw[i])) is not None]
            return Conversation(RawList([]), raw, text_of(system), overhead, len(markers), markers=markers)
        count = 0
        while count < len(raw) and isinstance(raw[count], Mapping) and raw[count].get("role") in LEAD_ROLES:
            count += 1
        lead, history = raw.split(count)
        untouched = self.name == OPENAI_RESPONSES and body.present("previous_response_id")
        instructions = body.get("instructions") if self.name == OPENAI_RESPONSES else None
        system_text = "\n".join(filter(None, [text_of(instructions), *(text_of(lead[i].get("content"))
                                                                        for i in range(len(lead)))]))
        overhead = body.bytes_of("instructions") + b"\x00" + b"".join(lead.encoded()) + b"\x00" + \
            body.bytes_of("tools")
        return Conversation(lead, history, system_text, overhead, untouched=untouched)

    def first_user_text(self, history: Sequence[Any]) -> str:
        for index in range(len(history)):
            message = history[index]
            if isinstance(message, Mapping) and message.get("role") == "user":
                return text_of(message.get("content"))
        return ""

    def canonical(self, history: RawList, memo: Conversion, count: Callable[[Message], int]) -> Conversion:
        """The history as canonical messages, converting only what changed since `memo` (the
        previous request of the session), compared byte for byte. `ValueError` (from the
        converters) for a malformed one."""
        old, new = memo.raw, history.raws
        if old and len(new) >= len(old) and old == new[:len(old)]:  # the usual case, in one comparison
            same = len(old)
        else:
            same = 0
            limit = min(len(old), len(new))
            while same < limit and old[same] == new[same]:
                same += 1
        # Segments wholly inside the shared part are kept; the one the difference falls in, and all
        # after it, are converted again. The old last segment is kept only when the new history does
        # not extend it (a new segment starts where the old request ended).
        bounds = [start for start, _, _ in memo.starts] + [len(old)]
        kept = 0
        while kept < len(memo.starts) and bounds[kept + 1] <= same and (
                kept + 1 < len(memo.starts) or len(history) == len(old) or self.is_start(history, len(old))):
            kept += 1
        starts = list(memo.starts[:kept])
        if kept < len(memo.starts):
            raw_at, canon_at, tokens_at = memo.starts[kept]
        else:
            raw_at, canon_at, tokens_at = len(old), len(memo.messages), memo.tokens
        messages = memo.messages[:canon_at]
        tokens = tokens_at
        begin = raw_at
        for end in range(raw_at + 1, len(history) + 1):
            if end == len(history) or self.is_start(history, end):
                converted = self.convert([strip_cache_control(history[i]) if self.name == ANTHROPIC else history[i]
                                          for i in range(begin, end)])
                starts.append((begin, len(messages), tokens))
                messages.extend(converted)
                tokens += sum(count(m) for m in converted)
                begin = end
        return Conversion(list(new), starts, messages, tokens)

    def forward(self, body: Body, conversation: Conversation, prepared: Prepared, recall: bool,
                rendered: Rendered | None = None) -> tuple[bytes, Rendered | None]:
        """The request to send upstream, as bytes: the caller's body with the managed history in
        place of its own (and `ctxwin_recall` after the agent's tools when offered), every other
        field as the bytes that came; and what to pass as `rendered` next time (the turns written
        for the previous request of the session)."""
        changes = dict(conversation.changes)
        written: Rendered | None = None
        if self.name == ANTHROPIC:
            written = anthropic_turns(prepared.messages, rendered if rendered is not None else Rendered())
            encoded = list(written.encoded)
            if conversation.breakpoints and all(len(group) == 1 for group in written.turns):
                turns = [group[0] for group in written.turns]
                marked = with_breakpoints(turns, min(conversation.breakpoints, ANTHROPIC_CACHE_BREAKPOINTS),
                                          conversation.markers)
                for index in range(max(0, len(marked) - ANTHROPIC_CACHE_BREAKPOINTS), len(marked)):
                    if marked[index] is not turns[index]:
                        encoded[index] = orjson.dumps(marked[index])
            changes["messages"] = json_array(encoded)
            if prepared.system:  # system messages inside the history, which ctxwin lifted: after the agent's
                changes["system"] = orjson.dumps(_join_system(body.get("system"), prepared.system))
        else:
            fmt: Literal["openai_chat", "openai_responses"] = \
                "openai_chat" if self.name == OPENAI_CHAT else "openai_responses"
            written = openai_items(prepared.messages, fmt, rendered if rendered is not None else Rendered())
            lifted = [orjson.dumps({"role": "system", "content": prepared.system})] if prepared.system else []
            changes[self.history_key] = json_array([*conversation.lead.encoded(), *lifted,
                                                    *(data for data in written.encoded if data)])
        if recall:
            tools = append_to_array(body.bytes_of("tools"), self.recall_bytes)
            if tools is None:  # what the API itself would refuse, before the recall tool is added to it
                raise ProxyRefusal(400, "`tools` is not a list of tool definitions", "send tools as a JSON array")
            changes["tools"] = tools
        return body.encode(changes), written

    @property
    def recall_bytes(self) -> bytes:
        """The `ctxwin_recall` tool's schema in this API's format, as JSON (written once per format)."""
        return _recall_bytes(self.schema_format)

    # ---------------------------------------------------------------------------------- answers

    def recall_calls(self, completion: Completion) -> tuple[list[ToolCall], list[ToolCall]]:
        """(ctxwin_recall calls, the agent's own calls) of an answer."""
        ours = [c for c in completion.tool_calls if c.name == RECALL_TOOL]
        theirs = [c for c in completion.tool_calls if c.name != RECALL_TOOL]
        return ours, theirs

    def without_recall(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """An answer with the ctxwin_recall calls taken out (the agent never sees that tool)."""
        out = dict(data)
        if self.name == ANTHROPIC:
            out["content"] = [b for b in data.get("content") or () if not _is_recall_block(b)]
            if out.get("stop_reason") == "tool_use" and not any(
                    isinstance(b, Mapping) and b.get("type") == "tool_use" for b in out["content"]):
                out["stop_reason"] = "end_turn"  # its only calls were ctxwin's, dropped
        elif self.name == OPENAI_CHAT:
            choices = []
            for choice in data.get("choices") or ():
                message = dict(choice.get("message") or {})
                calls = [c for c in message.get("tool_calls") or () if (c.get("function") or {}).get("name")
                         != RECALL_TOOL]
                if calls:
                    message["tool_calls"] = calls
                else:
                    message.pop("tool_calls", None)
                choice = {**choice, "message": message}
                if not calls and choice.get("finish_reason") == "tool_calls":
                    choice["finish_reason"] = "stop"
                choices.append(choice)
            out["choices"] = choices
        else:
            out["output"] = [i for i in data.get("output") or () if not _is_recall_item(i)]
        return out


@dataclass
class Rendered:
    """What was written for a session's previous forwarded request: its messages, and per group of
    messages (an Anthropic turn; a Chat message or run of tool messages; a Responses message) the
    items written, the index of its first message, its JSON and its messages' content keys."""

    messages: list[Message] = field(default_factory=list)
    turns: list[list[dict[str, Any]]] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    encoded: list[bytes] = field(default_factory=list)  # each group's items as JSON, comma-joined
    keys: list[tuple[str, ...] | None] = field(default_factory=list)
    by_content: dict[tuple[str, ...], tuple[list[dict[str, Any]], bytes]] = field(default_factory=dict)
    """Each group by the content keys of its messages: a group after an edit (a masking batch in
    the middle) is found here instead of being written again."""


Writer = Callable[[Sequence[Message]], list[dict[str, Any]] | None]


def render(messages: Sequence[Message], previous: Rendered, joins: Callable[[Message, Message], bool],
           write: Writer, write_all: Writer | None = None) -> Rendered:
    """A provider writer's output for `messages`, written incrementally. The messages split into
    groups that the writer writes independently of one another (`joins(a, b)`: b belongs to a's
    group), so writing each group on its own gives what writing the whole list gives; the groups
    of the previous request that lie wholly in the part it shares with this one (the same message
    objects, or the same content) are taken as they were, a group found by content further on too
    (after a masking batch in the middle), and only the rest is written (`write` returns the
    group's items, or None when it cannot be written on its own: then `write_all` writes the whole
    list). Without
    this, writing 170K tokens of history back to JSON on every request would cost more than
    everything else on the request's path."""
    old = previous.messages
    same = 0
    limit = min(len(old), len(messages))
    while same < limit and (messages[same] is old[same] or (
            messages[same].blocks and messages[same].content_key == old[same].content_key)):
        same += 1
    # A group is kept when the message after it is shared too (so it still ends where it ended).
    kept = 0
    while kept + 1 < len(previous.starts) and previous.starts[kept + 1] < same:
        kept += 1
    groups, starts, encoded = previous.turns[:kept], previous.starts[:kept], previous.encoded[:kept]
    keys = previous.keys[:kept]
    begin = previous.starts[kept] if kept < len(previous.starts) else 0
    known = previous.by_content
    first = begin
    for end in range(begin + 1, len(messages) + 1):
        if end < len(messages) and joins(messages[end - 1], messages[end]):
            continue
        group = messages[first:end]
        key = tuple(m.content_key for m in group) if all(m.blocks for m in group) else None
        found = known.get(key) if key is not None else None
        if found is None:
            items = write(group)
            if items is None:
                whole = (write_all or write)(list(messages)) or []
                return Rendered(list(messages), [whole], [], [b",".join(map(orjson.dumps, whole))])
            found = (items, b",".join(map(orjson.dumps, items)))
        groups.append(found[0])
        encoded.append(found[1])
        keys.append(key)
        starts.append(first)
        first = end
    by_content = {key: (group, data) for key, group, data in zip(keys, groups, encoded, strict=True) if key is not None}
    return Rendered(list(messages), groups, starts, encoded, keys, by_content)


def _anthropic_role(message: Message) -> str:
    return "user" if message.role in ("user", "tool") else message.role


def _anthropic_joins(a: Message, b: Message) -> bool:
    return _anthropic_role(a) == _anthropic_role(b) and b.role != "system"


def _anthropic_write(group: Sequence[Message]) -> list[dict[str, Any]] | None:
    written = to_anthropic(group)
    return None if "system" in written or len(written["messages"]) != 1 else written["messages"]


def anthropic_turns(messages: Sequence[Message], previous: Rendered) -> Rendered:
    """`to_anthropic(messages)["messages"]`, incrementally: a group is a run of messages that merge
    into one turn (a tool message and the user text after it; consecutive assistant messages)."""
    return render(messages, previous, _anthropic_joins, _anthropic_write,
                  lambda whole: to_anthropic(whole)["messages"])


def _chat_joins(a: Message, b: Message) -> bool:
    return a.role == "tool" and b.role == "tool"  # a run's result images follow the whole run


def _never_joins(a: Message, b: Message) -> bool:
    return False


def openai_items(messages: Sequence[Message], fmt: Literal["openai_chat", "openai_responses"],
                 previous: Rendered) -> Rendered:
    """`to_openai_chat` / `to_openai_responses` of the prepared messages, incrementally, after the
    repair those APIs' own rules may need (as `Prepared.to_openai_chat` does it)."""
    from ctxwin.messages.pairing import repair, validate

    fixed: Sequence[Message] = repair(messages, fmt).messages if validate(messages, fmt) else messages
    if fmt == "openai_chat":
        return render(fixed, previous, _chat_joins, to_openai_chat)
    return render(fixed, previous, _never_joins, to_openai_responses)


def text_of(value: Any) -> str:
    """The text of a system prompt or message content in any of the three APIs: a string, or the
    `text` of each part of a list."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(p["text"] for p in value if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def strip_cache_control(message: Any) -> Any:
    """An Anthropic message without the agent's `cache_control` markers: Claude Code moves them to
    the newest messages on every request, and kept in the log they would change a message's content
    key (so `sync` would see an edit) and pile up past the API's four."""
    if not isinstance(message, Mapping) or not isinstance(message.get("content"), list):
        return message
    content = message["content"]
    if not any(isinstance(b, Mapping) and ("cache_control" in b or isinstance(b.get("content"), list))
               for b in content):
        return message
    return {**message, "content": [_strip_block(b) for b in content]}


def _strip_block(block: Any) -> Any:
    if not isinstance(block, Mapping):
        return block
    out = {k: v for k, v in block.items() if k != "cache_control"}
    inner = out.get("content")
    if isinstance(inner, list):
        out["content"] = [_strip_block(p) for p in inner]
    return out


def _marker(message: Mapping[str, Any]) -> Any:
    """The last `cache_control` value on a message's blocks (None: unmarked)."""
    content = message.get("content")
    if not isinstance(content, list):
        return None
    found = [b["cache_control"] for b in content if isinstance(b, Mapping) and "cache_control" in b]
    return found[-1] if found else None


def with_breakpoints(messages: list[dict[str, Any]], count: int, markers: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The messages with a `cache_control` on the last block of each of the last `count` messages,
    where the agent had its own: the agent's own values in their order (the newest message gets the
    newest marker), `{"type": "ephemeral"}` where none is known."""
    out = list(messages)
    for placed, index in enumerate(range(len(out) - 1, max(len(out) - 1 - count, -1), -1)):
        marker = markers[len(markers) - 1 - placed] if placed < len(markers) else {"type": "ephemeral"}
        message = dict(out[index])
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list) or not content:
            continue
        last = content[-1]
        if isinstance(last, Mapping) and last.get("type") not in ("thinking", "redacted_thinking"):
            message["content"] = [*content[:-1], {**last, "cache_control": marker}]
            out[index] = message
    return out


def _join_system(system: Any, lifted: str) -> Any:
    if not system:
        return lifted
    if isinstance(system, str):
        return f"{system}\n\n{lifted}"
    return [*system, {"type": "text", "text": lifted}]


def _is_recall_block(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "tool_use" and block.get("name") == RECALL_TOOL


def _is_recall_item(item: Any) -> bool:
    return isinstance(item, Mapping) and item.get("type") == "function_call" and item.get("name") == RECALL_TOOL


@functools.cache
def _recall_bytes(schema_format: SchemaFormat) -> bytes:
    schema = as_tool_schema({"name": RECALL_TOOL, "description": RECALL_DESCRIPTION, "input_schema": RECALL_PARAMETERS})
    return orjson.dumps(to_format(schema, schema_format))


def overhead_key(conversation: Conversation) -> str:
    """A digest of the system prompt and tools as sent (tens of KB: hashed once per request)."""
    if conversation.overhead_key is None:
        conversation.overhead_key = hashlib.blake2b(conversation.overhead, digest_size=16).hexdigest()
    return conversation.overhead_key


# -------------------------------------------------------------------------------------------------- segments


def _anthropic_start(history: Sequence[Any], index: int) -> bool:
    message = history[index]
    if not isinstance(message, Mapping) or message.get("role") != "user":
        return True
    content = message.get("content")
    return not (isinstance(content, list) and any(isinstance(b, Mapping) and b.get("type") == "tool_result"
                                                  for b in content))


def _chat_start(history: Sequence[Any], index: int) -> bool:
    message = history[index]
    return not (isinstance(message, Mapping) and message.get("role") == "tool")


_RESPONSES_ASSISTANT = frozenset({"reasoning", "function_call", "custom_tool_call"})


def _responses_assistant(item: Any) -> bool:
    if not isinstance(item, Mapping):
        return False
    kind = item.get("type")
    if kind in (None, "message"):
        return item.get("role") == "assistant"
    return isinstance(kind, str) and (kind in _RESPONSES_ASSISTANT or kind.endswith("_call"))


def _responses_start(history: Sequence[Any], index: int) -> bool:
    item = history[index]
    if isinstance(item, Mapping) and item.get("type") in (None, "message") and item.get("role") in (
            "user", "system", "developer"):
        return True
    return _responses_assistant(item) and not _responses_assistant(history[index - 1])


APIS: dict[str, Api] = {
    ANTHROPIC: Api(ANTHROPIC, "anthropic", "messages", from_anthropic, _anthropic_start, parse_anthropic_message,
                   anthropic_stream_events),
    OPENAI_CHAT: Api(OPENAI_CHAT, "openai", "messages", from_openai_chat, _chat_start, parse_chat_completion,
                     chat_stream_events),
    OPENAI_RESPONSES: Api(OPENAI_RESPONSES, "openai-responses", "input", from_openai_responses, _responses_start,
                          parse_responses_response, responses_stream_events),
}

__all__ = ["APIS", "RECALL_TOOL", "SSE", "Api", "Conversation", "Conversion", "StreamEvent", "text_of"]
