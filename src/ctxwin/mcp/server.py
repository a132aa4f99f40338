"""The MCP server on the official SDK's low-level `Server`: tools/list from the library's specs (their
own JSON Schemas, converted by the one tool-schema conversion), tools/call run in a worker thread by
`Toolset.call`, whose error outputs become `isError` results (never protocol errors). Served over
stdio or streamable HTTP (uvicorn); HTTP is loopback unless a bearer token guards every request.

The low-level server rather than `MCPServer`'s typed functions: the tools already have their schemas
and argument checks, and a pydantic model generated from the same signatures would state the schema
twice and answer bad arguments with pydantic's messages instead of the library's.
"""

from __future__ import annotations

import hmac
import sys
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

import ctxwin
from ctxwin.messages import Image
from ctxwin.messages.tools import to_format
from ctxwin.tools.base import ToolOutput

from .address import check_exposure
from .tools import ServedTool, Toolset

SERVER_NAME = "ctxwin"
HTTP_PATH = "/mcp"  # the streamable HTTP endpoint
DETAILS_META = "ctxwin/details"  # the `_meta` key carrying a tool's facts (plain JSON, not shown to the model)


def mcp_tool(tool: ServedTool) -> types.Tool:
    """One served tool as MCP lists it (the Anthropic shape is MCP's: name, description, input schema)."""
    shape = to_format(tool, "anthropic")
    return types.Tool(
        name=shape["name"], description=shape["description"], input_schema=shape["input_schema"],
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only, destructive_hint=not tool.read_only,
                                          open_world_hint=False),
    )


def call_result(output: ToolOutput) -> types.CallToolResult:
    """A tool's output as an MCP result: its parts in order (images inline), `isError`, and its facts
    under `_meta`."""
    content: list[types.TextContent | types.ImageContent] = []
    for part in output.parts:
        if isinstance(part, Image) and part.data:
            content.append(types.ImageContent(type="image", data=part.data, mime_type=part.media_type or "image/png"))
        elif isinstance(part, Image):
            content.append(types.TextContent(type="text", text=f"[image: {part.url or 'no data'}]"))
        else:
            content.append(types.TextContent(type="text", text=part.text))
    return types.CallToolResult(content=content, is_error=output.is_error,
                                _meta={DETAILS_META: dict(output.details)} if output.details else None)


def instructions(toolset: Toolset) -> str:
    roots = ", ".join(str(r) for r in toolset.workspace.roots)
    text = (f"ctxwin's budgeted tools over the workspace {roots}. Every output is capped; when more remains "
            "it ends with a notice saying exactly how to get the next part (an offset, a narrower pattern, a "
            "blob handle).")
    if "recall" in toolset.names():
        text += " Refs such as entry:<id> or blob:<hex> in placeholders are read back with recall."
    return text


def build_server(toolset: Toolset) -> Server[Any]:
    """The SDK server answering tools/list and tools/call from `toolset`."""
    listed = types.ListToolsResult(tools=[mcp_tool(t) for t in toolset.tools()])
    schemas = {t.name: dict(t.parameters) for t in toolset.tools()}

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return listed

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        # A worker thread: a long grep or shell command must not stall the other requests.
        output = await anyio.to_thread.run_sync(toolset.call, params.name, params.arguments)
        return call_result(output)

    return Server(SERVER_NAME, version=ctxwin.__version__, instructions=instructions(toolset),
                  get_tool_input_schema=schemas.get, on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_stdio(toolset: Toolset) -> None:
    """Serves on stdin/stdout until the client closes them."""
    anyio.run(_serve_stdio, build_server(toolset))


# --------------------------------------------------------------------------------------------------
# HTTP


class BearerAuth:
    """ASGI middleware refusing every HTTP request without `Authorization: Bearer <token>` (compared in
    constant time)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scheme, _, given = Headers(scope=scope).get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
                response = JSONResponse(
                    {"error": "unauthorized", "message": "this ctxwin mcp server needs Authorization: Bearer <token>"},
                    status_code=401, headers={"WWW-Authenticate": 'Bearer realm="ctxwin"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def http_app(toolset: Toolset, host: str, token: str | None) -> ASGIApp:
    """The streamable HTTP app at HTTP_PATH (the SDK's, with DNS-rebinding protection on loopback),
    behind the token when one is given."""
    check_exposure(host, token)
    app: ASGIApp = build_server(toolset).streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    return BearerAuth(app, token) if token else app


def serve_http(toolset: Toolset, host: str, port: int, token: str | None) -> None:
    """Serves streamable HTTP on host:port until interrupted."""
    import uvicorn

    app = http_app(toolset, host, token)
    shown = f"[{host}]" if ":" in host else host
    print(f"ctxwin mcp: {len(toolset.tools())} tools on http://{shown}:{port}{HTTP_PATH}"
          + (" (bearer token required)" if token else ""), file=sys.stderr, flush=True)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
