"""The prompt-caching cost model, on call sequences whose cost can be checked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwin.evaluation.cost import (
    DEFAULT_INPUT_USD,
    CallTokens,
    call_costs,
    price_calls,
    pricing_for,
    recorded_cost,
    summarize,
)

T0 = 1_700_000_000.0
CALLS = [
    CallTokens(1_000, 0, T0),  # first call: nothing cached yet
    CallTokens(1_500, 1_000, T0 + 60),  # a minute later: 1,000 read, 500 written
    CallTokens(2_000, 1_500, T0 + 60 + 400),  # 400 s later: past 5 minutes, the cache has expired
]


def test_anthropic_five_minutes_by_hand() -> None:
    pricing = pricing_for("claude-opus-4-6")
    costs = call_costs(CALLS, pricing)
    assert [c.units for c in costs] == pytest.approx([1_250, 100 + 625, 2_500])
    assert [(c.read_tokens, c.write_tokens, c.fresh_tokens) for c in costs] == [(0, 1000, 0), (1000, 500, 0),
                                                                                (0, 2000, 0)]
    assert [c.expired for c in costs] == [False, False, True]
    total = price_calls(CALLS, pricing)
    assert total.cached_units == pytest.approx(4_475)
    assert total.uncached_units == 4_500
    assert total.cached_usd == pytest.approx(4_475 * 5.0 / 1e6)  # Opus 4.6: $5 per million input tokens
    assert total.uncached_usd == pytest.approx(4_500 * 5.0 / 1e6)
    assert total.expired_calls == 1
    assert total.hit_rate == pytest.approx(1_000 / 4_500)


def test_anthropic_one_hour_cache_writes_cost_double_and_do_not_expire_here() -> None:
    costs = call_costs(CALLS, pricing_for("claude-opus-4-6", ttl="1h"))
    assert [c.units for c in costs] == pytest.approx([2_000, 100 + 1_000, 150 + 1_000])
    assert not any(c.expired for c in costs)


def test_openai_has_no_write_surcharge_and_its_own_discount() -> None:
    pricing = pricing_for("gpt-4o-2024-08-06", scheme="openai")
    assert pricing.read_multiplier == 0.5 and pricing.write_multiplier == 1.0
    costs = call_costs(CALLS, pricing)
    assert [c.units for c in costs] == pytest.approx([1_000, 500 + 500, 2_000])
    assert pricing_for("gpt-5", scheme="openai").read_multiplier == 0.1
    assert pricing_for("claude-opus-4-6", scheme="openai").read_multiplier == 0.1  # not in the table: GPT-5's


def test_without_timestamps_the_cache_never_expires_and_cached_is_clipped() -> None:
    calls = [CallTokens(100), CallTokens(50, 80), CallTokens(200, 50)]
    costs = call_costs(calls, pricing_for("claude-sonnet-4-5"))
    assert [(c.read_tokens, c.write_tokens) for c in costs] == [(0, 100), (50, 0), (50, 150)]


def test_prices_by_model() -> None:
    assert pricing_for("claude-opus-4-6").input_usd_per_mtok == 5.0
    assert pricing_for("claude-opus-4-5-20251101").input_usd_per_mtok == 5.0
    assert pricing_for("claude-opus-4-1-20250805").input_usd_per_mtok == 15.0
    assert pricing_for("anthropic/claude-sonnet-4-5").input_usd_per_mtok == 3.0
    assert pricing_for("claude-haiku-4-5").input_usd_per_mtok == 1.0
    unknown = pricing_for("my-local-model")
    assert unknown.input_usd_per_mtok == DEFAULT_INPUT_USD and not unknown.known
    with pytest.raises(ValueError, match="scheme"):
        pricing_for("claude-opus-4-6", scheme="bedrock")
    with pytest.raises(ValueError, match="lifetime"):
        pricing_for("claude-opus-4-6", ttl="2h")


def test_recorded_usage_is_priced_from_its_own_reads_and_writes() -> None:
    pricing = pricing_for("claude-opus-4-6")
    cost = recorded_cost(read=10_000, write=2_000, fresh=3, pricing=pricing, write_1h=500)
    assert cost.units == pytest.approx(10_000 * 0.1 + 1_500 * 1.25 + 500 * 2.0 + 3)
    openai = recorded_cost(read=10_000, write=2_000, fresh=3, pricing=pricing_for("gpt-4.1", scheme="openai"))
    assert openai.units == pytest.approx(10_000 * 0.25 + 2_003)


@given(st.lists(st.tuples(st.integers(0, 200_000), st.integers(0, 200_000), st.floats(0, 3_600)), max_size=30),
       st.sampled_from(["anthropic", "openai"]), st.sampled_from(["5m", "1h"]))
def test_cached_cost_is_bounded_by_the_multipliers(rows: list[tuple[int, int, float]], scheme: str, ttl: str) -> None:
    clock = T0
    calls = []
    for tokens, cached, gap in rows:
        clock += gap
        calls.append(CallTokens(tokens, cached, clock))
    pricing = pricing_for("claude-opus-4-6", scheme, ttl)
    total = price_calls(calls, pricing)
    uncached = sum(c.tokens for c in calls)
    assert total.tokens == uncached
    assert pricing.read_multiplier * uncached - 1e-6 <= total.cached_units
    assert total.cached_units <= max(pricing.write_multiplier, 1.0) * uncached + 1e-6
    if calls:
        assert call_costs(calls, pricing)[0].read_tokens == 0


def test_a_model_switch_is_priced_per_model_with_a_cache_per_model() -> None:
    opus, haiku = "claude-opus-4-6", "claude-haiku-4-5"
    pricing = pricing_for(opus)
    calls = [
        CallTokens(10_000, 0, T0, opus),
        CallTokens(2_000, 0, T0 + 10, haiku),  # Haiku's first call: its cache is empty, whatever Opus left
        CallTokens(3_000, 2_000, T0 + 20, haiku),
        CallTokens(12_000, 10_000, T0 + 30, opus),  # back to Opus: its own prefix, still within 5 minutes
        CallTokens(4_000, 3_000, T0 + 400, haiku),  # 380 s after Haiku's last call: expired
    ]
    costs = call_costs(calls, pricing)
    assert [(c.read_tokens, c.write_tokens) for c in costs] == [
        (0, 10_000), (0, 2_000), (2_000, 1_000), (10_000, 2_000), (0, 4_000)]
    assert [c.expired for c in costs] == [False, False, False, False, True]
    assert [c.model for c in costs] == [opus, haiku, haiku, opus, haiku]
    opus_usd, haiku_usd = 5.0 / 1e6, 1.0 / 1e6
    expected = [10_000 * 1.25 * opus_usd, 2_000 * 1.25 * haiku_usd, (2_000 * 0.1 + 1_000 * 1.25) * haiku_usd,
                (10_000 * 0.1 + 2_000 * 1.25) * opus_usd, 4_000 * 1.25 * haiku_usd]
    assert [c.usd for c in costs] == pytest.approx(expected)
    total = summarize(costs, pricing)
    assert total.cached_usd == pytest.approx(sum(expected))
    assert total.uncached_usd == pytest.approx((10_000 + 12_000) * opus_usd + (2_000 + 3_000 + 4_000) * haiku_usd)
    # One model throughout: exactly the single-model prices of before.
    same = call_costs([CallTokens(c.tokens, c.cached_tokens, c.timestamp) for c in calls], pricing)
    assert summarize(same, pricing).cached_usd == pytest.approx(summarize(same, pricing).cached_units * opus_usd)


def test_recorded_calls_are_priced_at_the_model_that_made_them() -> None:
    haiku = recorded_cost(read=1_000, write=100, fresh=10, pricing=pricing_for("claude-haiku-4-5"))
    opus = recorded_cost(read=1_000, write=100, fresh=10, pricing=pricing_for("claude-opus-4-6"))
    assert haiku.units == opus.units and opus.usd == pytest.approx(5 * haiku.usd)
    assert summarize([haiku, opus], pricing_for("claude-opus-4-6")).cached_usd == pytest.approx(6 * haiku.usd)
