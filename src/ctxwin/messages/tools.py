"""Tool schemas: one tool as a model sees it (name, description, JSON Schema of its arguments), read
from any shape ctxwin is handed and written in each provider's format. This is the one conversion: the
tool registry (`ToolSpec.to_format`), `Prepared.to_anthropic()` / `to_openai_*()` and the provider
clients all go through it. It sits at the messages layer because all three of those use it.

Shapes read: a `ToolSchema`, anything with `name`, `description` and `parameters` attributes (a
`ToolSpec`), the plain/Anthropic dict `{"name", "description", "parameters" | "input_schema"}`, Chat's
`{"type": "function", "function": {...}}` and Responses' `{"type": "function", "name", ...}`.
Formats written: `openai` (Chat Completions), `openai-responses`, `anthropic`, `jsonschema`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ctxwin.errors import InputError

SchemaFormat = Literal["openai", "openai-responses", "anthropic", "jsonschema"]
FORMATS: tuple[str, ...] = ("openai", "openai-responses", "anthropic", "jsonschema")
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _no_arguments() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ToolSchema:
    """A tool the model may call: its name, what it does, and the JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=_no_arguments)


class HasToolSchema(Protocol):
    """What `to_format` reads: a `ToolSchema`, a `ToolSpec`, or anything else with these fields."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...


def as_tool_schema(tool: Any, where: str = "tools[0]") -> ToolSchema:
    """`tool`, in any of the shapes above, as a `ToolSchema`; anything else is an `InputError` naming
    `where` (the entry's place in the caller's list)."""
    if isinstance(tool, ToolSchema):
        return tool
    if not isinstance(tool, Mapping):
        fields = {key: getattr(tool, key, None) for key in ("name", "description", "parameters")}
        if fields["name"] is None:
            raise InputError(f"{where}: a tool must be a ToolSchema, a ToolSpec or a mapping, not "
                             f"{type(tool).__name__}",
                             'pass {"name": ..., "description": ..., "parameters": {JSON Schema}}')
        tool = fields
    inner = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    name = inner.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: the tool has no name", 'give every tool a "name" string')
    description = inner.get("description") or ""
    parameters = inner.get("parameters")
    if parameters is None:
        parameters = inner.get("input_schema")
    if parameters is None:
        parameters = _no_arguments()
    if not isinstance(description, str) or not isinstance(parameters, Mapping):
        raise InputError(f"{where} ({name}): description must be a string and parameters a JSON Schema object",
                         "fix the tool definition")
    return ToolSchema(name, description, dict(parameters))


def to_format(tool: HasToolSchema, format: SchemaFormat) -> dict[str, Any]:
    """The tool definition in a provider's format: `openai` (Chat Completions function tools),
    `openai-responses`, `anthropic`, or `jsonschema` (one JSON Schema document)."""
    params = dict(tool.parameters)
    if format == "openai":
        return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                 "parameters": params}}
    if format == "openai-responses":
        return {"type": "function", "name": tool.name, "description": tool.description, "parameters": params}
    if format == "anthropic":
        return {"name": tool.name, "description": tool.description, "input_schema": params}
    if format == "jsonschema":
        return {"$schema": JSON_SCHEMA_DIALECT, "title": tool.name, "description": tool.description, **params}
    raise InputError(f"unknown schema format {format!r}", f"use one of: {', '.join(FORMATS)}")


__all__ = ["FORMATS", "HasToolSchema", "SchemaFormat", "ToolSchema", "as_tool_schema", "to_format"]
