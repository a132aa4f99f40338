"""What one message says that a summary reads: its names, its identifiers, the error lines of its
tool results. Pure functions of the message, so a caller that sees messages arrive one by one (the
engine) can compute them once each and hand them to `ExtractiveSummarizer.summarize(facts=...)`: the
summary is the same bytes with or without them, only faster with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctxwin.compaction.extractive.errors import Diagnostic, diagnostics
from ctxwin.compaction.extractive.references import message_names
from ctxwin.compaction.identifiers import READ_TOOLS, message_identifiers, tool_kind
from ctxwin.messages import Message


@dataclass(frozen=True, slots=True)
class Facts:
    """`names`: `references.message_names`; `identifiers`: `identifiers.message_identifiers`;
    `errors`: `errors.diagnostics` of each tool result's text, by call id (file reads left out: they are
    not scanned; a result missing here is scanned when needed)."""

    names: tuple[tuple[str, float], ...]
    identifiers: tuple[tuple[tuple[str, int], ...], tuple[str, ...]]
    errors: Mapping[str, tuple[Diagnostic, ...]]


def message_facts(message: Message) -> Facts:
    """The facts of one message as logged (not a masked or spilled rendering of it)."""
    return Facts(tuple(message_names(message)), message_identifiers(message),
                 {r.call_id: tuple(diagnostics(r.text)) for r in message.tool_results
                  if tool_kind(r.name or "") not in READ_TOOLS})
