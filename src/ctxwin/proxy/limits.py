"""What one worker lets its callers hold, so that a slow or hostile client cannot hold it: the time a
client may take to send its request, the size of its headers, how many connections are open at once,
and how many sessions stay open, the last two sized from the file descriptors the process may open
(`fd_budget`). The connection limits are applied by `proxy.protocol.LimitedProtocol`, the session
cache by the session stores.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

from .config import ProxyConfig

MAX_HEADER_BYTES = 64 * 1024
"""Request line and headers, in all (nginx's default large buffers hold 32 KB; Node's limit is 16 KB)."""
FDS_RESERVED = 64
"""File descriptors a worker needs for itself: the interpreter and its libraries, the listening
socket, logs, a blob being written, SQLite's journal."""
FDS_PER_CONNECTION = 2  # the caller's socket, and the upstream connection its request may hold
FDS_PER_SESSION = 4
"""An open JSONL session: the folder's lock, writer.lock, session.jsonl, index.sqlite."""
CONNECTIONS_SHARE = 0.5  # of the descriptors left after FDS_RESERVED, what connections may use (with their sessions)
MAX_CONNECTIONS_DEFAULT = 1000  # when the limit is high: a worker serves many agents, not tens of thousands


def open_files_limit() -> int:
    """The soft limit on open file descriptors of this process (RLIMIT_NOFILE)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


@dataclass(frozen=True, slots=True)
class Budget:
    """How the process's file descriptors are shared: connections at once (each may hold its session
    open beyond the cache while it is served), and sessions kept open between requests."""

    connections: int
    sessions: int


def fd_budget(limit: int, *, session_fds: int = FDS_PER_SESSION, max_connections: int | None = None) -> Budget:
    """The budget for `limit` descriptors. `session_fds`: what an open session holds (0 for sessions
    in memory, which then only bound connections)."""
    usable = max(8, limit - FDS_RESERVED)
    per_connection = FDS_PER_CONNECTION + session_fds
    connections = max(2, int(usable * (CONNECTIONS_SHARE if session_fds else 1.0)) // per_connection)
    connections = min(connections, MAX_CONNECTIONS_DEFAULT)
    if max_connections is not None:
        connections = min(connections, max_connections)
    sessions = max(1, (usable - connections * per_connection) // session_fds) if session_fds else 0
    return Budget(connections, sessions)


def session_fds(config: ProxyConfig) -> int:
    """Descriptors one open session of this config's store holds between requests (the PostgreSQL
    store bounds its own cache: `shared.MAX_CACHED` connections)."""
    return FDS_PER_SESSION if config.store_dir is not None else 0


def budget_for(config: ProxyConfig) -> Budget:
    return fd_budget(open_files_limit(), session_fds=session_fds(config), max_connections=config.max_connections)


@dataclass(frozen=True, slots=True)
class Limits:
    """What a served connection may do (see the module docstring)."""

    header_timeout: float
    body_timeout: float
    max_connections: int
    max_header_bytes: int = MAX_HEADER_BYTES

    @classmethod
    def of(cls, config: ProxyConfig) -> Limits:
        return cls(config.header_timeout, config.body_timeout, budget_for(config).connections)


__all__ = ["Budget", "Limits", "budget_for", "fd_budget", "open_files_limit"]
