"""The errors ctxwin raises on purpose. Each says what went wrong and what to do about it; the CLI
prints them without a traceback and exits non-zero."""

from __future__ import annotations


class CtxwinError(Exception):
    """Base class. `hint` is the one sentence telling the user what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class InputError(CtxwinError):
    """A file or argument ctxwin cannot use as given (malformed, binary, empty, wrong format)."""

    exit_code = 2


# memory (memory files, the hybrid index, memory tools)


class MemoryPathError(InputError):
    """A memory-tool path outside the memory folder (`..`, absolute, a symlink out) or of the wrong kind."""


class MemoryEditError(InputError):
    """A memory edit that cannot apply as asked: a `str_replace` matching zero or several times, an
    insert line out of range, a create over an existing file."""


class MemoryIndexError(CtxwinError):
    """The memory index cannot be opened, built or searched (after a rebuild was tried)."""


class EmbedderError(CtxwinError):
    """An embedder that cannot load or answer (missing package, endpoint down, wrong dimensions)."""
