"""The model registry: context window, output limit and tokenizer family of the common models.

`model_info("claude-opus-4-6")`, `model_info("openai/gpt-4o-2024-08-06")` and
`model_info("claude-3-opus-20240229")` all resolve: names are lower-cased, provider prefixes and
date or version suffixes are stripped, and the longest known name the rest starts with wins. A
`[1m]` or `-1m` suffix selects the 1M-token window of the models that offer one.

Users override or add models with a mapping (`overrides=`) or a TOML file (`overrides_file=`, or the
path in the CTXWIN_MODELS environment variable)::

    [models."my-local-qwen"]
    context_window = 32768
    max_output = 4096
    family = "qwen"

An unknown model gets `UNKNOWN` limits (a conservative window) and a `UnknownModelWarning`.
"""

from __future__ import annotations

import os
import re
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ctxwin.errors import InputError
from ctxwin.tokens.families import FAMILIES

ENV_OVERRIDES = "CTXWIN_MODELS"  # path of a TOML file of model overrides
DEFAULT_CONTEXT_WINDOW = 128_000  # an unknown model is assumed to have a window this small ...
DEFAULT_MAX_OUTPUT = 8_192  # ... and to answer in at most this many tokens
ONE_MILLION = 1_000_000


class UnknownModelWarning(UserWarning):
    """A model name the registry does not know: limits are a conservative guess."""


@dataclass(frozen=True, slots=True)
class ModelInfo:
    name: str
    context_window: int
    max_output: int
    family: str  # tokenizer family, a key of ctxwin.tokens.families.FAMILIES
    provider: str
    known: bool = True  # False: the limits are the conservative default for an unknown model
    encoding: str | None = None  # the exact tiktoken encoding, when the model has a public one

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "context_window": self.context_window, "max_output": self.max_output,
                "family": self.family, "provider": self.provider, "known": self.known, "encoding": self.encoding}


def _m(name: str, window: int, output: int, family: str, provider: str, encoding: str | None = None) -> ModelInfo:
    return ModelInfo(name, window, output, family, provider, True, encoding)


_O200K, _CL100K = "o200k_base", "cl100k_base"

