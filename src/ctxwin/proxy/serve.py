"""Serving the proxy: uvicorn in front of `create_app(config)`, in one process or N behind one port.

Every worker builds its app from the same `ProxyConfig`, handed over as JSON in an environment
variable (`CONFIG_ENV`): uvicorn starts workers by import string (`app_from_env`, a factory), so the
config cannot travel as an object, and an environment variable keeps the auth token off the command
line that `ps` shows. Workers keep nothing of their own that another worker needs: with `--workers N`
sessions live in PostgreSQL (`proxy/shared.py`), which is why N > 1 demands `--postgres`.

What is refused before anything listens, with what to do instead:
- a non-loopback address without an auth token (anyone on the network could spend the caller's key),
  and a token shorter than `MIN_TOKEN_CHARS`, with blanks at its ends (which HTTP drops from headers) or
  with a character that is not printable ASCII (which no client can put in a header);
- several workers without PostgreSQL (a JSONL or in-memory session cannot be shared by processes);
- an upstream that is not an http(s) URL, a listen address that does not parse.
"""

from __future__ import annotations

import gc
import ipaddress
import json
import os
import socket
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ctxwin.errors import InputError, MissingExtraError
from ctxwin.proxy.config import DEFAULT_LISTEN, MIN_TOKEN_CHARS, ProxyConfig
from ctxwin.proxy.limits import Limits
from ctxwin.tokens.registry import UnknownModelWarning

CONFIG_ENV = "CTXWIN_PROXY_CONFIG"
"""The environment variable that carries the config (JSON) from `serve` to every worker."""
PATH_FIELDS = ("store_dir", "memory_workspace")  # ProxyConfig's paths, strings in its JSON
TOKEN_ENV = "CTXWIN_PROXY_TOKEN"
"""Where `ctxwin proxy` also reads the auth token, so it need not appear on the command line."""
TOKEN_EXAMPLE = "`python -c 'import secrets; print(secrets.token_urlsafe(24))'`"
FACTORY = "ctxwin.proxy.serve:app_from_env"
PROTOCOL = "ctxwin.proxy.protocol:LimitedProtocol"
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
MAX_WORKERS = 64  # far above what a machine's cores can use; a typo of 1000 is refused, not forked
TIMEOUT_KEEP_ALIVE_S = 75  # agents reuse one connection per turn loop; above typical client idle pools
GRACEFUL_SHUTDOWN_S = 30  # on SIGTERM, requests in flight (a streamed answer) get this long to finish
GC_THRESHOLDS = (100_000, 50, 100)
"""The cyclic collector's thresholds in a worker, set here only (a process setting, not an app's).
A 170k-token request parses into tens of thousands of short-lived containers: at Python's default
(700, 10, 10) that is dozens of collections per request, and the previous body, which lives until
the next request replaces it, is promoted and makes full collections of the whole heap frequent
(measured: 28 ms pauses at p99 of the request path). Collections still run, far less often."""


