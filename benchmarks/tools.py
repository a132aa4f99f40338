"""Benchmark of the budgeted tools on a generated tree (tens of MB, in a temp folder).

- grep: ctxwin's grep (ripgrep engine, sorted, capped, formatted) against running bare `rg PATTERN DIR`
  in the same run, for a rare and a common pattern; median of several warm runs each. Target: ratio <= 1.5.
- The pure-Python grep fallback on the same tree, for reference.
- read: paging through a large text file by following the notices, in MB/s.
- grep memory: twelve 40 MB one-line files (issue 17 item 15); peak RSS of the Python process running
  grep (each engine in its own child process) and of ripgrep. Target: the Python side well under the
  files' size (it was 1.47 GB before ripgrep's output was streamed and capped).

Prints one JSON object on its last line.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ctxwin.tools import Limits, Workspace, find_rg, grep, read

TREE_MB = 40  # size of the generated tree
FILE_KB = 20  # size of one generated file
RUNS = 15  # timed runs per measurement, alternating ctxwin and bare rg (the medians are compared)
READ_FILE_MB = 16  # size of the file paged through by read
WORDS = (
    "alpha", "beta", "gamma", "delta", "epsilon", "request", "response", "handler", "config", "value", "index",
    "buffer", "token", "window", "context", "message", "result", "error", "status", "return", "import", "class",
    "def", "self", "none", "true", "false", "list", "dict", "string", "parse", "render",
)


def make_tree(root: Path, rng: random.Random) -> tuple[int, int]:
    """Python-like files in nested folders, plus ignored and skipped folders; returns (files, bytes)."""
    files = 0
    total = 0
    target = TREE_MB * 1024 * 1024
    while total < target:
        folder = root / f"pkg{files % 17}" / f"mod{files % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        lines = []
        size = 0
        while size < FILE_KB * 1024:
            words = rng.choices(WORDS, k=rng.randint(3, 12))
            line = "    " * rng.randint(0, 3) + " ".join(words)
            lines.append(line)
            size += len(line) + 1
        if files % 97 == 0:
            lines.insert(rng.randrange(len(lines)), "    raise RareSentinelError('needle-4711')")
        text = "\n".join(lines) + "\n"
        (folder / f"file{files}.py").write_text(text)
        files += 1
        total += len(text)
    for skipped in ("node_modules/lib", ".git/objects", "build/out"):
        (root / skipped).mkdir(parents=True, exist_ok=True)
        (root / skipped / "x.py").write_text("raise RareSentinelError('needle-4711')\n" * 1000)
    (root / ".gitignore").write_text("build/\n")
    return files, total


def median_seconds(call: Callable[[], object], runs: int = RUNS) -> float:
    call()  # warm up (page cache, imports)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def interleaved(
    first: Callable[[], object], second: Callable[[], object], runs: int = RUNS
) -> tuple[list[float], list[float]]:
    """Times two calls alternately, so a busy machine slows both alike."""
    first()
    second()
    a: list[float] = []
    b: list[float] = []
    for _ in range(runs):
        for call, into in ((first, a), (second, b)):
            started = time.perf_counter()
            call()
            into.append(time.perf_counter() - started)
    return a, b


MEMORY_FILES = 12  # one-line files for the grep memory measurement
MEMORY_FILE_MB = 40
# The Python side's peak is VmHWM (per address space, so reset at exec; ru_maxrss is not: it would carry
# the benchmark's own peak into the child). ripgrep's is its ru_maxrss, an upper bound for the same reason.
MEMORY_CHILD = """
import json, resource, sys, time
from ctxwin.tools import Workspace, grep

def hwm_mb():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return round(int(line.split()[1]) / 1024, 1)

