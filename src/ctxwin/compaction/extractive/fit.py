"""Rendering the merged state within the budget: every item with its shorter forms and its rank,
the facts fitted first (the state of the work, what the user asked, the files, every command and
error), the notes in what they leave; every list cut for the budget ends with the ref that `recall`
resolves to the full list from the compaction entry; no item is shown twice."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from ctxwin.compaction.extractive import errors, state_of_work
from ctxwin.compaction.extractive.asks import GOAL_CHARS, PER_MESSAGE_CHARS, USER_MEDIUM_CHARS, USER_SHORT_CHARS
from ctxwin.compaction.extractive.commands import DIRECTORY_PREFIX, REPEAT_MARK, command_variants
from ctxwin.compaction.extractive.files import relative
from ctxwin.compaction.extractive.notes import CURRENT_TEXT_CHARS, DECISION_CHARS, SHORT_CHARS
from ctxwin.compaction.extractive.references import reference_lines
from ctxwin.compaction.extractive.sections import (
    COMMANDS,
    CURRENT,
    DECISIONS,
    ERRORS,
    FACTS,
    GOAL,
    IDENTIFIERS,
    MODIFIED,
    OPEN,
    ORDER,
    OTHER_WEIGHT,
    PASSED,
    READ,
    RECENT,
    ROOT,
    SLUGS,
    STATE,
    USER,
    WEIGHTS,
)
from ctxwin.compaction.identifiers import normalize, survives
from ctxwin.compaction.summary import (
    MAX_FIT_ATTEMPTS,
    PARAGRAPH,
    Fitted,
    Section,
    SectionItem,
    fit_sections,
    item_key,
    paragraphs_of,
    render_item,
    render_sections,
)
from ctxwin.pipeline.cut import clip
from ctxwin.tokens.base import TokenCounter

FOCUS_BOOST = 1_000_000.0  # rank bonus for items matching the focus instruction (kept first)
NOTES_SHARE = 0.25
"""The notes (decisions, tasks, current work, identifiers, references) use at most this share of the
budget, whatever the facts leave: a short history gets a short summary, not one padded with names."""
WHAT: Mapping[str, str] = {
    USER: "user messages", MODIFIED: "modified files", READ: "read files", COMMANDS: "commands",
    DECISIONS: "decisions", OPEN: "open tasks", IDENTIFIERS: "identifiers", RECENT: "lines of references",
    ERRORS: "failed commands and calls (with their error lines)",
}
"""The lists that say how many of their items the budget left out, and where all of them are."""
CUT_NOTE = "{count} more {what} not shown: recall(\"{ref}\") returns them all"
CUT_NOTE_NO_REF = "{count} more {what} not shown (the budget)"
MORE_ERRORS = "(+{count} more error lines: recall(\"REF\") returns them all)"
MORE_ERRORS_NO_REF = "(+{count} more error lines not shown)"

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_./-]{3,}")
_STOPWORDS = frozenset({
    "about", "after", "again", "also", "because", "been", "before", "being", "between", "both", "could",
    "does", "doing", "during", "each", "from", "further", "have", "having", "here", "into", "itself", "just",
    "more", "most", "other", "ought", "over", "same", "should", "some", "such", "than", "that", "their",
    "theirs", "them", "then", "there", "these", "they", "this", "those", "through", "under", "until", "very",
    "what", "when", "where", "which", "while", "whom", "with", "would", "your", "yours", "focus", "keep",
    "please", "summary", "summarize",
})


def list_ref(anchor: str, key: str) -> str:
    """The ref `recall` resolves to a section's full list: the last summarized entry and the list's name."""
    return f"entry:{anchor}#{SLUGS[key]}"


def cut_note(count: int, key: str, anchor: str | None) -> str:
    if anchor is None:
        return CUT_NOTE_NO_REF.format(count=count, what=WHAT[key])
    return CUT_NOTE.format(count=count, what=WHAT[key], ref=list_ref(anchor, key))


def _focus_terms(focus: str | None) -> list[str]:
    if not focus:
        return []
    return sorted({w.casefold() for w in _WORD.findall(focus) if w.casefold() not in _STOPWORDS})


def _variants(text: str, *limits: int) -> tuple[str, ...]:
    out: list[str] = []
    for limit in limits:
        variant = clip(text, limit)
        if not out or variant != out[-1]:
            out.append(variant)
    return tuple(out)


def _is_referenced(item: str, referenced: frozenset[str]) -> bool:
    """Whether a command item holds a command line of `referenced`."""
    return bool(referenced) and normalize(REPEAT_MARK.sub("", item).strip().strip("`")) in referenced


def commands_items(commands: Sequence[str], referenced: frozenset[str],
                   boost: Callable[[str], float]) -> tuple[SectionItem, ...]:
    """The commands section: the directories line first, then each command, the most recent first
    and a command the end of the history refers back to counting as twice as recent."""
    head = [c for c in commands if c.startswith(DIRECTORY_PREFIX)]
    rest = [c for c in commands if not c.startswith(DIRECTORY_PREFIX)]
    newest_root = tuple(SectionItem((h,), rank=-1.0) for h in head[-1:])
    n = len(rest)
    return newest_root + tuple(
        SectionItem(command_variants(t), rank=(n - 1 - i) * (0.5 if _is_referenced(t, referenced) else 1.0) + boost(t))
        for i, t in enumerate(rest))


def fit_input(state: Mapping[str, Sequence[str]], *, root: str | None, focus: str | None = None,
              per_message_chars: int = PER_MESSAGE_CHARS, identifiers: Sequence[str] | None = None,
              referenced: frozenset[str] = frozenset(), anchor: str | None = None) -> list[Section]:
    """The state as sections to fit: the state of the work first, each item with its shorter forms
    and its rank (recent first for chronological sections, in order for the others, focus matches
    before everything; commands the end refers to count as twice as recent), the errors as one
    section that shrinks as a whole. The identifiers listed are `identifiers`, or by default those no
    other section contains. An item already shown in an earlier section is not repeated."""
    terms = _focus_terms(focus)

    def boost(text: str) -> float:
        if not terms:
            return 0.0
        low = text.casefold()
        return -FOCUS_BOOST if any(t in low for t in terms) else 0.0

    def newest_first(items: Sequence[str], *limits: int) -> tuple[SectionItem, ...]:
        n = len(items)
        return tuple(SectionItem(_variants(t, *limits), rank=(n - 1 - i) + boost(t)) for i, t in enumerate(items))

    def in_order(items: Sequence[str], *limits: int) -> tuple[SectionItem, ...]:
        return tuple(SectionItem(_variants(t, *limits), rank=i + boost(t)) for i, t in enumerate(items))

    if identifiers is None:
        covered = normalize("\n".join(i for k, v in state.items() if k not in (IDENTIFIERS, ERRORS) for i in v)
                            + "\n" + errors.render(state.get(ERRORS, ())))
        identifiers = [i for i in state.get(IDENTIFIERS, ()) if not survives(i, covered)]
    files = {
        MODIFIED: [relative(p, root) for p in state.get(MODIFIED, ())],
        READ: [relative(p, root) for p in state.get(READ, ())],
    }
    more = MORE_ERRORS_NO_REF if anchor is None else MORE_ERRORS.replace("REF", list_ref(anchor, ERRORS))
    built: dict[str, tuple[SectionItem, ...]] = {
        STATE: (SectionItem(state_of_work.variants(state)),) if state else (),
        GOAL: in_order(state.get(GOAL, ()), GOAL_CHARS, USER_MEDIUM_CHARS, USER_SHORT_CHARS),
        USER: newest_first(state.get(USER, ()), per_message_chars, USER_MEDIUM_CHARS, USER_SHORT_CHARS),
        ROOT: (SectionItem((root,)),) if root and (files[MODIFIED] or files[READ]) else (),
        MODIFIED: newest_first(files[MODIFIED], 10_000),
        READ: newest_first(files[READ], 10_000),
        COMMANDS: commands_items(state.get(COMMANDS, ()), referenced, boost),
        ERRORS: tuple(SectionItem(forms, rank=rank) for forms, rank in errors.items(state.get(ERRORS, ()), more)),
        DECISIONS: newest_first(state.get(DECISIONS, ()), DECISION_CHARS, SHORT_CHARS),
        OPEN: in_order(state.get(OPEN, ()), USER_MEDIUM_CHARS, USER_SHORT_CHARS),
        CURRENT: in_order(state.get(CURRENT, ()), CURRENT_TEXT_CHARS, USER_MEDIUM_CHARS),
        IDENTIFIERS: in_order(identifiers, 10_000),
        RECENT: in_order(reference_lines(list(state.get(RECENT, ()))), 10_000),
    }
    forms = {STATE: PARAGRAPH}
    sections: list[Section] = []
    shown: set[str] = set()
    for key in ORDER:
        if key == ROOT:
            # Carried sections of an earlier model summary read best right after the goal and asks.
            sections.extend(
                Section(key=k, items=in_order(v, 400, SHORT_CHARS), weight=OTHER_WEIGHT)
                for k, v in state.items() if k not in ORDER and k != PASSED and v
            )
        items = built[key]
        if key not in forms:  # no line repeated: an item an earlier section shows is left out here
            items = tuple(i for i in items if item_key(i.variants[0]) not in shown)
            shown.update(item_key(i.variants[0]) for i in items)
        if items:
            sections.append(Section(key=key, items=items, weight=WEIGHTS[key], form=forms.get(key, "items"),
                                    level_wise=key == ERRORS))
    return sections


def fit_tiers(sections: Sequence[Section], budget_tokens: int, counter: TokenCounter,
              anchor: str | None = None) -> Fitted:
    """Fit the fact sections first (`FACTS`), then the others in what is left (at most NOTES_SHARE of
    the budget), each with its cut notes, and render them together in section order, within
    `budget_tokens`. When nothing of the others fits, the facts give way to their cut notes: a list
    the facts crowd out still ends with the ref that returns it."""
    facts = [s for s in sections if s.key in FACTS]
    rest = [s for s in sections if s.key not in FACTS]
    first = with_cut_notes(fit_sections(facts, budget_tokens, counter), facts, budget_tokens, counter, anchor)
    if not rest:
        return first
    room = min(budget_tokens - first.tokens - 2, int(budget_tokens * NOTES_SHARE))  # -2: the blank line between
    for _ in range(MAX_FIT_ATTEMPTS):
        second = with_cut_notes(fit_sections(rest, max(0, room), counter), rest, max(0, room), counter, anchor)
        joined = _join(first, second, sections, counter)
        if joined.tokens <= budget_tokens and second.sections and has_its_notes(second, anchor):
            return joined
        if room <= 0:
            break
        # The room the rest would have had if the joined text weighs as much more than its parts as now.
        inflation = max(1, joined.tokens) / max(1, first.tokens + second.tokens + 2)
        room = min(room - (joined.tokens - budget_tokens) // 4 - 1, int(budget_tokens / inflation) - first.tokens - 2)
    # Nothing of the rest fits beside the facts (a counter may weigh a joined text above its parts: the
    # estimate takes the whole text for code rather than prose): the facts give way until the rest's
    # lists at least end with the refs that return them.
    notes = notes_only(rest, anchor, counter)
    if not notes.sections or notes.tokens + 2 > budget_tokens * NOTES_SHARE:
        return first  # a budget this small keeps its facts rather than the ways back to its notes
    facts_budget = budget_tokens
    for _ in range(MAX_FIT_ATTEMPTS):
        joined = _join(first, notes, sections, counter)
        if joined.tokens <= budget_tokens:
            return joined
        # What the notes cost beside the facts, not what the joined text weighs over the budget: a
        # counter that weighs the whole text otherwise would take the facts down far more than needed.
        facts_budget = min(facts_budget - 2, budget_tokens - notes.tokens - 2,
                           facts_budget - (joined.tokens - budget_tokens) // 2)
        if facts_budget <= 0:
            break
        first = with_cut_notes(fit_sections(facts, facts_budget, counter), facts, facts_budget, counter, anchor)
    return first


def has_its_notes(fitted: Fitted, anchor: str | None) -> bool:
    """Whether every list `fitted` cut ends with its cut note."""
    return all(fitted.sections.get(key, [""])[-1] == cut_note(count, key, anchor)
               for key, count in fitted.omitted.items() if key in WHAT and count)


def notes_only(sections: Sequence[Section], anchor: str | None, counter: TokenCounter) -> Fitted:
    """The list sections of `sections` reduced to their cut notes (every item left out)."""
    omitted = {s.key: len(s.items) for s in sections if s.key in WHAT and s.items}
    listed = {key: [cut_note(count, key, anchor)] for key, count in omitted.items()}
    text = render_sections(listed, {s.key: s.title or s.key for s in sections})
    return Fitted(text=text, sections=listed, tokens=counter.count_text(text) if text else 0, omitted=omitted)


def _join(first: Fitted, second: Fitted, sections: Sequence[Section], counter: TokenCounter) -> Fitted:
    both = {**first.sections, **second.sections}
    ordered = {s.key: both[s.key] for s in sections if s.key in both}
    text = render_sections(ordered, {s.key: s.title or s.key for s in sections}, paragraphs_of(sections))
    return Fitted(text=text, sections=ordered, tokens=counter.count_text(text) if text else 0,
                  omitted={**first.omitted, **second.omitted}, shortened={**first.shortened, **second.shortened})


def with_cut_notes(fitted: Fitted, sections: Sequence[Section], budget_tokens: int, counter: TokenCounter,
                   anchor: str | None) -> Fitted:
    """`fitted` with a last item in each list that lost items, saying how many and the ref that returns
    the full list; fitted again with room for the notes (less, each time the notes still overflow), so
    the budget still holds. Only when not even the notes fit is `fitted` returned as it is."""
    def notes_of(result: Fitted) -> dict[str, str]:
        return {key: cut_note(result.omitted[key], key, anchor) for key in WHAT if result.omitted.get(key)}

    notes = notes_of(fitted)
    if not notes:
        return fitted
    room = sum(counter.count_text(render_item(n)) + 1 for n in notes.values())
    for _ in range(MAX_FIT_ATTEMPTS):
        refitted = fit_sections(sections, max(0, budget_tokens - room), counter)
        notes = notes_of(refitted)
        out = {k: list(v) for k, v in refitted.sections.items()}
        for key, note in notes.items():
            out.setdefault(key, []).append(note)
        ordered = {s.key: out[s.key] for s in sections if s.key in out}
        text = render_sections(ordered, {s.key: s.title or s.key for s in sections}, paragraphs_of(sections))
        tokens = counter.count_text(text) if text else 0
        if tokens <= budget_tokens:
            return Fitted(text=text, sections=ordered, tokens=tokens, omitted=refitted.omitted,
                          shortened=refitted.shortened)
        if budget_tokens - room <= 0:
            break
        room += tokens - budget_tokens
    return fitted
