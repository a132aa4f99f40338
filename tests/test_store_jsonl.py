"""What only the JSONL backend has: its file format, recovery on open, the SQLite index as a cache,
readers beside a writer, listing and deleting session folders."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin.errors import InputError
from ctxwin.store import Session, SessionFormatError, SessionLockedError, delete_session, list_sessions
from ctxwin.store import jsonl as jsonl_mod
from ctxwin.store.jsonl import INDEX_FILE, SESSION_FILE, TORN_SUFFIX


def lines_of(folder: Path) -> list[bytes]:
    return (folder / SESSION_FILE).read_bytes().splitlines(keepends=True)


def make(folder: Path, n: int = 5) -> list[str]:
    with Session.open(folder) as log:
        return [log.append("message", {"i": i}).id for i in range(n)]


def test_header_is_versioned_and_checked(tmp_path: Path) -> None:
    make(tmp_path / "s", 1)
    header = json.loads(lines_of(tmp_path / "s")[0])
    assert header["format"] == "ctxwin-session" and header["version"] == 1 and header["session_id"] == "s"
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / SESSION_FILE).write_text(json.dumps({**header, "version": 99}) + "\n")
    with pytest.raises(SessionFormatError, match="version 99"):
        Session.open(newer)
    alien = tmp_path / "alien"
    alien.mkdir()
    (alien / SESSION_FILE).write_text('{"type": "user"}\n')
    with pytest.raises(SessionFormatError, match="not a ctxwin session"):
        Session.open(alien, readonly=True)


def test_files_are_private(tmp_path: Path) -> None:
    make(tmp_path / "s", 1)
    assert (tmp_path / "s" / SESSION_FILE).stat().st_mode & 0o077 == 0


def test_torn_last_line_is_moved_aside_and_reported(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    ids = make(folder, 3)
    torn = b'{"id":"abcd1234","parent_id":null,"kind":"mess'
    with open(folder / SESSION_FILE, "ab") as f:
        f.write(torn)
    # a reader ignores the torn bytes and leaves them alone (a writer may be writing them)
    with Session.open(folder, readonly=True) as reader:
        assert [e.id for e in reader] == ids
        assert reader.report.torn_tail_bytes == len(torn) and reader.report.torn_tail_file is None
    assert (folder / SESSION_FILE).read_bytes().endswith(torn)
    with Session.open(folder) as log:
        report = log.report
        assert report.torn_tail_bytes == len(torn)
        assert Path(report.torn_tail_file or "").read_bytes() == torn
        assert any("torn last line" in m for m in report.messages)
        assert [e.id for e in log] == ids
        new = log.append("message", {"i": 3})
        assert new.parent_id == ids[-1]
    assert not (folder / SESSION_FILE).read_bytes().count(torn)
    assert [p.name for p in folder.iterdir() if TORN_SUFFIX in p.name]  # kept, never deleted
    with Session.open(folder) as log:
        assert len(log) == 4 and log.report.torn_tail_bytes == 0


@pytest.mark.parametrize("damage", [b"{not json at all\n", b'{"id": "x1", "kind": "message"}\n', b"\n"])
def test_corrupt_middle_line_is_reported_and_the_rest_opens(tmp_path: Path, damage: bytes) -> None:
    folder = tmp_path / "s"
    ids = make(folder, 5)
    lines = lines_of(folder)
    lines[3] = damage  # line 4 of the file holds the third entry
    (folder / SESSION_FILE).write_bytes(b"".join(lines))
    with Session.open(folder) as log:
        problems = log.report.problems
        assert [(p.line, p.kind) for p in problems][:1] == [(4, "corrupt")]
        assert any(m.startswith("line 4: corrupt") for m in log.report.messages)
        assert [e.id for e in log] == [ids[0], ids[1], ids[3], ids[4]]
        # the entry after the lost one has lost its parent: reported, and re-attached to the nearest
        # intact ancestor (issue 17 item 18: the path used to stop there, silently dropping the history)
        assert (5, "orphan") in [(p.line, p.kind) for p in problems]
        assert [e.id for e in log.path()] == [ids[0], ids[1], ids[3], ids[4]]
        assert [e.id for e in log.path(ids[1])] == [ids[0], ids[1]]
        log.append("message", {"after": True})
    with Session.open(folder, readonly=True) as reader:  # reported again on every open
        assert [(p.line, p.kind) for p in reader.report.problems][:1] == [(4, "corrupt")]


def test_duplicate_ids_keep_the_first(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    ids = make(folder, 2)
    lines = lines_of(folder)
    (folder / SESSION_FILE).write_bytes(b"".join([*lines, lines[1]]))
    with Session.open(folder) as log:
        assert [e.id for e in log] == ids
        assert [(p.line, p.kind) for p in log.report.problems] == [(4, "duplicate_id")]


def index_rows(folder: Path) -> list[tuple]:
    conn = sqlite3.connect(folder / INDEX_FILE)
    try:
        return conn.execute("SELECT seq, id, parent_seq, kind, ts, offset, length, line FROM entries ORDER BY seq")\
            .fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate", "wrong_offsets", "empty"])
def test_index_is_rebuilt_when_missing_or_corrupt(tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "s"
    ids = make(folder, 50)
    good = index_rows(folder)
    index = folder / INDEX_FILE
    if damage == "delete":
        index.unlink()
    elif damage == "garbage":
        index.write_bytes(os.urandom(index.stat().st_size))
    elif damage == "truncate":
        index.write_bytes(index.read_bytes()[:5000])
    elif damage == "empty":
        index.write_bytes(b"")
    else:
        conn = sqlite3.connect(index)
        conn.execute("UPDATE entries SET offset = offset + 1")
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'last_offset'")
        conn.commit()
        conn.close()
    with Session.open(folder) as log:
        assert log.report.index == "rebuilt", log.report
        assert [e.id for e in log] == ids
        assert [e.id for e in log.path()] == ids
    assert index_rows(folder) == good


def test_stale_index_is_caught_up_or_rebuilt(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    ids = make(folder, 10)
    # appended by someone else (an older ctxwin, or a crash before the index was written)
    line = json.dumps({"id": "feedface", "parent_id": ids[-1], "kind": "pin", "timestamp": "t", "payload": {}})
    with open(folder / SESSION_FILE, "a") as f:
        f.write(line + "\n")
    with Session.open(folder) as log:
        assert log.report.index == "caught_up"
        assert log.leaf_id == "feedface" and [e.id for e in log.path()] == [*ids, "feedface"]
    # edited in place, same size: the index cannot be trusted
    data = (folder / SESSION_FILE).read_bytes().replace(b'"i":3', b'"i":7')
    time.sleep(0.01)
    (folder / SESSION_FILE).write_bytes(data)
    with Session.open(folder) as log:
        assert log.report.index == "rebuilt" and "modified in place" in (log.report.index_reason or "")
        assert [e.payload.get("i") for e in log][3] == 7


def test_index_that_disagrees_at_read_time_is_refused_then_rebuilt(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    make(folder, 5)
    # swap two lines of equal length behind the index's back, keeping size and mtime
    stat = (folder / SESSION_FILE).stat()
    lines = lines_of(folder)
    lines[2], lines[3] = lines[3], lines[2]
    (folder / SESSION_FILE).write_bytes(b"".join(lines))
    os.utime(folder / SESSION_FILE, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with Session.open(folder, readonly=True) as log, pytest.raises(SessionFormatError, match="disagrees"):
        list(log)


def test_reader_sees_a_live_writer_without_disturbing_it(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with Session.open(folder, durability="batch") as writer:
        ids = [writer.append("message", {"i": i}).id for i in range(5000)]  # index partly unflushed
        with Session.open(folder, readonly=True) as reader:
            assert [e.id for e in reader.path()] == ids
        writer.append("message", {"i": "more"})
    assert len(Session.open(folder, readonly=True)) == 5001


def test_batch_mode_syncs_in_the_background(tmp_path: Path) -> None:
    with Session.open(tmp_path / "s", durability="batch") as log:
        log.append("message", {})
        assert log.unsynced == 1
        deadline = time.monotonic() + 5
        while log.unsynced and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.unsynced == 0
        for _ in range(jsonl_mod.BATCH_HARD_LIMIT):
            log.append("message", {})
        assert log.unsynced < jsonl_mod.BATCH_HARD_LIMIT  # a slow disk makes appends wait, never lose more


def test_list_and_delete_sessions(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    make(root / "a", 3)
    with Session.open(root / "b") as log:
        log.append("message", {}, timestamp="2030-01-01T00:00:00.000000Z")
        log.blobs.put(b"blob")
    (root / "not-a-session").mkdir()
    infos = list_sessions(root)
    assert [i.session_id for i in infos] == ["b", "a"]  # most recent activity first
    b = infos[0]
    assert (b.entries, b.blobs, b.last_activity) == (1, 1, "2030-01-01T00:00:00.000000Z")
    assert b.size_bytes > b.log_bytes > 0 and b.problems == 0
    assert list_sessions(root / "a")[0].entries == 3
    with pytest.raises(InputError, match="no sessions folder"):
        list_sessions(tmp_path / "missing")
    with Session.open(root / "a"), pytest.raises(SessionLockedError):
        delete_session(root / "a")
    with pytest.raises(InputError, match="not a ctxwin session"):
        delete_session(root / "not-a-session")
    result = delete_session(root / "a")
    assert result["entries"] == 3 and not (root / "a").exists()
    assert [i.session_id for i in list_sessions(root)] == ["b"]


def test_a_path_of_a_long_session_is_lazy(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with Session.open(folder, durability="batch") as log:
        ids = [log.append("message", {"i": i}).id for i in range(3000)]
    with Session.open(folder, readonly=True) as log:
        path = log.path()
        assert len(path) == 3000
        assert path[-1].id == ids[-1] and path[1234].id == ids[1234]
        assert [e.id for e in path[2990:]] == ids[2990:]
        assert path == [log.get(i) for i in ids]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=10**6), readonly=st.booleans())
def test_any_cut_of_the_file_opens_to_the_complete_lines(tmp_path: Path, cut: int, readonly: bool) -> None:
    """Cut a session file anywhere after its header (what a crash can leave): it opens, holds exactly
    the entries whose lines are complete, and (for a writer) the cut-off bytes are moved aside."""
    folder = tmp_path / f"cut-{cut}-{readonly}"
    ids = make(folder, 12)
    data = (folder / SESSION_FILE).read_bytes()
    header_end = data.index(b"\n") + 1
    position = header_end + cut % (len(data) - header_end + 1)
    (folder / SESSION_FILE).write_bytes(data[:position])
    complete = data[header_end:position].count(b"\n")
    with Session.open(folder, readonly=readonly) as log:
        assert [e.id for e in log] == ids[:complete]
        assert log.report.problems == []
        torn = position - (header_end + len(b"".join(data[header_end:].splitlines(keepends=True)[:complete])))
        assert log.report.torn_tail_bytes == torn
        if not readonly and complete < len(ids):
            assert [e.id for e in log.path()] == ids[:complete]
            assert log.append("message", {}).parent_id == (ids[complete - 1] if complete else None)
