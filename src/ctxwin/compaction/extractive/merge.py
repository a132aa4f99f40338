"""Merging with the previous summary: section by section, so that the next compaction builds on
everything known (the full merged state, not only what fit on the page), idempotently (a summary
merged with itself, or with the same span again, is unchanged)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ctxwin.compaction.base import Summary
from ctxwin.compaction.extractive import errors
from ctxwin.compaction.extractive.commands import REPEAT_MARK
from ctxwin.compaction.extractive.sections import (
    ALIASES,
    COMMANDS,
    ERRORS,
    FILE_HEADINGS,
    GOAL,
    IDENTIFIERS,
    MODIFIED,
    ORDER,
    OTHER_CAP,
    PASSED,
    READ,
    ROOT,
    RULES,
    STATE,
    STATE_CAPS,
    STATE_KEY,
    USER,
)
from ctxwin.compaction.summary import item_key, merge_items

EARLIER = "Earlier summary"
EARLIER_ERRORS = "Earlier errors"
"""Where an older summary's error notes go when they are not error records (another summarizer's)."""


def previous_state(previous: Summary) -> dict[str, list[str]]:
    """The previous summary as extractive state: its own state when it was extractive, otherwise its
    sections (known headings mapped onto ours) and its file lists."""
    stored = previous.details.get(STATE_KEY) if isinstance(previous.details, Mapping) else None
    if isinstance(stored, Mapping):
        state = {str(k): [str(i) for i in v] for k, v in stored.items()}
        notes = [i for i in state.get(ERRORS, ()) if not errors.load([i])]
        if notes:  # an older extractive summary's error lines: kept, as notes
            state[ERRORS] = [i for i in state[ERRORS] if errors.load([i])]
            state[EARLIER_ERRORS] = merge_items(state.get(EARLIER_ERRORS, []), notes)
        return {k: v for k, v in state.items() if v}
    state = {}
    for heading, items in previous.sections.items():
        norm = heading.strip().strip(":").casefold()
        if norm in FILE_HEADINGS:
            continue
        key = ALIASES.get(norm, heading if heading else EARLIER)
        state[key] = merge_items(state.get(key, []), list(items))
    if not previous.sections and previous.text.strip():
        state[EARLIER] = [p.strip() for p in previous.text.split("\n\n") if p.strip()]
    if previous.modified_files:
        state[MODIFIED] = list(previous.modified_files)
    if previous.read_files:
        state[READ] = list(previous.read_files)
    if previous.identifiers:
        state[IDENTIFIERS] = merge_items(list(previous.identifiers), state.get(IDENTIFIERS, []), to_front=True)
    return state


def dedup_last_by(items: Sequence[str], key: Callable[[str], str]) -> list[str]:
    """Items whose keys repeat kept once, at their last position."""
    last = {key(item): index for index, item in enumerate(items)}
    return [item for index, item in enumerate(items) if last[key(item)] == index]


def merge_states(previous: Mapping[str, Sequence[str]], new: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Section-by-section merge: the goal is kept, open tasks and current work are replaced when the
    new span has any, identifiers go new-first, error records merge by key (`errors.merge_records`),
    everything else is a union with the newest last; files modified anywhere leave the read-only list;
    each section is capped; user messages that are the goal are not repeated. The new span's passed
    records are used here and not kept: they speak only of the span they came from."""
    out: dict[str, list[str]] = {}
    for key in [*ORDER, *(k for k in previous if k not in ORDER), *(k for k in new if k not in ORDER)]:
        if key in out or key in (ROOT, STATE, PASSED):
            continue
        old, fresh = list(previous.get(key, ())), list(new.get(key, ()))
        rule = RULES.get(key, "union")
        if key == ERRORS:
            merged = errors.merge_records(old, fresh, new.get(PASSED, ()))
        elif rule == "keep":
            merged = old or fresh
        elif rule == "replace":
            merged = fresh or old
        else:
            merged = merge_items(old, fresh, to_front=rule == "front")
        if key == COMMANDS:  # the same command with another repeat count is the same command
            merged = dedup_last_by(merged, lambda c: item_key(REPEAT_MARK.sub("", c)))
        cap = STATE_CAPS.get(key, OTHER_CAP)
        merged = merged[:cap] if rule in ("front", "keep") else merged[-cap:]
        if merged:
            out[key] = merged
    modified_keys = {item_key(p) for p in out.get(MODIFIED, ())}
    if READ in out:
        out[READ] = [p for p in out[READ] if item_key(p) not in modified_keys]
        if not out[READ]:
            del out[READ]
    goal_keys = {item_key(g) for g in out.get(GOAL, ())}
    if USER in out:
        out[USER] = [u for u in out[USER] if item_key(u) not in goal_keys]
        if not out[USER]:
            del out[USER]
    return out
