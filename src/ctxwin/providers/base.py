"""The model-client interface. ctxwin's core never imports a provider SDK: summarizers and the agent
loop talk to a `ModelClient`, and adapters (httpx clients for OpenAI- and Anthropic-compatible APIs)
implement it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxwin.messages import Message


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage a provider reported for one call."""

    input_tokens: int
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Completion:
    message: Message  # the assistant message the model returned
    usage: Usage | None = None
    stop_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        return self.message.text


class ModelClient(Protocol):
    """One model call. Raises the provider's error (an exception carrying the HTTP status and body)
    when the call fails; `ctxwin.compaction.overflow.is_overflow_error` recognises overflow errors."""

    model: str

    def complete(
        self,
        messages: list[Message],
        *,
        system: str | None = None,
        max_tokens: int = 4096,
        timeout: float | None = None,
    ) -> Completion: ...
