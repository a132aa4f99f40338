"""The token estimator: content type first, then a per-type linear model of cheap features.

A text's content type (prose, code, shell output, JSON, CJK, dense text such as base64, hex and
UUIDs) is told from the shares of its byte-class pairs; its count is then a dot product of the pair
counts (see `features.py`), plus the summed cost of its non-ASCII characters, with weights fitted by
least squares against the real tokenizers (`benchmarks/fit_estimator.py`, which writes
`coefficients.py`). Tokenizers without a public vocabulary (Claude, Gemini, ...) use the model of the
closest public one times a family ratio; calibration against reported usage refines that.

Cost: one table look-up of every overlapping byte pair, a `bincount` of the class pairs and one small
matrix product per text (plus a table look-up per character for non-ASCII text): about 8-10 us per
call plus about 1 ns per byte, linear in the text whatever it holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ctxwin.errors import ArgumentError, EncodingError
from ctxwin.messages import Message
from ctxwin.tokens import coefficients
from ctxwin.tokens.families import FAMILIES, TYPES, Family
from ctxwin.tokens.features import (
    FEATURE_NAMES,
    N_PAIRS,
    byte_pair_codes,
    byte_pairs,
    char_cost,
    char_costs,
    feature_matrix,
    start_code,
)
from ctxwin.tokens.framing import count_message_with

_N_TYPES = len(TYPES)
CHAR_COST = "char_cost"  # the name of the non-ASCII cost feature in the coefficients

# No text of n bytes has more than n tokens (every token is at least one byte).
MAX_TOKENS_PER_BYTE = 1.0
# Nor, in any tokenizer we fit, fewer than one token per 32 bytes (only long runs of spaces come near).
MIN_TOKENS_PER_BYTE = 1 / 32


def _vector(values: dict[str, float], names: tuple[str, ...]) -> np.ndarray:
    unknown = set(values) - set(names) - {CHAR_COST}
    if unknown:
        raise EncodingError(f"coefficients for unknown features {sorted(unknown)}; re-run benchmarks/fit_estimator.py")
    return np.array([values.get(name, 0.0) for name in names], dtype=np.float64)


@dataclass(frozen=True)
class _Model:
    """A family's fitted model, premultiplied down to byte-class pairs: column t of `weights` gives
    the token count of type t, column len(TYPES) + t the type's classifier score."""

    weights: np.ndarray  # (N_PAIRS, 2 * len(TYPES)), float64, read-only
    weights_by_output: np.ndarray  # its transpose, contiguous: the faster side of the product
    first_byte_rows: tuple[tuple[float, ...], ...]  # by first byte: the row of the pair (START, byte)
    pair_codes: np.ndarray  # features.byte_pair_codes()
    char_weights: tuple[float, ...]  # per type: tokens per unit of non-ASCII character cost
    char_table: np.ndarray  # the base tokenizer's character costs
    scorers: tuple[tuple[int, int, float, float], ...]  # per type: index, score column, log1p(bytes) weight, bias


@lru_cache(maxsize=32)  # immutable, shared by every counter of the same family
def _build_model(family: Family) -> _Model:
    matrix = feature_matrix()
    per_type = coefficients.COUNT_COEFFICIENTS[family.base]
    typed = [per_type.get(kind, per_type["universal"]) for kind in TYPES]
    ratios = [family.ratio_of(kind) for kind in TYPES]
    counts = [matrix @ (_vector(values, FEATURE_NAMES) * ratio) for values, ratio in zip(typed, ratios, strict=True)]
    scores = [matrix @ _vector({k: v for k, v in coefficients.CLASSIFIER_COEFFICIENTS[kind].items()
                                if not k.startswith("_")}, FEATURE_NAMES) for kind in TYPES]
    weights = np.ascontiguousarray(np.column_stack(counts + scores))
    weights.setflags(write=False)
    classifier = coefficients.CLASSIFIER_COEFFICIENTS
    char_weights = tuple(values.get(CHAR_COST, 0.0) * ratio for values, ratio in zip(typed, ratios, strict=True))
    rows = weights.tolist()
    first_byte_rows = tuple(tuple(rows[start_code(bytes([byte]))]) for byte in range(256))
    by_output = np.ascontiguousarray(weights.T)
    by_output.setflags(write=False)
    scorers = tuple((index, _N_TYPES + index, classifier[kind].get("_log_bytes", 0.0),
                     classifier[kind].get("_bias", 0.0)) for index, kind in enumerate(TYPES))
    return _Model(weights, by_output, first_byte_rows, byte_pair_codes(), char_weights, char_costs(family.base),
                  scorers)


