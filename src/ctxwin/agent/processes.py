"""The tools' processes: the shell tool starts each command as the leader of its own process group,
a child of this process; stopping a step (Ctrl-C) kills the groups its tools started, and everything
in them, so nothing is left behind."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def child_groups() -> set[int]:
    """Process groups led by a direct child of this process (the shell tool starts each command as
    the leader of its own group). Linux (/proc); empty elsewhere."""
    me = Path(f"/proc/{os.getpid()}")
    children: set[int] = set()
    for task in me.glob("task/*/children"):
        with contextlib.suppress(OSError):
            children.update(int(pid) for pid in task.read_text().split())
    groups = set()
    for pid in children:
        with contextlib.suppress(OSError, ValueError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[2]) == pid:  # after "(comm)": state, ppid, pgrp
                groups.add(pid)
    return groups


def kill_tool_processes(spare: frozenset[int] | set[int] = frozenset()) -> list[int]:
    """Kill every process group in `child_groups()` but those in `spare` (that were there before the
    tools ran), with everything in them. Returns the groups killed."""
    killed = []
    for group in sorted(child_groups() - spare):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
            killed.append(group)
    return killed
