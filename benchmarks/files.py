"""Memory and caps of the guarded reader, measured in fresh subprocesses (peak RSS: the process's
VmHWM, which covers everything it ever held; `getrusage`'s ru_maxrss would also count the parent's
memory at the fork):

- a 50 MB single-line transcript (one Claude Code record whose message is 50 MB of text) read by
  `load_transcript`, and by the whole `ctxwin inspect --json` command; the target is a peak RSS under
  5x the file's size (the interpreter and ctxwin's imports included);
- an 8 MB `.gz` that expands to 8 GiB: refused at the decompression cap with one line on stderr, quickly,
  and without the memory ever growing past the cap;
- `loads_json` on JSON 5,000 levels deep (refused before parsing) and on a wide 13 MB document with
  600,000 brackets (one depth scan, one parse): the seconds each takes (the tests assert the work done).

Prints one JSON object on its last line.

    PYTHONPATH=src /work/main/.venv/bin/python benchmarks/files.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

FILE_MB = 50
BOMB_GIB = 8
TARGET_RATIO = 5.0
SRC = Path(__file__).resolve().parents[1] / "src"

MEASURE = """
import sys
{body}
with open('/proc/self/status') as f:
    print(next(int(line.split()[1]) * 1024 for line in f if line.startswith('VmHWM:')))
"""
LOAD = "from ctxwin.transcripts import load_transcript\nt = load_transcript(sys.argv[1])\nassert t.messages"
INSPECT = "from ctxwin.cli.main import main\nsys.argv = ['ctxwin', 'inspect', sys.argv[1], '--json']\n" \
          "import contextlib, io\nwith contextlib.redirect_stdout(io.StringIO()):\n" \
          "    try:\n        main()\n    except SystemExit as e:\n        assert not e.code, e.code"
BASELINE = "import ctxwin.cli.main, ctxwin.transcripts"


def write_single_line(path: Path, size: int) -> None:
    """Written a block at a time, so the benchmark itself stays small."""
    words = ("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor " * 8).encode()
    block = words * ((1 << 20) // len(words))
    record = {"type": "user", "uuid": "u1", "sessionId": "s", "timestamp": "2026-01-01T00:00:00Z",
              "message": {"role": "user", "content": "@@"}}
    head, tail = json.dumps(record).encode().split(b"@@")
    with path.open("wb") as out:
        out.write(head)
        written = 0
        while written < size:
            piece = block[: size - written]
            out.write(piece)
            written += len(piece)
        out.write(tail + b"\n")


def write_bomb(path: Path, expanded: int) -> None:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    with path.open("wb") as out:
        for _ in range(expanded // len(block)):
            out.write(compressor.compress(block))
        out.write(compressor.flush())


def peak_rss(body: str, *args: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", MEASURE.format(body=body), *args], capture_output=True, text=True,
                          env=env, timeout=600)
    if done.returncode:
        raise SystemExit(f"measurement failed: {done.stderr[-2000:]}")
    return int(done.stdout.strip().splitlines()[-1])


def json_seconds() -> dict[str, float]:
    """Best of three: `loads_json` refusing deep JSON, and reading wide JSON."""
    from ctxwin.errors import JSONTooDeepError
    from ctxwin.files import loads_json

    deep = "[" * 5000 + "]" * 5000
    wide = json.dumps([{"a": [i, {"b": "x" * 50}]} for i in range(200_000)])

    def refuse() -> None:
        try:
            loads_json(deep)
        except JSONTooDeepError:
            return
        raise SystemExit("deep JSON was not refused")

    out = {}
    for name, call in (("deep_json_refused_seconds", refuse), ("wide_json_seconds", lambda: loads_json(wide))):
        times = []
        for _ in range(3):
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
        out[name] = round(min(times), 4)
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        big = Path(folder) / "one-line.jsonl"
        write_single_line(big, FILE_MB << 20)
        size = big.stat().st_size
        baseline = peak_rss(BASELINE)
        load = peak_rss(LOAD, str(big))
        inspect = peak_rss(INSPECT, str(big))

        bomb = Path(folder) / "bomb.jsonl.gz"
        write_bomb(bomb, BOMB_GIB << 30)
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        started = time.monotonic()
        refused = subprocess.run([sys.executable, "-m", "ctxwin.cli.main", "inspect", str(bomb)], capture_output=True,
                                 text=True, env=env, timeout=600)
        bomb_seconds = time.monotonic() - started
        bomb_rss = peak_rss("from ctxwin.transcripts import load_transcript\nfrom ctxwin.errors import "
                            "FileTooLargeError\ntry:\n    load_transcript(sys.argv[1])\nexcept FileTooLargeError:\n"
                            "    pass\nelse:\n    raise SystemExit('not refused')", str(bomb))
        stderr_lines = [line for line in refused.stderr.splitlines() if line.strip()]
        result = {
            "benchmark": "files",
            "file_bytes": size,
            "baseline_rss_bytes": baseline,
            "load_transcript_peak_rss_bytes": load,
            "load_transcript_peak_rss_ratio": round(load / size, 2),
            "inspect_peak_rss_bytes": inspect,
            "inspect_peak_rss_ratio": round(inspect / size, 2),
            "target_ratio": TARGET_RATIO,
            "meets_target": max(load, inspect) / size < TARGET_RATIO,
            "gzip_bomb": {
                "compressed_bytes": bomb.stat().st_size,
                "expands_to_bytes": BOMB_GIB << 30,
                "exit_code": refused.returncode,
                "stderr_lines": len(stderr_lines),
                "stderr": refused.stderr.strip(),
                "seconds": round(bomb_seconds, 2),
                "peak_rss_bytes": bomb_rss,
            },
            **json_seconds(),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
