"""Facts and how observations merge into them: current, not cumulative.

A fact is what MEMORY.md states and a wiki page keeps: its statement, its kind, the days it was first
and last stated, every statement of it (`refs`), and its status. Observations merge in the order they
were written:

1. a task marked done closes the open task it names (most shared words); it leaves the open list and
   stays in the wiki with the day it was opened and the day it was closed;
2. a restatement (the same words, or nearly, with the same values) adds a ref to the current fact,
   which takes the restatement's wording: duplicates merge, and `mentions` counts them for the rank;
3. a statement that changes a current fact supersedes it: the same explicit key with another value
   ("staging port is 9443"), a displaced value ("pnpm instead of npm" against "use npm"), or a change
   cue ("now", "reverted", "no longer") with enough shared words; the old fact keeps both days
   (stated, superseded) and the statement that replaced it;
4. anything else is a new current fact.

An observation whose statement was merged before (the same ref and position) is skipped, so reading an
input twice changes nothing. `merge` never removes a fact.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any, Literal, TypeAlias

from ctxwin.memory.consolidate.extract import Kind, Observation, values
from ctxwin.memory.scoring import jaccard

Status: TypeAlias = Literal["current", "superseded", "done"]
DUPLICATE_JACCARD = 0.8
"""Statements sharing this share of their words (and every value) are one fact stated twice."""
TASK_MATCH_JACCARD = 0.4
"""A done statement closes the open task it shares this share of words with (or all the task's words)."""
CHANGE_JACCARD = 0.25
"""A statement with a change cue supersedes the current fact it shares this share of words with..."""
CHANGE_MIN_SHARED = 2
"""...and at least this many words."""
SLOT_KINDS: frozenset[Kind] = frozenset({"preference", "constraint"})
"""Kinds where a statement with a word or two swapped is a new value of the same fact..."""
SLOT_SWAP = 2
"""...at most this many words swapped each way."""
CHOICES: frozenset[Kind] = frozenset({"preference", "constraint", "decision", "project"})
"""Kinds a displaced value or a key can supersede across (a decision can replace a project fact)."""


@dataclass(slots=True)
class Fact:
    """One fact (see the module docstring). `refs` are its statements, oldest first; `ended` and
    `ended_ref` the day and statement that superseded or closed it; `by` the fact that replaced it."""

    id: str
    kind: Kind
    text: str
    first_day: date
    last_day: date
    refs: list[str]
    tokens: frozenset[str]
    key: str | None = None
    subject: str | None = None
    chosen: frozenset[str] = frozenset()
    mentions: int = 1
    uses: int = 0
    weight: float = 1.0
    status: Status = "current"
    ended: date | None = None
    ended_ref: str | None = None
    by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "text": self.text, "first_day": self.first_day.isoformat(),
                "last_day": self.last_day.isoformat(), "refs": list(self.refs), "tokens": sorted(self.tokens),
                "key": self.key, "subject": self.subject, "chosen": sorted(self.chosen), "mentions": self.mentions,
                "uses": self.uses, "weight": round(self.weight, 4), "status": self.status,
                "ended": self.ended.isoformat() if self.ended else None, "ended_ref": self.ended_ref, "by": self.by}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> Fact:
        return Fact(id=data["id"], kind=data["kind"], text=data["text"],
                    first_day=date.fromisoformat(data["first_day"]), last_day=date.fromisoformat(data["last_day"]),
                    refs=list(data["refs"]), tokens=frozenset(data["tokens"]), key=data.get("key"),
                    subject=data.get("subject"), chosen=frozenset(data.get("chosen", ())),
                    mentions=int(data.get("mentions", 1)), uses=int(data.get("uses", 0)),
                    weight=float(data.get("weight", 1.0)),
                    status=data.get("status", "current"),
                    ended=date.fromisoformat(data["ended"]) if data.get("ended") else None,
                    ended_ref=data.get("ended_ref"), by=data.get("by"))


def _fact_id(observation: Observation) -> str:
    seed = f"{observation.kind}\x00{observation.text}\x00{observation.ref}"
    return hashlib.sha1(seed.encode()).hexdigest()[:10]


def _chosen(observation: Observation) -> frozenset[str]:
    """The words of what a statement chose: its words less the values it displaced."""
    out = set(observation.tokens)
    for value in observation.displaces:
        out -= value
    return frozenset(out)


