"""The search agent for chained questions ("among the people in the same state as the owner of the
pet named 'Tara', who owns the most vehicles?"), deterministic. Pure functions; `MemoryIndex.search(hops=N)`
runs them, and a caller with an LLM may have it write each follow-up query instead (`rewrite=`,
`model_rewrite`).

The first hop is the question's own search, with the units that hold a quoted value of the question
as a whole field value first (`name: Tara` for 'Tara'); the next hops start from its best unit. Each
hop follows the links of the units the hop before found, to every unit that carries them:
1. link keys: identifiers with a letter and a digit (`pers-0045`, `acct-0101`, `PR-118`, `web-7`)
   that more than one unit holds (a key only one unit holds links nothing);
2. the values of `key: value` lines whose key is a word of the question (`state: Ohio` for "the same
   state"), held by more than one unit.
When a hop finds no such link it asks again with what else the best units name (`link_terms`: file
names, dates, capitalised names), as a plain search. At the end, when the units found belong to
several entities (the key each shares with most of the others: the person all of a person's records
name), the entities are ranked by how much of the question their units match (each word weighted by
how rare it is among the units found) and each one's own unit (the one whose first line names only
its key: `### Dawn Harvey (ID: pers-0044)`) comes first; then the hops' results, merged in turns.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import re2

from ctxwin.memory.chunks import IDENTIFIER, whole_key
from ctxwin.memory.snippets import STOPWORDS, query_stems, stem, word_stems
from ctxwin.messages import user
from ctxwin.paths import re2_options

if TYPE_CHECKING:  # the client module loads httpx: only a caller that has a model pays for it
    from ctxwin.providers.base import ModelClient

HOP_READ = 3
"""Results of a hop whose text the next hop's follow-up query reads (when it has no link to follow)."""
FOLLOW_KEYS = 30
"""Most link keys one hop follows (a state's residents: 12 to 31 in Letta's records)."""
FOLLOW_VALUES = 4
"""Most field values one hop follows."""
LINK_MAX_UNITS = 400
"""A key or value held by more units than this is too common to link anything."""
FOLLOW_UNITS = 400
"""Most units one hop adds."""
HOP_TERMS = 6
"""Most terms one follow-up query asks."""
HOP_WEIGHT = 0.85
"""A hop's scores count this much of the hop before's (later hops drift further from the question)."""
MAX_HOPS = 5
"""The most hops one search makes."""
REWRITE_CHARS = 4_000
"""Characters of the best results a query rewriter is shown."""
REWRITE_SYSTEM = (
    "You help a search engine answer a question that takes several look-ups. You are given the question and "
    "what the last search found. Write the next search query: only the names, ids, values or words to look up "
    "next, on one line, nothing else.")

Rewrite = Callable[[str, list[str]], str]
"""A query rewriter for hops (an LLM, a summarizer): (question, best texts of the last hop) -> next query."""

_FIELD = re2.compile(r"(?m)^\s*[-*]?\s*([\pL][\pL\pN _]{0,30}?)\s*[:=]\s*([^\n]{1,60}?)\s*$", re2_options())
_FILE = re2.compile(r"[\pL\pN_\-./]*[\pL\pN_\-]\.[a-z]{1,5}\b", re2_options())
_ISO_DAY = re2.compile(r"\b[0-9]{4}-[0-9]{2}-[0-9]{2}\b", re2_options())
_NAME = re2.compile(r"(?:[^.!?\n]\s+|\(|\")(\p{Lu}[\p{Ll}'\-]+(?:\s+\p{Lu}[\p{Ll}'\-]+)?)", re2_options())
_DIGIT = re2.compile(r"[0-9]", re2_options())
_QUOTED = re2.compile(r"(?:^|[^\pL\pN'])'([^'\n]{1,80})'(?:$|[^\pL\pN])|\"([^\"\n]{1,80})\"", re2_options())


def _asked_words(text: str) -> set[str]:
    return {w.lower() for w in text.replace("'", " ").replace('"', " ").split()}


