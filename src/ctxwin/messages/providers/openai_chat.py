"""OpenAI Chat Completions messages <-> canonical messages.

Reading: `system` and `developer` become role system; `user` and `assistant` keep their role; each run of
consecutive `tool` messages becomes one canonical `tool` message with one `ToolResult` per tool message
(named after the matching call when one came earlier). Content parts: `text` -> Text, `refusal` -> Text,
`image_url` -> Image (a `data:<type>;base64,` URL becomes media type + data), anything else (`input_audio`,
`file`, ...) -> a placeholder Text that carries the part (written back verbatim). An assistant's top-level
`refusal` string becomes a Text after the content parts; `tool_calls` become ToolCalls after that.
Arguments that decode to a JSON object become a dict; anything else stays the raw string. Every field we
have no place for is kept: part and tool-call fields in `extra["openai_chat"]`, written back; message
fields the request schema has (`name`, `audio`, `function_call`, and `content: null/""/[]`,
`refusal: null/""`, `tool_calls: []`, kept so they come back as they were) in `meta["openai_chat"]`,
written back; any other message field (`annotations` of a recorded response, `reasoning_content`, a
harness's own fields such as SWE-agent's `thought`) in `meta["openai_chat_unsent"]`, not written, since the
API rejects it. A tool message's fields go on its ToolResult the same way (its `name`, not in the request
schema, names the result and is kept unsent).

Writing: the reverse; one `tool` message per ToolResult.

Normalizations of a round trip (chat -> canonical -> chat); everything else comes back equal:
1. A content list holding exactly one `text` part with no other fields is written as a plain string.
2. A tool call without `"type"` gets `"type": "function"`; a missing `arguments` becomes `""`; arguments
   given as a JSON object (not a string) are written as a compact JSON string.
3. Arguments that decode to a JSON object are written as compact JSON (`separators=(",", ":")`, non-ASCII
   kept) unless the original string is kept: it is, whenever it differs from that encoding and still
   decodes to the same arguments, so the original bytes come back.
4. Consecutive `tool` messages are grouped into one canonical message (written back one per result).
5. A tool message without `content` gets `"content": ""` (the API requires it). Other messages without
   content are written without it.
6. Message fields outside the request schema are not written (they stay in `meta["openai_chat_unsent"]`).

From other formats (canonical -> chat): thinking is not written (Chat has no reasoning input); an image
inside a tool result is replaced by the text part `TOOL_IMAGE_NOTE` and sent in a user message right after
the run of tool messages, after a text part `[images returned by tool call <id>]`; `is_error` is not
written (Chat has no such field). Extras of other formats are not written.

A ToolCall outside an assistant message, a ToolResult outside a tool message, thinking outside an
assistant message and anything but ToolResults in a tool message raise MessageFormatError: run
`ctxwin.messages.pairing.repair` first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwin.errors import MessageFormatError
from ctxwin.messages.model import Block, Image, Message, Role, Text, Thinking, ToolCall, ToolResult
from ctxwin.messages.providers._common import (
    OPENAI_CHAT,
    arguments_string,
    canonical,
    decode_arguments,
    extra_for,
    fields_of,
    put_back,
    read_content,
    read_image_url,
    require_list,
    require_mapping,
    sendable_image,
    unsupported,
    unsupported_block,
    write_image_url,
)

NS = OPENAI_CHAT
TOOL_IMAGE_NOTE = "[image: sent in the next user message]"  # stands in a tool message for an image result part

# message fields a request takes, besides those read into blocks (others are kept in meta, not sent)
_SENT = {
    "system": frozenset({"role", "content", "name"}),  # `role` is kept only to remember "developer"
    "user": frozenset({"content", "name"}),
    "assistant": frozenset({"content", "name", "refusal", "tool_calls", "audio", "function_call"}),
    "tool": frozenset({"content"}),
}
_REFUSAL_PART = "refusal"  # extra "type" of a Text read from a `refusal` content part
_REFUSAL_FIELD = "refusal_field"  # extra "type" of a Text read from the message's top-level `refusal`


def from_openai_chat(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    out: list[Message] = []
    names: dict[str, str] = {}
    results: list[ToolResult] = []
    for index, raw in enumerate(require_list(messages, "from_openai_chat", "messages")):
        where = f"openai chat message {index}"
        fields = dict(require_mapping(raw, where))
        role = fields.pop("role", None)
        if role == "tool":
            results.append(_read_tool_message(fields, names, where))
            continue
        if results:
            out.append(Message("tool", tuple(results)))
            results = []
        if role in ("system", "developer", "user"):
            if role == "developer":
                fields["role"] = "developer"
            kind: Role = "user" if role == "user" else "system"
            blocks = _read_content(fields, where)
            out.append(Message(kind, tuple(blocks), meta=extra_for(NS, fields, _SENT[kind])))
        elif role == "assistant":
            blocks = _read_content(fields, where)
            refusal = fields.get("refusal")
            if isinstance(refusal, str) and refusal:
                del fields["refusal"]
                blocks.append(Text(refusal, {NS: {"type": _REFUSAL_FIELD}}))
            calls = fields.get("tool_calls")
            if isinstance(calls, list) and calls:
                del fields["tool_calls"]
                for position, call in enumerate(calls):
                    block = _read_call(call, f"{where}, tool call {position}")
                    names[block.id] = block.name
                    blocks.append(block)
            out.append(Message("assistant", tuple(blocks), meta=extra_for(NS, fields, _SENT["assistant"])))
        else:
            raise MessageFormatError(f"{where}: unknown role {role!r}; "
                                     "expected system, developer, user, assistant or tool")
    if results:
        out.append(Message("tool", tuple(results)))
    return out


def to_openai_chat(messages: Sequence[Message]) -> list[dict[str, Any]]:
    messages = canonical(messages, "to_openai_chat")
    out: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []  # image parts of tool results, sent after the run of tool messages
    last = len(messages) - 1
    for index, message in enumerate(messages):
        if message.role != "tool":
            out.append(_write_message(message))
            continue
        for block in message.blocks:
            if not isinstance(block, ToolResult):
                raise MessageFormatError(f"message {index}: a tool message may hold only tool results, "
                                         f"not {block.type}")
            out.append(_write_tool_result(block, images))
        if images and (index == last or messages[index + 1].role != "tool"):
            out.append({"role": "user", "content": images})
            images = []
    return out


# -- reading ----------------------------------------------------------------------------------------


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise MessageFormatError(f"{where}: text must be a string, got {type(value).__name__}")
    return value


def _read_content(fields: dict[str, Any], where: str) -> list[Block]:
    return read_content(fields, where, _read_part, "part")


def _read_part(raw: Any, where: str) -> Text | Image:
    part = dict(require_mapping(raw, where))
    kind = part.pop("type", None)
    if kind == "text":
        return Text(_text(part.pop("text", None), where), extra_for(NS, part))
    if kind == "refusal":
        text = _text(part.pop("refusal", None), where)
        return Text(text, {NS: {**part, "type": _REFUSAL_PART}})
    if kind == "image_url" and isinstance(part.get("image_url"), Mapping):
        image_url = dict(part.pop("image_url"))
        url = image_url.pop("url", None)
        if isinstance(url, str):
            if image_url:
                part["image_url"] = image_url
            return read_image_url(url, NS, part)
    return unsupported(NS, raw)


def _read_call(raw: Any, where: str) -> ToolCall:
    call = dict(require_mapping(raw, where))
    call_id = _text(call.pop("id", None), f"{where}, id")
    kind = call.pop("type", "function")
    if kind == "function":
        function = dict(require_mapping(call.pop("function", None), f"{where}, function"))
        name = _text(function.pop("name", None), f"{where}, name")
        arguments, kept = decode_arguments(function.pop("arguments", ""))
        if kept is not None:
            function["arguments"] = kept
        if function:
            call["function"] = function
        return ToolCall(call_id, name, arguments, extra_for(NS, call))
    if kind == "custom":
        custom = dict(require_mapping(call.pop("custom", None), f"{where}, custom"))
        name = _text(custom.pop("name", None), f"{where}, name")
        arguments = custom.pop("input", "")
        if custom:
            call["custom"] = custom
        return ToolCall(call_id, name, arguments, {NS: {**call, "type": "custom"}})
    raise MessageFormatError(f"{where}: unknown tool call type {kind!r}; expected function or custom")


def _read_tool_message(fields: dict[str, Any], names: Mapping[str, str], where: str) -> ToolResult:
    call_id = _text(fields.pop("tool_call_id", None), f"{where}, tool_call_id")
    # every part read is a Text or an Image (`_read_part`); the filter only says so to the type checker
    parts = tuple(b for b in _read_content(fields, where) if isinstance(b, Text | Image))
    name = fields.get("name")
    name = name if isinstance(name, str) else names.get(call_id)
    return ToolResult(call_id, parts, False, name, extra_for(NS, fields, _SENT["tool"]))


# -- writing ----------------------------------------------------------------------------------------


def _write_message(message: Message) -> dict[str, Any]:
    fields = fields_of(message.meta, NS)
    role: str = message.role
    if role == "system" and fields.get("role") == "developer":
        role = "developer"
    out: dict[str, Any] = {"role": role}
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    refusal: str | None = None
    for block in message.blocks:
        if isinstance(block, Text):
            raw = unsupported_block(block, NS)
            if raw is not None:
                parts.append(raw)
                continue
            extra = dict(fields_of(block.extra, NS))
            marker = extra.pop("type", None)
            if marker == _REFUSAL_FIELD and refusal is None and role == "assistant":
                refusal = block.text
            elif marker in (_REFUSAL_PART, _REFUSAL_FIELD):
                parts.append(put_back({"type": "refusal", "refusal": block.text}, extra))
            else:
                parts.append(put_back({"type": "text", "text": block.text}, extra))
        elif isinstance(block, Image):
            parts.append(_write_image(block))
        elif isinstance(block, ToolCall) and role == "assistant":
            calls.append(_write_call(block))
        elif isinstance(block, Thinking) and role == "assistant":
            continue  # Chat Completions has no field for reasoning
        else:
            raise MessageFormatError(f"a {role} message cannot hold a {block.type} block; repair the history first")
    if parts:
        single = parts[0]
        plain = len(parts) == 1 and single.get("type") == "text" and len(single) == 2
        out["content"] = single["text"] if plain else parts
    if refusal is not None:
        out["refusal"] = refusal
    if calls:
        out["tool_calls"] = calls
    return put_back(out, fields)


def _write_image(block: Image) -> dict[str, Any]:
    sent = sendable_image(block)
    if isinstance(sent, Text):
        return {"type": "text", "text": sent.text}
    extra = dict(fields_of(block.extra, NS))
    kept = extra.pop("image_url", None)
    url = write_image_url(block)
    image_url = put_back({"url": url}, kept if isinstance(kept, Mapping) else {})
    return put_back({"type": "image_url", "image_url": image_url}, extra)


def _write_call(block: ToolCall) -> dict[str, Any]:
    extra = dict(fields_of(block.extra, NS))
    kind = extra.pop("type", "function")
    if kind == "custom":
        kept = extra.pop("custom", None)
        custom = {"name": block.name, "input": arguments_string(block.arguments, None)}
        put_back(custom, kept if isinstance(kept, Mapping) else {})
        return put_back({"id": block.id, "type": "custom", "custom": custom}, extra)
    kept = extra.pop("function", None)
    kept = kept if isinstance(kept, Mapping) else {}
    function = {"name": block.name, "arguments": arguments_string(block.arguments, kept.get("arguments"))}
    return put_back({"id": block.id, "type": "function", "function": put_back(function, kept)}, extra)


def _write_tool_result(block: ToolResult, images: list[dict[str, Any]]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    header_sent = False
    for part in block.content:
        if isinstance(part, Image):
            if not header_sent:
                images.append({"type": "text", "text": f"[images returned by tool call {block.call_id}]"})
                header_sent = True
            images.append(_write_image(part))
            parts.append({"type": "text", "text": TOOL_IMAGE_NOTE})
            continue
        raw = unsupported_block(part, NS)
        if raw is None:
            raw = put_back({"type": "text", "text": part.text}, fields_of(part.extra, NS))
        parts.append(raw)
    out: dict[str, Any] = {"role": "tool", "tool_call_id": block.call_id}
    if parts:
        single = parts[0]
        plain = len(parts) == 1 and single.get("type") == "text" and len(single) == 2
        out["content"] = single["text"] if plain else parts
    put_back(out, fields_of(block.extra, NS))
    out.setdefault("content", "")
    return out
