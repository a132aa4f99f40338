"""The canonical message model: every provider format and every session file converts into this.

A `Message` is a role plus a tuple of blocks. Blocks are small frozen dataclasses; anything a provider
sends that the model has no field for is kept in the block's or message's `extra` mapping, so that a
provider payload survives a round trip through the canonical form.

Tool results live in `tool` messages, one or more `ToolResult` blocks each. Anthropic's habit of
putting them inside user messages is undone by its converter (and redone on the way back).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeAlias, final, get_args

from ctxwin.errors import MessageFormatError

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant", "tool")

_EMPTY: Mapping[str, Any] = {}


@final  # readers dispatch on the exact type (`type(block) is Text`), so no subclass may stand in
@dataclass(frozen=True, slots=True)
class Text:
    text: str
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    type: Literal["text"] = field(default="text", init=False, repr=False)


@final
@dataclass(frozen=True, slots=True)
class Thinking:
    """Model reasoning. `signature` is the provider's integrity token; when `redacted` is true the
    provider returned only opaque data, which `thinking` then holds verbatim."""

    thinking: str
    signature: str | None = None
    redacted: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    type: Literal["thinking"] = field(default="thinking", init=False, repr=False)


@final
@dataclass(frozen=True, slots=True)
class Image:
    """An image, inline (`data`, base64) or by `url`. Width and height, when known, let the token
    counter price it without decoding it."""

    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    width: int | None = None
    height: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    type: Literal["image"] = field(default="image", init=False, repr=False)


# What every provider accepts inline: Anthropic takes exactly these four types and at most 5 MB per
# image; OpenAI the same types up to 20 MB. The stricter limits hold, so an image valid here is valid
# for every API ctxwin writes to.
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
MAX_IMAGE_BYTES = 5 * 1024 * 1024  # decoded bytes of one inline image (Anthropic's per-image limit)
IMAGE_PLACEHOLDER = "[image omitted: {problem}]"  # what a request carries instead of an invalid image


def sniff_image_type(head: bytes) -> str | None:
    """The media type the first bytes of an image say it is (PNG, JPEG, GIF, WebP), else None."""
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if head[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_problem(image: Image) -> str | None:
    """Why a provider would refuse this image, or None when it is fine: inline data that is not base64,
    a media type that is not png/jpeg/gif/webp or does not match the bytes, more than MAX_IMAGE_BYTES,
    a URL that is neither http(s) nor a data URL, or no data and no URL at all. (A URL's target cannot
    be checked offline; the provider fetches it.)"""
    data, media_type = image.data, image.media_type
    if data is None:
        url = image.url or ""
        if url.startswith(("http://", "https://")):
            return None
        if not url.startswith("data:"):
            return "no image data and no http(s) URL" if not url else f"unsupported image URL scheme: {url[:20]!r}"
        data = url
    if data.startswith("data:"):
        header, _, data = data.partition(",")
        if ";base64" not in header:
            return "a data URL that is not base64"
        media_type = media_type or header[5:].split(";", 1)[0] or None
    if media_type not in IMAGE_MEDIA_TYPES:
        return f"media type {media_type!r} is not one of {', '.join(IMAGE_MEDIA_TYPES)}"
    compact = "".join(data.split()) if any(c.isspace() for c in data[:4096]) or len(data) % 4 else data
    if len(compact) // 4 * 3 > MAX_IMAGE_BYTES + 2:
        return f"{len(compact) // 4 * 3:,} bytes, over the {MAX_IMAGE_BYTES:,}-byte limit per image"
    try:
        raw = base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        return "the data is not valid base64"
    if not raw:
        return "the image is empty"
    if len(raw) > MAX_IMAGE_BYTES:
        return f"{len(raw):,} bytes, over the {MAX_IMAGE_BYTES:,}-byte limit per image"
    actual = sniff_image_type(raw[:16])
    if actual is None:
        return f"the bytes are not a PNG, JPEG, GIF or WebP image (declared {media_type})"
    if actual != media_type:
        return f"the bytes are {actual}, not the declared {media_type}"
    return None


def image_problems(messages: Iterable[Message]) -> list[tuple[str, int, str]]:
    """(message id, block index, problem) of every image the provider writers will replace by a
    placeholder, tool-result images included: what an engine reports as an event for a request."""
    found = []
    for message in messages:
        for index, block in enumerate(message.blocks):
            parts = block.content if isinstance(block, ToolResult) else (block,)
            for part in parts:
                problem = image_problem(part) if isinstance(part, Image) else None
                if problem is not None:
                    found.append((message.id, index, problem))
    return found


def image_placeholder(problem: str) -> Text:
    """The text part a request carries in place of an image no provider would accept."""
    return Text(IMAGE_PLACEHOLDER.format(problem=problem))


@final
@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the assistant asked for. `arguments` is the decoded JSON object; when a provider sent
    arguments that are not valid JSON, the raw string is kept as is."""

    id: str
    name: str
    arguments: Any = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    type: Literal["tool_call"] = field(default="tool_call", init=False, repr=False)


