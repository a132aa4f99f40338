"""Cheap text features for the token estimator, computed at C speed.

A text's UTF-8 bytes are mapped to a few character classes (lower, upper, digit, space, newline, kinds
of punctuation, lead bytes of CJK, Hangul, emoji ...) with `bytes.translate`, and the pairs of
adjacent classes are counted with one `numpy.bincount`. Every feature the estimator uses (how many
words start, how many digit runs, indentation, escapes, ideographs ...) is a sum over some of those
pair counts, so an estimate is one dot product of the pair counts with a weight vector per content
type and tokenizer. About 5 ns per byte, whatever the text.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from ctxwin.errors import ArgumentError, EncodingError

# Character classes of single bytes. Multi-byte characters are classified by their lead byte; their
# continuation bytes get a class of their own, so a character's byte length is visible too.
CLASS_NAMES: tuple[str, ...] = (
    "lower", "upper", "digit", "space", "newline", "tab", "ctrl",
    "dot", "comma", "colon", "quote", "open", "close", "slash", "backslash", "underscore", "dash", "op",
    "cont", "lead2", "sym3", "kana", "han", "hangul", "wide", "other3", "lead4", "bad",
)
START = 31  # a virtual class before the first byte, so that pair counts also give exact unigram counts
N_CLASSES = 32
N_PAIRS = N_CLASSES * N_CLASSES

_ID = {name: index for index, name in enumerate(CLASS_NAMES)}


def _class_table() -> bytes:
    table = bytearray(256)
    ranges: list[tuple[Iterable[int], str]] = [
        (range(0x61, 0x7B), "lower"), (range(0x41, 0x5B), "upper"), (range(0x30, 0x3A), "digit"),
        (b" ", "space"), (b"\n\r", "newline"), (b"\t", "tab"), ([*range(0, 9), 11, 12, *range(14, 32), 127], "ctrl"),
        (b".", "dot"), (b",", "comma"), (b":;", "colon"), (b"\"'`", "quote"), (b"([{<", "open"), (b")]}>", "close"),
        (b"/", "slash"), (b"\\", "backslash"), (b"_", "underscore"), (b"-", "dash"), (b"=+*%&|^~!?@#$", "op"),
        (range(0x80, 0xC0), "cont"), (range(0xC0, 0xE0), "lead2"), ([0xE2], "sym3"), ([0xE3], "kana"),
        (range(0xE4, 0xEA), "han"), (range(0xEA, 0xEE), "hangul"), ([0xEF], "wide"), ([0xE0, 0xE1, 0xEE], "other3"),
        (range(0xF0, 0xF8), "lead4"), (range(0xF8, 0x100), "bad"),
    ]
    for members, name in ranges:
        for byte in members:
            table[byte] = _ID[name]
    return bytes(table)


CLASS_TABLE = _class_table()

# Groups of classes the features are written in.
LETTER = frozenset({"lower", "upper"})
PUNCT = frozenset({"dot", "comma", "colon", "quote", "open", "close", "slash", "backslash", "underscore", "dash",
                   "op"})
WHITE = frozenset({"space", "newline", "tab", "ctrl"})
LEADS = frozenset({"lead2", "sym3", "kana", "han", "hangul", "wide", "other3", "lead4"})
ALL = frozenset(CLASS_NAMES) | {"start"}
ANY = ALL


@dataclass(frozen=True, slots=True)
class Feature:
    """A named count: the number of adjacent byte pairs whose first byte's class is in `before` and
    whose second byte's class is in `after`."""

    name: str
    before: frozenset[str]
    after: frozenset[str]


def _f(name: str, before: Iterable[str], after: Iterable[str]) -> Feature:
    return Feature(name, frozenset(before), frozenset(after))


def _not(group: Iterable[str]) -> frozenset[str]:
    return ALL - frozenset(group)


