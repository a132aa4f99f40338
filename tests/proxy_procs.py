"""`ctxwin proxy` as a real process on 127.0.0.1, for the tests that need the served command (auth over
a socket, several workers on one PostgreSQL, a worker killed mid-request)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningProxy:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no shutdown handler runs, nothing is flushed."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def proxy_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxwin.cli.main", "proxy", *args]


def proxy_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(extra or {})}


@contextmanager
def running_proxy(upstream: str, *args: str, tmp: Path, env: dict[str, str] | None = None,
                  host: str = "127.0.0.1", preexec_fn: Callable[[], None] | None = None) -> Iterator[RunningProxy]:
    """`ctxwin proxy --upstream UPSTREAM --listen HOST:PORT ARGS...`, up and accepting connections on
    127.0.0.1 until the block ends (`preexec_fn`: run in the child before it starts, e.g. to set
    its resource limits)."""
    port = free_port()
    log = tmp / f"proxy-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(proxy_argv("--upstream", upstream, "--listen", f"{host}:{port}", *args),
                                   env=proxy_env(env), stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, preexec_fn=preexec_fn)
    running = RunningProxy(process, port, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the proxy exited with {process.returncode}:\n{running.output()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the proxy did not listen within {START_TIMEOUT_S:g} s:\n"
                                         f"{running.output()}") from None
                time.sleep(0.05)
        yield running
    finally:
        stop_group(process)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stops the proxy and its process group (the worker processes of --workers N, which outlive a
    killed parent)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=15)
            if sig == signal.SIGTERM:
                time.sleep(0.2)  # workers leave after their parent; SIGKILL whatever is still there
        except subprocess.TimeoutExpired:
            continue
