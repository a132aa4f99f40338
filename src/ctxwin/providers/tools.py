"""Tool definitions and tool choice in each API's shape. A client takes `ToolDef`s or any of the shapes
the APIs and ctxwin's tool registry use (`{"name", "description", "parameters" | "input_schema"}`,
Chat's `{"type": "function", "function": {...}}`, Responses' `{"type": "function", "name", ...}`), and
sends them the way its API wants them; anything else is an `InputError` naming the bad entry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ctxwin.errors import InputError
from ctxwin.providers.base import ToolChoice, ToolDef

Api = Literal["anthropic", "chat", "responses"]


def tool_def(tool: ToolDef | Mapping[str, Any], where: str = "tools[0]") -> ToolDef:
    """One tool definition, from any of the accepted shapes."""
    if isinstance(tool, ToolDef):
        return tool
    if not isinstance(tool, Mapping):
        raise InputError(f"{where}: a tool must be a ToolDef or a mapping, not {type(tool).__name__}",
                         'pass {"name": ..., "description": ..., "parameters": {JSON Schema}}')
    inner = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
    name = inner.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"{where}: the tool has no name", 'give every tool a "name" string')
    description = inner.get("description") or ""
    schema = inner.get("parameters", inner.get("input_schema", {"type": "object", "properties": {}}))
    if not isinstance(description, str) or not isinstance(schema, Mapping):
        raise InputError(f"{where} ({name}): description must be a string and parameters a JSON Schema object",
                         "fix the tool definition")
    return ToolDef(name, description, dict(schema))


def tool_defs(tools: Sequence[ToolDef | Mapping[str, Any]] | None) -> list[ToolDef]:
    if tools is None:
        return []
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise InputError(f"tools must be a list of tool definitions, not {type(tools).__name__}",
                         "pass a list, e.g. ctxwin.tools.registry.schemas('jsonschema')")
    return [tool_def(tool, f"tools[{i}]") for i, tool in enumerate(tools)]


def tools_payload(api: Api, tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    if api == "anthropic":
        return [{"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in tools]
    if api == "chat":
        return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": dict(t.parameters)}} for t in tools]
    return [{"type": "function", "name": t.name, "description": t.description, "parameters": dict(t.parameters)}
            for t in tools]


def tool_choice_payload(api: Api, choice: ToolChoice, tools: Sequence[ToolDef]) -> Any:
    """ "auto", "none", "required" (some tool) or a tool's name, in the API's own spelling."""
    if not isinstance(choice, str) or not choice:
        raise InputError("tool_choice must be 'auto', 'none', 'required' or a tool's name", "pass one of those")
    if choice not in ("auto", "none", "required") and choice not in {t.name for t in tools}:
        raise InputError(f"tool_choice {choice!r} names no tool of this request",
                         f"use one of: auto, none, required, {', '.join(t.name for t in tools) or '(no tools)'}")
    if api == "anthropic":
        return {"type": "any"} if choice == "required" else {"type": choice} if choice in ("auto", "none") \
            else {"type": "tool", "name": choice}
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}} if api == "chat" else {"type": "function", "name": choice}


def add_tools(api: Api, payload: dict[str, Any], tools: Sequence[ToolDef | Mapping[str, Any]] | None,
              tool_choice: ToolChoice | None) -> dict[str, Any]:
    """`payload` with the tools and the tool choice in the API's shape (unchanged when there are none)."""
    defs = tool_defs(tools)
    if defs:
        payload["tools"] = tools_payload(api, defs)
    if tool_choice is not None:
        payload["tool_choice"] = tool_choice_payload(api, tool_choice, defs)
    return payload
