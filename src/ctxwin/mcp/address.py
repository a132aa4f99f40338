"""Where an HTTP server listens, and whether it must demand a token (no SDK import, so `ctxwin mcp`
refuses a bad address before loading anything)."""

from __future__ import annotations

import ipaddress

from ctxwin.errors import InputError

TOKEN_ENV = "CTXWIN_MCP_TOKEN"  # where `ctxwin mcp` reads the bearer token when --auth-token is not given


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT`, or `PORT` alone (loopback) as (host, port)."""
    value = text.strip()
    host, port = "127.0.0.1", value
    if value.startswith("["):
        inner, _, rest = value[1:].partition("]")
        host, port = inner, rest.removeprefix(":")
    elif value.count(":") == 1:
        host, _, port = value.partition(":")
        host = host or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise InputError(f"--http {text!r} is not HOST:PORT", "e.g. --http 127.0.0.1:8765 (or [::1]:8765)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def check_exposure(host: str, token: str | None) -> None:
    """A server other machines can reach must require a token."""
    if not is_loopback(host) and not token:
        raise InputError(f"--http {host} is reachable from other machines, so it needs a token",
                         f"pass --auth-token TOKEN (or set {TOKEN_ENV}), or serve on 127.0.0.1")
