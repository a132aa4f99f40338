"""What a provider bills for a message beyond its text: per-message framing, tool-call names and ids,
and images, which are priced by their dimensions the way each provider documents it.

One function, `count_message_with`, turns a message into tokens given any text counter, so the exact
and the estimated counters count messages the same way.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import struct
from collections.abc import Callable

from ctxwin.messages import Image, Message, Text, Thinking, ToolCall, ToolResult
from ctxwin.messages.model import image_placeholder, image_problem

MESSAGE_TOKENS = 4  # role and delimiters around every message (OpenAI documents 3 plus 1 per name)
TOOL_CALL_TOKENS = 8  # wrapping of one tool call: type, name and argument delimiters
TOOL_RESULT_TOKENS = 6  # wrapping of one tool result
THINKING_TOKENS = 2  # delimiters of a thinking block

ANTHROPIC_MAX_EDGE = 1568  # Anthropic scales images down so the long edge is at most this many pixels
ANTHROPIC_MAX_TOKENS = 1600  # ... and to at most about this many tokens
ANTHROPIC_PIXELS_PER_TOKEN = 750  # tokens = width * height / 750
OPENAI_MAX_EDGE = 2048  # OpenAI (high detail) first fits the image in 2048 x 2048
OPENAI_SHORT_EDGE = 768  # ... then scales the short edge down to 768
OPENAI_TILE = 512  # ... and bills 170 tokens per 512 px tile plus 85
OPENAI_TILE_TOKENS = 170
OPENAI_BASE_TOKENS = 85
GEMINI_SMALL_EDGE = 384  # Gemini bills 258 tokens for an image with both edges at most 384 px
GEMINI_TILE = 768  # ... otherwise 258 tokens per 768 px tile
GEMINI_TILE_TOKENS = 258
DEFAULT_IMAGE_SIZE = (1092, 1092)  # an image of unknown size is priced as the largest Anthropic bills in full
HEADER_B64_CHARS = 87_384  # base64 characters decoded to find a JPEG's size (64 KiB of image)


def image_tokens(width: int, height: int, pricing: str = "anthropic") -> int:
    """Tokens a provider bills for an image of `width` x `height` pixels.

    `pricing` is "anthropic" (w*h/750 after scaling to a 1568 px long edge and ~1600 tokens),
    "openai" (high detail: 85 + 170 per 512 px tile after fitting 2048 and a 768 px short edge) or
    "gemini" (258 per 768 px tile, or 258 for a small image).
    """
    width, height = max(int(width), 1), max(int(height), 1)
    if pricing == "openai":
        scale = min(1.0, OPENAI_MAX_EDGE / max(width, height))
        w, h = width * scale, height * scale
        scale = min(1.0, OPENAI_SHORT_EDGE / min(w, h))
        w, h = w * scale, h * scale
        return OPENAI_BASE_TOKENS + OPENAI_TILE_TOKENS * math.ceil(w / OPENAI_TILE) * math.ceil(h / OPENAI_TILE)
    if pricing == "gemini":
        if width <= GEMINI_SMALL_EDGE and height <= GEMINI_SMALL_EDGE:
            return GEMINI_TILE_TOKENS
        return GEMINI_TILE_TOKENS * math.ceil(width / GEMINI_TILE) * math.ceil(height / GEMINI_TILE)
    scale = min(1.0, ANTHROPIC_MAX_EDGE / max(width, height))
    pixels = width * height * scale * scale
    return min(math.ceil(pixels / ANTHROPIC_PIXELS_PER_TOKEN), ANTHROPIC_MAX_TOKENS)


def image_size(image: Image) -> tuple[int, int] | None:
    """The image's (width, height): the recorded one, else read from the header of inline data
    (PNG, GIF, WebP, JPEG); None when neither is available."""
    if image.width and image.height:
        return image.width, image.height
    if not image.data:
        return None
    data = image.data
    if data.startswith("data:"):
        data = data.partition(",")[2]
    chunk = data[:HEADER_B64_CHARS]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        head = base64.b64decode(chunk)
    except (binascii.Error, ValueError):
        return None
    return _header_size(head)


def _header_size(head: bytes) -> tuple[int, int] | None:
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        return struct.unpack(">II", head[16:24])
    if head[:4] == b"GIF8" and len(head) >= 10:
        return struct.unpack("<HH", head[6:10])
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 30:
        kind = head[12:16]
        if kind == b"VP8 ":
            w, h = struct.unpack("<HH", head[26:30])
            return w & 0x3FFF, h & 0x3FFF
        if kind == b"VP8L":
            bits = int.from_bytes(head[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if kind == b"VP8X":
            return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    if head[:2] == b"\xff\xd8":
        return _jpeg_size(head)
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(head):
        if head[at] != 0xFF:
            return None
        marker = head[at + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            at += 2
            continue
        length = struct.unpack(">H", head[at + 2:at + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", head[at + 5:at + 9])
            return width, height
        at += 2 + length
    return None


def priced_image(image: Image, pricing: str, count_text: Callable[[str], int] | None = None) -> int:
    """What the image costs as sent: by its dimensions when it is valid; an image the provider writers
    replace by a placeholder (see `image_problem`) costs that placeholder's text."""
    problem = image_problem(image) if count_text is not None else None
    if problem is not None and count_text is not None:
        return count_text(image_placeholder(problem).text)
    size = image_size(image) or DEFAULT_IMAGE_SIZE
    return image_tokens(size[0], size[1], pricing)


def arguments_text(arguments: object) -> str:
    """Tool-call arguments as the model writes them: compact JSON, non-ASCII kept."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"), default=str)


def count_message_with(count_text: Callable[[str], int], message: Message, pricing: str = "anthropic") -> int:
    """Tokens of `message` as billed: framing, text, thinking, tool calls (id, name, JSON arguments),
    tool results (id, text parts, images) and images, with `count_text` for every text."""
    total = MESSAGE_TOKENS
    for block in message.blocks:
        if isinstance(block, Text):
            total += count_text(block.text)
        elif isinstance(block, ToolResult):
            total += TOOL_RESULT_TOKENS + count_text(block.call_id)
            for part in block.content:
                total += count_text(part.text) if isinstance(part, Text) else priced_image(part, pricing, count_text)
        elif isinstance(block, ToolCall):
            total += TOOL_CALL_TOKENS + count_text(block.id) + count_text(block.name)
            total += count_text(arguments_text(block.arguments))
        elif isinstance(block, Thinking):
            total += THINKING_TOKENS + count_text(block.thinking)
        elif isinstance(block, Image):
            total += priced_image(block, pricing, count_text)
    return total
