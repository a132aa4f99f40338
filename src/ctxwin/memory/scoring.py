"""How full-text and vector scores become one ranking: pure functions over candidate lists.

- Full text: a backend returns each hit's relevance as a positive number, higher better (SQLite's
  `-bm25()`, PostgreSQL's `ts_rank_cd`). `normalize_text` divides by the best hit's relevance, so the
  top hit scores 1 and a weaker one keeps its ratio. (OpenClaw turned FTS5's negative `bm25()` into
  `1/(1+max(0, rank))`, which is 1.0 for every hit: its hybrid search was vector-only for months.)
- Vectors: cosine similarity clamped to [0, 1].
- Fusion: `weighted` (vector_weight·vector + text_weight·text over the union of candidates; every
  candidate gets both scores, so a keyword-only hit is never dropped for lacking a vector score) or
  `rrf` (reciprocal rank fusion, k = 60, Letta's). `benchmarks/memory.py` measures both.
- Optional MMR (Jaccard over lowercase words) and temporal decay for dated notes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

Fusion = Literal["weighted", "rrf"]
Mode = Literal["hybrid", "bm25", "vector"]

VECTOR_WEIGHT = 0.5
"""Share of the vector score in weighted fusion (OpenClaw uses 0.7 with raw cosines; with both sides
min-max normalised over the candidates, 0.7 let near-duplicates of the query's wording outrank the one
chunk holding its rare identifier, so the weights are even)."""
TEXT_WEIGHT = 0.5
"""Share of the full-text score in weighted fusion."""
RRF_K = 60
"""Reciprocal rank fusion's constant (Letta's)."""
CANDIDATE_MULTIPLIER = 4
"""Each side fetches this many times the wanted results before fusing (OpenClaw's default)."""
MMR_LAMBDA = 0.7
"""Relevance's share in maximal marginal relevance (the rest penalises similarity to picked results)."""
HALF_LIFE_DAYS = 30.0
"""Temporal decay's half-life for dated notes."""
DEFAULT_FUSION: Fusion = "weighted"
"""Kept after measuring both on the development set (LoCoMo dev, `benchmarks/memory.py`: evidence of
all turns within 2,000 characters 0.635 weighted, 0.643 rrf: 2 questions of 230) and the needles
(1.00 weighted, 0.80 rrf: ranks lose the exact-identifier boost of `index.exact_first`)."""

_WORDS = re.compile(r"\w+")
_DATED = re.compile(r"(?:^|/)(\d{4})-(\d{2})-(\d{2})\.md$")


@dataclass(frozen=True, slots=True)
class Scored:
    """One fused candidate: `key` is the backend's chunk key."""

    key: int
    score: float
    text_score: float
    vector_score: float


def normalize_text(relevance: Mapping[int, float]) -> dict[int, float]:
    """Positive relevance (higher better) to [0, 1]: the best hit 1, the others their share of it."""
    top = max((r for r in relevance.values() if r > 0), default=0.0)
    if top <= 0:
        return {key: 0.0 for key in relevance}
    return {key: max(r, 0.0) / top for key, r in relevance.items()}


def normalize_vector(scores: Mapping[int, float]) -> dict[int, float]:
    """Cosines min-max normalised over the candidates (an embedder's cosines crowd into a narrow band:
    spread over [0, 1] they weigh as much as the full-text side), scaled by the best cosine so a set of
    uniformly poor matches stays low."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high - low <= 1e-9:
        return {k: v for k, v in scores.items()}
    return {k: (v - low) / (high - low) * high for k, v in scores.items()}


def clamp_cosine(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def fuse(text: Mapping[int, float], vector: Mapping[int, float], *, mode: Mode = "hybrid",
         fusion: Fusion = DEFAULT_FUSION, vector_weight: float = VECTOR_WEIGHT,
         text_weight: float = TEXT_WEIGHT) -> list[Scored]:
    """Ranks candidates, best first. `text` holds normalized full-text scores, `vector` cosine scores
    (both for every candidate the backend could score; a missing one counts as 0)."""
    keys = set(text) | set(vector)
    if mode == "bm25":
        ranked = [Scored(k, text.get(k, 0.0), text.get(k, 0.0), vector.get(k, 0.0)) for k in text]
    elif mode == "vector":
        ranked = [Scored(k, vector.get(k, 0.0), text.get(k, 0.0), vector.get(k, 0.0)) for k in vector]
    elif fusion == "rrf":
        text_rank = {k: i for i, k in enumerate(sorted((k for k in text if text[k] > 0), key=lambda k: -text[k]))}
        vector_rank = {k: i for i, k in enumerate(sorted(vector, key=lambda k: -vector[k]))}
        ranked = []
        for k in keys:
            score = sum(1.0 / (RRF_K + rank[k] + 1) for rank in (text_rank, vector_rank) if k in rank)
            # Scaled so a candidate first on both sides scores 1 (comparable with min_score).
            ranked.append(Scored(k, score * (RRF_K + 1) / 2, text.get(k, 0.0), vector.get(k, 0.0)))
    else:
        total = vector_weight + text_weight
        vw, tw = (vector_weight / total, text_weight / total) if total > 0 else (0.5, 0.5)
        spread = normalize_vector(vector)
        ranked = [Scored(k, vw * spread.get(k, 0.0) + tw * text.get(k, 0.0), text.get(k, 0.0), vector.get(k, 0.0))
                  for k in keys]
    return sorted(ranked, key=lambda s: (-s.score, s.key))


def note_date(path: str) -> date | None:
    """The date of a dated note (`memory/…/YYYY-MM-DD.md`); None for MEMORY.md and undated files."""
    match = _DATED.search(path)
    if not match:
        return None
    try:
        return date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return None


def decay_factor(path: str, today: date, half_life_days: float = HALF_LIFE_DAYS) -> float:
    """exp(-ln2 / half_life · age in days) for a dated note; 1 for everything else."""
    when = note_date(path)
    if when is None or half_life_days <= 0:
        return 1.0
    age = max((today - when).days, 0)
    return math.exp(-math.log(2) / half_life_days * age)


def words(text: str) -> frozenset[str]:
    return frozenset(_WORDS.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def mmr(ranked: Sequence[Scored], texts: Mapping[int, str], k: int, lam: float = MMR_LAMBDA) -> list[Scored]:
    """Maximal marginal relevance: pick `k` of `ranked`, each maximizing λ·relevance − (1−λ)·its
    highest Jaccard similarity to those already picked (relevance min-max normalised first)."""
    if not ranked:
        return []
    scores = [s.score for s in ranked]
    low, high = min(scores), max(scores)
    span = high - low
    relevance = {s.key: (s.score - low) / span if span > 0 else 1.0 for s in ranked}
    bags = {s.key: words(texts.get(s.key, "")) for s in ranked}
    picked: list[Scored] = []
    left = list(ranked)
    while left and len(picked) < k:
        best = max(left, key=lambda s: lam * relevance[s.key]
                   - (1 - lam) * max((jaccard(bags[s.key], bags[p.key]) for p in picked), default=0.0))
        picked.append(best)
        left.remove(best)
    return picked
