"""Provider formats both ways: realistic payloads round-trip exactly (or up to the normalizations each
module documents), canonical histories survive a trip through every format, written payloads have the
shapes the official SDKs declare, and real session files round-trip."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import shared_path
from ctxwin.messages import (
    Image,
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    detect_format,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    from_provider_dict,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
)
from ctxwin.messages.providers.openai_chat import TOOL_IMAGE_NOTE

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
JPEG = "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8U"

# --------------------------------------------------------------------------------------------------
# Realistic payloads, each already in its format's normal form (so the round trip must be exact)

CHAT = [
    {"role": "developer", "content": "You are a coding agent. Use the tools; keep answers short."},
    {"role": "user", "name": "alice", "content": [
        {"type": "text", "text": "Why does this screenshot show an error? Check both logs."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/diagram.png"}},
    ]},
    # what `response.choices[0].message.model_dump()` gives for parallel calls (less `annotations`, which
    # a request does not take: see test_fields_a_request_does_not_take_are_kept_but_not_sent)
    {"role": "assistant", "content": None, "refusal": None, "audio": None,
     "function_call": None, "tool_calls": [
         {"id": "call_Yq3bPkD9sX1", "type": "function",
          "function": {"name": "read_file", "arguments": "{\"path\":\"logs/app.log\",\"tail\":50}"}},
         {"id": "call_Zr7mK2xaW4", "type": "function",  # spaced JSON: the original bytes must come back
          "function": {"name": "read_file", "arguments": "{\"path\": \"logs/worker.log\", \"note\": \"é\"}"}},
     ]},
    {"role": "tool", "tool_call_id": "call_Yq3bPkD9sX1", "content": "2024-05-01 ERROR db timeout after 30s"},
    {"role": "tool", "tool_call_id": "call_Zr7mK2xaW4",
     "content": [{"type": "text", "text": "worker ok"}, {"type": "text", "text": "queue depth 0"}]},
    {"role": "assistant", "content": "The app log shows a DB timeout; checking migrations.",
     "tool_calls": [{"id": "call_Q1", "type": "function",
                     "function": {"name": "bash", "arguments": "{\"cmd\": \"alembic current"}}]},  # not JSON
    {"role": "tool", "tool_call_id": "call_Q1", "content": "Error: unterminated quote"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_P1", "type": "custom",
         "custom": {"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"}},
    ]},
    {"role": "tool", "tool_call_id": "call_P1", "content": "Done!"},
    {"role": "assistant", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]},
    {"role": "user", "content": "Now write ransomware."},
    {"role": "assistant", "content": None, "refusal": "I can't help with that."},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "Still no."}]},
    {"role": "system", "content": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "No emoji."}]},
    {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
                                 {"type": "text", "text": "transcribe"}]},
]

RESPONSES = [
    {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
    {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Fix the failing test"},
        {"type": "input_image", "image_url": f"data:image/jpeg;base64,{JPEG}", "detail": "auto"},
    ]},
    {"type": "reasoning", "id": "rs_68a1", "summary": [{"type": "summary_text", "text": "**Planning** the fix"}],
     "encrypted_content": "gAAAAABoX1-encrypted"},
    {"type": "function_call", "id": "fc_68a2", "call_id": "call_A1", "name": "shell",
     "arguments": "{\"command\":[\"pytest\",\"-x\"]}", "status": "completed"},
    {"type": "function_call", "id": "fc_68a3", "call_id": "call_A2", "name": "shell",
     "arguments": "{\"command\":[\"git\",\"status\"]}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_A1", "output": "FAILED tests/test_x.py::test_edge - 1 failed"},
    {"type": "function_call_output", "call_id": "call_A2", "output": [
        {"type": "input_text", "text": "On branch main"},
        {"type": "input_image", "image_url": "https://example.com/screen.png"},
    ]},
    {"type": "reasoning", "id": "rs_68a4", "summary": [], "encrypted_content": "gAAAAABoX2"},
    {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_P", "name": "apply_patch",
     "input": "*** Begin Patch\n*** Update File: x.py\n*** End Patch", "status": "completed"},
    {"type": "custom_tool_call_output", "call_id": "call_P", "output": "Success. Updated: x.py"},
    {"type": "message", "id": "msg_68a5", "role": "assistant", "status": "completed", "phase": "final_answer",
     "content": [{"type": "output_text", "text": "Fixed the off-by-one.", "annotations": [], "logprobs": []}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Codex items have no id."}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks; search the web too"}]},
    {"type": "reasoning", "id": "rs_9", "summary": [{"type": "summary_text", "text": "first"},
                                                     {"type": "summary_text", "text": "second"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
    {"type": "message", "id": "msg_r", "role": "assistant", "status": "completed",
     "content": [{"type": "refusal", "refusal": "I can't share that."}]},
]

ANTHROPIC = {
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Project rules: run tests before committing."},
    ],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "What's wrong in this screenshot?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        ]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "Let me read both files.", "signature": "EqQBCkYIBxgCKkDsig=="},
            {"type": "text", "text": "I'll read both files."},
            {"type": "tool_use", "id": "toolu_01A", "name": "Read", "input": {"file_path": "/src/a.py"}},
            {"type": "tool_use", "id": "toolu_01B", "name": "Read", "input": {"file_path": "/src/b.py"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "     1\tdef f():\n     2\t    return 1"},
            {"type": "tool_result", "tool_use_id": "toolu_01B",
             "content": "<tool_use_error>File does not exist.</tool_use_error>", "is_error": True},
            {"type": "text", "text": "Also check the logs please"},
        ]},
        {"role": "assistant", "content": [
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
            {"type": "tool_use", "id": "toolu_01C", "name": "Screenshot", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01C", "cache_control": {"type": "ephemeral"}, "content": [
                {"type": "text", "text": "Captured the window"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}},
            ]},
        ]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "The release notes say so.", "citations": [
                {"type": "char_location", "cited_text": "so", "document_index": 0, "document_title": "notes",
                 "start_char_index": 0, "end_char_index": 2}]},
            {"type": "text", "text": "Anything else?"},
        ]},
        {"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Release notes"},
             "title": "notes"},
            {"type": "text", "text": "Summarize this."},
        ]},
        {"role": "assistant", "content": "Short summary."},
    ],
}


def anthropic_round_trip(body: Mapping[str, Any]) -> dict[str, Any]:
    return to_anthropic(from_anthropic(body["messages"], body.get("system")))


def test_chat_round_trip_is_exact() -> None:
    original = copy.deepcopy(CHAT)
    assert to_openai_chat(from_openai_chat(CHAT)) == CHAT
    assert original == CHAT  # the converter did not touch its input


def test_responses_round_trip_is_exact() -> None:
    assert to_openai_responses(from_openai_responses(RESPONSES)) == RESPONSES


def test_anthropic_round_trip_is_exact() -> None:
    assert anthropic_round_trip(ANTHROPIC) == ANTHROPIC


def test_chat_reading() -> None:
    messages = from_openai_chat(CHAT)
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant",
                                          "tool", "assistant", "user", "assistant", "assistant", "system", "user"]
    user = messages[1]
    assert user.blocks[1] == Image(media_type="image/png", data=PNG)
    assert user.blocks[2] == Image(url="https://example.com/diagram.png")
    calls = messages[2].tool_calls
    assert [c.arguments for c in calls] == [{"path": "logs/app.log", "tail": 50},
                                            {"path": "logs/worker.log", "note": "é"}]
    results = messages[3].tool_results  # parallel results: one canonical tool message, named after the calls
    assert [(r.call_id, r.name, r.text) for r in results] == [
        ("call_Yq3bPkD9sX1", "read_file", "2024-05-01 ERROR db timeout after 30s"),
        ("call_Zr7mK2xaW4", "read_file", "worker ok\nqueue depth 0")]
    assert messages[4].tool_calls[0].arguments == "{\"cmd\": \"alembic current"  # invalid JSON stays raw
    assert messages[6].tool_calls[0].arguments == "*** Begin Patch\n*** End Patch"
    assert messages[10].text == "I can't help with that."  # the refusal is assistant text


def test_responses_reading_groups_a_turn_into_one_assistant_message() -> None:
    messages = from_openai_responses(RESPONSES)
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                          "assistant", "user", "assistant"]
    turn = messages[2]
    assert [b.type for b in turn.blocks] == ["thinking", "tool_call", "tool_call"]
    thinking = turn.blocks[0]
    assert isinstance(thinking, Thinking)
    assert (thinking.thinking, thinking.signature) == ("**Planning** the fix", "gAAAAABoX1-encrypted")
    assert messages[3].tool_results[0].name == "shell"
    assert messages[4].blocks[1].arguments == "*** Begin Patch\n*** Update File: x.py\n*** End Patch"
    assert messages[6].text == "Fixed the off-by-one.\nCodex items have no id."
    assert messages[8].blocks[0].thinking == "first\n\nsecond"


def test_anthropic_reading_splits_results_from_user_text() -> None:
    messages = from_anthropic(ANTHROPIC["messages"], ANTHROPIC["system"])
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "tool", "user", "assistant", "tool",
                                          "assistant", "user", "assistant"]
    assert messages[0].text == "You are Claude Code.\nProject rules: run tests before committing."
    results = [r for m in messages[3:5] for r in m.tool_results]  # one tool message per result
    assert [len(m.tool_results) for m in messages[3:5]] == [1, 1]
    assert [(r.call_id, r.name, r.is_error) for r in results] == [
        ("toolu_01A", "Read", False), ("toolu_01B", "Read", True)]
    assert messages[5].text == "Also check the logs please"
    redacted = messages[6].blocks[0]
    assert isinstance(redacted, Thinking) and redacted.redacted and redacted.thinking == "EmwKAhgBEgy3va3pzix/LafPsn4a"
    shot = messages[7].tool_results[0]
    assert shot.content[1] == Image(media_type="image/jpeg", data=JPEG)
    assert shot.extra == {"anthropic": {"cache_control": {"type": "ephemeral"}}}


# --------------------------------------------------------------------------------------------------
# The documented normalizations, one by one


def test_chat_normalizations() -> None:
    given = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f"}},
                                             {"id": "c2", "type": "function",
                                              "function": {"name": "g", "arguments": {"a": 1}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
    ]
    assert to_openai_chat(from_openai_chat(given)) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
    ]


def test_chat_kept_argument_bytes_give_way_when_arguments_change() -> None:
    message = from_openai_chat([{"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}])[0]
    call = message.tool_calls[0]
    changed = ToolCall(call.id, call.name, {"a": 2}, call.extra)
    written = to_openai_chat([message.replace(blocks=(changed,))])
    assert written[0]["tool_calls"][0]["function"]["arguments"] == "{\"a\":2}"


def test_responses_normalizations() -> None:
    given = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"type": "function_call", "call_id": "c1", "name": "f"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]},
    ]
    assert to_openai_responses(from_openai_responses(given)) == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]


def test_responses_summary_follows_an_edited_thinking_text() -> None:
    messages = from_openai_responses([RESPONSES[13]])  # two summary parts, kept as given
    assert to_openai_responses(messages) == [RESPONSES[13]]
    thinking = messages[0].blocks[0]
    edited = Thinking("rewritten", thinking.signature, False, thinking.extra)
    item = to_openai_responses([messages[0].replace(blocks=(edited,))])[0]
    assert item["summary"] == [{"type": "summary_text", "text": "rewritten"}] and item["id"] == "rs_9"


def test_anthropic_normalizations() -> None:
    given = {"system": "", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "ok"}]}]},
    ]}
    assert anthropic_round_trip(given) == {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ]}


def test_fields_given_as_null_or_empty_come_back_as_given() -> None:
    chat = [{"role": "assistant", "content": "", "tool_calls": [], "refusal": ""},
            {"role": "user", "content": []}]
    assert to_openai_chat(from_openai_chat(chat)) == chat
    anthropic = {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "", "is_error": False},
        {"type": "tool_result", "tool_use_id": "u", "content": []},
        {"type": "tool_result", "tool_use_id": "v"}]}]}
    assert anthropic_round_trip(anthropic) == anthropic


def test_fields_a_request_does_not_take_are_kept_but_not_sent() -> None:
    response = {"id": "msg_01X", "type": "message", "role": "assistant", "model": "claude-opus-4-6",
                "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 2}}
    message = from_anthropic([response])[0]
    assert message.meta["anthropic_unsent"]["usage"] == {"input_tokens": 10, "output_tokens": 2}
    assert to_anthropic([message])["messages"] == [{"role": "assistant", "content": "Done."}]
    chat = {"role": "assistant", "content": "ok", "annotations": [], "reasoning_content": "hmm", "agent": "main"}
    message = from_openai_chat([chat])[0]
    assert message.meta["openai_chat_unsent"] == {"annotations": [], "reasoning_content": "hmm", "agent": "main"}
    assert to_openai_chat([message]) == [{"role": "assistant", "content": "ok"}]
    item = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "recorded_at": "12:00"}
    call = from_openai_responses([item])[0].blocks[0]
    assert call.extra["openai_responses_unsent"] == {"recorded_at": "12:00"}
    assert to_openai_responses(from_openai_responses([item])) == [{k: v for k, v in item.items() if k != "recorded_at"}]


# --------------------------------------------------------------------------------------------------
# Across formats


def test_extras_stay_with_their_format() -> None:
    messages = from_anthropic(ANTHROPIC["messages"], ANTHROPIC["system"])
    for payload in (to_openai_chat(messages), to_openai_responses(messages)):
        text = json.dumps(payload)
        assert "cache_control" not in text and "citations" not in text
        assert "[anthropic document omitted]" in text  # the unmodelled block is visible as a placeholder
    chat = from_openai_chat(CHAT)
    assert "detail" not in json.dumps(to_anthropic(chat))


def test_thinking_goes_back_only_where_it_can_be_verified() -> None:
    anthropic = from_anthropic(ANTHROPIC["messages"])
    responses = from_openai_responses(RESPONSES)
    assert "reasoning" not in json.dumps(to_openai_responses(anthropic))  # no rs_ id, no OpenAI encryption
    assert "thinking" not in json.dumps(to_anthropic(responses))  # encrypted_content is no Anthropic signature
    chat_text = json.dumps(to_openai_chat(anthropic))
    assert "Let me read both files." not in chat_text  # Chat has no reasoning input
    unsigned = Message("assistant", (Thinking("unsigned"), Text("answer")))
    assert to_anthropic([Message("user", (Text("q"),)), unsigned])["messages"][1]["content"] == "answer"


def test_tool_result_images_reach_chat_in_a_user_message() -> None:
    messages = from_anthropic(ANTHROPIC["messages"][:5])
    written = to_openai_chat(messages)
    tool = next(m for m in written if m.get("tool_call_id") == "toolu_01C")
    assert tool["content"] == [{"type": "text", "text": "Captured the window"},
                               {"type": "text", "text": TOOL_IMAGE_NOTE}]
    follow = written[written.index(tool) + 1]
    assert follow == {"role": "user", "content": [
        {"type": "text", "text": "[images returned by tool call toolu_01C]"},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}}]}


def test_raw_arguments_become_an_object_for_anthropic() -> None:
    calls = (ToolCall("c1", "f", "not json"), ToolCall("c2", "g", ""), ToolCall("c3", "h", "{\"a\": 1}"))
    body = to_anthropic([Message("user", (Text("q"),)), Message("assistant", calls)])
    assert [b["input"] for b in body["messages"][1]["content"]] == [{"raw_arguments": "not json"}, {}, {"a": 1}]


def test_misplaced_blocks_are_refused_by_writers() -> None:
    bad = [Message("user", (ToolResult("c", (Text("x"),)),))]
    for writer in (to_openai_chat, to_openai_responses, to_anthropic):
        with pytest.raises(ValueError, match="repair"):
            writer(bad)


def test_bad_input_gives_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown role 'robot'"):
        from_openai_chat([{"role": "robot", "content": "x"}])
    with pytest.raises(ValueError, match="message 0: expected a JSON object"):
        from_anthropic(["hello"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="tool_call_id"):
        from_openai_chat([{"role": "tool", "content": "x"}])
    with pytest.raises(ValueError, match="needs a `type`"):
        from_openai_responses([{"call_id": "x"}])


# --------------------------------------------------------------------------------------------------
# from_provider_dict


@pytest.mark.parametrize(("item", "fmt"), [
    ({"role": "user", "content": "hi"}, "openai_chat"),
    ({"role": "tool", "tool_call_id": "c", "content": "x"}, "openai_chat"),
    (CHAT[1], "openai_chat"),
    (CHAT[2], "openai_chat"),
    (RESPONSES[2], "openai_responses"),
    (RESPONSES[5], "openai_responses"),
    ({"role": "user", "content": [{"type": "input_text", "text": "hi"}]}, "openai_responses"),
    (ANTHROPIC["messages"][1], "anthropic"),
    (ANTHROPIC["messages"][2], "anthropic"),
    ({"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}, "anthropic"),
    ({"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-opus-4-6",  # a response object
      "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "usage": {}}, "anthropic"),
    (RESPONSES[10], "openai_responses"),
])
def test_detect_format(item: dict[str, Any], fmt: str) -> None:
    assert detect_format(item) == fmt


def test_from_provider_dict_converts_one_message_of_each_format() -> None:
    assert [m.role for m in from_provider_dict(ANTHROPIC["messages"][2])] == ["tool", "tool", "user"]
    assert from_provider_dict(RESPONSES[3])[0].tool_calls[0].id == "call_A1"
    assert from_provider_dict(CHAT[3])[0].tool_results[0].call_id == "call_Yq3bPkD9sX1"
    assert from_provider_dict({"role": "user", "content": "hi"}) == [Message("user", (Text("hi"),))]


@pytest.mark.parametrize("item", [
    {"content": "no role"},
    {"role": "user", "content": [{"type": "mystery"}]},
    {"type": "custom_event", "data": 1},
    {"role": "user", "content": 42},
])
def test_from_provider_dict_says_when_it_cannot_tell(item: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="cannot tell"):
        from_provider_dict(item)


# --------------------------------------------------------------------------------------------------
# canonical -> each format -> canonical keeps every text, call and result


ids = st.sampled_from(["call_1", "call_2", "toolu_3", "fc_4"])
words = st.text(alphabet="abcxyz é\n{}\"", min_size=1, max_size=12).filter(lambda s: not s.isspace())
args = st.dictionaries(st.sampled_from(["path", "n", "q"]), st.one_of(st.integers(-5, 5), words), max_size=3)
images = st.one_of(st.builds(Image, media_type=st.just("image/png"), data=st.just(PNG)),
                   st.builds(Image, url=st.just("https://example.com/x.png")))


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """Valid canonical histories: user turns, assistant turns with parallel calls, their results."""
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message("system", (Text(draw(words)),)))
    counter = 0
    for _ in range(draw(st.integers(1, 4))):
        blocks: list[Any] = [Text(draw(words))]
        if draw(st.booleans()):
            blocks.append(draw(images))
        out.append(Message("user", tuple(blocks)))
        for _ in range(draw(st.integers(0, 2))):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                counter += 1
                calls.append(ToolCall(f"call_{counter}", draw(st.sampled_from(["read", "bash"])), draw(args)))
            text = (Text(draw(words)),) if draw(st.booleans()) else ()
            out.append(Message("assistant", (*text, *calls)))
            results = []
            for call in calls:
                parts: list[Any] = [Text(draw(words))]
                if draw(st.integers(0, 4)) == 0:
                    parts.append(draw(images))
                results.append(ToolResult(call.id, tuple(parts), draw(st.booleans()), call.name))
            out.append(Message("tool", tuple(results)))
        out.append(Message("assistant", (Text(draw(words)),)))
    return out


def _facts(messages: list[Message]) -> tuple[list[tuple[str, str]], list[tuple[str, str, Any]], list[tuple[str, str]]]:
    texts = [(m.role, b.text) for m in messages for b in m.blocks if isinstance(b, Text)]
    calls = [(c.id, c.name, c.arguments) for m in messages for c in m.tool_calls]
    results = [(r.call_id, r.text) for m in messages for r in m.tool_results]
    return texts, calls, results


TRIPS: dict[str, Callable[[list[Message]], list[Message]]] = {
    "openai_chat": lambda ms: from_openai_chat(to_openai_chat(ms)),
    "openai_responses": lambda ms: from_openai_responses(to_openai_responses(ms)),
    "anthropic": lambda ms: (lambda body: from_anthropic(body["messages"], body.get("system")))(to_anthropic(ms)),
}


@pytest.mark.parametrize("fmt", sorted(TRIPS))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=conversations())
def test_canonical_round_trip_keeps_texts_calls_and_results(fmt: str, history: list[Message]) -> None:
    back = TRIPS[fmt](history)
    texts, calls, results = _facts(history)
    back_texts, back_calls, back_results = _facts(back)
    assert back_calls == calls
    if fmt == "openai_chat":  # result images travel in a user message, with a note in their place
        back_texts = [t for t in back_texts if not t[1].startswith("[images returned by tool call")]
        back_results = [(i, "\n".join(x for x in t.split("\n") if x != TOOL_IMAGE_NOTE)) for i, t in back_results]
    assert back_texts == texts
    assert back_results == results
    names = {c.id: c.name for m in history for c in m.tool_calls}
    assert all(r.name == names[r.call_id] for m in back for r in m.tool_results)
    images = [b for m in history for b in m.blocks if isinstance(b, Image)]
    images += [p for m in history for r in m.tool_results for p in r.content if isinstance(p, Image)]
    back_images = [b for m in back for b in m.blocks if isinstance(b, Image)]
    back_images += [p for m in back for r in m.tool_results for p in r.content if isinstance(p, Image)]
    assert sorted(map(repr, back_images)) == sorted(map(repr, images))
    if fmt == "anthropic":
        errors = [r.is_error for m in history for r in m.tool_results]
        assert [r.is_error for m in back for r in m.tool_results] == errors


@pytest.mark.parametrize("fmt", sorted(TRIPS))
@settings(max_examples=40, deadline=None)
@given(history=conversations())
def test_provider_round_trip_of_written_payloads_is_exact(fmt: str, history: list[Message]) -> None:
    """What a writer produces is in normal form: reading it and writing it again gives the same bytes."""
    writer = {"openai_chat": to_openai_chat, "openai_responses": to_openai_responses, "anthropic": to_anthropic}[fmt]
    once = writer(history)
    twice = writer(TRIPS[fmt](history))
    assert json.dumps(twice, sort_keys=True) == json.dumps(once, sort_keys=True)


# --------------------------------------------------------------------------------------------------
# Shapes the official SDKs declare (their request TypedDicts, checked with pydantic)


def _consume(value: Any) -> Any:
    """pydantic validates `Iterable[...]` fields lazily: walk everything so that every part is checked."""
    if isinstance(value, Mapping):
        return {k: _consume(v) for k, v in value.items()}
    if isinstance(value, list | tuple) or type(value).__name__ == "ValidatorIterator":
        return [_consume(v) for v in value]
    return value


@functools.cache
def _adapter(module: str, name: str) -> Any:
    """A pydantic adapter for `list[<SDK request type>]`, kept alive: the lazy iterators it hands out
    need it while they are consumed."""
    types = pytest.importorskip(module, reason="the openai and anthropic SDKs are dev dependencies")
    from pydantic import TypeAdapter

    return TypeAdapter(list[getattr(types, name)])


def check_anthropic_shape(body: Mapping[str, Any]) -> None:
    _consume(_adapter("anthropic.types", "MessageParam").validate_python(body["messages"]))
    if isinstance(body.get("system"), list):
        _consume(_adapter("anthropic.types", "TextBlockParam").validate_python(body["system"]))


def check_chat_shape(messages: list[dict[str, Any]]) -> None:
    _consume(_adapter("openai.types.chat", "ChatCompletionMessageParam").validate_python(messages))


def check_responses_shape(items: list[dict[str, Any]]) -> None:
    # The SDK types an id-less assistant message as EasyInputMessage (input_* parts), but the API takes
    # `output_text` there and expects it (Codex replays its history that way): those items are left out.
    checked = [i for i in items if not (i.get("role") == "assistant" and "id" not in i)]
    _consume(_adapter("openai.types.responses", "ResponseInputItemParam").validate_python(checked))


def test_written_payloads_have_the_sdk_shapes() -> None:
    for messages in (from_openai_chat(CHAT), from_openai_responses(RESPONSES),
                     from_anthropic(ANTHROPIC["messages"], ANTHROPIC["system"])):
        check_anthropic_shape(to_anthropic(messages))
        check_chat_shape(to_openai_chat(messages))
        check_responses_shape(to_openai_responses(messages))


def test_shape_check_catches_a_wrong_payload() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        check_anthropic_shape({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x"}]}]})
    with pytest.raises(ValidationError):
        check_chat_shape([{"role": "tool", "content": "x"}])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=conversations())
def test_generated_histories_write_sdk_shapes(history: list[Message]) -> None:
    check_anthropic_shape(to_anthropic(history))
    check_chat_shape(to_openai_chat(history))
    check_responses_shape(to_openai_responses(history))


# --------------------------------------------------------------------------------------------------
# Real session files


def _anthropic_normal(message: Mapping[str, Any]) -> dict[str, Any]:
    """The documented Anthropic normalizations applied to one message."""
    def content(value: Any) -> Any:
        if isinstance(value, list) and len(value) == 1 and value[0].get("type") == "text" and len(value[0]) == 2:
            return value[0]["text"]
        return value

    out = {k: v for k, v in message.items() if k in ("role", "content")}  # recorded response fields are not sent
    if isinstance(out.get("content"), list):
        blocks = []
        for block in out["content"]:
            block = dict(block)
            if block.get("type") == "tool_result" and "content" in block:
                block["content"] = content(block["content"])
            if block.get("type") == "tool_use":
                block.setdefault("input", {})
            blocks.append(block)
        out["content"] = content(blocks)
    return out


@pytest.mark.shared
def test_claude_code_messages_round_trip() -> None:
    """Every `message` of the real sessions round-trips; the hand-made edge cases either round-trip or
    are rejected with a ValueError naming the problem (never another exception)."""
    checked = 0
    rejected: list[str] = []
    paths = sorted(shared_path("claude-code").glob("*.jsonl"))
    paths += sorted(shared_path("claude-code-edge-cases").glob("*.jsonl"))
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # the edge-case files hold deliberately broken lines
            if not isinstance(record, dict) or record.get("type") not in ("user", "assistant"):
                continue
            message = record.get("message")
            if not isinstance(message, dict):
                continue
            try:
                messages = from_anthropic([message])
            except ValueError as error:
                rejected.append(f"{path.parent.name}/{path.name}: {error}")
                continue
            assert to_anthropic(messages)["messages"] == [_anthropic_normal(message)], f"{path.name}: {line[:200]}"
            checked += 1
    assert checked > 1400
    assert all(r.startswith("claude-code-edge-cases/") for r in rejected), rejected
    assert len(rejected) <= 3, rejected


@pytest.mark.shared
def test_swe_agent_history_round_trips() -> None:
    for path in sorted(shared_path("swe-agent").glob("*.traj")):
        history = json.loads(path.read_text(encoding="utf-8"))["history"]
        # SWE-agent writes `tool_call_ids` (a list); the chat API, and so the converter, uses `tool_call_id`
        chat = [{**{k: v for k, v in m.items() if k != "tool_call_ids"}, "tool_call_id": m["tool_call_ids"][0]}
                if m["role"] == "tool" else m for m in history]
        messages = from_openai_chat(chat)
        # SWE-agent's own fields (agent, message_type, thought, action) are kept in meta, not sent
        sent = [{k: v for k, v in m.items() if k not in ("agent", "message_type", "thought", "action")} for m in chat]
        assert to_openai_chat(messages) == sent
        assert all(m.meta["openai_chat_unsent"]["agent"] == "main" for m in messages if m.role != "tool")
        assert sum(len(m.tool_calls) for m in messages) == sum(len(m.get("tool_calls") or ()) for m in chat)
        assert all(r.name for m in messages for r in m.tool_results)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 1.5, -1, True, "12", [3]])
def test_a_usage_count_that_is_no_token_count_is_a_malformed_answer(value: Any) -> None:
    """Infinity used to escape as an OverflowError (int(inf)), past the parsers' ProviderError."""
    from ctxwin.providers.parsing import token_count

    with pytest.raises(ValueError, match="not a token count"):
        token_count({"input_tokens": value}, "input_tokens")
    assert token_count({"input_tokens": 12.0}, "input_tokens") == 12 and token_count({}, "input_tokens") == 0
