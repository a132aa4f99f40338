"""Pairing: the validator and the repair. Example tests for the documented behaviour, then hypothesis
properties over adversarial histories, checked against independent payload-level checkers that play the
provider APIs (they read what the `to_*` writers produce, not canonical messages)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import shared_path
from ctxwin.messages import (
    LEADING_USER_TEXT,
    SYNTHETIC_RESULT_TEXT,
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    from_anthropic,
    repair,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
    validate,
)
from ctxwin.messages.pairing import PROVIDERS, Problem, RepairResult

ANTHROPIC, CHAT, RESPONSES = "anthropic", "openai_chat", "openai_responses"


def u(text: str) -> Message:
    return Message("user", (Text(text),))


def a(text: str = "", *calls: ToolCall) -> Message:
    return Message("assistant", ((Text(text),) if text else ()) + calls)


def call(call_id: str, name: str = "read") -> ToolCall:
    return ToolCall(call_id, name, {"path": f"/{call_id}"})


def res(*pairs: tuple[str, str]) -> Message:
    return Message("tool", tuple(ToolResult(i, (Text(t),)) for i, t in pairs))


def shape(messages: Sequence[Message]) -> list[tuple[str, tuple[Any, ...]]]:
    """Role and blocks (not ids: repair gives inserted messages ids of their own)."""
    return [(m.role, m.blocks) for m in messages]


def kinds(problems: Sequence[Problem]) -> list[str]:
    return sorted(p.kind for p in problems)


def change_kinds(result: RepairResult) -> list[str]:
    return sorted(c.kind for c in result.changes)


VALID = [
    Message("system", (Text("You are a coding agent."),)),
    u("Fix the bug in a.py"),
    a("Reading both files.", call("c1"), call("c2")),
    res(("c1", "def f(): pass"), ("c2", "def g(): pass")),
    a("", call("c3", "bash")),
    res(("c3", "1 passed")),
    a("Fixed."),
]


# --------------------------------------------------------------------------------------------------
# Examples


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_valid_history_comes_back_as_the_same_objects(provider: str) -> None:
    assert validate(VALID, provider) == []
    result = repair(VALID, provider)
    assert result.changes == []
    assert all(x is y for x, y in zip(result.messages, VALID, strict=True))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_cut_that_leaves_orphan_results_drops_them(provider: str) -> None:
    cut = VALID[3:]  # starts with the results of calls that were cut away
    assert "orphan_result" in kinds(validate(cut, provider))
    result = repair(cut, provider)
    assert [c.kind for c in result.changes if c.call_id] == ["drop_orphan_result", "drop_orphan_result"]
    assert validate(result.messages, provider) == []
    if provider == ANTHROPIC:  # the history now opens with an assistant message
        assert shape(result.messages) == shape([u(LEADING_USER_TEXT), *VALID[4:]])
    else:
        assert shape(result.messages) == shape(VALID[4:])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_an_unanswered_call_gets_a_synthetic_error_result(provider: str) -> None:
    cut = VALID[:5]  # ends with a call whose result was cut away
    assert kinds(validate(cut, provider)) == ["missing_result"]
    result = repair(cut, provider)
    assert change_kinds(result) == ["synthetic_result"]
    synthetic = result.messages[-1].tool_results[0]
    assert synthetic == ToolResult("c3", (Text(SYNTHETIC_RESULT_TEXT),), True, "bash")
    assert "missing" in SYNTHETIC_RESULT_TEXT
    assert validate(result.messages, provider) == []


def test_a_result_behind_another_message_moves_next_to_its_call() -> None:
    history = [u("go"), a("", call("c1"), call("c2")), res(("c1", "one")), u("are you there?"), res(("c2", "two"))]
    for provider in (ANTHROPIC, CHAT):
        assert kinds(validate(history, provider)) == ["result_out_of_place"]
        result = repair(history, provider)
        assert change_kinds(result) == ["drop_empty_message", "move_result"]
        assert shape(result.messages) == shape([u("go"), a("", call("c1"), call("c2")), res(("c1", "one")),
                                                res(("c2", "two")), u("are you there?")])
    assert validate(history, RESPONSES) == []  # Responses takes an output anywhere after its call


def test_duplicate_results_keep_the_first() -> None:
    history = [u("go"), a("", call("c1")), res(("c1", "first"), ("c1", "second"))]
    assert kinds(validate(history, ANTHROPIC)) == ["duplicate_result"]
    result = repair(history, ANTHROPIC)
    assert shape(result.messages[-1:]) == shape([res(("c1", "first"))])
    assert change_kinds(result) == ["drop_duplicate_result"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_reused_call_id_is_renamed_with_its_result(provider: str) -> None:
    history = [u("go"), a("", call("c1")), res(("c1", "first")), a("", call("c1")), res(("c1", "second"))]
    assert kinds(validate(history, provider)) == ["duplicate_call_id"]
    result = repair(history, provider)
    assert [c.kind for c in result.changes] == ["rename_call_id"]
    assert result.messages[3].tool_calls[0].id == "c1_dup2"
    assert shape(result.messages[4:]) == shape([res(("c1_dup2", "second"))])
    assert validate(result.messages, provider) == []


def test_a_result_answers_the_reused_id_whose_zone_it_sits_in() -> None:
    """Fewest moves: the result stays where it is and answers the call right before it."""
    history = [u("go"), a("", call("c1")), a("", call("c1")), res(("c1", "out"))]
    result = repair(history, CHAT)
    synthetic = Message("tool", (ToolResult("c1", (Text(SYNTHETIC_RESULT_TEXT),), True, "read"),))
    assert shape(result.messages) == shape([u("go"), a("", call("c1")), synthetic,
                                            a("", ToolCall("c1_dup2", "read", {"path": "/c1"})),
                                            res(("c1_dup2", "out"))])
    assert change_kinds(result) == ["rename_call_id", "synthetic_result"]


def test_a_renamed_id_skips_ids_already_in_use() -> None:
    history = [u("go"), a("", call("c1"), call("c1")), a("", call("c1_dup2"))]
    result = repair(history, CHAT)
    assert [c.id for m in result.messages for c in m.tool_calls] == ["c1", "c1_dup3", "c1_dup2"]


def test_anthropic_call_ids_are_sanitized() -> None:
    history = [u("go"), a("", call("call_1|fc_2")), res(("call_1|fc_2", "ok"))]
    assert kinds(validate(history, ANTHROPIC)) == ["invalid_call_id"]
    assert validate(history, CHAT) == []
    result = repair(history, ANTHROPIC)
    assert result.messages[1].tool_calls[0].id == "call_1_fc_2"
    assert result.messages[2].tool_results[0].call_id == "call_1_fc_2"


def test_anthropic_turns_system_text_after_the_start_into_user_text() -> None:
    history = [Message("system", (Text("base"),)), u("hi"), a("hello"), Message("system", (Text("reminder"),))]
    assert kinds(validate(history, ANTHROPIC)) == ["system_not_at_start"]
    assert validate(history, CHAT) == validate(history, RESPONSES) == []
    result = repair(history, ANTHROPIC)
    assert shape(result.messages[-1:]) == shape([u("reminder")]) and result.messages[0].role == "system"


def test_anthropic_opens_with_a_user_message() -> None:
    history = [Message("system", (Text("base"),)), a("I was saying...")]
    assert kinds(validate(history, ANTHROPIC)) == ["first_not_user"]
    assert validate(history, CHAT) == []
    result = repair(history, ANTHROPIC)
    assert shape(result.messages) == shape([history[0], u(LEADING_USER_TEXT), history[1]])
    assert LEADING_USER_TEXT == "[ctxwin] The earlier part of this conversation is omitted."


def test_anthropic_merges_consecutive_assistant_messages_so_results_may_follow_the_run() -> None:
    history = [u("go"), a("", call("c1")), a("while that runs: hello"), res(("c1", "ok"))]
    assert validate(history, ANTHROPIC) == []  # written as one assistant message, then one user message
    assert kinds(validate(history, CHAT)) == ["result_out_of_place"]
    body = to_anthropic(history)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    fixed = repair(history, CHAT).messages
    assert shape(fixed) == shape([u("go"), a("", call("c1")), res(("c1", "ok")), a("while that runs: hello")])


def test_empty_text_and_empty_messages_are_dropped() -> None:
    history = [u("go"), Message("user", (Text("  \n"),)), a("", call("c1")),
               Message("tool", (ToolResult("c1", (Text(""), Text("ok"))),)), Message("assistant", ()), a("done")]
    assert kinds(validate(history, ANTHROPIC)) == ["empty_message", "empty_message", "empty_text", "empty_text"]
    result = repair(history, ANTHROPIC)
    assert shape(result.messages) == shape([u("go"), a("", call("c1")), res(("c1", "ok")), a("done")])
    assert change_kinds(result) == ["drop_empty_message", "drop_empty_message", "drop_empty_text", "drop_empty_text"]


def test_thinking_only_messages_depend_on_the_provider() -> None:
    signed = Message("assistant", (Thinking("hmm", signature="sig"),))
    history = [u("q"), signed, u("again")]
    assert validate(history, ANTHROPIC) == []
    assert kinds(validate(history, CHAT)) == ["empty_message"]  # Chat has no place for thinking
    assert shape(repair(history, CHAT).messages) == shape([u("q"), u("again")])


def test_responses_reasoning_needs_its_following_item() -> None:
    reasoning = Thinking("plan", "enc", False, {"openai_responses": {"id": "rs_1"}})
    history = [u("q"), Message("assistant", (Text("answer"), reasoning)), u("next")]
    assert kinds(validate(history, RESPONSES)) == ["dangling_reasoning"]
    assert validate([u("q"), Message("assistant", (reasoning, Text("answer")))], RESPONSES) == []
    result = repair(history, RESPONSES)
    assert shape(result.messages[1:2]) == shape([a("answer")])
    assert change_kinds(result) == ["drop_dangling_reasoning"]


def test_misplaced_blocks_are_moved_or_dropped() -> None:
    history = [u("go"), a("", call("c1")),
               Message("user", (ToolResult("c1", (Text("ok"),)), Text("and then?"), call("c9"))),
               Message("tool", (Text("stray tool text"),))]
    assert kinds(validate(history, ANTHROPIC)).count("misplaced_block") == 3
    result = repair(history, ANTHROPIC)
    assert shape(result.messages) == shape([u("go"), a("", call("c1")), res(("c1", "ok")), u("and then?"),
                                            u("stray tool text")])
    assert validate(result.messages, ANTHROPIC) == []


def test_problems_and_changes_name_the_message_and_the_call() -> None:
    history = [res(("gone", "x")), u("go"), a("", call("c1"))]
    problems = validate(history, CHAT)
    assert [(p.kind, p.index, p.call_id) for p in problems] == [("orphan_result", 0, "gone"),
                                                                ("missing_result", 2, "c1")]
    changes = repair(history, CHAT).changes
    assert [(c.kind, c.index, c.call_id) for c in changes] == [
        ("drop_orphan_result", 0, "gone"), ("drop_empty_message", 0, None), ("synthetic_result", 2, "c1")]


def test_unknown_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown provider 'gemini'"):
        validate(VALID, "gemini")  # type: ignore[arg-type]


def test_a_real_cut_of_an_anthropic_history_is_repaired() -> None:
    """The shape Claude Code users hit (anthropics/claude-code #7796): history edited so that a tool_use
    has no tool_result right after it."""
    body = [
        {"role": "user", "content": "Run the tests and fix what fails"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "Bash",
                                           "input": {"command": "pytest -x"}}]},
        {"role": "user", "content": "[Request interrupted by user for tool use]"},
        {"role": "assistant", "content": [{"type": "text", "text": "Stopping."}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "late output"}]},
    ]
    messages = from_anthropic(body)
    assert {p.kind for p in validate(messages)} == {"result_out_of_place"}
    fixed = to_anthropic(repair(messages).messages)["messages"]
    assert fixed[1:3] == [body[1], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "late output"},
        {"type": "text", "text": "[Request interrupted by user for tool use]"}]}]
    assert anthropic_errors(fixed) == []


# --------------------------------------------------------------------------------------------------
# Independent checkers of written payloads: what each API rejects (as its docs and error messages say)

_ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _blank(text: Any) -> bool:
    return not isinstance(text, str) or not text.strip()


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


def anthropic_errors(messages: list[dict[str, Any]]) -> list[str]:
    errors = []
    seen_ids: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("user", "assistant"):
            errors.append(f"{i}: role {role}")
        if i == 0 and role != "user":
            errors.append("first message must be user")
        if i and messages[i - 1].get("role") == role:
            errors.append(f"{i}: roles must alternate")
        blocks = _blocks(message.get("content"))
        if not blocks:
            errors.append(f"{i}: empty content")
        kinds_seen = [b.get("type") for b in blocks]
        if "tool_result" in kinds_seen:
            last_result = max(j for j, k in enumerate(kinds_seen) if k == "tool_result")
            if any(k != "tool_result" for k in kinds_seen[:last_result]):
                errors.append(f"{i}: tool_result blocks must come first")
        for block in blocks:
            if block.get("type") == "text" and _blank(block.get("text")):
                errors.append(f"{i}: empty text block")
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):  # "" is accepted
                for part in block["content"]:
                    if part.get("type") == "text" and _blank(part.get("text")):
                        errors.append(f"{i}: empty text in tool_result")
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        for use in uses:
            if not _ANTHROPIC_ID.match(use) or use in seen_ids:
                errors.append(f"{i}: bad or duplicate tool_use id {use!r}")
            seen_ids.add(use)
        following = _blocks(messages[i + 1].get("content")) if i + 1 < len(messages) else []
        answers = [b.get("tool_use_id") for b in following if b.get("type") == "tool_result"]
        for use in uses:
            if answers.count(use) != 1:
                errors.append(f"{i}: tool_use {use} not answered exactly once in the next message")
        previous = _blocks(messages[i - 1].get("content")) if i else []
        called = {b.get("id") for b in previous if b.get("type") == "tool_use"}
        for block in blocks:
            if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                errors.append(f"{i}: tool_result {block.get('tool_use_id')} without tool_use in the previous message")
    return errors


def chat_errors(messages: list[dict[str, Any]]) -> list[str]:
    errors = []
    pending: set[str] = set()
    answered: set[str] = set()
    seen: set[str] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                errors.append(f"{i}: tool message not answering a pending call")
            pending.discard(call_id)
            answered.add(call_id)
            parts = _blocks(message.get("content"))
            if any(p.get("type") != "text" or (_blank(p.get("text")) and len(parts) > 1) for p in parts):
                errors.append(f"{i}: bad tool content")
            continue
        if pending:
            errors.append(f"{i}: calls {sorted(pending)} not answered before a {role} message")
            pending = set()
        if role not in ("system", "developer", "user", "assistant"):
            errors.append(f"{i}: role {role}")
        parts = _blocks(message.get("content"))
        if any(p.get("type") == "text" and _blank(p.get("text")) for p in parts):
            errors.append(f"{i}: empty text")
        calls = message.get("tool_calls") or []
        if not parts and not calls and not message.get("refusal"):
            errors.append(f"{i}: empty message")
        for tool_call in calls:
            if not tool_call.get("id") or tool_call["id"] in seen:
                errors.append(f"{i}: bad or duplicate call id")
            seen.add(tool_call["id"])
            pending.add(tool_call["id"])
    if pending:
        errors.append(f"calls {sorted(pending)} never answered")
    return errors


def responses_errors(items: list[dict[str, Any]]) -> list[str]:
    errors = []
    calls: set[str] = set()
    answered: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            if not item.get("call_id") or item["call_id"] in calls:
                errors.append(f"{i}: bad or duplicate call id")
            calls.add(item["call_id"])
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if item.get("call_id") not in calls:
                errors.append(f"{i}: No tool call found for function call output with call_id {item.get('call_id')}")
            elif item["call_id"] in answered:
                errors.append(f"{i}: second output")
            answered.add(item.get("call_id"))
        elif kind == "reasoning":
            following = next((x for x in items[i + 1:] if x.get("type") != "reasoning"), None)
            if following is None or not (following.get("type") in ("function_call", "custom_tool_call") or (
                    following.get("type") == "message" and following.get("role") == "assistant")):
                errors.append(f"{i}: reasoning was provided without its required following item")
        elif kind == "message":
            parts = item.get("content") or []
            if not parts or any(p.get("type") in ("input_text", "output_text") and _blank(p.get("text"))
                                for p in parts):
                errors.append(f"{i}: empty message or text")
    for missing in sorted(calls - answered):
        errors.append(f"No tool output found for function call {missing}")
    return errors


PAYLOAD_ERRORS: dict[str, Callable[[list[Message]], list[str]]] = {
    ANTHROPIC: lambda ms: anthropic_errors(to_anthropic(ms)["messages"]),
    CHAT: lambda ms: chat_errors(to_openai_chat(ms)),
    RESPONSES: lambda ms: responses_errors(to_openai_responses(ms)),
}


def test_the_checkers_catch_what_the_apis_reject() -> None:
    for provider in PROVIDERS:  # they are not vacuous: each flags a broken history
        assert PAYLOAD_ERRORS[provider]([u("go"), a("", call("c1"))])
        assert PAYLOAD_ERRORS[provider](VALID[1:]) == []
    assert anthropic_errors(to_anthropic([a("hi")])["messages"])
    assert chat_errors(to_openai_chat([u("go"), a("", call("c1")), u("x"), res(("c1", "late"))]))


# --------------------------------------------------------------------------------------------------
# Adversarial histories

IDS = st.sampled_from(["c1", "c2", "c3", "c4", "c1_dup2", "call|7", ""])
TEXTS = st.one_of(st.sampled_from(["", " ", "\n\t"]), st.text(alphabet="abcdxyz ", min_size=1, max_size=5))
IMAGES = st.sampled_from([Image("image/png", data="iVBOR"), Image(url="https://example.com/i.png"), Image()])
THINKING = st.sampled_from([
    Thinking("reasoning", signature="sig"), Thinking("unsigned"), Thinking("opaque", redacted=True),
    Thinking("summary", "gAAAA", False, {"openai_responses": {"id": "rs_1"}}),
])


@st.composite
def calls(draw: st.DrawFn) -> ToolCall:
    return ToolCall(draw(IDS), draw(st.sampled_from(["read", "bash", "grep"])), {"q": draw(TEXTS)})


@st.composite
def results(draw: st.DrawFn) -> ToolResult:
    parts = draw(st.lists(st.one_of(st.builds(Text, TEXTS), IMAGES), max_size=2))
    return ToolResult(draw(IDS), tuple(parts), draw(st.booleans()))


def messages_of(role: str) -> st.SearchStrategy[Message]:
    texts = st.builds(Text, TEXTS)
    blocks = {
        "system": st.lists(texts, max_size=2),
        "user": st.lists(st.one_of(texts, texts, IMAGES), max_size=3),
        "assistant": st.lists(st.one_of(texts, calls(), calls(), THINKING), max_size=5),
        "tool": st.lists(results(), max_size=3),
    }[role]
    return st.builds(lambda bs: Message(role, tuple(bs)), blocks)  # type: ignore[arg-type]


misplaced = st.sampled_from([
    Message("user", (ToolResult("c1", (Text("late"),)), Text("and then"))),
    Message("tool", (ToolResult("c2", (Text("r"),)), Text("stray"))),
    Message("user", (ToolCall("c3", "read", {}), Text("a user cannot call"))),
    Message("system", (Thinking("x", signature="s"), Text("system"))),
])

random_histories = st.lists(
    st.one_of(*(messages_of(r) for r in ("system", "user", "assistant", "assistant", "tool", "tool")), misplaced),
    max_size=12)


@st.composite
def cut_histories(draw: st.DrawFn, edits: bool = True) -> list[Message]:
    """A valid conversation (parallel calls, results split over tool messages in any order), then what
    cuts and edits do to it: a prefix or a middle slice removed, messages dropped, duplicated or swapped."""
    history: list[Message] = [Message("system", (Text("sys"),))] if draw(st.booleans()) else []
    n = 0
    for turn in range(draw(st.integers(1, 4))):
        history.append(u(f"user {turn}"))
        for _ in range(draw(st.integers(0, 3))):
            made = []
            for _ in range(draw(st.integers(1, 3))):
                n += 1
                made.append(ToolCall(f"toolu_{n}", "read", {"n": n}))
            thinking = (Thinking(f"think {n}", signature=f"sig{n}"),) if draw(st.booleans()) else ()
            history.append(Message("assistant", (*thinking, Text(f"calling {n}"), *made)))
            answers = [ToolResult(c.id, (Text(f"out {c.id}"),), False, c.name) for c in made]
            answers = draw(st.permutations(answers))
            split = draw(st.integers(1, len(answers)))
            history.append(Message("tool", tuple(answers[:split])))
            if split < len(answers):
                history.append(Message("tool", tuple(answers[split:])))
        history.append(a(f"answer {turn}"))
    for _ in range(draw(st.integers(0, 4)) if edits else 0):
        if not history:
            break
        op = draw(st.sampled_from(["cut_front", "cut_middle", "drop", "duplicate", "swap"]))
        i = draw(st.integers(0, len(history) - 1))
        j = draw(st.integers(i, len(history)))
        if op == "cut_front":
            history = history[i:]
        elif op == "cut_middle":
            history = history[:i] + history[j:]
        elif op == "drop":
            del history[i]
        elif op == "duplicate":
            history.insert(i, history[i])
        elif i + 1 < len(history):
            history[i], history[i + 1] = history[i + 1], history[i]
    return history


histories = st.one_of(random_histories, cut_histories())


def spoken_texts(messages: Sequence[Message]) -> list[str]:
    """The user and assistant text a person would read (whitespace-only text is not text)."""
    return [b.text for m in messages if m.role in ("user", "assistant")
            for b in m.blocks if type(b) is Text and b.text.strip()]


def nonempty(parts: Sequence[Text | Image]) -> tuple[Text | Image, ...]:
    return tuple(p for p in parts if (p.text.strip() if type(p) is Text else (p.data or p.url)))


def is_subsequence(needle: list[str], haystack: list[str]) -> bool:
    it = iter(haystack)
    return all(any(x == y for y in it) for x in needle)


PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("provider", PROVIDERS)
@PROPERTY_SETTINGS
@given(history=histories)
def test_repaired_histories_validate_and_are_accepted(provider: str, history: list[Message]) -> None:
    result = repair(history, provider)
    assert validate(result.messages, provider) == []
    assert PAYLOAD_ERRORS[provider](result.messages) == []
    # every tool call has exactly one result after it
    calls_out = [c.id for m in result.messages for c in m.tool_calls]
    results_out = [r.call_id for m in result.messages for r in m.tool_results]
    assert sorted(calls_out) == sorted(results_out) and len(set(calls_out)) == len(calls_out)


@pytest.mark.parametrize("provider", PROVIDERS)
@PROPERTY_SETTINGS
@given(history=histories)
def test_repair_is_idempotent(provider: str, history: list[Message]) -> None:
    once = repair(history, provider)
    twice = repair(once.messages, provider)
    assert twice.changes == []
    assert all(x is y for x, y in zip(twice.messages, once.messages, strict=True))
    assert len(twice.messages) == len(once.messages)


@pytest.mark.parametrize("provider", PROVIDERS)
@PROPERTY_SETTINGS
@given(history=histories)
def test_repair_never_drops_user_or_assistant_text_calls_or_real_results(provider: str,
                                                                          history: list[Message]) -> None:
    result = repair(history, provider)
    assert is_subsequence(spoken_texts(history), spoken_texts(result.messages))
    # every tool call made by an assistant survives (possibly renamed), in order
    assert [(c.name, c.arguments) for m in history if m.role == "assistant" for c in m.tool_calls] == \
        [(c.name, c.arguments) for m in result.messages for c in m.tool_calls]
    # every result in the output is an input result or a synthetic error; nothing is invented otherwise
    given_contents = [nonempty(r.content) for m in history for r in m.tool_results]
    for m in result.messages:
        for r in m.tool_results:
            is_synthetic = r.is_error and r.content == (Text(SYNTHETIC_RESULT_TEXT),)
            assert is_synthetic or nonempty(r.content) in given_contents
    assert all(c.kind for c in result.changes) and bool(result.changes) == bool(validate(history, provider))


@pytest.mark.parametrize("provider", PROVIDERS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(history=histories)
def test_valid_histories_are_returned_unchanged_and_accepted(provider: str, history: list[Message]) -> None:
    """Histories the validator passes, whatever their shape, are what the API accepts."""
    assume(validate(history, provider) == [])
    result = repair(history, provider)
    assert result.changes == []
    assert all(x is y for x, y in zip(result.messages, history, strict=True))
    assert PAYLOAD_ERRORS[provider](history) == []  # the validator's "valid" is the API's "accepted"


@pytest.mark.parametrize("provider", PROVIDERS)
@settings(max_examples=200, deadline=None)
@given(history=cut_histories(edits=False))
def test_uncut_conversations_are_valid_and_untouched(provider: str, history: list[Message]) -> None:
    assert validate(history, provider) == []
    result = repair(history, provider)
    assert result.changes == [] and all(x is y for x, y in zip(result.messages, history, strict=True))
    assert PAYLOAD_ERRORS[provider](history) == []


@pytest.mark.shared
@pytest.mark.parametrize("provider", PROVIDERS)
def test_real_claude_code_sessions_repair_to_accepted_requests(provider: str) -> None:
    """The main chain of each real session, one canonical message per record (as Claude Code writes
    them: one API response over several records, "\n\n" text blocks from streaming, interrupts between
    a call and its result): after repair every call has its one result and the API checker accepts it."""
    for path in sorted(shared_path("claude-code").glob("*.jsonl")):
        messages: list[Message] = []
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("type") in ("user", "assistant") and not record.get("isSidechain"):
                messages.extend(from_anthropic([record["message"]]))
        result = repair(messages, provider)
        assert validate(result.messages, provider) == [], path.name
        assert PAYLOAD_ERRORS[provider](result.messages) == [], path.name
        calls = [c.id for m in result.messages for c in m.tool_calls]
        assert sorted(calls) == sorted(r.call_id for m in result.messages for r in m.tool_results)
        assert len(calls) == sum(len(m.tool_calls) for m in messages)
        assert is_subsequence(spoken_texts(messages), spoken_texts(result.messages))
