"""Session locks: an exclusive `flock` held on a lock file (and, for the writer, on the session folder
itself), with the holder's pid written in the file.

The writer flocks the session folder first (a lock that survives someone deleting writer.lock), then
writer.lock without waiting, which is the lock older ctxwin versions take, so an old and a new writer
still exclude each other. Lock files are opened without following symbolic links and never on a FIFO
or device. Every OSError on the way becomes a `SessionFormatError` or `SessionLockedError` saying what
to do (`lock_error`). The JSONL log (`jsonl.py`) and consolidation (`memory/consolidate`) use these.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from pathlib import Path

from ctxwin.errors import CtxwinError, InputError
from ctxwin.store.base import SessionFormatError, SessionLockedError
from ctxwin.store.blobs import FILE_MODE, read_store_file

WRITER_LOCK = "writer.lock"
COMPACTION_LOCK = "compaction.lock"
LOCK_POLL_S = 0.005  # how often a waiting writer retries the lock (doubling up to LOCK_POLL_MAX_S)
LOCK_POLL_MAX_S = 0.05
LOCK_ATTEMPTS = 3  # times the folder lock is taken again when the folder was replaced while waiting
HOLDER_MAX_BYTES = 64  # writer.lock holds one pid


def open_lock_file(path: Path) -> int:
    """An fd on the lock file `path`, created if missing, never through a symbolic link and never on
    a FIFO or device (one in its place is replaced: a lock file holds nothing worth keeping). A folder
    in its place is refused, not removed: it may hold something. Raises OSError for what it cannot open."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for _ in range(2):
        try:
            fd = os.open(path, flags, FILE_MODE)
        except IsADirectoryError:
            raise SessionFormatError(f"{path} is a directory, not ctxwin's lock file",
                                     "remove it (ctxwin keeps only a pid there), then open the session again") from None
        except OSError as error:
            if error.errno not in (errno.ELOOP, errno.ENXIO):
                raise
        else:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                return fd
            os.close(fd)
        os.unlink(path)  # a symlink, FIFO, socket or device where our lock file belongs
    raise SessionFormatError(f"{path} keeps being replaced by something that is not a file", "check the folder")


def holder_of(path: Path) -> str:
    """The pid written in a lock file, or "" (never blocks, never follows a link)."""
    try:
        return read_store_file(path, HOLDER_MAX_BYTES).decode(errors="replace").strip()
    except (OSError, InputError):
        return ""


def lock_error(path: Path, error: OSError, hint: str) -> CtxwinError:
    """An OSError met while opening or locking `path`, as the typed error a user can act on."""
    reason = error.strerror or str(error)
    if error.errno in (errno.EBADF, errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):  # NFS, some FUSE mounts
        return SessionLockedError(f"cannot lock {path}: {reason} (this file system does not lock files)",
                                  "open the session read-only, or keep sessions on a local disk")
    if error.errno in (errno.EMFILE, errno.ENFILE):  # passes once descriptors are given back: like a busy lock
        return SessionLockedError(f"cannot open {path}: {reason}",
                                  "try again once fewer sessions are open, or raise the limit (ulimit -n)")
    if error.errno == errno.EROFS:
        return SessionFormatError(f"cannot write in {path}: the file system is read-only",
                                  "open the session read-only (readonly=True, or --readonly)")
    if error.errno in (errno.EACCES, errno.EPERM):
        return SessionFormatError(f"permission denied opening {path} for writing",
                                  "check the folder's owner and permissions, or open the session read-only")
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        return SessionFormatError(f"cannot open {path}: a part of the path is a file, not a folder", "check the path")
    if error.errno == errno.ENOENT:
        return SessionFormatError(f"{path} was removed while it was being opened", "open the session again")
    return SessionFormatError(f"cannot open {path}: {reason}", hint)


