"""The search agent for chained questions ("the owner of the pet named Dawn lives in which state?"),
deterministic: each hop reads the best results of the one before, takes what links them onward (ids,
the values of the fields the question names, file names, dates, names), asks again with those, and
the hops' results are merged, in turns. Pure functions; `MemoryIndex.search(hops=N)` runs them. A caller with an
LLM may rewrite the follow-up query instead (`MemoryIndex.search(rewrite=...)`).

What a hop reads, in the order it is asked for:
1. identifiers with a digit (`pers-0045`, `acct-0101`, `v1.2.3`, `PR-118`): the links of records and logs;
2. the values of `key: value` lines whose key the question names (`state: Ohio` for "the same state");
3. file names (`src/app.py`), ISO dates;
4. capitalised names that are not at the start of a sentence.
Anything the question or an earlier hop already asked is left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import re2

from ctxwin.memory.chunks import IDENTIFIER
from ctxwin.memory.snippets import STOPWORDS, query_stems, stem
from ctxwin.paths import re2_options

HOP_READ = 3
"""Results of a hop whose text the next hop reads."""
HOP_TERMS = 6
"""Most terms one follow-up query asks."""
HOP_WEIGHT = 0.85
"""A hop's scores count this much of the hop before's (later hops drift further from the question)."""
MAX_HOPS = 5
"""The most hops one search makes."""

_FIELD = re2.compile(r"(?m)^\s*[-*]?\s*([\pL][\pL\pN _]{0,30}?)\s*[:=]\s*([^\n]{1,60}?)\s*$", re2_options())
_FILE = re2.compile(r"[\pL\pN_\-./]*[\pL\pN_\-]\.[a-z]{1,5}\b", re2_options())
_ISO_DAY = re2.compile(r"\b[0-9]{4}-[0-9]{2}-[0-9]{2}\b", re2_options())
_NAME = re2.compile(r"(?:[^.!?\n]\s+|\(|\")(\p{Lu}[\p{Ll}'\-]+(?:\s+\p{Lu}[\p{Ll}'\-]+)?)", re2_options())
_DIGIT = re2.compile(r"[0-9]", re2_options())


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
    """The follow-up query: the link terms, quoted so each identifier is searched whole."""
    return " ".join(terms)


def texts_of(ranked: Sequence[tuple[int, float]], bodies: Mapping[int, str], count: int = HOP_READ) -> list[str]:
    return [bodies[key] for key, _ in ranked[:count] if key in bodies]