@final
@dataclass(frozen=True, slots=True)
class ToolResult:
    """The answer to one `ToolCall`. `content` holds text and image parts; `name` is the tool's name
    when the source recorded it (OpenAI chat and Anthropic do not carry it on the result)."""

    call_id: str
    content: tuple[Text | Image, ...] = ()
    is_error: bool = False
    name: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    type: Literal["tool_result"] = field(default="tool_result", init=False, repr=False)

    @property
    def text(self) -> str:
        """The text parts joined by newlines (images left out)."""
        return "\n".join(p.text for p in self.content if isinstance(p, Text))


Block: TypeAlias = Text | Thinking | Image | ToolCall | ToolResult
Part: TypeAlias = Text | Image
# the `type` each block class writes (its field's fixed default), so a new block kind is known at once
BLOCK_TYPES: frozenset[str] = frozenset(
    str(f.default) for cls in get_args(Block) for f in fields(cls) if f.name == "type")
PART_TYPES: frozenset[str] = frozenset({"text", "image"})  # what a tool result may hold
# The fields each block type's reader (`block_from_dict`) cannot do without.
REQUIRED_FIELDS: Mapping[str, tuple[str, ...]] = {"text": ("text",), "thinking": ("thinking",), "image": (),
                                                  "tool_call": ("id", "name"), "tool_result": ("call_id",)}


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    blocks: tuple[Block, ...]
    id: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)
    _key: str | None = field(default=None, compare=False, repr=False)

    @property
    def text(self) -> str:
        """All text blocks joined by newlines (what a person would read as the message)."""
        return "\n".join(b.text for b in self.blocks if isinstance(b, Text))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(b for b in self.blocks if isinstance(b, ToolCall))

    @property
    def tool_results(self) -> tuple[ToolResult, ...]:
        return tuple(b for b in self.blocks if isinstance(b, ToolResult))

    @property
    def content_key(self) -> str:
        """A digest of role and blocks (not id or meta): equal content, equal key. Token counts and
        other per-message caches are keyed by it. Computed once per message object."""
        key = self._key
        if key is None:
            payload = json.dumps(
                [self.role, [block_to_dict(b) for b in self.blocks]],
                ensure_ascii=False,
                sort_keys=True,
                separators=(",", ":"),
            )
            key = hashlib.blake2b(payload.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
            object.__setattr__(self, "_key", key)  # a cache, not state: frozen is about content
        return key

    def replace(self, **changes: Any) -> Message:
        """A copy with some fields changed (and a fresh content key)."""
        fields: dict[str, Any] = {"role": self.role, "blocks": self.blocks, "id": self.id, "meta": self.meta}
        fields.update(changes)
        return Message(**fields)

    def to_dict(self) -> dict[str, Any]:
        return message_to_dict(self)

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Message:
        return message_from_dict(data)


# --------------------------------------------------------------------------------------------------
# Convenience constructors


def text_message(role: Role, text: str, id: str = "", **meta: Any) -> Message:
    return Message(role=role, blocks=(Text(text),), id=id, meta=meta)


def system(text: str, id: str = "") -> Message:
    return text_message("system", text, id)


def user(text: str, id: str = "") -> Message:
    return text_message("user", text, id)


def assistant(text: str = "", *calls: ToolCall, id: str = "") -> Message:
    blocks: tuple[Block, ...] = ((Text(text),) if text else ()) + calls
    return Message(role="assistant", blocks=blocks, id=id)


def tool_result(call_id: str, text: str, *, name: str | None = None, is_error: bool = False,
                id: str = "") -> Message:
    return Message(role="tool", blocks=(ToolResult(call_id, (Text(text),), is_error, name),), id=id)


# --------------------------------------------------------------------------------------------------
# Lossless JSON. Every field is written when it differs from its default, `extra` included, so
# `from_dict(to_dict(m)) == m` and the extras survive too.


def block_to_dict(block: Block) -> dict[str, Any]:
    match block:
        case Text(text=text):
            out: dict[str, Any] = {"type": "text", "text": text}
        case Thinking(thinking=thinking, signature=signature, redacted=redacted):
            out = {"type": "thinking", "thinking": thinking}
            if signature is not None:
                out["signature"] = signature
            if redacted:
                out["redacted"] = True
        case Image():
            out = {"type": "image"}
            for name in ("media_type", "data", "url", "width", "height"):
                value = getattr(block, name)
                if value is not None:
                    out[name] = value
        case ToolCall(id=call_id, name=name, arguments=arguments):
            out = {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}
        case ToolResult(call_id=call_id, content=content, is_error=is_error, name=name):
            out = {"type": "tool_result", "call_id": call_id, "content": [block_to_dict(p) for p in content]}
            if is_error:
                out["is_error"] = True
            if name is not None:
                out["name"] = name
        case _:
            raise MessageFormatError(f"not a block: {block!r}",
                                     "blocks are Text, Thinking, Image, ToolCall or ToolResult")
    if block.extra:
        out["extra"] = dict(block.extra)
    return out


def block_from_dict(data: Mapping[str, Any]) -> Block:
    """The block `block_to_dict` wrote; anything else is a `MessageFormatError` saying what is wrong."""
    try:
        return _read_block(data)
    except MessageFormatError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError, RecursionError) as error:
        problem = _block_problem(data, BLOCK_TYPES) or f"{type(error).__name__}: {error}"
        raise MessageFormatError(f"not a block: {problem}", "pass what block_to_dict() writes") from None