@dataclass
class FactStore:
    """The facts (oldest first) and the statements merged so far (`seen`), with look-ups by word and
    key over the current ones so a merge costs what the statement shares, not the store's size."""

    facts: list[Fact] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._by_id = {f.id: f for f in self.facts}
        self._by_word: dict[str, set[str]] = {}
        self._by_key: dict[str, set[str]] = {}
        for fact in self.facts:
            if fact.status == "current":
                self._index(fact)

    def _index(self, fact: Fact) -> None:
        for word in fact.tokens:
            self._by_word.setdefault(word, set()).add(fact.id)
        if fact.key:
            self._by_key.setdefault(fact.key, set()).add(fact.id)

    def _unindex(self, fact: Fact) -> None:
        for word in fact.tokens:
            self._by_word.get(word, set()).discard(fact.id)
        if fact.key:
            self._by_key.get(fact.key, set()).discard(fact.id)

    def _candidates(self, words: Iterable[str]) -> list[Fact]:
        ids: set[str] = set()
        for word in words:
            ids |= self._by_word.get(word, set())
        return sorted((self._by_id[i] for i in ids), key=lambda f: (f.first_day, f.id))

    def current(self) -> list[Fact]:
        return [f for f in self.facts if f.status == "current"]

    # -- the merge

    def merge(self, observations: Sequence[Observation], seen_keys: Sequence[str] | None = None) -> MergeReport:
        """Merges `observations` in order (see the module docstring). `seen_keys[i]` identifies the
        i-th statement (its ref and position); one merged before is skipped."""
        report = MergeReport()
        for index, observation in enumerate(observations):
            seen = seen_keys[index] if seen_keys is not None else f"{observation.ref}#{index}"
            if seen in self.seen:
                report.skipped += 1
                continue
            self.seen.add(seen)
            self._merge_one(observation, report)
        return report

    def use(self, uses: Sequence[tuple[str, str]]) -> int:
        """Counts each (ref, key) read of a source against the facts stated there (a read named by a
        key merged before is skipped); returns the reads that named a fact."""
        by_ref: dict[str, list[Fact]] = {}
        for fact in self.facts:
            for ref in fact.refs:
                by_ref.setdefault(ref, []).append(fact)
        counted = 0
        for ref, key in uses:
            if key in self.seen or ref not in by_ref:
                continue
            self.seen.add(key)
            for fact in by_ref[ref]:
                fact.uses += 1
            counted += 1
        return counted

    def _merge_one(self, o: Observation, report: MergeReport) -> None:
        candidates = self._candidates(o.tokens)
        if o.kind == "task" and o.done:
            self._close(o, candidates, report)
            return
        same = [f for f in candidates if f.kind == o.kind or (f.kind in CHOICES and o.kind in CHOICES)]
        duplicate = self._duplicate(o, [f for f in same if f.kind == o.kind or f.tokens == o.tokens])
        if duplicate is not None:
            # Restated: counted, sourced, and worded as it was last said (MEMORY.md shows that statement's
            # ref, so the line and what its ref reads are the same words).
            self._unindex(duplicate)
            duplicate.text, duplicate.tokens, duplicate.chosen = o.text, o.tokens, _chosen(o)
            duplicate.key, duplicate.weight = o.key or duplicate.key, o.weight
            duplicate.mentions += 1
            duplicate.last_day = max(duplicate.last_day, o.day)
            if o.ref not in duplicate.refs:
                duplicate.refs.append(o.ref)
            self._index(duplicate)
            report.restated += 1
            return
        fact = self._add(o)
        report.added += 1
        for old in self._superseded(o, fact, same):
            old.status, old.ended, old.ended_ref, old.by = "superseded", o.day, o.ref, fact.id
            self._unindex(old)
            report.superseded += 1

    def _add(self, o: Observation) -> Fact:
        fact = Fact(id=_fact_id(o), kind=o.kind, text=o.text, first_day=o.day, last_day=o.day, refs=[o.ref],
                    tokens=o.tokens, key=o.key, subject=o.subject, chosen=_chosen(o), weight=o.weight)
        if fact.id in self._by_id:  # the same statement at the same place, merged again under another key
            fact = replace(fact, id=hashlib.sha1((fact.id + str(len(self.facts))).encode()).hexdigest()[:10])
        if o.kind == "task" and o.done:
            fact.status, fact.ended, fact.ended_ref = "done", o.day, o.ref
        self.facts.append(fact)
        self._by_id[fact.id] = fact
        if fact.status == "current":
            self._index(fact)
        return fact

    @staticmethod
    def _duplicate(o: Observation, same: Sequence[Fact]) -> Fact | None:
        named = values(o.text)
        best: tuple[float, Fact] | None = None
        for fact in same:
            if fact.status != "current" or (fact.subject or None) != (o.subject or None):
                continue
            # What each chose, not every word: "spaces, not tabs" and "tabs, not spaces" share their words.
            chosen = _chosen(o)
            score = jaccard(fact.chosen, chosen)
            same_words = fact.chosen == chosen or (score >= DUPLICATE_JACCARD and values(fact.text) == named)
            if same_words and (best is None or score > best[0]):
                best = (score, fact)
        return best[1] if best else None

    @staticmethod
    def _superseded(o: Observation, new: Fact, same: Sequence[Fact]) -> list[Fact]:
        if o.kind in ("task", "note") and o.key is None:
            return []
        out: list[Fact] = []
        for fact in same:
            if fact.status != "current" or fact.id == new.id or fact.kind == "task":
                continue
            if (fact.subject or None) != (o.subject or None):
                continue
            keyed = bool(o.key) and fact.key == o.key and fact.tokens != o.tokens
            displaced = any(v and v <= fact.chosen and not v <= new.chosen for v in o.displaces)
            if keyed or displaced:
                out.append(fact)
        if out:
            return out
        # The user's preference or constraint with one or two words swapped ("prefers dark mode" ->
        # "prefers light mode") is the same slot with a new value; a change cue ("now", "reverted")
        # lets any kind replace the fact it shares enough words with. Never a named speaker's line:
        # "I love camping" and "I love painting" are both true.
        slot = o.kind in SLOT_KINDS and not o.subject
        if not (o.change or slot):
            return out
        best: tuple[float, Fact] | None = None
        for fact in same:
            if fact.status != "current" or fact.id == new.id or fact.kind != o.kind:
                continue
            if (fact.subject or None) != (o.subject or None):
                continue
            shared = len(fact.tokens & o.tokens)
            score = jaccard(fact.tokens, o.tokens)
            other_key = bool(o.key and fact.key and o.key != fact.key)  # "owner of billing" vs "of search"
            swapped = slot and not other_key and len(fact.tokens - o.tokens) <= SLOT_SWAP \
                and len(o.tokens - fact.tokens) <= SLOT_SWAP
            if shared >= CHANGE_MIN_SHARED and (swapped or (o.change and score >= CHANGE_JACCARD)) \
                    and (best is None or score > best[0]):
                best = (score, fact)
        return [best[1]] if best else []

    def _close(self, o: Observation, candidates: Sequence[Fact], report: MergeReport) -> None:
        best: tuple[float, Fact] | None = None
        for fact in candidates:
            if fact.kind != "task" or fact.status != "current":
                continue
            score = jaccard(fact.tokens, o.tokens)
            covered = bool(fact.tokens) and fact.tokens <= o.tokens
            if (score >= TASK_MATCH_JACCARD or covered) and (best is None or score > best[0]):
                best = (score, fact)
        if best is None:
            self._add(o)  # a task done that was never written down as open: history only
            report.added += 1
            return
        task = best[1]
        task.status, task.ended, task.ended_ref = "done", o.day, o.ref
        if o.ref not in task.refs:
            task.refs.append(o.ref)
        self._unindex(task)
        report.closed += 1


