"""Policies: what each pipeline stage does, as data. `get("ctxwin")` gives a preset; `load(path)`
reads a TOML file (any subset of fields; `base = "pi"` starts from a preset). The compaction section
is one model per strategy, chosen by its `strategy` field. Imports: errors and files (the guarded
reader); YAML through PyYAML for OpenClaw configs, on first use."""

from __future__ import annotations

import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ctxwin import files
from ctxwin.errors import ArgumentError, InputError
from ctxwin.policies.levels import LEVELS, at_level
from ctxwin.policies.model import (
    COMPACTION_MODELS,
    COMPACTION_SECTIONS,
    STRATEGIES,
    BootstrapPolicy,
    CheckpointCompaction,
    ClaudeCodeCompaction,
    CompactionPolicy,
    CompactionSection,
    CtxwinCompaction,
    DedupPolicy,
    FitPolicy,
    KeepsRecentSection,
    LettaCompaction,
    MaskPolicy,
    OpenClawCompaction,
    PiCompaction,
    Policy,
    PrunePolicy,
    ResultBudgetPolicy,
    SpillPolicy,
    compaction_for,
)
from ctxwin.policies.openclaw import Imported, from_openclaw

DEFAULT = "ctxwin"


def names() -> list[str]:
    """The preset names, ctxwin's default first."""
    found = sorted(p.name.removesuffix(".toml") for p in resources.files(__package__).joinpath("presets").iterdir()
                   if p.name.endswith(".toml"))
    return [DEFAULT, *[n for n in found if n != DEFAULT]]


def get(name: str | Path | Policy = DEFAULT) -> Policy:
    """A preset by name (`pi`, or `pi:aggressive` for a strategy level on top of it), a policy TOML
    file by path, or the policy itself."""
    if isinstance(name, Policy):
        return name
    if not isinstance(name, str | os.PathLike):
        raise ArgumentError(f"a policy is a preset name, a TOML file or a Policy, not {type(name).__name__}",
                            f"choose one of {', '.join(names())}, or give a .toml file")
    text = str(name)
    base, _, level = text.rpartition(":")
    if base and level in LEVELS:
        return at_level(get(base), level)
    if text.endswith(".toml") or "/" in text:
        return load(files.as_path(text, "a policy file"))
    if text not in names():  # (a look-up by name, not a file probe: a name is no path)
        raise InputError(f"unknown policy {text!r}", f"choose one of {', '.join(names())}, or give a .toml file")
    resource = resources.files(__package__).joinpath("presets", f"{text}.toml")
    return from_dict(tomllib.loads(resource.read_text("utf-8")), source=f"preset {text}")


MAX_BASE_DEPTH = 8
"""How many `base` files a policy may chain through."""


def _base(name: str, seen: tuple[str, ...]) -> Policy:
    if name.endswith(".toml") or "/" in name:
        path = Path(name)
        try:
            data = tomllib.loads(files.read_text(path))  # a regular file only: a FIFO would hang the read
        except (OSError, tomllib.TOMLDecodeError) as error:
            raise InputError(f"cannot read base policy {name}: {error}", "check the `base` path") from None
        return from_dict(data, source=name, _seen=seen)
    return get(name)


def load(path: Path) -> Policy:
    try:
        data = tomllib.loads(files.read_text(path))  # a regular file only: a FIFO would hang the read
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{path}: not valid TOML: {error}",
                         "fix the file; `ctxwin policies --show pi` prints an example") from None
    return from_dict(data, source=str(path))


def from_dict(data: dict[str, Any], *, source: str = "policy", _seen: tuple[str, ...] = ()) -> Policy:
    """A policy from plain data. `base = NAME` starts from that preset (or TOML file) and overrides
    field by field."""
    data = dict(data)
    base = data.pop("base", None)
    if base is not None:
        if str(base) in _seen or len(_seen) > MAX_BASE_DEPTH:
            raise InputError(f"{source}: `base` chain loops back to {base!r}", "give each policy a different base")
        merged = _base(str(base), (*_seen, str(base))).model_dump()
        compaction = data.get("compaction")
        if isinstance(compaction, dict) and compaction.get("strategy", merged["compaction"]["strategy"]) != \
                merged["compaction"]["strategy"]:
            # Another strategy: carry over only the knobs it shares with the base's.
            known = COMPACTION_MODELS.get(str(compaction["strategy"]))
            if known is not None:
                merged["compaction"] = {k: v for k, v in merged["compaction"].items() if k in known.model_fields}
        for key, value in data.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
        data = merged
    try:
        return Policy.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        raise InputError(f"{source}: invalid policy: {problems}",
                         "see `ctxwin policies --show ctxwin` for every field") from None


def openclaw_file(path: str | Path) -> Imported:
    """An OpenClaw config file (JSON, or YAML by its `.yaml`/`.yml` name) as a policy on top of the
    `openclaw` preset, with every key it could not map."""
    import yaml  # only OpenClaw configs are YAML: the policies themselves never need it

    text = files.read_text(path)
    try:
        data = yaml.safe_load(text) if str(path).endswith((".yaml", ".yml")) else files.loads_json(text)
    except (yaml.YAMLError, RecursionError, InputError) as error:
        what = "YAML" if str(path).endswith((".yaml", ".yml")) else "JSON"
        detail = error.message.removeprefix("not valid JSON: ") if isinstance(error, InputError) else str(error)
        raise InputError(f"{path}: not valid {what}: {detail}",
                         "fix the file; the keys read are listed in ctxwin.policies.openclaw") from None
    return from_openclaw(data, get("openclaw"))


def to_toml(policy: Policy, *, comments: bool = True) -> str:
    """The policy as TOML, every field, each with its description as a comment."""
    lines: list[str] = []
    data = policy.model_dump()
    fields = type(policy).model_fields
    for key, value in data.items():
        if not isinstance(value, dict):
            _emit(lines, key, value, fields[key].description if comments else None)
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append("")
            lines.append(f"[{key}]")
            stage_fields = type(getattr(policy, key)).model_fields
            for sub, sub_value in value.items():
                _emit(lines, sub, sub_value, stage_fields[sub].description if comments else None)
    return "\n".join(lines) + "\n"


def _emit(lines: list[str], key: str, value: Any, comment: str | None) -> None:
    if comment:
        lines.extend(f"# {line}" for line in comment.splitlines())
    if value is None:
        lines.append(f"# {key} is unset")
        return
    lines.append(f"{key} = {_toml_value(value)}")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


__all__ = [
    "COMPACTION_MODELS",
    "COMPACTION_SECTIONS",
    "DEFAULT",
    "LEVELS",
    "STRATEGIES",
    "BootstrapPolicy",
    "CheckpointCompaction",
    "ClaudeCodeCompaction",
    "CompactionPolicy",
    "CompactionSection",
    "CtxwinCompaction",
    "DedupPolicy",
    "FitPolicy",
    "KeepsRecentSection",
    "LettaCompaction",
    "MaskPolicy",
    "OpenClawCompaction",
    "PiCompaction",
    "Policy",
    "PrunePolicy",
    "ResultBudgetPolicy",
    "SpillPolicy",
    "at_level",
    "compaction_for",
    "from_dict",
    "get",
    "load",
    "names",
    "openclaw_file",
    "to_toml",
]