ws = Workspace([sys.argv[1]])
baseline = hwm_mb()
started = time.perf_counter()
out = grep(ws, "needle", engine=sys.argv[2])
elapsed = time.perf_counter() - started
print(json.dumps({
    "python_baseline_mb": baseline, "python_peak_mb": hwm_mb(),
    "rg_peak_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
    "seconds": round(elapsed, 2), "output_bytes": len(out.text.encode()), "matches": out.details.get("matches"),
}))
"""


def grep_memory(folder: Path, engines: list[str]) -> dict[str, object]:
    """Peak RSS of grep over MEMORY_FILES one-line files of MEMORY_FILE_MB each, per engine."""
    folder.mkdir()
    line = b"x" * (MEMORY_FILE_MB * 1024 * 1024 - 8) + b" needle\n"
    for n in range(MEMORY_FILES):
        (folder / f"one-line-{n}.txt").write_bytes(line)
    out: dict[str, object] = {"grep_memory_files": MEMORY_FILES, "grep_memory_file_mb": MEMORY_FILE_MB}
    src = str(Path(__file__).resolve().parent.parent / "src")
    for engine in engines:
        done = subprocess.run(
            [sys.executable, "-c", MEMORY_CHILD, str(folder), engine], capture_output=True, check=True,
            env={**os.environ, "PYTHONPATH": src},
        )
        facts = json.loads(done.stdout.decode().strip().splitlines()[-1])
        for key, value in facts.items():
            out[f"grep_memory_{engine}_{key}"] = value
    return out


def page_through(ws: Workspace, name: str) -> int:
    offset: int | None = 1
    pages = 0
    while offset is not None:
        out = read(ws, name, offset=offset)
        assert not out.is_error, out.text
        offset = out.details["next_offset"]
        pages += 1
    return pages


def main() -> None:
    rng = random.Random(1234)
    rg = find_rg()
    result: dict[str, object] = {"rg": rg}
    with tempfile.TemporaryDirectory(prefix="ctxwin-bench-") as tmp:
        root = Path(tmp) / "tree"
        root.mkdir()
        files, size = make_tree(root, rng)
        result.update(tree_mb=round(size / 1024 / 1024, 1), tree_files=files)
        ws = Workspace([root])
        patterns = {"rare": "RareSentinelError", "common": "handler config"}
        ratios = []
        for label, pattern in patterns.items():
            py_out = grep(ws, pattern, engine="python")
            py_time = median_seconds(lambda p=pattern: grep(ws, p, engine="python"), 3)
            result[f"python_grep_{label}_ms"] = round(py_time * 1000, 1)
            if rg is None:
                continue
            rg_out = grep(ws, pattern, engine="rg")
            assert rg_out.text == py_out.text, f"engines differ on {pattern!r}"
            ctx_times, bare_times = interleaved(
                lambda p=pattern: grep(ws, p, engine="rg"),
                lambda p=pattern: subprocess.run([rg, p, str(root)], capture_output=True, check=False),
            )
            ctx, bare = statistics.median(ctx_times), statistics.median(bare_times)
            bare_bytes = len(subprocess.run([rg, pattern, str(root)], capture_output=True, check=False).stdout)
            result[f"ctxwin_grep_{label}_ms"] = round(ctx * 1000, 1)
            result[f"rg_{label}_ms"] = round(bare * 1000, 1)
            result[f"rg_{label}_output_kb"] = round(bare_bytes / 1024, 1)
            result[f"grep_{label}_matches_shown"] = rg_out.details["matches"]
            ratios.append(ctx / bare)
            result[f"grep_vs_rg_ratio_{label}"] = round(ctx / bare, 3)
        result["grep_vs_rg_ratio"] = round(max(ratios), 3) if ratios else None

        big = Path(tmp) / "big.txt"
        with open(big, "w") as handle:
            written = 0
            number = 0
            while written < READ_FILE_MB * 1024 * 1024:
                number += 1
                line = f"{number:08d} " + " ".join(rng.choices(WORDS, k=rng.randint(4, 14))) + "\n"
                handle.write(line)
                written += len(line)
        read_ws = Workspace([Path(tmp)], limits=Limits(read_max_tokens=10**9))
        started = time.perf_counter()
        pages = page_through(read_ws, "big.txt")
        elapsed = time.perf_counter() - started
        result.update(
            read_file_mb=READ_FILE_MB, read_pages=pages, read_s=round(elapsed, 2),
            read_mb_s=round(READ_FILE_MB / elapsed, 2), read_page_ms=round(elapsed / pages * 1000, 1),
        )
        first = median_seconds(lambda: read(read_ws, "big.txt", offset=1, limit=2000))
        result["read_first_page_ms"] = round(first * 1000, 2)
        big.unlink()
        result.update(grep_memory(Path(tmp) / "one-line", ["rg", "python"] if rg else ["python"]))
    print(json.dumps(result), file=sys.stdout)


if __name__ == "__main__":
    main()
