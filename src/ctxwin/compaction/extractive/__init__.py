"""The extractive summarizer: the default, and the fallback when a model summary fails.

No model: it pulls out what an agent needs to continue and renders it as a document: a "State of the
work" paragraph first (what was asked, what is done, what is failing, what comes next), then the
record: the goal, every user message, files read and modified, commands verbatim, every error line
grouped by command and file with the evidence of its fix, identifiers, decisions, open tasks, current
work. It merges with the previous summary section by section and renders within a token budget,
compressing everything before dropping anything; every list cut for the budget ends with a ref
`recall` resolves to the full list (`lists`). Same input, same bytes.

The full merged state (before trimming) is kept in `Summary.details["extractive"]`, so that the next
compaction merges with everything known, not only with what fit on the page; this also makes merging
idempotent (a summary merged with itself, or with the same span again, is unchanged).

One module per section (`asks`, `files`, `commands`, `errors`, `notes`, `references`,
`state_of_work`), plus `merge` and `fit`; `sections` names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctxwin.compaction.base import Summary, summary_counter
from ctxwin.compaction.extractive.asks import PER_MESSAGE_CHARS, dedup_last, user_messages
from ctxwin.compaction.extractive.commands import (
    COMMAND_STATE_CHARS,
    command_entries,
    command_key,
    command_line,
    group_paths,
    shorten_arguments,
)
from ctxwin.compaction.extractive.errors import diagnostics, error_records
from ctxwin.compaction.extractive.facts import Facts, message_facts
from ctxwin.compaction.extractive.files import project_root
from ctxwin.compaction.extractive.fit import cut_note, fit_input, fit_tiers, list_ref
from ctxwin.compaction.extractive.lists import list_text
from ctxwin.compaction.extractive.merge import merge_states, previous_state
from ctxwin.compaction.extractive.notes import current_work, decisions, open_tasks
from ctxwin.compaction.extractive.references import recent_references, referenced_later
from ctxwin.compaction.extractive.sections import (
    COMMANDS,
    CURRENT,
    DECISIONS,
    ERRORS,
    GOAL,
    IDENTIFIERS,
    MODIFIED,
    OPEN,
    PASSED,
    READ,
    RECENT,
    ROOT,
    STATE,
    STATE_KEY,
    USER,
)
from ctxwin.compaction.identifiers import extract_file_ops, extract_identifiers, normalize, survives
from ctxwin.messages import Message
from ctxwin.tokens.base import TokenCounter

DEFAULT_BUDGET_TOKENS = 4_000  # when the caller gives none (Claude Code's summaries run 3-4k tokens)

__all__ = [
    "COMMANDS", "CURRENT", "DECISIONS", "DEFAULT_BUDGET_TOKENS", "ERRORS", "GOAL", "IDENTIFIERS", "MODIFIED",
    "OPEN", "READ", "RECENT", "ROOT", "STATE", "STATE_KEY", "USER", "ExtractiveSummarizer", "Facts", "command_entries",
    "command_key", "command_line", "cut_note", "diagnostics", "error_records", "group_paths", "list_ref",
    "list_text", "message_facts", "shorten_arguments", "span_state",
]


@dataclass(frozen=True)
class ExtractiveSummarizer:
    """Summarizes without a model. `per_message_chars` caps each user message kept verbatim."""

    per_message_chars: int = PER_MESSAGE_CHARS
    command_chars: int = COMMAND_STATE_CHARS
    name: str = "extractive"

    def summarize(self, span: Sequence[Message], *, previous: Summary | None = None, focus: str | None = None,
                  budget_tokens: int = DEFAULT_BUDGET_TOKENS, counter: TokenCounter | None = None,
                  facts: Mapping[str, Facts] | None = None) -> Summary:
        """`facts`: `message_facts` of the span's messages as logged, by message id, when the caller
        has them (any missing are computed here); the summary is the same bytes with or without."""
        counter = summary_counter(counter)
        known = facts or {}
        per = [known.get(m.id) or message_facts(m) for m in span]
        names = [list(f.names) for f in per]  # scanned once, for references and for what refers back
        new = span_state(span, per_message_chars=self.per_message_chars, command_chars=self.command_chars,
                         names=names, facts=per)
        state = merge_states(previous_state(previous) if previous is not None else {}, new)
        root = project_root([*state.get(MODIFIED, ()), *state.get(READ, ())])
        referenced = referenced_later(span, names)
        # The ref of the full lists names the last summarized entry (the engine gives each message its
        # entry id); `recall` finds the compaction that covers it.
        anchor = next((m.id for m in reversed(span) if m.id), None) or (
            previous.details.get("anchor") if previous is not None else None)
        sections = fit_input(state, root=root, focus=focus, per_message_chars=self.per_message_chars,
                             referenced=referenced, anchor=anchor)
        fitted = fit_tiers(sections, budget_tokens, counter, anchor)
        # Identifiers are listed only where no other section shows them; but a section may have lost
        # them to trimming. Fit again listing every identifier the first rendering lost.
        shown = normalize(fitted.text)
        lost = [i for i in state.get(IDENTIFIERS, ()) if not survives(i, shown)]
        if set(lost) - set(fitted.sections.get(IDENTIFIERS, ())):
            sections = fit_input(state, root=root, focus=focus, per_message_chars=self.per_message_chars,
                                 identifiers=lost, referenced=referenced, anchor=anchor)
            fitted = fit_tiers(sections, budget_tokens, counter, anchor)
        details: dict[str, Any] = {
            STATE_KEY: state,
            "budget_tokens": budget_tokens,
            "counter": counter.name,
            "span_messages": len(span),
            "omitted": fitted.omitted,
            "shortened": fitted.shortened,
        }
        if anchor:
            details["anchor"] = anchor
        if focus:
            details["focus"] = focus
        if root:
            details["root"] = root
        return Summary(
            text=fitted.text,
            sections=fitted.sections,
            read_files=tuple(state.get(READ, ())),
            modified_files=tuple(state.get(MODIFIED, ())),
            identifiers=tuple(state.get(IDENTIFIERS, ())),
            covered_ids=tuple(m.id for m in span if m.id),
            tokens=fitted.tokens,
            summarizer=self.name,
            details=details,
        )


def span_state(span: Sequence[Message], *, per_message_chars: int = PER_MESSAGE_CHARS,
               command_chars: int = COMMAND_STATE_CHARS,
               names: Sequence[list[tuple[str, float]]] | None = None,
               facts: Sequence[Facts] | None = None) -> dict[str, list[str]]:
    """Everything the extractive summary can say about `span`, untrimmed, by section (`facts`: each
    message's, in order, when already computed)."""
    users = user_messages(span, per_message_chars)
    read, modified = extract_file_ops(span)
    diagnosed = {call: lines for f in facts for call, lines in f.errors.items()} if facts is not None else None
    records, passed = error_records(span, diagnosed)
    state: dict[str, list[str]] = {
        GOAL: users[:1],
        USER: dedup_last(users),
        MODIFIED: modified,
        READ: read,
        COMMANDS: command_entries(span, command_chars),
        ERRORS: records,
        PASSED: passed,
        DECISIONS: dedup_last(decisions(span)),
        OPEN: open_tasks(span),
        CURRENT: current_work(span),
        IDENTIFIERS: extract_identifiers(span, [f.identifiers for f in facts] if facts is not None else None),
        RECENT: recent_references(span, names),
    }
    return {k: v for k, v in state.items() if v}
