"""The extractive summary's vocabulary: its sections, in order, with their budget weights, merge rules,
state caps and the names their full lists are recalled by."""

from __future__ import annotations

from collections.abc import Mapping

STATE_KEY = "extractive"
"""Where the merged state lives in `Summary.details` (and in the compaction entry's summarizer_state)."""

STATE = "State of the work"
GOAL = "Goal"
USER = "User messages"
ROOT = "Project root"
MODIFIED = "Files modified"
READ = "Files read"
COMMANDS = "Commands run"
ERRORS = "Errors and fixes"
DECISIONS = "Decisions"
OPEN = "Open tasks"
CURRENT = "Current work"
IDENTIFIERS = "Identifiers"
RECENT = "Recent references"
PASSED = "_passed"
"""A span's state only, never shown nor kept after merging: the commands and calls that succeeded in
the span, so that the merge can say an earlier error was fixed (and by what)."""

ORDER = (STATE, GOAL, USER, ROOT, MODIFIED, READ, COMMANDS, ERRORS, DECISIONS, OPEN, CURRENT, IDENTIFIERS, RECENT)

# Share of the budget when sections compete for it. Commands and errors weigh most: they are worth
# something only verbatim (a command to re-run, an error to search for), while a user message keeps
# its point in its first few hundred characters.
WEIGHTS: Mapping[str, float] = {
    STATE: 2.0, GOAL: 2.0, USER: 4.0, ROOT: 1.0, MODIFIED: 3.0, READ: 2.5, COMMANDS: 8.0, ERRORS: 6.0,
    DECISIONS: 1.5, OPEN: 2.0, CURRENT: 2.0, IDENTIFIERS: 2.0, RECENT: 1.5,
}
OTHER_WEIGHT = 2.0
"""Sections carried from another summarizer's summary."""

FACTS = frozenset({STATE, GOAL, USER, ROOT, MODIFIED, READ, COMMANDS, ERRORS})
"""The record of what happened (the state of the work, what the user asked, which files, every command
and error): fitted first, with the whole budget; the rest (decisions, tasks, current work, identifiers,
references) shares what the facts leave."""

RULES: Mapping[str, str] = {STATE: "replace", GOAL: "keep", OPEN: "replace", CURRENT: "replace",
                            IDENTIFIERS: "front", RECENT: "front"}
"""How each section merges with the previous summary's (`merge.merge_states`); "union" otherwise."""

STATE_CAPS: Mapping[str, int] = {
    STATE: 1, GOAL: 3, USER: 200, MODIFIED: 1_000, READ: 1_000, COMMANDS: 2_000, ERRORS: 3_000, DECISIONS: 60,
    OPEN: 40, CURRENT: 10, IDENTIFIERS: 300, RECENT: 400,
}
"""At most this many items per section are kept in the merged state (the newest; identifiers: the first)."""
OTHER_CAP = 50

SLUGS: Mapping[str, str] = {
    GOAL: "goal", USER: "user-messages", MODIFIED: "files-modified", READ: "files-read", COMMANDS: "commands",
    ERRORS: "errors", DECISIONS: "decisions", OPEN: "open-tasks", IDENTIFIERS: "identifiers", RECENT: "references",
}
"""The name of each section's full list in a recall ref (`entry:<id>#<slug>`)."""
BY_SLUG: Mapping[str, str] = {slug: key for key, slug in SLUGS.items()}

# Headings other summarizers use, mapped onto ours, so merging with an LLM summary lands in place.
ALIASES: Mapping[str, str] = {
    "goal": GOAL, "goals": GOAL, "high level goals": GOAL, "primary request and intent": GOAL,
    "original request": GOAL, "task overview": GOAL,
    "user messages": USER, "all user messages": USER,
    "commands run": COMMANDS, "commands": COMMANDS,
    "decisions": DECISIONS, "key decisions": DECISIONS,
    "open tasks": OPEN, "next steps": OPEN, "pending tasks": OPEN, "open todos": OPEN,
    "optional next step": OPEN, "pending user asks": OPEN,
    "current work": CURRENT, "current state": CURRENT,
    "identifiers": IDENTIFIERS, "exact identifiers": IDENTIFIERS,
}
"""(Another summarizer's "Errors and fixes" is prose, not our error records: it is carried as its own
section.)"""
FILE_HEADINGS = frozenset({"files modified", "files read", "project root", "modified files", "read files"})
