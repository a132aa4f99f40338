"""The supervisor the shell tool runs each command under, on Linux (see `shell.run_command`).

Run as a script (`python -I _reaper.py STATUS_FD PROGRAM ARGS...`); it imports nothing from ctxwin.
It makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so every process the command
starts, including `setsid`, `nohup` and double-forked daemons, is re-parented to it when its own
parent dies, instead of to init. It runs the command as its only child and writes the command's exit
status (as `os.waitstatus_to_exitcode` gives it) to STATUS_FD. On SIGTERM (sent by the tool when the
call ends or times out, or by the kernel when the tool's thread dies: PR_SET_PDEATHSIG) it SIGKILLs
its children until none is left, so nothing the command started survives the call.
"""

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


class _Stop(Exception):
    """Raised by the SIGTERM handler to leave the wait loop."""


def _stop(signum: int, frame: object) -> None:
    raise _Stop


def children() -> list[int]:
    """This process's children (re-parented orphans included)."""
    pids: list[int] = []
    me = os.getpid()
    try:
        for tid in os.listdir(f"/proc/{me}/task"):
            with open(f"/proc/{me}/task/{tid}/children") as handle:
                pids += [int(p) for p in handle.read().split()]
        return pids
    except OSError:
        pass
    for name in os.listdir("/proc"):  # kernels without /proc/PID/task/TID/children
        if name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{name}/stat") as handle:
                if int(handle.read().rsplit(")", 1)[1].split()[1]) == me:
                    pids.append(int(name))
    return pids


def kill_all() -> None:
    """SIGKILL every child, reap, repeat: a killed child's own children come to this subreaper next."""
    while True:
        for pid in children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def main() -> None:
    status_fd = int(sys.argv[1])
    argv = sys.argv[2:]
    signal.signal(signal.SIGTERM, _stop)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    try:
        pid = os.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.close(status_fd)
                os.execv(argv[0], argv)
            finally:
                os._exit(127)
        # Only the command holds the output pipe: its end is the end of the command's output.
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        while True:
            try:
                got, status = os.waitpid(-1, 0)
            except ChildProcessError:
                return  # nothing left that the command started
            if got == pid:
                os.write(status_fd, f"{os.waitstatus_to_exitcode(status)}\n".encode())
                os.close(status_fd)
    except _Stop:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        kill_all()


if __name__ == "__main__":
    main()
