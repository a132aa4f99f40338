"""What `prepare()` costs per model call.

Replays the three long Claude Code sessions and the Pi session under the `ctxwin` policy with their
real window and times every `prepare()`. In the same run, the naive baseline: re-count every token
of the session's history on every call, with the same counter and no per-message cache (what a
library does that keeps no accounting between calls: LangChain's summarization middleware counts its
whole message state before every model call); also reported, re-counting only the request actually
sent (`naive_view_*`, smaller once ctxwin has compacted). Then a synthetic session of about 1M tokens
(1.03M by the estimator) in 10,000 messages, with a 2M window, so every call sees the whole history
(masked outputs included). Prints one JSON object on its last line.

    python benchmarks/overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

from ctxwin.evaluation.replay import iter_replay
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.tokens import counter_for
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.model import Transcript

SHARED = Path(__file__).resolve().parents[2] / "shared" / "transcripts"
SESSIONS = [
    SHARED / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    SHARED / "claude-code" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    SHARED / "claude-code" / "8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl",
    SHARED / "pi" / "before-compaction.jsonl",
]
SYNTHETIC_MESSAGES = 10_000
SYNTHETIC_WINDOW = 2_000_000


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * share), len(ordered) - 1)]


def synthetic(messages: int = SYNTHETIC_MESSAGES) -> Transcript:
    """A session of `messages` messages, about 100 tokens each on average: rounds of an assistant call
    and a tool result, with a user turn every 20 messages."""
    out: list[Message] = []
    n = 0
    while len(out) < messages:
        if n % 10 == 0:
            out.append(Message("user", (Text(f"Task {n}: look at module m{n} and fix the failing test t{n}."),)))
        call = ToolCall(f"c{n}", "bash", {"command": f"cat m{n}.py"})
        out.append(Message("assistant", (Text(f"Checking m{n}."), call)))
        body = "".join(f"def f{n}_{k}(x):\n    return x * {k} + {n}\n" for k in range(7))
        out.append(Message("tool", (ToolResult(f"c{n}", (Text(body),), name="bash"),)))
        n += 1
    return Transcript(format="synthetic", messages=out[:messages], model="claude-sonnet-4-5")


def run(transcript: Transcript, policy: str, window: int | None, naive: bool) -> dict[str, object]:
    counter = counter_for(transcript.model)
    latencies: list[float] = []
    naive_latencies: list[float] = []
    naive_view_latencies: list[float] = []
    tokens: list[int] = []
    for _, prepared, engine in iter_replay(transcript, policy, window=window):
        # The engine times its own prepare(): new messages through the per-message stages, then the
        # view-wide stages, repair and validation, as a harness would call it before each model call.
        latencies.append(prepared.elapsed_ms)
        tokens.append(prepared.tokens)
        if naive:
            started = time.perf_counter()
            sum(counter.count_message(m) for m in engine.messages)  # the whole history, recounted
            naive_latencies.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            sum(counter.count_message(m) for m in prepared.messages)  # the request sent, recounted
            naive_view_latencies.append((time.perf_counter() - started) * 1000)
    result: dict[str, object] = {
        "calls": len(latencies),
        "p50_ms": round(statistics.median(latencies), 3),
        "p95_ms": round(percentile(latencies, 0.95), 3),
        "max_ms": round(max(latencies), 3),
        "peak_tokens": max(tokens),
    }
    if naive:
        result["naive_p95_ms"] = round(percentile(naive_latencies, 0.95), 3)
        result["naive_p50_ms"] = round(statistics.median(naive_latencies), 3)
        result["naive_view_p95_ms"] = round(percentile(naive_view_latencies, 0.95), 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one session and a 2,000-message synthetic run")
    args = parser.parse_args()
    sessions = [p for p in SESSIONS if p.exists()]
    if not sessions:
        sys.exit(f"the shared transcripts are missing ({SHARED})")
    if args.quick:
        sessions = sessions[:1]
    per_session = {}
    all_latencies: list[float] = []
    all_naive: list[float] = []
    raw_p95: list[float] = []
    for path in sessions:
        transcript = load_transcript(path)
        result = run(transcript, "ctxwin", None, naive=True)
        raw = run(transcript, "raw", None, naive=True)  # the full context on every call (up to 170K+)
        result["raw_p95_ms"] = raw["p95_ms"]
        result["raw_naive_p95_ms"] = raw["naive_p95_ms"]
        result["raw_peak_tokens"] = raw["peak_tokens"]
        raw_p95.append(float(raw["p95_ms"]))  # type: ignore[arg-type]
        per_session[path.name[:8]] = result
        print(f"{path.name[:8]}: {result}", file=sys.stderr)
        all_latencies.append(result["p95_ms"])  # type: ignore[arg-type]
        all_naive.append(result["naive_p95_ms"])  # type: ignore[arg-type]
    session = synthetic(2_000 if args.quick else SYNTHETIC_MESSAGES)
    synth = run(session, "ctxwin", SYNTHETIC_WINDOW, naive=False)
    counter = counter_for(session.model)
    synth["session_tokens"] = sum(counter.count_message(m) for m in session.messages)
    print(f"synthetic: {synth}", file=sys.stderr)
    p95 = max(all_latencies)
    naive_p95 = max(all_naive)
    summary = {
        "p50_ms": max(float(r["p50_ms"]) for r in per_session.values()),  # type: ignore[arg-type]
        "p95_ms": p95,
        "max_ms": max(float(r["max_ms"]) for r in per_session.values()),  # type: ignore[arg-type]
        "naive_p95_ms": naive_p95,
        "speedup_p95": round(naive_p95 / p95, 1) if p95 else None,
        "naive_view_p95_ms": max(float(r["naive_view_p95_ms"]) for r in per_session.values()),  # type: ignore[arg-type]
        "raw_p95_ms": max(raw_p95),
        "raw_speedup_p95": round(max(float(r["raw_naive_p95_ms"]) for r in per_session.values())  # type: ignore[arg-type]
                                 / max(raw_p95), 1),
        "synthetic_p95_ms": synth["p95_ms"],
        "synthetic_peak_tokens": synth["peak_tokens"],
        "synthetic_session_tokens": synth["session_tokens"],
        "synthetic_messages": 2_000 if args.quick else SYNTHETIC_MESSAGES,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "sessions": per_session,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
