"""An upstream that streams one endless line, through `ctxwin proxy`: how soon the caller gets its 502
error event, and what it does to every other session meanwhile (issue 26).

Two processes on 127.0.0.1, both uvicorn: the `upstream` (this file, `--serve upstream`), which answers
a request for the model `flood` with a stream whose one data line is `FLOOD_BYTES` long (1 MiB
writes, no newline until the end) and any other request with a small fixed message; and the real
`ctxwin proxy` (the CLI, its default `--max-body-bytes` of 64 MiB) in front of it. Measured:

- `flood_to_error_ms_*`: from sending a flood request to having the proxy's error event, over `FLOODS`;
- `other_*`: the latency of small requests of other sessions (alternately whole and streamed), sent
  one after another while floods run `FLOOD_GAP_S` apart: a request that ran wholly during a flood
  counts as "during", one that ran wholly between two as "at rest" (the others are not counted), so
  both come from the same minutes of the same machine; `other_slowdown_p50` is the ratio of their
  medians (the target: under 2). Each is paired with the same request sent straight to the upstream,
  which also serves the floods: `other_added_*` is what the proxy adds, the upstream's own slowdown
  taken out.

    python benchmarks/proxy_hostile.py [--quick]

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from proxy import free_port, server  # benchmarks/proxy.py: the same way of starting a server process

FLOOD_BYTES = 300 * 2**20
CHUNK = 2**20  # what the upstream writes at a time (the proxy reads what the socket gives it)
FLOODS = 10  # timed one by one, nothing else running
REQUESTS = 100  # of other sessions, at least this many wholly during floods and as many between them
FLOOD_GAP_S = 0.3  # between two floods of the measuring phase
HEADERS = {"x-api-key": "bench-key", "anthropic-version": "2023-06-01"}
START = (b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_flood","type":"message",'
         b'"role":"assistant","model":"flood","content":[],"stop_reason":null,"stop_sequence":null,'
         b'"usage":{"input_tokens":1,"output_tokens":0}}}\n\n')
MESSAGE = {"id": "msg_ok", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
           "stop_sequence": None, "content": [{"type": "text", "text": "Done."}],
           "usage": {"input_tokens": 10, "output_tokens": 2}}


# --------------------------------------------------------------------------------------------------
# The upstream


def small_stream() -> list[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    return [event("message_start", {"type": "message_start", "message": {**MESSAGE, "content": [],
                                                                          "stop_reason": None}}),
            event("content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}}),
            event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                          "delta": {"type": "text_delta", "text": "Done."}}),
            event("content_block_stop", {"type": "content_block_stop", "index": 0}),
            event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                    "usage": {"output_tokens": 2}}),
            event("message_stop", {"type": "message_stop"})]


def upstream_app() -> Any:
    """The upstream: `POST /v1/messages` as above."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    async def answer(request: Request) -> Response:
        body = json.loads(await request.body())
        if body.get("model") == "flood":
            async def flood() -> AsyncIterator[bytes]:
                yield START + b"data: "
                chunk = b"x" * CHUNK
                for _ in range(FLOOD_BYTES // CHUNK):
                    yield chunk
                yield b"\n\n"

            # Framed by its length, not chunked: the upstream's own cost per byte stays small, so what is
            # measured is the proxy's.
            length = len(START) + 6 + (FLOOD_BYTES // CHUNK) * CHUNK + 2
            return StreamingResponse(flood(), media_type="text/event-stream", headers={"content-length": str(length)})
        if body.get("stream"):
            async def events() -> AsyncIterator[bytes]:
                for chunk in small_stream():
                    yield chunk

            return StreamingResponse(events(), media_type="text/event-stream")
        return Response(json.dumps(MESSAGE), media_type="application/json")

    return Starlette(routes=[Route("/v1/messages", answer, methods=["POST"])])


# --------------------------------------------------------------------------------------------------
# Measuring


def flood_once(proxy: str) -> tuple[float, str]:
    """(milliseconds to the end of the caller's answer, its last event's data)."""
    body = {"model": "flood", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    started = time.perf_counter()
    with httpx.stream("POST", f"{proxy}/v1/messages", json=body, headers={**HEADERS, "x-ctxwin-session": "flood"},
                      timeout=120) as response:
        text = "".join(response.iter_text())
    elapsed = (time.perf_counter() - started) * 1000
    last = [line[6:] for line in text.splitlines() if line.startswith("data: ")][-1]
    return elapsed, last


def small_once(client: httpx.Client, n: int) -> float:
    stream = n % 2 == 1
    body = {"model": "m", "max_tokens": 10, "stream": stream,
            "messages": [{"role": "user", "content": f"request {n}"}]}
    started = time.perf_counter()
    with client.stream("POST", "/v1/messages", json=body, headers={"x-ctxwin-session": f"other-{n % 5}"}) as response:
        response.read()
        if response.status_code != 200:
            raise RuntimeError(f"{response.status_code}: {response.text[:200]}")
    return (time.perf_counter() - started) * 1000


class Flooder:
    """Floods one after another, `FLOOD_GAP_S` apart, until stopped; says whether one is in flight
    (and which), so a request of another session can be told to have run wholly during a flood or
    wholly between two."""

    def __init__(self, proxy: str, errors: list[str]) -> None:
        self.proxy, self.errors = proxy, errors
        self.active, self.started = False, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            self.started += 1
            self.active = True
            _elapsed, last = flood_once(self.proxy)
            self.active = False
            if "over the proxy's limit" not in last:
                self.errors.append(f"flood ended with {last[:200]}")
            self.stop.wait(FLOOD_GAP_S)

    def state(self) -> tuple[bool, int]:
        return self.active, self.started


def measure(proxy: str, up: str, floods: int, requests: int) -> dict[str, Any]:
    errors: list[str] = []
    flood_ms: list[float] = []
    for _ in range(floods):
        elapsed, last = flood_once(proxy)
        flood_ms.append(elapsed)
        if "over the proxy's limit" not in last:
            errors.append(f"flood ended with {last[:200]}")
    latency: dict[bool, list[float]] = {False: [], True: []}  # by: a flood ran through the whole request
    added: dict[bool, list[float]] = {False: [], True: []}  # through the proxy minus direct, paired
    flooder = Flooder(proxy, errors)
    with httpx.Client(base_url=proxy, headers=HEADERS, timeout=120) as client, \
         httpx.Client(base_url=up, headers=HEADERS, timeout=120) as direct:
        for n in range(20):  # warm-up: every session opened once
            small_once(client, n)
        flooder.thread.start()
        try:
            n = 0
            while min(len(latency[False]), len(latency[True])) < requests and n < 50 * requests:
                before = flooder.state()
                through = small_once(client, n)
                after = flooder.state()
                straight = small_once(direct, n)
                n += 1
                if before == after:  # wholly during one flood, or wholly between two: else not counted
                    latency[before[0]].append(through)
                    added[before[0]].append(through - straight)
        finally:
            flooder.stop.set()
            flooder.thread.join()
    rest, during = latency[False], latency[True]
    rest_p50, during_p50 = statistics.median(rest), statistics.median(during)
    added_rest, added_during = max(0.01, statistics.median(added[False])), statistics.median(added[True])
    return {"flood_to_error_ms_p50": round(statistics.median(flood_ms), 1),
            "flood_to_error_ms_max": round(max(flood_ms), 1), "floods": floods + flooder.started,
            "other_p50_ms_at_rest": round(rest_p50, 2), "other_p50_ms_during_flood": round(during_p50, 2),
            "other_p95_ms_at_rest": round(sorted(rest)[int(0.95 * (len(rest) - 1))], 2),
            "other_p95_ms_during_flood": round(sorted(during)[int(0.95 * (len(during) - 1))], 2),
            "other_slowdown_p50": round(during_p50 / rest_p50, 2), "other_requests": len(rest) + len(during),
            "other_added_p50_ms_at_rest": round(statistics.median(added[False]), 2),
            "other_added_p50_ms_during_flood": round(statistics.median(added[True]), 2),
            "other_added_slowdown_p50": round(added_during / added_rest, 2),
            "errors": len(errors), "error_examples": errors[:3]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer floods and rounds")
    parser.add_argument("--serve", choices=("upstream",), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        import uvicorn

        uvicorn.run(upstream_app(), host="127.0.0.1", port=args.port, log_level="warning")
        return
    floods, requests = (3, 30) if args.quick else (FLOODS, REQUESTS)
    up_port, proxy_port = free_port(), free_port()
    python, here = sys.executable, str(Path(__file__).resolve())
    load_before = os.getloadavg()[0]
    with server([python, here, "--serve", "upstream", "--port", str(up_port)], up_port) as (up, _), \
         server([python, "-m", "ctxwin.cli.main", "proxy", "--upstream", up, "--listen",
                 f"127.0.0.1:{proxy_port}"], proxy_port) as (proxy, _):
        result = measure(proxy, up, floods, requests)
    result |= {"flood_line_bytes": FLOOD_BYTES, "cpus": os.cpu_count(), "loadavg_1m_before": round(load_before, 2),
               "loadavg_1m_after": round(os.getloadavg()[0], 2), "quick": args.quick}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
