"""Model input prices and the prompt-caching cost of one call: the price table the evaluation's
replays and the proxy's live page both price tokens with (kept here, below both).

The cache model, per call, is described in `ctxwin.evaluation.cost` (Anthropic: a cache read of the
prefix shared with the previous call of the same model at 0.1x, the rest written at 1.25x, or 2x with
the 1-hour cache; OpenAI: the shared prefix at the model's cached-input rate, no write surcharge; after
the cache lifetime the whole request is uncached).

Prices are USD per million input tokens, from Anthropic's pricing page
(platform.claude.com/docs/en/about-claude/pricing) and OpenAI's (developers.openai.com/api/docs/pricing),
as read in November 2026. A model not in the table is priced at `DEFAULT_INPUT_USD` and says so
(`Pricing.known`).

Imports: nothing of ctxwin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxwin.errors import ArgumentError

SCHEMES: tuple[str, ...] = ("anthropic", "openai")
TTLS: dict[str, float] = {"5m": 300.0, "1h": 3600.0}
"""Cache lifetimes by name, in seconds."""

ANTHROPIC_READ = 0.1  # cache read (hit or refresh), as a multiple of the input price
ANTHROPIC_WRITE = {"5m": 1.25, "1h": 2.0}  # cache write, as a multiple of the input price, by lifetime
OPENAI_TTL_SECONDS = 300.0  # OpenAI keeps a prefix 5-10 minutes after its last use; the shorter is assumed
OPENAI_DEFAULT_CACHED = 0.1  # the current (GPT-5 family) cached-input rate, for models not in the table
DEFAULT_INPUT_USD = 3.0  # input price of a model not in the table (a mid-range model), USD per million
PRICE_SOURCE = "Anthropic and OpenAI pricing pages, read November 2026"

INPUT_USD_PER_MTOK: dict[str, float] = {
    # Anthropic. Keys are name prefixes; the longest matching prefix wins.
    "claude-opus-4-5": 5.0,
    "claude-opus-4-6": 5.0,
    "claude-opus-4-7": 5.0,
    "claude-opus-4-1": 15.0,
    "claude-opus-4": 15.0,
    "claude-3-opus": 15.0,
    "claude-sonnet-4": 3.0,
    "claude-3-7-sonnet": 3.0,
    "claude-3-5-sonnet": 3.0,
    "claude-haiku-4-5": 1.0,
    "claude-3-5-haiku": 0.8,
    "claude-3-haiku": 0.25,
    # OpenAI.
    "gpt-5-mini": 0.25,
    "gpt-5-nano": 0.05,
    "gpt-5": 1.25,
    "gpt-4.1-mini": 0.4,
    "gpt-4.1-nano": 0.1,
    "gpt-4.1": 2.0,
    "gpt-4o-mini": 0.15,
    "gpt-4o": 2.5,
    "o3": 2.0,
    "o4-mini": 1.1,
}
OPENAI_CACHED: dict[str, float] = {"gpt-5": 0.1, "gpt-4.1": 0.25, "gpt-4o": 0.5, "o3": 0.25, "o4-mini": 0.25}
"""OpenAI's cached-input rate as a multiple of the input price, by model prefix."""


@dataclass(frozen=True, slots=True)
class Pricing:
    """How calls are priced: the input price and the cache multipliers of one scheme and model."""

    scheme: str
    model: str | None
    input_usd_per_mtok: float
    read_multiplier: float
    write_multiplier: float
    ttl_seconds: float
    ttl: str
    known: bool = True

    def to_dict(self) -> dict[str, object]:
        return {"scheme": self.scheme, "model": self.model, "input_usd_per_mtok": self.input_usd_per_mtok,
                "cache_read_multiplier": self.read_multiplier, "cache_write_multiplier": self.write_multiplier,
                "cache_ttl_seconds": self.ttl_seconds, "price_known": self.known, "source": PRICE_SOURCE}


def _lookup(model: str | None, table: dict[str, float]) -> float | None:
    if not model:
        return None
    name = model.lower().rsplit("/", 1)[-1]
    best = max((key for key in table if name.startswith(key)), key=len, default=None)
    return table[best] if best is not None else None


def pricing_for(model: str | None, scheme: str = "anthropic", ttl: str = "5m") -> Pricing:
    """The pricing of `model` under a caching scheme. Raises ArgumentError for an unknown scheme or TTL."""
    if scheme not in SCHEMES:
        raise ArgumentError(f"unknown pricing scheme {scheme!r}: use one of {', '.join(SCHEMES)}")
    if ttl not in TTLS:
        raise ArgumentError(f"unknown cache lifetime {ttl!r}: use one of {', '.join(TTLS)}")
    price = _lookup(model, INPUT_USD_PER_MTOK)
    known = price is not None
    if price is None:
        price = DEFAULT_INPUT_USD
    if scheme == "anthropic":
        return Pricing(scheme, model, price, ANTHROPIC_READ, ANTHROPIC_WRITE[ttl], TTLS[ttl], ttl, known)
    cached = _lookup(model, OPENAI_CACHED)
    return Pricing(scheme, model, price, OPENAI_DEFAULT_CACHED if cached is None else cached, 1.0,
                   OPENAI_TTL_SECONDS, ttl, known)


@dataclass(frozen=True, slots=True)
class CallTokens:
    """One call as the cost model sees it: tokens sent, the prefix shared with the previous request,
    and when it was made (seconds since the epoch; None: unknown, assumed within the cache lifetime)."""

    tokens: int
    cached_tokens: int = 0
    """The prefix this request shares with the previous request of the same model."""
    timestamp: float | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class CallCost:
    """What one call was billed: tokens read from the cache, written to it, and sent uncached, the
    cost in input-token units (tokens x multiplier), and in USD at its model's price (`uncached_usd`:
    every token at the input price)."""

    read_tokens: int
    write_tokens: int
    fresh_tokens: int
    units: float
    expired: bool = False
    usd: float = 0.0
    uncached_usd: float = 0.0
    model: str | None = None


def model_pricing(pricing: Pricing, model: str | None) -> Pricing:
    """The pricing of `model` under the same scheme and cache lifetime (`pricing` itself for its model)."""
    if model is None or model == pricing.model:
        return pricing
    return pricing_for(model, pricing.scheme, pricing.ttl)


def call_costs(calls: Sequence[CallTokens], pricing: Pricing) -> list[CallCost]:
    """The cost of each call, in order: each at its model's price, reading only what the previous
    call of the same model cached (a model's first call never reads the cache)."""
    out: list[CallCost] = []
    previous: dict[str | None, CallTokens] = {}
    prices: dict[str | None, Pricing] = {}
    for call in calls:
        model = call.model or pricing.model
        price = prices.get(model) or prices.setdefault(model, model_pricing(pricing, model))
        last = previous.get(model)
        expired = (last is not None and call.timestamp is not None and last.timestamp is not None
                   and call.timestamp - last.timestamp > price.ttl_seconds)
        read = 0 if last is None or expired else max(0, min(call.cached_tokens, call.tokens))
        rest = call.tokens - read
        usd = price.input_usd_per_mtok / 1_000_000
        if price.write_multiplier == 1.0:  # no write surcharge: the rest is plain input
            units = read * price.read_multiplier + rest
            out.append(CallCost(read, 0, rest, units, expired, units * usd, call.tokens * usd, model))
        else:
            units = read * price.read_multiplier + rest * price.write_multiplier
            out.append(CallCost(read, rest, 0, units, expired, units * usd, call.tokens * usd, model))
        previous[model] = call
    return out
