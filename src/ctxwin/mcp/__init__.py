"""`ctxwin mcp`: the library's budgeted tools, `recall` and the memory tools served over MCP (stdio or
streamable HTTP) on the official `mcp` SDK. An optional extra: `pip install 'ctxwin[mcp]'`; nothing
in the core imports this package.

```python
from ctxwin.mcp import McpConfig, Toolset, serve_stdio
serve_stdio(Toolset(McpConfig(roots=(Path("."),), memory=Path("."))))
```

- `tools.py`: `McpConfig`, `Toolset` (which tools, running one); `recall.py`: `recall` as a tool;
  `address.py`: HOST:PORT and the token rule. None of them imports the SDK.
- `server.py`: the SDK server, stdio and HTTP, the bearer-token guard.

The names below load on first use, so configuring a server (and refusing a bad one) does not pay for
the SDK's import.

Imports: everything up to the agent (tools, memory, store); never the proxy or the adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxwin.lazy import lazy_exports

_EXPORTS = {
    **{name: "address" for name in ("TOKEN_ENV", "check_exposure", "is_loopback", "parse_address")},
    **{name: "recall" for name in ("RecallSource", "recall")},
    **{name: "server" for name in ("HTTP_PATH", "build_server", "call_result", "http_app", "mcp_tool", "serve_http",
                                   "serve_stdio")},
    **{name: "tools" for name in ("McpConfig", "ServedTool", "Toolset")},
}

if TYPE_CHECKING:
    from ctxwin.mcp.address import TOKEN_ENV, check_exposure, is_loopback, parse_address
    from ctxwin.mcp.recall import RecallSource, recall
    from ctxwin.mcp.server import (
        HTTP_PATH,
        build_server,
        call_result,
        http_app,
        mcp_tool,
        serve_http,
        serve_stdio,
    )
    from ctxwin.mcp.tools import McpConfig, ServedTool, Toolset


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "HTTP_PATH",
    "TOKEN_ENV",
    "McpConfig",
    "RecallSource",
    "ServedTool",
    "Toolset",
    "build_server",
    "call_result",
    "check_exposure",
    "http_app",
    "is_loopback",
    "mcp_tool",
    "parse_address",
    "recall",
    "serve_http",
    "serve_stdio",
]
