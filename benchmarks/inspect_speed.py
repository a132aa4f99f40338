"""Speed of `ctxwin inspect --json` on every real session file in ../shared/transcripts: the wall time of
the real command in a subprocess (interpreter start and imports included: what a user waits for), and
the time of the library calls alone (load_transcript + inspect_transcript). The target is 3 s per file.
Prints one JSON object on its last line; times are the best of REPEATS.

    /work/venv/bin/python benchmarks/inspect_speed.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ctxwin.tokens import counter_for
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.inspect import inspect_transcript

SHARED = Path(os.environ.get("CTXWIN_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared")) / "transcripts"
SUFFIXES = (".jsonl", ".traj")
REPEATS = 3
TARGET_S = 3.0  # per file, the whole command
NO_TRANSCRIPTS = ("letta-filesystem",)  # a folder of the shared set with no session files


def best(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    files = sorted(p for p in SHARED.glob("*/*") if p.suffix in SUFFIXES and p.parent.name not in NO_TRANSCRIPTS)
    if not files:
        print(json.dumps({"error": f"no session files under {SHARED}"}))
        sys.exit(1)
    rows = []
    for path in files:
        command = [sys.executable, "-m", "ctxwin.cli.main", "inspect", str(path), "--json"]
        codes = []

        def run(command: list[str] = command, codes: list[int] = codes) -> None:
            codes.append(subprocess.run(command, capture_output=True, timeout=60).returncode)

        cli_s = best(run)
        library_s = best(lambda path=path: inspect_transcript(load_transcript(path)))
        rows.append({"file": str(path.relative_to(SHARED)), "bytes": path.stat().st_size, "exit_code": codes[-1],
                     "cli_s": round(cli_s, 3), "library_s": round(library_s, 3)})
        print(f"{rows[-1]['file']:70} {cli_s:6.2f} s  (library {library_s:5.2f} s)", file=sys.stderr)
    slowest = max(rows, key=lambda r: r["cli_s"])
    print(json.dumps({
        "benchmark": "inspect",
        "counter": counter_for(None).name,
        "files": len(rows),
        "target_s": TARGET_S,
        "slowest": slowest,
        "all_under_target": all(r["cli_s"] < TARGET_S for r in rows),
        "rows": rows,
    }))


if __name__ == "__main__":
    main()
