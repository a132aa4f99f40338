"""The scorers of `benchmarks/memory.py` (issue 24's figures come from them): a Letta answer counts
only as a whole token, a sum of money also in the records' form; the BM25 baseline ranks by its own
words; a turn is shown when its text or a 100-character piece of it is there."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "memory.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ctxwin_memory_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("truth", "text", "held"), [
    ("14", "### pers-0014 (owner: pers-0114)\nyear: 2014\ncvc: 614", False),  # a substring test found these
    ("3", "balance: 2.3 and 3.5", False),
    ("3", "she has 3 cards.", True),
    ("Linda Robbins", "### Linda Robbins (ID: pers-0042)", True),
    ("Linda Robbins", "### Linda Robbinson (ID: pers-0042)", False),
    ("$138,439.16", "balance: 138439.16\ncurrency: USD", True),
    ("$138,439.16", "balance: 138439.167", False),
])
def test_a_letta_answer_counts_only_as_a_whole_token(bench: ModuleType, truth: str, text: str, held: bool) -> None:
    assert bench.holds_answer(text, bench.answer_forms(truth)) is held


def test_answer_kinds(bench: ModuleType) -> None:
    assert [bench.answer_kind(t) for t in ("Tammy Roberts", "14", "18 records", "$103,763.64")] == [
        "name", "count", "count", "sum"]


def test_the_baseline_leaves_stopwords_out_only_when_asked(bench: ModuleType) -> None:
    docs = ["what did you do", "Caroline painted a lake", "what is it"]
    plain = bench.TurnBM25(docs)
    stopped = bench.TurnBM25(docs, stopwords=bench.BASELINE_STOPWORDS)
    assert plain.rank("what did Caroline paint")[0] == 0  # "what" and "did" outweigh one rare word
    assert stopped.rank("what did Caroline paint") == [1]
    assert stopped.rank("what is it") == [2, 0]  # nothing but stopwords: they are all it has


def test_a_turn_is_shown_whole_or_by_a_piece(bench: ModuleType) -> None:
    short, long = "Caroline: hi", "Melanie: " + "word " * 60
    assert bench.is_shown(short, f"x\n{short}\ny") and not bench.is_shown(short, "Caroline: h…")
    assert bench.is_shown(long, long[:120]) and not bench.is_shown(long, long[:60])