class FileLock:
    """An exclusive flock, held from `acquire` to `release`. `path` is the lock file, holding the
    holder's pid. With `on` (the session folder) the flock is on `on` first, which nobody can delete
    while a writer holds it, so the lock survives the deletion of `path`; and then on `path` as well,
    without waiting, because older ctxwin writers lock only `path` and must still be kept out (and
    keep this one out). Locks belong to the open file, so two opens in one process exclude each other
    just as two processes do."""

    def __init__(self, path: Path, on: Path | None = None) -> None:
        self.path = path
        self.on = on
        self._fd: int | None = None  # the folder (with `on`), or the lock file
        self._file_fd: int | None = None  # the lock file, when `_fd` is the folder
        self._file_id: tuple[int, int] | None = None

    def acquire(self, timeout: float | None, what: str, hint: str) -> None:
        """Raises SessionLockedError when another holds the lock (after `timeout` seconds; None waits
        forever), SessionFormatError (or SessionLockedError, for a file system without locks) for
        every OSError met on the way."""
        deadline = None if timeout is None else time.monotonic() + timeout
        target = self.path if self.on is None else self.on
        try:
            if self.on is None:
                self._fd = self._wait(open_lock_file(self.path), deadline, timeout, what, hint)
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
                return
            self._fd = self._lock_folder(self.on, deadline, timeout, what, hint)
            target = self.path
            self._lock_file(what, hint)
        except BaseException as error:
            self.release()
            if isinstance(error, OSError):
                raise lock_error(target, error, hint) from None
            raise

    def _lock_folder(self, folder: Path, deadline: float | None, timeout: float | None, what: str, hint: str) -> int:
        """The folder's fd, flocked, and still the folder named `folder`: one deleted and made again
        while this waited is another session's folder, so the lock is taken again on that one."""
        for _ in range(LOCK_ATTEMPTS):
            self._fd = self._wait(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), deadline, timeout,
                                  what, hint)
            if self._folder_is_ours():
                return self._fd
            os.close(self._fd)  # closing drops the flock on the old folder
            self._fd = None
            if not folder.exists():
                raise SessionFormatError(f"{folder} was removed while it was being opened", "open the session again")
        raise SessionLockedError(f"{folder} keeps being removed and made again while it is being opened",
                                 "stop whatever is replacing the folder, then open the session again")

    def _wait(self, fd: int, deadline: float | None, timeout: float | None, what: str, hint: str) -> int:
        """`fd`, once flocked; closed, and SessionLockedError naming the holder, at the deadline."""
        pause = LOCK_POLL_S
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fd
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        waited = f" after waiting {timeout:g} s" if timeout else ""
                        raise self._locked(what, hint, waited) from None
                    time.sleep(pause)
                    pause = min(pause * 2, LOCK_POLL_MAX_S)
        except BaseException:
            os.close(fd)
            raise

    def _locked(self, what: str, hint: str, why: str = "") -> SessionLockedError:
        holder = holder_of(self.path)
        by = f" (by process {holder})" if holder else ""
        return SessionLockedError(f"{what}{by}{why}", hint)

    def _lock_file(self, what: str, hint: str) -> None:
        """Opens, flocks (never waiting: whoever holds it is an older writer inside the session) and
        writes the pid file of a folder lock."""
        fd = open_lock_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._locked(what, hint, f", holding {WRITER_LOCK} (an older ctxwin)") from None
        except BaseException:
            os.close(fd)
            raise
        self._file_fd = fd
        info = os.fstat(fd)
        self._file_id = (info.st_dev, info.st_ino)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def file_lost(self) -> bool:
        """Whether the pid file was deleted or replaced since it was written; if so it is made, locked
        and written again (the lock on the folder was never lost). Only for locks with `on`. Raises
        SessionLockedError when an older ctxwin writer locked the new file first, OSError when it
        cannot be made."""
        if self._file_id is None and self._file_fd is None:
            return False
        try:
            named = os.lstat(self.path)
            if (named.st_dev, named.st_ino) == self._file_id:
                return False
        except FileNotFoundError:
            pass
        if self._file_fd is not None:
            os.close(self._file_fd)
            self._file_fd = self._file_id = None
        if not self._folder_is_ours():  # then the path names another folder: never lock a file in it
            raise OSError(errno.ENOENT, "the session folder was deleted or replaced", str(self.on))
        self._lock_file(f"{self.path} was made again and locked by another process", "close the other writer")
        return True

    def _folder_is_ours(self) -> bool:
        """Whether the folder at `on` is still the one this lock holds."""
        if self._fd is None or self.on is None:
            return False
        try:
            named = os.stat(self.on)
        except FileNotFoundError:
            return False
        held = os.fstat(self._fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        # The pid file first: a writer waiting on the folder then finds it free at once.
        if self._file_fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._file_fd, 0)
            os.close(self._file_fd)  # closing drops its flock
            self._file_fd = self._file_id = None
        if self._fd is not None:
            if self.on is None:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def writer_lock(directory: Path) -> FileLock:
    """The lock every writer of the session in `directory` takes (and `delete_session`)."""
    return FileLock(directory / WRITER_LOCK, on=directory)
