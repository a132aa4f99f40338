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


# -- providers: model clients, streaming, images ------------------------------------------------------


class ModelCallCancelled(CtxwinError):
    """A model call (or its stream, or the wait before a retry) stopped because its cancel event was set."""


class ImageError(InputError):
    """An image no provider would accept: data that is not base64, a media type that is not png, jpeg,
    gif or webp (or does not match the bytes), or more bytes than the per-image limit."""


# --- agent (the loop and sub-agents)


class SubagentError(InputError):
    """A sub-agent request that cannot run as asked (a fork of a fork, another model for a fork, too
    deep, too many at once); the model gets it as a tool error."""
