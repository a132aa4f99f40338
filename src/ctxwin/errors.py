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


# files: the guarded reader (ctxwin.files)
class NotARegularFileError(InputError):
    """A path that is a FIFO, a device, a socket or a directory where a regular file was needed."""


class FileTooLargeError(InputError):
    """A file, or what a compressed file expands to, over the configured cap."""


class JSONTooDeepError(InputError):
    """JSON nested deeper than the configured limit."""


class MalformedJSONError(InputError):
    """Text that does not parse as JSON; `msg`, `pos`, `lineno` and `colno` say where, as in
    `json.JSONDecodeError`."""

    def __init__(self, msg: str, pos: int, lineno: int, colno: int) -> None:
        super().__init__(f"not valid JSON: {msg} (line {lineno}, column {colno})", "check the file is JSON")
        self.msg = msg
        self.pos = pos
        self.lineno = lineno
        self.colno = colno
