""".gitignore matching (lines read by the `pathspec` library, matched with RE2, so no line of a
.gitignore can make matching backtrack) and the directory walk that grep's fallback, find and ls share.

Rules follow gitignore(5) as git does; deeper .gitignore files win over shallower ones, later lines
over earlier ones. A path inside an ignored folder is ignored (the walk never enters it).

The walk holds a file descriptor per open folder and opens every child relative to its parent with
O_NOFOLLOW, so a folder swapped for a symlink while the walk runs is never followed; it is iterative
(a tree thousands of folders deep needs no recursion) and keeps only `WALK_OPEN_DIRS` folders open,
re-opening an ancestor (checked by device and inode) when it is needed again.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from ctxwin.tools.base import printable
from ctxwin.tools.patterns import path_options

ALWAYS_SKIPPED = (".git", "node_modules")  # folder names never walked into, ignore files or not
IGNORE_FILE = ".gitignore"  # the only ignore file honoured (ripgrep is told the same)
IGNORE_FILE_MAX_BYTES = 1024 * 1024  # a larger .gitignore is not read
WALK_OPEN_DIRS = 64  # folders the walk keeps open at once (deeper ancestors are re-opened when needed)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | NOFOLLOW | CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW | CLOEXEC


@dataclass(frozen=True, slots=True)
class IgnoreFile:
    """The rules of one .gitignore: `base` is its folder relative to the walk's root ("" for the root).
    pathspec turns each line into a regex; they are matched as one RE2 set that must match the whole
    path (the walk asks about each entry itself, never about what is inside an ignored folder)."""

    base: str
    regexes: Any  # re2.Set (full match) of the lines' regexes
    negated: tuple[bool, ...]  # per regex: a `!` line


Rules = Sequence[IgnoreFile]


def _line_patterns(lines: list[str]) -> list[Any]:
    """pathspec's reading of each line (blank lines and comments give none); a line it cannot
    read is skipped, as git skips it."""
    out = []
    for line in lines:
        try:
            with warnings.catch_warnings():  # pathspec also compiles each line with `re`, which warns on "[["
                warnings.simplefilter("ignore", FutureWarning)
                pattern = GitIgnoreSpecPattern(line)
        except (ValueError, re.error):
            continue
        if pattern.include is not None and pattern.regex is not None:
            out.append(pattern)
    return out


def parse_rules(text: str, base: str) -> list[IgnoreFile]:
    """The lines of one .gitignore as rules (empty when it has none)."""
    regexes = re2.Set.FullMatchSet(path_options())
    negated: list[bool] = []
    for pattern in _line_patterns(text.split("\n")):
        try:
            regexes.Add(pattern.regex.pattern)
        except re2.error:
            continue
        negated.append(not pattern.include)
    if not negated:
        return []
    regexes.Compile()
    return [IgnoreFile(base, regexes, tuple(negated))]


def ignored(rules: Rules, rel: str, is_dir: bool) -> bool:
    """Whether `rel` (relative to the walk's root, `/`-separated) is ignored: the deepest file with
    a matching line decides, and in it the last matching line."""
    for rule in reversed(rules):
        if rule.base:
            if not rel.startswith(rule.base + "/"):
                continue
            local = rel[len(rule.base) + 1 :]
        else:
            local = rel
        found = rule.regexes.Match(printable(local + "/" if is_dir else local))
        if found:
            return not rule.negated[max(found)]
    return False


def read_small_file(dir_fd: int, name: str, max_bytes: int = IGNORE_FILE_MAX_BYTES) -> bytes | None:
    """A regular file next to `dir_fd` (never through a symlink, never blocking), or None."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:
            return None
        return os.read(fd, max_bytes + 1)[:max_bytes]
    except OSError:
        return None
    finally:
        os.close(fd)


def load_rules(dir_fd: int, base: str) -> list[IgnoreFile]:
    data = read_small_file(dir_fd, IGNORE_FILE)
    return parse_rules(data.decode("utf-8", "replace"), base) if data else []


def open_dirs(root: str, rel_dir: str) -> list[int]:
    """File descriptors of `root` and of each folder down to `rel_dir` (each opened relative to its
    parent, no symlink followed). The caller closes them. Raises OSError."""
    fds = [os.open(root, DIR_FLAGS)]
    try:
        for part in [p for p in rel_dir.split("/") if p not in ("", ".")]:
            fds.append(os.open(part, DIR_FLAGS, dir_fd=fds[-1]))
    except BaseException:
        close_all(fds)
        raise
    return fds


def close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def ancestor_rules(root: str, rel_dir: str) -> list[IgnoreFile]:
    """The rules of the .gitignore files from `root` down to (not including) `rel_dir`."""
    rel_dir = "" if rel_dir in ("", ".") else rel_dir
    if not rel_dir:
        return []
    try:
        fds = open_dirs(root, rel_dir)
    except OSError:
        return []
    try:
        parts = rel_dir.split("/")
        rules: list[IgnoreFile] = []
        for depth, fd in enumerate(fds[:-1]):
            rules += load_rules(fd, "/".join(parts[:depth]))
        return rules
    finally:
        close_all(fds)


@dataclass(frozen=True, slots=True)
class WalkEntry:
    """One entry the walk yields. `dir_fd` is its parent folder, open until the walk moves on: open
    the entry with `os.open(name, ..., dir_fd=dir_fd)`, never by `path`."""

    rel: str  # relative to the walk's root, "/"-separated
    path: str  # absolute (for messages only)
    name: str
    dir_fd: int
    is_dir: bool
    size: int
    nlink: int


@dataclass
class _Frame:
    rel: str
    fd: int  # -1 while closed (re-opened from its parent when needed)
    dev_ino: tuple[int, int]
    entries: Iterator[tuple[str, os.stat_result]]
    rules: Rules = field(default_factory=list)


def _list(fd: int) -> Iterator[tuple[str, os.stat_result]]:
    """The entries of a folder in name order, with their lstat."""
    names: list[tuple[str, os.stat_result]] = []
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                try:
                    names.append((entry.name, entry.stat(follow_symlinks=False)))
                except OSError:
                    continue
    except OSError:
        return iter(())
    names.sort(key=lambda item: item[0])
    return iter(names)


def walk(
    root: str,
    start_rel: str,
    *,
    respect_ignore: bool = True,
    skip_name: Sequence[str] = ALWAYS_SKIPPED,
    denied: Callable[[str], bool] | None = None,
    unignore: Callable[[str], bool] | None = None,
) -> Iterator[WalkEntry]:
    """Regular files and folders under `root/start_rel` (not `start_rel` itself), depth first in
    name order. Symlinks are not followed and not listed (as ripgrep does by default); FIFOs,
    sockets and devices are skipped. `denied(rel)` prunes deny-listed names; `unignore(rel)` keeps
    an entry that .gitignore would skip (ripgrep's rule for paths its --glob names)."""
    start_rel = "" if start_rel in ("", ".") else start_rel
    try:
        chain = open_dirs(root, start_rel)
    except OSError:
        return
    start_fd = chain.pop()
    close_all(chain)
    rules: list[IgnoreFile] = ancestor_rules(root, start_rel) if respect_ignore else []
    skip = frozenset(skip_name)
    stack: list[_Frame] = []
    try:
        start_st = os.fstat(start_fd)
        if respect_ignore:
            rules += load_rules(start_fd, start_rel)
        stack.append(_Frame(start_rel, start_fd, (start_st.st_dev, start_st.st_ino), _list(start_fd), rules))
        while stack:
            frame = stack[-1]
            item = next(frame.entries, None)
            if item is None:
                stack.pop()
                if frame.fd >= 0:
                    os.close(frame.fd)
                continue
            name, info = item
            rel = f"{frame.rel}/{name}" if frame.rel else name
            mode = info.st_mode
            is_dir = stat.S_ISDIR(mode)
            if not is_dir and not stat.S_ISREG(mode):
                continue  # symlinks, FIFOs, sockets, devices
            if is_dir and name in skip:
                continue
            if denied is not None and denied(rel):
                continue
            skipped = respect_ignore and bool(frame.rules) and ignored(frame.rules, rel, is_dir)
            if skipped and (unignore is None or not unignore(rel)):
                continue
            parent_fd = _frame_fd(stack, len(stack) - 1)
            if parent_fd < 0:
                continue
            yield WalkEntry(rel, os.path.join(root, rel), name, parent_fd, is_dir, info.st_size, info.st_nlink)
            if is_dir:
                child = _open_child(parent_fd, name, info)
                if child is None:
                    continue
                own = load_rules(child, rel) if respect_ignore else []
                stack.append(_Frame(rel, child, (info.st_dev, info.st_ino), _list(child), [*frame.rules, *own]))
                _limit_open(stack)
    finally:
        close_all([frame.fd for frame in stack if frame.fd >= 0])


def _open_child(parent_fd: int, name: str, info: os.stat_result) -> int | None:
    """A child folder opened relative to its parent, only if it is still the folder that was listed."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    except OSError:
        return None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (info.st_dev, info.st_ino):
        os.close(fd)
        return None
    return fd


def _limit_open(stack: list[_Frame]) -> None:
    """Closes the fds of the shallowest open frames (never the start or the top) while more than
    WALK_OPEN_DIRS are open."""
    open_frames = [frame for frame in stack[1:-1] if frame.fd >= 0]
    for frame in open_frames[: max(0, len(open_frames) + 1 - WALK_OPEN_DIRS)]:
        os.close(frame.fd)
        frame.fd = -1


def _frame_fd(stack: list[_Frame], index: int) -> int:
    """The fd of `stack[index]` (the top frame), re-opened down from the nearest open ancestor if it
    was closed (-1 if a folder on the way is gone or was replaced)."""
    if stack[index].fd >= 0:
        return stack[index].fd
    start = index
    while start > 0 and stack[start].fd < 0:
        start -= 1
    for at in range(start + 1, index + 1):
        frame = stack[at]
        try:
            fd = os.open(frame.rel.rsplit("/", 1)[-1], DIR_FLAGS, dir_fd=stack[at - 1].fd)
        except OSError:
            return -1
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != frame.dev_ino:
            os.close(fd)
            return -1
        frame.fd = fd
    _limit_open(stack)
    return stack[index].fd


def path_key(rel: str) -> tuple[str, ...]:
    """Sort key of a relative path: folder by folder, as a tree walk in name order lists them."""
    return tuple(rel.split("/"))


def rebase_line(line: str, base: str) -> str | None:
    """A .gitignore line from folder `base` rewritten to mean the same from the walk's root (for
    handing parent folders' rules to ripgrep as one `--ignore-file`)."""
    raw = line.rstrip("\n").rstrip("\r")
    if not raw.strip() or raw.startswith("#"):
        return None
    if not base:
        return raw
    negate = raw.startswith("!")
    body = raw[1:] if negate else raw
    trailing = "/" if body.rstrip(" ").endswith("/") else ""
    core = body.rstrip(" ").rstrip("/")
    if not core:
        return None
    anchored = "/" in core
    core = core.lstrip("/")
    rebased = f"/{base}/{core}" if anchored else f"/{base}/**/{core}"
    return ("!" if negate else "") + rebased + trailing


def ancestor_ignore_text(root: str, rel_dir: str) -> str:
    """The rules of the .gitignore files from `root` down to (not including) `rel_dir`, rebased
    to `root`, as the text of one ignore file."""
    if rel_dir in ("", "."):
        return ""
    try:
        fds = open_dirs(root, rel_dir)
    except OSError:
        return ""
    parts = rel_dir.split("/")
    lines: list[str] = []
    try:
        for depth, fd in enumerate(fds[:-1]):
            data = read_small_file(fd, IGNORE_FILE)
            if data:
                base = "/".join(parts[:depth])
                text = data.decode("utf-8", "replace")
                lines += [rebased for line in text.split("\n") if (rebased := rebase_line(line, base)) is not None]
    finally:
        close_all(fds)
    return "\n".join(lines) + ("\n" if lines else "")
