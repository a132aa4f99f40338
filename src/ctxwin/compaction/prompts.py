"""Summarization prompts, in our own words, following the structure of each anchor's prompt.

- `pi`: Pi's checkpoint (Goal / Constraints & Preferences / Progress / Key Decisions / Next Steps /
  Critical Context) and its update prompt that merges new messages into `<previous-summary>`.
- `claude-code`: the nine sections, preceded by an `<analysis>` scratchpad that is stripped before the
  summary enters the context; text only, no tool calls.
- `openclaw`: Pi's prompt plus the safeguard's strict identifier policy and its five required sections
  (checked afterwards by a quality guard), and merge instructions for summaries made in stages.
- `letta`: the sliding-window prompt (goals, what happened, details, errors, lookup hints) under a
  word limit.

The conversation is always sent as a serialized document (`summary.serialize_span`) inside
`<conversation>` tags, so the model summarizes it instead of continuing it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ctxwin.errors import ArgumentError

STYLES = ("pi", "claude-code", "openclaw", "letta")
LETTA_WORD_LIMIT = 300  # Letta's sliding-window summary limit (its "all" mode allows 500)
WORDS_PER_TOKEN = 0.75  # to state a token budget as words

SYSTEM_PROMPT = (
    "You write checkpoint summaries of conversations between a user and an AI coding assistant. The "
    "conversation is given to you as a document inside <conversation> tags. Do not continue it, do not answer "
    "questions asked in it, and do not call tools: reply with the summary only, in the format you are asked for."
)

_PI_SECTIONS = """## Goal
[What the user is trying to achieve. Several goals: one line each.]

## Constraints & Preferences
- [Requirements, rules and preferences the user stated, or "(none)"]

## Progress
### Done
- [x] [Finished work]

### In Progress
- [ ] [Work under way]

### Blocked
- [What is holding work up, if anything]

## Key Decisions
- **[Decision]**: [why it was made]

## Next Steps
1. [What should happen next, in order]

## Critical Context
- [Data, references and findings needed to continue, or "(none)"]"""

PI_INITIAL = f"""The conversation above is about to leave the assistant's context. Write a structured checkpoint \
that another model will use to carry on the work.

Use exactly this layout:

{_PI_SECTIONS}

Keep each section short. Copy file paths, function names, commands and error messages exactly."""

PI_UPDATE = f"""The conversation above holds NEW messages that came after the summary in <previous-summary>. \
Update that summary with them:
- keep everything from the previous summary that still matters;
- add the new progress, decisions and context;
- move items from "In Progress" to "Done" once they were finished;
- rewrite "Next Steps" to match what has been achieved;
- copy file paths, function names and error messages exactly;
- drop something only when it clearly no longer matters.

Use exactly this layout (in each section: keep what was there, add what is new):

{_PI_SECTIONS}

Keep each section short. Copy file paths, function names, commands and error messages exactly."""

CLAUDE_CODE_PREAMBLE = (
    "IMPORTANT: answer with plain text only. Do not call any tool (reading files, running commands or anything "
    "else): a tool call will be refused and you have only this one turn. Your whole answer must be an "
    "<analysis> block followed by a <summary> block."
)

CLAUDE_CODE_SECTIONS = (
    "Primary Request and Intent",
    "Key Technical Concepts",
    "Files and Code Sections",
    "Errors and fixes",
    "Problem Solving",
    "All user messages",
    "Pending Tasks",
    "Current Work",
    "Optional Next Step",
)

CLAUDE_CODE_BODY = """Write a detailed summary of the conversation so far. Pay close attention to what the user \
explicitly asked for and to what the assistant did. Keep the technical details, code patterns and architectural \
decisions that are needed to continue the work without losing context.

First, inside <analysis> tags, go through the conversation from start to end. For each part, note:
- what the user asked for and what they meant by it;
- how the assistant went about it;
- the key decisions, technical concepts and code patterns;
- specific file names, full code snippets, function signatures and edits;
- the errors met and how they were fixed;
- the user's feedback, above all any request to do something differently.
Then check your notes for accuracy and for anything missing.

Then write the summary inside <summary> tags, with these sections:

