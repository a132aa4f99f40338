"""The sandbox every tool goes through: roots, path resolution, deny patterns, and the checks that
make opening a path safe (no FIFO, device or socket; nothing outside the roots; no secrets; no file
with other names elsewhere).

Resolution is race-free: a path is walked one component at a time from a file descriptor of its root,
each component opened relative to its parent with O_NOFOLLOW (O_PATH where the kernel has it, so
nothing is opened for real before its type is known). A symlink is never followed by the kernel: its
target is read and walked the same way, so one that leads outside is refused, and a folder swapped
for a symlink between two steps is never followed. Files are then read through the descriptor that
walk opened. (`openat2(RESOLVE_BENEATH)` is not used: it refuses every absolute symlink, also those
that stay inside the root, which the tools follow.)

Hard links: a regular file with more than one link is refused unless `Workspace(allow_hard_links=True)`.
Its other names may be outside the roots or deny-listed (`ln .env notes.txt`), and nothing short of a
scan of the whole file system finds them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ctxwin.files import too_many_links

# The deny list is defined in `ctxwin.paths` (the memory index applies it too); `DEFAULT_DENY`,
# `deny_match` and `denied_tail` are named here as well, where the tools have always found them.
from ctxwin.paths import DEFAULT_DENY, denied_tail, deny_match, printable
from ctxwin.store.base import BlobStore
from ctxwin.tokens import TokenCounter, counter_for
from ctxwin.tools.base import Limits, ToolError
from ctxwin.tools.ignore import CLOEXEC, DIR_FLAGS, FILE_FLAGS, NOFOLLOW, close_all, open_dirs
from ctxwin.tools.lines import LineIndexCache

MAX_SYMLINKS = 40  # symlinks followed in one resolution (the kernel's ELOOP limit)
_O_PATH = getattr(os, "O_PATH", 0)
# Probing a component: O_PATH opens nothing for real (no FIFO open, no device side effect).
PROBE_FLAGS = (_O_PATH | NOFOLLOW | CLOEXEC) if _O_PATH else (os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC)

_KINDS = {
    stat.S_IFIFO: ("fifo", "a FIFO (named pipe): opening it could block forever"),
    stat.S_IFCHR: ("device", "a character device: its content may never end"),
    stat.S_IFBLK: ("device", "a block device"),
    stat.S_IFSOCK: ("socket", "a socket"),
}


@dataclass(frozen=True, slots=True)
class Resolved:
    """A path the sandbox accepted: `real` is the resolved absolute path, `rel` its path relative
    to `root` ("." for the root itself), `display` the name tools print."""

    requested: str
    real: str
    root: str
    rel: str
    display: str
    st: os.stat_result

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st.st_mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)


def _realpath(path: str) -> str:
    """`os.path.realpath`, which can raise when a symlink it is reading changes (EINVAL); then the
    path as written, normalized. Used to name where a path leads and to place it in a root, never to
    open anything: every open is done by the walk."""
    try:
        return os.path.realpath(path)
    except OSError:
        return os.path.normpath(path)


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


@dataclass
class _Walk:
    """Where a resolution is: fds of the root and of each folder below it (`names` parallel to
    `fds[1:]`), and the leaf when the path ends at something that is not a folder."""

    root: str
    fds: list[int]
    names: list[str] = field(default_factory=list)
    leaf: tuple[str, int, os.stat_result] | None = None  # (name, probe fd, lstat)

    def close(self) -> None:
        close_all(self.fds + ([self.leaf[1]] if self.leaf else []))
        self.fds, self.leaf = [], None

    @property
    def rel(self) -> str:
        parts = self.names + ([self.leaf[0]] if self.leaf else [])
        return "/".join(parts) if parts else "."


@dataclass(frozen=True)
class Opened:
    """A path the sandbox accepted, with the descriptors its walk opened (valid inside the `with`)."""

    resolved: Resolved
    walk: _Walk
    allow_hard_links: bool

    def open_file(self) -> BinaryIO:
        """The regular file, opened relative to its folder's descriptor (no symlink followed, never
        blocking) and checked to be the very file the walk saw."""
        require_file(self.resolved, self.allow_hard_links)
        assert self.walk.leaf is not None
        name = self.walk.leaf[0]
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=self.walk.fds[-1])
        except OSError as error:
            raise _os_refusal(self.resolved.display, "open", error) from None
        return _checked_stream(fd, self.resolved)

    def dir_fd(self) -> int:
        """A descriptor of the folder for listing (scandir); closed with the `with`."""
        require_dir(self.resolved)
        try:
            fd = os.open(".", DIR_FLAGS, dir_fd=self.walk.fds[-1])
        except OSError as error:
            raise _os_refusal(self.resolved.display, "open", error) from None
        self.walk.fds.append(fd)
        return fd


def _checked_stream(fd: int, resolved: Resolved) -> BinaryIO:
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (resolved.st.st_dev, resolved.st.st_ino):
            raise ToolError("changed", f"{resolved.display} changed while being opened; refused.", "Try again.")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _os_refusal(name: str, action: str, error: OSError) -> ToolError:
    if isinstance(error, FileNotFoundError):
        return ToolError("not_found", f"{name} does not exist.", "Use ls or find to see which files exist.")
    return ToolError("unreadable", f"cannot {action} {name}: {error.strerror or error}")


def require_file(resolved: Resolved, allow_hard_links: bool = False) -> None:
    """Refuses folders, special files and (unless allowed) hard-linked files, from `stat` alone."""
    mode = resolved.st.st_mode
    if stat.S_ISREG(mode):
        if too_many_links(resolved.st, allow_hard_links):
            raise ToolError(
                "hard_link",
                f"Refused: {resolved.display} has {resolved.st.st_nlink} hard links; its other names may be outside "
                "the workspace roots or secrets.",
                "Read a copy of the file (cp makes one), or have the harness allow hard links.",
            )
        return
    if stat.S_ISDIR(mode):
        raise ToolError(
            "is_directory",
            f"{resolved.display} is a directory.",
            "Use ls to list it, or find/grep to search inside it.",
        )
    reason, what = _KINDS.get(stat.S_IFMT(mode), ("special", "not a regular file"))
    raise ToolError(reason, f"Refused: {resolved.display} is {what}. Only regular files can be read.")


def require_dir(resolved: Resolved) -> None:
    if not stat.S_ISDIR(resolved.st.st_mode):
        raise ToolError("not_directory", f"{resolved.display} is not a directory.", "Use read for files.")


@dataclass(frozen=True)
class Workspace:
    """One or more root folders the tools may touch, and how they may touch them.

    Relative paths resolve against the first root. `deny` patterns refuse secrets even inside the
    roots. `blobs` receives spilled output (shell) and serves the spilled-output tools. The shell
    tool runs only when `allow_shell` is true. `model` picks the token counter for read's token gate.
    `line_index` caches where lines start in files read page by page (keyed by file version).
    """

    roots: Sequence[str | Path]
    deny: Sequence[str] = DEFAULT_DENY
    blobs: BlobStore | None = None
    allow_shell: bool = False
    limits: Limits = field(default_factory=Limits)
    model: str | None = None
    counter: TokenCounter | None = None
    shell_env: dict[str, str] | None = None  # environment for shell commands (None: PATH, HOME, locale only)
    allow_hard_links: bool = False  # read files with more than one hard link (see the module docstring)
    line_index: LineIndexCache = field(default_factory=LineIndexCache, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.roots, str | os.PathLike):
            roots: list[str | Path] = [self.roots]
        elif isinstance(self.roots, Iterable) and not isinstance(self.roots, bytes | Mapping):
            roots = list(self.roots)
        else:
            raise ToolError("bad_root", f"roots is a list of folders, not {type(self.roots).__name__}",
                            "give the root folders as a list of paths")
        if not roots:
            raise ToolError("no_roots", "a workspace needs at least one root folder")
        real: list[str] = []
        for root in roots:
            if not isinstance(root, str | os.PathLike) or "\x00" in str(root):
                raise ToolError("bad_root", f"workspace root {root!r:.80} is not a folder path",
                                "give an existing folder")
            path = os.path.realpath(os.path.expanduser(str(root)))
            if not os.path.isdir(path):
                raise ToolError("bad_root", f"workspace root {root} is not a folder", "give an existing folder")
            real.append(path)
        object.__setattr__(self, "roots", tuple(real))
        if isinstance(self.deny, str | bytes | Mapping) or not isinstance(self.deny, Iterable) \
                or not all(isinstance(pattern, str) for pattern in self.deny):
            raise ToolError("bad_deny", f"deny is a list of glob patterns, not {self.deny!r:.80}",
                            "give the patterns as a list of strings (or leave deny unset)")
        object.__setattr__(self, "deny", tuple(self.deny))
        if self.counter is None:
            object.__setattr__(self, "counter", counter_for(self.model))

    # ---- paths

    @property
    def root_list(self) -> str:
        return ", ".join(str(r) for r in self.roots)

    def root_of(self, real: str) -> str | None:
        for root in self.roots:
            if real == root or os.path.commonpath([root, real]) == root:
                return str(root)
        return None

    def display(self, real: str) -> str:
        """How tools name a path: relative to the first root when inside it, else absolute."""
        first = str(self.roots[0])
        if real == first:
            return "."
        if os.path.commonpath([first, real]) == first:
            return printable(os.path.relpath(real, first).replace(os.sep, "/"))
        return printable(real)

    def resolve(self, path: str | os.PathLike[str]) -> Resolved:
        """Resolves `~`, `..` and symlinks, then refuses anything outside the roots or deny-listed.
        Nothing stays open; use `opened` to read what was resolved."""
        with self.opened(path) as target:
            return target.resolved

    @contextlib.contextmanager
    def opened(self, path: str | os.PathLike[str]) -> Iterator[Opened]:
        """Resolves `path` as `resolve` does and keeps the descriptors of the walk open inside the
        `with`, so the file or folder is then opened through them (`Opened.open_file`, `dir_fd`)."""
        requested = os.fspath(path) if isinstance(path, str | os.PathLike) else "." if path is None else path
        if not isinstance(requested, str):
            raise ToolError("bad_path", f"path must be a string, not {type(requested).__name__}")
        requested = requested or "."
        if "\x00" in requested:
            raise ToolError("bad_path", f"path {requested!r} contains a NUL byte", "give a plain path")
        expanded = os.path.expanduser(requested)
        joined = expanded if os.path.isabs(expanded) else os.path.join(str(self.roots[0]), expanded)
        # The name that was asked for counts too: a link called `.env` is refused even if it points elsewhere.
        lexical = os.path.normpath(joined)
        lexical_root = self.root_of(lexical)
        if lexical_root is not None and lexical != lexical_root:
            self._check_deny(requested, os.path.relpath(lexical, lexical_root).replace(os.sep, "/"))
        walk = self._walk(requested, joined)
        try:
            rel = walk.rel
            self._check_deny(requested, rel)
            if walk.leaf is not None:
                st = walk.leaf[2]
            else:
                st = os.fstat(walk.fds[-1])
            real = walk.root if rel == "." else os.path.join(walk.root, rel)
            yield Opened(Resolved(requested, real, walk.root, rel, self.display(real), st), walk, self.allow_hard_links)
        finally:
            walk.close()

    def _check_deny(self, requested: str, rel: str) -> None:
        pattern = deny_match(rel, self.deny)
        if pattern is not None:
            raise ToolError(
                "denied",
                f"Access denied: {printable(requested)} matches the workspace deny pattern {pattern!r} "
                "(secrets and credentials are never read).",
                "Do not read this file; ask the user if you need a value from it.",
            )

    def _outside(self, requested: str, joined: str) -> ToolError:
        real = _realpath(joined)
        return ToolError(
            "outside_roots",
            f"Access denied: {printable(requested)} resolves to {printable(real)}, which is outside the workspace "
            f"roots ({self.root_list}).",
            "Only paths inside the workspace roots can be used; give a path relative to the root.",
        )

    def _enter(self, absolute: str, requested: str, joined: str) -> tuple[str, list[str]]:
        """The root an absolute path lies in and the components below it. A path that names no
        root directly (`/tmp/link-to-root/x`) is placed by where it resolves; the walk that
        follows still opens only what is beneath that root."""
        parts = _parts(os.path.normpath(absolute)) if ".." not in absolute.split("/") else _parts(absolute)
        for candidate in self.roots:
            root_parts = _parts(str(candidate))
            if parts[: len(root_parts)] == root_parts:
                return str(candidate), parts[len(root_parts) :]
        real = _realpath(absolute)
        root = self.root_of(real)
        if root is None:
            raise self._outside(requested, joined)
        return root, _parts(os.path.relpath(real, root)) if real != root else []

    def _walk(self, requested: str, joined: str) -> _Walk:
        root, rest = self._enter(joined, requested, joined)
        try:
            walk = _Walk(root, [os.open(root, DIR_FLAGS)])
        except OSError as error:
            raise _os_refusal(root, "open the root", error) from None
        todo = list(reversed(rest))
        links = 0
        restarted = False
        try:
            while todo:
                part = todo.pop()
                if part in ("", "."):
                    continue
                if walk.leaf is not None:  # the path goes on below a file
                    raise ToolError(
                        "not_found", f"{printable(requested)} does not exist ({walk.leaf[0]} is not a folder).",
                        "Use ls or find to see which files exist.",
                    )
                if part == "..":
                    if not walk.names:
                        # Above the root: only a path that comes back inside (`root/../root/x`) is
                        # accepted, placed by where it resolves and walked again from that root.
                        if restarted:
                            raise self._outside(requested, joined)
                        restarted = True
                        real = _realpath(joined)
                        placed = self.root_of(real)
                        if placed is None:
                            raise self._outside(requested, joined)
                        root = placed
                        walk.close()
                        walk = _Walk(root, [os.open(root, DIR_FLAGS)])
                        todo = list(reversed(_parts(os.path.relpath(real, root)) if real != root else []))
                        continue
                    os.close(walk.fds.pop())
                    walk.names.pop()
                    continue
                parent = walk.fds[-1]
                try:
                    fd = os.open(part, PROBE_FLAGS, dir_fd=parent)
                    st = os.fstat(fd)
                except OSError as error:
                    if error.errno != getattr(os, "ELOOP", -1) or _O_PATH:
                        raise _os_refusal(printable(requested), "open", error) from None
                    fd, st = -1, os.lstat(part, dir_fd=parent)  # no O_PATH: O_NOFOLLOW refused the symlink
                if stat.S_ISLNK(st.st_mode):
                    if fd >= 0:
                        os.close(fd)
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise ToolError("symlink_loop", f"{printable(requested)}: too many levels of symlinks.")
                    try:
                        target = os.readlink(part, dir_fd=parent)
                    except OSError as error:
                        raise ToolError("changed", f"{printable(requested)} changed while being resolved.",
                                        f"Try again ({error.strerror}).") from None
                    if os.path.isabs(target):
                        new_root, below = self._enter(target, requested, joined)
                        walk.close()
                        walk = _Walk(new_root, [os.open(new_root, DIR_FLAGS)])
                        todo += list(reversed(below))
                    else:
                        todo += list(reversed(target.split("/")))
                    continue
                if stat.S_ISDIR(st.st_mode):
                    walk.fds.append(fd)
                    walk.names.append(part)
                else:
                    walk.leaf = (part, fd, st)
        except BaseException:
            walk.close()
            raise
        return walk

    def denied(self, rel_to_root: str) -> bool:
        return deny_match(rel_to_root, self.deny) is not None

    def denied_entry(self, rel_to_root: str) -> bool:
        """`denied` for an entry of a walk whose folders were all checked already."""
        return denied_tail(rel_to_root, self.deny)

    # ---- file checks

    def require_file(self, resolved: Resolved) -> None:
        """Refuses folders, special files and hard-linked files from `stat` alone, before anything is opened."""
        require_file(resolved, self.allow_hard_links)

    def require_dir(self, resolved: Resolved) -> None:
        require_dir(resolved)

    def open_file(self, resolved: Resolved) -> BinaryIO:
        """Opens a file `resolve` accepted: every folder from its root down opened with O_NOFOLLOW
        (a symlink swapped in since is refused, not followed), then the file, checked to be the
        one that was resolved. Prefer `opened`, which needs no second walk."""
        self.require_file(resolved)
        folder, _, name = resolved.rel.rpartition("/")
        try:
            fds = open_dirs(resolved.root, folder)
        except OSError as error:
            raise _os_refusal(resolved.display, "open", error) from None
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=fds[-1])
        except OSError as error:
            raise _os_refusal(resolved.display, "open", error) from None
        finally:
            close_all(fds)
        return _checked_stream(fd, resolved)

    def require_blobs(self) -> BlobStore:
        if self.blobs is None:
            raise ToolError(
                "no_blob_store",
                "This workspace has no blob store, so there is no spilled output to read.",
                "Create the workspace with blobs=FileBlobStore(folder).",
            )
        return self.blobs
