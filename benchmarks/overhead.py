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
    python benchmarks/overhead.py --against REF [--rounds N] [--quick]

`--against REF` (a git ref, e.g. a89843b) measures this tree and the tree at REF in one session: REF's
`src/` is exported to a temporary folder (`git archive`, the repository is not touched), and each
measurement (one session, or the synthetic run) runs in its own process with `PYTHONPATH` set to one
tree's `src/`, the two trees alternating and the order flipped every round, so load on a shared
machine falls on both alike. Latencies are pooled over the rounds (p95 and max over every call of
every round). The same measuring code (this file) runs for both trees.

`CTXWIN_SHARED_DIR`: where `shared/` is (default: next to the checkout).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from ctxwin.evaluation.replay import iter_replay
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.tokens import counter_for
from ctxwin.tokens.base import TokenCounter
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.model import Transcript

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CTXWIN_SHARED_DIR", ROOT.parent / "shared")) / "transcripts"
SESSIONS = [
    SHARED / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    SHARED / "claude-code" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    SHARED / "claude-code" / "8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl",
    SHARED / "pi" / "before-compaction.jsonl",
]
SYNTHETIC_MESSAGES = 10_000
QUICK_SYNTHETIC_MESSAGES = 2_000
SYNTHETIC_WINDOW = 2_000_000
DEFAULT_ROUNDS = 3
"""Rounds of `--against`: each measures every session once under each tree."""


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


def measure(transcript: Transcript, policy: str, window: int | None, naive: bool) -> dict[str, list[float]]:
    """Every call's `prepare()` time (the engine times its own: new messages through the per-message
    stages, then the view-wide stages, repair and validation, as a harness would call it before each
    model call) and tokens; with `naive`, the naive recounts of the same calls; and every full (gen-2)
    garbage collection of the run, wherever it fell (a pause of the whole process: inside a `prepare()`
    it is part of that call's time)."""
    counter = counter_for(transcript.model)
    out: dict[str, list[float]] = {"latencies": [], "tokens": [], "naive": [], "naive_view": [], "gc_full": []}
    started_at: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started_at[:] = [time.perf_counter()]
            elif started_at:
                out["gc_full"].append((time.perf_counter() - started_at[0]) * 1000)

    gc.callbacks.append(on_gc)
    try:
        run_calls(transcript, policy, window, naive, counter, out)
    finally:
        gc.callbacks.remove(on_gc)
    return out