1. Primary Request and Intent: every explicit request and intent of the user, in detail.
2. Key Technical Concepts: the technologies, frameworks and concepts discussed.
3. Files and Code Sections: each file read, changed or created; why it matters; what changed, with code \
snippets where useful. The most recent ones matter most.
4. Errors and fixes: each error met and how it was fixed; quote what the user said about it.
5. Problem Solving: problems solved and any troubleshooting still under way.
6. All user messages: every message from the user that is not a tool result. They show how the user's \
intent changed, so leave none out.
7. Pending Tasks: tasks the user explicitly asked for that are not done.
8. Current Work: precisely what was being worked on just before this summary, with file names and code \
snippets.
9. Optional Next Step: the next step, only if it follows directly from the user's most recent explicit request. \
Quote the latest conversation verbatim to show exactly where the work stopped, so nothing drifts.

The answer looks like this:

<example>
<analysis>
[Your notes, going through the conversation in order]
</analysis>

<summary>
1. Primary Request and Intent:
   [Detailed description]

2. Key Technical Concepts:
   - [Concept]

3. Files and Code Sections:
   - [File name]
      - [Why it matters]
      - [What changed]
      - [Code snippet]

4. Errors and fixes:
   - [Error]: [How it was fixed; what the user said]

5. Problem Solving:
   [Description]

6. All user messages:
   - [Message]

7. Pending Tasks:
   - [Task]

8. Current Work:
   [Precise description]

9. Optional Next Step:
   [Next step, with a verbatim quote]
</summary>
</example>"""

CLAUDE_CODE_TRAILER = "Reminder: plain text only, no tool calls; an <analysis> block, then a <summary> block."

OPENCLAW_IDENTIFIER_POLICY = (
    "Keep every opaque identifier exactly as written, character for character: UUIDs, hashes, IDs, tokens, "
    "host names, IP addresses, ports, URLs and file names."
)

OPENCLAW_SECTIONS = ("Decisions", "Open TODOs", "Constraints/Rules", "Pending user asks", "Exact identifiers")

OPENCLAW_STRUCTURE = (
    "Produce a compact, factual summary that also has these exact section headings:\n"
    + "\n".join(f"## {s}" for s in OPENCLAW_SECTIONS)
    + "\nCopy literal values exactly (IDs, URLs, file paths, ports, hashes, dates, times). "
    "Never leave out a request of the user that is still unresolved."
)

OPENCLAW_MERGE = """The conversation above holds partial summaries of consecutive parts of one conversation, \
oldest first. Merge them into one summary. Keep:
- the active tasks and their status;
- progress through batches of work (for example "5/17 done");
- the user's last request and what was being done about it;
- the decisions made and why;
- TODOs, open questions and constraints;
- commitments and promised follow-ups.
Recent context takes priority over old context: the agent must know what it was doing."""

LETTA_SECTIONS = ("High level goals", "What happened", "Important details", "Errors and fixes", "Lookup hints")

LETTA_BODY = """The oldest messages of this conversation are being removed from the context window because it \
is full. Your summary will be placed before the messages that remain, so it must keep what they need to make \
sense. If the conversation contains an earlier summary, build on it.

Write these sections:

## High level goals
What the user wants overall; carry forward the goals of any earlier summary.

## What happened
The user's asks, what was done and how far it got; condense any earlier summary.

## Important details
Files and code that were touched; plan files, issue or PR links, ticket ids. Keep identifiers verbatim and keep \
every id that is referenced unless it is clearly finished with.

## Errors and fixes
Errors met and how they were fixed; quote the user's feedback verbatim where it helps.

## Lookup hints
Topics and key terms that would find the full details later in the message history.

