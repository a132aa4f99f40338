"""Is this error a context overflow? A catalog of the real errors providers return when a request does
not fit the model's window, and one function that recognises them in whatever shape the error arrives:
a string, a parsed body, an httpx response or `HTTPStatusError`, an openai/anthropic SDK exception (by
duck typing, the SDKs need not be installed), our clients' `ProviderError`, or a usage record that
reports more input than the window holds (silent overflow).

What it must not match matters as much: rate limits that talk about tokens (OpenAI and Groq TPM errors
say "Request too large for model"), billing and quota errors, output-cap errors ("max_tokens: N > M"),
"context window too small" configuration errors and reasoning-constraint errors (OpenClaw excludes the
last two). Compacting in answer to those would destroy context for nothing.

Sources: Pi `packages/ai/src/utils/overflow.ts` (badlogic/pi-mono a2dbd625, earendil-works/pi 17c253c5)
and its live test `packages/ai/test/context-overflow.test.ts`; OpenClaw
`src/agents/pi-embedded-helpers/{errors.ts,provider-error-patterns.ts}` (openclaw/openclaw); and the
provider error bodies users pasted into the GitHub issues cited next to each entry.

(Long on purpose: most of it is the catalog, data with one real error body per provider.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SILENT_FILL_RATIO = 0.99  # a "length" stop, no output, input >= 99 % of the window: truncated overflow (Pi, MiMo)
MAX_HAYSTACK_CHARS = 20_000  # error text past this is ignored: the message sits at the front, and matching stays cheap
MAX_CAUSE_DEPTH = 4  # how far down an exception's __cause__ / __context__ chain to look
NO_BODY_STATUSES = (400, 413)  # an empty-bodied 400/413 is Cerebras' overflow (Pi); its empty 429 is a rate limit

_FLAGS = re.IGNORECASE | re.DOTALL
_N = r"[\d,]+"  # a token count as providers print it, thousands separators included
_Q = r"\\?[\"']"  # a quote in JSON, in a Python repr, or escaped inside a JSON string


@dataclass(frozen=True)
class OverflowPattern:
    """One provider wording of "the request does not fit". `example` is a real error body (or message,
    when only the message is known) as the provider returned it; `status` the HTTP status it came with
    (None when unknown); `source` where the example was seen."""

    provider: str
    regex: re.Pattern[str]
    example: str
    status: int | None
    source: str = ""

    def search(self, text: str) -> bool:
        return self.regex.search(text) is not None


@dataclass(frozen=True)
class OverflowMatch:
    """Why an error was judged an overflow. `observed_tokens` is what the provider counted against the
    window (input, plus the requested output where the provider adds it) and `limit_tokens` the window
    it named; either is None when the error does not say. `silent` is true when no error was raised
    and the overflow was read off the usage numbers."""

    provider: str
    pattern: str
    observed_tokens: int | None = None
    limit_tokens: int | None = None
    silent: bool = False


def _p(provider: str, regex: str, example: str, status: int | None, source: str) -> OverflowPattern:
    return OverflowPattern(provider, re.compile(regex, _FLAGS), example, status, source)


# Order matters: the first pattern that matches names the provider, so the specific wordings come before
# the ones several providers share, and the generic fallbacks come last. tests/test_overflow.py checks
# that every example is recognised by its own entry.
CATALOG: tuple[OverflowPattern, ...] = (
    # --- Anthropic and Bedrock ----------------------------------------------------------------------
    _p("bedrock", r"model returned the following errors:.{0,200}prompt is too long",
       '{"message":"The model returned the following errors: prompt is too long: 200049 tokens > 200000 maximum"}',
       400, "daisuke-awaji/moca#254 (Bedrock Converse wrapping Claude's error in a ValidationException)"),
    _p("anthropic", r"prompt is too long",
       '{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 219898 tokens '
       '> 200000 maximum"},"request_id":"req_011CVjxiYzEFcAQC4Fk87zw2"}',
       400, "earendil-works/pi#102; Pi overflow.ts"),
    _p("anthropic", r"input length and .{0,2}max_tokens.{0,2} exceed context limit",
       '{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed '
       'context limit: 178959 + 64000 > 200000, decrease input length or `max_tokens` and try again"},'
       '"request_id":"req_011CUB2XUHWkFnQzxcKBbjpF"}',
       400, "docker/docker-agent#569; anthropics/claude-code#228"),
    _p("anthropic", r"request_too_large",
       '{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}',
       413, "Pi overflow.ts (Anthropic 413 byte-size overflow); OpenClaw errors.ts"),
    _p("bedrock", r"input is too long for requested model",
       '{"message":"Input is too long for requested model."}',
       400, "aws-samples/assessment-generator#2 (ValidationException, httpStatusCode 400); Pi overflow.ts"),
    # --- OpenAI, Azure and the OpenAI-compatible servers -----------------------------------------------
    _p("openai", r"exceeds the context window",
       '{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and '
       'try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}',
       400, "dyad-sh/dyad#1672 (Responses API); Pi overflow.ts"),
    _p("azure", rf"input tokens exceed the configured limit of {_N} tokens",
       '{"error":{"message":"Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in '
       '509178 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":'
       '"messages","code":"context_length_exceeded"}}',
       400, "BerriAI/litellm#15968 (Azure OpenAI)"),
    _p("deepseek", rf"maximum context length is {_N} tokens.{{0,600}}{_Q}code{_Q}\s*:\s*{_Q}invalid_request_error",
       '{"error":{"message":"This model\'s maximum context length is 65536 tokens. However, you requested 66343 '
       'tokens (62247 in the messages, 4096 in the completion). Please reduce the length of the messages or '
       'completion.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}',
       400, "FoundationAgents/OpenManus#79; BerriAI/litellm#10431"),
    _p("vllm", rf"requested {_N} output tokens and your prompt contains at least {_N} input tokens",
       '{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, you requested 64 '
       'output tokens and your prompt contains at least 8129 input tokens, for a total of at least 8193 tokens. '
       'Please reduce the length of the input prompt or the number of requested output tokens.","type":'
       '"BadRequestError","param":"input_tokens","code":400}}',
       400, "vllm-project/vllm#33418 and PR #36197 (renderers/params.py wording); Pi overflow.ts (vLLM v0.8+)"),
    _p("openrouter", rf"endpoint'?s maximum context length is {_N} tokens",
       '{"error":{"message":"This endpoint\'s maximum context length is 131072 tokens. However, you requested '
       'about 141607 tokens (10535 of text input, 131072 in the output). Please reduce the length of either one, '
       'or use the \\"middle-out\\" transform to compress your prompt automatically.","code":400,"metadata":'
       '{"provider_name":"Chutes"}}}',
       400, "Aider-AI/aider#3721; Pi overflow.ts"),
    _p("openrouter", rf"exceeds (?:the )?maximum allowed input length of {_N} tokens?",
       "Input length 131393 exceeds the maximum allowed input length of 131040 tokens.",
       400, "Pi overflow.ts (OpenRouter/Poolside)"),
    _p("openai", rf"maximum context length is {_N} tokens\. however, you requested {_N} tokens",
       '{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, you requested 4130 '
       'tokens (3130 in the messages, 1000 in the completion). Please reduce the length of the messages or '
       'completion.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}',
       400, "Chanzhaoyu/chatgpt-web#354 (chat completions with max_tokens)"),
    _p("openai", rf"maximum context length is {_N} tokens\. however, your messages resulted in {_N} tokens",
       '{"error":{"message":"This model\'s maximum context length is 8192 tokens. However, your messages resulted '
       'in 8227 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":'
       '"messages","code":"context_length_exceeded"}}',
       400, "crewAIInc/crewAI-examples#121; microsoft/kernel-memory#516 (same body from Azure OpenAI)"),
    _p("openai", rf"maximum context length is {_N} tokens, however you requested {_N} tokens",
       '{"error":{"message":"This model\'s maximum context length is 8192 tokens, however you requested 8977 '
       'tokens (8977 in your prompt; 0 for the completion). Please reduce your prompt; or completion length.",'
       '"type":"invalid_request_error","param":null,"code":null}}',
       400, "OpenRouterTeam/openrouter-examples#10 (legacy completions wording)"),
    _p("openai", rf"exceeds (?:the )?(?:model'?s )?maximum context length(?: of {_N} tokens?|\s*\({_N}\))",
       "Requested token count exceeds the model's maximum context length of 131072 tokens",
       400, "Pi overflow.ts (OpenAI-compatible proxies, LiteLLM)"),
    _p("together", rf"input \({_N} tokens\) is longer than the model'?s context length \({_N} tokens\)",
       '{"error":{"message":"The input (516368 tokens) is longer than the model\'s context length (262144 '
       'tokens).","type":"invalid_request_error"}}',
       400, "Pi overflow.ts and overflow tests (Together AI)"),
    _p("huggingface-tgi", rf"`inputs` tokens \+ `max_new_tokens` must be <= {_N}",
       '{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 '
       '`inputs` tokens and 500 `max_new_tokens`","error_type":"validation"}',
       422, "text-generation-inference validation error (HF Inference endpoints)"),
    _p("cerebras", rf"current length is {_N} while limit is {_N}",
       "Please reduce the length of the messages or completion. Current length is 42328 while limit is 40000",
       400, "cline/cline#5140 (Cerebras qwen-3-235b)"),
    _p("groq", r"reduce the length of the messages or completion",
       '{"error":{"message":"Please reduce the length of the messages or completion.","type":'
       '"invalid_request_error","param":"messages","code":"context_length_exceeded"}}',
       400, "thepersonalaicompany/amurex-backend#51; OpenHands/OpenHands#1902; Pi overflow.ts"),
    # --- Google -------------------------------------------------------------------------------------
    _p("vertex", r"input token count.{0,40}exceeds the maximum number of tokens allowed.{0,400}badrequest",
       '{"error":{"code":400,"message":"The input token count (1200293) exceeds the maximum number of tokens '
       'allowed (1048576).","errors":[{"message":"The input token count (1200293) exceeds the maximum number of '
       'tokens allowed (1048576).","domain":"global","reason":"badRequest"}],"status":"INVALID_ARGUMENT"}}',
       400, "google-gemini/gemini-cli#6678 (Code Assist / Vertex error envelope)"),
    _p("gemini", r"input token count.{0,40}exceeds the maximum",
       '{"error":{"code":400,"message":"The input token count (132478) exceeds the maximum number of tokens '
       'allowed (131072).","status":"INVALID_ARGUMENT"}}',
       400, "google-gemini/gemini-cli#4118; Pi overflow.ts"),
    # --- xAI, Mistral, Cohere -------------------------------------------------------------------------
    _p("xai", rf"maximum prompt length is {_N}",
       '{"code":"Client specified an invalid argument","error":"This model\'s maximum prompt length is 131072 but '
       'the request contains 136973 tokens."}',
       400, "cline/cline#3120 (message); nocmt/LLMSearchPlus#2 (xAI error envelope); Pi overflow.ts"),
    _p("xai", rf"\[input_too_large\]|current message \({_N} tokens\) exceeds budget",
       "Failed to start sampling: [input_too_large] Current message (1149677 tokens) exceeds budget (975424 "
       "tokens)",
       400, "UKGovernmentBEIS/inspect_ai PR #5208 (xAI INVALID_ARGUMENT details)"),
    _p("mistral", rf"too large for model with {_N} maximum context length",
       '{"object":"error","message":"Prompt contains 140000 tokens and 0 draft tokens, too large for model with '
       '131072 maximum context length","type":"invalid_request_message_error","param":null,"code":"3051"}',
       400, "Pi overflow.ts and its live Mistral test (message)"),
    _p("cohere", rf"too many tokens: size limit exceeded by {_N} tokens",
       '{"id":"bda42bf8-db3f-4c32-bb2c-f76466e42a1e","message":"too many tokens: size limit exceeded by 19296 '
       'tokens. Try using shorter or fewer inputs. The limit for this model is 132000 tokens."}',
       400, "pydantic-ai model HTTP error tests (cohere-context-window case); Cohere error docs"),
    _p("cohere", rf"too many tokens: total number of tokens in the prompt cannot exceed {_N}",
       '{"message":"too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 4292. Try '
       'using a shorter prompt, or enabling prompt truncating. See https://docs.cohere.com/reference/generate for '
       'more details."}',
       400, "Cohere error reference (v1 generate); OpenClaw provider-error-patterns.ts"),
    # --- local servers --------------------------------------------------------------------------------
    _p("llama.cpp", r"exceeds the available context size|exceed_context_size_error",
       '{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size (8192 tokens), '
       'try increasing it","type":"exceed_context_size_error","n_prompt_tokens":13392,"n_ctx":8192}}',
       400, "llama.cpp tools/server (ERROR_TYPE_EXCEED_CONTEXT_SIZE); OpenClaw provider-error-patterns tests"),
    _p("lm-studio", r"greater than the context length",
       '{"error":"The number of tokens to keep from the initial prompt is greater than the context length. Try to '
       'load the model with a larger context length, or provide a shorter input"}',
       400, "anomalyco/opencode#2259; lmstudio-ai/lmstudio-bug-tracker#2205; Pi overflow.ts"),
    _p("lm-studio", rf"trying to keep the first {_N} tokens when context the overflows",
       '{"error":"Trying to keep the first 15857 tokens when context the overflows. However, the model is loaded '
       'with context length of only 8192 tokens, which is not enough. Try to load the model with a larger context '
       'length, or provide a shorter input"}',
       400, "lmstudio-ai/lmstudio-bug-tracker#237 and #546"),
    _p("lm-studio", rf"cannot truncate prompt with n_keep \({_N}\) >= n_ctx \({_N}\)",
       '{"error":"Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)"}',
       400, "anomalyco/opencode#11141 (LM Studio's llama.cpp engine)"),
    _p("ollama", r"prompt too long; exceeded (?:max )?context length",
       '{"error":"prompt too long; exceeded max context length by 4 tokens"}',
       400, "OpenClaw sanitize tests (Ollama API error 400); Pi overflow.ts"),
    # --- hosted routers and Chinese providers ---------------------------------------------------------
    _p("copilot", rf"prompt token count of {_N} exceeds the limit of {_N}",
       '{"error":{"message":"prompt token count of 138898 exceeds the limit of 64000","code":'
       '"model_max_prompt_tokens_exceeded"}}',
       400, "microsoft/copilot-intellij-feedback#94; microsoft/vscode#289514; Pi overflow.ts"),
    _p("minimax", r"context window exceeds limit",
       '{"type":"error","error":{"type":"bad_request_error","message":"invalid params, context window exceeds '
       'limit (2013)","http_code":"400"},"request_id":"06340988ef34a8f048d8267af65d3228"}',
       400, "rowboatlabs/rowboat#514; MiniMax-AI/MiniMax-M2#119; Pi overflow.ts"),
    _p("kimi", r"exceeded model token limit",
       '{"error":{"message":"Invalid request: Your request exceeded model token limit: 262144 (requested: '
       '291351)","type":"invalid_request_error"}}',
       400, "OpenClaw errors tests (Kimi 'model token limit'); Pi overflow.ts"),
    _p("z.ai", r"model_context_window_exceeded",
       '{"id":"chatcmpl-zai-1","object":"chat.completion","model":"glm-4.6","choices":[{"index":0,"message":'
       '{"role":"assistant","content":""},"finish_reason":"model_context_window_exceeded"}],"usage":'
       '{"prompt_tokens":204800,"completion_tokens":0,"total_tokens":204800}}',
       200, "OpenClaw errors.ts (z.ai/GLM finish_reason; Anthropic has the same stop_reason); Pi overflow.ts"),
    _p("z.ai", r"prompt exceeds max length",
       '{"error":{"code":"1261","message":"Prompt exceeds max length"}}',
       400, "tashfeenahmed/freellmapi#873 (Zhipu AI 400, code 1261)"),
    _p("dashscope", rf"range of input length should be \[\d+, ?{_N}\]",
       '{"error":{"message":"<400> InternalError.Algo.InvalidParameter: Range of input length should be [1, '
       '129024]","type":"invalid_request_error","param":null,"code":"invalid_parameter_error"}}',
       400, "Pi overflow.ts (DashScope / Qwen)"),
    _p("cerebras", r"(?m)^\s*4(?:00|13)\s*(?:status code)?\s*\(no body\)",
       "400 status code (no body)",
       400, "Pi overflow.ts and live test (Cerebras returns 400/413 with no body)"),
    # --- generic fallbacks ----------------------------------------------------------------------------
    _p("generic", r"maximum context length (?:has been )?exceeded",
       "This model's maximum context length has been exceeded. Please reduce the length of the messages.",
       400, "Niek/chatgpt-web#525"),
    _p("generic", r"context[_ ]length[_ ]exceeded|context_window_exceeded",
       'HTTP 400 "context length exceeded"',
       400, "Kilo-Org/cloud PR #2671 (OpenRouter minimax); Pi and OpenClaw generic fallbacks"),
    _p("generic", r"too many tokens|token limit exceeded",
       "llama_tokenize: too many tokens",
       None, "ollama/ollama#85; Pi generic fallbacks"),
    _p("generic", r"上下文过长|上下文超出|上下文长度超|超出最大上下文|请压缩上下文|超过模型最大上下文",
       "输入内容超过模型最大上下文长度",
       400, "OpenClaw errors.ts (Chinese proxy messages)"),
)

# Errors that share words with overflows but are not overflows. Checked first: compacting in answer to
# a rate limit, a bill or a bad setting would destroy context and fix nothing.
_NOT_OVERFLOW: tuple[re.Pattern[str], ...] = tuple(re.compile(p, _FLAGS) for p in (
    r"\brate[ _-]?limit",  # Anthropic rate_limit_error, OpenAI/Groq rate_limit_exceeded
    r"too many requests",
    r"tokens per (?:min(?:ute)?|hour|day)|\bt(?:pm|pd)\b|requests per (?:min(?:ute)?|hour|day)",  # TPM/TPD (Groq 413)
    r"throttl|please wait before trying again",  # Bedrock ThrottlingException: "Too many tokens, please wait ..."
    r"quota|resource[_ ]exhausted",  # OpenAI insufficient_quota, Gemini RESOURCE_EXHAUSTED, Vertex quota
    r"credit balance|billing|payment required|purchase credits|insufficient (?:credits|balance|funds)",
    r"context window.{0,80}(?:too small|minimum is)",  # OpenClaw: "Model context window too small (8192 tokens)"
    r"reasoning is (?:mandatory|required)|requires reasoning|reasoning.{0,60}cannot be disabled",  # OpenClaw
    # output-cap errors: the window is fine, max_tokens is over the model's output limit
    r"maximum allowed number of output tokens|max_tokens is too large|max tokens must be less than or equal",
    r"max[_ ]?(?:completion[_ ])?tokens\W{0,3}\s*must be (?:less than or equal|<=|at most)",
))

# Token counts named in overflow errors, as (regex, observed group(s), limit group). Observed is what the
# provider counted against the window; where it names input and output separately, their sum.
_COUNTS: tuple[tuple[re.Pattern[str], tuple[int, ...], int | None], ...] = tuple(
    (re.compile(rx, _FLAGS), obs, lim) for rx, obs, lim in (
        (rf"prompt is too long:\s*({_N})\s*tokens?\s*>\s*({_N})\s*maximum", (1,), 2),
        (rf"exceed context limit:\s*({_N})\s*\+\s*({_N})\s*>\s*({_N})", (1, 2), 3),
        (rf"maximum context length is ({_N}) tokens.{{0,120}}?for a total of at least ({_N}) tokens", (2,), 1),
        (rf"maximum context length is ({_N}) tokens.{{0,40}}?(?:you requested|resulted in|requested about)"
         rf"\s*({_N})\s*tokens", (2,), 1),
        (rf"configured limit of ({_N}) tokens\.\s*your messages resulted in ({_N}) tokens", (2,), 1),
        (rf"input token count\s*\(({_N})\)\s*exceeds the maximum number of tokens allowed\s*\(({_N})\)", (1,), 2),
        (rf"maximum prompt length is ({_N}) but the request contains ({_N}) tokens", (2,), 1),
        (rf"current message \(({_N}) tokens\) exceeds budget \(({_N}) tokens\)", (1,), 2),
        (rf"prompt token count of ({_N}) exceeds the limit of ({_N})", (1,), 2),
        (rf"request \(({_N}) tokens\) exceeds the available context size \(({_N}) tokens\)", (1,), 2),
        (rf"n_prompt_tokens{_Q}\s*:\s*({_N}).{{0,40}}n_ctx{_Q}\s*:\s*({_N})", (1,), 2),
        (rf"trying to keep the first ({_N}) tokens.{{0,120}}?context length of only ({_N}) tokens", (1,), 2),
        (rf"n_keep \(({_N})\) >= n_ctx \(({_N})\)", (1,), 2),
        (rf"prompt contains ({_N}) tokens.{{0,80}}?too large for model with ({_N}) maximum context length", (1,), 2),
        (rf"exceeded model token limit:\s*({_N})\s*\(requested:\s*({_N})\)", (2,), 1),
        (rf"cannot exceed ({_N}) - received ({_N})", (2,), 1),
        (rf"input \(({_N}) tokens\) is longer than the model'?s context length \(({_N}) tokens\)", (1,), 2),
        (rf"current length is ({_N}) while limit is ({_N})", (1,), 2),
        (rf"must be <= ({_N})\. given: ({_N}) `inputs` tokens and ({_N}) `max_new_tokens`", (2, 3), 1),
        (rf"input length ({_N}) exceeds the maximum allowed input length of ({_N})", (1,), 2),
        (rf"input length \(({_N})\) exceeds (?:the )?model'?s maximum context length \(({_N})\)", (1,), 2),
        (rf"size limit exceeded by ({_N}) tokens.{{0,80}}?limit for this model is ({_N}) tokens", (1, 2), 2),
        (rf"exceeded model token limit:\s*({_N})", (), 1),
        (rf"maximum context length of ({_N}) tokens", (), 1),
        (rf"range of input length should be \[\d+, ?({_N})\]", (), 1),
        (rf"requested\s+({_N})\s+tokens", (1,), None),  # OpenClaw extractObservedOverflowTokenCount
        (rf"resulted in\s+({_N})\s+tokens", (1,), None),
    )
)

_STATUS_PREFIX = re.compile(r"^\s*(?:error:?\s*)?(?:http\s*)?(?:error code:?\s*)?([1-5]\d\d)\b", re.IGNORECASE)
_LENGTH_STOPS = frozenset({"length", "max_tokens", "max_output_tokens", "model_length"})
_SUCCESS_KEYS = frozenset({"choices", "output", "stop_reason", "candidates"})
_USAGE_KEYS = frozenset({"input_tokens", "prompt_tokens", "promptTokenCount", "cache_read_input_tokens",
                         "context_tokens"})


def parse_token_counts(text: str) -> tuple[int | None, int | None]:
    """(observed, limit) named in an overflow message: "prompt is too long: N tokens > M maximum",
    "maximum context length is M tokens. However, you requested N tokens", "requested N tokens",
    "resulted in N tokens", ... Either is None when the text does not say."""
    if not text:
        return None, None
    text = text[:MAX_HAYSTACK_CHARS]
    for regex, observed_groups, limit_group in _COUNTS:
        found = regex.search(text)
        if not found:
            continue
        observed = sum(_int(found.group(g)) for g in observed_groups) if observed_groups else None
        limit = _int(found.group(limit_group)) if limit_group else None
        return observed or None, limit or None
    return None, None


def is_overflow_error(error: object, *, context_window: int | None = None) -> OverflowMatch | None:
    """An `OverflowMatch` when `error` says the request did not fit the context window, else None.

    `error` may be a string, bytes, a parsed error body (dict or list), an httpx `Response` or
    `HTTPStatusError`, an openai/anthropic SDK exception, a `ProviderError`, any exception wrapping one
    of these, or a usage record (`Usage`, `UsageRecord`, a provider usage dict, a `Completion`, a
    successful response body). Usage is judged only when `context_window` is given: reported input above
    the window is a silent overflow. Never raises."""
    try:
        evidence = _Evidence()
        _collect(error, evidence, depth=0)
        return _judge(evidence, context_window)
    except Exception:  # a detector that crashes on an odd error object would mask the real error
        return None


# --------------------------------------------------------------------------------------------------
# Evidence: everything an error object tells us, whatever its shape.


@dataclass
class _Usage:
    context_tokens: int
    output_tokens: int | None
    stop_reason: str | None


class _Evidence:
    def __init__(self) -> None:
        self.status: int | None = None
        self.texts: list[str] = []
        self.bodyless = False  # an HTTP error that came with an empty body
        self.usage: _Usage | None = None
        self.stop_reasons: list[str] = []

    def add_text(self, text: object) -> None:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if isinstance(text, str) and text.strip() and text not in self.texts:
            self.texts.append(text)

    def set_status(self, status: object) -> None:
        if self.status is None and isinstance(status, int) and not isinstance(status, bool) and 100 <= status < 600:
            self.status = status


def _collect(error: object, ev: _Evidence, depth: int) -> None:
    if error is None or depth > MAX_CAUSE_DEPTH:
        return
    if isinstance(error, bytes | bytearray):
        error = bytes(error).decode("utf-8", "replace")
    if isinstance(error, str):
        _collect_text(error, ev)
    elif isinstance(error, Mapping):
        _collect_mapping(error, ev)
    elif isinstance(error, Sequence):  # Gemini streams errors as a list of error bodies
        for item in list(error)[:10]:
            if isinstance(item, Mapping):
                _collect_mapping(item, ev)
            else:
                ev.add_text(_dump(item))
    elif isinstance(error, BaseException):
        _collect_exception(error, ev, depth)
    elif _is_response(error):
        _collect_response(error, ev)
    elif callable(model_dump := getattr(error, "model_dump", None)):  # an SDK's pydantic response or usage object
        dumped = model_dump()
        if isinstance(dumped, Mapping):
            _collect_mapping(dumped, ev)
    elif hasattr(error, "stop_reason") and hasattr(error, "usage"):  # ctxwin Completion
        if error.stop_reason:
            ev.stop_reasons.append(str(error.stop_reason))
        if error.usage is not None:
            ev.usage = _usage_from_object(error.usage, error.stop_reason)
        raw = getattr(error, "raw", None)
        if isinstance(raw, Mapping) and raw:
            _collect_success(raw, ev)
    elif hasattr(error, "input_tokens"):  # Usage, UsageRecord
        ev.usage = _usage_from_object(error, None)
    else:
        ev.add_text(str(error))


def _collect_text(text: str, ev: _Evidence) -> None:
    status = _STATUS_PREFIX.match(text)
    if status:
        ev.set_status(int(status.group(1)))
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, Mapping):
            _collect_mapping(parsed, ev)
            return
    ev.add_text(text)


def _collect_mapping(body: Mapping[str, Any], ev: _Evidence) -> None:
    keys = set(body)
    if not body.get("error") and body.get("type") != "error":  # a Responses answer carries "error": null
        if keys & _SUCCESS_KEYS or ("content" in keys and "role" in keys):
            _collect_success(body, ev)
            return
        if keys & _USAGE_KEYS:
            ev.usage = _usage_from_mapping(body, None)
            return
    for key in ("status_code", "statusCode", "status", "code"):
        ev.set_status(body.get(key))
    inner = body.get("error")
    if isinstance(inner, Mapping):
        ev.set_status(inner.get("code"))
    ev.add_text(_dump(body))


def _collect_success(body: Mapping[str, Any], ev: _Evidence) -> None:
    """A successful response says nothing through its text (the model may well talk about overflows);
    only its stop reason and its usage count."""
    reasons: list[Any] = [body.get("stop_reason"), body.get("finish_reason")]
    for choice in body.get("choices") or body.get("candidates") or ():
        if isinstance(choice, Mapping):
            reasons += [choice.get("finish_reason"), choice.get("finishReason")]
    details = body.get("incomplete_details")
    if isinstance(details, Mapping):
        reasons.append(details.get("reason"))
    stop = next((str(r) for r in reasons if isinstance(r, str) and r), None)
    ev.stop_reasons += [str(r) for r in reasons if isinstance(r, str) and r]
    usage = body.get("usage") or body.get("usageMetadata")
    if isinstance(usage, Mapping):
        ev.usage = _usage_from_mapping(usage, stop)


def _collect_exception(exc: BaseException, ev: _Evidence, depth: int) -> None:
    ev.set_status(getattr(exc, "status_code", None))
    response = getattr(exc, "response", None)
    if response is not None and _is_response(response):
        ev.set_status(getattr(response, "status_code", None))
    message = getattr(exc, "message", None)
    ev.add_text(message if isinstance(message, str) else None)
    has_body = hasattr(exc, "body")
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping | list):
        ev.add_text(_dump(body))
    elif isinstance(body, str | bytes):
        _collect_text(body.decode("utf-8", "replace") if isinstance(body, bytes) else body, ev)
    response_text = _response_text(response) if response is not None else ""
    if response_text:
        _collect_text(response_text, ev)
        _add_error_type_header(response, ev)
    if (has_body or response is not None) and not body and not response_text and ev.status in NO_BODY_STATUSES:
        ev.bodyless = True
    if not isinstance(message, str):
        ev.add_text(str(exc))
    for cause in (exc.__cause__, exc.__context__):
        if cause is not None and cause is not exc:
            _collect(cause, ev, depth + 1)


def _collect_response(response: Any, ev: _Evidence) -> None:
    status = getattr(response, "status_code", None)
    ev.set_status(status)
    text = _response_text(response)
    if isinstance(status, int) and 200 <= status < 300:
        try:
            parsed = json.loads(text) if text else None
        except ValueError:
            parsed = None
        if isinstance(parsed, Mapping):
            _collect_success(parsed, ev)
        return
    if not text.strip():
        ev.bodyless = status in NO_BODY_STATUSES
        return
    _collect_text(text, ev)
    _add_error_type_header(response, ev)


def _add_error_type_header(response: Any, ev: _Evidence) -> None:
    """Bedrock names the exception in a header, not the body (x-amzn-ErrorType: ValidationException)."""
    headers = getattr(response, "headers", None)
    if headers is not None:
        try:
            ev.add_text(headers.get("x-amzn-errortype"))
        except Exception:
            return


def _is_response(obj: object) -> bool:
    """An httpx (or httpx2) Response, by what it offers rather than by class."""
    return hasattr(obj, "status_code") and hasattr(obj, "headers") and (hasattr(obj, "text") or hasattr(obj, "content"))


def _response_text(response: Any) -> str:
    try:
        text = response.text
    except Exception:  # a streamed response that was never read
        try:
            text = bytes(response.content).decode("utf-8", "replace")
        except Exception:
            return ""
    return text if isinstance(text, str) else ""


def reported_context_tokens(usage: Any) -> int | None:
    """Everything the model read on one call (fresh input plus cache reads and writes), from any
    provider's usage: a dict, an SDK usage object, our `Usage`, or a plain number; None when unknown."""
    if usage is None or isinstance(usage, bool):
        return None
    if isinstance(usage, int | float):
        return int(usage)
    if isinstance(usage, Mapping):
        data: Mapping[str, Any] = usage
    elif hasattr(usage, "model_dump"):  # the openai and anthropic SDKs' pydantic models
        data = usage.model_dump()
    else:
        data = {k: getattr(usage, k) for k in _USAGE_FIELDS if getattr(usage, k, None) is not None}
    return _usage_from_mapping(data, None).context_tokens or None


