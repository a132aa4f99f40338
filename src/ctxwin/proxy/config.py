"""What a proxy process is told at start: where to forward, how to manage, where to keep sessions.

One frozen value, built by `ctxwin proxy` from its flags and handed to `create_app(config)` in every
worker, so a worker has no state of its own beyond what this and the session store hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_LISTEN = "127.0.0.1:8765"
DEFAULT_MAX_BODY_BYTES = 64 * 2**20
"""Far above any real request (a 1M-token history is ~4 MB of JSON), low enough that a runaway client
cannot make a worker buffer gigabytes."""
DEFAULT_UPSTREAM_TIMEOUT_S = 600.0
DEFAULT_HEADER_TIMEOUT_S = 10.0
"""A client sends its request line and headers in one write or a few; ten seconds is slow by far."""
DEFAULT_BODY_TIMEOUT_S = 60.0
"""From the end of the headers to the end of the body: a 64 MB body at 1 MB/s, with room."""
MIN_TOKEN_CHARS = 16
"""An auth token shorter than this (after stripping blanks) is refused: it could be guessed."""


@dataclass(frozen=True)
class ProxyConfig:
    upstream: str
    """The provider's base URL, e.g. `https://api.anthropic.com` (paths such as `/v1/messages` are
    appended as the caller sent them)."""
    policy: str = "ctxwin"
    store_dir: Path | None = None
    """A JSONL session store directory; with neither this nor `postgres`, sessions live in memory."""
    postgres: str | None = None
    """A PostgreSQL DSN: the store that lets several workers share sessions."""
    auth_token: str | None = None
    """Required of every caller (`x-ctxwin-token` or `Authorization: Bearer` when the provider key
    travels in another header) when set; `ctxwin proxy` demands one for a non-loopback address."""
    passthrough: bool = False
    """Forward untouched (no sync, no prepare): the baseline to compare against."""
    recall_tool: bool = True
    """Offer `ctxwin_recall` upstream and answer its calls in the proxy."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT_S
    window: int | None = None
    """Override the model's context window (tests and small local models)."""
    header_timeout: float = DEFAULT_HEADER_TIMEOUT_S
    """Seconds a client may take to send its request line and headers; then the connection is closed."""
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S
    """Seconds a client may take to send its request body once the headers are in."""
    max_connections: int | None = None
    """Connections a worker keeps open at once (more are answered 503); None: as many as its file
    descriptor limit allows (`proxy.limits.fd_budget`)."""
    memory_workspace: Path | None = None
    """With `consolidate_idle`: the workspace whose memory (MEMORY.md, memory/wiki/) is consolidated from
    the stored sessions (`store_dir`) and its notes once the proxy has been idle that many seconds."""
    consolidate_idle: float | None = None
