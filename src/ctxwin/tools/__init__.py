"""Budgeted workspace tools: read, grep, find, ls, shell, and tools over spilled output, each capped
and paged with notices that tell the model exactly how to get more. A harness offers them as they are
(`schemas(...)`, `run_tool(...)`), builds a `Registry` with its own tools added (`@tool`, or
`registry.register(fn)`: schemas are generated from the function's signature and docstring), or calls
the functions directly.

Layer: live (above the engine). Imports errors, messages, tokens and store; nothing above it.

Imports: everything up to the engine (store for blobs, tokens for budgets); never the agent or the edges.
"""

from ctxwin.tools.base import Limits, ToolError, ToolOutput
from ctxwin.tools.fit import CellCut, SliceResult, fit_slice
from ctxwin.tools.read import ReadRecord, ReadState, read
from ctxwin.tools.registry import (
    BUILTIN_TOOLS,
    READ_TOOL_NAMES,
    TOOLS,
    Registry,
    available,
    default_registry,
    run_tool,
    schemas,
)
from ctxwin.tools.search import find, find_rg, grep, ls
from ctxwin.tools.shell import shell
from ctxwin.tools.spec import SchemaFormat, Tool, ToolSpec, spec_of, to_format, tool, validate_args
from ctxwin.tools.spilled import grep_spilled, json_preview, query_json, read_spilled
from ctxwin.tools.truncate import Truncation, format_size, truncate_head, truncate_tail
from ctxwin.tools.workspace import DEFAULT_DENY, Resolved, Workspace

__all__ = [
    "BUILTIN_TOOLS",
    "DEFAULT_DENY",
    "READ_TOOL_NAMES",
    "TOOLS",
    "CellCut",
    "Limits",
    "ReadRecord",
    "ReadState",
    "Registry",
    "Resolved",
    "SchemaFormat",
    "SliceResult",
    "Tool",
    "ToolError",
    "ToolOutput",
    "ToolSpec",
    "Truncation",
    "Workspace",
    "available",
    "default_registry",
    "find",
    "find_rg",
    "fit_slice",
    "format_size",
    "grep",
    "grep_spilled",
    "json_preview",
    "ls",
    "query_json",
    "read",
    "read_spilled",
    "run_tool",
    "schemas",
    "shell",
    "spec_of",
    "to_format",
    "tool",
    "truncate_head",
    "truncate_tail",
    "validate_args",
]
