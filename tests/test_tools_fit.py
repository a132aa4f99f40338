"""fit_slice: the largest prefix that fits (checked against every prefix), the note of what was left
out, long cells cut head and tail with a reference to the full value (a real blob store)."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin.store.blobs import FileBlobStore
from ctxwin.tokens import counter_for
from ctxwin.tools import fit_slice


def brute_force_kept(rows: list[object], budget: int) -> int:
    """The longest prefix that fits, by trying every prefix with the documented rendering."""
    counter = counter_for(None)
    lines = [json.dumps(row) for row in rows]
    best = 0
    for kept in range(1, len(rows) + 1):
        left = len(rows) - kept
        note = (
            f"[Showing rows 1-{kept} of {len(rows)} (budget {budget} tokens). {left} rows left out; "
            f"ask for rows from {kept + 1} on, or narrow the query.]"
            if left else ""
        )
        text = "\n".join(lines[:kept]) + ("\n\n" + note if note else "")
        if counter.count_text(text) <= budget:
            best = kept
    return best


def test_largest_prefix_and_note() -> None:
    rows = [{"id": n, "name": f"name-{n}", "score": n * 1.5} for n in range(1000)]
    counter = counter_for(None)
    result = fit_slice(rows, 500, counter)
    assert 0 < result.kept < 1000 and result.total == 1000 and result.omitted == 1000 - result.kept
    assert result.tokens <= 500 and counter.count_text(result.text) == result.tokens
    assert result.rows == tuple(rows[: result.kept])
    assert result.note == (
        f"[Showing rows 1-{result.kept} of 1000 (budget 500 tokens). {1000 - result.kept} rows left out; "
        f"ask for rows from {result.kept + 1} on, or narrow the query.]"
    )
    assert result.text.splitlines()[0] == json.dumps(rows[0])
    assert result.kept == brute_force_kept(rows, 500)


def test_everything_fits_and_nothing_fits() -> None:
    rows = [[1, 2], [3, 4]]
    all_rows = fit_slice(rows, 1000)
    assert all_rows.kept == 2 and all_rows.note == "" and all_rows.text == "[1, 2]\n[3, 4]"
    none = fit_slice([{"text": "word " * 90}], 5)
    assert none.kept == 0 and none.text.startswith("[No rows fit the budget of 5 tokens")
    assert fit_slice([], 10).kept == 0


def test_long_cells_cut_head_and_tail_with_a_reference(tmp_path: Path) -> None:
    long_text = "HEAD " + "m" * 5000 + " TAIL"
    rows = [{"id": 1, "body": long_text}, ["short", long_text], long_text]
    plain = fit_slice(rows, 10_000)
    assert plain.kept == 3 and len(plain.cells_cut) == 3
    cut = plain.rows[0]["body"]
    assert cut.startswith("HEAD ") and cut.endswith(" TAIL") and len(cut) <= 500
    assert 'of 5010 chars cut; full value: rows[0]["body"]]' in cut
    assert "rows[1][1]" in plain.rows[1][1] and "rows[2]]" in plain.rows[2]
    assert "3 long values were cut (head and tail kept)" in plain.note
    store = FileBlobStore(tmp_path / "blobs")
    stored = fit_slice(rows, 10_000, blobs=store)
    handles = [cell.handle for cell in stored.cells_cut]
    assert all(h and h.startswith("blob:") for h in handles)
    assert f"full value: {handles[0]}]" in stored.rows[0]["body"]
    assert store.get(handles[0]).decode() == long_text  # byte-identical full value


@settings(max_examples=80, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=120), max_size=40),
    budget=st.integers(min_value=1, max_value=800),
)
def test_property_binary_search_finds_the_longest_prefix(sizes: list[int], budget: int) -> None:
    rows: list[object] = [{"k": "x" * size} for size in sizes]
    result = fit_slice(rows, budget)
    assert result.kept == brute_force_kept(rows, budget)
    assert result.rows == tuple(rows[: result.kept])
    if result.kept:
        assert result.tokens <= budget
