"""Strategy levels: `aggressive`, `balanced` and `conservative` on top of any policy (OpenClaw's
`strategy` setting). `balanced` is the policy as it is; the other two move the same knobs the same
way whatever the strategy, so `pi:aggressive` and `ctxwin:aggressive` mean the same kind of change.

- aggressive: compact earlier (a trigger at 3/4 of its share of the window, or twice the reserve),
  keep half the recent tail, and mask outputs past half as many recent ones: smaller requests, more
  often summarized.
- conservative: compact later (5/4 of the share, at most 0.95; half the reserve), keep twice the
  tail, mask past twice as many: larger requests, closer to what the model would see unmanaged.
"""

from __future__ import annotations

from typing import Any, Literal

from ctxwin.errors import InputError
from ctxwin.policies.model import KeepsRecentSection, Policy

Level = Literal["aggressive", "balanced", "conservative"]
LEVELS: tuple[str, ...] = ("aggressive", "balanced", "conservative")
SCALE = {"aggressive": 0.5, "balanced": 1.0, "conservative": 2.0}
"""How each level scales what is kept (the recent tail, the unmasked outputs)."""
TRIGGER_SCALE = {"aggressive": 0.75, "balanced": 1.0, "conservative": 1.25}
"""How each level scales a trigger given as a share of the window."""
RESERVE_SCALE = {"aggressive": 2.0, "balanced": 1.0, "conservative": 0.5}
"""How each level scales a trigger given as a reserve below the window (a larger reserve: earlier)."""
MAX_TRIGGER_RATIO = 0.95
"""A conservative trigger never goes past this share of the window."""


def at_level(policy: Policy, level: str) -> Policy:
    """`policy` moved to `level`; named `<name>:<level>`."""
    if level not in LEVELS:
        raise InputError(f"unknown strategy level {level!r}", f"choose one of {', '.join(LEVELS)}")
    if level == "balanced":
        return policy.model_copy(update={"name": f"{policy.name}:{level}"})
    keep, trigger = SCALE[level], TRIGGER_SCALE[level]
    compaction: dict[str, Any] = {}
    section = policy.compaction
    if section.trigger_ratio is not None:
        compaction["trigger_ratio"] = min(section.trigger_ratio * trigger, MAX_TRIGGER_RATIO)
    else:
        compaction["reserve_tokens"] = int(section.reserve_tokens * RESERVE_SCALE[level])
    if isinstance(section, KeepsRecentSection):
        compaction["keep_recent_tokens"] = int(section.keep_recent_tokens * keep)
    target = getattr(section, "target_ratio", None)
    if target is not None:
        ceiling = compaction.get("trigger_ratio", section.trigger_ratio) or MAX_TRIGGER_RATIO
        compaction["target_ratio"] = min(target * trigger, ceiling * 0.9)
    mask = {"keep_last": max(int(policy.mask.keep_last * keep), 1)}
    data = policy.model_dump()
    data.update(name=f"{policy.name}:{level}", compaction={**data["compaction"], **compaction},
                mask={**data["mask"], **mask})
    return Policy.model_validate(data)  # validated: a level must not make a policy that could not be written
