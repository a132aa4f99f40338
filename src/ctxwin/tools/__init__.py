"""Budgeted workspace tools: read, grep, find, ls, shell, and tools over spilled output, each capped
and paged with notices that tell the model exactly how to get more. A harness registers them as they
are (`schemas(...)`, `run_tool(...)`) or calls the functions directly."""

from ctxwin.tools.base import Limits, ToolError, ToolOutput
from ctxwin.tools.fit import CellCut, SliceResult, fit_slice
from ctxwin.tools.read import ReadRecord, ReadState, read
from ctxwin.tools.registry import TOOLS, ToolSpec, available, run_tool, schemas
from ctxwin.tools.search import find, find_rg, grep, ls
from ctxwin.tools.shell import shell
from ctxwin.tools.spilled import grep_spilled, json_preview, query_json, read_spilled
from ctxwin.tools.truncate import Truncation, format_size, truncate_head, truncate_tail
from ctxwin.tools.workspace import DEFAULT_DENY, Resolved, Workspace

__all__ = [
    "DEFAULT_DENY",
    "TOOLS",
    "CellCut",
    "Limits",
    "ReadRecord",
    "ReadState",
    "Resolved",
    "SliceResult",
    "ToolError",
    "ToolOutput",
    "ToolSpec",
    "Truncation",
    "Workspace",
    "available",
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
    "truncate_head",
    "truncate_tail",
]
