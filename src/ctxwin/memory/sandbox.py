"""File access confined to one folder, race-free: every path is opened one component at a time
relative to the folder's descriptor with `O_NOFOLLOW`, so neither `..`, an absolute path nor a
symlink (even one swapped in between a check and a use) can reach outside it; nor can a hard link
(a file with more than one name is refused, as the workspace tools refuse it: `files.too_many_links`).

Paths are relative to the root; `/memories/...` (the prefix Anthropic's memory tool uses) names the
root too. Anything else absolute, any `..`, NUL bytes and empty components are refused with
`MemoryPathError`, which says what was wrong.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ctxwin.errors import FileTooLargeError, MemoryPathError
from ctxwin.files import hard_link_refusal, too_many_links

ROOT_ALIAS = "/memories"
"""Anthropic's memory tool stores files under /memories: that prefix names the root."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def parts_of(path: str, alias: str | None = ROOT_ALIAS) -> list[str]:
    """The components of a path inside the root ([] for the root itself), or MemoryPathError."""
    if not isinstance(path, str):
        raise MemoryPathError(f"a path must be text, not {type(path).__name__}")
    if "\x00" in path:
        raise MemoryPathError("the path contains a NUL byte", "give a plain relative path")
    text = path.strip()
    if alias and (text == alias or text.startswith(alias + "/")):
        text = text[len(alias):]
        text = text.lstrip("/")
    elif text.startswith("/") or text.startswith("~"):
        where = f" or under {alias}/" if alias else ""
        raise MemoryPathError(f"{path!r} is an absolute path outside the memory folder",
                              f"give a path relative to the memory folder{where}")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise MemoryPathError(f"{path!r} goes up with '..', outside the memory folder",
                              "give a path inside the memory folder")
    return parts


