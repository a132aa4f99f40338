"""What telemetry adds to `prepare()`.

The same synthetic tool loop (a read-like output per step, the `ctxwin` policy, a 200K window, so
masking and compaction happen along the way) is run on fresh engines, alternating: without
observers (telemetry off: the engine only records its stage runs), and instrumented with an SDK
tracer provider exporting synchronously to memory (every span made and exported inside the call).
Reports the median and p95 time of a `prepare()` past the first 100 steps for each, the difference,
and the spans recorded. Prints one JSON object on its last line.

    python benchmarks/telemetry_overhead.py [--steps N] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ctxwin import telemetry
from ctxwin.engine import ContextEngine
from ctxwin.messages import Message, Text, ToolCall, ToolResult

WARMUP = 100  # steps left out of the statistics (the view is short, nothing is due)


def run(steps: int, instrumented: bool) -> tuple[list[float], int]:
    engine = ContextEngine(model="claude-sonnet-4-5", policy="ctxwin", window=200_000, max_output=8_000)
    exporter = InMemorySpanExporter()
    if instrumented:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        telemetry.instrument(engine, provider)
    engine.append(Message("user", (Text("Refactor the parser."),)))
    times = []
    for n in range(steps):
        engine.append(Message("assistant", (Text(f"step {n}"), ToolCall(f"c{n}", "bash", {"command": f"cat f{n}"}))))
        engine.append(Message("tool", (ToolResult(f"c{n}", (Text(f"line {n} of output\n" * 40),), name="bash"),)))
        started = time.perf_counter()
        engine.prepare()
        times.append((time.perf_counter() - started) * 1000)
    return times[WARMUP:], len(exporter.get_finished_spans())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    off: list[float] = []
    on: list[float] = []
    spans = 0
    for _ in range(args.rounds):  # alternated, so load on the shared machine hits both alike
        off += run(args.steps, False)[0]
        times, spans = run(args.steps, True)
        on += times

    def p95(values: list[float]) -> float:
        return sorted(values)[int(0.95 * len(values))]

    result = {
        "steps": args.steps, "rounds": args.rounds,
        "off_median_ms": round(statistics.median(off), 3), "off_p95_ms": round(p95(off), 3),
        "instrumented_median_ms": round(statistics.median(on), 3), "instrumented_p95_ms": round(p95(on), 3),
        "added_median_ms": round(statistics.median(on) - statistics.median(off), 3),
        "spans_per_run": spans,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
