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


# ---- tools


class ToolDefinitionError(CtxwinError):
    """A function registered as a tool cannot become one (no docstring line or type for a parameter,
    a type JSON Schema cannot state, a name providers refuse, a name already taken)."""
