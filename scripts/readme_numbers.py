"""Measure the figures the README's Quick start gives, and write them into README.md.

    .venv/bin/python scripts/readme_numbers.py [--tests] [--write]

Each figure sits in README.md between `<!-- n:NAME -->` and `<!-- /n -->` (invisible once rendered);
nothing there is typed by hand. What is measured, each as a user runs it (the installed commands in fresh
processes, no network):

- `demo_*`: `ctxwin demo --json --keep DIR` once: its model calls, tool calls, history tokens, the wall
  time of the command, and whether a policy's peak request is past the window (`raw`, which has none).
- `offline_*`: the scripted fake provider (`python -m ctxwin.testing --script demo`) on a free port and
  the README's `ctxwin run` against it: model calls, compactions (inside the tool loop), how it stopped.
- `tests_*`: how many tests the README's test command runs (and how many more `--run-slow` adds); with
  `--tests`, that command's wall time too, and the machine's load average while it ran (minutes of
  work: run it on a quiet machine for the README).

Without `--write` it prints the figures as one JSON object on its last line; with it, README.md is
rewritten in place (only the marked figures change).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARK = re.compile(r"<!-- n:(?P<name>[a-z_]+) -->(?P<value>.*?)<!-- /n -->", re.S)
RUN_TASK = "Survey the code and keep notes."  # the README's offline `ctxwin run` (window 16000, output 1000)
TEST_COMMAND = ["-m", "pytest", "-n", "auto"]  # the README's test command, after `.venv/bin/python`


def ctxwin(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxwin.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, check=False)


def demo_figures(folder: Path) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    done = ctxwin("demo", "--json", "--quiet", "--keep", str(folder / "session"), "-o", str(folder / "r.html"))
    wall = time.perf_counter() - started
    load = round((load_before + os.getloadavg()[0]) / 2, 1)  # other jobs on the machine meanwhile
    if done.returncode:
        raise SystemExit(f"ctxwin demo failed: {done.stderr[-2000:]}")
    data = json.loads(done.stdout.splitlines()[-1])
    session, comparison = data["session"], data["comparison"]
    window = comparison["window"]
    over = {name: row["peak_tokens"] for name, row in comparison["policies"].items() if row["peak_tokens"] > window}
    inspect = json.loads(ctxwin("inspect", str(folder / "session"), "--json").stdout)
    return {
        "demo_model_calls": session["model_calls"],
        "demo_tool_calls": session["tool_calls"],
        "demo_tokens": session["tokens"],
        "demo_window": window,
        "demo_seconds": round(wall),
        "demo_load": load,
        "demo_raw_peak": over.get("raw"),
        "demo_over_window": sorted(over),
        "demo_kept_messages": inspect["messages"],
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def offline_figures(workspace: Path) -> dict[str, Any]:
    port = free_port()
    fake = subprocess.Popen([sys.executable, "-m", "ctxwin.testing", "--port", str(port), "--window", "16000",
                             "--script", "demo"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        done = ctxwin("run", RUN_TASK, "--base-url", f"http://127.0.0.1:{port}/v1", "--api", "openai", "--api-key",
                      "test", "--window", "16000", "--max-output", "1000", "--json", cwd=workspace)
    finally:
        fake.terminate()
        fake.wait(timeout=30)
    if done.returncode not in (0, 1):
        raise SystemExit(f"ctxwin run failed: {done.stderr[-2000:]}")
    totals = json.loads(done.stdout.splitlines()[-1])
    return {"offline_model_calls": totals["model_calls"], "offline_compactions": totals["compactions"],
            "offline_compactions_in_loop": totals["compactions_inside_tool_loops"], "offline_stop": totals["stop"]}


def collected(*extra: str) -> int:
    """How many tests a run selects (pytest's "N tests collected", or "N/M" with some deselected)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *extra],
                          capture_output=True, text=True, cwd=REPO, timeout=900, check=False)
    counts = re.findall(r"(\d+)(?:/\d+)? tests? collected", done.stdout)
    if not counts:
        raise SystemExit(f"pytest --collect-only said: {done.stdout[-1000:]}{done.stderr[-1000:]}")
    return int(counts[-1])


def test_figures(timed: bool) -> dict[str, Any]:
    everything = collected("--run-slow")
    lean = collected()
    out: dict[str, Any] = {"tests_default": lean, "tests_slow": everything - lean}
    if timed:
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, *TEST_COMMAND, "-p", "no:cacheprovider"], cwd=REPO,
                              capture_output=True, text=True, check=False)
        out["tests_minutes"] = round((time.perf_counter() - started) / 60, 1)
        out["tests_passed"] = done.returncode == 0
        out["tests_cpus"] = os.cpu_count()
        out["tests_load"] = round((load_before + os.getloadavg()[0]) / 2, 1)  # other jobs on the machine meanwhile
        if done.returncode:
            print(f"the test command failed (exit {done.returncode}):\n{done.stdout[-4000:]}", file=sys.stderr)
    return out


def approximately(value: int) -> str:
    """A count as a reader wants it: 1,895 -> "1,900", 203 -> "200", 47 -> "47"."""
    if value >= 1000:
        return f"{round(value, -2):,}"
    if value >= 100:
        return f"{round(value, -1):,}"
    return str(value)


def rendered(figures: dict[str, Any]) -> dict[str, str]:
    """Each figure as the README writes it."""
    text: dict[str, str] = {}
    for name, value in figures.items():
        if name in ("demo_tokens", "demo_raw_peak", "demo_window"):
            text[name] = f"{round(value / 1000):,}K" if value else "none"
        elif name == "offline_stop":
            text[name] = f"`{value}`"
        elif name == "demo_over_window":
            text[name] = ", ".join(f"`{n}`" for n in value) or "none"
        elif isinstance(value, int) and not isinstance(value, bool) and name.endswith(("calls", "tests_default",
                                                                                       "tests_slow")):
            text[name] = approximately(value)
        else:
            text[name] = str(value)
    return text


def write(figures: dict[str, Any]) -> list[str]:
    """Rewrites the marked figures of README.md; returns the names it did not find there."""
    text = rendered(figures)
    readme = README.read_text()
    seen: set[str] = set()

    def put(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in text:
            return match.group(0)
        seen.add(name)
        return f"<!-- n:{name} -->{text[name]}<!-- /n -->"

    README.write_text(MARK.sub(put, readme))
    return sorted(set(text) - seen)


def main() -> None:
    args = sys.argv[1:]
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ctxwin-readme-") as tmp:
        figures |= demo_figures(Path(tmp))
        workspace = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(workspace)], check=True, timeout=300)
        figures |= offline_figures(workspace)  # in a clone, as the README's reader runs it
    figures |= test_figures("--tests" in args)
    if "--write" in args:
        missing = write(figures)
        for name in missing:
            print(f"not in README.md: {name}", file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
