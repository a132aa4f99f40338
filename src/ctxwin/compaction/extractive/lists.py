"""The full lists behind a summary's cut notes: what `recall("entry:<id>#<list>")` returns, read from
the compaction entry's merged state (the same state the next compaction merges into, so nothing the
page left out is lost). The engine's recall and the MCP server's both answer through here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ctxwin.compaction.extractive import errors
from ctxwin.compaction.extractive.references import reference_lines
from ctxwin.compaction.extractive.sections import BY_SLUG, ERRORS, RECENT, SLUGS, STATE_KEY
from ctxwin.compaction.summary import render_item

LIST_NAMES = tuple(SLUGS.values())


def is_list_name(name: str) -> bool:
    return name in BY_SLUG


def list_text(summarizer_state: Mapping[str, object], name: str) -> str | None:
    """The full list `name` (a slug such as `commands`, `errors`, `files-read`) of a compaction
    entry's summarizer state, one item per bullet, or None when the entry holds no such list."""
    key = BY_SLUG.get(name)
    state = summarizer_state.get(STATE_KEY) if isinstance(summarizer_state, Mapping) else None
    if key is None or not isinstance(state, Mapping):
        return None
    items = state.get(key)
    if not isinstance(items, Sequence) or isinstance(items, str):
        return None
    strings = [str(i) for i in items]
    if key == ERRORS:
        return errors.render(strings)
    if key == RECENT:
        strings = reference_lines(strings)
    return "\n".join(render_item(i) for i in strings)
