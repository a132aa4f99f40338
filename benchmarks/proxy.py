"""What `ctxwin proxy` adds to a request's latency, next to a bare forwarder on the same stack.

Three servers on 127.0.0.1, each its own process, all uvicorn:
- `upstream`: a minimal ASGI app that reads the whole body and answers a fixed Anthropic message
  (usage: the body's bytes / 4 as input tokens). Not the FakeProvider: it parses, validates and counts
  every request in Python, tens of milliseconds at these sizes, and its variance would drown the few
  milliseconds measured here. The fixed reply costs the same on every path, so subtracting the direct
  time removes it;
- `bare`: a pass-through forwarder built on the proxy's stack (starlette + httpx + uvicorn, the same
  uvicorn settings as `ctxwin proxy`): read the body, POST it upstream, return the answer;
- `proxy`: the real `ctxwin proxy` (the CLI, policy `ctxwin`, sessions in memory, the default).

Phase 1 grows one agent-like session (a system prompt, tool schemas, file reads, shell output, edits)
turn by turn to about 170k tokens (`HISTORY_TOKENS`, by ctxwin's estimator) through the proxy, as an
agent would (these turns are not timed: they are the warm-up that builds the session). Phase 2 sends
`TURNS` more turns, each a small agent step, and times each one three ways, in an order rotated per
turn: direct to the upstream, through `bare`, through `proxy`. Added latency of a turn = its time
through a forwarder minus its time direct, paired per turn, so both include the same body and reply.
Phase 3: `SESSIONS` concurrent sessions (each `SESSION_TURNS` turns, histories to about 20k tokens)
through the proxy at once, bounded by `CONCURRENT_DEADLINE_S`; every answer must be a 200 with a
message body. Phase 4 (`postgres_*`): phases 1 and 2 through `ctxwin proxy --postgres` on a
throwaway PostgreSQL with fsync on, then phases 1 to 3 through `--workers 2` on it, then phases 1 and
2 through two single-worker proxies on it, the session's requests alternating between them
(`postgres_alternating_*`: every request finds the session advanced by the other worker). Phase 5
(`proxy_self_*`): phases 1 and 2 through the app in this process, timed by the proxy itself (its
request entries' `added_ms`).

Alongside each latency, the CPU time each server process spent per timed request (from /proc): on a
shared machine the latencies carry other jobs' noise, CPU time does not.

    python benchmarks/proxy.py [--quick] [--no-postgres]

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson

from ctxwin.proxy.serve import Listen, tune_gc, uvicorn_options
from ctxwin.store import pgtemp
from ctxwin.tokens import counter_for

ROOT = Path(__file__).resolve().parents[1]
MODEL = "claude-sonnet-4-5"
HISTORY_TOKENS = 170_000  # the history size the headline numbers are measured at
MEASURE_SPREAD = 15_000  # phase 2 starts this far below HISTORY_TOKENS and ends about as far above
TURNS = 100  # timed turns in phase 2
SESSIONS = 50  # concurrent sessions in phase 3
SESSION_TURNS = 8
CONCURRENT_DEADLINE_S = 180.0
REQUEST_TIMEOUT_S = 60.0
START_TIMEOUT_S = 60.0
SEED = 20261201
REPLY = orjson.dumps({"id": "msg_bench", "type": "message", "role": "assistant", "model": MODEL,
                      "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn",
                      "stop_sequence": None})
HEADERS = {"x-api-key": "bench-key", "anthropic-version": "2023-06-01", "content-type": "application/json"}
FORWARDED_HEADERS = ("x-api-key", "authorization", "anthropic-version", "anthropic-beta", "content-type")
TOOLS = [{"name": name, "description": f"{name} a path or a command in the workspace. " * 6,
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"},
                                                             "command": {"type": "string"},
                                                             "offset": {"type": "integer"},
                                                             "limit": {"type": "integer"}}}}
         for name in ("Read", "Bash", "Edit", "Grep", "Glob", "Write")]
SYSTEM = "You are a coding agent working in a Python repository. " * 120


# --------------------------------------------------------------------------------------------------
# The servers (run in their own processes: `python benchmarks/proxy.py --serve upstream|bare`)


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole request and answers a fixed message."""
    if scope["type"] != "http":
        return
    size = 0
    more = True
    while more:
        event = await receive()
        size += len(event.get("body", b""))
        more = event.get("more_body", False)
    usage = b',"usage":{"input_tokens":%d,"output_tokens":2}}' % (size // 4)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": REPLY[:-1] + usage})


def bare_app() -> Any:
    """A pass-through forwarder on the proxy's stack: what any forwarder costs, ctxwin aside."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    upstream = os.environ["BENCH_UPSTREAM"]
    client = httpx.AsyncClient(base_url=upstream, timeout=REQUEST_TIMEOUT_S)

    async def forward(request: Request) -> Response:
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k in FORWARDED_HEADERS}
        answer = await client.post(request.url.path, content=body, headers=headers)
        return Response(answer.content, answer.status_code, media_type=answer.headers.get("content-type"))

    app = Starlette(routes=[Route("/{path:path}", forward, methods=["POST"])])
    tune_gc()  # as the proxy's workers do, so the two differ only in what they do with a request
    return app


def upstream_factory() -> Any:
    return upstream_app


# --------------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, process: subprocess.Popen[bytes], errors: Any) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            errors.seek(0)
            raise RuntimeError(f"server on port {port} exited with {process.returncode}: "
                               f"{errors.read().decode(errors='replace')}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {START_TIMEOUT_S:g} s")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def server(argv: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[tuple[str, int]]:
    environment = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                   **(env or {})}
    # Its stderr goes to a file, not a pipe nobody reads: a server that writes more than a pipe holds
    # (64 KB of warnings over a long run) would block in the middle of a request.
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(argv, env=environment, stdout=subprocess.DEVNULL, stderr=errors)
        try:
            wait_listening(port, process, errors)
            yield f"http://127.0.0.1:{port}", process.pid
        finally:
            stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def serve_here(kind: str, port: int) -> None:
    import uvicorn

    factory = "benchmarks.proxy:upstream_factory" if kind == "upstream" else "benchmarks.proxy:bare_app"
    sys.path.insert(0, str(ROOT))
    uvicorn.run(factory, **uvicorn_options(Listen("127.0.0.1", port), 1))


# --------------------------------------------------------------------------------------------------
# An agent-like session


def code_lines(rng: random.Random, n: int, tag: str) -> str:
    """`n` numbered lines of plausible Python, as a file read shows them."""
    words = ("value", "result", "items", "config", "session", "handle", "path", "count", "entry", "token",
             "request", "window", "budget", "message", "history", "summary", "policy", "engine")
    shapes = ("    def {a}_{b}(self, {c}: str) -> {d}:", "        {a} = self.{b}.get({c}, default_{d})",
              "        if not {a} or {b} is None:", "            return {c}_{tag}({d})",
              "        # keep the {a} of the {b} when the {c} changes", "        for {a} in self.{b}:",
              "            {a}.append({b}.{c}_{d})", "class {A}{B}(Base{C}):")
    lines = []
    for i in range(n):
        a, b, c, d = (rng.choice(words) for _ in range(4))
        line = rng.choice(shapes).format(a=a, b=b, c=c, d=d, A=a.title(), B=b.title(), C=c.title(), tag=tag)
        lines.append(f"{i + 1:>6}\t{line}")
    return "\n".join(lines)


def agent_turn(rng: random.Random, n: int, size: int) -> list[dict[str, Any]]:
    """One step of a coding agent: an assistant tool call and its result (`size` lines of output)."""
    kind = n % 4
    call_id = f"toolu_{n:06d}"
    if kind == 0:
        name, args, output = "Read", {"path": f"src/pkg/module_{n}.py"}, code_lines(rng, size, f"m{n}")
    elif kind == 1:
        name, args = "Bash", {"command": f"pytest tests/test_module_{n}.py -x -q"}
        output = code_lines(rng, size, f"t{n}") + f"\nFAILED tests/test_module_{n}.py::test_case_{n} - AssertionError"
    elif kind == 2:
        name, args = "Grep", {"command": f"grep -rn compute_{n} src"}
        output = "\n".join(f"src/pkg/module_{rng.randint(0, n)}.py:{rng.randint(1, 900)}: compute_{n}(x)"
                           for _ in range(size))
    else:
        name, args = "Edit", {"path": f"src/pkg/module_{n - 3}.py", "command": f"replace offset={n}"}
        output = f"The file src/pkg/module_{n - 3}.py has been updated."
    return [{"role": "assistant", "content": [{"type": "text", "text": f"Step {n}: next I run {name}."},
                                              {"type": "tool_use", "id": call_id, "name": name, "input": args}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": output}]}]


def first_messages(task: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": task}]


def body_of(messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"model": MODEL, "max_tokens": 8192, "system": SYSTEM, "tools": TOOLS, "messages": messages})


def history_tokens(messages: list[dict[str, Any]]) -> int:
    counter = counter_for(MODEL)
    return counter.count_text(SYSTEM) + counter.count_text(orjson.dumps(TOOLS).decode()) + sum(
        counter.count_text(orjson.dumps(m["content"]).decode()) for m in messages)


# --------------------------------------------------------------------------------------------------
# Measuring


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))]


def timed_post(client: httpx.Client, url: str, body: bytes, session: str, *, close: bool = False) -> float:
    """Milliseconds for one request and its whole answer. `close`: on a connection of its own (the
    server closes it after answering), so with several workers behind one port any of them may get it."""
    started = time.perf_counter()
    headers = {**HEADERS, "x-ctxwin-session": session, **({"connection": "close"} if close else {})}
    answer = client.post(url, content=body, headers=headers)
    elapsed = (time.perf_counter() - started) * 1000
    if answer.status_code != 200 or answer.json().get("type") != "message":
        raise RuntimeError(f"{url}: {answer.status_code} {answer.text[:300]}")
    return elapsed


def sequential(urls: dict[str, str], pids: dict[str, int], turns: int, target: int,
               session: str = "bench-170k", close: bool = False, alternate: str | None = None) -> dict[str, Any]:
    """Phases 1 and 2 (see the module docstring). Besides wall-clock times, the CPU time each server
    process spent over phase 2, per request: unlike latency, it does not depend on what else the
    machine is running. `alternate`: a second proxy (another worker on the same store) that gets
    every other request of the session, in both phases."""
    rng = random.Random(SEED)
    messages = first_messages("Fix the failing tests in src/pkg; run the whole suite before you finish.")
    client = httpx.Client(timeout=REQUEST_TIMEOUT_S)
    proxies = [urls["proxy"], *([alternate] if alternate else [])]
    n = 0
    tokens = history_tokens(messages)
    warmup = 0
    started = time.perf_counter()
    while tokens < target - MEASURE_SPREAD:  # phase 1: build the session through the proxy, as an agent would
        messages += agent_turn(rng, n, 120)
        tokens = history_tokens(messages)
        timed_post(client, proxies[n % len(proxies)] + "/v1/messages", body_of(messages), session, close=close)
        n += 1
        warmup += 1
    warmup_s = time.perf_counter() - started
    order = [name for name in ("direct", "bare", "proxy") if name in urls]
    times: dict[str, list[float]] = {name: [] for name in order}
    sizes: list[int] = []
    history: list[int] = []
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    # Lines of output per step, so that phase 2 spans about 2 x MEASURE_SPREAD tokens: a step adds
    # ~60 tokens of call and text, and its output ~17 tokens a line, on three of every four steps.
    step = max(1, round((2 * MEASURE_SPREAD / turns - 60) / (0.75 * 17)))
    for turn in range(turns):
        messages += agent_turn(rng, n, step)
        n += 1
        body = body_of(messages)
        sizes.append(len(body))
        history.append(history_tokens(messages) if turn % 10 == 0 or turn == turns - 1 else history[-1])
        for name in order[turn % len(order):] + order[:turn % len(order)]:
            url = proxies[n % len(proxies)] if name == "proxy" else urls[name]
            times[name].append(timed_post(client, url + "/v1/messages", body, session,
                                          close=close and name == "proxy"))
    client.close()
    cpu = {name: (cpu_seconds(pid) - cpu_before[name]) * 1000 / turns for name, pid in pids.items()}
    added = {name: [t - d for t, d in zip(times[name], times["direct"], strict=True)] for name in order[1:]}
    out: dict[str, Any] = {}
    for name in order[1:]:
        prefix = "" if name == "proxy" else f"{name}_"
        out[f"{prefix}p95_added_ms_170k"] = round(percentile(added[name], 0.95), 2)
        out[f"{prefix}p50_added_ms_170k"] = round(percentile(added[name], 0.50), 2)
        out[f"{name}_p50_ms"] = round(statistics.median(times[name]), 2)
        out[f"{name}_cpu_ms_per_request"] = round(cpu[name], 2)
    for name in set(pids) - set(order):  # a second proxy process (`alternate`)
        out[f"{name}_cpu_ms_per_request"] = round(cpu[name], 2)
    if "bare" in added:
        out["p95_above_bare_ms"] = round(out["p95_added_ms_170k"] - out["bare_p95_added_ms_170k"], 2)
    return out | {
        "direct_p50_ms": round(statistics.median(times["direct"]), 2),
        "proxy_max_added_ms": round(max(added["proxy"]), 2),
        "upstream_cpu_ms_per_request": round(cpu["direct"] / len(order), 2),  # it answers every path
        "timed_turns": turns,
        "warmup_requests": warmup,
        "warmup_s": round(warmup_s, 2),
        "history_tokens_min": min(history),
        "history_tokens_max": max(history),
        "body_bytes_p50": int(statistics.median(sizes)),
        "body_bytes_max": max(sizes),
    }


async def concurrent(url: str, sessions: int, turns: int) -> dict[str, Any]:
    """Phase 3: `sessions` sessions at once, each `turns` growing turns."""
    latencies: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)

    async def one(client: httpx.AsyncClient, index: int) -> None:
        rng = random.Random(SEED + index)
        messages = first_messages(f"Session {index}: fix the tests of package p{index}.")
        for n in range(turns):
            messages += agent_turn(rng, n, 60)
            started = time.perf_counter()
            try:
                answer = await client.post(url + "/v1/messages", content=body_of(messages),
                                           headers={**HEADERS, "x-ctxwin-session": f"bench-concurrent-{index}"})
                if answer.status_code != 200 or answer.json().get("type") != "message":
                    errors.append(f"session {index} turn {n}: {answer.status_code} {answer.text[:200]}")
            except httpx.HTTPError as error:
                errors.append(f"session {index} turn {n}: {type(error).__name__}: {error}")
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
        try:
            await asyncio.wait_for(asyncio.gather(*(one(client, i) for i in range(sessions))), CONCURRENT_DEADLINE_S)
        except TimeoutError:
            errors.append(f"not finished within {CONCURRENT_DEADLINE_S:g} s")
    return {"concurrent_sessions": sessions, "concurrent_requests": len(latencies), "errors": len(errors),
            "error_examples": errors[:3], "concurrent_wall_s": round(time.perf_counter() - started, 2),
            "concurrent_p50_ms": round(percentile(latencies, 0.5), 2) if latencies else None,
            "concurrent_p95_ms": round(percentile(latencies, 0.95), 2) if latencies else None}


def with_postgres(python: str, up: str, upstream_pid: int, turns: int, target: int, sessions: int) -> dict[str, Any]:
    """Phase 4: phases 1 and 2 again through `ctxwin proxy --postgres` (a throwaway server with
    fsync on, so every acknowledged entry waits for the disk, as a real deployment's would), then
    phase 3 through `--workers 2` on the same database; keys `postgres_*`. Null with the reason
    when no server can start here."""
    reason = pgtemp.unavailable_reason()
    if reason:
        return {"postgres": None, "postgres_unavailable": reason}
    database = pgtemp.start(fsync=True)
    try:
        pgtemp.wait_ready(database.dsn)
        port = free_port()
        with server([python, "-m", "ctxwin.cli.main", "proxy", "--upstream", up, "--listen", f"127.0.0.1:{port}",
                     "--postgres", database.dsn], port) as (proxy, pid):
            measured = sequential({"direct": up, "proxy": proxy}, {"direct": upstream_pid, "proxy": pid}, turns,
                                  target, session="bench-170k-postgres")
        port = free_port()
        with server([python, "-m", "ctxwin.cli.main", "proxy", "--upstream", up, "--listen", f"127.0.0.1:{port}",
                     "--postgres", database.dsn, "--workers", "2"], port) as (proxy, pid):
            # Each request on a connection of its own, so a session's requests land on either worker
            # (one socket, the kernel picks), and one that finds the session advanced by the other
            # rebuilds its engine from the log. (An agent's pooled connection keeps to one worker.)
            moving = sequential({"direct": up, "proxy": proxy}, {"direct": upstream_pid, "proxy": pid}, turns,
                                target, session="bench-170k-two-workers", close=True)
            shared = asyncio.run(concurrent(proxy, sessions, SESSION_TURNS))
        ports = free_port(), free_port()
        with server([python, "-m", "ctxwin.cli.main", "proxy", "--upstream", up, "--listen", f"127.0.0.1:{ports[0]}",
                     "--postgres", database.dsn], ports[0]) as (one, one_pid), \
             server([python, "-m", "ctxwin.cli.main", "proxy", "--upstream", up, "--listen", f"127.0.0.1:{ports[1]}",
                     "--postgres", database.dsn], ports[1]) as (other, other_pid):
            # Two workers, and every other request of the session to each: every request finds the
            # session advanced by the other worker (the worst case of a session moving between workers).
            alternating = sequential({"direct": up, "proxy": one}, {"direct": upstream_pid, "proxy": one_pid,
                                                                    "other": other_pid}, turns, target,
                                     session="bench-170k-alternating", alternate=other)
    finally:
        database.stop()
    keep = ("p95_added_ms_170k", "p50_added_ms_170k", "proxy_p50_ms", "proxy_cpu_ms_per_request", "direct_p50_ms",
            "proxy_max_added_ms", "warmup_s")
    return {f"postgres_{key}": measured[key] for key in keep} | {
        "postgres_2_workers_p50_added_ms_170k": moving["p50_added_ms_170k"],
        "postgres_2_workers_p95_added_ms_170k": moving["p95_added_ms_170k"],
        "postgres_alternating_p50_added_ms_170k": alternating["p50_added_ms_170k"],
        "postgres_alternating_p95_added_ms_170k": alternating["p95_added_ms_170k"],
        "postgres_alternating_cpu_ms_per_request": round(alternating["proxy_cpu_ms_per_request"]
                                                         + alternating["other_cpu_ms_per_request"], 2),
        "postgres": "fsync on; one worker, then two workers behind one port",
        **{f"postgres_2_workers_{key}": value for key, value in shared.items()}}


def self_timed(up: str, turns: int, target: int) -> dict[str, Any]:
    """Phase 5: phases 1 and 2 through the same app served in this process (uvicorn in a thread),
    whose log can be read afterwards: the proxy's own account of its time per request
    (`ProxyRequestEntry.added_ms`: from the request's arrival to its answer, the upstream's time
    taken out), which no other process on the machine inflates."""
    import threading

    import uvicorn

    from ctxwin.proxy.config import ProxyConfig
    from ctxwin.proxy.serve import build_app
    from ctxwin.store.entries import ProxyRequestEntry, parse

    app = build_app(ProxyConfig(up))
    tune_gc()  # as a served worker does
    port = free_port()
    server_ = uvicorn.Server(uvicorn.Config(app, **{**uvicorn_options(Listen("127.0.0.1", port), 1),
                                                    "factory": False, "workers": None}))
    thread = threading.Thread(target=server_.run, daemon=True)
    thread.start()
    while not server_.started:
        time.sleep(0.01)
    try:
        sequential({"direct": up, "proxy": f"http://127.0.0.1:{port}"}, {"direct": os.getpid(), "proxy": os.getpid()},
                   turns, target, session="bench-170k-self")
        time.sleep(0.5)  # the last answer's entry is written once its caller has it
        engine = next(iter(app.state.proxy.store.engines().values()))
        notes = [e for e in (parse(s.kind, s.payload) for s in engine.session) if isinstance(e, ProxyRequestEntry)]
    finally:
        server_.should_exit = True
        thread.join(timeout=30)
    own = [n.added_ms for n in notes[-turns:]]
    return {"proxy_self_p50_ms": round(percentile(own, 0.5), 2), "proxy_self_p95_ms": round(percentile(own, 0.95), 2),
            "proxy_self_max_ms": round(max(own), 2)}


def json_library() -> str:
    """The JSON libraries on the proxy's request path: what its modules import (msgspec scans the
    body into raw fields, orjson parses and writes what changed)."""
    import ctxwin.proxy.app  # noqa: F401  (loads the request path's modules)

    used = {name for name in ("msgspec", "orjson", "json")
            if any(name in vars(module) for key, module in list(sys.modules.items())
                   if key.startswith("ctxwin.proxy.") and module is not None)}
    return "+".join(sorted(used - {"json"})) or "json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer turns and sessions (a smoke run)")
    parser.add_argument("--no-postgres", action="store_true", help="skip phase 4 (the proxy over PostgreSQL)")
    parser.add_argument("--serve", choices=("upstream", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_here(args.serve, args.port)
        return
    turns, sessions, target = (20, 10, 60_000) if args.quick else (TURNS, SESSIONS, HISTORY_TOKENS)
    python = sys.executable
    ports = {name: free_port() for name in ("upstream", "bare", "proxy")}
    here = str(Path(__file__).resolve())
    upstream_argv = [python, here, "--serve", "upstream", "--port", str(ports["upstream"])]
    up = f"http://127.0.0.1:{ports['upstream']}"
    load_before = os.getloadavg()[0]
    with server(upstream_argv, ports["upstream"]) as (_, upstream_pid), \
         server([python, here, "--serve", "bare", "--port", str(ports["bare"])], ports["bare"],
                {"BENCH_UPSTREAM": up}) as (bare, bare_pid), \
         server([python, "-m", "ctxwin.cli.main", "proxy", "--upstream", up, "--listen",
                 f"127.0.0.1:{ports['proxy']}"], ports["proxy"]) as (proxy, proxy_pid):
        urls = {"direct": up, "bare": bare, "proxy": proxy}
        result = sequential(urls, {"direct": upstream_pid, "bare": bare_pid, "proxy": proxy_pid}, turns, target)
        result |= asyncio.run(concurrent(proxy, sessions, SESSION_TURNS))
        result |= self_timed(up, turns, target)
        if not args.no_postgres:
            result |= with_postgres(python, up, upstream_pid, turns, target, sessions)
    # The timed phases stop the run at the first failed request, so their errors are 0 when it ends.
    result["errors_total"] = result["errors"] + (result.get("postgres_2_workers_errors") or 0)
    result |= {"json_library": json_library(), "policy": "ctxwin", "store": "memory", "upstream": "fixed-reply ASGI",
               "cpus": os.cpu_count(), "loadavg_1m_before": round(load_before, 2),
               "loadavg_1m_after": round(os.getloadavg()[0], 2), "quick": args.quick}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
