"""`ctxwin replay --compare <every preset> --json` on the four long shared sessions prints exactly the
numbers stored in tests/golden/replay. They were first made before the engine was split into a
reducer, caches and a façade, and the split left every number as it was; later changes that moved
numbers on purpose (Pi's unsent answers dropped, summaries built from the logged messages, queued
prompts replayed, the newest round kept in a tool loop) regenerated them and said why in the commit.
A change that moves any number must do the same:

    python tests/test_replay_golden.py --regenerate
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import shared_path

GOLDEN = Path(__file__).parent / "golden" / "replay"
POLICIES = "ctxwin,pi,openclaw,claude-code,letta,checkpoint,masking,truncate,raw,recorded"
SESSIONS = {
    "258c7280-ae70-4798-800f-63464d01a85d": ("claude-code", "258c7280-ae70-4798-800f-63464d01a85d.jsonl"),
    "4d5611e5-241a-462a-8d15-5122611a9569": ("claude-code", "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"),
    "8463c716-a2ea-4c14-9efa-87158ebd9f20": ("claude-code", "8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"),
    "before-compaction": ("pi", "before-compaction.jsonl"),
}
UNSTABLE = {"latency_ms", "elapsed_ms", "file"}
"""Keys whose values depend on the machine or the checkout, not on what the policy did."""


def stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in UNSTABLE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def replay(path: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "ctxwin.cli.main", "replay", str(path), "--compare", POLICIES,
                          "--json", "--quiet"], check=True, capture_output=True, text=True).stdout
    return stable(json.loads(out.strip().splitlines()[-1]))


def golden(stem: str) -> dict[str, Any]:
    with gzip.open(GOLDEN / f"{stem}.json.gz", "rt") as handle:
        return json.load(handle)


@pytest.mark.shared
@pytest.mark.slow
@pytest.mark.parametrize("stem", SESSIONS)
def test_replay_numbers_match_the_golden_files(stem: str) -> None:
    folder, name = SESSIONS[stem]
    got, want = replay(shared_path(folder, name)), golden(stem)
    for policy in want["policies"]:
        assert got["policies"][policy] == want["policies"][policy], f"{stem}: {policy} changed"
    assert got == want


if __name__ == "__main__" and "--regenerate" in sys.argv:
    root = Path(__file__).resolve().parents[2] / "shared" / "transcripts"
    for stem, (folder, name) in SESSIONS.items():
        with gzip.open(GOLDEN / f"{stem}.json.gz", "wt") as handle:
            json.dump(replay(root / folder / name), handle, sort_keys=True, separators=(",", ":"))
        print(f"wrote {stem}")
