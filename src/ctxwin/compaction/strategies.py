"""The registry: one strategy object per compaction section of the policy
(`ctxwin.policies.COMPACTION_SECTIONS`), found by the section a policy holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ctxwin.compaction.checkpoint import CheckpointStrategy
from ctxwin.compaction.claude_code import ClaudeCodeStrategy
from ctxwin.compaction.ctxwin import CtxwinStrategy
from ctxwin.compaction.letta import LettaStrategy
from ctxwin.compaction.openclaw import OpenClawStrategy
from ctxwin.compaction.pi import PiStrategy
from ctxwin.compaction.strategy import Strategy
from ctxwin.errors import InputError
from ctxwin.policies.model import COMPACTION_SECTIONS, STRATEGIES, CompactionSection

IMPLEMENTATIONS: tuple[Strategy[Any], ...] = (
    PiStrategy(), OpenClawStrategy(), ClaudeCodeStrategy(), LettaStrategy(), CheckpointStrategy(), CtxwinStrategy())
BY_SECTION: Mapping[type[CompactionSection], Strategy[Any]] = {type(s).section: s for s in IMPLEMENTATIONS}
if set(BY_SECTION) != set(COMPACTION_SECTIONS):  # a section without a strategy, or the reverse
    raise ImportError("every compaction section of the policy needs exactly one strategy: "
                      f"{sorted(s.__name__ for s in set(BY_SECTION) ^ set(COMPACTION_SECTIONS))}")
BY_NAME: Mapping[str, Strategy[Any]] = {s.name: s for s in IMPLEMENTATIONS}
"""Every strategy by the name a policy gives in `compaction.strategy`."""


def strategy_for(policy: CompactionSection) -> Strategy[Any]:
    """The strategy of a compaction section."""
    found = BY_SECTION.get(type(policy)) or BY_NAME.get(policy.strategy)
    if found is None:
        raise InputError(f"unknown compaction strategy {policy.strategy!r}", f"choose one of {', '.join(STRATEGIES)}")
    return found
