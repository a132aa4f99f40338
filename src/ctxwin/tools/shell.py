"""The shell tool (opt-in): runs a command in the first root, keeps the tail of its output (Pi's
bash), and puts the full output in the blob store when the tail is not all of it."""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Annotated, Any

from annotated_types import Gt

from ctxwin.tools.base import DESCRIPTION_FACTS, ToolError, ToolOutput
from ctxwin.tools.patterns import check_text_argument
from ctxwin.tools.spec import tool
from ctxwin.tools.truncate import format_size, truncate_tail, utf8_len
from ctxwin.tools.workspace import Workspace

READ_CHUNK = 64 * 1024  # bytes read from the pipe per step
EXIT_GRACE_S = 1.0  # after the shell exits, how long to wait for children still holding its output pipe
SUPERVISOR_GRACE_S = 5.0  # how long the supervisor may take to kill what the command left
_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_reaper.py")
TAIL_FACTOR = 2  # the rolling tail buffer holds this many times the byte cap (Pi: 2 x 50 KB)
# Environment variables a command inherits by default; everything else (API keys, tokens) stays out
# unless the harness passes Workspace(shell_env=...).
SHELL_ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TMPDIR", "TZ")


@dataclass(frozen=True, slots=True)
class RunResult:
    """What running a command did, before any formatting."""

    exit_code: int | None  # None when killed by a signal
    signal: int | None
    timed_out: bool
    duration_s: float
    total_bytes: int
    total_lines: int
    tail: bytes  # the last bytes of the output (at most TAIL_FACTOR x max_bytes)
    tail_starts_mid_line: bool  # the first line in `tail` is cut at its start
    full: bytes  # the output from the start, up to the capture cap
    capture_complete: bool  # `full` is all of the output


def _shell() -> list[str]:
    bash = shutil.which("bash")
    return [bash, "-c"] if bash else ["/bin/sh", "-c"]


def _supervised(argv: list[str], status_w: int) -> list[str]:
    """`argv` under the subreaper supervisor where the platform has one (Linux), else as it is."""
    if sys.platform.startswith("linux"):
        return [sys.executable, "-I", _REAPER, str(status_w), *argv]
    return argv