def link_terms(question: str, texts: Sequence[str], asked: Iterable[str], limit: int = HOP_TERMS) -> list[str]:
    """The terms the next hop asks for, read from the best results' `texts` (see the module doc)."""
    stems = query_stems(question)
    seen = {t.lower() for t in asked} | _asked_words(question)
    ids: list[str] = []
    values: list[str] = []
    others: list[str] = []
    names: list[str] = []
    for text in texts:
        for match in IDENTIFIER.findall(text):
            if _DIGIT.search(match) and not _ISO_DAY.fullmatch(match):
                ids.append(match)
        for key, value in _FIELD.findall(text):
            if {stem(w) for w in key.replace("_", " ").split()} & stems:
                values.append(value)
        others.extend(_FILE.findall(text))
        others.extend(_ISO_DAY.findall(text))
        for name in _NAME.findall(text):
            if name.lower() not in STOPWORDS:
                names.append(name)
    out: list[str] = []
    for term in [*ids, *values, *others, *names]:
        key = term.lower()
        if key in seen or not key.strip():
            continue
        seen.add(key)
        out.append(term)
        if len(out) >= limit:
            break
    return out


def merge(hops: Sequence[Sequence[tuple[int, float]]], weight: float = HOP_WEIGHT) -> list[tuple[int, float, int]]:
    """The hops' ranked (key, score) lists as one, taken in turns: the first hop's best, the second
    hop's best not yet taken, ..., then each hop's second, and so on, so every link of the chain is
    near the top (a score-sorted merge buries the later hops under the first hop's weak matches).
    Scores are scaled by `weight` per hop after the first. Returns (key, score, hop that found it)."""
    out: list[tuple[int, float, int]] = []
    taken: set[int] = set()
    cursors = [0] * len(hops)
    while any(cursors[n] < len(hop) for n, hop in enumerate(hops)):
        for number, hop in enumerate(hops):
            while cursors[number] < len(hop) and hop[cursors[number]][0] in taken:
                cursors[number] += 1
            if cursors[number] < len(hop):
                key, score = hop[cursors[number]]
                cursors[number] += 1
                taken.add(key)
                out.append((key, score * weight ** number, number + 1))
    return out


def hop_query(terms: Sequence[str]) -> str:
    """The follow-up query: the link terms, as words (identifiers are searched whole by the index)."""
    return " ".join(terms)


def quoted(question: str) -> list[str]:
    """What the question quotes ('Tara', "7D U3378"): values it names exactly."""
    return list(dict.fromkeys(a or b for a, b in _QUOTED.findall(question)))


def _fields(text: str) -> Iterator[tuple[str, str]]:
    """The `key: value` (or `key = value`) lines of a text, stripped, with plain str operations (they
    run over every unit a hop finds): a key is a short name (letters, digits, spaces, `_`)."""
    for line in text.split("\n"):
        cut = min((i for i in (line.find(":"), line.find("=")) if i > 0), default=-1)
        if cut < 0:
            continue
        key, value = line[:cut].strip().lstrip("-*").strip(), line[cut + 1:].strip()
        if value and 0 < len(key) <= 31 and key[0].isalpha() and all(c.isalnum() or c in " _" for c in key):
            yield key, value


def holds_value(text: str, value: str) -> bool:
    """A line of `text` is `key: value` with this very value (case aside): `name: Tara`, not `Tara Morris`."""
    wanted = value.strip().lower()
    return wanted in text.lower() and any(v.lower() == wanted for _, v in _fields(text))


def is_link_key(word: str) -> bool:
    """A letter and a digit in it (str methods: this runs on every key of every unit a hop reads)."""
    return not word.isalpha() and not word.isdigit() and any(c.isdigit() for c in word) \
        and any(c.isalpha() for c in word)


def link_keys(text: str) -> list[str]:
    """The identifiers of `text` with a letter and a digit (`pers-0045`, not `01/26` nor `2556.41`), in order."""
    return [m for m in dict.fromkeys(IDENTIFIER.findall(text)) if is_link_key(m)]


def unit_keys(fields: str) -> list[str]:
    """The link keys of a unit as its index fields hold them whole (`pers0045`: `chunks.identifier_keys`)."""
    return [part for part in dict.fromkeys(fields.split(" | ")) if part and " " not in part and is_link_key(part)]


def named_values(stems: frozenset[str], text: str) -> list[tuple[str, str]]:
    """The `key: value` lines of `text` whose key is a word of the question (`stems`: "the same state"
    names `state: Ohio`) and whose value is not itself a link key."""
    return [(key, value) for key, value in _fields(text) if stem(key) in stems and not link_keys(value)]


