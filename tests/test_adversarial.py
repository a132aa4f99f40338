"""Issue 17: 26 ways a hostile or unlucky input broke ctxwin, each kept fixed by a regression test named
`test_item_NN_<what>`. The tests live beside the code they exercise, one module per area, in the
order of the list:

- reading session files, items 1–7: `test_adversarial_files.py` (deep JSON, FIFOs, size and gzip caps,
  mixed formats, damage reported by every command, lone surrogates, a 50 MB single line);
- the tools, items 8–17: `test_adversarial_tools.py` (the symlink swap race, regex and glob
  backtracking, bounded jq, malformed notebooks, newlines in names, 1,000-deep trees, grep's memory,
  the shell's escaped children and bad arguments, hard links);
- the store, items 18–22: `test_adversarial_store.py` (a damaged middle line, bad payloads, special
  files, a deleted lock file, what "acknowledged" means on both backends);
- the engine, items 23 and 25: `test_adversarial_engine.py` (thousands of unanswered calls, API misuse);
- HTTP and images, items 24 and 26: `test_adversarial_http.py` (images checked and counted by their
  dimensions, the fake provider's 400s, malformed answers, OS errors in the CLI).

Each module also fuzzes its area with hypothesis. This module checks that the list stays complete.
"""

from __future__ import annotations

import re
from pathlib import Path

ITEMS = range(1, 27)
AREAS = {"files": range(1, 8), "tools": range(8, 18), "store": range(18, 23), "engine": (23, 25),
         "http": (24, 26)}


def test_every_item_of_the_list_has_a_regression_test_in_its_area() -> None:
    here = Path(__file__).parent
    found: dict[int, set[str]] = {}
    for area in AREAS:
        text = (here / f"test_adversarial_{area}.py").read_text("utf-8")
        for number in re.findall(r"^def test_item_(\d\d)_", text, re.M):
            found.setdefault(int(number), set()).add(area)
    assert sorted(found) == list(ITEMS), f"items without a test: {sorted(set(ITEMS) - set(found))}"
    for area, numbers in AREAS.items():
        assert all(area in found[n] for n in numbers), (area, [n for n in numbers if area not in found[n]])
