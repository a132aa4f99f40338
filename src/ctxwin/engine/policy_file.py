"""A policy that follows its TOML file: an engine (or proxy) given a path picks up edits at the next
request, without a restart. Checking costs one `stat` per request; the file is read only when its
size or modification time moved."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxwin import policies
from ctxwin.errors import CtxwinError
from ctxwin.pipeline.events import PolicyRejected, PolicyReloaded
from ctxwin.pipeline.view import Event
from ctxwin.policies.model import Policy


@dataclass(frozen=True)
class Change:
    policy: Policy | None  # None: the edit was refused
    error: str = ""


@dataclass
class PolicyFile:
    path: Path
    policy: Policy
    stamp: tuple[int, int]

    @classmethod
    def watch(cls, source: object) -> PolicyFile | None:
        """A watcher when `source` names a TOML file; None for a preset name or a `Policy`."""
        if isinstance(source, Policy) or not (str(source).endswith(".toml") or isinstance(source, Path)):
            return None
        path = Path(str(source))
        return cls(path, policies.load(path), _stamp(path))

    def follow(self, apply: Callable[[Policy], None]) -> list[Event]:
        """Apply an edit of the file (`apply` sets the engine's policy), and say what happened: reloaded,
        or rejected with the error while the last good policy stays in force."""
        change = self.check()
        if change is None:
            return []
        if change.policy is None:
            return [PolicyRejected((), 0, 0, change.error)]
        try:
            apply(change.policy)
        except CtxwinError as error:  # valid TOML, but no budget fits this model's window with it
            return [PolicyRejected((), 0, 0, f"{error}; the last good policy stays in force")]
        self.policy = change.policy  # only once the engine took it
        return [PolicyReloaded((), 0, 0, f"{self.path} changed")]

    def check(self) -> Change | None:
        """What changed since the last look: a new policy, a refused edit, or None (nothing)."""
        try:
            stamp = _stamp(self.path)
        except OSError as error:
            return self._refused(f"{self.path}: {error.strerror}", (-1, -1))
        if stamp == self.stamp:
            return None
        try:
            policy = policies.load(self.path)
        except CtxwinError as error:
            return self._refused(f"{error.message}; the last good policy stays in force", stamp)
        self.stamp = stamp
        return None if policy == self.policy else Change(policy)

    def _refused(self, error: str, stamp: tuple[int, int]) -> Change | None:
        # Reported once per bad version of the file, not on every request while it stays bad.
        if stamp == self.stamp:
            return None
        self.stamp = stamp
        return Change(None, error)


def _stamp(path: Path) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_mtime_ns, status.st_size
