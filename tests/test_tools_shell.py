"""shell: opt-in, tail truncation with the full output spilled to a real blob store, exit codes,
signals, timeouts that kill the whole process group, no hang on children holding the pipe."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from ctxwin.store.blobs import FileBlobStore
from ctxwin.tools import Limits, Workspace, read_spilled, shell
from guards import HANG_GUARD_S, within


def wait_until_dead(pid: int, seconds: float = 5.0) -> bool:
    """True once `pid` is gone or a zombie (killed, waiting for whoever adopted it to reap it)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "root"
    root.mkdir()
    return Workspace([root], blobs=FileBlobStore(tmp_path / "blobs"), allow_shell=True)


def test_shell_is_opt_in(tmp_path: Path) -> None:
    out = shell(Workspace([tmp_path]), "echo hi")
    assert out.is_error and out.details["error"] == "shell_disabled"
    assert "allow_shell=True" in out.text


def test_runs_in_the_first_root(ws: Workspace) -> None:
    out = shell(ws, "pwd; echo err >&2")
    assert out.text == f"{ws.roots[0]}\nerr"
    assert not out.is_error and out.details["exit_code"] == 0 and out.details["handle"] is None
    assert shell(ws, "true").text == "(no output)"


def test_exit_code_and_signal_are_reported(ws: Workspace) -> None:
    out = shell(ws, "echo partial; exit 3")
    assert out.is_error and out.text == "partial\n\nCommand exited with code 3"
    assert out.details["exit_code"] == 3
    killed = shell(ws, "kill -TERM $$")
    assert killed.is_error and killed.details["signal"] == 15
    assert killed.text.endswith("Command killed by signal SIGTERM (15)")


def test_tail_is_kept_and_full_output_spilled_byte_identical(ws: Workspace) -> None:
    out = shell(ws, "seq 1 5000")
    assert out.text.startswith("3001\n3002\n")
    handle = out.details["handle"]
    assert handle and handle.startswith("blob:")
    assert f"[Showing lines 3001-5000 of 5000. Full output: {handle}." in out.text
    expected = subprocess.run(["seq", "1", "5000"], capture_output=True, check=True).stdout
    assert ws.blobs is not None and ws.blobs.get(handle) == expected
    page = read_spilled(ws, handle, limit=2)
    assert page.text == "     1\t1\n     2\t2\n\n[4998 more lines in file. Use offset=3 to continue.]"


def test_byte_cap_and_partial_last_line(ws: Workspace) -> None:
    wide = shell(ws, "for i in $(seq 1 400); do printf 'row %04d %0200d\\n' $i 0; done")
    assert "(50.0KB limit). Full output: blob:" in wide.text
    assert wide.details["truncation"]["output_bytes"] <= 50 * 1024
    one_line = shell(ws, "head -c 300000 /dev/zero | tr '\\0' a")
    assert "[Showing last 50.0KB of line 1 (line is 100.0KB+). Full output: blob:" in one_line.text
    assert ws.blobs is not None and len(ws.blobs.get(one_line.details["handle"])) == 300_000


def test_no_blob_store_says_the_output_was_not_kept(tmp_path: Path) -> None:
    ws = Workspace([tmp_path], allow_shell=True)
    out = shell(ws, "seq 1 3000")
    assert "Full output: not kept (this workspace has no blob store)" in out.text


def test_timeout_kills_the_process_group(ws: Workspace, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    out = within(HANG_GUARD_S, shell, ws, f"sleep 3600 & echo $! > {pid_file}; echo waiting; wait", timeout=0.5)
    assert out.is_error and out.details["timed_out"]
    assert out.text == "waiting\n\nCommand timed out after 0.5 seconds (process group killed)"
    child = int(pid_file.read_text())
    assert wait_until_dead(child), f"the background sleep {child} outlived the timeout"


def test_background_child_holding_the_pipe_does_not_hang(ws: Workspace) -> None:
    out = within(HANG_GUARD_S, shell, ws, "sleep 3600 & echo started")  # waiting for the child: an hour
    assert out.text == "started" and not out.is_error


def test_capture_cap_is_reported(tmp_path: Path) -> None:
    ws = Workspace(
        [tmp_path], blobs=FileBlobStore(tmp_path / "b"), allow_shell=True,
        limits=Limits(shell_max_capture_bytes=10_000),
    )
    out = shell(ws, "seq 1 20000")
    assert "(the first 9.8KB of 106.3KB)" in out.text  # seq 1 20000 prints 108,894 bytes
    assert out.details["capture_complete"] is False


def test_bad_arguments(ws: Workspace) -> None:
    assert shell(ws, "  ").details["error"] == "bad_argument"
    assert shell(ws, "echo", timeout=0).details["error"] == "bad_argument"


def test_secrets_in_the_environment_stay_out(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    assert "sk-should-not-leak" not in shell(ws, "env").text
    assert shell(ws, "echo $HOME").text == os.environ["HOME"]
    custom = Workspace(ws.roots, allow_shell=True, shell_env={"GREETING": "hello"})
    assert shell(custom, "echo $GREETING").text == "hello"


def test_a_finished_command_is_never_reported_killed(ws: Workspace) -> None:
    """Regression: the process group was killed as soon as the pipe closed, and a command that had
    already exited was sometimes reported as killed by SIGKILL."""
    for _ in range(60):
        out = shell(ws, "echo done")
        assert not out.is_error, out.text
        assert out.details.get("signal") is None and out.details.get("exit_code") == 0, out.details
