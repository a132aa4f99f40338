"""`ctxwin proxy --upstream URL`: context management for an unmodified agent, between it and its
provider. A thin wrapper over `ctxwin.proxy.serve.serve`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ctxwin import policies
from ctxwin.cli.app import app, err_console, handle_errors
from ctxwin.proxy.config import DEFAULT_LISTEN, DEFAULT_MAX_BODY_BYTES, DEFAULT_UPSTREAM_TIMEOUT_S, ProxyConfig
from ctxwin.proxy.serve import TOKEN_ENV, parse_listen, serve


@app.command("proxy")
@handle_errors
def proxy(
    upstream: str = typer.Option(..., "--upstream", "-u", help="The provider's base URL, e.g. https://api.anthropic.com.",
                                 show_default=False),
    listen: str = typer.Option(DEFAULT_LISTEN, "--listen", "-l",
                               help="HOST:PORT to listen on. Loopback by default; any other address needs "
                                    "--auth-token."),
    policy: str = typer.Option(policies.DEFAULT, "--policy", "-p",
                               help=f"A preset ({', '.join(policies.names())}) or a policy TOML file."),
    store: Path | None = typer.Option(None, "--store", help="Keep sessions as JSONL under this folder "
                                      "(default: in memory, gone when the proxy stops).", show_default=False),
    postgres: str | None = typer.Option(None, "--postgres", help="Keep sessions in PostgreSQL (a DSN): the store "
                                        "several workers share.", show_default=False),
    auth_token: str | None = typer.Option(None, "--auth-token", envvar=TOKEN_ENV,
                                          help="Required of every caller (x-ctxwin-token header, or Authorization: "
                                               "Bearer). Also read from $" + TOKEN_ENV + ", which keeps it out of ps.",
                                          show_default=False),
    passthrough: bool = typer.Option(False, "--passthrough", help="Forward untouched, for comparison."),
    workers: int = typer.Option(1, "--workers", help="Worker processes behind the one port (more than 1 "
                                "needs --postgres)."),
    recall_tool: bool = typer.Option(True, "--recall-tool/--no-recall-tool",
                                     help="Offer ctxwin_recall upstream and answer its calls in the proxy."),
    window: int | None = typer.Option(None, "--window", help="Override the model's context window in tokens.",
                                      show_default=False),
    max_body_bytes: int = typer.Option(DEFAULT_MAX_BODY_BYTES, "--max-body-bytes", min=1,
                                       help="The largest request body a caller may send, and the largest answer "
                                            "(or stream event) taken from the upstream, in bytes."),
    upstream_timeout: float = typer.Option(DEFAULT_UPSTREAM_TIMEOUT_S, "--upstream-timeout", min=0.001,
                                           help="Seconds to wait for the upstream's answer (and between its "
                                                "stream events)."),
    memory_workspace: Path | None = typer.Option(None, "--memory-workspace", help="With --consolidate-idle: "
                                                 "consolidate this workspace's memory from the --store sessions.",
                                                 show_default=False),
    consolidate_idle: float | None = typer.Option(None, "--consolidate-idle", min=1, help="Seconds without a "
                                                  "request after which --memory-workspace is consolidated.",
                                                  show_default=False),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn's log level.", hidden=True),
) -> None:
    """Serve Anthropic- and OpenAI-compatible endpoints that manage the context of the traffic they forward."""
    address = parse_listen(listen)
    config = ProxyConfig(upstream=upstream.rstrip("/"), policy=policy, store_dir=store, postgres=postgres,
                         auth_token=auth_token or None, passthrough=passthrough, recall_tool=recall_tool,
                         window=window, max_body_bytes=max_body_bytes, upstream_timeout=upstream_timeout,
                         memory_workspace=memory_workspace, consolidate_idle=consolidate_idle)
    store_text = f"PostgreSQL, {workers} worker(s)" if postgres else str(store) if store else "in memory"

    def announce() -> None:
        err_console.print(f"ctxwin proxy on [bold]{escape(address.url)}[/] → {escape(config.upstream)} · policy "
                          f"{escape(policy)}{' (passthrough)' if passthrough else ''} · sessions {escape(store_text)}",
                          highlight=False, soft_wrap=True)
        err_console.print(f"  point the agent at it: ANTHROPIC_BASE_URL={address.url}  "
                          f"OPENAI_BASE_URL={address.url}/v1", highlight=False, soft_wrap=True)

    serve(config, address, workers, log_level=log_level, announce=announce)