# The features, in the order of the fitted coefficients. Unigram counts of every class, then the
# transitions that start a new pre-token (a word, a number, a punctuation run) in the tokenizers'
# split patterns, then a few pairs that BPE merges or splits in a way the unigrams cannot show.
FEATURES: tuple[Feature, ...] = (
    *(_f(name, ANY, [name]) for name in CLASS_NAMES if name != "bad"),
    _f("word_starts", _not(LETTER), LETTER),
    _f("word_after_space", ["space"], LETTER),
    _f("word_after_punct", PUNCT, LETTER),
    _f("camel", ["lower"], ["upper"]),
    _f("capital", ["upper"], ["lower"]),
    _f("caps_run", ["upper"], ["upper"]),
    _f("number_starts", _not(["digit"]), ["digit"]),
    _f("letter_digit", LETTER, ["digit"]),
    _f("digit_letter", ["digit"], LETTER),
    _f("punct_starts", _not(PUNCT), PUNCT),
    _f("space_punct", ["space"], PUNCT),
    _f("punct_punct", PUNCT, PUNCT),
    _f("space_space", ["space"], ["space"]),
    _f("newline_space", ["newline"], ["space"]),
    _f("newline_tab", ["newline"], ["tab"]),
    _f("tab_tab", ["tab"], ["tab"]),
    _f("newline_newline", ["newline"], ["newline"]),
    _f("escape_letter", ["backslash"], LETTER),
    _f("escape_other", ["backslash"], _not(LETTER)),
    _f("punct_newline", PUNCT, ["newline"]),
    _f("foreign_starts", _not(LEADS | {"cont"}), LEADS),
    _f("lead2_after_ascii", _not(LEADS | {"cont"}), ["lead2"]),
    _f("han_after_ascii", _not(LEADS | {"cont"}), ["han", "kana"]),
    _f("sym3_after_ascii", _not(LEADS | {"cont"}), ["sym3"]),
    _f("emoji_after_ascii", _not(LEADS | {"cont"}), ["lead4"]),
    _f("hangul_after_ascii", _not(LEADS | {"cont"}), ["hangul"]),
    _f("space_after_foreign", ["cont"], WHITE),
    _f("digit_digit", ["digit"], ["digit"]),
    _f("dot_letter", ["dot"], LETTER),
    _f("slash_letter", ["slash"], LETTER),
    _f("underscore_letter", ["underscore"], LETTER),
    _f("quote_letter", ["quote"], LETTER),
    _f("letter_quote", LETTER, ["quote"]),
    _f("colon_space", ["colon", "comma"], ["space"]),
)
FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)


def _class_ids(names: frozenset[str]) -> list[int]:
    return [START if name == "start" else _ID[name] for name in names]


@lru_cache(maxsize=1)
def feature_matrix() -> np.ndarray:
    """The 0/1 matrix (pairs x features) that turns pair counts into feature counts (read-only)."""
    matrix = np.zeros((N_PAIRS, len(FEATURES)), dtype=np.float64)
    for column, feature in enumerate(FEATURES):
        for before in _class_ids(feature.before):
            for after in _class_ids(feature.after):
                matrix[before * N_CLASSES + after, column] = 1.0
    matrix.setflags(write=False)
    return matrix


_START_BYTE = bytes([START])


def pair_counts(data: bytes) -> np.ndarray:
    """How often each (class, next class) pair occurs in `data` (UTF-8 bytes), as a vector of
    `N_PAIRS` counts; the first byte is paired with the virtual START class."""
    classes = np.frombuffer(_START_BYTE + data.translate(CLASS_TABLE), dtype=np.uint8)
    # uint16 arithmetic, then one cast for bincount: measured 2-3x faster than computing in intp
    codes = (classes[:-1].astype(np.uint16) << 5) | classes[1:]
    return np.bincount(codes.astype(np.intp), minlength=N_PAIRS)


@lru_cache(maxsize=1)
def byte_pair_codes() -> np.ndarray:
    """The class-pair code of every two-byte sequence, indexed by the little-endian uint16 the two
    bytes make (first byte low): one `take` then turns a text's overlapping byte pairs into pair
    codes, with no per-byte arithmetic (read-only, 512 KB)."""
    classes = np.frombuffer(CLASS_TABLE, dtype=np.uint8).astype(np.intp)
    both = np.arange(1 << 16)
    table: np.ndarray = (classes[both & 0xFF] << 5) | classes[both >> 8]
    table.setflags(write=False)
    return table