def run_command(
    command: str, cwd: str, timeout: float, *, tail_bytes: int, capture_bytes: int, env: dict[str, str] | None = None
) -> RunResult:
    """Runs `command` under the supervisor (`_reaper.py`), in its own session. The call ends when the
    command has exited and its output is closed, or EXIT_GRACE_S after it exited while children keep
    the output open, or at `timeout`; then the supervisor kills everything the command started
    (setsid, nohup and double-forked children included) and the whole process group is killed too."""
    started = time.monotonic()
    status_r, status_w = os.pipe()
    supervised = sys.platform.startswith("linux")
    try:
        proc = subprocess.Popen(
            _supervised([*_shell(), command], status_w), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, env=env, pass_fds=(status_w,) if supervised else (),
        )
    except OSError as error:
        os.close(status_r)
        raise ToolError("shell_failed", f"could not start the shell: {error.strerror or error}") from None
    finally:
        os.close(status_w)
    assert proc.stdout is not None
    out_fd = proc.stdout.fileno()
    tail = bytearray()
    full = bytearray()
    total = 0
    newlines = 0
    last = b""
    timed_out = False
    status = b""
    out_open = True
    deadline = started + timeout
    exit_deadline: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(out_fd, selectors.EVENT_READ)
        if supervised:
            selector.register(status_r, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if not supervised and exit_deadline is None and proc.poll() is not None:
                exit_deadline = now + EXIT_GRACE_S
            if exit_deadline is not None and (now >= exit_deadline or not out_open):
                break
            wait = min(deadline, exit_deadline or deadline) - now
            for key, _ in selector.select(timeout=min(wait, 0.25)):
                if key.fd == status_r:
                    data = os.read(status_r, 64)
                    status += data
                    if not data:
                        selector.unregister(status_r)
                        exit_deadline = time.monotonic() + EXIT_GRACE_S
                    continue
                chunk = os.read(out_fd, READ_CHUNK)
                if not chunk:
                    selector.unregister(out_fd)
                    out_open = False
                    if not supervised:
                        exit_deadline = time.monotonic()
                    continue
                total += len(chunk)
                newlines += chunk.count(b"\n")
                last = chunk[-1:]
                if len(full) < capture_bytes:
                    full += chunk[: capture_bytes - len(full)]
                tail += chunk
                if len(tail) > tail_bytes:
                    del tail[: len(tail) - tail_bytes]
    code = _finish(proc, supervised, status, timed_out, deadline)
    os.close(status_r)
    total_lines = newlines + (1 if total and last != b"\n" else 0)
    return RunResult(
        exit_code=code if code is not None and code >= 0 else None,
        signal=-code if code is not None and code < 0 else (signal.SIGKILL if code is None else None),
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        total_bytes=total,
        total_lines=total_lines,
        tail=bytes(tail),
        tail_starts_mid_line=total > len(tail),
        full=bytes(full),
        capture_complete=len(full) == total,
    )


def _finish(
    proc: subprocess.Popen[bytes], supervised: bool, status: bytes, timed_out: bool, deadline: float
) -> int | None:
    """Ends everything the command started and returns its exit status (negative: a signal; None:
    killed before it exited)."""
    if supervised:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)  # the supervisor kills all it adopted, then exits
        try:
            proc.wait(timeout=SUPERVISOR_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
    elif not timed_out:
        # EOF can arrive a moment before the shell exits: let it exit, or its status would read as SIGKILL.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, min(deadline - time.monotonic(), EXIT_GRACE_S)))
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what is left in the group, if the supervisor could not run
    assert proc.stdout is not None
    proc.stdout.close()
    returned = proc.wait()
    if not supervised:
        return returned
    text = status.decode("ascii", "replace").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _tail_lines(result: RunResult) -> list[str]:
    data = result.tail
    if result.tail_starts_mid_line:
        cut = data.find(b"\n")
        if 0 <= cut < len(data) - 1:
            data = data[cut + 1 :]  # drop the partial first line unless it is the only one
        else:
            start = 0
            while start < len(data) and data[start] & 0xC0 == 0x80:
                start += 1
            data = data[start:]
    if data.endswith(b"\n"):
        data = data[:-1]
    return data.decode("utf-8", "replace").split("\n") if data else []


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# Not a sandbox: the command can touch anything the process can (the roots and deny list bind the file
# tools, not the shell), which is why the tool is opt-in. It gets only the SHELL_ENV_KEEP environment
# variables unless `Workspace.shell_env` says otherwise. The full output goes to the blob store when the
# tail shown is not all of it.
@tool(needs="shell", facts=DESCRIPTION_FACTS)
def shell(ws: Workspace, command: str, timeout: Annotated[float, Gt(0)] | None = None) -> ToolOutput:
    """Run a bash command in the workspace root. stdout and stderr come back together.

    Limits: timeout in seconds (default {shell_timeout}; everything the command started is killed
    when it passes, and when the call ends). Only the LAST {lines} lines or {bytes} of output are
    shown. When that is not all of it, the notice names a blob handle holding the full output: page it
    with read_spilled or search it with grep_spilled instead of running the command again.

    Non-zero exit codes, signals and timeouts are reported after the output.

    Args:
        command: Bash command to run.
        timeout: Seconds before the command is killed (default {shell_timeout}).
    """
    if not ws.allow_shell:
        raise ToolError(
            "shell_disabled", "The shell tool is disabled for this workspace.",
            "A harness enables it with Workspace(..., allow_shell=True); the CLI with --allow-shell.",
        )
    if not isinstance(command, str) or not command.strip():
        raise ToolError("bad_argument", "command is empty", "Give a shell command to run.")
    check_text_argument("command", command)
    limit = ws.limits.shell_timeout_s if timeout is None else timeout
    longest = ws.limits.shell_max_timeout_s
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not 0 < limit <= longest:
        # `not 0 < x <= longest` is also true for NaN; inf and 1e400 (inf once parsed) are over the maximum.
        raise ToolError(
            "bad_argument", f"timeout={timeout!r} is not valid; give seconds, more than 0 and at most {longest:g}."
        )
    env = ws.shell_env if ws.shell_env is not None else {k: v for k, v in os.environ.items() if k in SHELL_ENV_KEEP}
    result = run_command(
        command, str(ws.roots[0]), float(limit), tail_bytes=TAIL_FACTOR * ws.limits.max_bytes,
        capture_bytes=ws.limits.shell_max_capture_bytes, env=env,
    )
    lines = _tail_lines(result)
    trunc = truncate_tail(lines, ws.limits.max_lines, ws.limits.max_bytes)
    truncated = trunc.truncated or result.total_lines > trunc.output_lines
    details: dict[str, Any] = {
        "command": command, "exit_code": result.exit_code, "signal": result.signal, "timed_out": result.timed_out,
        "duration_s": round(result.duration_s, 3), "total_bytes": result.total_bytes,
        "total_lines": result.total_lines, "truncation": trunc.facts(), "truncated": truncated, "handle": None,
    }
    body = trunc.text if result.total_bytes else "(no output)"
    notices = []
    if truncated:
        where = _spill(ws, result, command, details)
        end = result.total_lines
        if trunc.last_line_partial:
            # The tail buffer may have lost the start of the line: then its size is a lower bound.
            at_least = "+" if result.tail_starts_mid_line and b"\n" not in result.tail else ""
            size = format_size(utf8_len(lines[-1]))
            notices.append(
                f"[Showing last {format_size(trunc.output_bytes)} of line {end} (line is {size}{at_least}). "
                f"Full output: {where}]"
            )
        else:
            start = end - trunc.output_lines + 1
            limit_note = f" ({format_size(ws.limits.max_bytes)} limit)" if trunc.truncated_by == "bytes" else ""
            notices.append(f"[Showing lines {start}-{end} of {end}{limit_note}. Full output: {where}]")
    if result.timed_out:
        notices.append(f"Command timed out after {limit:g} seconds (process group killed)")
    elif result.signal is not None:
        notices.append(f"Command killed by signal {_signal_name(result.signal)} ({result.signal})")
    elif result.exit_code:
        notices.append(f"Command exited with code {result.exit_code}")
    text = body + ("\n\n" + "\n".join(notices) if notices else "")
    is_error = result.timed_out or result.signal is not None or bool(result.exit_code)
    return ToolOutput(text, is_error=is_error, details=details)


def _spill(ws: Workspace, result: RunResult, command: str, details: dict[str, Any]) -> str:
    if ws.blobs is None:
        return "not kept (this workspace has no blob store)"
    info = ws.blobs.put(result.full, media_type="text/plain", origin=f"shell: {command[:200]}")
    details["handle"] = info.handle
    details["capture_complete"] = result.capture_complete
    partial = (
        "" if result.capture_complete
        else f" (the first {format_size(len(result.full))} of {format_size(result.total_bytes)})"
    )
    how = f'Page it with read_spilled(handle="{info.handle}", offset=...) or search it with grep_spilled'
    return f"{info.handle}{partial}. {how}"
