"""OpenClaw's documented compaction settings, read into a ctxwin policy.

Accepted shapes (JSON or YAML, any subset): the `compaction` block (also under `agents.defaults`),
top-level `context_window`, `max_turns`, `summary_after`, `strategy` (aggressive | balanced |
conservative: the level is applied to the preset first, so values the config sets explicitly are kept
as written) and `preserveRecent`, and `session.compact.autoTrigger {tokenThreshold, turnThreshold}`.
The result starts from ctxwin's `openclaw` preset. Every key that has no ctxwin counterpart is
reported by its dotted path with the reason, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxwin.errors import InputError
from ctxwin.policies.levels import LEVELS, at_level
from ctxwin.policies.model import COMPACTION_MODELS, Policy, compaction_for

COMPACTION_KEYS = {
    "enabled": "enabled",
    "keepRecentTokens": "keep_recent_tokens",
    "reserveTokensFloor": "reserve_tokens",
    "reserveTokens": "reserve_tokens",
    "maxHistoryShare": "history_share",
    "recentTurnsPreserve": "keep_recent_turns",
    "preserveRecent": "keep_recent_turns",
}
"""OpenClaw's `compaction` keys with a ctxwin field of the same meaning."""
MODES = {"safeguard": "openclaw", "default": "pi"}
"""OpenClaw's compaction modes: safeguard is its own algorithm; default is plain Pi."""
TOP_KEYS = {"max_turns": "max_turns", "summary_after": "summary_after", "preserveRecent": "keep_recent_turns"}
TRIGGER_KEYS = {"tokenThreshold": "trigger_tokens", "turnThreshold": "trigger_turns"}
NOT_POLICY = {
    "context_window": "the window belongs to the model, not the policy: pass --window or use the model registry",
    "qualityGuard": "ctxwin's summaries are extractive and checked by the identifier guard; there is no retry loop",
    "timeoutSeconds": "set the LLM summarizer's timeout where it is constructed",
    "thinkingLevel": "a property of the summarizer model, not of the policy",
    "model": "choose the summarizer model where the LLMSummarizer is constructed",
    "provider": "choose the summarizer's provider where the LLMSummarizer is constructed",
}


@dataclass
class Imported:
    policy: Policy
    unmapped: dict[str, str] = field(default_factory=dict)
    """Dotted key path -> why it has no counterpart."""


def from_openclaw(config: Mapping[str, Any], base: Policy) -> Imported:
    """`config` (parsed JSON or YAML) as a policy on top of `base` (the `openclaw` preset)."""
    if not isinstance(config, Mapping):
        raise InputError("an OpenClaw config is a JSON or YAML object", "give the file that holds `compaction`")
    unmapped: dict[str, str] = {}
    section: dict[str, Any] = {}
    level: str | None = None
    strategy = base.compaction.strategy

    def compaction_block(block: Any, path: str) -> None:
        nonlocal strategy
        if not isinstance(block, Mapping):
            unmapped[path] = "not an object"
            return
        for key, value in block.items():
            where = f"{path}.{key}"
            if key == "mode":
                if value in MODES:
                    strategy = MODES[value]
                else:
                    unmapped[where] = f"unknown mode {value!r} (known: {', '.join(MODES)})"
            elif key == "identifierPolicy":
                if value in ("strict", "off"):
                    section["identifier_policy"] = value
                else:
                    unmapped[where] = f"{value!r}: ctxwin has strict and off (custom instructions are not supported)"
            elif key in COMPACTION_KEYS:
                section[COMPACTION_KEYS[key]] = value
            else:
                unmapped[where] = NOT_POLICY.get(key, "no ctxwin counterpart")

    for key, value in config.items():
        if key == "compaction":
            compaction_block(value, "compaction")
        elif key == "agents" and isinstance(value, Mapping) and isinstance(value.get("defaults"), Mapping):
            for sub, sub_value in value["defaults"].items():
                if sub == "compaction":
                    compaction_block(sub_value, "agents.defaults.compaction")
                else:
                    unmapped[f"agents.defaults.{sub}"] = "not a context-management setting"
        elif key == "session" and isinstance(value, Mapping):
            _session(value, section, unmapped)
        elif key in TOP_KEYS:
            section[TOP_KEYS[key]] = value
        elif key == "strategy":
            if value in LEVELS:
                level = value
            else:
                unmapped["strategy"] = f"unknown level {value!r} (known: {', '.join(LEVELS)})"
        else:
            unmapped[key] = NOT_POLICY.get(key, "no ctxwin counterpart")
    known = COMPACTION_MODELS[strategy].model_fields
    for key in [k for k in section if k not in known]:  # e.g. maxHistoryShare with mode "default" (Pi's)
        unmapped[key] = f"not a knob of the {strategy} strategy (the config's mode)"
        del section[key]
    try:
        # The level moves the preset's knobs; the values the config gives explicitly then win over it.
        plain = base.model_copy(update={"compaction": compaction_for(strategy, base.compaction)})
        leveled = at_level(plain, level) if level else plain
        compaction = compaction_for(strategy, leveled.compaction, **section)
        policy = leveled.model_copy(update={"name": "openclaw-import" + (f":{level}" if level else ""),
                                            "compaction": compaction,
                                            "description": "Imported from an OpenClaw config."})
        policy = Policy.model_validate(policy.model_dump())
    except (ValueError, TypeError) as error:
        raise InputError(f"the OpenClaw settings do not make a valid policy: {error}",
                         "check the values of the keys named") from None
    return Imported(policy, unmapped)


def _session(value: Mapping[str, Any], section: dict[str, Any], unmapped: dict[str, str]) -> None:
    for key, sub in value.items():
        if key != "compact" or not isinstance(sub, Mapping):
            unmapped[f"session.{key}"] = "not a context-management setting"
            continue
        for compact_key, compact_value in sub.items():
            where = f"session.compact.{compact_key}"
            if compact_key == "autoTrigger" and isinstance(compact_value, Mapping):
                for trigger, number in compact_value.items():
                    if trigger in TRIGGER_KEYS:
                        section[TRIGGER_KEYS[trigger]] = number
                    else:
                        unmapped[f"{where}.{trigger}"] = "no ctxwin counterpart"
            elif compact_key == "enabled":
                section["enabled"] = compact_value
            elif compact_key in COMPACTION_KEYS:
                section[COMPACTION_KEYS[compact_key]] = compact_value
            else:
                unmapped[where] = "no ctxwin counterpart"
