"""Anthropic Messages <-> canonical messages.

Reading: the `system` parameter (a string, or a list of text blocks) becomes one system message at the
front. Blocks: `text` -> Text, `image` (`base64` or `url` source) -> Image, `thinking` -> Thinking with
its signature, `redacted_thinking` -> Thinking(data, redacted=True), `tool_use` -> ToolCall, and
`tool_result` -> ToolResult (string or block content, `is_error`, named after the matching `tool_use`).
A user message is split at the boundaries between tool results and other blocks: each run of
`tool_result` blocks becomes a canonical `tool` message and each run of other blocks a `user` message, in
order (so `[result, result, text]` gives a tool message and then a user message). Any other block type
(`document`, `search_result`, `server_tool_use`, `web_search_tool_result`, ...) becomes a placeholder
Text that is written back verbatim. Block fields we have no place for (`cache_control`, `citations`,
`caller`, ...) stay in `extra["anthropic"]` and are written back, and an `is_error: false`, `content: ""`
or `content: []` stays as a field too, so it comes back as given. A message takes only `role` and
`content` in a request: any other message field (a recorded response's `id`, `type`, `model`,
`stop_reason`, `stop_sequence`, `usage`) is kept in `meta["anthropic_unsent"]` and not written.

Writing: leading system messages become the `system` parameter (the key is present only when there is a
system message). Then consecutive `tool`/`user` messages merge into one user message and consecutive
assistant messages into one assistant message, blocks in order. A system message after the first
non-system message is written as `{"role": "system", ...}` inside `messages`, which the API rejects:
`pairing.validate` reports it and `pairing.repair` turns it into a user message.

Normalizations of a round trip (Anthropic -> canonical -> Anthropic); everything else comes back equal:
1. A content list (message content, tool_result content, or the system list) holding exactly one `text`
   block with no other fields is written as a plain string.
2. An empty `system` ("" or []) is dropped, and so is the `system` key then.
3. A `tool_use` without `input` gets `"input": {}`.
4. Message fields other than `role` and `content` are not written (they stay in `meta["anthropic_unsent"]`).
5. A message without `content` is written without it (never given an invented empty one).

From other formats: thinking is written only when it is signed or redacted and did not come from OpenAI
Responses (its encrypted content is no Anthropic signature); arguments kept as a raw string become an
object (`{}` for an empty string, the decoded object when it is one, else `{"raw_arguments": "<string>"}`).

A ToolCall or Thinking outside an assistant message, or a ToolResult outside a tool message, raises
MessageFormatError (a ValueError): run `ctxwin.messages.pairing.repair` first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwin.errors import MessageFormatError
from ctxwin.messages.model import Block, Image, Message, Text, Thinking, ToolCall, ToolResult
from ctxwin.messages.providers._common import (
    ANTHROPIC,
    arguments_object,
    canonical,
    extra_for,
    fields_of,
    put_back,
    read_content,
    require_list,
    require_mapping,
    sendable_image,
    thinking_written,
    unsupported,
    unsupported_block,
)

NS = ANTHROPIC
MESSAGE_FIELDS = frozenset({"content"})  # message fields a request takes besides `role` (others are kept, not sent)


def from_anthropic(messages: Sequence[Mapping[str, Any]],
                   system: str | Sequence[Mapping[str, Any]] | None = None) -> list[Message]:
    out: list[Message] = []
    if isinstance(system, str):
        if system:
            out.append(Message("system", (Text(system),)))
    elif system is not None:
        listed = require_list(system, "from_anthropic's system", "text blocks (or a string)")
        system_blocks = tuple(_read_block(b, f"anthropic system block {n}") for n, b in enumerate(listed))
        if system_blocks:
            out.append(Message("system", system_blocks))
    names: dict[str, str] = {}
    for index, raw in enumerate(require_list(messages, "from_anthropic", "messages")):
        where = f"anthropic message {index}"
        fields = dict(require_mapping(raw, where))
        role = fields.pop("role", None)
        if role not in ("user", "assistant", "system"):
            raise MessageFormatError(f"{where}: unknown role {role!r}; expected user or assistant")
        blocks = _read_content(fields, where)
        meta = extra_for(NS, fields, MESSAGE_FIELDS)
        if role != "user":
            for block in blocks:
                if isinstance(block, ToolCall):
                    names[block.id] = block.name
            out.append(Message(role, tuple(blocks), meta=meta))
            continue
        if not blocks:
            out.append(Message("user", (), meta=meta))
            continue
        start = 0
        for end in range(1, len(blocks) + 1):
            if end == len(blocks) or isinstance(blocks[end], ToolResult) != isinstance(blocks[start], ToolResult):
                run = blocks[start:end]
                if isinstance(run[0], ToolResult):
                    # One tool message per result, as every transcript reader and the Chat converter
                    # give them: the stages count and batch by message, so the same conversation must
                    # not mask differently for the API it came through (`to_anthropic` joins them back).
                    out.extend(Message("tool", (_named(r, names),), meta=meta if n == 0 else {})
                               for n, r in enumerate(run) if isinstance(r, ToolResult))  # all of them are
                else:
                    out.append(Message("user", tuple(run), meta=meta))
                meta = {}  # message fields go on the first part only
                start = end
    return out


def to_anthropic(messages: Sequence[Message]) -> dict[str, Any]:
    messages = canonical(messages, "to_anthropic")
    out: dict[str, Any] = {}
    lead = 0
    while lead < len(messages) and messages[lead].role == "system":
        lead += 1
    if lead:
        blocks: list[dict[str, Any]] = []
        for message in messages[:lead]:
            blocks.extend(_write_blocks(message))
        out["system"] = _content(blocks)
    turns: list[dict[str, Any]] = []
    fields: list[Mapping[str, Any]] = []
    for message in messages[lead:]:
        role = "user" if message.role in ("user", "tool") else message.role
        written = _write_blocks(message)
        if turns and turns[-1]["role"] == role and role != "system":
            turns[-1]["content"].extend(written)
            fields[-1] = {**fields_of(message.meta, NS), **fields[-1]}
        else:
            turns.append({"role": role, "content": written})
            fields.append(fields_of(message.meta, NS))
    for turn, kept in zip(turns, fields, strict=True):
        if turn["content"]:
            turn["content"] = _content(turn["content"])
        else:
            del turn["content"]  # nothing to send: the kept field ("" or []) or no content at all, as given
        put_back(turn, kept)
    out["messages"] = turns
    return out


# -- reading ----------------------------------------------------------------------------------------


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise MessageFormatError(f"{where}: text must be a string, got {type(value).__name__}")
    return value


def _named(result: ToolResult, names: Mapping[str, str]) -> ToolResult:
    name = names.get(result.call_id)
    if name is None:
        return result
    return ToolResult(result.call_id, result.content, result.is_error, name, result.extra)


def _read_content(fields: dict[str, Any], where: str) -> list[Block]:
    return read_content(fields, where, _read_block, "block")


def _read_block(raw: Any, where: str) -> Block:
    block = dict(require_mapping(raw, where))
    kind = block.pop("type", None)
    if kind == "text":
        return Text(_text(block.pop("text", None), where), extra_for(NS, block))
    if kind == "image":
        image = _read_image(block)
        if image is not None:
            return image
    elif kind == "thinking":
        thinking = _text(block.pop("thinking", None), where)
        signature = block.get("signature")
        if isinstance(signature, str):
            del block["signature"]
        else:
            signature = None
        return Thinking(thinking, signature, False, extra_for(NS, block))
    elif kind == "redacted_thinking":
        return Thinking(_text(block.pop("data", None), where), None, True, extra_for(NS, block))
    elif kind == "tool_use":
        call_id = _text(block.pop("id", None), f"{where}, id")
        name = _text(block.pop("name", None), f"{where}, name")
        return ToolCall(call_id, name, block.pop("input", {}), extra_for(NS, block))
    elif kind == "tool_result":
        return _read_result(block, where)
    return unsupported(NS, raw)


def _read_image(block: dict[str, Any]) -> Image | None:
    source = block.get("source")
    if not isinstance(source, Mapping):
        return None
    source = dict(source)
    kind = source.pop("type", None)
    if kind == "base64" and isinstance(source.get("data"), str):
        media_type = source.pop("media_type", None)
        data = source.pop("data")
        image = Image(media_type=media_type, data=data)
    elif kind == "url" and isinstance(source.get("url"), str):
        image = Image(url=source.pop("url"))
    else:
        return None  # a file source or something newer: kept whole as an unsupported block
    del block["source"]
    if source:
        block["source"] = source
    return Image(image.media_type, image.data, image.url, extra=extra_for(NS, block))


def _read_result(block: dict[str, Any], where: str) -> ToolResult:
    call_id = _text(block.pop("tool_use_id", None), f"{where}, tool_use_id")
    content = block.get("content")
    parts: tuple[Text | Image, ...] = ()
    if isinstance(content, str) and content:
        del block["content"]
        parts = (Text(content),)
    elif isinstance(content, list) and content:
        del block["content"]
        parts = tuple(_read_part(part, f"{where}, content {n}") for n, part in enumerate(content))
    is_error = block.get("is_error") is True
    if is_error:
        del block["is_error"]
    return ToolResult(call_id, parts, is_error, None, extra_for(NS, block))


def _read_part(raw: Any, where: str) -> Text | Image:
    kind = require_mapping(raw, where).get("type")
    if kind in ("text", "image"):
        block = _read_block(raw, where)
        if isinstance(block, Text | Image):
            return block
    return unsupported(NS, raw)


# -- writing ----------------------------------------------------------------------------------------


def _content(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(blocks) == 1 and blocks[0].get("type") == "text" and len(blocks[0]) == 2:
        text: str = blocks[0]["text"]
        return text
    return blocks


def _write_blocks(message: Message) -> list[dict[str, Any]]:
    role = message.role
    out: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, ToolResult):
            if role != "tool":
                raise MessageFormatError(f"a {role} message cannot hold a tool_result block; repair the history first")
            out.append(_write_result(block))
        elif role == "tool":
            raise MessageFormatError(f"a tool message may hold only tool results, not {block.type}")
        elif isinstance(block, ToolCall | Thinking) and role != "assistant":
            raise MessageFormatError(f"a {role} message cannot hold a {block.type} block; repair the history first")
        elif isinstance(block, Thinking):
            if thinking_written(block, NS):
                out.append(_write_thinking(block))
        elif isinstance(block, ToolCall):
            out.append(put_back({"type": "tool_use", "id": block.id, "name": block.name,
                                 "input": arguments_object(block.arguments)}, fields_of(block.extra, NS)))
        else:
            out.append(_write_part(block))
    return out


def _write_part(block: Text | Image) -> dict[str, Any]:
    if isinstance(block, Text):
        raw = unsupported_block(block, NS)
        if raw is not None:
            return raw
        return put_back({"type": "text", "text": block.text}, fields_of(block.extra, NS))
    sent = sendable_image(block)
    if isinstance(sent, Text):
        return {"type": "text", "text": sent.text}
    extra = dict(fields_of(block.extra, NS))
    kept = extra.pop("source", None)
    if block.data is not None:
        source: dict[str, Any] = {"type": "base64", "media_type": block.media_type, "data": block.data}
    else:
        source = {"type": "url", "url": block.url or ""}
    put_back(source, kept if isinstance(kept, Mapping) else {})
    return put_back({"type": "image", "source": source}, extra)


def _write_thinking(block: Thinking) -> dict[str, Any]:
    if block.redacted:
        out: dict[str, Any] = {"type": "redacted_thinking", "data": block.thinking}
    else:
        out = {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return put_back(out, fields_of(block.extra, NS))


def _write_result(block: ToolResult) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.call_id}
    parts = [_write_part(part) for part in block.content]
    if parts:
        out["content"] = _content(parts)
    if block.is_error:
        out["is_error"] = True
    return put_back(out, fields_of(block.extra, NS))
