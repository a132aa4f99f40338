"""Tool definitions and tool choice in each API's shape. A client takes `ToolDef`s or any of the shapes
the APIs and ctxwin's tool registry use (`{"name", "description", "parameters" | "input_schema"}`,
Chat's `{"type": "function", "function": {...}}`, Responses' `{"type": "function", "name", ...}`), and
sends them the way its API wants them; anything else is an `InputError` naming the bad entry. Reading and
writing the shapes is `ctxwin.messages.tools`, the one tool-schema conversion."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ctxwin.errors import InputError
from ctxwin.messages.tools import SchemaFormat, as_tool_schema, to_format
from ctxwin.providers.interface import ToolChoice, ToolDef

Api = Literal["anthropic", "chat", "responses"]


tool_def = as_tool_schema  # one tool definition, from any of the accepted shapes


def tool_defs(tools: Sequence[ToolDef | Mapping[str, Any]] | None) -> list[ToolDef]:
    if tools is None:
        return []
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise InputError(f"tools must be a list of tool definitions, not {type(tools).__name__}",
                         "pass a list, e.g. ctxwin.tools.registry.schemas('openai')")
    return [as_tool_schema(tool, f"tools[{i}]") for i, tool in enumerate(tools)]


FORMAT_OF: dict[str, SchemaFormat] = {"anthropic": "anthropic", "chat": "openai", "responses": "openai-responses"}


def tools_payload(api: Api, tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    return [to_format(tool, FORMAT_OF[api]) for tool in tools]


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
