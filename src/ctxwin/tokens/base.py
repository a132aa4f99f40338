"""The one interface every token counter offers. Stages, the engine and the CLI count through it."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ctxwin.messages import Message


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens. `name` says which counter (for reports: "tiktoken:cl100k_base",
    "estimate:claude", ...); `exact` is true only when counts come from the real tokenizer."""

    name: str
    exact: bool

    def count_text(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message as a provider would bill it: content plus per-message framing."""
        ...
