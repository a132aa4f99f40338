"""Issue 17, items 23 and 25: the engine under hostile or careless use. Each test is the smallest
reproduction from the issue; every failure must be a typed `CtxwinError` that says what to pass."""

from __future__ import annotations

import json
import math

import pytest

from ctxwin import ContextEngine
from ctxwin.errors import CtxwinError, InputError
from ctxwin.messages import Message, Text, ToolCall
from ctxwin.messages.pairing import validate


def many_unanswered(n: int) -> list[Message]:
    return [Message("user", (Text("do many things"),)),
            Message("assistant", tuple(ToolCall(f"c{i}", "ls", {}) for i in range(n))),
            Message("user", (Text("what happened?"),))]


@pytest.mark.parametrize("window", [200_000, 32_000])
def test_item_23_thousands_of_unanswered_calls_still_fit(window: int) -> None:
    engine = ContextEngine(model="gpt-4o", policy="ctxwin", window=window, max_output=4_000)
    engine.append(many_unanswered(3_000))
    prepared = engine.prepare()
    assert prepared.tokens <= prepared.budget
    assert not validate(prepared.messages, "anthropic") and not validate(prepared.messages, "openai_chat")
    # The turn is either collapsed to a line naming where its calls are, or compacted away.
    actions = {e.action for e in prepared.events}
    assert "collapse_unanswered" in actions or "ctxwin" in actions, actions
    assert "what happened?" in prepared.messages[-1].text  # the latest turn is still there
    assert len(engine.messages[1].tool_calls) == 3_000  # the log keeps every call
    collapsed = [m for m in prepared.messages if "never answered" in m.text]
    if collapsed:
        ref = collapsed[0].text.split('recall("')[1].split('"')[0]
        assert len(json.loads(engine.recall(ref))["blocks"]) == 3_000


def test_item_23_recover_on_a_tiny_real_window_keeps_a_positive_budget() -> None:
    engine = ContextEngine(model="claude-sonnet-4-5", policy="ctxwin")
    engine.append(Message("user", (Text("hello " * 50),)))
    engine.prepare()
    prepared = engine.recover({"error": {"type": "invalid_request_error",
                                         "message": "prompt is too long: 1300 tokens > 1000 maximum"}})
    assert engine.window == 1_000 and 0 < engine.budget < 1_000
    assert prepared.tokens <= prepared.budget


@pytest.mark.parametrize("tools", [["x"], [{"foo": 1}], [5]])
def test_item_25_tool_schemas_that_are_not_schemas(tools: list) -> None:
    with pytest.raises(InputError, match="tool schema"):
        ContextEngine(model="gpt-4o", tools=tools)


@pytest.mark.parametrize("value", [None, 5, 3.5, object()])
def test_item_25_append_of_something_that_is_not_a_message(value: object) -> None:
    with pytest.raises(InputError, match="append"):
        ContextEngine(model="gpt-4o").append(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("ref", [None, 5, b"entry:x"])
def test_item_25_recall_of_something_that_is_not_a_ref(ref: object) -> None:
    with pytest.raises(InputError, match="recall"):
        ContextEngine(model="gpt-4o").recall(ref)  # type: ignore[arg-type]


@pytest.mark.parametrize("usage", [math.nan, math.inf, {"input_tokens": math.nan}])
def test_item_25_usage_with_numbers_that_are_not_finite(usage: object) -> None:
    engine = ContextEngine(model="gpt-4o")
    engine.append(Message("user", (Text("hi"),)))
    engine.prepare()
    with pytest.raises(InputError, match="finite"):
        engine.record_usage(usage)


def test_item_25_recover_on_an_exception_whose_str_raises() -> None:
    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    engine = ContextEngine(model="gpt-4o")
    with pytest.raises(CtxwinError, match="not a context overflow"):
        engine.recover(Hostile())


@pytest.mark.parametrize(("field", "value"), [("window", 0), ("window", -5), ("max_output", -1),
                                              ("window", math.nan), ("max_output", True)])
def test_item_25_limits_that_are_not_positive(field: str, value: object) -> None:
    with pytest.raises(InputError, match=field):
        ContextEngine(model="gpt-4o", **{field: value})


@pytest.mark.parametrize("value", [-10**9, "x", 1.5, True])
def test_item_25_overhead_tokens_that_are_not_a_count(value: object) -> None:
    with pytest.raises(InputError, match="overhead_tokens"):
        ContextEngine(model="gpt-4o", overhead_tokens=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("call", "arguments"), [("sync", (None,)), ("sync", (5,)), ("pin", (["a"],))])
def test_item_25_sync_and_pin_of_the_wrong_thing(call: str, arguments: tuple) -> None:
    with pytest.raises(InputError):
        getattr(ContextEngine(model="gpt-4o"), call)(*arguments)


def test_item_25_a_workspace_that_is_not_a_path() -> None:
    with pytest.raises(InputError, match="workspace"):
        ContextEngine(model="gpt-4o", workspace=5)  # type: ignore[arg-type]


def test_item_25_errors_that_are_not_overflows_spend_no_recovery_attempt() -> None:
    engine = ContextEngine(model="claude-sonnet-4-5")
    engine.append(Message("user", (Text("hello " * 50),)))
    engine.prepare()
    for _ in range(4):
        with pytest.raises(CtxwinError, match="not a context overflow"):
            engine.recover(RuntimeError("connection reset"))
    engine.recover({"error": {"type": "invalid_request_error", "message": "prompt is too long: 900 tokens > 800"}})


def test_item_25_what_a_recovery_learns_is_logged_so_a_reopen_agrees() -> None:
    engine = ContextEngine(model="claude-sonnet-4-5")
    engine.append(Message("user", (Text("hello " * 400),)))
    prepared = engine.prepare()
    engine.recover({"error": {"type": "invalid_request_error",
                              "message": f"prompt is too long: {prepared.raw_tokens * 3} tokens > 200000 maximum"}})
    reopened = ContextEngine(engine.session, model="claude-sonnet-4-5")
    assert engine.calibrator.to_dict()["observations"]  # the provider's count was learned ...
    assert reopened.calibrator.to_dict() == engine.calibrator.to_dict()  # ... and logged
    assert reopened.prepare().tokens == engine.prepare().tokens
