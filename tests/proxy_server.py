"""The proxy under test, served for real: uvicorn in a thread on 127.0.0.1 port 0, in front of a
FakeProvider (also real HTTP). Used by the test_proxy_* files."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import uvicorn
from starlette.applications import Starlette

from ctxwin.proxy.app import Proxy, create_app
from ctxwin.proxy.config import ProxyConfig
from ctxwin.proxy.limits import Limits
from ctxwin.proxy.protocol import protocol_for
from ctxwin.testing import FakeProvider

START_TIMEOUT = 10.0


@dataclass
class Served:
    app: Starlette
    port: int
    fake: FakeProvider | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def proxy(self) -> Proxy:
        return self.app.state.proxy

    def engines(self) -> dict:
        self.settle()
        return self.proxy.store.engines()  # type: ignore[attr-defined]

    def settle(self) -> None:
        """Wait until no request holds a session (its lease is given back a moment after the caller
        has the answer; the entry itself is written before the answer's last byte)."""
        deadline = time.monotonic() + START_TIMEOUT
        while self.proxy.store.busy() and time.monotonic() < deadline:  # type: ignore[attr-defined]
            time.sleep(0.005)

    def entries(self, kind: str = "proxy_request") -> list[dict]:
        """Every custom entry of that type in every session, in log order per session."""
        out = []
        for engine in self.engines().values():
            out += [e.payload for e in engine.session if e.kind == "custom" and e.payload.get("type") == kind]
        return out


@contextmanager
def serve(app: Starlette, **options: object) -> Iterator[int]:
    """`app` on 127.0.0.1 (a free port, yielded) until the block ends; `options`: uvicorn's."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on",
                                           **options))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, name="proxy-under-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the proxy did not start")
        time.sleep(0.005)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def proxy_for(fake: FakeProvider | None, config: ProxyConfig | None = None, *, limited: bool = False,
              **changes: object) -> Iterator[Served]:
    """The proxy in front of `fake` (or of `config.upstream`), with `changes` to the config;
    `limited`: behind the serving limits `ctxwin proxy` serves with (`proxy.protocol`)."""
    base = config or ProxyConfig(upstream=fake.base_url if fake is not None else "http://127.0.0.1:9")
    config = replace(base, **changes)  # type: ignore[arg-type]
    app = create_app(config)
    options = {"http": protocol_for(Limits.of(config))} if limited else {}
    with serve(app, **options) as port:
        yield Served(app, port, fake)