_USAGE_FIELDS = ("context_tokens", "prompt_tokens", "promptTokenCount", "input_tokens", "input_tokens_details",
                 "cache_read_input_tokens", "cache_creation_input_tokens", "cache_read_tokens",
                 "cache_write_tokens", "output_tokens", "completion_tokens")


def _usage_from_mapping(usage: Mapping[str, Any], stop: str | None) -> _Usage:
    """Context tokens from any provider's usage dict. Anthropic's input_tokens exclude cache reads and
    writes; OpenAI's prompt_tokens and the Responses API's input_tokens include cached tokens; Gemini's
    promptTokenCount does too."""
    if "context_tokens" in usage:
        context = _int(usage.get("context_tokens"))
    elif "prompt_tokens" in usage:
        context = _int(usage.get("prompt_tokens"))
    elif "promptTokenCount" in usage:
        context = _int(usage.get("promptTokenCount"))
    elif "input_tokens_details" in usage:
        context = _int(usage.get("input_tokens"))
    else:
        context = (_int(usage.get("input_tokens")) + _int(usage.get("cache_read_input_tokens"))
                   + _int(usage.get("cache_creation_input_tokens")) + _int(usage.get("cache_read_tokens"))
                   + _int(usage.get("cache_write_tokens")))
    output = next((usage[k] for k in ("output_tokens", "completion_tokens", "candidatesTokenCount") if k in usage),
                  None)
    return _Usage(context, _int(output) if output is not None else None, stop)