def _read_block(data: Mapping[str, Any]) -> Block:
    kind = data.get("type")
    extra = dict(data.get("extra") or _EMPTY)
    if kind == "text":
        return Text(str(data["text"]), extra)
    if kind == "thinking":
        return Thinking(str(data["thinking"]), data.get("signature"), bool(data.get("redacted", False)), extra)
    if kind == "image":
        return Image(data.get("media_type"), data.get("data"), data.get("url"), data.get("width"),
                     data.get("height"), extra)
    if kind == "tool_call":
        return ToolCall(str(data["id"]), str(data["name"]), data.get("arguments", {}), extra)
    if kind == "tool_result":
        parts = tuple(_part_from_dict(p) for p in data.get("content", ()))
        return ToolResult(str(data["call_id"]), parts, bool(data.get("is_error", False)), data.get("name"), extra)
    raise MessageFormatError(f"unknown block type {kind!r}; expected text, thinking, image, tool_call or tool_result")


def _part_from_dict(data: Mapping[str, Any]) -> Part:
    block = _read_block(data)
    if not isinstance(block, Text | Image):
        raise MessageFormatError(f"a tool result may hold only text and image parts, not {block.type!r}")
    return block


def message_to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "blocks": [block_to_dict(b) for b in message.blocks]}
    if message.id:
        out["id"] = message.id
    if message.meta:
        out["meta"] = dict(message.meta)
    return out


