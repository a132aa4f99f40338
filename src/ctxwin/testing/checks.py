"""What the fake checks before it answers, as the real APIs check it and with their wording: the
JSON body, the types and ranges of every field it reads, the auth headers, tool-call pairing and role
order, inline images, and the window (input plus `max_tokens` against the context window, `max_tokens`
against the output cap). Each refusal is a `_Reject` carrying the API's real status and error body."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxwin.messages import Image, Message, ToolResult
from ctxwin.messages.model import image_problem
from ctxwin.testing.refusals import error_body, output_cap_error, overflow_error
from ctxwin.testing.request import count_request_tokens, max_tokens_of, request_messages
from ctxwin.tokens.base import TokenCounter

MAX_JSON_DEPTH = 100  # nesting deeper than this is refused with a 400, as the real APIs refuse it

OPENAI_NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer "
    "auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're "
    "accessing the API from your browser and are prompted for a username and password. You can obtain an API "
    "key from https://platform.openai.com/account/api-keys."
)


class _Reject(Exception):
    """Control flow inside the fake (never out of it): answer this request with this error. Raised by
    the checks, caught by the server, which answers with `status` and `body`."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


OPENAI_BAD_JSON = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library "
    "correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble "
    "figuring out how to fix this, please contact us through our help center at help.openai.com.)"
)


def parse_body(raw: bytes) -> tuple[Any, str | None]:
    """(the JSON body, None), or (None, why it is not acceptable JSON): invalid JSON or UTF-8, NaN or
    Infinity (not JSON), or nesting deeper than MAX_JSON_DEPTH. An empty body is (None, None)."""
    if not raw:
        return None, None

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        body = json.loads(raw, parse_constant=no_constants)
    except (ValueError, RecursionError):
        return None, OPENAI_BAD_JSON
    if _depth_over(body, MAX_JSON_DEPTH):
        return None, f"The request body is nested more than {MAX_JSON_DEPTH} levels deep."
    return body, None


def _depth_over(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


_JSON_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a decimal", str: "a string", list: "an array",
                    dict: "an object", type(None): "null"}


def _shape_error(api: str, param: str, expected: str, value: Any, code: str = "invalid_type") -> _Reject:
    """The real wording of a type error: pydantic's for Anthropic, OpenAI's own for OpenAI."""
    if api == "anthropic":
        kinds = {"an object": "dictionary", "an array": "list", "a string": "string", "an integer": "integer",
                 "a boolean": "boolean"}
        return _Reject(400, error_body(api, "invalid_request_error",
                                      f"{param}: Input should be a valid {kinds.get(expected, expected)}"))
    got = _JSON_TYPE_NAMES.get(type(value), "a value")
    return _Reject(400, error_body(api, "invalid_request_error",
                                  f"Invalid type for '{param}': expected {expected}, but got {got} instead.",
                                  param=param, code=code))


