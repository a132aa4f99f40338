"""Fit the token estimator and write src/ctxwin/tokens/coefficients.py and tokens/data/char_costs.bin.gz.

    python benchmarks/fit_estimator.py [--out PATH] [--char-costs PATH]

Fit set: the machine corpus of `token_corpus.machine_corpus()` plus the first half of every shared
session (weighted x3, they are what ctxwin will count). The second halves, the CJK samples in
benchmarks/data/cjk and a fresh draw of dense text are never seen here; `benchmarks/tokens.py`
measures on them.

Character costs: for every non-ASCII character, the tokens it takes in context, averaged over the fit
set (a token shared by several non-ASCII characters is split between them; ASCII characters in the
same token cost nothing here, the byte-class features count them); characters seen fewer than
`MIN_CHAR_SEEN` times get the tokens of the character alone.

Model: for each tokenizer (cl100k_base, o200k_base) and content type, tokens = features . beta, where
the features are the pair-count sums of `ctxwin.tokens.features` plus the character-cost sum. beta is
fitted by weighted least squares with weights 1 / tokens^`ERROR_POWER` (1 would weigh every token the
same, 2 every text the same: in between, the per-text error counts without the totals suffering), in
two levels: one universal beta for all types, then per type the deviation from it with a ridge
penalty, so a feature that is rare in one type's data keeps the universal coefficient instead of a
wild one. Each beta is then scaled so that its total over its fit texts is exact. The content-type
classifier is a least-squares linear discriminant on feature shares.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from ctxwin.tokens.encodings import get_encoding
from ctxwin.tokens.estimator import CHAR_COST, TYPES
from ctxwin.tokens.features import (
    ASTRAL,
    CHAR_COST_BASES,
    CHAR_COST_ENTRIES,
    CHAR_COSTS_FILE,
    FEATURE_NAMES,
    char_cost,
    encode_char_costs,
    features,
)
from ctxwin.transcripts import load_transcript
from token_corpus import REPO, halves, machine_corpus, transcript_files, transcript_items

ENCODINGS = {"cl100k": "cl100k_base", "o200k": "o200k_base"}
TRANSCRIPT_WEIGHT = 3.0  # real agent text counts three times a machine-corpus text
ERROR_POWER = 1.5  # least-squares weight 1 / tokens^p (see the docstring)
RIDGE_UNIVERSAL = 1e-3  # ridge on normalised columns for the universal fit
RIDGE_TYPE = 0.1  # ridge on the per-type deviation from the universal fit
RIDGE_CLASSIFIER = 1e-2
MIN_CHAR_SEEN = 3  # a character's in-context cost is used once it was seen this often
EMOJI = range(0x1F300, 0x1FB00)  # the astral entry is the mean cost of these, alone
LINE = 120  # the generated file keeps to the project's line length
OUT = REPO / "src" / "ctxwin" / "tokens" / "coefficients.py"
CHAR_COSTS_OUT = REPO / "src" / "ctxwin" / "tokens" / "data" / CHAR_COSTS_FILE


def fit_set() -> tuple[list[tuple[str, str]], list[float], list[str]]:
    items = list(machine_corpus(python=sys.executable))
    weights = [1.0] * len(items)
    sources = []
    for path in transcript_files():
        try:
            transcript = load_transcript(path)
        except Exception as error:  # a reader another engineer is still writing: say so, go on
            print(f"skipped {path.name}: {error}", file=sys.stderr)
            continue
        first, _ = halves(transcript_items(transcript))
        items += first
        weights += [TRANSCRIPT_WEIGHT] * len(first)
        sources.append(path.name)
    return items, weights, sources


def alone_costs(encoding_name: str) -> np.ndarray:
    """Tokens of every BMP character encoded alone, and the mean over emoji at `ASTRAL`."""
    encoding = get_encoding(encoding_name)
    table = np.zeros(CHAR_COST_ENTRIES)
    for point in range(0x80, ASTRAL):
        # a lone surrogate is replaced by U+FFFD when encoded: cost it like that
        char = "\ufffd" if 0xD800 <= point < 0xE000 else chr(point)
        table[point] = len(encoding.encode_ordinary(char))
    table[ASTRAL] = np.mean([len(encoding.encode_ordinary(chr(point))) for point in EMOJI])
    return table


def char_cost_table(encoding_name: str, texts: list[str]) -> tuple[np.ndarray, int]:
    """The in-context cost of each non-ASCII character over `texts` (see the docstring), and how
    many characters have one."""
    encoding = get_encoding(encoding_name)
    token_bytes: dict[int, int] = {}
    total = np.zeros(CHAR_COST_ENTRIES)
    seen = np.zeros(CHAR_COST_ENTRIES)
    for text in texts:
        if text.isascii():
            continue
        tokens = encoding.encode_ordinary(text)
        lengths = np.array([token_bytes.get(t) or token_bytes.setdefault(t, len(encoding.decode_single_token_bytes(t)))
                            for t in tokens])
        points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
        char_bytes = np.array([len(c.encode("utf-8", "surrogatepass")) for c in text])
        if lengths.sum() != char_bytes.sum():  # a lone surrogate: tiktoken encoded U+FFFD instead
            continue
        char_of_byte = np.repeat(np.arange(len(text)), char_bytes)
        token_of_byte = np.repeat(np.arange(len(tokens)), lengths)
        wide = points[char_of_byte] >= 0x80
        pairs = np.unique(token_of_byte[wide] * len(text) + char_of_byte[wide])
        token, char = pairs // len(text), pairs % len(text)
        share = 1.0 / np.bincount(token, minlength=len(tokens))[token]
        index = np.minimum(points[char], ASTRAL)
        np.add.at(total, index, share)
        np.add.at(seen, np.unique(np.stack([index, char]), axis=1)[0], 1)
    table = alone_costs(encoding_name)
    known = seen >= MIN_CHAR_SEEN
    known[:0x80] = False
    table[known] = total[known] / seen[known]
    table[:0x80] = 0.0
    return table, int(known.sum())


def design(items: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """Pair-feature counts and byte lengths of the texts."""
    data = [text.encode("utf-8", "surrogatepass") for _, text in items]
    return np.array([features(d) for d in data], dtype=np.float64), np.array([len(d) for d in data], dtype=np.float64)


def _solve(a: np.ndarray, b: np.ndarray, scale: np.ndarray, ridge: float) -> np.ndarray:
    an = a / scale
    return np.linalg.solve(an.T @ an + ridge * np.eye(an.shape[1]), an.T @ b) / scale


def fit_counts(x: np.ndarray, y: np.ndarray, kinds: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    w = np.sqrt(weights / np.maximum(y, 1.0) ** ERROR_POWER)
    a, b = x * w[:, None], y * w
    scale = np.sqrt((a**2).sum(axis=0)) + 1e-9
    universal = _solve(a, b, scale, RIDGE_UNIVERSAL)
    betas = {"universal": universal}
    for kind in TYPES:
        rows = kinds == kind
        if rows.any():
            betas[kind] = universal + _solve(a[rows], b[rows] - a[rows] @ universal, scale, RIDGE_TYPE)
    for kind, beta in betas.items():  # exact totals on the fit texts of the type
        rows = kinds == kind if kind != "universal" else np.ones(len(y), dtype=bool)
        betas[kind] = beta * (weights[rows] * y[rows]).sum() / (weights[rows] * (x[rows] @ beta)).sum()
    return betas


def shares(x: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Classifier inputs: each feature as a share of the text's bytes, plus log size and a bias
    (what `EstimatorCounter` computes from the pair counts)."""
    total = np.maximum(size, 1.0)
    return np.column_stack([x / total[:, None], np.log1p(total), np.ones(len(x))])


