"""The tokenizer families the estimator knows (`FAMILIES`) and the content types it tells apart
(`TYPES`): plain data, kept apart from the estimator so that the model registry (and everything that
asks a model's window) loads without numpy, which the estimator needs only once it counts."""

from __future__ import annotations

from dataclasses import dataclass

TYPES: tuple[str, ...] = ("prose", "code", "shell", "json", "cjk", "dense")


@dataclass(frozen=True, slots=True)
class Family:
    """How a tokenizer family is estimated: the fitted model of `base` times `ratio`."""

    name: str
    base: str  # "cl100k" or "o200k": whose fitted coefficients to use
    ratio: float  # tokens of this family per token of `base`
    image_pricing: str  # "anthropic", "openai" or "gemini" (see framing.image_tokens)
    note: str = ""
    type_ratios: tuple[tuple[str, float], ...] = ()  # content types whose ratio differs from `ratio`

    def ratio_of(self, kind: str) -> float:
        return dict(self.type_ratios).get(kind, self.ratio)


CLAUDE_JSON_RATIO = 1.06  # Claude tokens per cl100k token of JSON tool-call arguments (see FAMILIES)

# Ratios to the closest public tokenizer. Measured where we could, otherwise a stated assumption the
# calibrator corrects from the provider's usage after a few calls.
FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family("cl100k", "cl100k", 1.0, "openai", "exact fit"),
        Family("o200k", "o200k", 1.0, "openai", "exact fit"),
        Family("claude", "cl100k", 1.25, "anthropic",
               "Claude 3/4.x up to 4.6: 1.24-1.28x cl100k on the shared transcripts' tool output (usage deltas); "
               "JSON (tool-call arguments: code in escaped strings) 1.06x (output_tokens of the calls with over 500 "
               "tokens of arguments in the first half of the Pi session)", (("json", CLAUDE_JSON_RATIO),)),
        Family("claude-4.7", "cl100k", 1.55, "anthropic",
               "Claude Opus 4.7's new tokenizer: Anthropic says 1.0-1.35x earlier models; assumed 1.24x of 1.25",
               (("json", CLAUDE_JSON_RATIO * 1.24),)),
        Family("gemini", "o200k", 1.05, "gemini", "assumption: SentencePiece 256k vocab, close to o200k"),
        Family("llama3", "o200k", 1.05, "openai", "assumption: 128k tiktoken-style vocab, between cl100k and o200k"),
        Family("qwen", "cl100k", 1.0, "openai", "assumption: 151k BPE vocab close to cl100k on code and English"),
        Family("deepseek", "cl100k", 1.0, "openai", "assumption: 128k BPE vocab close to cl100k"),
        Family("mistral", "o200k", 1.05, "openai", "assumption: Tekken 131k tiktoken-style vocab"),
        Family("grok", "o200k", 1.05, "openai", "assumption: no public tokenizer; close to o200k"),
        Family("unknown", "cl100k", 1.1, "anthropic",
               "unknown model: cl100k plus 10 % so budgets err on the safe side"),
    )
}