def _below_min(api: str, param: str, value: int, minimum: int) -> _Reject:
    if api == "anthropic":
        return _Reject(400, error_body(api, "invalid_request_error",
                                      f"{param}: Input should be greater than or equal to {minimum}"))
    return _Reject(400, error_body(api, "invalid_request_error",
                                  f"Invalid '{param}': integer below minimum value. Expected a value >= {minimum}, but "
                                  f"got {value} instead.", param=param, code="integer_below_min_value"))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_shape(api: str, body: Mapping[str, Any], *, for_count: bool = False) -> None:
    """The type checks the real APIs make before anything else, with their 400 answers: every field the
    fake reads has the JSON type the API documents, and integers are in range, so nothing later trips
    over a number where an object belongs."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _shape_error(api, "model", "a string", model)
    for flag in ("stream", "store", "parallel_tool_calls"):
        if flag in body and not isinstance(body[flag], bool | None):
            raise _shape_error(api, flag, "a boolean", body[flag])
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _shape_error(api, "tools", "an array", tools)
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise _shape_error(api, f"tools[{i}]" if api != "anthropic" else f"tools.{i}", "an object", tool)
    minimum = {"anthropic": 1, "chat": 1, "responses": 16}[api]
    for key in {"anthropic": ("max_tokens",), "chat": ("max_tokens", "max_completion_tokens"),
                "responses": ("max_output_tokens",)}[api]:
        value = body.get(key)
        if value is None or (for_count and api == "anthropic"):
            continue
        if not _is_int(value):
            raise _shape_error(api, key, "an integer", value)
        if value < minimum:
            raise _below_min(api, key, value, minimum)
    if api == "anthropic":
        _check_anthropic_shape(body)
    elif api == "chat":
        _check_chat_shape(body)
    else:
        _check_responses_shape(body)


ANTHROPIC_BLOCK_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "text": (("text", "a string"),),
    "tool_use": (("id", "a string"), ("name", "a string"), ("input", "an object")),
    "tool_result": (("tool_use_id", "a string"),),
    "image": (("source", "an object"),),
    "thinking": (("thinking", "a string"),),
    "redacted_thinking": (("data", "a string"),),
}  # the fields each block type requires, with their JSON types


def _check_anthropic_shape(body: Mapping[str, Any]) -> None:
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise _shape_error("anthropic", "system", "a string", system)
    for i, block in enumerate(system if isinstance(system, list) else ()):
        if not isinstance(block, dict) or not isinstance(block.get("text"), str):
            raise _shape_error("anthropic", f"system.{i}", "an object", block)
    messages = body.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise _shape_error("anthropic", "messages", "an array", messages)
    for i, message in enumerate(messages or ()):
        if not isinstance(message, dict):
            raise _shape_error("anthropic", f"messages.{i}", "an object", message)
        content = message.get("content")
        if not isinstance(content, str | list):
            raise _shape_error("anthropic", f"messages.{i}.content", "a string", content)
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise _shape_error("anthropic", f"messages.{i}.content.{j}", "an object", block)
            for key, expected in ANTHROPIC_BLOCK_FIELDS.get(block["type"], ()):
                value = block.get(key)
                if not isinstance(value, dict if expected == "an object" else str):
                    raise _shape_error("anthropic", f"messages.{i}.content.{j}.{block['type']}.{key}", expected,
                                       value)
            inner = block.get("content")
            if block.get("type") == "tool_result" and not isinstance(inner, str | list | None):
                raise _shape_error("anthropic", f"messages.{i}.content.{j}.content", "a string", inner)
            for k, part in enumerate(inner if isinstance(inner, list) else ()):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise _shape_error("anthropic", f"messages.{i}.content.{j}.content.{k}", "an object", part)


def _check_chat_shape(body: Mapping[str, Any]) -> None:
    messages = body.get("messages")
    if messages is not None and not isinstance(messages, list):
        raise _shape_error("chat", "messages", "an array", messages)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _shape_error("chat", "stream_options", "an object", options)
    for i, message in enumerate(messages or ()):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _shape_error("chat", where, "an object", message)
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _shape_error("chat", f"{where}.content", "one of a string or array of objects", content)
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _shape_error("chat", f"{where}.content[{j}]", "an object", part)
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise _shape_error("chat", f"{where}.tool_calls", "an array", calls)
        for j, call in enumerate(calls or ()):
            if not isinstance(call, dict):
                raise _shape_error("chat", f"{where}.tool_calls[{j}]", "an object", call)
            function = call.get("function")
            if not isinstance(function, dict):
                raise _shape_error("chat", f"{where}.tool_calls[{j}].function", "an object", function)
            for key in ("name", "arguments"):
                if not isinstance(function.get(key), str):
                    raise _shape_error("chat", f"{where}.tool_calls[{j}].function.{key}", "a string",
                                       function.get(key))
            if not isinstance(call.get("id"), str):
                raise _shape_error("chat", f"{where}.tool_calls[{j}].id", "a string", call.get("id"))
        if message.get("role") == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise _shape_error("chat", f"{where}.tool_call_id", "a string", message.get("tool_call_id"))


def _check_responses_shape(body: Mapping[str, Any]) -> None:
    items = body.get("input")
    if items is not None and not isinstance(items, str | list):
        raise _shape_error("responses", "input", "one of a string or an array of input items", items)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _shape_error("responses", "instructions", "a string", instructions)
    for i, item in enumerate(items if isinstance(items, list) else ()):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _shape_error("responses", where, "an object", item)
        content = item.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _shape_error("responses", f"{where}.content", "one of a string or array of objects", content)
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise _shape_error("responses", f"{where}.content[{j}]", "an object", part)
        if item.get("type") in ("function_call", "function_call_output"):
            for key in ("call_id", *(("name", "arguments") if item["type"] == "function_call" else ())):
                if not isinstance(item.get(key), str):
                    raise _shape_error("responses", f"{where}.{key}", "a string", item.get(key))


OPENAI_BAD_IMAGE = ("You uploaded an unsupported image. Please make sure your image is below 20 MB in size and is "
                    "of one the following formats: ['png', 'jpeg', 'gif', 'webp'].")


def _check_images(api: str, messages: Sequence[Message]) -> None:
    """Every inline image as the real APIs check it: base64, one of four media types matching the bytes,
    at most 5 MB (Anthropic's limit; the stricter one)."""
    for i, message in enumerate(messages):
        parts = [p for b in message.blocks for p in (b.content if isinstance(b, ToolResult) else (b,))]
        for part in parts:
            problem = image_problem(part) if isinstance(part, Image) else None
            if problem is None:
                continue
            if api == "anthropic":
                raise _Reject(400, error_body(api, "invalid_request_error", f"messages.{i}: image: {problem}"))
            message_text = "Invalid image data" if "base64" in problem else OPENAI_BAD_IMAGE
            raise _Reject(400, error_body(api, "invalid_request_error", f"{message_text} ({problem})",
                                         param="messages" if api == "chat" else "input", code="invalid_image_format"))


def check_auth(api: str, headers: Mapping[str, str], required: bool) -> None:
    if api == "anthropic" and "anthropic-version" not in headers:
        raise _Reject(400, error_body(api, "invalid_request_error", "anthropic-version: header is required"))
    if not required:
        return
    if api == "anthropic":
        if not headers.get("x-api-key") and not headers.get("authorization", "").lower().startswith("bearer "):
            raise _Reject(401, error_body(api, "authentication_error", "x-api-key header is required"))
    elif not headers.get("authorization", "").lower().startswith("bearer ") or len(headers["authorization"]) <= 7:
        raise _Reject(401, error_body(api, "invalid_request_error", OPENAI_NO_KEY))


def _validate_anthropic(body: Mapping[str, Any], *, strict_alternation: bool, for_count: bool) -> None:
    def reject(message: str) -> _Reject:
        return _Reject(400, error_body("anthropic", "invalid_request_error", message))

    if not for_count and not isinstance(body.get("max_tokens"), int):
        raise reject("max_tokens: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise reject("messages: at least one message is required")
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in ("user", "assistant"):
            raise reject(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if strict_alternation and i and messages[i - 1].get("role") == role:
            raise reject(f'messages: roles must alternate between "user" and "assistant", but found multiple '
                         f'"{role}" roles in a row')
        blocks = _anthropic_blocks(message.get("content"))
        last = i == len(messages) - 1
        if not blocks and not (last and role == "assistant"):
            raise reject(f"messages.{i}: all messages must have non-empty content except for the optional final "
                         f"assistant message")
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not str(block.get("text", "")).strip():
                raise reject(f"messages.{i}.content.{j}.text: text content blocks must be non-empty")
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        if uses:
            following = _anthropic_blocks(messages[i + 1].get("content")) if i + 1 < len(messages) else []
            answered = {b.get("tool_use_id") for b in following if b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                raise reject(f"messages.{i + 1 if i + 1 < len(messages) else i}: `tool_use` ids were found without "
                             f"`tool_result` blocks immediately after: {', '.join(map(str, missing))}. Each "
                             f"`tool_use` block must have a corresponding `tool_result` block in the next message.")
        for j, block in enumerate(blocks):
            if block.get("type") != "tool_result":
                continue
            previous = _anthropic_blocks(messages[i - 1].get("content")) if i else []
            called = {b.get("id") for b in previous if b.get("type") == "tool_use"}
            if block.get("tool_use_id") not in called:
                raise reject(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                             f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                             f"`tool_use` block in the previous message.")


def _anthropic_blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


def _validate_chat(body: Mapping[str, Any]) -> None:
    def reject(message: str, param: str | None) -> _Reject:
        return _Reject(400, error_body("chat", "invalid_request_error", message, param=param))

    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise reject("[] is too short - 'messages'", "messages")
    pending: dict[str, int] = {}  # tool_call_id -> index of the assistant message that asked
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                raise reject("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                             "message with 'tool_calls'.", f"messages.[{i}].role")
            pending.pop(message.get("tool_call_id"))
            continue
        if pending:
            asked = min(pending.values())
            raise reject("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                         "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                         f"{', '.join(pending)}", f"messages.[{asked}].role")
        if role not in ("system", "developer", "user", "assistant"):
            raise reject(f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                         f"'function', 'tool', and 'developer'.", f"messages[{i}].role")
        calls = message.get("tool_calls") if role == "assistant" else None
        for call in calls or ():
            pending[str(call.get("id"))] = i
    if pending:
        raise reject("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                     "'tool_call_id'. The following tool_call_ids did not have response messages: "
                     f"{', '.join(pending)}", f"messages.[{min(pending.values())}].role")


def _validate_responses(body: Mapping[str, Any]) -> None:
    items = body.get("input")
    if isinstance(items, str) or items is None:
        return
    called: set[str] = set()
    answered: set[str] = set()
    for item in items:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") == "function_call":
            called.add(str(item.get("call_id")))
        elif item.get("type") == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in called:
                raise _Reject(400, error_body("responses", "invalid_request_error",
                                             f"No tool call found for function call output with call_id {call_id}.",
                                             param="input"))
            answered.add(call_id)
    missing = sorted(called - answered)
    if missing:
        raise _Reject(400, error_body("responses", "invalid_request_error",
                                     f"No tool output found for function call {missing[0]}.", param="input"))


def validated_input_tokens(api: str, body: Mapping[str, Any], counter: Callable[[str], TokenCounter], *,
                           strict_alternation: bool, for_count: bool) -> int:
    """The request's input tokens by `counter(model)`, once its model, conversation and images passed
    the API's checks (a `_Reject` otherwise)."""
    model = body.get("model")
    if not model:
        raise _Reject(400, error_body(api, "invalid_request_error", "model: Field required" if api == "anthropic"
                                     else "you must provide a model parameter"))
    if api == "anthropic":
        _validate_anthropic(body, strict_alternation=strict_alternation, for_count=for_count)
    elif api == "chat":
        _validate_chat(body)
    else:
        _validate_responses(body)
    try:
        _check_images(api, request_messages(api, body))
        return count_request_tokens(api, body, counter(str(model)))
    except (ValueError, TypeError, KeyError, AttributeError) as bad:  # what the converters reject, a server rejects
        raise _Reject(400, error_body(api, "invalid_request_error", f"invalid request: {bad}")) from None


def check_window(api: str, body: Mapping[str, Any], input_tokens: int, *, window: int, max_output: int) -> None:
    """The window as the real APIs enforce it: `max_tokens` within the output cap, and input plus
    `max_tokens` within the context window."""
    max_tokens = max_tokens_of(api, body)
    if max_tokens is not None and max_tokens > max_output:
        raise _Reject(400, output_cap_error(api, str(body["model"]), max_tokens, max_output))
    if input_tokens + (max_tokens or 0) > window:
        raise _Reject(400, overflow_error(api, input_tokens, max_tokens, window))
