"""`ctxwin mcp --root DIR [...]`: serves the budgeted tools, recall and the memory tools over MCP
(`ctxwin.mcp`), on stdio or streamable HTTP. The MCP SDK is imported only when the command runs, so
`ctxwin --help` works without the `mcp` extra."""

from __future__ import annotations

from pathlib import Path

import typer

from ctxwin.cli.app import app, handle_errors
from ctxwin.errors import InputError

HELP = (
    "Serve ctxwin's tools, recall and memory to any MCP client, over stdio or streamable HTTP.\n\n"
    "Any client: Claude Desktop, Cursor, an agent SDK; stdio by default, or streamable HTTP with --http "
    "HOST:PORT (at /mcp).\n\n"
    "Served: read, grep, find, ls over the --root folders (shell with --allow-shell); read_spilled, grep_spilled, "
    "query_json and recall over the blob store (--blobs, or the session's); recall of entry refs and "
    "conversation_search over a stored session (--store, --session); memory_search, memory_get and memory over "
    "--memory. Outputs carry the library's caps and notices; refusals are tool errors.\n\n"
    'A client\'s config: command "ctxwin", args ["mcp", "--root", "/path/to/repo"].'
)


@app.command("mcp", help=HELP)
@handle_errors
def mcp(
    root: list[Path] = typer.Option(None, "--root", help="Workspace root the tools may touch (repeatable; the first "
                                    "is where relative paths resolve; default: the current folder)."),
    blobs: Path | None = typer.Option(None, "--blobs", help="Blob store folder: shell output spills there; "
                                      "read_spilled, grep_spilled and recall read it (default: the session's)."),
    allow_shell: bool = typer.Option(False, "--allow-shell", help="Also serve the shell tool (runs bash in the "
                                     "first root)."),
    store: Path | None = typer.Option(None, "--store", help="Sessions folder (default .ctxwin/sessions when "
                                      "--session is given); conversation_search all_sessions searches it."),
    session: str | None = typer.Option(None, "--session", help="Session id in --store: recall of entry:<id> "
                                       "refs and conversation_search read its log (while an agent appends)."),
    memory: Path | None = typer.Option(None, "--memory", help="Folder holding MEMORY.md and memory/: serves the "
                                       "memory tools (its index is kept in .ctxwin/memory.sqlite there)."),
    embedder: str = typer.Option("default", "--embedder", help="Memory index embedder: default, wordllama, hash, "
                                 "minilm or openai:<url>#<model>."),
    model: str | None = typer.Option(None, "--model", help="Model whose tokenizer read's token cap counts with."),
    http: str | None = typer.Option(None, "--http", help="Serve streamable HTTP on HOST:PORT (at /mcp) instead of "
                                    "stdio; a non-loopback host requires a token."),
    auth_token: str | None = typer.Option(None, "--auth-token", envvar="CTXWIN_MCP_TOKEN", show_envvar=True,
                                          help="Bearer token every HTTP request must carry (prefer the "
                                          "environment variable: other users can see a command line)."),
) -> None:
    import importlib.util

    from ctxwin.mcp.address import check_exposure, parse_address
    from ctxwin.mcp.tools import McpConfig, Toolset

    if importlib.util.find_spec("mcp") is None:
        raise InputError("the MCP server needs the mcp extra", "pip install 'ctxwin[mcp]'")
    address = parse_address(http) if http is not None else None
    if address is not None:
        check_exposure(address[0], auth_token)  # before anything is opened (stdio has no requests to check)
    if store is not None and session is None and memory is None:
        raise InputError("--store is read by recall and conversation_search", "add --session ID (and --memory DIR)")
    if session is not None and (not session or Path(session).name != session or session in (".", "..")):
        raise InputError(f"--session {session!r} is not a session id", "give the id `ctxwin sessions` lists")
    from ctxwin.store.session import DEFAULT_ROOT

    sessions_root = store if store is not None else (DEFAULT_ROOT if session else None)
    config = McpConfig(
        roots=tuple(root or [Path.cwd()]), blobs=blobs, allow_shell=allow_shell,
        session=sessions_root / session if sessions_root is not None and session else None,
        sessions_root=sessions_root, memory=memory, embedder=embedder, model=model,
    )
    toolset = Toolset(config)
    try:
        from ctxwin.mcp.server import serve_http, serve_stdio

        if address is None:
            serve_stdio(toolset)
        else:
            serve_http(toolset, *address, auth_token)
    finally:
        toolset.close()