def fit_classifier(x: np.ndarray, size: np.ndarray, kinds: np.ndarray, weights: np.ndarray) -> np.ndarray:
    s = shares(x, size)
    targets = np.stack([(kinds == kind).astype(np.float64) for kind in TYPES], axis=1)
    w = np.sqrt(weights)[:, None]
    a = s * w
    scale = np.sqrt((a**2).sum(axis=0)) + 1e-9
    an = a / scale
    coef = np.linalg.solve(an.T @ an + RIDGE_CLASSIFIER * np.eye(an.shape[1]), an.T @ (targets * w))
    return coef / scale[:, None]


def _entries(pairs: list[tuple[str, float]], indent: str) -> list[str]:
    """`"name": value,` entries packed into lines of at most LINE characters."""
    lines, line = [], indent
    for name, value in pairs:
        entry = f'"{name}": {value:.6g},'
        if len(line) + len(entry) + 1 > LINE and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += entry + " "
    if line.strip():
        lines.append(line.rstrip())
    return lines


def render(betas: dict[str, dict[str, np.ndarray]], classifier: np.ndarray, sources: list[str], n: int) -> str:
    names = [*FEATURE_NAMES, CHAR_COST]
    lines = [
        '"""Fitted coefficients of the token estimator (generated by benchmarks/fit_estimator.py; do not edit).',
        "",
        *textwrap.wrap(f"Fit on {n} texts: the machine corpus and the first half of "
                       f"{', '.join(sources) or 'no sessions'}.", LINE),
        '"""',
        "",
        "# Tokens = sum of feature count x coefficient, per tokenizer and content type (see features.py).",
        "COUNT_COEFFICIENTS: dict[str, dict[str, dict[str, float]]] = {",
    ]
    for family, per_type in betas.items():
        lines.append(f'    "{family}": {{')
        for kind, beta in per_type.items():
            lines.append(f'        "{kind}": {{')
            lines += _entries([(k, v) for k, v in zip(names, beta, strict=True) if abs(v) > 1e-9], " " * 12)
            lines.append("        },")
        lines.append("    },")
    lines.append("}")
    lines.append("")
    lines.append("# Content-type scores: feature share of bytes x coefficient, plus log1p(bytes) and bias terms.")
    lines.append("CLASSIFIER_COEFFICIENTS: dict[str, dict[str, float]] = {")
    class_names = [*FEATURE_NAMES, "_log_bytes", "_bias"]
    for column, kind in enumerate(TYPES):
        lines.append(f'    "{kind}": {{')
        lines += _entries([(k, v) for k, v in zip(class_names, classifier[:, column], strict=True) if abs(v) > 1e-12],
                          " " * 8)
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--char-costs", type=Path, default=CHAR_COSTS_OUT)
    args = parser.parse_args()
    started = time.perf_counter()
    items, weights, sources = fit_set()
    texts = [text for _, text in items]
    x, size = design(items)
    kinds = np.array([kind for kind, _ in items])
    w = np.array(weights)
    betas, tables, known = {}, {}, {}
    for family, encoding_name in ENCODINGS.items():
        tables[family], known[family] = char_cost_table(encoding_name, texts)
        table = tables[family].astype(np.float32)
        costs = np.array([char_cost(text, table) for text in texts])
        encoding = get_encoding(encoding_name)
        y = np.array([len(encoding.encode_ordinary(text)) for text in texts], dtype=np.float64)
        betas[family] = fit_counts(np.column_stack([x, costs]), y, kinds, w)
    assert tuple(ENCODINGS) == CHAR_COST_BASES
    classifier = fit_classifier(x, size, kinds, w)
    predicted = np.array(TYPES)[np.argmax(shares(x, size) @ classifier, axis=1)]
    args.out.write_text(render(betas, classifier, sources, len(items)))
    args.char_costs.write_bytes(encode_char_costs(tables))
    print(json.dumps({"items": len(items), "sessions": sources,
                      "train_type_accuracy": float(np.mean(predicted == kinds)), "chars_with_context_cost": known,
                      "seconds": round(time.perf_counter() - started, 1),
                      "out": str(args.out), "char_costs": str(args.char_costs)}))


if __name__ == "__main__":
    main()
