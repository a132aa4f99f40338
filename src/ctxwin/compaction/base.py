"""What a summarizer is: a function from the span leaving the view (and the previous summary) to a
structured `Summary` within a token budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxwin.messages import Message
from ctxwin.tokens import counter_for
from ctxwin.tokens.base import TokenCounter


@dataclass(frozen=True)
class Summary:
    """A summary of a span of history.

    `text` is what enters the view (inside the summary message); `sections` the same content by
    heading, so that the next compaction can merge section by section. `read_files` and
    `modified_files` carry forward across compactions (Pi's file lists); `identifiers` are the exact
    strings the identifier guard checked; `covered_ids` the ids of every message the summary read.
    """

    text: str
    sections: dict[str, list[str]] = field(default_factory=dict)
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()
    identifiers: tuple[str, ...] = ()
    covered_ids: tuple[str, ...] = ()
    tokens: int = 0
    summarizer: str = ""
    details: dict[str, Any] = field(default_factory=dict)


class Summarizer(Protocol):
    @property
    def name(self) -> str:
        """What the summary's `summarizer` field says wrote it."""
        ...

    def summarize(
        self,
        span: Sequence[Message],
        *,
        previous: Summary | None = None,
        focus: str | None = None,
        budget_tokens: int,
        counter: TokenCounter,
    ) -> Summary:
        """Summarize `span` (every message of it is read), merged with `previous` when given, in at
        most `budget_tokens` by `counter`. `focus` is the user's custom instruction ("/compact the
        API design"). Raises on failure; never returns a placeholder that would delete history."""
        ...


def summary_counter(counter: TokenCounter | None, model: str | None = None) -> TokenCounter:
    """The counter a summarizer measures with: the caller's, else the default one for `model`."""
    if counter is not None:
        return counter
    return counter_for(model)
