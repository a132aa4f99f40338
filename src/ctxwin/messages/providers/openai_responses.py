"""OpenAI Responses input items <-> canonical messages.

Reading: a `message` item with role `user` becomes a user message, `system` or `developer` a system
message (item fields such as `id` and `status` in `meta["openai_responses"]`). The items the model
produces in one turn, i.e. each run of consecutive assistant `message`, `reasoning`, `function_call` and
`custom_tool_call` items, become ONE canonical assistant message with a block per item (message parts
become Texts, the first one carrying its item's fields in `extra["openai_responses_item"]`, which also
marks where an item starts). Each run of `function_call_output` / `custom_tool_call_output` items becomes
one tool message. `reasoning` becomes Thinking: its text is the `summary_text` parts joined by a blank
line, its signature the `encrypted_content`; its other fields (`id`, `status`, `content`) stay in
`extra["openai_responses"]`, whose presence marks the thinking as Responses reasoning. Item types we do
not model become placeholder Texts that are written back verbatim: `*_call` items join the assistant
message, anything else becomes a user message of its own. Part fields we have no place for stay in
`extra["openai_responses"]` and are written back; item fields too when the request schema has them
(`id`, `status`, `phase`, `namespace`, `caller`, `name` of an output, `content` of a reasoning item);
any other item field is kept in `extra`/`meta["openai_responses_unsent"]` and not written.

Writing: the reverse. Every message is written in item form (`"type": "message"`, content as a list).

Normalizations of a round trip (items -> canonical -> items); everything else comes back equal:
1. A message item without `"type"` gets `"type": "message"`; a string `content` becomes a one-part list
   (`input_text` for user/system/developer, `output_text` for assistant); an `input_image` part of a
   message without `detail` gets `"detail": "auto"` (the API's default; its spec requires the field).
2. Arguments and outputs follow the same rules as OpenAI Chat: arguments that decode to a JSON object are
   written as compact JSON unless the original string differs and still decodes to the same object (then
   the original is kept); a missing `arguments` becomes `""`; an `output` list holding exactly one
   `input_text` part with no other fields is written as a plain string; an output item without `output`
   gets `"output": ""` (the API requires it). A message item without `content` is written without it.
3. A reasoning item whose `summary` has one `summary_text` part (or none) is rebuilt from the thinking
   text; a longer summary is kept as given as long as the thinking text still equals its parts joined.
4. Item fields outside the request schema are not written (they stay in `..._unsent`).

From other formats: Thinking without Responses provenance (Anthropic thinking, say) is not written, since
a reasoning item needs its `rs_` id and OpenAI's own encrypted content; `is_error` is not written (the API
has no such field). A result image becomes an `input_image` part of the output list.

Blocks in roles that cannot hold them raise MessageFormatError, as in `openai_chat`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwin.errors import MessageFormatError
from ctxwin.messages.model import Block, Image, Message, Role, Text, Thinking, ToolCall, ToolResult
from ctxwin.messages.providers._common import (
    OPENAI_RESPONSES,
    UNSENT_SUFFIX,
    arguments_string,
    canonical,
    decode_arguments,
    extra_for,
    fields_of,
    optional_text,
    put_back,
    read_image_url,
    require_list,
    require_mapping,
    sendable_image,
    thinking_written,
    unsupported,
    unsupported_block,
    write_image_url,
)

NS = OPENAI_RESPONSES
NS_ITEM = "openai_responses_item"  # extra key on the first block of an assistant message item: that item's fields

# item fields a request takes, besides those read into blocks (others are kept in extra/meta, not sent)
_SENT_MESSAGE = frozenset({"id", "status", "phase", "role", "content"})  # `role` only to remember "developer"
_SENT_CALL = frozenset({"id", "status", "namespace", "caller", "arguments", "type"})
_SENT_OUTPUT = frozenset({"id", "status", "name", "namespace", "caller", "output", "type"})
_SENT_REASONING = frozenset({"id", "status", "summary", "content", "encrypted_content"})
_UNSENT = NS + UNSENT_SUFFIX
_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
_INPUT_ROLES: dict[str, Role] = {"user": "user", "system": "system", "developer": "system"}
_SUMMARY_SEPARATOR = "\n\n"


def from_openai_responses(items: Sequence[Mapping[str, Any]]) -> list[Message]:
    out: list[Message] = []
    names: dict[str, str] = {}
    turn: list[Block] = []  # the assistant-side items of the current turn
    results: list[ToolResult] = []

    def flush() -> None:
        nonlocal turn, results
        if turn:
            out.append(Message("assistant", tuple(turn)))
            turn = []
        if results:
            out.append(Message("tool", tuple(results)))
            results = []

    for index, raw in enumerate(require_list(items, "from_openai_responses", "input items")):
        where = f"openai responses item {index}"
        item = dict(require_mapping(raw, where))
        kind = optional_text(item.get("type"), where, "type")
        role = optional_text(item.get("role"), where, "role")
        if kind in (None, "message") and role is not None:
            item.pop("type", None)
            del item["role"]
            if role == "assistant":
                if results:
                    flush()
                blocks = _read_parts(item, "output_text", where)
                marks = _item_marks(item)
                if not blocks:  # an empty assistant item: keep it as an (empty, invalid) message of its own
                    flush()
                    out.append(Message("assistant", (), meta=marks))
                    continue
                blocks[0] = _with_extra(blocks[0], marks)
                turn.extend(blocks)
            elif role in _INPUT_ROLES:
                flush()
                if role == "developer":
                    item["role"] = "developer"
                blocks = _read_parts(item, "input_text", where)
                out.append(Message(_INPUT_ROLES[role], tuple(blocks), meta=extra_for(NS, item, _SENT_MESSAGE)))
            else:
                raise MessageFormatError(f"{where}: unknown role {role!r}; "
                                         "expected user, assistant, system or developer")
        elif kind in _CALLS:
            if results:
                flush()
            call = _read_call(item, where)
            names[call.id] = call.name
            turn.append(call)
        elif kind == "reasoning":
            if results:
                flush()
            turn.append(_read_reasoning(item, where))
        elif kind in _OUTPUTS:
            if turn:
                flush()
            results.append(_read_output(item, names, where))
        elif kind is None:
            raise MessageFormatError(f"{where}: an item needs a `type` (or a `role` for a message)")
        elif str(kind).endswith("_call"):
            if results:
                flush()
            turn.append(unsupported(NS, raw, item=True))
        else:
            flush()
            out.append(Message("user", (unsupported(NS, raw, item=True),)))
    flush()
    return out


def to_openai_responses(messages: Sequence[Message]) -> list[dict[str, Any]]:
    messages = canonical(messages, "to_openai_responses")
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message.role == "assistant":
            _write_assistant(message, out)
        elif message.role == "tool":
            for block in message.blocks:
                if not isinstance(block, ToolResult):
                    raise MessageFormatError(f"message {index}: a tool message may hold only tool results, "
                                             f"not {block.type}")
                out.append(_write_output(block))
        else:
            out.append(_write_input_message(message))
    return out


# -- reading ----------------------------------------------------------------------------------------


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise MessageFormatError(f"{where}: text must be a string, got {type(value).__name__}")
    return value


def _item_marks(item: Mapping[str, Any]) -> dict[str, Any]:
    """What the first block of an assistant message item carries: the item's fields (the key is there
    even when empty: it marks where an item starts) and, apart, those a request does not take."""
    marks = extra_for(NS_ITEM, item, _SENT_MESSAGE)
    marks.setdefault(NS_ITEM, {})
    if NS_ITEM + UNSENT_SUFFIX in marks:
        marks[_UNSENT] = marks.pop(NS_ITEM + UNSENT_SUFFIX)
    return marks


def _with_extra(block: Block, marks: Mapping[str, Any]) -> Block:
    extra = {**block.extra, **marks}
    if isinstance(block, Text):
        return Text(block.text, extra)
    if isinstance(block, Image):
        return Image(block.media_type, block.data, block.url, block.width, block.height, extra)
    raise TypeError(f"unexpected block {block.type}")


def _read_parts(item: dict[str, Any], default_text: str, where: str) -> list[Block]:
    """Content parts as blocks; None, "" and [] stay in `item` so they are written back as given."""
    content = item.get("content")
    if content is None or content == "" or content == []:
        return []
    del item["content"]
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        raise MessageFormatError(f"{where}: content must be a string or a list of parts, got {type(content).__name__}")
    return [_read_part(part, default_text, f"{where}, part {n}") for n, part in enumerate(content)]


def _read_part(raw: Any, default_text: str, where: str) -> Text | Image:
    part = dict(require_mapping(raw, where))
    kind = part.pop("type", None)
    if kind in ("input_text", "output_text"):
        text = _text(part.pop("text", None), where)
        if kind != default_text:
            part["type"] = kind
        return Text(text, extra_for(NS, part))
    if kind == "refusal":
        text = _text(part.pop("refusal", None), where)
        return Text(text, {NS: {**part, "type": "refusal"}})
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        url = part.pop("image_url")
        return read_image_url(url, NS, part)
    return unsupported(NS, raw)


def _read_call(item: dict[str, Any], where: str) -> ToolCall:
    kind = item.pop("type")
    call_id = _text(item.pop("call_id", None), f"{where}, call_id")
    name = _text(item.pop("name", None), f"{where}, name")
    if kind == "custom_tool_call":
        arguments = item.pop("input", "")
        item["type"] = kind
    else:
        arguments, kept = decode_arguments(item.pop("arguments", ""))
        if kept is not None:
            item["arguments"] = kept
    return ToolCall(call_id, name, arguments, extra_for(NS, item, _SENT_CALL))


def _read_reasoning(item: dict[str, Any], where: str) -> Thinking:
    del item["type"]
    summary = item.get("summary")
    texts: list[str] = []
    if isinstance(summary, list):
        for n, part in enumerate(summary):
            texts.append(_text(require_mapping(part, f"{where}, summary {n}").get("text"), f"{where}, summary {n}"))
        simple = len(summary) == 0 or (
            len(summary) == 1 and summary[0].get("type") == "summary_text" and len(summary[0]) == 2)
        if simple:
            del item["summary"]
    signature = item.get("encrypted_content")
    if isinstance(signature, str):
        del item["encrypted_content"]
    else:
        signature = None
    extra = extra_for(NS, item, _SENT_REASONING)
    extra.setdefault(NS, {})  # present even when empty: it marks the thinking as Responses reasoning
    return Thinking(_SUMMARY_SEPARATOR.join(texts), signature, False, extra)


def _read_output(item: dict[str, Any], names: Mapping[str, str], where: str) -> ToolResult:
    kind = item.pop("type")
    call_id = _text(item.pop("call_id", None), f"{where}, call_id")
    output = item.get("output")
    parts: tuple[Text | Image, ...] = ()
    if isinstance(output, str) and output:
        del item["output"]
        parts = (Text(output),)
    elif isinstance(output, list) and output:
        del item["output"]
        parts = tuple(_read_part(part, "input_text", f"{where}, output {n}") for n, part in enumerate(output))
    if kind != "function_call_output":
        item["type"] = kind
    name = item.get("name")
    name = name if isinstance(name, str) else names.get(call_id)
    return ToolResult(call_id, parts, False, name, extra_for(NS, item, _SENT_OUTPUT))


# -- writing ----------------------------------------------------------------------------------------


def _write_part(block: Block, default_text: str, *, in_message: bool = True) -> dict[str, Any]:
    if isinstance(block, Image):
        block = sendable_image(block)
    if isinstance(block, Image):
        url = write_image_url(block)
        part = put_back({"type": "input_image", "image_url": url}, fields_of(block.extra, NS))
        if in_message:
            part.setdefault("detail", "auto")  # required in message content (optional in outputs)
        return part
    if isinstance(block, Text):
        raw = unsupported_block(block, NS)
        if raw is not None:
            return raw
        extra = dict(fields_of(block.extra, NS))
        kind = extra.pop("type", default_text)
        if kind == "refusal":
            return put_back({"type": "refusal", "refusal": block.text}, extra)
        return put_back({"type": kind, "text": block.text}, extra)
    raise MessageFormatError(f"a message item cannot hold a {block.type} block; repair the history first")


def _write_input_message(message: Message) -> dict[str, Any]:
    fields = fields_of(message.meta, NS)
    role: str = message.role
    if role == "system" and fields.get("role") == "developer":
        role = "developer"
    content = [_write_part(block, "input_text") for block in message.blocks]
    out: dict[str, Any] = {"type": "message", "role": role}
    if content:
        out["content"] = content
    return put_back(out, fields)


def _write_assistant(message: Message, out: list[dict[str, Any]]) -> None:
    if not message.blocks:
        out.append(put_back({"type": "message", "role": "assistant"}, fields_of(message.meta, NS_ITEM)))
        return
    current: list[dict[str, Any]] | None = None  # content of the message item being filled
    for block in message.blocks:
        if isinstance(block, Text | Image):
            raw = unsupported_block(block, NS, item=True) if isinstance(block, Text) else None
            if raw is not None:
                out.append(raw)
                current = None
                continue
            if current is None or NS_ITEM in block.extra:
                current = []
                item = {"type": "message", "role": "assistant", "content": current}
                out.append(put_back(item, fields_of(block.extra, NS_ITEM)))
            current.append(_write_part(block, "output_text"))
        elif isinstance(block, ToolCall):
            out.append(_write_call(block))
            current = None
        elif isinstance(block, Thinking):
            if thinking_written(block, NS):
                out.append(_write_reasoning(block))
                current = None
        else:
            raise MessageFormatError(f"an assistant message cannot hold a {block.type} block; repair the history first")


def _write_call(block: ToolCall) -> dict[str, Any]:
    extra = dict(fields_of(block.extra, NS))
    kind = extra.pop("type", "function_call")
    out: dict[str, Any] = {"type": kind, "call_id": block.id, "name": block.name}
    if kind == "custom_tool_call":
        out["input"] = arguments_string(block.arguments, None)
    else:
        out["arguments"] = arguments_string(block.arguments, extra.pop("arguments", None))
    return put_back(out, extra)


def _write_reasoning(block: Thinking) -> dict[str, Any]:
    extra = dict(fields_of(block.extra, NS))
    kept = extra.pop("summary", None)
    summary: Any
    if isinstance(kept, list) and _SUMMARY_SEPARATOR.join(
            str(p.get("text")) if isinstance(p, Mapping) else "" for p in kept) == block.thinking:
        summary = kept
    else:
        summary = [{"type": "summary_text", "text": block.thinking}] if block.thinking else []
    out: dict[str, Any] = {"type": "reasoning", "summary": summary}
    if block.signature is not None:
        out["encrypted_content"] = block.signature
    return put_back(out, extra)


def _write_output(block: ToolResult) -> dict[str, Any]:
    extra = dict(fields_of(block.extra, NS))
    kind = extra.pop("type", "function_call_output")
    out: dict[str, Any] = {"type": kind, "call_id": block.call_id}
    parts = [_write_part(part, "input_text", in_message=False) for part in block.content]
    if parts:
        single = parts[0]
        plain = len(parts) == 1 and single.get("type") == "input_text" and len(single) == 2
        out["output"] = single["text"] if plain else parts
    put_back(out, extra)
    out.setdefault("output", "")
    return out
