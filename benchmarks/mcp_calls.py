"""Benchmark of `ctxwin mcp`: per-call latency seen by the official SDK's client, over stdio and over
streamable HTTP (127.0.0.1), for paged reads of a 6,000-line file and for greps, and the time from
spawning the server to its first tools/list.

No target: the numbers say what a client pays per call on top of the tool itself. Reports the load
average (the machines are shared). Prints one JSON object on its last line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

CALLS = 200  # calls of each kind per transport
SRC = str(Path(__file__).resolve().parents[1] / "src")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))], 2)


async def measure(client: Client, started: float) -> dict[str, Any]:
    reads: list[float] = []
    greps: list[float] = []
    async with client as c:
        await c.list_tools()
        ready_ms = (time.perf_counter() - started) * 1000
        for i in range(CALLS):
            t = time.perf_counter()
            result = await c.call_tool("read", {"path": "big.txt", "offset": 1 + (i * 37) % 5000, "limit": 50})
            reads.append((time.perf_counter() - t) * 1000)
            assert not result.is_error
            t = time.perf_counter()
            result = await c.call_tool("grep", {"pattern": f"line {i}\\b", "limit": 5})
            greps.append((time.perf_counter() - t) * 1000)
            assert not result.is_error
    return {"ready_ms": round(ready_ms, 1),
            "read_p50_ms": percentile(reads, 0.5), "read_p95_ms": percentile(reads, 0.95),
            "grep_p50_ms": percentile(greps, 0.5), "grep_p95_ms": percentile(greps, 0.95)}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "big.txt").write_text("".join(f"line {n} lorem ipsum dolor sit amet\n" for n in range(1, 6001)))
        args = ["-m", "ctxwin.cli.main", "mcp", "--root", str(root)]
        env = {**os.environ, "PYTHONPATH": SRC}
        out: dict[str, Any] = {"calls": CALLS}
        started = time.perf_counter()
        stdio = anyio.run(measure, Client(StdioServerParameters(command=sys.executable, args=args,
                                                                env={"PYTHONPATH": SRC})), started)
        out.update({f"stdio_{k}": v for k, v in stdio.items()})
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        started = time.perf_counter()
        server = subprocess.Popen([sys.executable, *args, "--http", f"127.0.0.1:{port}"], env=env,
                                  stderr=subprocess.DEVNULL)
        try:
            while True:
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.02)
            http = anyio.run(measure, Client(f"http://127.0.0.1:{port}/mcp"), started)
        finally:
            server.terminate()
            server.wait(10)
        out.update({f"http_{k}": v for k, v in http.items()})
        out["load_average_1m"] = round(os.getloadavg()[0], 2)
        print(json.dumps(out))


if __name__ == "__main__":
    main()
