"""Issue 17, the store's items (18-22, and the NaN part of 25): each hostile or unlucky input that
broke the session store, as the smallest reproduction, kept fixed. Where an input could hang, it runs
in a subprocess with a timeout; where an item applies to both backends, it runs on both."""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ctxwin.cli.main import app
from ctxwin.errors import EntryFormatError, InputError
from ctxwin.messages import ToolCall, assistant, user
from ctxwin.store import BlobCorruptedError, Session, SessionFormatError, SessionLockedError, StoreProblem
from ctxwin.store.blobs import FileBlobStore
from ctxwin.store.jsonl import SESSION_FILE
from ctxwin.store.locks import WRITER_LOCK, FileLock, lock_error
from ctxwin.store.session import list_sessions
from ctxwin.store.tree import decode_entry
from ctxwin.tools.spilled import read_spilled
from store_backends import BACKENDS, LOG_BACKENDS, make_blob_store, unique_id

HANG_TIMEOUT_S = 30  # a subprocess that could hang gets this long (it needs well under a second)
Opener = Callable[..., Any]


@pytest.fixture(params=LOG_BACKENDS)
def open_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """`open_log(name="s", **options)` on the backend under test; every log is closed at the end."""
    opened: list[Any] = []
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else None
    prefix = unique_id("adv")

    def opener(name: str = "s", **options: Any) -> Any:
        log = Session.open(tmp_path / name, **options) if dsn is None else \
            Session.postgres(dsn, f"{prefix}-{name}", **options)
        opened.append(log)
        return log

    opener.dsn = dsn  # type: ignore[attr-defined]
    opener.prefix = prefix  # type: ignore[attr-defined]
    yield opener
    for log in opened:
        log.close()


def conversation(folder: Path, n: int = 6) -> list[str]:
    """A session of `n` alternating user/assistant messages saying m0, m1, …; returns the entry ids."""
    with Session.open(folder, durability="batch") as log:  # synced on close: no need to wait per append
        return [log.append("message", (user if i % 2 == 0 else assistant)(f"m{i}").to_dict()).id for i in range(n)]


def file_lines(folder: Path) -> list[bytes]:
    return (folder / SESSION_FILE).read_bytes().splitlines(keepends=True)


