"""Run the README's Quick start as written, in a fresh clone, and write a transcript: each command, its
exit code, how long it took, and the end of what it printed.

    python3 scripts/readme_tour.py [--out TRANSCRIPT] [--clone-from REPO] [--skip-tests]

The commands are the lines of the `sh` blocks of README.md's "Quick start" section, in order, each run
with `bash -c` in the clone (so `&&` chains and the venv paths work as a reader's shell runs them); a line
ending in `&` starts in the background and is stopped at the end. `--skip-tests` leaves out the line
that runs pytest (it takes minutes), saying so in the transcript.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHOWN_LINES = 12  # lines of each command's output kept in the transcript (the last ones)
BACKGROUND_SETTLE_S = 3.0  # time a background server gets before the next command


def quick_start_commands(readme: str) -> list[str]:
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def tail(text: str) -> str:
    lines = text.rstrip().splitlines()
    kept = lines[-SHOWN_LINES:]
    cut = f"    … {len(lines) - len(kept)} line(s) before\n" if len(lines) > len(kept) else ""
    return cut + "".join(f"    {line}\n" for line in kept)


def main() -> None:
    args = sys.argv[1:]
    out = Path(args[args.index("--out") + 1]) if "--out" in args else Path("readme-tour.txt")
    source = args[args.index("--clone-from") + 1] if "--clone-from" in args else str(REPO)
    skip_tests = "--skip-tests" in args
    folder = Path(tempfile.mkdtemp(prefix="fresh-", dir="/tmp"))
    folder.chmod(0o755)  # as a clone in a user's projects folder: the test PostgreSQL's user must reach the venv
    clone = folder / "ctxwin"
    subprocess.run(["git", "clone", "-q", source, str(clone)], check=True)
    head = subprocess.run(["git", "-C", str(clone), "log", "--oneline", "-1"], capture_output=True, text=True).stdout
    commands = quick_start_commands((clone / "README.md").read_text())
    lines = ["README tour: the Quick start of README.md, run as written in a fresh clone\n",
             f"clone: git clone {source} {clone}  (at {head.strip()})\n",
             f"{len(commands)} command(s), each with bash -c in {clone}\n\n"]
    background: list[subprocess.Popen[bytes]] = []
    failures = 0
    try:
        for command in commands:
            if skip_tests and "pytest" in command:
                lines.append(f"$ {command}\n  (skipped: --skip-tests)\n\n")
                continue
            if command.endswith("&"):
                proc = subprocess.Popen(["bash", "-c", command.rstrip("&").strip()], cwd=clone,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                background.append(proc)
                time.sleep(BACKGROUND_SETTLE_S)
                state = "running" if proc.poll() is None else f"exited {proc.returncode}"
                lines.append(f"$ {command}\n  started in the background (pid {proc.pid}; {state})\n\n")
                continue
            started = time.perf_counter()
            done = subprocess.run(["bash", "-c", command], cwd=clone, capture_output=True, text=True)
            seconds = time.perf_counter() - started
            failures += done.returncode != 0
            lines.append(f"$ {command}\n  exit {done.returncode} after {seconds:.1f} s\n")
            if done.stdout.strip():
                lines.append("  stdout (end):\n" + tail(done.stdout))
            if done.stderr.strip():
                lines.append("  stderr (end):\n" + tail(done.stderr))
            lines.append("\n")
            out.write_text("".join(lines))  # as it goes: a long step shows where the tour is
    finally:
        for proc in background:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)
            lines.append(f"background pid {proc.pid} stopped (exit {proc.returncode})\n")
    lines.append(f"\n{failures} command(s) failed\n")
    out.write_text("".join(lines))
    print(f"{out}: {len(commands)} commands, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
