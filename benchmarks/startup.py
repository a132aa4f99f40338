"""Start-up of the command line and the library (issue 27.2): each command run in a fresh process as a
user runs it, several times, wall and CPU time (children's user + system), and what `python -X importtime`
says each one imports.

- `import ctxwin` (target 0.15 s), `from ctxwin import ContextEngine`;
- `ctxwin --help` (target 0.15 s);
- `ctxwin inspect` of a 10-line session (target 0.4 s), the first ten lines of the packaged Claude Code
  session.

Prints one JSON object on its last line: per command the minimum and median wall and CPU seconds, and
the modules it imported with the slowest ones (cumulative microseconds, as importtime reports them).

    .venv/bin/python benchmarks/startup.py [--runs 7]
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 7
SRC = Path(__file__).resolve().parents[1] / "src"
EXAMPLE = SRC / "ctxwin" / "examples" / "claude-code-session.jsonl"
TARGETS_S = {"import ctxwin": 0.15, "ctxwin --help": 0.15, "ctxwin inspect (10 lines)": 0.4}
SLOWEST_SHOWN = 8


def timed(command: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `command` (its output thrown away)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imports(command: list[str]) -> dict[str, object]:
    """What `-X importtime` reports for one run: how many modules, and the slowest top-level ones."""
    done = subprocess.run([command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True,
                          check=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line or "cumulative" in line:
            continue
        parts = line.split(":", 1)[1].split("|")
        self_us, cumulative, name = int(parts[0]), int(parts[1]), parts[2]
        rows.append((cumulative, self_us, name.rstrip(), len(name) - len(name.lstrip())))
    top = sorted((r for r in rows if r[3] <= 2), reverse=True)[:SLOWEST_SHOWN]  # the outermost imports
    return {"modules": len(rows), "slowest": [{"module": n.strip(), "cumulative_us": c} for c, _, n, _ in top]}


def main() -> None:
    args = sys.argv[1:]
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else RUNS
    python = sys.executable
    with tempfile.TemporaryDirectory() as folder:
        ten = Path(folder) / "ten.jsonl"
        ten.write_text("".join(EXAMPLE.read_text().splitlines(keepends=True)[:10]))
        commands = {
            "import ctxwin": [python, "-c", "import ctxwin"],
            "from ctxwin import ContextEngine": [python, "-c", "from ctxwin import ContextEngine"],
            "ctxwin --help": [python, "-m", "ctxwin.cli.main", "--help"],
            "ctxwin inspect (10 lines)": [python, "-m", "ctxwin.cli.main", "inspect", str(ten)],
        }
        result: dict[str, object] = {"benchmark": "startup", "runs": runs, "cpus": os.cpu_count(),
                                     "loadavg_1m_before": round(os.getloadavg()[0], 2)}
        for name, command in commands.items():
            timed(command)  # warm the file cache (and the bytecode) once
            samples = [timed(command) for _ in range(runs)]
            walls, cpus = [w for w, _ in samples], [c for _, c in samples]
            entry: dict[str, object] = {
                "wall_min_s": round(min(walls), 3), "wall_median_s": round(statistics.median(walls), 3),
                "cpu_min_s": round(min(cpus), 3), "cpu_median_s": round(statistics.median(cpus), 3),
                **imports(command),
            }
            if name in TARGETS_S:
                entry["target_s"] = TARGETS_S[name]
                entry["meets_target"] = min(walls) <= TARGETS_S[name]
            result[name] = entry
        result["loadavg_1m_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
