"""Token accounting: counters behind one interface, a per-message cache, calibration from reported
usage, the model registry and the usage breakdown.

`counter_for(model)` picks the best counter: exact tiktoken counts (o200k_base, cl100k_base, loaded
offline from the vendored files) for OpenAI models, the content-type estimator with the model
family's ratio otherwise. Nothing here touches the network.

The counters load on first use: the estimator needs numpy, the exact counts tiktoken, and neither is
imported until a counter is asked for (`counter_for`, or the names below), so a registry look-up or
`import ctxwin.engine` costs neither.

Imports: errors, files, messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxwin.errors import ArgumentError
from ctxwin.lazy import lazy_exports
from ctxwin.tokens.base import TokenCounter
from ctxwin.tokens.breakdown import CATEGORIES, PRESSURE_LEVELS, Breakdown, Category, usage_breakdown
from ctxwin.tokens.cache import CachedCounter
from ctxwin.tokens.calibration import (
    CalibratedCounter,
    Calibrator,
    RecordedUsage,
    UsageObservation,
    usage_observations,
)
from ctxwin.tokens.families import FAMILIES, TYPES
from ctxwin.tokens.framing import image_tokens
from ctxwin.tokens.registry import MODELS, ModelInfo, UnknownModelWarning, model_info

if TYPE_CHECKING:
    from ctxwin.tokens.estimator import EstimatorCounter, classify
    from ctxwin.tokens.exact import TiktokenCounter

__getattr__ = lazy_exports(__name__, {"EstimatorCounter": "estimator", "classify": "estimator",
                                      "TiktokenCounter": "exact"})


def counter_for(model: str | None = None, *, exact: bool | None = None) -> TokenCounter:
    """The best counter for `model`: `TiktokenCounter` with the model's encoding for OpenAI models,
    else `EstimatorCounter` with the model's tokenizer family (cl100k ratios for no or an unknown
    model). `exact=False` forces the estimator (faster: 50+ MB/s against ~5-8 MB/s); `exact=True`
    asks for a real tokenizer and raises ValueError when the model has none."""
    # The breakdown and health say a model is unknown; not warning here needs no filter change, which
    # would reset every "once" registry and repeat the engine's own warning for each new engine.
    info = model_info(model, warn=False)
    if exact is not False and info.encoding:
        from ctxwin.tokens.exact import TiktokenCounter

        return TiktokenCounter(info.encoding)
    if exact:
        raise ArgumentError(f"no public tokenizer for {model!r} (family {info.family})",
                            "use the estimator (exact=None) and calibrate it")
    from ctxwin.tokens.estimator import EstimatorCounter

    return EstimatorCounter(info.family if model else "cl100k")


__all__ = [
    "CATEGORIES",
    "FAMILIES",
    "MODELS",
    "PRESSURE_LEVELS",
    "TYPES",
    "Breakdown",
    "CachedCounter",
    "CalibratedCounter",
    "Calibrator",
    "Category",
    "EstimatorCounter",
    "ModelInfo",
    "RecordedUsage",
    "TiktokenCounter",
    "TokenCounter",
    "UnknownModelWarning",
    "UsageObservation",
    "classify",
    "counter_for",
    "image_tokens",
    "model_info",
    "usage_breakdown",
    "usage_observations",
]