@dataclass(frozen=True, slots=True)
class Listen:
    """Where the proxy listens."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """`HOST:PORT`, `[IPv6]:PORT` or `:PORT` (loopback) as a `Listen`."""
    value = text.strip()
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit():
        raise InputError(f"listen address {text!r} is not HOST:PORT", f"for example {DEFAULT_LISTEN}")
    port = int(port_text)
    if not 0 < port < 65536:
        raise InputError(f"port {port} of listen address {text!r} is out of range", "use a port from 1 to 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Listen(host or "127.0.0.1", port)


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine. A name other than localhost counts
    as reachable from elsewhere: what it resolves to can change."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_serving(config: ProxyConfig, listen: Listen, workers: int) -> None:
    """Refuses a way of serving that would be unsafe or could not work, saying what to do instead."""
    if not is_loopback(listen.host) and not config.auth_token:
        raise InputError(
            f"refusing to listen on {listen.host}, which other machines can reach, without an auth token",
            f"pass --auth-token TOKEN (or set {TOKEN_ENV}) and have clients send it as the x-ctxwin-token "
            "header, or listen on 127.0.0.1")
    check_token(config.auth_token)
    if not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"--workers {workers} is out of range", f"use 1 to {MAX_WORKERS}")
    if workers > 1 and not config.postgres and not config.passthrough:
        raise InputError(f"--workers {workers} needs sessions every worker can reach",
                         "pass --postgres DSN (the shared session store), or use --workers 1")
    if config.postgres and config.store_dir is not None:
        raise InputError("--store and --postgres are two session stores; choose one")
    upstream = urlsplit(config.upstream)
    if upstream.scheme not in ("http", "https") or not upstream.netloc:
        raise InputError(f"upstream {config.upstream!r} is not an http(s) URL",
                         "for example --upstream https://api.anthropic.com")


def check_token(token: str | None) -> None:
    """Refuses a token that could be guessed (shorter than `MIN_TOKEN_CHARS` once stripped) or that no
    client could send (blanks at its ends, which HTTP drops from header values; anything but printable
    ASCII)."""
    if token is None:
        return
    if token != token.strip():
        raise InputError("the auth token starts or ends with a blank, which HTTP headers drop",
                         "pass the token without surrounding blanks")
    if len(token) < MIN_TOKEN_CHARS:
        raise InputError(f"the auth token has {len(token)} character(s); it must have at least {MIN_TOKEN_CHARS}",
                         f"use a long random one, e.g. {TOKEN_EXAMPLE}")
    # A header value is bytes: clients encode it as ASCII and the server reads Latin-1, so any other
    # character (or a control one) would make the token impossible to send in x-ctxwin-token.
    odd = next((c for c in token if not " " <= c <= "~"), None)
    if odd is not None:
        raise InputError(f"the auth token holds {odd!r}, which is not printable ASCII (an HTTP header cannot carry "
                         "it, so no client could send the token)", f"use letters, digits and punctuation, e.g. "
                         f"{TOKEN_EXAMPLE}")


def config_json(config: ProxyConfig) -> str:
    return json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()})


def config_from_json(text: str) -> ProxyConfig:
    """The config `config_json` wrote. Raises InputError for anything else."""
    try:
        data = json.loads(text)
    except ValueError as error:
        raise InputError(f"{CONFIG_ENV} is not JSON: {error}", "start workers with `ctxwin proxy`") from None
    known = {f.name for f in fields(ProxyConfig)}
    if not isinstance(data, dict) or not set(data) <= known or "upstream" not in data:
        raise InputError(f"{CONFIG_ENV} does not hold a proxy config", "start workers with `ctxwin proxy`")
    for name in PATH_FIELDS:
        if data.get(name) is not None:
            data[name] = Path(data[name])
    return ProxyConfig(**data)


def app_from_env() -> Any:
    """The uvicorn factory every worker calls: the app for the config in `CONFIG_ENV`."""
    text = os.environ.get(CONFIG_ENV)
    if text is None:
        raise InputError(f"{CONFIG_ENV} is not set", "start the proxy with `ctxwin proxy`")
    config = config_from_json(text)
    check_token(config.auth_token)
    app = build_app(config)
    tune_process(config)
    return app


def tune_process(config: ProxyConfig) -> None:
    """The process settings of a worker: the collector (`tune_gc`) and the serving limits of its
    connections (`LimitedProtocol.limits`, read by each connection uvicorn opens)."""
    from ctxwin.proxy.protocol import LimitedProtocol  # uvicorn's: an extra, loaded by what serves

    LimitedProtocol.limits = Limits.of(config)
    # A model the registry does not know is said once per model, not for every session opened on it
    # (the default "once per place" is forgotten whenever a warnings filter changes, which
    # tokens.counter_for does on every call: a proxy then wrote it for each new session).
    warnings.filterwarnings("once", category=UnknownModelWarning)
    tune_gc()


def tune_gc() -> None:
    """Sets `GC_THRESHOLDS`, and moves what is alive at start (modules, the app) out of the
    collector's sight, so a full collection walks only what requests left behind."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def build_app(config: ProxyConfig) -> Any:
    """The app for `config`, with the session store it names: PostgreSQL (shared by every worker)
    with `postgres`, else the app's own (this process, in memory or under `store_dir`)."""
    from ctxwin.proxy.app import create_app
    from ctxwin.proxy.shared import PostgresSessionStore

    return create_app(config, store=PostgresSessionStore.for_config(config) if config.postgres else None)


def preflight(config: ProxyConfig, listen: Listen) -> None:
    """What would otherwise fail in every worker at once, and be restarted in a loop, or end in
    uvicorn's log: the address (free to listen on), the database (reached, and its schema migrated
    once here rather than raced by N workers)."""
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((listen.host, listen.port))
        except OSError as error:
            raise InputError(f"cannot listen on {listen.host}:{listen.port}: {error.strerror or error}",
                             "stop what listens there, or choose another --listen HOST:PORT") from None
    if config.postgres:
        from ctxwin.store.postgres import connect

        connect(config.postgres).close()


def uvicorn_options(listen: Listen, workers: int, *, log_level: str = "warning") -> dict[str, Any]:
    """The uvicorn settings (shared by `serve` and the benchmark, so both measure one stack)."""
    return {"host": listen.host, "port": listen.port, "workers": workers, "factory": True, "http": PROTOCOL,
            "log_level": log_level, "access_log": False, "timeout_keep_alive": TIMEOUT_KEEP_ALIVE_S,
            "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S, "server_header": False, "date_header": False}


def serve(config: ProxyConfig, listen: Listen, workers: int = 1, *, log_level: str = "warning",
          announce: Callable[[], None] | None = None) -> None:
    """Runs the proxy until interrupted. Raises InputError before listening when `check_serving`
    or `preflight` refuses; `announce` is called once both passed, just before serving."""
    try:
        import uvicorn
    except ImportError:
        raise MissingExtraError("the proxy needs uvicorn and starlette", "pip install 'ctxwin[proxy]'") from None
    check_serving(config, listen, workers)
    preflight(config, listen)
    if announce is not None:
        announce()
    os.environ[CONFIG_ENV] = config_json(config)  # inherited by every worker process uvicorn spawns
    uvicorn.run(FACTORY, **uvicorn_options(listen, workers, log_level=log_level))