Count = Callable[[str], int]
"""How many units of the index hold a key or a value (`MemoryIndex` counts it in the full-text index)."""


def links(question: str, units: Iterable[tuple[str, str]], count: Count,
          asked: set[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """The keys (whole, as `unit_keys`) and field values a hop follows from `units` ((text, fields)
    pairs; see the module doc), those not in `asked`, at most `FOLLOW_KEYS` and `FOLLOW_VALUES`."""
    stems = query_stems(question)
    keys: list[str] = []
    values: list[tuple[str, str]] = []
    for text, fields in units:
        for key in unit_keys(fields):
            if len(keys) < FOLLOW_KEYS and key not in asked and 2 <= count(key) <= LINK_MAX_UNITS:
                asked.add(key)
                keys.append(key)
        for key, value in named_values(stems, text):
            name = f"{key}: {value}".lower()
            if len(values) < FOLLOW_VALUES and name not in asked and 2 <= count(value) <= LINK_MAX_UNITS:
                asked.add(name)
                values.append((key, value))
    return keys, values


def carries(text: str, fields: str, keys: Sequence[str], values: Sequence[tuple[str, str]]) -> bool:
    """The unit holds one of the (whole) keys, or one of the values as a `key: value` line."""
    if keys and set(keys) & set(unit_keys(fields)):
        return True
    if values:
        held = {(k.lower(), v.lower()) for k, v in _fields(text)}
        return any((k.lower(), v.lower()) in held for k, v in values)
    return False


def entities(units: Mapping[int, str]) -> dict[str, list[int]]:
    """The units (their fields) grouped by entity: each unit under the key it holds that most of
    `units` hold (the person, for every record that names its owner); units without keys are left out."""
    keys = {unit: unit_keys(fields) for unit, fields in units.items()}
    shared = Counter(k for held in keys.values() for k in held)
    groups: dict[str, list[int]] = {}
    for unit, held in keys.items():
        if held:
            groups.setdefault(max(held, key=lambda k: (shared[k], k)), []).append(unit)
    return groups


def rank_entities(question: str, groups: Mapping[str, Sequence[int]], texts: Mapping[int, str],
                  start: str = "") -> list[str]:
    """Entities by how much of the question their units match: each question word a unit holds counts
    log(units / units holding it), so a word every unit holds ("owner") counts nothing and the rare
    ones ("vehicle" among addresses and accounts) decide. The words of `start`, the unit the chain
    started from, are left out: they say where the question starts ("the pet named 'Rex'"), not what
    it asks for. Ties by key."""
    memo: dict[str, str] = {}
    stems = query_stems(question) - word_stems(start, memo)
    held = {unit: word_stems(text, memo) & stems for unit, text in texts.items()}
    holding = Counter(w for words in held.values() for w in words)
    weight = {w: math.log(len(texts) / n) for w, n in holding.items()}
    score = {entity: sum(weight[w] for unit in members for w in held[unit]) for entity, members in groups.items()}
    return sorted(groups, key=lambda e: (-score[e], e))


def head_key(text: str) -> str | None:
    """The key a unit is the entity's own unit of: the only link key its first line names
    (`### Dawn Harvey (ID: pers-0044)`), whole; None otherwise."""
    keys = [whole_key(k) for k in link_keys(text.split("\n", 1)[0])]
    return keys[0] if len(set(keys)) == 1 else None



def model_rewrite(client: ModelClient, *, max_tokens: int = 64) -> Rewrite:
    """A `Rewrite` that asks a model (any `ModelClient`: `providers.client_for(...)`) for each follow-up
    query; its first line is the query. A failed call raises the client's `ProviderError`, which the
    search answers with its own follow-up (`MemoryIndex.search` logs a warning)."""

    def rewrite(question: str, texts: list[str]) -> str:
        found = "\n---\n".join(texts)[:REWRITE_CHARS]
        prompt = f"Question: {question}\n\nFound so far:\n{found or '(nothing)'}\n\nNext search query:"
        answer = client.complete([user(prompt)], system=REWRITE_SYSTEM, max_tokens=max_tokens).text
        return next((line.strip() for line in answer.splitlines() if line.strip()), "")

    return rewrite
