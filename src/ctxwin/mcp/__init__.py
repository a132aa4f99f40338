"""`ctxwin mcp`: the library's budgeted tools, `recall` and the memory tools served over MCP (stdio or
streamable HTTP) on the official `mcp` SDK. An optional extra: `pip install 'ctxwin[mcp]'`; nothing
in the core imports this package.

```python
from ctxwin.mcp import McpConfig, Toolset, serve_stdio
serve_stdio(Toolset(McpConfig(roots=(Path("."),), memory=Path("."))))
```

- `tools.py`: `McpConfig`, `Toolset` (which tools, running one; no SDK import);
  `recall.py`: `recall` as a tool.
- `server.py`: the SDK server, stdio and HTTP, the bearer-token guard.

Imports: everything up to the agent (tools, memory, store); never the proxy or the adapters.
"""

from ctxwin.mcp.recall import RecallSource, recall
from ctxwin.mcp.server import (
    HTTP_PATH,
    TOKEN_ENV,
    build_server,
    call_result,
    check_exposure,
    http_app,
    mcp_tool,
    parse_address,
    serve_http,
    serve_stdio,
)
from ctxwin.mcp.tools import McpConfig, ServedTool, Toolset

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
    "mcp_tool",
    "parse_address",
    "recall",
    "serve_http",
    "serve_stdio",
]