def _usage_from_object(usage: Any, stop: str | None) -> _Usage:
    context = (_int(getattr(usage, "input_tokens", 0)) + _int(getattr(usage, "cache_read_tokens", 0))
               + _int(getattr(usage, "cache_write_tokens", 0)))
    output = getattr(usage, "output_tokens", None)
    return _Usage(context, _int(output) if output is not None else None, stop)


def _dump(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _int(value: object) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        digits = value.replace(",", "").strip()
        return int(digits) if digits.isdigit() else 0
    return 0


# --------------------------------------------------------------------------------------------------
# Judgement


def _judge(ev: _Evidence, context_window: int | None) -> OverflowMatch | None:
    if ev.status == 429:  # rate limits and quotas, however they word it (Groq, z.ai, Cerebras)
        return None
    for reason in ev.stop_reasons:
        for entry in CATALOG:
            if entry.status == 200 and entry.search(reason):
                return OverflowMatch(entry.provider, entry.regex.pattern, ev.usage.context_tokens if ev.usage else None,
                                     context_window)
    haystack = "\n".join(ev.texts)[:MAX_HAYSTACK_CHARS]
    if haystack and not any(p.search(haystack) for p in _NOT_OVERFLOW):
        for entry in CATALOG:
            if entry.search(haystack):
                observed, limit = parse_token_counts(haystack)
                return OverflowMatch(entry.provider, entry.regex.pattern, observed, limit)
    if ev.bodyless:
        cerebras = next(e for e in CATALOG if e.provider == "cerebras" and "no body" in e.regex.pattern)
        return OverflowMatch(cerebras.provider, cerebras.regex.pattern)
    if ev.usage is not None and context_window:
        return _silent(ev.usage, context_window)
    return None


def _silent(usage: _Usage, window: int) -> OverflowMatch | None:
    if usage.context_tokens > window:
        return OverflowMatch("silent", "usage: context tokens > context window", usage.context_tokens, window,
                             silent=True)
    truncated = (usage.stop_reason or "").lower() in _LENGTH_STOPS and usage.output_tokens == 0
    if truncated and usage.context_tokens >= window * SILENT_FILL_RATIO:
        return OverflowMatch("silent", "usage: length stop, no output, window full", usage.context_tokens, window,
                             silent=True)
    return None


__all__ = [
    "CATALOG",
    "MAX_HAYSTACK_CHARS",
    "SILENT_FILL_RATIO",
    "OverflowMatch",
    "OverflowPattern",
    "is_overflow_error",
    "parse_token_counts",
]
