"""Overflow detection: every catalog entry is recognised by its own pattern, token counts are read off
the messages, the look-alikes (rate limits, billing, output caps, config errors) are not overflows,
and silent overflow is read off usage numbers. Over-HTTP detection is in test_clients.py."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin.messages import assistant
from ctxwin.providers import Completion, ProviderError, Usage
from ctxwin.providers.overflow import CATALOG, MAX_HAYSTACK_CHARS, is_overflow_error, parse_token_counts
from ctxwin.transcripts.model import UsageRecord

REQUIRED_PROVIDERS = {
    "anthropic", "openai", "azure", "bedrock", "vertex", "gemini", "xai", "groq", "openrouter", "mistral",
    "cohere", "deepseek", "llama.cpp", "lm-studio", "ollama", "vllm", "copilot", "minimax", "kimi", "z.ai",
    "cerebras", "generic",
}


# --------------------------------------------------------------------------------------------------
# The catalog


def test_catalog_covers_the_providers_with_at_least_25_patterns() -> None:
    assert len(CATALOG) >= 25
    assert {entry.provider for entry in CATALOG} >= REQUIRED_PROVIDERS
    assert all(entry.example and entry.source for entry in CATALOG)


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: f"{e.provider}:{e.regex.pattern[:30]}")
def test_every_example_is_recognised_by_its_own_entry(entry) -> None:
    assert entry.search(entry.example), "the entry's regex must match its own real example"
    match = is_overflow_error(entry.example)
    assert match is not None
    first = next(e for e in CATALOG if e.search(entry.example))
    if entry.provider != "generic":  # a shadowed entry would be dead code
        assert first is entry
        assert match.provider == entry.provider
    assert match.silent is False


@pytest.mark.parametrize("entry", [e for e in CATALOG if e.example.lstrip().startswith("{")],
                         ids=lambda e: f"{e.provider}:{e.regex.pattern[:30]}")
def test_every_json_example_is_recognised_as_a_parsed_body(entry) -> None:
    body = json.loads(entry.example)
    assert is_overflow_error(body) is not None


# --------------------------------------------------------------------------------------------------
# Token counts


@pytest.mark.parametrize(("text", "observed", "limit"), [
    ("prompt is too long: 219898 tokens > 200000 maximum", 219898, 200000),
    ("input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, decrease input length", 242959,
     200000),
    ("This model's maximum context length is 4096 tokens. However, you requested 4130 tokens (3130 in the "
     "messages, 1000 in the completion).", 4130, 4096),
    ("This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens.", 8227,
     8192),
    ("This endpoint's maximum context length is 131072 tokens. However, you requested about 141607 tokens",
     141607, 131072),
    ("This model's maximum context length is 8192 tokens. However, you requested 64 output tokens and your prompt "
     "contains at least 8129 input tokens, for a total of at least 8193 tokens.", 8193, 8192),
    ("The input token count (1,200,293) exceeds the maximum number of tokens allowed (1,048,576).", 1200293,
     1048576),
    ("This model's maximum prompt length is 131072 but the request contains 136973 tokens.", 136973, 131072),
    ("prompt token count of 138898 exceeds the limit of 64000", 138898, 64000),
    ("request (13392 tokens) exceeds the available context size (8192 tokens), try increasing it", 13392, 8192),
    ('{"error":{"type":"exceed_context_size_error","n_prompt_tokens":13392,"n_ctx":8192}}', 13392, 8192),
    ("Your request exceeded model token limit: 262144 (requested: 291351)", 291351, 262144),
    ("too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 4292.", 4292, 4081),
    ("Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 509178 tokens.",
     509178, 272000),
    ("Range of input length should be [1, 129024]", None, 129024),
    ("invalid params, context window exceeds limit (2013)", None, None),  # 2013 is MiniMax's code, not a count
    ("prompt too long; exceeded max context length by 4 tokens", None, None),
    ("nothing to see here", None, None),
    ("", None, None),
])
def test_parse_token_counts(text: str, observed: int | None, limit: int | None) -> None:
    assert parse_token_counts(text) == (observed, limit)


def test_matches_carry_the_counts_of_the_error() -> None:
    match = is_overflow_error('{"type":"error","error":{"type":"invalid_request_error","message":'
                              '"prompt is too long: 200251 tokens > 200000 maximum"}}')
    assert match is not None
    assert (match.provider, match.observed_tokens, match.limit_tokens) == ("anthropic", 200251, 200000)


# --------------------------------------------------------------------------------------------------
# Look-alikes that are not overflows (real bodies; each is tried with and without its status)

NOT_OVERFLOW = [
    # OpenAI TPM rate limit: "Request too large", tokens, "reduced" (Aider-AI/aider#1880)
    (429, {"error": {"message": "Request too large for gpt-4o in organization org-2itOgSdqw0DhUYp0QyLhttLL on "
                                "tokens per min (TPM): Limit 30000, Requested 36278. The input or output tokens must "
                                "be reduced in order to run successfully. Visit "
                                "https://platform.openai.com/account/rate-limits to learn more.",
                     "type": "tokens", "param": None, "code": "rate_limit_exceeded"}}),
    # Groq TPM limit as 413 (OpenClaw excludes it explicitly)
    (413, {"error": {"message": "Request too large for model `openai/gpt-oss-120b` in organization `org_abc` service "
                                "tier `on_demand` on tokens per minute (TPM): Limit 8000, Requested 11881, Please "
                                "reduce your message size and try again. Need more tokens? Upgrade to Dev Tier today "
                                "at https://console.groq.com/settings/billing",
                     "type": "tokens", "code": "rate_limit_exceeded"}}),
    # OpenAI TPM with usage (continuedev/continue#10502)
    (429, "429 Rate limit reached for gpt-4.1 in organization org-vyUrKHsIdLcZGKR3zqCqllrS on tokens per min (TPM): "
          "Limit 30000, Used 28039, Requested 3906. Please try again in 3.89s."),
    # Anthropic input-tokens-per-minute limit: "reduce the prompt length" (OpenHands/OpenHands#9259)
    (429, {"type": "error", "error": {"type": "rate_limit_error", "message": "This request would exceed the rate "
           "limit for your organization (0dccdde6-f924-4f1b-bb3b-92ef846e0a5b) of 20,000 input tokens per minute. "
           "For details, refer to: https://docs.anthropic.com/en/api/rate-limits. You can see the response headers "
           "for current usage. Please reduce the prompt length or the maximum tokens requested, or try again "
           "later."}}),
    # Anthropic billing, a 400 invalid_request_error
    (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance is too low to "
           "access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},
           "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}),
    # OpenAI quota
    (429, {"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                     "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}),
    # Output caps: the window is fine, max_tokens is not
    (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: 100000 > 64000, which "
           "is the maximum allowed number of output tokens for claude-sonnet-4-5"}}),
    (400, {"error": {"message": "max_tokens is too large: 20480. This model supports at most 16384 completion "
                                "tokens, whereas you provided 20480.", "type": "invalid_request_error",
                     "param": "max_tokens", "code": "invalid_value"}}),
    (400, {"message": "`max_completion_tokens` must be less than or equal to `16384`, the maximum value for "
                      "`max_completion_tokens` is less than the `context_window` for this model",
           "type": "invalid_request_error", "param": "max_completion_tokens"}),
    (400, {"message": "too many tokens: max tokens must be less than or equal to 4096, the maximum output for this "
                      "model - received 8192."}),
    # Bedrock throttling mentions "too many tokens" (Pi's NON_OVERFLOW_PATTERNS)
    (400, "ThrottlingException: Too many tokens, please wait before trying again."),
    (None, "Too many tokens, please wait before trying again."),
    # Gemini quota
    (429, {"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                     "status": "RESOURCE_EXHAUSTED"}}),
    # configuration and reasoning constraints (OpenClaw)
    (None, "Model context window too small (8192 tokens). Minimum is 16000."),
    (400, {"error": {"message": "Reasoning is mandatory for this endpoint and cannot be disabled.", "code": 400}}),
    # other 400s an agent meets
    (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "messages.3: `tool_use` ids were "
           "found without `tool_result` blocks immediately after: toolu_01HWLQbwAa5e2BJwdX1nreqa. Each `tool_use` "
           "block must have a corresponding `tool_result` block in the next message."}}),
    (400, {"error": {"message": "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                                "message with 'tool_calls'.", "type": "invalid_request_error",
                     "param": "messages.[2].role", "code": None}}),
    (400, {"type": "error", "error": {"type": "invalid_request_error", "message": "messages.0.content.1.image.source."
           "base64: image exceeds 5 MB maximum: 7341512 bytes > 5242880 bytes"}}),
    (400, {"error": {"code": 400, "message": "Request contains an invalid argument.", "status": "INVALID_ARGUMENT"}}),
    (400, {"object": "error", "message": "max_tokens must be at least 1, got -186.", "type": "BadRequestError",
           "param": None, "code": 400}),
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    (401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
]


@pytest.mark.parametrize(("status", "body"), NOT_OVERFLOW, ids=range(len(NOT_OVERFLOW)))
def test_look_alikes_are_not_overflows(status: int | None, body: object) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    assert is_overflow_error(body) is None
    assert is_overflow_error(text) is None
    if status is not None:
        assert is_overflow_error(httpx.Response(status, content=text.encode())) is None
        assert is_overflow_error(ProviderError(status, body, text, "test")) is None


def test_a_429_is_never_an_overflow_whatever_it_says() -> None:
    body = {"type": "error", "error": {"type": "invalid_request_error",
                                       "message": "prompt is too long: 219898 tokens > 200000 maximum"}}
    assert is_overflow_error(httpx.Response(400, json=body)) is not None
    assert is_overflow_error(httpx.Response(429, json=body)) is None


def test_a_model_talking_about_overflows_in_a_successful_answer_is_not_an_overflow() -> None:
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "end_turn",
              "content": [{"type": "text", "text": "The API said: prompt is too long: 300000 tokens > 200000 maximum"}],
              "usage": {"input_tokens": 1200, "output_tokens": 30}}
    assert is_overflow_error(answer, context_window=200_000) is None
    assert is_overflow_error(httpx.Response(200, json=answer), context_window=200_000) is None
    responses_answer = {"id": "resp_1", "object": "response", "status": "completed", "error": None,
                        "incomplete_details": None, "output": [{"type": "message", "role": "assistant", "content": [
                            {"type": "output_text", "text": "This model's maximum context length is 8192 tokens. "
                                                            "However, you requested 9000 tokens."}]}],
                        "usage": {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 0},
                                  "output_tokens": 20}}
    assert is_overflow_error(responses_answer, context_window=8192) is None
    assert is_overflow_error(json.dumps(responses_answer)) is None


# --------------------------------------------------------------------------------------------------
# Shapes an error arrives in


ANTHROPIC_BODY = {"type": "error", "error": {"type": "invalid_request_error",
                                             "message": "prompt is too long: 219898 tokens > 200000 maximum"}}


def test_shapes_strings_bytes_lists_and_sdk_style_messages() -> None:
    assert is_overflow_error(json.dumps(ANTHROPIC_BODY).encode()).provider == "anthropic"
    gemini_stream = [{"error": {"code": 400, "message": "The input token count (3475108) exceeds the maximum number "
                                                        "of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}]
    assert is_overflow_error(gemini_stream).provider == "gemini"
    # the openai SDK's str(): "Error code: 400 - {python repr of the body}"
    sdk_text = "Error code: 400 - " + repr({"error": {"message": "This model's maximum context length is 65536 "
                                                                "tokens. However, you requested 66343 tokens.",
                                                     "type": "invalid_request_error", "param": None,
                                                     "code": "invalid_request_error"}})
    assert is_overflow_error(sdk_text).provider == "deepseek"


def test_shapes_httpx_response_and_http_status_error() -> None:
    request = httpx.Request("POST", "http://127.0.0.1/v1/messages")
    response = httpx.Response(400, json=ANTHROPIC_BODY, request=request)
    assert is_overflow_error(response).observed_tokens == 219898
    with pytest.raises(httpx.HTTPStatusError) as caught:
        response.raise_for_status()
    assert is_overflow_error(caught.value).provider == "anthropic"


def test_shapes_bedrock_names_the_exception_in_a_header() -> None:
    response = httpx.Response(400, json={"message": "Input is too long for requested model."},
                              headers={"x-amzn-ErrorType": "ValidationException:http://internal.amazon.com/coral/"})
    assert is_overflow_error(response).provider == "bedrock"


def test_shapes_provider_error_and_wrapped_exceptions() -> None:
    error = ProviderError(400, ANTHROPIC_BODY, "prompt is too long: 219898 tokens > 200000 maximum", "anthropic")
    assert is_overflow_error(error).provider == "anthropic"
    try:
        try:
            raise error
        except ProviderError as inner:
            raise RuntimeError("summarizer call failed") from inner
    except RuntimeError as outer:
        assert is_overflow_error(outer).provider == "anthropic"
    # a proxy that wraps the overflow in a 5xx is still an overflow (Pi's tests: LiteLLM behind a gateway)
    wrapped = ("Error: 503 litellm.ServiceUnavailableError: litellm.MidStreamFallbackError: OpenAIException - "
               "Requested token count exceeds the model's maximum context length of 131072 tokens.")
    assert is_overflow_error(wrapped).limit_tokens == 131072


def test_shapes_sdk_exception_by_duck_typing() -> None:
    class APIStatusError(Exception):  # the attributes openai/anthropic SDK exceptions carry
        def __init__(self, message: str, status_code: int, body: object) -> None:
            super().__init__(message)
            self.message, self.status_code, self.body, self.response = message, status_code, body, None

    body = {"message": "Please reduce the length of the messages or completion.", "type": "invalid_request_error",
            "param": "messages", "code": "context_length_exceeded"}
    assert is_overflow_error(APIStatusError(f"Error code: 400 - {body!r}", 400, body)).provider == "groq"
    assert is_overflow_error(APIStatusError("Error code: 429", 429, body)) is None


@pytest.mark.parametrize(("status", "expected"), [(400, "cerebras"), (413, "cerebras"), (429, None), (500, None)])
def test_an_empty_bodied_400_or_413_is_cerebras_overflow(status: int, expected: str | None) -> None:
    match = is_overflow_error(httpx.Response(status, content=b""))
    assert (match.provider if match else None) == expected
    from_error = is_overflow_error(ProviderError(status, "", f"{status} (no body)", "cerebras"))
    assert (from_error.provider if from_error else None) == expected


def test_odd_objects_never_raise() -> None:
    class Weird:
        def __str__(self) -> str:
            raise ValueError("no")

    assert is_overflow_error(Weird()) is None
    assert is_overflow_error(None) is None
    assert is_overflow_error(42) is None
    assert is_overflow_error({"error": None}) is None


def test_huge_error_text_is_cut_not_scanned_whole() -> None:
    text = "prompt is too long: 5 tokens > 4 maximum " + "x" * (50 * MAX_HAYSTACK_CHARS)
    assert is_overflow_error(text).provider == "anthropic"
    assert is_overflow_error("x" * (50 * MAX_HAYSTACK_CHARS) + " prompt is too long") is None


# --------------------------------------------------------------------------------------------------
# Silent overflow: no error, but the usage says the input did not fit


@pytest.mark.parametrize("usage", [
    Usage(input_tokens=150_000, cache_read_tokens=60_000),
    UsageRecord(message_index=3, input_tokens=10, cache_read_tokens=200_000, cache_write_tokens=5),
    {"input_tokens": 100, "cache_read_input_tokens": 199_000, "cache_creation_input_tokens": 2_000,
     "output_tokens": 10},  # Anthropic
    {"prompt_tokens": 210_000, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 200_000}},  # OpenAI
    {"input_tokens": 250_000, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1},  # Responses
    {"promptTokenCount": 200_001, "candidatesTokenCount": 3},  # Gemini
])
def test_usage_above_the_window_is_a_silent_overflow(usage: object) -> None:
    match = is_overflow_error(usage, context_window=200_000)
    assert match is not None and match.silent and match.limit_tokens == 200_000
    assert match.observed_tokens > 200_000
    assert is_overflow_error(usage) is None  # no window, no judgement


def test_usage_within_the_window_is_not_an_overflow() -> None:
    assert is_overflow_error(Usage(input_tokens=1_000, cache_read_tokens=150_000), context_window=200_000) is None
    assert is_overflow_error({"prompt_tokens": 200_000}, context_window=200_000) is None


def test_silent_overflow_from_completions_and_response_bodies() -> None:
    completion = Completion(assistant("hi"), Usage(input_tokens=5, cache_read_tokens=300_000), "stop")
    assert is_overflow_error(completion, context_window=200_000).silent
    body = {"id": "x", "object": "chat.completion", "choices": [{"finish_reason": "stop", "message": {}}],
            "usage": {"prompt_tokens": 250_000, "completion_tokens": 1}}
    assert is_overflow_error(body, context_window=200_000).observed_tokens == 250_000
    assert is_overflow_error(httpx.Response(200, json=body), context_window=200_000).silent


def test_truncated_input_with_no_room_to_answer_is_a_silent_overflow() -> None:
    """Xiaomi MiMo (Pi): the input is cut to fill the window and the answer stops at once."""
    full = Completion(assistant(""), Usage(input_tokens=131_000, output_tokens=0), "length")
    assert is_overflow_error(full, context_window=131_072).silent
    answered = Completion(assistant("x"), Usage(input_tokens=131_000, output_tokens=7), "length")
    assert is_overflow_error(answered, context_window=131_072) is None


def test_model_context_window_exceeded_stop_reason_is_an_overflow() -> None:
    completion = Completion(assistant(""), Usage(input_tokens=1_000), "model_context_window_exceeded")
    assert is_overflow_error(completion).provider == "z.ai"
    assert is_overflow_error("Unhandled stop reason: model_context_window_exceeded") is not None


# --------------------------------------------------------------------------------------------------
# Properties

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(JSON, st.none() | st.integers(min_value=-5, max_value=10**7))
def test_never_raises_on_arbitrary_input(value: object, window: int | None) -> None:
    match = is_overflow_error(value, context_window=window)
    assert match is None or match.provider
    observed, limit = parse_token_counts(value if isinstance(value, str) else json.dumps(value))
    assert observed is None or observed > 0
    assert limit is None or limit > 0


NOISE = st.text(alphabet=" .,;:-_()[]\n", max_size=30)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([e for e in CATALOG if e.status != 200]), NOISE, NOISE)
def test_examples_are_recognised_inside_surrounding_noise(entry, before: str, after: str) -> None:
    text = entry.example if "^" in entry.regex.pattern else before + entry.example + after
    assert is_overflow_error(text) is not None

