"""What a sequence of model calls costs, with prompt caching priced in.

The model, per call (input tokens only; output tokens are the same for every policy replayed on one
transcript, so they are left out):

- **Anthropic** (the default, `scheme="anthropic"`): the longest prefix the request shares with the
  previous request (`cached_tokens`) is a cache read at 0.1x the input price, provided the previous
  call was within the cache lifetime (5 minutes, refreshed by every hit; `ttl="1h"` for the 1-hour
  cache). Everything after it is a cache write at 1.25x (2x with the 1-hour cache): a harness marks
  the end of every request as a cache breakpoint, so what is not read is written. After the lifetime
  has passed, the whole request is a write.
- **OpenAI** (`scheme="openai"`): automatic caching, no write surcharge; the shared prefix is billed
  at the model's cached-input rate: 0.1x for the GPT-5 family (the current discount, and the default
  for models not in the table), 0.25x for GPT-4.1, 0.5x for GPT-4o and the o-series. Lifetime 5
  minutes of inactivity (OpenAI documents 5-10 minutes; the shorter is assumed).
- `cost_uncached_usd` prices every token at the input rate: what the calls cost with no cache.
- `recorded` usage (what a harness really sent) is priced from its own cache reads and writes, with
  1-hour writes at 2x when the transcript says which writes went to the 1-hour cache.

Caches and prices are per model: a call is priced at the input price of the model that made it, and
it can only read what an earlier call *of the same model* left in the cache (a session that runs Opus,
then a stretch of Haiku calls, then Opus again finds Opus's prefix gone if the Haiku stretch outlived
the cache lifetime, and Haiku starts from an empty cache). `CallTokens.model` names the call's model;
None means the pricing's own model.

Simplifications, the same for every policy: a cache hit needs the prefix of the previous request
only (an older cached prefix is not looked up), and the providers' minimum cacheable length (1,024 to
4,096 tokens) is ignored, since every request replayed here is far above it.

The price table (USD per million input tokens, from Anthropic's and OpenAI's pricing pages, read
November 2026), `pricing_for` and the per-call cache model `call_costs` are in `ctxwin.tokens.prices`,
where the proxy's live page prices with them too; they stay importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxwin.tokens.prices import (
    ANTHROPIC_READ,
    ANTHROPIC_WRITE,
    DEFAULT_INPUT_USD,
    INPUT_USD_PER_MTOK,
    OPENAI_CACHED,
    OPENAI_DEFAULT_CACHED,
    OPENAI_TTL_SECONDS,
    PRICE_SOURCE,
    SCHEMES,
    TTLS,
    CallCost,
    CallTokens,
    Pricing,
    call_costs,
    model_pricing,
    pricing_for,
)


@dataclass(frozen=True, slots=True)
class CostSummary:
    """Totals over a run. `*_units` are input-token equivalents (the unit measured-baselines.md uses);
    `*_usd` apply the model's input price."""

    tokens: int
    read_tokens: int
    write_tokens: int
    fresh_tokens: int
    cached_units: float
    uncached_units: float
    cached_usd: float
    uncached_usd: float
    expired_calls: int = 0

    @property
    def hit_rate(self) -> float:
        return self.read_tokens / self.tokens if self.tokens else 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {"tokens": self.tokens, "cache_read_tokens": self.read_tokens, "cache_write_tokens": self.write_tokens,
                "uncached_input_tokens": self.fresh_tokens, "cost_cached_units": round(self.cached_units),
                "cost_uncached_units": self.uncached_units, "cost_cached_usd": round(self.cached_usd, 4),
                "cost_uncached_usd": round(self.uncached_usd, 4), "cache_hit_rate": round(self.hit_rate, 4),
                "cache_expired_calls": self.expired_calls}


def summarize(costs: Sequence[CallCost], pricing: Pricing) -> CostSummary:
    """Totals of priced calls; USD sums each call at its own model's price (`pricing` is the run's
    default, used for calls priced without one)."""
    read = sum(c.read_tokens for c in costs)
    write = sum(c.write_tokens for c in costs)
    fresh = sum(c.fresh_tokens for c in costs)
    tokens = read + write + fresh
    units = sum(c.units for c in costs)
    usd = pricing.input_usd_per_mtok / 1_000_000
    cached_usd = sum(c.usd if c.model is not None else c.units * usd for c in costs)
    uncached_usd = sum(c.uncached_usd if c.model is not None else
                       (c.read_tokens + c.write_tokens + c.fresh_tokens) * usd for c in costs)
    return CostSummary(tokens, read, write, fresh, units, float(tokens), cached_usd, uncached_usd,
                       sum(1 for c in costs if c.expired))


def price_calls(calls: Sequence[CallTokens], pricing: Pricing) -> CostSummary:
    """Totals of a replayed run under `pricing`."""
    return summarize(call_costs(calls, pricing), pricing)


def recorded_cost(read: int, write: int, fresh: int, pricing: Pricing, write_1h: int = 0) -> CallCost:
    """One recorded call, priced from what the provider reported: cache reads, cache writes (of which
    `write_1h` went to the 1-hour cache) and uncached input, at `pricing` (the pricing of the model
    that made the call). Under the OpenAI scheme writes are plain input."""
    usd = pricing.input_usd_per_mtok / 1_000_000
    total = read + write + fresh
    if pricing.scheme == "openai":
        units = read * pricing.read_multiplier + fresh + write
        return CallCost(read, 0, fresh + write, units, usd=units * usd, uncached_usd=total * usd, model=pricing.model)
    write_1h = min(write_1h, write)
    units = (read * pricing.read_multiplier + (write - write_1h) * ANTHROPIC_WRITE["5m"]
             + write_1h * ANTHROPIC_WRITE["1h"] + fresh)
    return CallCost(read, write, fresh, units, usd=units * usd, uncached_usd=total * usd, model=pricing.model)


__all__ = [  # the names moved to ctxwin.tokens.prices are re-exported: callers import them from here
    "ANTHROPIC_READ", "ANTHROPIC_WRITE", "DEFAULT_INPUT_USD", "INPUT_USD_PER_MTOK", "OPENAI_CACHED",
    "OPENAI_DEFAULT_CACHED", "OPENAI_TTL_SECONDS", "PRICE_SOURCE", "SCHEMES", "TTLS", "CallCost", "CallTokens",
    "CostSummary", "Pricing", "call_costs", "model_pricing", "price_calls", "pricing_for", "recorded_cost",
    "summarize",
]
