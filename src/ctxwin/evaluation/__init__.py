"""Evaluation: replay real sessions under policies and measure what each would have sent, cost and kept.

- `compare(transcript, policies)`: tokens and cost (prompt caching priced in, per model) of every model
  call under each policy, next to the `raw`, `truncate`, `masking` and `recorded` baselines (`compare.py`,
  `cost.py`).
- `retention(transcripts, policies)`: recall of probe facts in the text of the view after each policy's
  compaction (and, second, with what its refs return), at the real compaction points (`retention.py`,
  `probes.py`).
- `needles(transcripts, policies)`: unique values injected into real tool outputs: still in view,
  recoverable through a verified handle, or lost (`needles.py`).
- `replay(transcript, policy)` / `iter_replay`: feed a transcript to an engine and prepare a request
  at every point the real agent called the model (`replay.py`).

An edge: imports anything below it (the engine, tools, transcripts), never the CLI.
"""

from ctxwin.evaluation.compare import (
    BASELINES,
    RECORDED,
    Comparison,
    PolicyRun,
    Progress,
    ReplaySetup,
    compare,
    latest_session,
    replay_setup,
)
from ctxwin.evaluation.cost import CallTokens, Pricing, price_calls, pricing_for
from ctxwin.evaluation.needles import NeedleResult, needles
from ctxwin.evaluation.probes import PROBE_TYPES
from ctxwin.evaluation.retention import RetentionResult, retention

__all__ = [
    "BASELINES",
    "PROBE_TYPES",
    "RECORDED",
    "CallTokens",
    "Comparison",
    "NeedleResult",
    "PolicyRun",
    "Pricing",
    "Progress",
    "ReplaySetup",
    "RetentionResult",
    "compare",
    "latest_session",
    "needles",
    "price_calls",
    "pricing_for",
    "replay_setup",
    "retention",
]