@dataclass(frozen=True, slots=True)
class Confined:
    """A folder that file operations may not leave."""

    root: Path
    alias: str | None = ROOT_ALIAS

    def display(self, parts: list[str]) -> str:
        return ((self.alias or "") + "/" + "/".join(parts)) if self.alias else ("/".join(parts) or ".")

    @contextlib.contextmanager
    def _dir(self, parts: list[str], create: bool = False) -> Iterator[int]:
        """A descriptor of the folder `parts` (walked with O_NOFOLLOW; made when `create`)."""
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.root, _DIR_FLAGS)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise MemoryPathError(f"the memory folder {self.root} cannot be opened: {error.strerror}") from None
        try:
            for index, part in enumerate(parts):
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as error:
                    if error.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise MemoryPathError(
                            f"{self.display(parts[:index + 1])} is a symlink or not a folder",
                            "symlinks are not followed inside the memory folder") from None
                    raise
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _open_file(self, parts: list[str], flags: int, create_dirs: bool = False) -> int:
        if not parts:
            raise MemoryPathError("the path names the memory folder itself, not a file", "give a file path")
        with self._dir(parts[:-1], create=create_dirs) as parent:
            try:
                fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise MemoryPathError(f"{self.display(parts)} is a symlink",
                                          "symlinks are not followed inside the memory folder") from None
                if error.errno == errno.EISDIR:
                    raise MemoryPathError(f"{self.display(parts)} is a folder, not a file") from None
                raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise MemoryPathError(f"{self.display(parts)} is not a regular file")
        if too_many_links(info):
            os.close(fd)
            raise MemoryPathError(f"{self.display(parts)}: {hard_link_refusal(info.st_nlink)}")
        return fd

    def kind(self, path: str) -> str | None:
        """`file`, `dir` or None (missing)."""
        parts = parts_of(path, self.alias)
        if not parts:
            return "dir" if self.root.is_dir() else None
        try:
            with self._dir(parts[:-1]) as parent:
                info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            raise MemoryPathError(f"{self.display(parts)} is a symlink",
                                  "symlinks are not followed inside the memory folder")
        return "dir" if stat.S_ISDIR(info.st_mode) else "file" if stat.S_ISREG(info.st_mode) else "other"

    def read(self, path: str) -> str | None:
        """The file's text (UTF-8, invalid bytes replaced), or None when it does not exist."""
        parts = parts_of(path, self.alias)
        try:
            fd = self._open_file(parts, os.O_RDONLY)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as handle:
            return handle.read().decode("utf-8", "replace")

    def read_bytes(self, path: str, max_bytes: int) -> bytes:
        """The file's bytes, opened as `read` opens it (no symlink followed on the way, so one swapped
        in after a listing is refused, not followed), but never blocking on a FIFO (the open is
        non-blocking and the type checked on the descriptor) and refused over `max_bytes`."""
        fd = self._open_file(parts_of(path, self.alias), os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
            data = handle.read(max_bytes + 1)  # the cap holds for a file that grew since it was listed
        if len(data) > max_bytes:
            raise FileTooLargeError(f"{path} is over the size cap of {max_bytes:,} bytes",
                                    "split the file, or leave it out: it is not read")
        return data

    def write(self, path: str, text: str, *, exclusive: bool = False) -> None:
        """Writes the file whole (through a temporary file and a rename in the same folder, so a
        reader never sees half of it). `exclusive` refuses an existing file."""
        parts = parts_of(path, self.alias)
        if not parts:
            raise MemoryPathError("the path names the memory folder itself, not a file", "give a file path")
        with self._dir(parts[:-1], create=True) as parent:
            try:
                info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            if info is not None:
                if exclusive:
                    raise FileExistsError(errno.EEXIST, "exists", self.display(parts))
                if not stat.S_ISREG(info.st_mode):
                    raise MemoryPathError(f"{self.display(parts)} is not a regular file")
            temp = f".{parts[-1]}.{os.getpid()}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(text.encode("utf-8", "surrogatepass"))
                    handle.flush()
                    os.fsync(handle.fileno())
                if exclusive:
                    os.link(temp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False)
                    os.unlink(temp, dir_fd=parent)
                else:
                    os.rename(temp, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp, dir_fd=parent)
                raise

    def listing(self, path: str) -> list[tuple[str, bool, int]]:
        """(name, is folder, size) of a folder's entries, sorted; hidden files left out."""
        parts = parts_of(path, self.alias)
        with self._dir(parts) as fd:
            out = []
            for name in sorted(os.listdir(fd)):
                if name.startswith("."):
                    continue
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                out.append((name, stat.S_ISDIR(info.st_mode), info.st_size))
            return out

    def delete(self, path: str) -> None:
        """Removes a file, or a folder with everything in it (symlinks inside are removed, never followed)."""
        parts = parts_of(path, self.alias)
        if not parts:
            raise MemoryPathError("refusing to delete the memory folder itself", "delete files or folders inside it")
        with self._dir(parts[:-1]) as parent:
            info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                _remove_tree(parent, parts[-1])
            else:
                os.unlink(parts[-1], dir_fd=parent)

    def rename(self, old: str, new: str) -> None:
        """Moves a file or folder; refuses to overwrite."""
        old_parts, new_parts = parts_of(old, self.alias), parts_of(new, self.alias)
        if not old_parts or not new_parts:
            raise MemoryPathError("cannot rename the memory folder itself")
        with self._dir(old_parts[:-1]) as src, self._dir(new_parts[:-1], create=True) as dst:
            os.stat(old_parts[-1], dir_fd=src, follow_symlinks=False)  # FileNotFoundError when missing
            try:
                os.stat(new_parts[-1], dir_fd=dst, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise FileExistsError(errno.EEXIST, "exists", self.display(new_parts))
            os.rename(old_parts[-1], new_parts[-1], src_dir_fd=src, dst_dir_fd=dst)


def _remove_tree(parent: int, name: str) -> None:
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        for child in os.listdir(fd):
            info = os.stat(child, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                _remove_tree(fd, child)
            else:
                os.unlink(child, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)
