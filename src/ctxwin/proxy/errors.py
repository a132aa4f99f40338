"""Errors the proxy answers itself, in the shape of the API the caller speaks, so an SDK raises its
own typed exception (`anthropic.AuthenticationError`, `openai.BadRequestError`, ...) and its user
reads a message that says what to do.

Anthropic: `{"type": "error", "error": {"type", "message"}}`. OpenAI (Chat and Responses):
`{"error": {"message", "type", "param", "code"}}`.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from starlette.responses import Response

from ctxwin.errors import ProxyError

ANTHROPIC = "anthropic"
OPENAI_CHAT = "openai-chat"
OPENAI_RESPONSES = "openai-responses"

_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error",
                    529: "overloaded_error"}
_OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
                 413: "invalid_request_error", 500: "server_error", 502: "server_error", 503: "server_error",
                 504: "server_error"}
_OPENAI_CODES = {401: "invalid_ctxwin_token", 404: "unknown_url", 413: "request_too_large",
                 502: "upstream_unreachable", 503: "ctxwin_unavailable", 504: "upstream_timeout"}


def api_of_path(path: str, headers: Mapping[str, str]) -> str:
    """The API a caller speaks, from the path, else from its headers (Anthropic clients send
    `anthropic-version` or `x-api-key`); OpenAI's shape otherwise."""
    if path.startswith("/v1/messages"):
        return ANTHROPIC
    if path.startswith("/v1/responses"):
        return OPENAI_RESPONSES
    if path.startswith("/v1/chat"):
        return OPENAI_CHAT
    if "anthropic-version" in headers or "x-api-key" in headers:
        return ANTHROPIC
    return OPENAI_CHAT


def error_body(api: str, status: int, message: str) -> bytes:
    if api == ANTHROPIC:
        return orjson.dumps({"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"),
                                                        "message": message}})
    return orjson.dumps({"error": {"message": message, "type": _OPENAI_TYPES.get(status, "invalid_request_error"),
                                   "param": None, "code": _OPENAI_CODES.get(status)}})


def error_response(api: str, status: int, message: str) -> Response:
    headers = {"x-ctxwin-error": "1"}  # the proxy answered, not the provider
    if status == 401:
        headers["www-authenticate"] = 'Bearer realm="ctxwin"'
    return Response(error_body(api, status, message), status_code=status, media_type="application/json",
                    headers=headers)


def refusal_response(api: str, refusal: ProxyError) -> Response:
    text = f"{refusal.message} ({refusal.hint})" if refusal.hint else refusal.message
    return error_response(api, refusal.status, text)
