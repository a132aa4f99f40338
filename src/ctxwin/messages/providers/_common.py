"""Helpers the three provider converters share: extras, tool-call arguments, data URLs, blocks that the
canonical model has no type for, and which thinking blocks a provider can take back.

Extras are namespaced by format: a block's or message's fields that the model has no place for are kept
under `extra[<format>]` (`meta[<format>]` for messages), and only the writer of that same format puts them
back. Anthropic's `cache_control` therefore returns to Anthropic and never leaks into an OpenAI request.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from ctxwin.errors import MessageFormatError
from ctxwin.messages.model import Block, Image, Message, Text, Thinking, image_placeholder, image_problem

ANTHROPIC: Final = "anthropic"
OPENAI_CHAT: Final = "openai_chat"
OPENAI_RESPONSES: Final = "openai_responses"

UNSUPPORTED = "unsupported"  # extra key of a placeholder Text standing for a block/item of a type we do not model
UNSENT_SUFFIX = "_unsent"  # meta/extra key suffix for kept fields a request does not take
RAW_ARGUMENTS = "raw_arguments"  # the key that wraps non-JSON tool arguments in an Anthropic `input` object

_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+);base64,(.*)$", re.DOTALL)
_EMPTY: Mapping[str, Any] = {}


def fields_of(extra: Mapping[str, Any], fmt: str) -> Mapping[str, Any]:
    """The extra fields a block or message carries for one format (empty when none)."""
    value = extra.get(fmt)
    return value if isinstance(value, Mapping) else _EMPTY


def extra_for(fmt: str, fields: Mapping[str, Any], sent: frozenset[str] | None = None) -> dict[str, Any]:
    """The `extra` (or `meta`) entry for fields we have no place for. With `sent` (the fields a request
    takes at this level), the others go to `<fmt>_unsent`: kept, so nothing is lost, but not written
    back, since the APIs reject fields they do not know (a recorded response's `model` or `usage`, a
    harness's own bookkeeping)."""
    if not fields:
        return {}
    if sent is None:
        return {fmt: dict(fields)}
    out: dict[str, Any] = {}
    kept = {k: v for k, v in fields.items() if k in sent}
    unsent = {k: v for k, v in fields.items() if k not in sent}
    if kept:
        out[fmt] = kept
    if unsent:
        out[f"{fmt}{UNSENT_SUFFIX}"] = unsent
    return out


def put_back(out: dict[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """Adds the kept fields the writer did not set itself (the writer's own values win)."""
    for key, value in fields.items():
        if key not in out:
            out[key] = value
    return out


def require_list(value: Any, what: str, items: str) -> list[Any]:
    """`value` as a list when it is a JSON array (or another iterable that is not text or an object);
    anything else is a `MessageFormatError` naming what was given."""
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise MessageFormatError(f"{what} takes a list of {items}, not {type(value).__name__}",
                                 f"pass the {items} as a list")
    return list(value)


def canonical(messages: Any, what: str) -> Sequence[Message]:
    """`messages` when it is a list of canonical `Message`s (the writers' input); anything else is a
    `MessageFormatError` naming the first item that is not one."""
    listed = messages if isinstance(messages, list | tuple) else require_list(messages, what, "Messages")
    for index, message in enumerate(listed):
        if not isinstance(message, Message):
            raise MessageFormatError(f"{what}: item {index} is a {type(message).__name__}, not a Message",
                                     "convert provider dicts first (from_anthropic, from_openai_chat, ...)")
    return listed


def optional_text(value: Any, where: str, field: str) -> str | None:
    """A field that is a string when present (a role, a type); anything else is a `MessageFormatError`."""
    if value is not None and not isinstance(value, str):
        raise MessageFormatError(f"{where}: `{field}` must be a string, got {type(value).__name__}")
    return value


def require_mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MessageFormatError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


# -- tool-call arguments ----------------------------------------------------------------------------


def encode_arguments(arguments: Any) -> str:
    """Arguments as the JSON string OpenAI sends (compact, non-ASCII kept); a raw string stays as is."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def decode_arguments(raw: Any) -> tuple[Any, str | None]:
    """(arguments, raw string to keep). A JSON object decodes to a dict; anything else (invalid JSON, a
    JSON value that is not an object) stays the raw string. When the dict would not re-encode to the
    same bytes (spacing, key escapes, number spelling), the raw string is returned too so the writer can
    send the original bytes back."""
    if not isinstance(raw, str):
        return raw, None  # already decoded (some clients send an object); nothing to keep
    try:
        decoded = json.loads(raw)
    except ValueError:
        return raw, None
    if not isinstance(decoded, dict):
        return raw, None
    return decoded, (None if encode_arguments(decoded) == raw else raw)


def arguments_string(arguments: Any, kept: Any) -> str:
    """The string to send: the kept original when it still decodes to the same arguments."""
    if isinstance(kept, str) and not isinstance(arguments, str):
        try:
            if json.loads(kept) == arguments:
                return kept
        except ValueError:
            pass
    return encode_arguments(arguments)


def arguments_object(arguments: Any) -> Any:
    """Arguments as the JSON object Anthropic's `tool_use.input` requires: a string that decodes to an
    object is decoded, an empty string is `{}`, any other string is wrapped as `{"raw_arguments": s}`."""
    if not isinstance(arguments, str):
        return arguments
    if not arguments.strip():
        return {}
    try:
        decoded = json.loads(arguments)
    except ValueError:
        decoded = None
    return decoded if isinstance(decoded, dict) else {RAW_ARGUMENTS: arguments}


# -- images -----------------------------------------------------------------------------------------


def read_image_url(url: str, fmt: str, fields: Mapping[str, Any]) -> Image:
    """The image an OpenAI `image_url` stands for: a `data:<type>;base64,<data>` URL becomes media type
    and data, any other URL stays a URL; `fields` are the part's other fields, kept as `fmt`'s extras."""
    match = _DATA_URL.match(url)
    if match:
        return Image(media_type=match.group(1), data=match.group(2), extra=extra_for(fmt, fields))
    return Image(url=url, extra=extra_for(fmt, fields))


def write_image_url(image: Image) -> str:
    """The `image_url` OpenAI takes for an image: its data as a data URL, else its URL."""
    if image.data is not None:
        return f"data:{image.media_type or 'application/octet-stream'};base64,{image.data}"
    return image.url or ""


def sendable_image(image: Image) -> Image | Text:
    """The image as a request may carry it: itself, or the placeholder text for an image the API would
    refuse (it would refuse the whole request; the log keeps the image)."""
    problem = image_problem(image)
    return image if problem is None else image_placeholder(problem)


# -- blocks we have no type for ---------------------------------------------------------------------


def unsupported(fmt: str, block: Mapping[str, Any], *, item: bool = False) -> Text:
    """A placeholder Text for a block (or, with `item`, a Responses item) of a type the canonical model
    does not have (documents, audio, server tools, ...). The writer of the same format sends the original
    back verbatim; other formats see the placeholder text."""
    kind = block.get("type", "?")
    info: dict[str, Any] = {"format": fmt, "block": dict(block)}
    if item:
        info["item"] = True
    return Text(f"[{fmt} {kind} omitted]", {UNSUPPORTED: info})


def unsupported_block(text: Text, fmt: str, *, item: bool = False) -> dict[str, Any] | None:
    """The original block (or item) behind a placeholder, when it came from `fmt`."""
    info = text.extra.get(UNSUPPORTED) if text.extra else None
    if isinstance(info, Mapping) and info.get("format") == fmt and bool(info.get("item")) == item:
        return dict(info["block"])
    return None


# -- thinking is bound to the provider that signed it -----------------------------------------------


def thinking_written(block: Thinking, fmt: str) -> bool:
    """Whether the writer for `fmt` sends this thinking block. OpenAI Chat has no field for reasoning.
    Responses takes back only its own reasoning items (they need their `rs_` id). Anthropic takes signed
    or redacted thinking that did not come from Responses (whose encrypted content is no Anthropic
    signature)."""
    if fmt == OPENAI_CHAT:
        return False
    from_responses = OPENAI_RESPONSES in block.extra
    if fmt == OPENAI_RESPONSES:
        return from_responses
    return not from_responses and (block.redacted or block.signature is not None)


def read_content(fields: dict[str, Any], where: str, read_item: Callable[[Any, str], Block],
                 item: str = "block") -> list[Block]:
    """A message's `content` (a string or a list) as blocks, each list item read by `read_item`.
    None, "" and [] stay in `fields` so that they are written back as given."""
    content = fields.get("content")
    if content is None or content == "" or content == []:
        return []
    del fields["content"]
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        raise MessageFormatError(f"{where}: content must be a string or a list of {item}s, "
                                 f"got {type(content).__name__}")
    return [read_item(entry, f"{where}, {item} {n}") for n, entry in enumerate(content)]
