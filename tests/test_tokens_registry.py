"""The model registry: known models, dated and prefixed names, overrides, unknown models."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from ctxwin.errors import InputError
from ctxwin.tokens import FAMILIES, MODELS, UnknownModelWarning, model_info
from ctxwin.tokens.encodings import SPECS
from ctxwin.tokens.registry import DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT, ENV_OVERRIDES, canonical_name

MODELS_TOML = Path(__file__).parent / "fixtures" / "tokens" / "models.toml"


@pytest.fixture(autouse=True)
def _no_user_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_OVERRIDES, raising=False)


@pytest.mark.parametrize(("name", "window", "output", "family", "provider"), [
    ("claude-opus-4-6", 200_000, 128_000, "claude", "anthropic"),
    ("claude-sonnet-4-5", 200_000, 64_000, "claude", "anthropic"),
    ("claude-haiku-4-5", 200_000, 64_000, "claude", "anthropic"),
    ("claude-3-5-haiku", 200_000, 8_192, "claude", "anthropic"),
    ("gpt-4o", 128_000, 16_384, "o200k", "openai"),
    ("gpt-4.1", 1_047_576, 32_768, "o200k", "openai"),
    ("gpt-5", 400_000, 128_000, "o200k", "openai"),
    ("gpt-3.5-turbo", 16_385, 4_096, "cl100k", "openai"),
    ("o3", 200_000, 100_000, "o200k", "openai"),
    ("gemini-2.5-pro", 1_048_576, 65_536, "gemini", "google"),
    ("grok-4", 256_000, 64_000, "grok", "xai"),
    ("deepseek-chat", 128_000, 8_192, "deepseek", "deepseek"),
    ("qwen3-coder", 262_144, 65_536, "qwen", "qwen"),
    ("llama-3.3", 131_072, 8_192, "llama3", "meta"),
    ("mistral-large", 131_072, 32_768, "mistral", "mistral"),
])
def test_known_models(name: str, window: int, output: int, family: str, provider: str) -> None:
    info = model_info(name)
    assert (info.context_window, info.max_output, info.family, info.provider, info.known) == \
        (window, output, family, provider, True)


@pytest.mark.parametrize(("name", "canonical"), [
    ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),
    ("anthropic/claude-opus-4.5", "claude-opus-4-5"),  # OpenRouter's dotted version
    ("us.anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),  # Bedrock
    ("bedrock/us.anthropic.claude-sonnet-4-20250514-v1:0", "claude-sonnet-4"),
    ("claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"),  # Vertex
    ("openai/gpt-4o-2024-08-06", "gpt-4o"),
    ("GPT-4o-Mini", "gpt-4o-mini"),
    ("gemini-2.5-pro-preview-06-05", "gemini-2.5-pro"),
    ("grok-4-0709", "grok-4"),
    ("mistral-large-latest", "mistral-large"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b-instruct"),
    ("llama3.1:8b", "llama-3.1:8b"),  # Ollama
])
def test_dated_and_prefixed_names_resolve(name: str, canonical: str) -> None:
    assert canonical_name(name)[0] == canonical
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownModelWarning)
        info = model_info(name)
    assert info.known and info.name == name  # the name stays what the caller said


def test_longest_known_prefix_wins() -> None:
    assert model_info("gpt-4o-mini").context_window == 128_000  # gpt-4o, not gpt-4
    assert model_info("gpt-4-turbo-2024-04-09").context_window == 128_000  # gpt-4-turbo, not gpt-4
    assert model_info("gpt-4-0613").context_window == 8_192
    assert model_info("claude-opus-4-1-20250805").max_output == 32_000  # claude-opus-4-1, not claude-opus-4
    assert model_info("grok-4-fast-reasoning").context_window == 2_000_000


def test_one_million_window_when_asked_for() -> None:
    assert model_info("claude-sonnet-4-5[1m]").context_window == 1_000_000
    assert model_info("claude-sonnet-4-5").context_window == 200_000
    assert model_info("claude-3-5-haiku[1m]").context_window == 200_000  # no 1M variant


def test_registry_is_consistent() -> None:
    for info in MODELS.values():
        assert info.family in FAMILIES, info
        assert info.encoding is None or info.encoding in SPECS, info
        assert 0 < info.max_output <= info.context_window, info


def test_unknown_model_warns_and_gets_a_conservative_default() -> None:
    with pytest.warns(UnknownModelWarning, match="unknown model 'acme-brain-9'"):
        info = model_info("acme-brain-9")
    assert not info.known and info.name == "acme-brain-9"
    assert (info.context_window, info.max_output) == (DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT)
    assert FAMILIES[info.family].ratio > 1  # counts err on the safe side
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not model_info(None).known  # no model at all: the default, silently


def test_an_unknown_model_is_warned_about_once_per_place_not_once_per_engine() -> None:
    """A process that builds many engines for one unknown model (a proxy: one per session) says so once:
    looking up the counter must not reset the warnings' once-per-place memory."""
    from ctxwin.engine import ContextEngine

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # once per place, as Python shows warnings by default
        for _ in range(3):
            ContextEngine(model="acme-unknown-coder-3b")
    assert sum(issubclass(w.category, UnknownModelWarning) for w in caught) == 1


def test_overrides_from_a_mapping() -> None:
    overrides = {"my-model": {"context_window": 50_000, "max_output": 2_000, "family": "llama3"},
                 "claude-opus-4-6": {"context_window": 1_000_000}}
    mine = model_info("my-model", overrides=overrides)
    assert (mine.context_window, mine.max_output, mine.family, mine.known) == (50_000, 2_000, "llama3", True)
    opus = model_info("claude-opus-4-6-20260101", overrides=overrides)
    assert (opus.context_window, opus.max_output, opus.family) == (1_000_000, 128_000, "claude")  # fields kept


def test_overrides_from_a_toml_file_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    qwen = model_info("my-local-qwen", overrides_file=MODELS_TOML)
    assert (qwen.context_window, qwen.max_output, qwen.family, qwen.provider) == (32_768, 4_096, "qwen", "ollama")
    assert model_info("anthropic/claude-sonnet-4-5-20250929", overrides_file=MODELS_TOML).context_window == 150_000
    assert model_info("gpt-4o", overrides_file=MODELS_TOML).max_output == 4_000
    assert model_info("gpt-4o", overrides_file=MODELS_TOML).encoding == "o200k_base"
    monkeypatch.setenv(ENV_OVERRIDES, str(MODELS_TOML))
    assert model_info("my-local-qwen").context_window == 32_768
    # the mapping beats the file
    assert model_info("my-local-qwen", overrides={"my-local-qwen": {"context_window": 8_000}}).context_window == 8_000


@pytest.mark.parametrize(("content", "message"), [
    ("[models.x\n", "not valid TOML"),
    ('[models."x"]\nwindow = 5\n', "unknown fields"),
    ('[models."x"]\nfamily = "klingon"\n', "unknown family"),
    ('models = 3\n', "must be a table"),
])
def test_bad_override_files_are_clear_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "models.toml"
    path.write_text(content)
    with pytest.raises(InputError, match=message):
        model_info("x", overrides_file=path)
    with pytest.raises(InputError, match="does not exist"):
        model_info("x", overrides_file=tmp_path / "missing.toml")
