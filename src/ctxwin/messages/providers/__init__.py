"""Provider formats, both ways: OpenAI Chat Completions, OpenAI Responses and Anthropic Messages.

Each module's docstring lists exactly what a round trip normalizes. Fields the canonical model has no
place for are kept per format (`extra[<format>]`, `meta[<format>]`) and written back only by that
format's writer.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Literal

from ctxwin.errors import MessageFormatError
from ctxwin.messages.model import Message
from ctxwin.messages.providers._common import RAW_ARGUMENTS, arguments_object, canonical
from ctxwin.messages.providers.anthropic import from_anthropic, to_anthropic
from ctxwin.messages.providers.openai_chat import from_openai_chat, to_openai_chat
from ctxwin.messages.providers.openai_responses import from_openai_responses, to_openai_responses

Format = Literal["anthropic", "openai_chat", "openai_responses"]

_RESPONSES_ITEMS = frozenset({
    "message", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output",
    "reasoning", "item_reference", "web_search_call", "file_search_call", "computer_call",
    "computer_call_output", "local_shell_call", "local_shell_call_output", "mcp_call", "compaction",
})
_RESPONSES_PARTS = frozenset({"input_text", "output_text", "input_image", "input_file"})
_ANTHROPIC_PARTS = frozenset({
    "tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document", "search_result",
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "container_upload",
})
_CHAT_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})
_ANTHROPIC_TEXT_FIELDS = frozenset({"cache_control", "citations"})
_CHAT_FIELDS = frozenset({"tool_calls", "tool_call_id", "refusal", "name", "function_call", "audio"})


def detect_format(item: Mapping[str, Any]) -> Format:
    """Which format one provider message (or Responses item) is in. Plain `{"role", "content"}` messages
    with string or text-only content read the same in every format and are reported as `openai_chat`."""
    if not isinstance(item, Mapping):
        raise MessageFormatError(f"a provider message must be a JSON object, got {type(item).__name__}")
    kind = item.get("type")
    if kind is not None and not isinstance(kind, str):
        raise MessageFormatError(f"cannot tell the provider format of {_preview(item)}: its `type` is "
                                 f"{type(kind).__name__}, not a string")
    if kind is not None:
        if kind == "message" and _part_types(item) & (_ANTHROPIC_PARTS | {"text"}):
            return "anthropic"  # an Anthropic response object (Responses message parts are input_/output_text)
        if kind in _RESPONSES_ITEMS:
            return "openai_responses"
        raise MessageFormatError(f"cannot tell the provider format of an item of type {kind!r}; "
                                 f"convert it with from_openai_chat, from_openai_responses or from_anthropic")
    role = item.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise MessageFormatError(f"cannot tell the provider format of {_preview(item)}: it has neither a known `role` "
                                 f"(system, developer, user, assistant, tool) nor a Responses item `type`")
    if role in ("tool", "developer") or _CHAT_FIELDS & item.keys():
        return "openai_chat"
    content = item.get("content")
    if content is None or isinstance(content, str):
        return "openai_chat"
    if not isinstance(content, list):
        raise MessageFormatError(f"cannot tell the provider format of {_preview(item)}: `content` is neither a string "
                                 f"nor a list of parts")
    kinds = _part_types(item)
    if kinds & _ANTHROPIC_PARTS:
        return "anthropic"
    if kinds & _RESPONSES_PARTS:
        return "openai_responses"
    if kinds & _CHAT_PARTS:
        return "openai_chat"
    if kinds <= {"text"}:
        if any(_ANTHROPIC_TEXT_FIELDS & part.keys() for part in content if isinstance(part, Mapping)):
            return "anthropic"
        return "openai_chat"
    unknown = ", ".join(sorted(str(k) for k in kinds - {"text"}))
    raise MessageFormatError(f"cannot tell the provider format of {_preview(item)}: unknown content part types "
                             f"{unknown}")


def from_provider_dict(item: Mapping[str, Any]) -> list[Message]:
    """One provider message or item in any of the three formats, as canonical messages (an Anthropic
    user message with tool results and text gives two). Raises MessageFormatError when the format is
    unclear."""
    fmt = detect_format(item)
    if fmt == "openai_responses":
        return from_openai_responses([item])
    if fmt == "anthropic":
        return from_anthropic([item])
    return from_openai_chat([item])


def _part_types(item: Mapping[str, Any]) -> set[Any]:
    content = item.get("content")
    if not isinstance(content, list):
        return set()
    kinds = (part.get("type") for part in content if isinstance(part, Mapping))
    return {kind if isinstance(kind, Hashable) else repr(kind) for kind in kinds}  # a list as a type is unknown


def _preview(item: Mapping[str, Any]) -> str:
    text = repr(dict(item))
    return text if len(text) <= 120 else text[:117] + "..."


__all__ = [
    "RAW_ARGUMENTS",
    "Format",
    "arguments_object",
    "canonical",
    "detect_format",
    "from_anthropic",
    "from_openai_chat",
    "from_openai_responses",
    "from_provider_dict",
    "to_anthropic",
    "to_openai_chat",
    "to_openai_responses",
]