@dataclass
class MergeReport:
    """What one merge did, in counts."""

    added: int = 0
    restated: int = 0
    superseded: int = 0
    closed: int = 0
    skipped: int = 0
    used: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"added": self.added, "restated": self.restated, "superseded": self.superseded,
                "closed": self.closed, "skipped": self.skipped, "used": self.used}


KIND_WEIGHT: dict[Kind, float] = {"preference": 4.0, "constraint": 4.0, "decision": 3.5, "task": 4.0,
                                  "project": 2.0, "person": 2.0, "event": 2.0, "note": 0.0}
"""What a kind adds to a fact's rank: what an agent must not get wrong (preferences, constraints,
open tasks) before the rest."""
RECENCY_HALF_LIFE_DAYS = 30.0
"""Recency adds `RECENCY_WEIGHT` for a fact stated on the newest day, half of it 30 days before."""
RECENCY_WEIGHT = 3.0
INFO_WEIGHT = 0.3
"""What a unit of `information` (a word as rare as one fact in e, roughly) adds to the rank."""


def information(facts: Sequence[Fact]) -> dict[str, float]:
    """How much each current fact says that the others do not: the inverse document frequency of its
    words, summed (a fact of rare words, a name, a place, a version, says more than "that was fun")."""
    current = [f for f in facts if f.status == "current"]
    df: dict[str, int] = {}
    for fact in current:
        for word in fact.tokens:
            df[word] = df.get(word, 0) + 1
    n = len(current)
    return {f.id: sum(math.log((1 + n) / (1 + df[w])) for w in f.tokens) for f in current}


def rank(fact: Fact, newest: date, info: float = 0.0) -> float:
    """A current fact's rank for MEMORY.md: its kind, how much it holds (`weight`, and `info` from
    `information`), how often it was stated and read back (`memory_get` of its source), how recently.
    Against the newest input's day, not the clock, so the same facts rank the same on any day."""
    age = max(0, (newest - fact.last_day).days)
    recency = RECENCY_WEIGHT * 0.5 ** (age / RECENCY_HALF_LIFE_DAYS)
    # A named speaker's statement is a dialogue line, where "love" or "never" are no preference or
    # constraint to keep: its kind says little, what it holds says the rest.
    kind = KIND_WEIGHT[fact.kind] if not fact.subject else 0.0
    told = math.log2(fact.mentions) + math.log2(1 + fact.uses)
    return kind + fact.weight + INFO_WEIGHT * info + told + recency