Write in the first person, as a factual record. Stay under {words} words. Output only the summary."""

EXPECTED_SECTIONS: dict[str, tuple[str, ...]] = {
    "pi": ("Goal", "Constraints & Preferences", "Progress", "Key Decisions", "Next Steps", "Critical Context"),
    "claude-code": CLAUDE_CODE_SECTIONS,
    "openclaw": OPENCLAW_SECTIONS,
    "letta": LETTA_SECTIONS,
}


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str


def _layout(conversation: str, previous: str | None, instructions: str, focus: str | None) -> str:
    parts = [f"<conversation>\n{conversation}\n</conversation>"]
    if previous:
        parts.append(f"<previous-summary>\n{previous}\n</previous-summary>")
    parts.append(instructions)
    if focus and focus.strip():
        parts.append(f"Additional focus: {focus.strip()}")
    return "\n\n".join(parts)


def letta_words(budget_tokens: int) -> int:
    return max(50, min(LETTA_WORD_LIMIT, int(budget_tokens * WORDS_PER_TOKEN)))


def build_prompt(style: str, conversation: str, *, previous: str | None = None, focus: str | None = None,
                 budget_tokens: int = 4_000, feedback: str | None = None) -> Prompt:
    """The request for one summarization call: `conversation` (serialized) merged into `previous`
    when given. `feedback` is the quality guard's complaint about a rejected attempt."""
    if style not in STYLES:
        raise ArgumentError(f"unknown summary style {style!r}; expected one of {', '.join(STYLES)}")
    length = f"Keep the whole summary under about {budget_tokens} tokens."
    if style == "pi":
        instructions = (PI_UPDATE if previous else PI_INITIAL) + "\n" + length
    elif style == "claude-code":
        instructions = f"{CLAUDE_CODE_PREAMBLE}\n\n{CLAUDE_CODE_BODY}\n\n{length} (The <analysis> does not count.)" \
            f"\n\n{CLAUDE_CODE_TRAILER}"
    elif style == "openclaw":
        base = PI_UPDATE if previous else PI_INITIAL
        instructions = f"{base}\n{length}\n\n{OPENCLAW_IDENTIFIER_POLICY}\n\n{OPENCLAW_STRUCTURE}"
    else:
        instructions = LETTA_BODY.format(words=letta_words(budget_tokens))
    if feedback:
        instructions += _feedback(feedback)
    return Prompt(SYSTEM_PROMPT, _layout(conversation, previous, instructions, focus))


def _feedback(problems: str) -> str:
    return f"\n\nYour previous summary failed quality checks ({problems}). Write it again and fix these problems."


def build_merge_prompt(partials: Sequence[str], *, previous: str | None = None, focus: str | None = None,
                       budget_tokens: int = 4_000, feedback: str | None = None) -> Prompt:
    """OpenClaw's last stage: partial summaries of consecutive chunks merged into one."""
    labelled = []
    for index, partial in enumerate(partials, start=1):
        if index == 1:
            label = f"[Chunk 1 of {len(partials)}: oldest messages]"
        elif index == len(partials):
            label = f"[Chunk {index} of {len(partials)}: most recent messages]"
        else:
            label = f"[Chunk {index} of {len(partials)}]"
        labelled.append(f"{label}\n{partial}")
    instructions = (
        f"{OPENCLAW_MERGE}\n\n{OPENCLAW_IDENTIFIER_POLICY}\n\n{OPENCLAW_STRUCTURE}\n"
        f"Keep the whole summary under about {budget_tokens} tokens."
    )
    if feedback:
        instructions += _feedback(feedback)
    return Prompt(SYSTEM_PROMPT, _layout("\n\n".join(labelled), previous, instructions, focus))


_ANALYSIS = re.compile(r"<analysis>.*?(?:</analysis>|(?=<summary>)|\Z)", re.S | re.I)
_SUMMARY = re.compile(r"<summary>(.*?)(?:</summary>|\Z)", re.S | re.I)
_BLANK_RUNS = re.compile(r"\n\s*\n(?:\s*\n)+")


def strip_analysis(text: str) -> str:
    """Claude Code's post-processing: the <analysis> scratchpad removed (a missing closing tag is
    tolerated), the <summary> tags replaced by a "Summary:" line, runs of blank lines collapsed."""
    text = _ANALYSIS.sub("", text)
    match = _SUMMARY.search(text)
    if match:
        text = text[: match.start()] + "Summary:\n" + match.group(1).strip() + text[match.end():]
    return _BLANK_RUNS.sub("\n\n", text).strip()


def missing_sections(style: str, text: str) -> list[str]:
    """The expected section titles of `style` that `text` does not contain (as a heading or label)."""
    low = text.casefold()
    return [s for s in EXPECTED_SECTIONS[style] if s.casefold() not in low]