_ZEROS = (0.0,) * (2 * _N_TYPES)
_UNIT = np.ones(1 << 14)  # bincount weights for texts up to this many bytes
PAIR_SLICE = 1 << 20  # byte pairs turned into codes at a time for longer texts (8 MB of codes)
_UNIT.setflags(write=False)


def _encode(text: str) -> bytes:
    # surrogatepass: a lone surrogate (broken emoji from a truncated JSON string) still counts
    return text.encode("utf-8", "surrogatepass")


@dataclass(frozen=True, slots=True)
class Estimate:
    """An estimate with what it rests on (for reports and the benchmark)."""

    tokens: int
    content_type: str
    bytes: int


class EstimatorCounter:
    """Estimates tokens by content type for a tokenizer family (see `FAMILIES`): within a few
    percent of the real tokenizer over a session, at 50+ MB/s. `count_message` adds what providers
    bill around the text (framing, tool-call names, images)."""

    exact = False

    def __init__(self, family: str = "cl100k") -> None:
        if family not in FAMILIES:
            raise ArgumentError(f"unknown tokenizer family {family!r}; known: {', '.join(FAMILIES)}")
        self.family = FAMILIES[family]
        self.name = f"estimate:{family}"
        self._model = _build_model(self.family)

    def _estimate(self, text: str) -> tuple[float, int, int]:
        """(unclamped tokens, type index, bytes) of a non-empty text. The hot path: a handful of
        numpy calls whatever the length (their fixed cost is most of the time for a short text)."""
        data = _encode(text)
        size = len(data)
        model = self._model
        first = model.first_byte_rows[data[0]]  # the pair (START, first byte), counted apart
        if size > 1:
            pairs = _pair_counts(model.pair_codes, byte_pairs(data))
            out = model.weights_by_output.dot(pairs).tolist()
        else:
            out = _ZEROS
        inverse, log_size = 1.0 / size, math.log1p(size)
        kind, best = 0, -math.inf
        for index, column, slope, bias in model.scorers:
            score = (out[column] + first[column]) * inverse + slope * log_size + bias
            if score > best:
                kind, best = index, score
        tokens = out[kind] + first[kind]
        if not text.isascii():
            tokens += model.char_weights[kind] * char_cost(text, model.char_table)
        return tokens, kind, size

    def estimate(self, text: str) -> Estimate:
        if not text:
            return Estimate(0, "prose", 0)
        tokens, kind, size = self._estimate(text)
        return Estimate(_clamp(tokens, size), TYPES[kind], size)

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        tokens, _, size = self._estimate(text)
        return _clamp(tokens, size)

    def classify(self, text: str) -> str:
        return TYPES[self._estimate(text)[1]] if text else "prose"

    def count_message(self, message: Message) -> int:
        return count_message_with(self.count_text, message, self.family.image_pricing)


def _pair_counts(pair_codes: np.ndarray, byte_pair_view: np.ndarray) -> np.ndarray:
    """How often each class pair occurs, from the text's overlapping byte pairs. A long text is
    counted a slice at a time: `take` makes an 8-byte code per byte, so a 50 MB text at once would
    hold 400 MB."""
    if len(byte_pair_view) < len(_UNIT):
        # unit weights make bincount return floats, sparing a cast before the product
        return np.bincount(pair_codes.take(byte_pair_view), _UNIT[:len(byte_pair_view)], N_PAIRS)
    pairs = np.zeros(N_PAIRS, dtype=np.int64)
    for start in range(0, len(byte_pair_view), PAIR_SLICE):
        pairs += np.bincount(pair_codes.take(byte_pair_view[start:start + PAIR_SLICE]), minlength=N_PAIRS)
    return pairs


def _clamp(tokens: float, size: int) -> int:
    return round(min(max(tokens, size * MIN_TOKENS_PER_BYTE, 1.0), size * MAX_TOKENS_PER_BYTE))


@lru_cache(maxsize=1)
def _classifier() -> EstimatorCounter:
    return EstimatorCounter("cl100k")


def classify(text: str) -> str:
    """The content type of `text`: one of `TYPES` (prose, code, shell, json, cjk, dense)."""
    return _classifier().classify(text)