def run_calls(transcript: Transcript, policy: str, window: int | None, naive: bool, counter: TokenCounter,
              out: dict[str, list[float]]) -> None:
    for _, prepared, engine in iter_replay(transcript, policy, window=window):
        out["latencies"].append(prepared.elapsed_ms)
        out["tokens"].append(prepared.tokens)
        if naive:
            started = time.perf_counter()
            sum(counter.count_message(m) for m in engine.messages)  # the whole history, recounted
            out["naive"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            sum(counter.count_message(m) for m in prepared.messages)  # the request sent, recounted
            out["naive_view"].append((time.perf_counter() - started) * 1000)


def summarize(raw: dict[str, list[float]]) -> dict[str, Any]:
    latencies = raw["latencies"]
    result: dict[str, Any] = {
        "calls": len(latencies),
        "p50_ms": round(statistics.median(latencies), 3),
        "p95_ms": round(percentile(latencies, 0.95), 3),
        "max_ms": round(max(latencies), 3),
        "peak_tokens": int(max(raw["tokens"])),
        "gc_full": len(raw.get("gc_full", ())),
        "gc_full_max_ms": round(max(raw.get("gc_full", ()), default=0.0), 3),
    }
    if raw["naive"]:
        result["naive_p95_ms"] = round(percentile(raw["naive"], 0.95), 3)
        result["naive_p50_ms"] = round(statistics.median(raw["naive"]), 3)
        result["naive_view_p95_ms"] = round(percentile(raw["naive_view"], 0.95), 3)
    return result


def run(transcript: Transcript, policy: str, window: int | None, naive: bool) -> dict[str, Any]:
    return summarize(measure(transcript, policy, window, naive))


def measure_session(name: str, quick: bool) -> dict[str, Any]:
    """One measurement: a shared session (its file path) under `ctxwin` and `raw`, or `synthetic`."""
    if name == "synthetic":
        session = synthetic(QUICK_SYNTHETIC_MESSAGES if quick else SYNTHETIC_MESSAGES)
        raw = measure(session, "ctxwin", SYNTHETIC_WINDOW, naive=False)
        counter = counter_for(session.model)
        return {"ctxwin": raw, "session_tokens": sum(counter.count_message(m) for m in session.messages)}
    transcript = load_transcript(Path(name))
    # The raw policy sends the full context on every call (up to 170K+).
    return {"ctxwin": measure(transcript, "ctxwin", None, naive=True),
            "raw": measure(transcript, "raw", None, naive=True)}


def session_result(measured: dict[str, Any]) -> dict[str, Any]:
    result = summarize(measured["ctxwin"])
    if "raw" in measured:
        raw = summarize(measured["raw"])
        result["raw_p95_ms"] = raw["p95_ms"]
        result["raw_naive_p95_ms"] = raw["naive_p95_ms"]
        result["raw_peak_tokens"] = raw["peak_tokens"]
    else:
        result["session_tokens"] = measured["session_tokens"]
    return result


def overall(per_session: dict[str, dict[str, Any]], synth: dict[str, Any], quick: bool) -> dict[str, Any]:
    p95 = max(float(r["p95_ms"]) for r in per_session.values())
    naive_p95 = max(float(r["naive_p95_ms"]) for r in per_session.values())
    raw_p95 = max(float(r["raw_p95_ms"]) for r in per_session.values())
    return {
        "p50_ms": max(float(r["p50_ms"]) for r in per_session.values()),
        "p95_ms": p95,
        "max_ms": max(float(r["max_ms"]) for r in per_session.values()),
        "naive_p95_ms": naive_p95,
        "speedup_p95": round(naive_p95 / p95, 1) if p95 else None,
        "naive_view_p95_ms": max(float(r["naive_view_p95_ms"]) for r in per_session.values()),
        "raw_p95_ms": raw_p95,
        "raw_speedup_p95": round(max(float(r["raw_naive_p95_ms"]) for r in per_session.values()) / raw_p95, 1),
        "synthetic_p95_ms": synth["p95_ms"],
        "synthetic_max_ms": synth["max_ms"],
        "synthetic_gc_full_max_ms": synth["gc_full_max_ms"],
        "synthetic_peak_tokens": synth["peak_tokens"],
        "synthetic_session_tokens": synth["session_tokens"],
        "synthetic_messages": QUICK_SYNTHETIC_MESSAGES if quick else SYNTHETIC_MESSAGES,
        "sessions": per_session,
    }


def shared_sessions(quick: bool) -> list[Path]:
    sessions = [p for p in SESSIONS if p.exists()]
    if not sessions:
        sys.exit(f"the shared transcripts are missing ({SHARED}); set CTXWIN_SHARED_DIR")
    return sessions[:1] if quick else sessions


def main_here(quick: bool) -> None:
    per_session = {}
    for path in shared_sessions(quick):
        result = session_result(measure_session(str(path), quick))
        per_session[path.name[:8]] = result
        print(f"{path.name[:8]}: {result}", file=sys.stderr)
    synth = session_result(measure_session("synthetic", quick))
    print(f"synthetic: {synth}", file=sys.stderr)
    summary = overall(per_session, synth, quick)
    summary["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(summary))


# --------------------------------------------------------------------------------------------------
# --against REF


def export_tree(ref: str, into: Path) -> str:
    """REF's `src/` under `into` (read from the repository with `git archive`); returns REF's commit."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, "src"],
                             check=True, capture_output=True).stdout
    tar = into / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as handle:
        handle.extractall(into, filter="data")
    tar.unlink()
    return commit


def measure_in(src: Path, name: str, quick: bool) -> dict[str, Any]:
    """`measure_session` in a fresh process importing ctxwin from `src`."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    command = [sys.executable, str(Path(__file__).resolve()), "--measure", name, *(["--quick"] if quick else [])]
    done = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def pooled(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The measurements of several rounds as one: every call of every round."""
    out: dict[str, Any] = {}
    for key in ("ctxwin", "raw"):
        if key in rounds[0]:
            out[key] = {field: [v for r in rounds for v in r[key][field]] for field in rounds[0][key]}
    if "session_tokens" in rounds[0]:
        out["session_tokens"] = rounds[0]["session_tokens"]
    return out


def main_against(ref: str, rounds: int, quick: bool) -> None:
    names = [str(p) for p in shared_sessions(quick)] + ["synthetic"]
    here = ROOT / "src"
    with tempfile.TemporaryDirectory(prefix="ctxwin-against-") as folder:
        commit = export_tree(ref, Path(folder))
        trees = {"this": here, "ref": Path(folder) / "src"}
        got: dict[str, dict[str, list[dict[str, Any]]]] = {t: {n: [] for n in names} for t in trees}
        for round_ in range(rounds):
            for name in names:
                order = ["this", "ref"] if (round_ + names.index(name)) % 2 == 0 else ["ref", "this"]
                for tree in order:
                    got[tree][name].append(measure_in(trees[tree], name, quick))
                short = Path(name).name[:8]
                print(f"round {round_ + 1}/{rounds} {short}: "
                      + ", ".join(f"{t} p95 {summarize(got[t][name][-1]['ctxwin'])['p95_ms']} ms" for t in order),
                      file=sys.stderr)
    results, rows = {}, []
    for tree in trees:
        per_session = {Path(n).name[:8]: session_result(pooled(got[tree][n])) for n in names if n != "synthetic"}
        results[tree] = overall(per_session, session_result(pooled(got[tree]["synthetic"])), quick)
        results[tree]["synthetic"] = session_result(pooled(got[tree]["synthetic"]))
    for key in [*results["this"]["sessions"], "synthetic"]:
        this, other = ((r["sessions"] if key != "synthetic" else r)[key] for r in (results["this"], results["ref"]))
        rows.append((key, this, other))
    print(f"prepare() ms, this tree vs {ref} ({commit[:9]}), {rounds} round(s) pooled, alternating "
          "(gc: the longest full garbage collection of the run, wherever it fell):", file=sys.stderr)
    columns = {"p50_ms": "p50", "p95_ms": "p95", "max_ms": "max", "gc_full_max_ms": "gc"}
    print(f"{'session':<10}" + "".join(f"{label + ' this':>11}{label + ' ref':>10}" for label in columns.values()),
          file=sys.stderr)
    for key, this, other in rows:
        print(f"{key:<10}" + "".join(f"{this[c]:>11}{other[c]:>10}" for c in columns), file=sys.stderr)
    print(json.dumps({"against": ref, "against_commit": commit, "rounds": rounds, "quick": quick,
                      "this": results["this"], "ref": results["ref"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one session and a 2,000-message synthetic run")
    parser.add_argument("--against", metavar="REF", help="also measure the tree at this git ref, alternating")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds of --against")
    parser.add_argument("--measure", metavar="SESSION", help=argparse.SUPPRESS)  # one measurement, for --against
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure_session(args.measure, args.quick)))
    elif args.against:
        main_against(args.against, max(1, args.rounds), args.quick)
    else:
        main_here(args.quick)


if __name__ == "__main__":
    main()
