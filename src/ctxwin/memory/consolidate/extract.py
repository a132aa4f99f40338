"""The deterministic extractor: statements (`Unit`s: a note's bullet or sentence, a message's
sentence) classified into observations of durable facts by their wording, with no model.

Each observation has a `kind` (a section of MEMORY.md and a wiki page), its statement with relative
dates made absolute, the words that identify what it is about (`tokens`), and what lets the merge see
that a later statement replaces it: an explicit `key` ("staging port", "owner of billing"), the values
it `displaces` ("pnpm instead of npm" displaces "npm"), or a `change` cue ("now", "no longer",
"reverted"). Chatter (greetings, questions, a few words) is no fact and gives None.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import date
from typing import Literal, TypeAlias

from ctxwin.memory.consolidate.dates import resolve

Kind: TypeAlias = Literal["preference", "constraint", "decision", "project", "person", "event", "task", "note"]
KINDS: tuple[Kind, ...] = ("preference", "constraint", "decision", "project", "person", "event", "task", "note")
MAX_STATEMENT_CHARS = 400
"""A longer statement is cut at a word boundary (the ref leads to the whole of it)."""
MIN_CONTENT_WORDS = 3
"""Fewer content words than this is chatter, unless the statement carries a value (a number, a path,
a command, a date)."""

STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both
but by can could did do does doing down during each few for from further had has have having he her here hers
herself him himself his how i i'm i've i'd i'll if in into is it it's its itself just let's me more most my
myself no nor not of off on once only or other our ours ourselves out over own same she should so some such
than that that's the their theirs them themselves then there these they this those through to too under until
up very was we we're we've we'll were what when where which while who whom why will with would you you're
you've your yours yourself yourselves yeah yes oh ok okay wow really also well like got get gonna lot lots
thing things much many way actually pretty sure thanks thank hey hi hello
now user remember noted please again still currently from anymore longer
""".split())  # noqa: SIM905 (a word list reads best as text)
"""Words that say nothing of what a fact is about (the last line: "the user now prefers" states the
same fact as "I prefer", so they are not compared)."""
CHATTER = re.compile(
    r"^(?:wow|thanks?|thank you|haha+|lol|omg|cool|great|awesome|nice|amazing|yay|congrats|congratulations|"
    r"good (?:luck|job|morning|night)|hi|hey|hello|bye|see you|take care|sounds good|that's (?:great|awesome|"
    r"amazing|cool|so cool)|ok(?:ay)?|sure|yes|no|yeah|hmm+|ah+|oh)\b[\s!.,]*",
    re.IGNORECASE)

# Section headings of a note that say what their bullets are (the extractive flush's among them).
SECTION_KINDS: dict[str, Kind | None] = {
    "preferences": "preference", "preference": "preference", "user preferences": "preference",
    "constraints": "constraint", "constraints & preferences": "preference", "rules": "constraint",
    "decisions": "decision", "key decisions": "decision", "decision": "decision",
    "project": "project", "project facts": "project", "facts": "project", "commands": "project",
    "paths": "project", "versions": "project", "owners": "project",
    "people": "person", "contacts": "person", "team": "person",
    "dates": "event", "events": "event", "dates and events": "event", "deadlines": "event", "schedule": "event",
    "open tasks": "task", "tasks": "task", "todo": "task", "to do": "task", "next steps": "task",
    "in progress": "task", "blocked": "task", "done": "task",
    "current work": None, "files read": None, "identifiers": None, "recent references": None,
    "files modified": None, "project root": None, "commands run": None, "errors and fixes": None,
}