def message_from_dict(data: Mapping[str, Any]) -> Message:
    """The message `message_to_dict` wrote. Anything else is a `MessageFormatError` saying what is wrong
    (see `message_problem`)."""
    try:
        role = data.get("role")
        if role not in ROLES:
            raise MessageFormatError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        blocks = tuple(_read_block(b) for b in data.get("blocks", ()))
        return Message(role=role, blocks=blocks, id=str(data.get("id", "")), meta=dict(data.get("meta") or _EMPTY))
    except MessageFormatError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError, RecursionError) as error:
        # the success path pays nothing for the check; a failure says what is wrong instead of what tripped
        problem = message_problem(data) or f"{type(error).__name__}: {error}"
        raise MessageFormatError(f"not a message: {problem}", "pass what Message.to_dict() writes") from None


def message_problem(data: Any) -> str | None:
    """Why `data` cannot be read as a message (`message_from_dict`), or None: an object with a known
    role, `blocks` a list of objects each of a known type with the fields its reader needs (a tool
    result's content a list of text and image parts), `meta` and each block's `extra` objects. Cheap
    enough to run on every append."""
    if not isinstance(data, Mapping):
        return f"a message is an object, not {type(data).__name__}"
    role = data.get("role")
    if not isinstance(role, str) or role not in ROLES:  # (a list is unhashable: no set look-up for it)
        return f"unknown role {role!r}; expected one of {', '.join(ROLES)}"
    meta = data.get("meta")
    if meta is not None and not isinstance(meta, Mapping):
        return f"'meta' is a {type(meta).__name__}, not an object"
    blocks = data.get("blocks", ())
    if not isinstance(blocks, list | tuple):
        return f"'blocks' is a {type(blocks).__name__}, not a list"
    for index, block in enumerate(blocks):
        problem = _block_problem(block, BLOCK_TYPES)
        if problem is None and block["type"] == "tool_result":
            parts = block.get("content", ())
            if not isinstance(parts, list | tuple):
                problem = f"'content' is a {type(parts).__name__}, not a list"
            for at, part in enumerate(parts if problem is None else ()):
                problem = problem or _block_problem(part, PART_TYPES, f"content[{at}] ")
        if problem is not None:
            return f"blocks[{index}] {problem}"
    return None


def _block_problem(block: Any, types: frozenset[str], where: str = "") -> str | None:
    if not isinstance(block, Mapping):
        return f"{where}is a {type(block).__name__}, not an object"
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in types:
        return f"{where}has unknown type {kind!r}"
    missing = [name for name in REQUIRED_FIELDS.get(kind, ()) if name not in block]
    if missing:
        return f"{where}({kind}) has no {', '.join(repr(m) for m in missing)}"
    extra = block.get("extra")
    return f"{where}({kind}) 'extra' is a {type(extra).__name__}, not an object" \
        if extra is not None and not isinstance(extra, Mapping) else None


def dumps(messages: Iterable[Message]) -> str:
    """JSON Lines, one message per line."""
    return "".join(json.dumps(message_to_dict(m), ensure_ascii=False) + "\n" for m in messages)


def loads(text: str) -> list[Message]:
    return [message_from_dict(json.loads(line)) for line in text.splitlines() if line.strip()]


def stable_id(prefix: str, *parts: Any) -> str:
    """A short deterministic id from arbitrary JSON-able parts: the same input always gives the same
    id, so importing a file twice gives the same messages."""
    payload = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str)
    return f"{prefix}{hashlib.blake2b(payload.encode('utf-8', 'surrogatepass'), digest_size=8).hexdigest()}"


def assign_ids(messages: Iterable[Message], prefix: str = "m") -> list[Message]:
    """Give every message without an id one derived from its position and content: stable across
    runs, unique within the list even when two messages are equal."""
    out = []
    for index, message in enumerate(messages):
        if not message.id:
            message = message.replace(id=stable_id(f"{prefix}-", index, message.content_key))
        out.append(message)
    return out
