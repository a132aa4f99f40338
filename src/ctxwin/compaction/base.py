"""What a summarizer is: a function from the span leaving the view (and the previous summary) to a
structured `Summary` within a token budget."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ctxwin.messages import Message, Text
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
    """The counter a summarizer measures with: the caller's, else the default one for `model`, blind
    to the entry ids of recall refs (`RefBlindCounter`)."""
    return RefBlindCounter.of(counter if counter is not None else counter_for(model))


_ENTRY_ID = re.compile(r"(?<=entry:)[A-Za-z0-9_-]+")
COSTLIEST_ID = "0a" * 32
"""What an entry id is counted as (as many characters of it as the id has): digits and letters
alternating cost the most tokens of any 8-hex id under the counters ctxwin ships (a cut note counts 26
with cl100k/o200k and 33 with the Claude estimate, where 3,000 random ids gave 20-26 and 23-33), so a
blind count is not below the real one."""


class RefBlindCounter:
    """`inner`'s counts, with the id of every `entry:<id>` ref counted as the costliest id of its
    length. A log's entry ids are random: a summary fitted to a budget must not come out otherwise
    because one id tokenizes in 3 tokens and another in 8 (the same history, resumed from its log,
    would send other bytes). Prefix stability: same log, policy, clock and entry *structure*, same
    summary, whatever the ids."""

    def __init__(self, inner: TokenCounter) -> None:
        self.inner = inner
        self.name = inner.name
        self.exact = False

    @classmethod
    def of(cls, counter: TokenCounter) -> RefBlindCounter:
        return counter if isinstance(counter, RefBlindCounter) else cls(counter)

    def count_text(self, text: str) -> int:
        return self.inner.count_text(blind(text))

    def count_message(self, message: Message) -> int:
        if "entry:" not in message.text:
            return self.inner.count_message(message)
        blocks = tuple(Text(blind(b.text)) if isinstance(b, Text) else b for b in message.blocks)
        return self.inner.count_message(replace(message, blocks=blocks))


def blind(text: str) -> str:
    """`text` with each recall ref's entry id written as the costliest id of its length."""
    if "entry:" not in text:
        return text
    return _ENTRY_ID.sub(lambda m: COSTLIEST_ID[:len(m.group(0))].ljust(len(m.group(0)), "a"), text)