# Limits as the providers document them (late 2025 / 2026). Keys are canonical name prefixes.
MODELS: dict[str, ModelInfo] = {info.name: info for info in (
    # Anthropic. 1M windows are opt-in (a beta header or a `[1m]` model name) for the models marked below.
    _m("claude-opus-4-7", 200_000, 128_000, "claude-4.7", "anthropic"),
    _m("claude-opus-4-6", 200_000, 128_000, "claude", "anthropic"),
    _m("claude-opus-4-5", 200_000, 64_000, "claude", "anthropic"),
    _m("claude-opus-4-1", 200_000, 32_000, "claude", "anthropic"),
    _m("claude-opus-4", 200_000, 32_000, "claude", "anthropic"),
    _m("claude-sonnet-4-6", 200_000, 64_000, "claude", "anthropic"),
    _m("claude-sonnet-4-5", 200_000, 64_000, "claude", "anthropic"),
    _m("claude-sonnet-4", 200_000, 64_000, "claude", "anthropic"),
    _m("claude-haiku-4-5", 200_000, 64_000, "claude", "anthropic"),
    _m("claude-3-7-sonnet", 200_000, 64_000, "claude", "anthropic"),
    _m("claude-3-5-sonnet", 200_000, 8_192, "claude", "anthropic"),
    _m("claude-3-5-haiku", 200_000, 8_192, "claude", "anthropic"),
    _m("claude-3-opus", 200_000, 4_096, "claude", "anthropic"),
    _m("claude-3-sonnet", 200_000, 4_096, "claude", "anthropic"),
    _m("claude-3-haiku", 200_000, 4_096, "claude", "anthropic"),
    _m("claude", 200_000, 8_192, "claude", "anthropic"),
    # OpenAI
    _m("gpt-5.2", 400_000, 128_000, "o200k", "openai", _O200K),
    _m("gpt-5.1", 400_000, 128_000, "o200k", "openai", _O200K),
    _m("gpt-5-chat", 128_000, 16_384, "o200k", "openai", _O200K),
    _m("gpt-5", 400_000, 128_000, "o200k", "openai", _O200K),
    _m("gpt-4.1", 1_047_576, 32_768, "o200k", "openai", _O200K),
    _m("gpt-4.5", 128_000, 16_384, "o200k", "openai", _O200K),
    _m("gpt-4o", 128_000, 16_384, "o200k", "openai", _O200K),
    _m("chatgpt-4o", 128_000, 16_384, "o200k", "openai", _O200K),
    _m("gpt-4-turbo", 128_000, 4_096, "cl100k", "openai", _CL100K),
    _m("gpt-4-32k", 32_768, 8_192, "cl100k", "openai", _CL100K),
    _m("gpt-4", 8_192, 8_192, "cl100k", "openai", _CL100K),
    _m("gpt-3.5-turbo", 16_385, 4_096, "cl100k", "openai", _CL100K),
    _m("gpt-oss", 131_072, 131_072, "o200k", "openai", _O200K),
    _m("codex-mini", 200_000, 100_000, "o200k", "openai", _O200K),
    _m("o4-mini", 200_000, 100_000, "o200k", "openai", _O200K),
    _m("o3", 200_000, 100_000, "o200k", "openai", _O200K),
    _m("o1-mini", 128_000, 65_536, "o200k", "openai", _O200K),
    _m("o1", 200_000, 100_000, "o200k", "openai", _O200K),
    # Google
    _m("gemini-3", 1_048_576, 65_536, "gemini", "google"),
    _m("gemini-2.5", 1_048_576, 65_536, "gemini", "google"),
    _m("gemini-2.0", 1_048_576, 8_192, "gemini", "google"),
    _m("gemini-1.5-pro", 2_097_152, 8_192, "gemini", "google"),
    _m("gemini-1.5", 1_048_576, 8_192, "gemini", "google"),
    _m("gemini", 1_048_576, 8_192, "gemini", "google"),
    # xAI
    _m("grok-4-fast", 2_000_000, 30_000, "grok", "xai"),
    _m("grok-4.1-fast", 2_000_000, 30_000, "grok", "xai"),
    _m("grok-code-fast", 256_000, 10_000, "grok", "xai"),
    _m("grok-4", 256_000, 64_000, "grok", "xai"),
    _m("grok-3", 131_072, 16_384, "grok", "xai"),
    _m("grok", 131_072, 16_384, "grok", "xai"),
    # DeepSeek
    _m("deepseek-reasoner", 128_000, 64_000, "deepseek", "deepseek"),
    _m("deepseek-chat", 128_000, 8_192, "deepseek", "deepseek"),
    _m("deepseek-r1", 128_000, 32_768, "deepseek", "deepseek"),
    _m("deepseek-v3", 128_000, 8_192, "deepseek", "deepseek"),
    _m("deepseek", 128_000, 8_192, "deepseek", "deepseek"),
    # Qwen
    _m("qwen3-coder", 262_144, 65_536, "qwen", "qwen"),
    _m("qwen3-max", 262_144, 65_536, "qwen", "qwen"),
    _m("qwen3", 131_072, 32_768, "qwen", "qwen"),
    _m("qwen2.5-coder", 32_768, 8_192, "qwen", "qwen"),
    _m("qwen-max", 32_768, 8_192, "qwen", "qwen"),
    _m("qwen-plus", 131_072, 8_192, "qwen", "qwen"),
    _m("qwen", 32_768, 8_192, "qwen", "qwen"),
    # Meta Llama
    _m("llama-4-scout", 10_000_000, 8_192, "llama3", "meta"),
    _m("llama-4-maverick", 1_048_576, 8_192, "llama3", "meta"),
    _m("llama-3.3", 131_072, 8_192, "llama3", "meta"),
    _m("llama-3.2", 131_072, 8_192, "llama3", "meta"),
    _m("llama-3.1", 131_072, 8_192, "llama3", "meta"),
    _m("llama-3", 8_192, 8_192, "llama3", "meta"),
    _m("llama", 131_072, 8_192, "llama3", "meta"),
    # Mistral
    _m("mistral-large", 131_072, 32_768, "mistral", "mistral"),
    _m("mistral-medium", 131_072, 32_768, "mistral", "mistral"),
    _m("mistral-small", 131_072, 32_768, "mistral", "mistral"),
    _m("codestral", 262_144, 32_768, "mistral", "mistral"),
    _m("devstral", 131_072, 32_768, "mistral", "mistral"),
    _m("magistral", 131_072, 40_000, "mistral", "mistral"),
    _m("ministral", 131_072, 32_768, "mistral", "mistral"),
    _m("mistral", 131_072, 32_768, "mistral", "mistral"),
)}

# Models that offer a 1M-token window when asked for (`[1m]` / `-1m` in the name).
ONE_MILLION_MODELS = ("claude-opus-4-7", "claude-opus-4-6", "claude-sonnet-4-6", "claude-sonnet-4-5", "claude-sonnet-4")

UNKNOWN = ModelInfo("unknown", DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT, "unknown", "unknown", known=False)

