"""The summary's opening paragraph, "State of the work": what the user asked, what is done, what is
failing, what was about to happen next, built deterministically from the merged state (the goal, the
last ask, the files changed and commits made, the open errors) and the last assistant message.
A person resuming the task reads this first; the sections after it are the record."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ctxwin.compaction.extractive import errors
from ctxwin.compaction.extractive.files import short_path
from ctxwin.compaction.extractive.notes import LAST_MESSAGE
from ctxwin.compaction.extractive.sections import COMMANDS, CURRENT, ERRORS, GOAL, MODIFIED, OPEN, USER
from ctxwin.pipeline.cut import clip

ASK_CHARS = 220  # the goal and the last ask are quoted this long
NEXT_CHARS = 300  # what was about to happen next
FILES_NAMED = 4
COMMITS_NAMED = 2
ERRORS_NAMED = 2
SHORT_FACTOR = 0.5  # the short form quotes half as much

_COMMIT = re.compile(r"git commit\b.*?-m\s+(?:\"([^\"]+)\"|'([^']+)')")
_NEXT = re.compile(r"(?:^|(?<=[.!?:]\s))((?:next|now|then|i'll|i will|let me|let's)\b.*?(?:[.!?](?=\s|$)|$))",
                   re.I | re.M)


def _quote(text: str, limit: int) -> str:
    return "\u201c" + clip(" ".join(text.split()), limit) + "\u201d"


def commits(commands: Sequence[str]) -> list[str]:
    """The messages of the commits the commands made, oldest first."""
    out = []
    for item in commands:
        found = _COMMIT.search(item)
        if found:
            out.append(found.group(1) or found.group(2))
    return out


def next_step(last_text: str, open_tasks: Sequence[str]) -> str | None:
    """What the agent said it would do next: a "next steps" item, else the last sentence of its last
    message that announces an action ("Now I'll…", "Let me…", "Next…"), else its last sentence."""
    planned = [t.removeprefix("Next: ") for t in open_tasks if t.startswith("Next: ")]
    if planned:
        return planned[0]
    found = _NEXT.findall(last_text)
    if found:
        return found[-1].strip()
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", last_text) if s.strip()]
    return sentences[-1] if sentences else None


def paragraph(state: Mapping[str, Sequence[str]], factor: float = 1.0) -> str:
    """The opening paragraph of the merged `state`; `factor` < 1 quotes less (the short form)."""
    last_text = next((c.removeprefix(LAST_MESSAGE) for c in state.get(CURRENT, ()) if c.startswith(LAST_MESSAGE)),
                     "")
    parts: list[str] = []
    goal = list(state.get(GOAL, ()))
    asks = list(state.get(USER, ()))
    if goal:
        parts.append(f"The user asked: {_quote(goal[0], int(ASK_CHARS * factor))}.")
    if asks and (not goal or asks[-1] != goal[0]):
        parts.append(f"Latest request: {_quote(asks[-1], int(ASK_CHARS * factor))}.")
    modified = list(state.get(MODIFIED, ()))
    made = commits(state.get(COMMANDS, ()))
    done: list[str] = []
    if modified:
        names = ", ".join(short_path(p) for p in modified[-FILES_NAMED:])
        more = f" and {len(modified) - FILES_NAMED} more" if len(modified) > FILES_NAMED else ""
        done.append(f"{len(modified)} file{'s' if len(modified) > 1 else ''} modified (latest: {names}{more})")
    if made:
        named = "; ".join(_quote(c, 80) for c in made[-COMMITS_NAMED:])
        done.append(f"{len(made)} commit{'s' if len(made) > 1 else ''} made (latest: {named})")
    if any(item.startswith("`submit`") for item in state.get(COMMANDS, ())):
        done.append("the work submitted (`submit`)")
    parts.append(f"Done: {', '.join(done)}." if done else "Done: nothing recorded yet.")
    failing = errors.open_errors(state.get(ERRORS, ()))
    if failing:
        shown = "; ".join(f"{g.label}: {clip(g.messages[0]['m'], 120).rstrip('.')}" + _aside(g)
                          for g in failing[-ERRORS_NAMED:])
        more = f"; and {len(failing) - ERRORS_NAMED} more commands" if len(failing) > ERRORS_NAMED else ""
        # Not "failing": what a command would print now is unknown; what is known is that its last run
        # failed, and what happened since (a longer form of it passed, its files were edited).
        parts.append(f"Failed when last run: {shown}{more}.")
    else:
        parts.append("No error is open.")
    step = next_step(last_text, state.get(OPEN, ()))
    if step:
        parts.append(f"Next: {clip(step, int(NEXT_CHARS * factor))}")
    return " ".join(parts)


def _aside(group: errors.Group) -> str:
    """`(+N more; a later `…` passed; edited since: …)` after a failed command's first message."""
    more = [f"+{len(group.messages) - 1} more"] if len(group.messages) > 1 else []
    since = [p for p in group.since().split("; ") if p]
    return f" ({'; '.join(more + since)})" if more or since else ""


def variants(state: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([paragraph(state), paragraph(state, SHORT_FACTOR)]))