_UINT16 = np.dtype("<u2")
_ONE_BYTE = (1,)


def byte_pairs(data: bytes) -> np.ndarray:
    """The overlapping byte pairs of `data` as little-endian uint16 values, without copying."""
    # positional arguments and a prebuilt dtype: this runs once per counted text
    return np.ndarray(max(len(data) - 1, 0), _UINT16, data, 0, _ONE_BYTE)


def start_code(data: bytes) -> int:
    """The pair code of the virtual START class and the first byte of non-empty `data`."""
    return (START << 5) | CLASS_TABLE[data[0]]


def features(data: bytes) -> np.ndarray:
    """The named feature counts of `data`, in the order of `FEATURE_NAMES` (for fitting)."""
    counts: np.ndarray = pair_counts(data) @ feature_matrix()
    return counts


# Non-ASCII characters. Byte classes cannot tell a common ideograph (one token) from a rare one (two
# or three byte tokens), so every character beyond ASCII also has a cost of its own per tokenizer:
# the tokens it takes on average in context (measured on the fit corpus; characters seen too rarely
# there get the tokens of the character alone). Their sum over a text is one more feature.
CHAR_COSTS_FILE = "char_costs.bin.gz"  # in ctxwin/tokens/data, written by benchmarks/fit_estimator.py
CHAR_COST_BASES: tuple[str, ...] = ("cl100k", "o200k")  # tables in the file, in this order
CHAR_COST_SCALE = 256  # costs are stored as little-endian uint16 in 1/256 of a token
ASTRAL = 0x10000  # one entry for every character beyond the BMP (emoji ...): their mean cost
CHAR_COST_ENTRIES = ASTRAL + 1


@lru_cache(maxsize=len(CHAR_COST_BASES))
def char_costs(base: str) -> np.ndarray:
    """Tokens per character (float32, indexed by code point, ASCII at 0, all astral characters at
    `ASTRAL`) for the tokenizer `base` ("cl100k" or "o200k"); read-only, shared."""
    if base not in CHAR_COST_BASES:
        raise ArgumentError(f"no character costs for {base!r}; known: {', '.join(CHAR_COST_BASES)}")
    raw = gzip.decompress(resources.files("ctxwin.tokens").joinpath("data", CHAR_COSTS_FILE).read_bytes())
    tables = np.frombuffer(raw, dtype="<u2")
    if tables.size != CHAR_COST_ENTRIES * len(CHAR_COST_BASES):
        raise EncodingError(f"{CHAR_COSTS_FILE} holds {tables.size} entries, expected "
                            f"{CHAR_COST_ENTRIES * len(CHAR_COST_BASES)}; re-run benchmarks/fit_estimator.py")
    start = CHAR_COST_BASES.index(base) * CHAR_COST_ENTRIES
    table = tables[start:start + CHAR_COST_ENTRIES].astype(np.float32) / CHAR_COST_SCALE
    table.setflags(write=False)
    return table


def encode_char_costs(tables: dict[str, np.ndarray]) -> bytes:
    """The data file for `tables` (one array of `CHAR_COST_ENTRIES` costs per base), gzipped."""
    packed = [np.clip(np.rint(tables[base] * CHAR_COST_SCALE), 0, 65535).astype("<u2") for base in CHAR_COST_BASES]
    return gzip.compress(np.concatenate(packed).tobytes(), mtime=0)


def char_cost(text: str, table: np.ndarray) -> float:
    """The summed cost of the non-ASCII characters of `text` under `table` (0 for ASCII text)."""
    if text.isascii():
        return 0.0
    # utf-32 gives code points in one C call; surrogatepass keeps a lone surrogate as its code point
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return float(table.take(points, mode="clip").sum())  # clip: every astral point lands on ASTRAL
