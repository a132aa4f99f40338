"""Calibration from reported usage: converges on noisy streams with outliers, persists, and derives
pairs from a real session's recorded usage."""

from __future__ import annotations

import json
import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import shared_path
from ctxwin.tokens import CalibratedCounter, Calibrator, EstimatorCounter
from ctxwin.tokens.calibration import MAX_OBSERVATIONS, MAX_RATIO, MIN_COUNTED
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.health import transcript_observations


def _stream(rng: random.Random, factor: float, n: int, noise: float = 0.03,
            outliers: float = 0.15) -> list[tuple[int, int]]:
    """(counted, reported) pairs: reported = counted x factor x lognormal noise, and a share of
    outliers (an injected reminder that doubles a request, a cache quirk that halves it)."""
    pairs = []
    for _ in range(n):
        counted = rng.randint(1_000, 60_000)
        ratio = factor * math.exp(rng.gauss(0, noise))
        if rng.random() < outliers:
            ratio *= rng.choice([2.5, 0.4, 1.8, 0.6])
        pairs.append((counted, round(counted * ratio)))
    return pairs


def test_factor_is_one_before_any_observation() -> None:
    assert Calibrator().factor == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_converges_on_a_noisy_stream_with_outliers(seed: int) -> None:
    rng = random.Random(seed)
    calibrator = Calibrator()
    pairs = _stream(rng, 1.27, 40)
    for i, (counted, reported) in enumerate(pairs, 1):
        calibrator.observe(counted, reported)
        if i == 5:
            assert calibrator.factor == pytest.approx(1.27, rel=0.05)
    assert calibrator.factor == pytest.approx(1.27, rel=0.015)
    naive = sum(r for _, r in pairs) / sum(c for c, _ in pairs)
    assert abs(calibrator.factor - 1.27) < abs(naive - 1.27) or abs(naive - 1.27) < 0.01  # outliers ignored


def test_follows_a_session_whose_mix_changes() -> None:
    rng = random.Random(11)
    calibrator = Calibrator()
    for counted, reported in _stream(rng, 1.15, 60) + _stream(rng, 1.40, MAX_OBSERVATIONS):
        calibrator.observe(counted, reported)
    assert calibrator.factor == pytest.approx(1.40, rel=0.02)


def test_impossible_pairs_are_rejected() -> None:
    calibrator = Calibrator()
    assert not calibrator.observe(MIN_COUNTED - 1, 100)
    assert not calibrator.observe(10_000, 0)
    assert not calibrator.observe(10_000, int(10_000 * MAX_RATIO * 2))
    assert calibrator.observe(10_000, 12_000)
    assert calibrator.rejected == 3 and len(calibrator.observations) == 1
    assert 1.0 < calibrator.factor < 1.2  # one pair, and the prior of 1.0 weighing like a small one
    for _ in range(10):
        calibrator.observe(10_000, 12_000)
    assert calibrator.factor == pytest.approx(1.2, rel=0.02)


def test_state_persists_through_to_dict_and_from_dict() -> None:
    calibrator = Calibrator()
    for counted, reported in _stream(random.Random(3), 0.93, 30):
        calibrator.observe(counted, reported)
    calibrator.observe(1, 1)
    state = json.loads(json.dumps(calibrator.to_dict()))  # stored with the session as JSON
    restored = Calibrator.from_dict(state)
    assert restored.factor == calibrator.factor
    assert restored.observations == calibrator.observations and restored.rejected == 1
    restored.observe(20_000, 18_600)
    calibrator.observe(20_000, 18_600)
    assert restored.factor == calibrator.factor
    assert Calibrator.from_dict({}).factor == 1.0


def test_set_factor_seeds_a_known_factor() -> None:
    calibrator = Calibrator()
    calibrator.observe(10_000, 9_000)
    calibrator.set_factor(1.3)
    assert calibrator.factor == 1.3 and calibrator.observations == []
    assert Calibrator.from_dict(calibrator.to_dict()).factor == 1.3
    for counted, reported in _stream(random.Random(5), 1.2, 10, outliers=0):
        calibrator.observe(counted, reported)
    assert calibrator.factor == pytest.approx(1.2, rel=0.02)  # real usage refines the seed
    for bad in (0.0, -1.0, math.nan, math.inf, 100.0):
        with pytest.raises(ValueError):
            calibrator.set_factor(bad)


def test_calibrated_counter_multiplies_by_the_current_factor() -> None:
    calibrator = Calibrator()
    counter = CalibratedCounter(EstimatorCounter(), calibrator)
    text = "the agent reads the file and runs the tests " * 50
    raw = EstimatorCounter().count_text(text)
    assert counter.count_text(text) == raw and not counter.exact
    calibrator.set_factor(1.25)
    assert counter.count_text(text) == round(raw * 1.25)
    assert counter.name == "estimate:cl100k+calibrated"


@given(st.lists(st.tuples(st.integers(MIN_COUNTED, 200_000), st.floats(0.2, 5.0)), max_size=80))
@settings(max_examples=150, deadline=None)
def test_factor_stays_within_what_was_observed(pairs: list[tuple[int, float]]) -> None:
    calibrator = Calibrator()
    for counted, ratio in pairs:
        calibrator.observe(counted, max(1, round(counted * ratio)))
    kept = [reported / counted for counted, reported in calibrator.observations] + [calibrator.prior]
    assert min(kept) - 1e-9 <= calibrator.factor <= max(kept) + 1e-9


def test_pairs_from_a_real_session_give_the_claude_ratio() -> None:
    """The usage-delta method on a real Claude Code session: the claude estimator (cl100k x 1.25)
    is already within 15 % of what Claude billed, and calibrating on the first half brings the
    second half within 5 %."""
    transcript = load_transcript(shared_path("claude-code", "8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl"))
    pairs = transcript_observations(transcript, EstimatorCounter("claude"))
    assert len(pairs) >= 10
    assert all(p.counted > 0 and p.reported >= 500 and p.end > p.first for p in pairs)
    assert 0.85 < statistics.median(p.reported / p.counted for p in pairs) < 1.15
    half = len(pairs) // 2
    calibrator = Calibrator()
    for pair in pairs[:half]:
        calibrator.observe(pair.counted, pair.reported)
    held_out = pairs[half:]
    error = sum(p.counted for p in held_out) * calibrator.factor / sum(p.reported for p in held_out) - 1
    assert abs(error) < 0.05, error
