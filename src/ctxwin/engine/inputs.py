"""What the engine accepts from its callers, checked once at the door: messages in any of the forms
`append` takes, tool schemas, limits, the parts it is built from. Each refusal is an `InputError`
(`MessageFormatError` for messages, `ArgumentError` for arguments) that says what to pass."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxwin.errors import ArgumentError, MessageFormatError
from ctxwin.messages import Message
from ctxwin.messages.providers import from_provider_dict


def as_messages(value: Any) -> list[Message]:
    if isinstance(value, Message):
        return [value]
    if isinstance(value, str | bytes):
        raise MessageFormatError("append() takes messages, not text",
                         'wrap it: Message("user", (Text(...),)) or {"role": "user", "content": ...}')
    if isinstance(value, Mapping):
        return from_provider_dict(value)
    if not isinstance(value, Iterable):
        raise MessageFormatError(f"append() takes a message, a provider dict or a list of them, not "
                                 f"{type(value).__name__}",
                                 'pass Message("user", (Text(...),)) or {"role": "user", "content": ...}')
    out: list[Message] = []
    for item in value:
        out.extend(as_messages(item))
    return out


def tool_schemas(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Iterable):
        raise ArgumentError(f"tools is a list of tool schemas, not {type(tools).__name__}",
                            'pass a list of provider tool schemas, e.g. [{"name": "read", "input_schema": {...}}]')
    return [tool_schema(t) for t in tools]


def tool_schema(tool: Any) -> dict[str, Any]:
    if not isinstance(tool, Mapping) or not isinstance(tool.get("name", tool.get("function")), str | Mapping):
        raise ArgumentError(f"a tool schema is a dict with a name, not {tool!r:.80}",
                            'pass provider tool schemas, e.g. {"name": "read", "description": ..., '
                            '"input_schema": {...}}')
    return dict(tool)


def check_limit(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ArgumentError(f"{name} must be a positive number of tokens (got {value!r})",
                            f"leave {name} unset to take the model registry's value")


def check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ArgumentError(f"{name} must be a whole number of tokens, 0 or more (got {value!r})",
                            f"give {name} as an int")


def check_text(name: str, value: Any) -> None:
    """`value` is a string or None."""
    if value is not None and not isinstance(value, str):
        raise ArgumentError(f"{name} is text, not {type(value).__name__}", f"pass {name} as a str (or leave it unset)")


def check_callable(name: str, value: Any, what: str) -> None:
    """`value` is callable or None."""
    if value is not None and not callable(value):
        raise ArgumentError(f"{name} is {what}, not {type(value).__name__}", "pass a function (or leave it unset)")


def check_provides(name: str, value: Any, methods: Sequence[str], example: str) -> None:
    """`value` is None or has every one of `methods` (the protocol it stands for, checked by shape)."""
    missing = [m for m in methods if not callable(getattr(value, m, None))]
    if value is not None and missing:
        raise ArgumentError(f"{name} is a {type(value).__name__}, which has no {', '.join(missing)}",
                            f"pass {example} (or leave it unset)")


def describe_error(error: object) -> str:
    try:
        return str(error)[:200]
    except Exception:  # an exception whose __str__ raises must not escape recover()
        return f"<{type(error).__name__}>"


def short_tokens(tokens: int) -> str:
    return f"{tokens / 1000:.0f}K" if tokens >= 1000 else str(tokens)
