"""The sandbox every tool goes through: roots, path resolution, deny patterns, and the checks that
make opening a path safe (no FIFO, device or socket; nothing outside the roots; no secrets)."""

from __future__ import annotations

import fcntl
import functools
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ctxwin.store.base import BlobStore
from ctxwin.tokens import TokenCounter, counter_for
from ctxwin.tools.base import Limits, ToolError, printable
from ctxwin.tools.ignore import glob_to_regex
from ctxwin.tools.lines import LineIndexCache

DEFAULT_DENY: tuple[str, ...] = (
    ".env*",  # dotenv files (.env, .env.local, .envrc)
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",  # SSH private keys
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore",  # TLS / signing keys and keystores
    ".netrc", "_netrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials", ".htpasswd",  # credential files
    "credentials*", ".aws/credentials", ".docker/config.json", ".kube/config",  # cloud credentials
    "*.kdbx",  # password databases
)

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


@functools.lru_cache(maxsize=32)
def _deny_regexes(patterns: tuple[str, ...]) -> tuple[re.Pattern[str] | None, tuple[tuple[int, re.Pattern[str]], ...]]:
    """The deny patterns compiled for the fast "any match?" test: one regex for the patterns that
    match a single segment, and (segment count, regex) for the patterns with `/`."""
    single = [glob_to_regex(p.lower()) for p in patterns if "/" not in p]
    multi = tuple(
        (p.count("/") + 1, re.compile(glob_to_regex(p.lower()), re.DOTALL)) for p in patterns if "/" in p
    )
    return (re.compile("|".join(single), re.DOTALL) if single else None), multi


def _denied_by(rel: str, patterns: tuple[str, ...]) -> bool:
    parts = rel.lower().split("/")
    single, multi = _deny_regexes(patterns)
    if single is not None and any(single.fullmatch(part) for part in parts):
        return True
    return any(
        regex.fullmatch("/".join(parts[end - count : end]))
        for count, regex in multi
        for end in range(count, len(parts) + 1)
    )


def deny_match(rel: str, patterns: Sequence[str]) -> str | None:
    """The first deny pattern that matches `rel` (a `/`-separated relative path), or None. A pattern
    without `/` matches any one segment (so a denied folder denies what is inside it); a pattern
    with `/` matches that many consecutive segments. Case-insensitive."""
    if rel in ("", "."):
        return None
    if not _denied_by(rel, tuple(patterns)):
        return None
    return next((p for p in patterns if _denied_by(rel, (p,))), None)  # which one, for the message


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
    line_index: LineIndexCache = field(default_factory=LineIndexCache, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.roots, str | Path):
            roots: list[str | Path] = [self.roots]
        else:
            roots = list(self.roots)
        if not roots:
            raise ToolError("no_roots", "a workspace needs at least one root folder")
        real: list[str] = []
        for root in roots:
            path = os.path.realpath(os.path.expanduser(str(root)))
            if not os.path.isdir(path):
                raise ToolError("bad_root", f"workspace root {root} is not a folder", "give an existing folder")
            real.append(path)
        object.__setattr__(self, "roots", tuple(real))
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
        """Resolves `~`, `..` and symlinks, then refuses anything outside the roots or deny-listed."""
        requested = os.fspath(path) if path is not None else "."
        requested = requested or "."
        if "\x00" in requested:
            raise ToolError("bad_path", f"path {requested!r} contains a NUL byte", "give a plain path")
        expanded = os.path.expanduser(requested)
        joined = expanded if os.path.isabs(expanded) else os.path.join(str(self.roots[0]), expanded)
        real = os.path.realpath(joined)
        root = self.root_of(real)
        if root is None:
            raise ToolError(
                "outside_roots",
                f"Access denied: {requested} resolves to {real}, which is outside the workspace roots "
                f"({self.root_list}).",
                "Only paths inside the workspace roots can be used; give a path relative to the root.",
            )
        rel = "." if real == root else os.path.relpath(real, root).replace(os.sep, "/")
        # The name that was asked for counts too: a link called `.env` is refused even if it points elsewhere.
        lexical = os.path.normpath(joined)
        lexical_root = self.root_of(lexical)
        candidates = [rel]
        if lexical_root is not None and lexical != lexical_root:
            candidates.append(os.path.relpath(lexical, lexical_root).replace(os.sep, "/"))
        for candidate in candidates:
            pattern = deny_match(candidate, self.deny)
            if pattern is not None:
                raise ToolError(
                    "denied",
                    f"Access denied: {requested} matches the workspace deny pattern {pattern!r} "
                    "(secrets and credentials are never read).",
                    "Do not read this file; ask the user if you need a value from it.",
                )
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise ToolError(
                "not_found", f"{printable(requested)} does not exist.", "Use ls or find to see which files exist."
            ) from None
        except OSError as error:
            raise ToolError("unreadable", f"cannot stat {requested}: {error.strerror}") from None
        return Resolved(requested, real, root, rel, self.display(real), st)

    def denied(self, rel_to_root: str) -> bool:
        return deny_match(rel_to_root, self.deny) is not None

    # ---- file checks

    def require_file(self, resolved: Resolved) -> None:
        """Refuses folders and special files from `stat` alone, before anything is opened."""
        mode = resolved.st.st_mode
        if stat.S_ISREG(mode):
            return
        if stat.S_ISDIR(mode):
            raise ToolError(
                "is_directory",
                f"{resolved.display} is a directory.",
                "Use ls to list it, or find/grep to search inside it.",
            )
        reason, what = _KINDS.get(stat.S_IFMT(mode), ("special", "not a regular file"))
        raise ToolError(reason, f"Refused: {resolved.display} is {what}. Only regular files can be read.")

    def require_dir(self, resolved: Resolved) -> None:
        if not stat.S_ISDIR(resolved.st.st_mode):
            raise ToolError("not_directory", f"{resolved.display} is not a directory.", "Use read for files.")

    def open_file(self, resolved: Resolved) -> BinaryIO:
        """Opens a regular file for reading without ever blocking: non-blocking open, no symlink
        at the last step, and a check that what was opened is the regular file that was stat'ed."""
        self.require_file(resolved)
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(resolved.real, flags)
        except OSError as error:
            raise ToolError("unreadable", f"cannot open {resolved.display}: {error.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (resolved.st.st_dev, resolved.st.st_ino):
                raise ToolError("changed", f"{resolved.display} changed while being opened; refused.", "Try again.")
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def require_blobs(self) -> BlobStore:
        if self.blobs is None:
            raise ToolError(
                "no_blob_store",
                "This workspace has no blob store, so there is no spilled output to read.",
                "Create the workspace with blobs=FileBlobStore(folder).",
            )
        return self.blobs
