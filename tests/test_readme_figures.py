"""The README's benchmark figures are the saved results' (scripts/readme_benchmarks.py), not typed: every
marked figure has a result behind it and says what that result says."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARK = re.compile(r"<!-- b:(?P<name>[a-z0-9_]+) -->(?P<value>.*?)<!-- /b -->", re.S)


def test_every_marked_figure_is_the_saved_results() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "readme_benchmarks.py")], capture_output=True,
                          text=True, check=True, cwd=REPO)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    marked = {m["name"]: m["value"] for m in MARK.finditer((REPO / "README.md").read_text())}
    assert marked, "README.md marks no benchmark figure"
    assert {name: figures.get(name) for name in marked} == marked  # run: scripts/readme_benchmarks.py --write