_PROVIDER_PREFIX = re.compile(r"^(?:[\w.-]+/)+|^(?:us|eu|apac|global)\.|^(?:anthropic|meta|mistral|amazon|google)\.")
_ONE_M = re.compile(r"(?:\[1m\]|-1m)$")
_SUFFIXES = re.compile(r"(?:[-@:](?:\d{8}|\d{4}-\d{2}-\d{2}|v\d+(?::\d+)?|\d{4}|latest|preview(?:-[\w-]+)?|exp))+$")


def canonical_name(name: str) -> tuple[str, bool]:
    """The registry's form of a model name, and whether it asks for the 1M window:
    "Anthropic/Claude-Opus-4-6[1m]" -> ("claude-opus-4-6", True)."""
    if not isinstance(name, str):
        raise InputError(f"a model name is text, not {type(name).__name__}", 'pass the name, e.g. "claude-sonnet-4-5"')
    text = name.strip().lower()
    one_m = bool(_ONE_M.search(text))
    text = _ONE_M.sub("", text)
    stripped = None
    while stripped != text:  # "bedrock/us.anthropic.claude..." has three
        stripped, text = text, _PROVIDER_PREFIX.sub("", text)
    text = _SUFFIXES.sub("", text)
    text = re.sub(r"^llama(?=\d)", "llama-", text)  # Ollama writes "llama3.1:8b"
    if text.startswith("claude"):
        text = re.sub(r"(\d)\.(\d)", r"\1-\2", text)  # OpenRouter writes "claude-opus-4.5"
    return text, one_m


def _lookup(name: str, table: Mapping[str, ModelInfo]) -> ModelInfo | None:
    best = None
    for key, info in table.items():
        if (name == key or name.startswith((key + "-", key + ".", key + ":"))) and (
                best is None or len(key) > len(best.name)):
            best = info
    return best


def model_info(name: str | None, overrides: Mapping[str, Mapping[str, Any]] | None = None,
               overrides_file: str | Path | None = None, *, warn: bool = True) -> ModelInfo:
    """What ctxwin knows of a model. Overrides (the mapping, then the TOML file, then the file named
    by CTXWIN_MODELS) take precedence over the built-in table, field by field. An unknown name gives
    `UNKNOWN`'s conservative limits and (unless `warn` is false) a `UnknownModelWarning`; no name gives
    them silently."""
    if not name:
        return UNKNOWN
    canonical, one_m = canonical_name(name)
    table = dict(MODELS)
    for source in (_file_overrides(os.environ.get(ENV_OVERRIDES)), _file_overrides(overrides_file), overrides or {}):
        table.update(_apply_overrides(source, table))
    info = table.get(canonical) or _lookup(canonical, table)
    if info is None:
        if not warn:
            return replace(UNKNOWN, name=name)
        warnings.warn(
            f"unknown model {name!r}: assuming a {DEFAULT_CONTEXT_WINDOW:,}-token window and {DEFAULT_MAX_OUTPUT:,} "
            f"output tokens; add it to a models TOML file (${ENV_OVERRIDES}) to set its limits",
            UnknownModelWarning, stacklevel=2)
        return replace(UNKNOWN, name=name)
    if one_m and info.name in ONE_MILLION_MODELS:
        info = replace(info, context_window=ONE_MILLION)
    return replace(info, name=name)


def _file_overrides(path: str | Path | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise InputError(f"models file {path} does not exist", f"create it or unset ${ENV_OVERRIDES}") from error
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"models file {path} is not valid TOML: {error}", "fix the file") from error
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise InputError(f"models file {path}: [models] must be a table of tables", 'write [models."name"] sections')
    return models


_FIELDS = {"context_window": int, "max_output": int, "family": str, "provider": str, "encoding": str}


def _apply_overrides(source: Mapping[str, Any], table: Mapping[str, ModelInfo]) -> dict[str, ModelInfo]:
    out = {}
    for raw_name, fields in source.items():
        if not isinstance(fields, Mapping):
            raise InputError(f"model override {raw_name!r} must be a table of fields",
                             f"use fields among {', '.join(_FIELDS)}")
        unknown = set(fields) - set(_FIELDS)
        if unknown:
            raise InputError(f"model override {raw_name!r} has unknown fields {sorted(unknown)}",
                             f"use fields among {', '.join(_FIELDS)}")
        name, _ = canonical_name(raw_name)
        base = table.get(name) or _lookup(name, table) or UNKNOWN
        values = {key: _FIELDS[key](value) for key, value in fields.items()}
        if values.get("family", base.family) not in FAMILIES:
            raise InputError(f"model override {raw_name!r}: unknown family {values['family']!r}",
                             f"use one of {', '.join(FAMILIES)}")
        out[name] = replace(base, name=name, known=True, **values)
    return out