def run_python(code: str, *args: str, timeout: float = HANG_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter; a hang fails the test at `timeout` instead of blocking it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for more than {timeout} s")


# --------------------------------------------------------------------------------------------------
# 18. Silent history loss


def test_item_18_a_damaged_middle_line_costs_one_entry_not_the_history(tmp_path: Path) -> None:
    from ctxwin.engine import ContextEngine

    folder = tmp_path / "s"
    ids = conversation(folder)
    lines = file_lines(folder)
    lines[3] = lines[3][:-10] + b"\n"  # a few bytes cut off the line of the third entry (m2)
    (folder / SESSION_FILE).write_bytes(b"".join(lines))
    with Session.open(folder) as log:
        assert [e.id for e in log.path()] == [ids[0], ids[1], ids[3], ids[4], ids[5]]
        # re-attached to the damaged entry's own parent (its id and parent survive at the line's head)
        assert log.get(ids[3]).parent_id == ids[1]
        kinds = [(p.kind, p.line, p.entry_id) for p in log.problems]
        assert ("corrupt", 4, ids[2]) in kinds and ("orphan", 5, ids[3]) in kinds
        orphan = next(p for p in log.problems if p.kind == "orphan")
        assert isinstance(orphan, StoreProblem) and orphan.parent_id == ids[1] and "re-attached" in orphan.action
        engine = ContextEngine(log)
        prepared = engine.prepare()
        sent = [m.text for m in prepared.messages if m.role != "system"]
        assert sent == ["m0", "m1", "m3", "m4", "m5"]  # not only what came after the damage
        # ... and the engine says so: an event on the first request, the health line, not "ok" alone.
        [event] = [e for e in prepared.events if e.stage == "store"]
        assert event.action == "damaged" and "orphan" in event.reason and ids[3] in event.entry_ids
        assert not [e for e in engine.prepare().events if e.stage == "store"]  # reported once
        assert "2 store problem(s): line 4: corrupt" in engine.health()
    compacted = CliRunner().invoke(app, ["compact", str(folder), "--json"])
    assert compacted.exit_code == 3, compacted.output  # damaged input: the README's exit code
    assert "corrupt" in compacted.output and json.loads(compacted.stdout.splitlines()[-1])["problems"]
    info = list_sessions(folder)[0]
    assert info.problems == 2 and {p.kind for p in info.problem_list} == {"corrupt", "orphan"}
    shown = CliRunner().invoke(app, ["sessions", str(folder)])
    assert shown.exit_code == 0 and "line 5: orphan" in shown.output and "re-attached" in shown.output, shown.output


def test_item_18_a_deleted_line_reattaches_to_the_entry_before_it(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    ids = conversation(folder)
    lines = file_lines(folder)
    del lines[3]  # nothing of the lost entry survives: its child goes under the entry before it in the file
    (folder / SESSION_FILE).write_bytes(b"".join(lines))
    with Session.open(folder) as log:
        assert [e.id for e in log.path()] == [ids[0], ids[1], ids[3], ids[4], ids[5]]
        orphan, truncated = log.problems
        assert (orphan.kind, orphan.entry_id, orphan.parent_id) == ("orphan", ids[3], ids[1])
        assert "before it in the file" in orphan.action
        assert truncated.kind == "truncated" and "1 line fewer" in truncated.detail  # the index remembers


_damage = st.lists(
    st.tuples(st.sampled_from(["cut", "flip", "delete"]), st.integers(min_value=0, max_value=10**6),
              st.integers(min_value=1, max_value=40)),
    min_size=1, max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=_damage, readonly=st.booleans())
def test_item_18_random_damage_never_loses_an_intact_entry_silently(tmp_path: Path, damage: list[tuple[str, int, int]],
                                                                    readonly: bool) -> None:
    """Cut bytes, flipped bytes and deleted lines anywhere after the header of a linear session log:
    every entry whose line survived intact is still on the path from the newest entry, and whenever
    the damage changed what the log holds, a problem says so."""
    folder = tmp_path / unique_id("d")
    ids = conversation(folder, 12)
    original = file_lines(folder)
    header, data = original[0], bytearray(b"".join(original[1:]))
    for how, where, size in damage:
        if not data:
            break
        at = where % len(data)
        if how == "cut":
            del data[at : at + size]
        elif how == "flip":
            data[at] ^= 1 << (size % 8)
        else:  # delete the whole line holding byte `at`
            start = data.rfind(b"\n", 0, at) + 1
            end = data.find(b"\n", at)
            del data[start : len(data) if end < 0 else end + 1]
    damaged = header + bytes(data)
    (folder / SESSION_FILE).write_bytes(damaged)
    survivors = set(damaged.splitlines(keepends=True)[1:])
    intact = [entry_id for entry_id, line in zip(ids, original[1:], strict=True) if line in survivors]
    with Session.open(folder, readonly=readonly) as log:
        on_path = [e.id for e in log.path()]
        assert [i for i in on_path if i in intact] == intact  # all there, in their order
        assert len(on_path) == len(log) or log.problems  # nothing off the path without a word
        if len(log) != len(ids) or on_path != [e.id for e in log]:
            assert log.problems, "entries lost or moved without a reported problem"


# --------------------------------------------------------------------------------------------------
# 19. Stored entries that are not messages


@pytest.mark.parametrize("broken", [{"role": "wizard"}, {"blocks": "x"}])
def test_item_19_a_stored_message_that_is_not_a_message_is_a_problem_not_a_traceback(
        tmp_path: Path, broken: dict[str, Any]) -> None:
    from ctxwin.engine import ContextEngine

    folder = tmp_path / "s"
    ids = conversation(folder, 4)
    lines = file_lines(folder)
    entry = json.loads(lines[2])  # the second entry (m1)
    entry["payload"].update(broken)
    lines[2] = json.dumps(entry).encode() + b"\n"
    (folder / SESSION_FILE).write_bytes(b"".join(lines))
    (info,) = list_sessions(folder)
    assert info.problems == 2  # the bad payload, and its child re-attached
    bad = next(p for p in info.problem_list if p.kind == "invalid_payload")
    assert (bad.line, bad.entry_id) == (3, ids[1])
    with Session.open(folder) as log:
        assert [e.id for e in log.path()] == [ids[0], ids[2], ids[3]]  # skipped, and reported
        assert [m.text for m in ContextEngine(log).prepare().messages] == ["m0", "m2", "m3"]
    assert b'"wizard"' in (folder / SESSION_FILE).read_bytes() or b'"x"' in (folder / SESSION_FILE).read_bytes()


@pytest.mark.parametrize("broken", [{"role": "wizard"}, {"role": "user", "blocks": "x"}])
def test_item_19_such_a_payload_is_refused_on_append_and_on_load(open_log: Opener,
                                                                  broken: dict[str, Any]) -> None:
    log = open_log()
    good = log.append("message", user("hi").to_dict())
    with pytest.raises(InputError, match="not a message"):
        log.append("message", broken)
    assert len(log) == 1
    if open_log.dsn is not None:  # a row edited behind ctxwin's back: a typed error naming it
        log.conn.execute("UPDATE ctxwin_entries SET payload = %s WHERE session_id = %s AND id = %s",
                         (json.dumps(broken), log.session_id, good.id))
        again = open_log(readonly=True)
        with pytest.raises(SessionFormatError, match=f"entry {good.id}"):
            list(again.path())


# --------------------------------------------------------------------------------------------------
# 20. Special files inside a store

SPECIAL_FILES = r'''
import json, os, sys
from pathlib import Path
from ctxwin.store import Session
from ctxwin.store.session import list_sessions
from ctxwin.tools.spilled import read_spilled
from ctxwin.tools.spilled import read_spilled

root = Path(sys.argv[1])
def outcome(fn):
    try:
        fn()
        return "ok"
    except Exception as error:
        return f"{type(error).__name__}: {error}"

fifo_log = root / "fifo-log"
fifo_log.mkdir()
os.mkfifo(fifo_log / "session.jsonl")
out = {"open_writer": outcome(lambda: Session.open(fifo_log)),
       "open_reader": outcome(lambda: Session.open(fifo_log, readonly=True)),
       "listed": [p.kind for p in list_sessions(fifo_log)[0].problem_list]}

with Session.open(root / "s") as log:
    handles = {name: log.blobs.put(f"{name} output\n".encode() * 100).handle for name in ("fifo", "zero", "grown")}
blob_dir = root / "s" / "blobs"
digests = {handle: log.blobs.stat(handle).sha256 for handle in handles.values()}
def data_file(handle):
    return blob_dir / digests[handle][:2] / digests[handle][2:]
os.unlink(data_file(handles["fifo"])); os.mkfifo(data_file(handles["fifo"]))
os.unlink(data_file(handles["zero"])); os.symlink("/dev/zero", data_file(handles["zero"]))
with open(data_file(handles["grown"]), "ab") as f:
    f.write(b"x" * (1 << 20))
with Session.open(root / "s", readonly=True) as log:
    for name, handle in handles.items():
        out["get_" + name] = outcome(lambda: log.blobs.get(handle))
    out["read_spilled_fifo"] = read_spilled(log.blobs, handles["fifo"]).text

linked = root / "linked"
with Session.open(root / "elsewhere") as log:
    log.append("custom", {})
linked.mkdir()
os.symlink(root / "elsewhere" / "session.jsonl", linked / "session.jsonl")
out["symlinked_log"] = outcome(lambda: Session.open(linked, readonly=True))

os.unlink(root / "s" / "index.sqlite"); os.mkfifo(root / "s" / "index.sqlite")
os.unlink(root / "s" / "writer.lock"); os.mkfifo(root / "s" / "writer.lock")
os.unlink(root / "s" / "index.sqlite.sum"); os.mkfifo(root / "s" / "index.sqlite.sum")
def reopen():
    with Session.open(root / "s") as log:
        log.append("custom", {})
        return log.report.index
out["fifo_index_and_lock"] = reopen()
print(json.dumps(out))
'''


def test_item_20_special_files_in_a_store_are_refused_without_blocking(tmp_path: Path) -> None:
    result = run_python(SPECIAL_FILES, str(tmp_path))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.splitlines()[-1])
    for key in ("open_writer", "open_reader"):
        assert out[key].startswith("NotARegularFileError") and "not a regular file" in out[key], out[key]
    assert out["listed"] == ["unreadable"]  # listed with its problem, not skipped, not hanging
    for name in ("fifo", "zero", "grown"):  # a FIFO, a link to /dev/zero, a file past its recorded size
        assert out["get_" + name].startswith("BlobCorruptedError"), out["get_" + name]
    assert "larger than its recorded size" in out["get_grown"]
    assert "symbolic link" in out["get_zero"]
    assert "corrupted" in out["read_spilled_fifo"]  # the tool answers with the refusal
    assert out["symlinked_log"].startswith("NotARegularFileError") and "symbolic link" in out["symlinked_log"]
    assert out["fifo_index_and_lock"] == "rebuilt"  # a FIFO index (or checksum) is rebuilt, a FIFO lock replaced


def test_item_20_a_blob_put_again_repairs_a_special_file(tmp_path: Path) -> None:
    with Session.open(tmp_path / "s") as log:
        info = log.blobs.put(b"spilled\n")
        path = log.blobs.directory / info.sha256[:2] / info.sha256[2:]
        path.unlink()
        os.symlink("/dev/zero", path)
        with pytest.raises(BlobCorruptedError):
            log.blobs.get(info.handle)
        assert log.blobs.put(b"spilled\n").handle == info.handle
        assert log.blobs.get(info.handle) == b"spilled\n" and not path.is_symlink()


@pytest.mark.parametrize("backend", BACKENDS)
def test_item_20_a_blob_larger_than_its_recorded_size_is_refused_unread(backend: str, tmp_path: Path,
                                                                       request: pytest.FixtureRequest) -> None:
    store = make_blob_store(backend, tmp_path, request)
    info = store.put(b"spilled output\n")
    if isinstance(store, FileBlobStore):
        with open(store.directory / info.sha256[:2] / info.sha256[2:], "ab") as f:
            f.write(b"\0" * (1 << 20))
    else:
        store.conn.execute("UPDATE ctxwin_blobs SET data = data || %s WHERE session_id = %s AND sha256 = %s",
                           (b"\0" * (1 << 20), store.session_id, info.sha256))
    with pytest.raises(BlobCorruptedError, match="recorded size"):
        store.get(info.handle)
    assert "recorded size" in read_spilled(store, info.handle).text  # the tool refuses, it does not raise


# --------------------------------------------------------------------------------------------------
# 21. Deleting writer.lock

HOLDER = r'''
import sys
from ctxwin.store import Session
log = Session.open(sys.argv[1])
log.append("custom", {"n": 1})
print("holding", flush=True)
sys.stdin.readline()  # the test deletes writer.lock meanwhile
log.append("custom", {"n": 2})  # an fsync append notices the deletion
print(";".join(p.kind for p in log.problems), flush=True)
sys.stdin.readline()
log.close()
'''

def test_item_21_deleting_writer_lock_lets_no_second_writer_in(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "holding"
        (folder / WRITER_LOCK).unlink()
        with pytest.raises(SessionLockedError, match="already open for writing"):
            Session.open(folder)  # this process is the second writer: still refused
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "lock_file_removed"  # the writer noticed
        assert (folder / WRITER_LOCK).read_text().strip() == str(holder.pid)  # and wrote it again
        with pytest.raises(SessionLockedError, match=f"by process {holder.pid}"):
            Session.open(folder, lock_timeout=0.2)
        holder.stdin.write("done\n")
        holder.stdin.flush()
        assert holder.wait(timeout=HANG_TIMEOUT_S) == 0, holder.stderr.read() if holder.stderr else ""
    finally:
        if holder.poll() is None:
            holder.kill()
    with Session.open(folder) as log:  # free once the holder closed
        assert len(log.leaves()) == 1 and len(log.path()) == 2  # the log never forked


# --------------------------------------------------------------------------------------------------
# 22. What "acknowledged" means

ACK_THEN_DIE = r'''
import os, signal, sys
from ctxwin.store import Session
backend, target, session_id = sys.argv[1:4]
log = Session.open(target, durability="batch") if backend == "jsonl" else \
    Session.postgres(target, session_id, durability="batch")
for n in range(300):
    entry = log.append("custom", {"n": n})
    os.write(1, f"{entry.id}\n".encode())
os.kill(os.getpid(), signal.SIGKILL)  # at once after the last acknowledgement: no flush, no close
'''


def test_item_22_batch_mode_loses_no_acknowledged_entry_to_sigkill(open_log: Opener, tmp_path: Path) -> None:
    backend, target = ("jsonl", str(tmp_path / "s")) if open_log.dsn is None else ("postgres", open_log.dsn)
    session_id = f"{open_log.prefix}-s"
    result = run_python(ACK_THEN_DIE, backend, target, session_id)
    assert result.returncode == -signal.SIGKILL, result.stderr
    acked = result.stdout.split()
    assert len(acked) == 300
    log = open_log(readonly=True)
    assert [e.id for e in log] == acked  # every acknowledged entry, in order: 0 lost


# --------------------------------------------------------------------------------------------------
# 25 (part). NaN and infinities


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_item_25_nan_is_never_written_and_the_error_names_the_field(open_log: Opener, tmp_path: Path,
                                                                     value: float) -> None:
    log = open_log()
    log.append("custom", {"ok": 1.5})
    with pytest.raises(InputError, match=r"payload\.usage\[1\]\.ratio is (nan|inf|-inf), not JSON"):
        log.append("custom", {"usage": [1, {"ratio": value}]})
    with pytest.raises(InputError, match=r"payload\.blocks\[0\]\.arguments\.timeout"):  # a model's tool call
        log.append("message", assistant("", ToolCall("c1", "shell", {"timeout": value})).to_dict())
    assert len(log) == 1
    log.close()
    if open_log.dsn is None:
        text = (tmp_path / "s" / SESSION_FILE).read_text()
        assert "NaN" not in text and "Infinity" not in text
        for line in text.splitlines():
            json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in the log"))
    assert [e.payload for e in open_log(readonly=True)] == [{"ok": 1.5}]


def test_item_25_meta_with_nan_is_refused_too(open_log: Opener) -> None:
    with pytest.raises(InputError, match=r"meta\.x is nan"):
        open_log("m", meta={"x": math.nan})


# --------------------------------------------------------------------------------------------------
# Review of items 18-22: what the fixes themselves got wrong

UNDER_MEMORY_LIMIT = r'''
import os, resource, sys
from pathlib import Path
from ctxwin.store import Session
root = Path(sys.argv[1])
with Session.open(root / "warm") as log:  # everything imported and touched once before the limit
    log.append("custom", {})
with open("/proc/self/status") as status:
    used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
limit = used + (512 << 20)  # far below the read caps (4 GiB index, 1 GiB unsized blob)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
with Session.open(root / "new") as log:
    log.append("custom", {"n": 1})
    handle = log.blobs.put(b"spilled\n" * 1000).handle
    digest = log.blobs.stat(handle).sha256
os.unlink(root / "new" / "blobs" / digest[:2] / (digest[2:] + ".json"))  # its size is lost: read unsized
with Session.open(root / "new") as log:
    print(len(log), log.report.index, len(log.blobs.get(handle)))
'''


def test_store_files_are_read_by_their_size_not_by_the_cap(tmp_path: Path) -> None:
    result = run_python(UNDER_MEMORY_LIMIT, str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "fresh", "8000"]


def test_flush_waits_for_the_disk_while_a_background_sync_is_under_way(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The group-commit thread has begun an fdatasync (held here, as a slow disk would) when flush()
    arrives: flush must not return until a sync that covers the append has completed."""
    real_fdatasync = os.fdatasync
    began, release = threading.Event(), threading.Event()
    completed: list[str] = []

    def slow_on_the_flusher(fd: int) -> None:
        if threading.current_thread().name == "ctxwin-group-commit":
            began.set()
            release.wait(HANG_TIMEOUT_S)
        real_fdatasync(fd)
        completed.append(threading.current_thread().name)

    monkeypatch.setattr(os, "fdatasync", slow_on_the_flusher)
    log = Session.open(tmp_path / "s", durability="batch")
    try:
        log.append("custom", {"n": 1})
        assert began.wait(HANG_TIMEOUT_S)
        log.flush()
        assert completed, "flush() returned while the only sync of the append was still under way"
        assert log.unsynced == 0
    finally:
        release.set()
        log.close()


def _lock_check_raises(self: FileLock) -> bool:
    # What FileLock.file_lost raises when writer.lock keeps being replaced by a non-file (a race
    # that cannot be staged deterministically): anything but an OSError.
    raise SessionFormatError("writer.lock keeps being replaced by something that is not a file", "check the folder")


def test_a_failing_lock_check_never_stops_the_group_commit_thread(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FileLock, "file_lost", _lock_check_raises)
    with Session.open(tmp_path / "s", durability="batch") as log:
        for round_ in range(2):  # the thread syncs, meets the failing check, and syncs again later
            log.append("custom", {"n": round_})
            deadline = time.monotonic() + HANG_TIMEOUT_S
            while log.unsynced and time.monotonic() < deadline:
                time.sleep(0.01)
            assert log.unsynced == 0 and log._flusher is not None and log._flusher.is_alive()
        assert [p.kind for p in log.problems] == ["lock_check_failed"]
    with Session.open(tmp_path / "s", readonly=True) as log:
        assert [e.payload["n"] for e in log] == [0, 1]


def test_a_failing_lock_check_after_an_fsync_append_leaves_the_append_whole(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FileLock, "file_lost", _lock_check_raises)
    with Session.open(tmp_path / "s") as log:
        first = log.append("custom", {"n": 0})  # on disk before the check: it must be returned, not raised
        second = log.append("custom", {"n": 1})
        assert len(log) == 2 and second.parent_id == first.id and log.leaf_id == second.id
        assert [e.id for e in log.path()] == [first.id, second.id]  # offsets kept up to date
        assert "lock_check_failed" in {p.kind for p in log.problems}
    with Session.open(tmp_path / "s", readonly=True) as log:
        assert [e.id for e in log] == [first.id, second.id] and not log.problems


def test_an_older_ctxwin_writer_and_a_new_one_exclude_each_other(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    with Session.open(folder) as log:
        log.append("custom", {})
    # An older ctxwin writer: a flock on writer.lock, its pid inside.
    older = os.open(folder / WRITER_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(older, fcntl.LOCK_EX)
    os.ftruncate(older, 0)
    os.write(older, b"4242\n")
    try:
        with pytest.raises(SessionLockedError, match=r"by process 4242.*older ctxwin"):
            Session.open(folder)
        with pytest.raises(SessionLockedError, match="older ctxwin"):
            Session.open(folder, lock_timeout=0.1)
    finally:
        os.close(older)
    with Session.open(folder) as log:  # the refusals left no lock behind; now the new writer holds both
        log.append("custom", {})
        again = os.open(folder / WRITER_LOCK, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what an older writer tries first
        finally:
            os.close(again)


def test_a_writer_waiting_on_a_folder_that_is_replaced_does_not_take_the_new_session(tmp_path: Path) -> None:
    """The second writer waits on the folder's flock; the folder is deleted and made again by a third
    writer; the first closes. The lock the second then gets is on a folder that no longer exists: it
    must not write into the third writer's session."""
    folder = tmp_path / "s"
    first = Session.open(folder)
    outcome: dict[str, str] = {}

    def second() -> None:
        try:
            with Session.open(folder, lock_timeout=1) as log:
                outcome["opened"] = log.append("custom", {"by": "second"}).id
        except SessionLockedError as error:
            outcome["refused"] = str(error)

    waiter = threading.Thread(target=second)
    waiter.start()
    time.sleep(0.3)  # the waiter has the folder open and polls its flock
    shutil.rmtree(folder)
    third = Session.open(folder)
    first.close()  # the flock on the deleted folder is free now
    waiter.join(HANG_TIMEOUT_S)
    third.append("custom", {"by": "third"})
    third.close()
    assert "refused" in outcome, outcome
    with Session.open(folder, readonly=True) as log:
        assert [e.payload["by"] for e in log] == ["third"]


def test_a_folder_where_writer_lock_belongs_is_a_typed_error_and_is_kept(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    (folder / WRITER_LOCK / "notes").mkdir(parents=True)
    with pytest.raises(SessionFormatError, match="is a directory") as raised:
        Session.open(folder)
    assert raised.value.hint and (folder / WRITER_LOCK / "notes").is_dir()
    (folder / WRITER_LOCK / "notes").rmdir()
    with pytest.raises(SessionFormatError, match="is a directory"):  # an empty one too: never removed
        Session.open(folder)


def test_a_session_path_through_a_file_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(SessionFormatError, match="is a file, not a folder"):
        Session.open(tmp_path / "plain" / "s")


@pytest.mark.parametrize(("code", "kind", "words"), [
    (errno.EBADF, SessionLockedError, "does not lock files"),  # NFS: flock on a read-only folder fd
    (errno.ENOLCK, SessionLockedError, "does not lock files"),
    (errno.EACCES, SessionFormatError, "permission denied"),
    (errno.EROFS, SessionFormatError, "read-only"),
])
def test_lock_errors_are_typed_with_a_hint(code: int, kind: type, words: str) -> None:
    error = lock_error(Path("/x/s"), OSError(code, os.strerror(code)), "fallback hint")
    assert type(error) is kind and words in error.message and error.hint and error.hint != "fallback hint"


READ_ONLY_DISK = r'''
import subprocess, sys
from pathlib import Path
from ctxwin.store import Session
mount = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
with Session.open(mount / "s") as log:
    log.append("custom", {})
subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
for target in (mount / "s", mount / "new"):
    try:
        Session.open(target)
        print("opened")
    except Exception as error:
        print(type(error).__name__, error)
with Session.open(mount / "s", readonly=True) as log:
    print("read", len(log))
'''


def test_a_session_on_a_read_only_disk_is_a_typed_error_for_writers(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare, to mount a read-only file system in a private mount namespace")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    mount = tmp_path / "disk"
    mount.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c",
                             textwrap.dedent(READ_ONLY_DISK), str(mount)], capture_output=True, text=True, env=env,
                            timeout=HANG_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    existing, new, read = result.stdout.splitlines()
    assert existing.startswith("SessionFormatError") and "read-only" in existing, existing
    assert new.startswith("SessionFormatError") and "read-only" in new, new
    assert read == "read 1"


def test_a_damaged_line_raises_the_one_entry_format_error() -> None:
    with pytest.raises(EntryFormatError) as raised:
        decode_entry(b'{"id": "a"')
    assert isinstance(raised.value, InputError)  # one class of that name, in ctxwin.errors


@pytest.mark.parametrize("payload", [
    {"role": "user", "blocks": ["hi"]},
    {"role": "user", "blocks": [{"text": "no type"}]},
    {"role": "user", "blocks": [{"type": "video"}]},
    {"role": "user", "blocks": {"type": "text", "text": "not a list"}},
    {"blocks": [{"type": "text", "text": "no role"}]},
    {"role": ["user"], "blocks": []},
    {"role": "user", "blocks": [{"type": ["text"], "text": "x"}]},
    {"role": "assistant", "blocks": [{"type": "tool_call", "id": "c1"}]},  # no name
    {"role": "tool", "blocks": [{"type": "tool_result", "call_id": "c1", "content": [{"type": "tool_call"}]}]},
    {"role": "tool", "blocks": [{"type": "tool_result", "call_id": "c1", "content": "text"}]},
])
def test_the_cheap_append_check_still_refuses_what_is_not_a_message(open_log: Opener, payload: dict[str, Any]) -> None:
    log = open_log()
    with pytest.raises(InputError, match="not a message"):
        log.append("message", payload)
    assert len(log) == 0


def test_a_writer_whose_folder_was_replaced_never_locks_a_file_in_the_new_one(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    first = Session.open(folder)
    try:
        first.append("custom", {})
        shutil.rmtree(folder)
        folder.mkdir()  # another session's folder now
        first.append("custom", {})  # notices writer.lock gone, and that the folder is not its own
        (lost,) = first.problems
        assert lost.kind == "lock_file_removed" and "deleted or replaced" in lost.action
        assert not (folder / WRITER_LOCK).exists()
        with Session.open(folder) as other:  # the new folder's session is free for its own writer
            other.append("custom", {})
    finally:
        with pytest.raises(SessionFormatError, match="cannot write the index"):  # its index went with the folder
            first.close()


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5))
_block = st.dictionaries(st.sampled_from(["type", "text", "thinking", "id", "name", "call_id", "content"]),
                         st.one_of(_json_leaf, st.sampled_from(["text", "image", "tool_call", "tool_result", "x"]),
                                   st.lists(st.dictionaries(st.sampled_from(["type", "text"]),
                                                            st.sampled_from(["text", "image", "x"])), max_size=2)),
                         max_size=5)


@settings(max_examples=300, deadline=None)
@given(role=st.one_of(st.sampled_from(["user", "assistant", "tool", "system", "wizard"]), st.lists(st.none())),
       blocks=st.lists(_block, max_size=3))
def test_what_the_cheap_append_check_lets_through_the_full_check_on_open_accepts(role: Any,
                                                                                blocks: list[dict[str, Any]]) -> None:
    from ctxwin.store.tree import message_shape_problem, payload_problem

    payload = {"role": role, "blocks": blocks}
    if message_shape_problem("message", payload) is None:
        assert payload_problem("message", payload) is None  # an appended entry is never skipped on reopen
