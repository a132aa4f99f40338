"""The real APIs' error bodies, as the fake answers with them: the error object of each API,
its 404, the overflow and output-cap errors (see `ctxwin.providers.overflow.CATALOG` for the
originals), and the status and body of each scripted fault."""

from __future__ import annotations

import hashlib
from typing import Any

from ctxwin.testing.request import MESSAGES
from ctxwin.testing.scripted import Fault


def error_body(api: str | None, kind: str, message: str, *, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    if api == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message},
                "request_id": "req_fake_" + hashlib.blake2b(message.encode(), digest_size=6).hexdigest()}
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def not_found(api: str | None, method: str, path: str) -> dict[str, Any]:
    if path.startswith(MESSAGES):
        return error_body("anthropic", "not_found_error", "Not Found")
    return error_body(api, "invalid_request_error", f"Invalid URL ({method} {path})")


def overflow_error(api: str, input_tokens: int, max_tokens: int | None, window: int) -> dict[str, Any]:
    """The error each provider returns when the request does not fit (see CATALOG for the originals)."""
    if api == "anthropic":
        if input_tokens > window:
            message = f"prompt is too long: {input_tokens} tokens > {window} maximum"
        else:
            message = (f"input length and `max_tokens` exceed context limit: {input_tokens} + {max_tokens} > "
                       f"{window}, decrease input length or `max_tokens` and try again")
        return error_body(api, "invalid_request_error", message)
    if api == "responses":
        return error_body(api, "invalid_request_error", "Your input exceeds the context window of this model. Please "
                          "adjust your input and try again.", param="input", code="context_length_exceeded")
    if max_tokens:
        message = (f"This model's maximum context length is {window} tokens. However, you requested "
                   f"{input_tokens + max_tokens} tokens ({input_tokens} in the messages, {max_tokens} in the "
                   f"completion). Please reduce the length of the messages or completion.")
    else:
        message = (f"This model's maximum context length is {window} tokens. However, your messages resulted in "
                   f"{input_tokens} tokens. Please reduce the length of the messages.")
    return error_body(api, "invalid_request_error", message, param="messages", code="context_length_exceeded")


def output_cap_error(api: str, model: str, max_tokens: int, cap: int) -> dict[str, Any]:
    if api == "anthropic":
        return error_body(api, "invalid_request_error",
                          f"max_tokens: {max_tokens} > {cap}, which is the maximum allowed number of output tokens "
                          f"for {model}")
    param = "max_output_tokens" if api == "responses" else "max_tokens"
    return error_body(api, "invalid_request_error", f"{param} is too large: {max_tokens}. This model supports at most "
                      f"{cap} completion tokens, whereas you provided {max_tokens}.", param=param, code="invalid_value")


def fault_body(api: str, fault: Fault, input_tokens: int, window: int) -> tuple[int, dict[str, Any]]:
    """(status, body) of a scripted fault, as each API really answers it."""
    if fault.kind == "status":
        return fault.status or 500, dict(fault.body or error_body(api, "api_error", "scripted error"))
    if fault.kind == "overflow":
        return 400, overflow_error(api, max(input_tokens, window + 1), None, window)
    if api == "anthropic":
        status, kind, message = {
            "rate_limit": (429, "rate_limit_error", "This request would exceed the rate limit for your organization "
                           "of 50 requests per minute. For details, refer to: https://docs.claude.com/en/api/"
                           "rate-limits. You can see the response headers for current usage."),
            "server_error": (500, "api_error", "Internal server error"),
            "overloaded": (529, "overloaded_error", "Overloaded"),
        }[fault.kind]
        return status, error_body(api, kind, message)
    if fault.kind == "rate_limit":
        return 429, error_body(api, "requests", "Rate limit reached for requests per min (RPM): Limit 500, Used 500, "
                               "Requested 1. Please try again in 120ms. Visit https://platform.openai.com/account/"
                               "rate-limits to learn more.", code="rate_limit_exceeded")
    if fault.kind == "overloaded":
        return 503, error_body(api, "server_error", "The engine is currently overloaded, please try again later")
    return 500, error_body(api, "server_error",
                           "The server had an error while processing your request. Sorry about that!")