_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+/'-]*")
_PROPER = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")
_VALUE = re.compile(r"`[^`]+`|\b\d[\d.,:/-]*\b|\b[\w.-]+/[\w./-]+|https?://\S+|\b\w+\.(?:py|md|toml|json|ya?ml|sh|js|ts)\b")
_ISO = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_CHECKBOX = re.compile(r"^\[(?P<mark>[ xX])\]\s*")
SPEAKER = re.compile(r"^(?:\*\*)?(?P<name>[A-Z][\w.'-]*(?: [A-Z][\w.'-]*)?)(?:\*\*)?:\s+(?P<rest>\S+(?:\s+\S+){2,}.*)$")
"""A dialogue line, "Ana: we moved to Lisbon": a name, a colon, a sentence of three words or more (so
"Python: 3.12" is a key and its value, not a speaker)."""
NOT_SPEAKERS = frozenset({"todo", "done", "note", "notes", "decision", "task", "next", "owner", "fixed", "update",
                          "reason", "because", "why", "goal", "status", "important", "warning", "command"})
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(`])")
_LEAD_TIME = re.compile(r"^(?:\d{1,2}:\d{2}(?::\d{2})?\s*(?:[ap]m)?\s*[-–—]?\s*)", re.IGNORECASE)

_DONE = re.compile(r"^(?:done|finished|completed|closed|fixed|resolved|shipped|merged)\b[:\s-]*|"
                   r"\b(?:is|was|are|were|got|has been|have been) (?:now )?(?:done|finished|completed|closed|fixed|"
                   r"resolved|merged|shipped)\b", re.IGNORECASE)
_OPEN = re.compile(r"^(?:todo|to do|task|next|follow[- ]up|action item|open)\b[:\s-]+|"
                   r"\b(?:need to|needs to|have to|has to|remember to|don't forget to|should still|still need to|"
                   r"is blocked on|waiting on)\b", re.IGNORECASE)
_PREFERENCE = re.compile(r"\b(?:prefers?|preferred|preference|likes?|loves?|hates?|dislikes?|favou?rite|"
                         r"would rather|'d rather|enjoys?|wants? (?:\w+ ){0,3}to be)\b", re.IGNORECASE)
_CONSTRAINT = re.compile(r"\b(?:must(?: not)?|never|always|do not|don't|required|requirement|"
                         r"forbidden|not allowed|no more than|at most|at least|only ever)\b", re.IGNORECASE)
_DECISION = re.compile(r"\b(?:decided|decision|decide|we'll go with|going with|go with|chose|chosen|settled on|"
                       r"agreed|picked|opted|switch(?:ed|ing)? (?:to|from|back)|moving to|will use|we use|"
                       r"reverse[ds]?|reverted|revert)\b", re.IGNORECASE)
_PROJECT = re.compile(r"`[^`]+`|\b(?:port|version|owner|owns|owned by|maintainer|maintains|repo|repository|branch|"
                      r"command|deploy|endpoint|url|path|directory|folder|config|database|db|server|host|api key|"
                      r"python|node)\b|\bv?\d+\.\d+(?:\.\d+)?\b", re.IGNORECASE)
_PERSON = re.compile(r"\b[A-Z][a-z]+ (?:is|was) (?:the|our|a|an) \w+|\b(?:he|she|they) (?:is|are|was) (?:our|the) "
                     r"|\b(?:met|meet|meeting with|talked to|spoke with|asked|called|emailed) [A-Z][a-z]+"
                     r"|@\w+|\b(?:manager|lead|colleague|boss|friend|"
                     r"wife|husband|partner|mother|father|mom|dad|sister|brother|son|daughter|team)\b")
_EVENT = re.compile(r"\b(?:deadline|due|meeting|release|launch|birthday|anniversary|appointment|scheduled|"
                    r"conference|trip|holiday|vacation|interview|wedding|festival|concert|went to|visited|"
                    r"moved to|started|joined)\b", re.IGNORECASE)
CHANGE = re.compile(r"\b(?:now|no longer|any ?more|instead|changed|switched|switching|reverted|revert|reversed|"
                     r"reverse|back to|from now on|actually|updated|moved|not .{1,30} but)\b", re.IGNORECASE)
_V = (r"(?P<v>[\w.+#/-]+(?: (?!(?:for|in|on|at|to|because|since|when|as|and|but|with|so|now|again)\b)"
      r"[\w.+#/-]+){0,2})")
"""A displaced value: one to three words, ending before a preposition or a clause ("tabs" in "spaces
over tabs for indentation")."""
_DISPLACED = tuple(re.compile(pattern.replace("V", _V), re.IGNORECASE) for pattern in (
    r"\binstead of V", r"\brather than V", r"\bno longer (?:uses?|using|prefers?|wants?|likes?|on|in|at)? ?V",
    r"\bnot V,? any ?more\b", r"\bswitch(?:ed|ing)? from V to\b", r"\bmov(?:e|ed|ing) (?:away )?from V to\b",
    r"\breplac(?:e|ed|ing) V with\b", r"\bprefers? [^,.;()]+? (?:over|to) V", r",? (?:but )?not V\s*[.!]?$",
))
_KEYED = (
    # "owner of billing: Alice", "billing owner is Alice", "Alice owns billing", "billing is owned by Alice"
    (re.compile(r"^(?P<who>[A-Z][\w.-]*(?: [A-Z][\w.-]*)?) (?:now )?(?:owns|maintains|leads|runs) (?P<what>[^,.;]+)"),
     "owner of {what}"),
    (re.compile(r"^(?:the )?(?P<what>[^,.;]+?) (?:is|are) (?:now )?(?:owned|maintained|led|run) by ", re.IGNORECASE),
     "owner of {what}"),
    (re.compile(r"^(?:the )?(?:owner|maintainer|lead) of (?P<what>[^,.;:]+?)(?::| is| are)", re.IGNORECASE),
     "owner of {what}"),
    (re.compile(r"^(?P<who>[A-Z][a-z]+(?: [A-Z][a-z]+)?) is (?:now )?(?:the|our) (?P<what>[\w -]{3,40}?)(?:[,.;]|$)"),
     "role {what}"),
    (re.compile(r"^(?:the )?(?P<what>[\w -]{3,40}?) (?:is|are) (?:now )?(?:due|scheduled|planned|set|moved)"
                r"(?: to| for| on)? ", re.IGNORECASE), "date of {what}"),
    (re.compile(r"^(?:the )?(?P<what>[A-Za-z][\w ./-]{1,40}?)\s*(?::|=| is| are)\s*(?:now\s+)?"
                r"(?P<v>`[^`]+`|\S+)\s*[.]?$", re.IGNORECASE), "{what}"),
)
KEY_MAX_WORDS = 5
"""An explicit key ("staging port") is a short phrase; a longer subject is a sentence, not a key."""
_KEY_STOP = frozenset({"i", "it", "this", "that", "he", "she", "they", "we", "you", "there", "what", "which", "who"})


@dataclass(frozen=True, slots=True)
class Unit:
    """One statement from the inputs: a note's bullet or line (or a sentence of it), or a sentence of a
    logged message. `ref` names where it came from (memory/<note>.md:<line>, entry:<id>@<session>);
    `section` is the heading above a note line (lowercase); `speaker` a dialogue line's name or a
    message's role; `order` sorts units in the order they were written."""

    text: str
    day: date
    ref: str
    section: str | None = None
    speaker: str | None = None
    order: tuple[str, int, int] = ("", 0, 0)


@dataclass(frozen=True, slots=True)
class Observation:
    """A durable fact as one statement gives it (see the module docstring). `done` marks a task
    closed; `weight` is how much the statement holds (values, names, dates), for the rank."""

    kind: Kind
    text: str
    day: date
    ref: str
    tokens: frozenset[str]
    key: str | None = None
    displaces: tuple[frozenset[str], ...] = ()
    change: bool = False
    done: bool = False
    subject: str | None = None
    weight: float = 1.0
    order: tuple[str, int, int] = ("", 0, 0)


def stem(word: str) -> str:
    """A crude English stem, enough to match "migrate" with "migrated" and "tests" with "test"."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: len(word) - len(suffix)] + keep
    return word


def tokens(text: str) -> frozenset[str]:
    """The content words of `text`, lowercased and stemmed (stopwords left out)."""
    out = set()
    for raw in _WORD.findall(text.replace("`", " ")):
        word = raw.lower().strip("'.-/+")
        if word and word not in STOPWORDS and (not word.isdigit() or len(word) > 1):
            out.add(stem(word))
    return frozenset(out)


def clip(text: str) -> str:
    """`text`, cut at a word boundary to `MAX_STATEMENT_CHARS`."""
    if len(text) <= MAX_STATEMENT_CHARS:
        return text
    cut = text[:MAX_STATEMENT_CHARS].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + " …"


_FILLER = re.compile(r"^(?:(?:please )?remember(?: that)?|note(?: that)?|fyi|btw|also|and|so)[:,]?\s+", re.IGNORECASE)
"""Words before a statement that are not its subject ("Remember that the staging port is 8443")."""


def _key(text: str) -> str | None:
    text = _FILLER.sub("", text)
    for pattern, template in _KEYED:
        match = pattern.search(text)
        if match is None:
            continue
        what = match.group("what").strip().lower()
        what = re.sub(r"^(?:the|our|a|an) ", "", what)
        words = what.split()
        if not words or len(words) > KEY_MAX_WORDS or words[0] in _KEY_STOP:
            continue
        return template.format(what=" ".join(stem(w) for w in words))
    return None


def displaced_values(text: str) -> tuple[frozenset[str], ...]:
    found = []
    for pattern in _DISPLACED:
        for match in pattern.finditer(text):
            value = tokens(match.group("v"))
            if value:
                found.append(value)
    return tuple(found)


def content_weight(text: str) -> float:
    """How much a statement holds: its values (numbers, paths, commands, dates) and names, and its length
    (saturating), so that "we met at 3pm in Berlin with Ana" outranks "that was fun"."""
    values = len(_VALUE.findall(text)) + len(_ISO.findall(text))
    names = len(_PROPER.findall(text))
    words = len(tokens(text))
    return 1.0 + 0.4 * min(values, 3) + 0.2 * min(names, 3) + 0.3 * math.log2(1 + min(words, 24))


def values(text: str) -> frozenset[str]:
    """The values a statement names (numbers, paths, commands, URLs, file names), lowercased: two
    statements with other values are two facts however alike their words."""
    return frozenset(v.strip("`").lower() for v in _VALUE.findall(text))


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def classify(unit: Unit) -> Observation | None:
    """The observation `unit` states, or None when it is chatter or a section nothing durable is in."""
    text = _LEAD_TIME.sub("", _BULLET.sub("", unit.text.strip())).strip()
    hint: Kind | str | None = SECTION_KINDS.get(unit.section or "", "") if unit.section else ""
    if hint is None:
        return None  # a flush's "Current work", file lists, identifiers: the moment's state, not a fact
    done = False
    check = _CHECKBOX.match(text)
    if check:
        done = check.group("mark").lower() == "x"
        text = text[check.end():]
    subject = unit.speaker
    speaker = SPEAKER.match(text)
    if speaker and speaker.group("name").lower() not in NOT_SPEAKERS:
        subject, text = speaker.group("name"), speaker.group("rest")
    text = text.strip().strip("*_").strip()
    if not text or text.startswith("#") or text.endswith("?") or CHATTER.fullmatch(text):
        return None
    text = CHATTER.sub("", text, count=1).strip() if CHATTER.match(text) else text
    resolved = resolve(text, unit.day)
    text = clip(re.sub(r"\s+", " ", resolved.text))
    words = tokens(text)
    has_value = bool(_VALUE.search(text) or resolved.days)
    if len(words) < MIN_CONTENT_WORDS and not (has_value and words):
        return None
    if subject is not None and subject.lower() in ("user", "assistant"):
        subject = None  # a message's role: the same person as the notes' "the user", not a named speaker
    dialogue = subject is not None
    section: Kind | None = hint if hint in KINDS else None  # checked: one of KINDS
    kind = _kind(text, section, done, check is not None, dialogue)
    if kind == "task" and not done:
        done = bool(_DONE.search(text)) or unit.section == "done"
    if kind == "task":
        text = _OPEN.sub(lambda m: "" if m.start() == 0 else m.group(0), text, count=1).strip()
        text = _DONE.sub(lambda m: "" if m.start() == 0 else m.group(0), text, count=1).strip() or text
        text = text[:1].upper() + text[1:]
    return Observation(
        kind=kind, text=text, day=unit.day, ref=unit.ref, tokens=tokens(text),
        key=_key(text) if kind != "task" else None,
        displaces=displaced_values(text), change=bool(CHANGE.search(text)), done=done, subject=subject,
        weight=content_weight(text), order=unit.order)


def _kind(text: str, section: Kind | None, done: bool, checkbox: bool, dialogue: bool) -> Kind:
    """The kind a statement is: a checkbox or a task cue makes a task (not in a dialogue line, where
    "I need to go" is no task); a section heading says the rest; else the first cue that matches."""
    if checkbox or (not dialogue and (done or section == "task" or _OPEN.search(text) or _DONE.match(text))):
        return "task"
    if section is not None and section != "task":
        return section
    for kind, cue in _CUES:
        if cue.search(text):
            return kind
    return "note"


_CUES: tuple[tuple[Kind, re.Pattern[str]], ...] = (
    ("decision", _DECISION), ("preference", _PREFERENCE), ("constraint", _CONSTRAINT), ("person", _PERSON),
    ("project", _PROJECT), ("event", _EVENT), ("event", _ISO))


def observe(units: list[Unit]) -> list[Observation]:
    """`classify` over many units, chatter left out, in the order they were written."""
    out = [o for o in (classify(u) for u in units) if o is not None]
    out.sort(key=lambda o: (o.day, o.order))
    return out
