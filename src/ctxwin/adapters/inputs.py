"""What the adapters take from a framework, checked at the door the way the engine checks its own
(`ctxwin.engine.inputs`): a history is a list of the framework's messages. No framework is imported
here; each adapter passes its own message classes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ctxwin.errors import InputError


def list_of(value: Any, kinds: type | tuple[type, ...], what: str, hint: str) -> list[Any]:
    """`value` as a list when it is a list (or another iterable that is neither text nor a mapping)
    of `kinds`; anything else is an `InputError` naming what was given, with `hint`."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InputError(f"{what} takes a list, not {type(value).__name__}", hint)
    items = list(value)
    for index, item in enumerate(items):
        if not isinstance(item, kinds):
            raise InputError(f"{what}: item {index} is a {type(item).__name__}", hint)
    return items
