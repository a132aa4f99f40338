"""Tools over spilled output in a real blob store: paging with read's notices, grep inside a blob,
the JSON preview and query_json with jq and JMESPath."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import shared_path
from ctxwin.store.blobs import FileBlobStore
from ctxwin.tools import Workspace, grep_spilled, json_preview, query_json, read_spilled


@pytest.fixture
def store(tmp_path: Path) -> FileBlobStore:
    return FileBlobStore(tmp_path / "blobs")


@pytest.fixture
def ws(tmp_path: Path, store: FileBlobStore) -> Workspace:
    return Workspace([tmp_path], blobs=store)


def test_read_spilled_pages_like_read(store: FileBlobStore, ws: Workspace) -> None:
    handle = store.put("".join(f"row {n}\n" for n in range(1, 4001)).encode()).handle
    first = read_spilled(ws, handle)
    assert first.text.endswith("[Showing lines 1-2000 of 4000. Use offset=2001 to continue.]")
    assert first.text.startswith("     1\trow 1\n")
    second = read_spilled(store, handle, offset=2001)  # a bare blob store works too
    assert second.text.startswith("  2001\trow 2001\n") and second.text.endswith("  4000\trow 4000")
    assert read_spilled(ws, handle, offset=10, limit=2).text.endswith(
        "[3989 more lines in file. Use offset=12 to continue.]"
    )


def test_read_spilled_real_letta_file_reassembles_byte_identical(store: FileBlobStore) -> None:
    data = shared_path("letta-filesystem", "files", "vehicles.txt").read_bytes()
    handle = store.put(data).handle
    lines: list[str] = []
    offset: int | None = None
    while True:
        out = read_spilled(store, handle, offset=offset)
        body = out.text.split("\n\n[")[0]
        lines += [line.split("\t", 1)[1] for line in body.split("\n")]
        offset = out.details["next_offset"]
        if offset is None:
            break
    assert ("\n".join(lines) + "\n").encode() == data


def test_errors_name_the_problem(tmp_path: Path, store: FileBlobStore) -> None:
    no_store = read_spilled(Workspace([tmp_path]), "blob:0123456789ab")
    assert no_store.details["error"] == "no_blob_store"
    missing = read_spilled(store, "blob:0123456789abcdef")
    assert missing.is_error and "no blob" in missing.text
    assert read_spilled(store, "nonsense").is_error
    binary = store.put(b"\x00\x01\x02" * 100).handle
    assert read_spilled(store, binary).details["error"] == "binary"


def test_grep_spilled(store: FileBlobStore) -> None:
    handle = store.put("".join(f"{'ERROR' if n % 7 == 0 else 'ok'} line {n}\n" for n in range(1, 1500)).encode()).handle
    out = grep_spilled(store, handle, "ERROR")
    body, notice = out.text.split("\n\n")
    assert body.splitlines()[0] == f"{handle}:7:ERROR line 7"
    assert len(body.splitlines()) == 100
    assert notice == "[100 matches limit reached. Use limit=200 for more, or refine pattern]"
    around = grep_spilled(store, handle, "line 14$", context=1)
    assert around.text == f"{handle}-13-ok line 13\n{handle}:14:ERROR line 14\n{handle}-15-ok line 15"
    assert grep_spilled(store, handle, "nothing here").text == "No matches found"
    assert grep_spilled(store, handle, "(").details["error"] == "bad_pattern"


DATA = {
    "items": [
        {"id": n, "name": f"item-{n}", "status": "error" if n % 10 == 0 else "ok", "tags": ["a", "b"],
         "body": "lorem ipsum " * 30}
        for n in range(1, 1524)
    ],
    "total": 1523,
    "next": None,
}


def test_json_preview_fits_its_budget_and_shows_the_shape() -> None:
    preview = json_preview(DATA, 2000)
    assert len(preview) <= 2000
    assert preview.startswith('shape: {"items": [1523 × {"id": int, "name": str, "status": str, "tags": [2 × str]')
    assert '"total": int' in preview and '"next": null' in preview
    assert 'sample: {"items": [{"id": 1, "name": "item-1"' in preview
    assert "… 1520 more" in preview or "… 1521 more" in preview or "… 1522 more" in preview
    for budget in (50, 120, 300, 800):
        assert len(json_preview(DATA, budget)) <= budget
    assert json_preview([1, 2, 3]) == "shape: [3 × int]\nsample: [1, 2, 3]"
    assert json_preview("x" * 500, 100).startswith("shape: str\nsample: \"xxxx")


def test_query_json_with_jq_and_jmespath(store: FileBlobStore, ws: Workspace) -> None:
    handle = store.put(json.dumps(DATA).encode(), media_type="application/json").handle
    count = query_json(ws, handle, ".items | length")
    assert count.text == "1523" and not count.is_error
    errors = query_json(ws, handle, '[.items[] | select(.status == "error") | .id] | .[:3]')
    assert json.loads(errors.text) == [10, 20, 30]
    names = query_json(ws, handle, "items[?status=='error'].id | [:3]", language="jmespath")
    assert json.loads(names.text) == [10, 20, 30]
    everything = query_json(ws, handle, ".items")
    assert everything.text.endswith(
        "Narrow the expression to see the rest (e.g. slice an array with .[100:200], select fields, or count with "
        "length).]"
    )
    assert "(50.0KB limit)" in everything.text or "Showing lines 1-2000 of" in everything.text
    assert query_json(ws, handle, ".items[").details["error"] == "bad_expression"
    assert query_json(ws, handle, "items[", language="jmespath").details["error"] == "bad_expression"
    assert query_json(ws, handle, ".x", language="sql").details["error"] == "bad_argument"  # type: ignore[arg-type]
    text_blob = store.put(b"not json at all\n").handle
    assert query_json(ws, text_blob, ".").details["error"] == "not_json"


def test_query_json_on_workspace_files_and_json_lines(tmp_path: Path, ws: Workspace) -> None:
    (tmp_path / "data.json").write_text(json.dumps({"a": {"b": [1, 2, 3]}}))
    (tmp_path / "log.jsonl").write_text('{"n": 1}\n{"n": 2}\n\n{"n": 3}\n')
    assert query_json(ws, "data.json", ".a.b[1]").text == "2"
    assert query_json(ws, "log.jsonl", "[.[].n] | add").text == "6"
    assert query_json(ws, "../outside.json", ".").details["error"] == "outside_roots"


def test_query_json_without_the_extra(store: FileBlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    handle = store.put(b'{"a": 1}').handle
    monkeypatch.setitem(sys.modules, "jq", None)  # `import jq` now fails as if not installed
    out = query_json(store, handle, ".a")
    assert out.details["error"] == "missing_extra" and "pip install 'ctxwin[jq]'" in out.text
    assert query_json(store, handle, "a", language="jmespath").text == "1"
