"""CtxwinMiddleware in a real LangChain v1 `create_agent` loop, against a fake chat model.

The model is LangChain's own `GenericFakeChatModel` (a real `BaseChatModel`), taught `bind_tools` and
to record every request it receives; with a window it counts each request with ctxwin's counter and
refuses one over the window with the error Anthropic returns, as a provider would. The conversation is
a long tool loop whose outputs together are several windows' worth.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

pytest.importorskip("langchain.agents")

from langchain.agents import create_agent
from langchain_core.exceptions import ContextOverflowError as LangChainOverflow
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool

from ctxwin import ContextEngine
from ctxwin.adapters.langchain import (
    Conversions,
    CtxwinMiddleware,
    budget_tool_text,
    from_ctxwin,
    originals_of,
    recall_tool,
    to_ctxwin,
)
from ctxwin.errors import InputError
from ctxwin.messages import Image, Message, Text, Thinking, validate
from ctxwin.store.blobs import FileBlobStore
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.tokens import counter_for

WINDOW = 20_000
MAX_OUTPUT = 2_000
STEPS = 24  # tool calls in the long conversation
CHUNK_CHARS = 9_000  # each output ~2.2K tokens: 24 of them are ~3 windows
BIG_STEP = 5  # this step's output is over the spill threshold
BIG_CHARS = 30_000
SYSTEM = "You read every chunk of the log, one call at a time, then say done."
COUNTER = counter_for(None)


def chunk(n: int) -> str:
    rng = random.Random(n)
    words = " ".join("".join(rng.choice("abcdefghijklmnop") for _ in range(rng.randint(2, 9)))
                     for _ in range(BIG_CHARS // 4))
    return f"NEEDLE-{n:03d} " + words[: (BIG_CHARS if n == BIG_STEP else CHUNK_CHARS)]


@tool
def read_chunk(n: int) -> str:
    """Read chunk number n of the log."""
    return chunk(n)


def request_tokens(messages: list[BaseMessage], tools: list[Any]) -> int:
    """What a request costs by ctxwin's counter: messages, system prompt and tool schemas, counted as
    the middleware counts the parts the engine does not manage."""
    system = "\n".join(m.text for m in messages if isinstance(m, SystemMessage))
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    schemas = json.dumps([convert_to_openai_tool(t) for t in tools], sort_keys=True)
    return (sum(COUNTER.count_message(m) for m in to_ctxwin(rest)) + COUNTER.count_text(system)
            + COUNTER.count_text(schemas))


class WindowedFake(GenericFakeChatModel):
    """GenericFakeChatModel that binds tools, records each request and, with `window`, refuses one over
    it as Anthropic does (`prompt is too long: N tokens > M maximum`, in LangChain's overflow error)."""

    window: int | None = None
    received: list[list[BaseMessage]] = Field(default_factory=list)
    tools: list[Any] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> WindowedFake:
        self.tools = list(tools)
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:
        tokens = request_tokens(messages, self.tools)
        if self.window is not None and tokens > self.window:
            raise LangChainOverflow(f"prompt is too long: {tokens} tokens > {self.window} maximum")
        self.received.append(list(messages))
        result = super()._generate(messages, stop, run_manager, **kwargs)
        result.generations[0].message.usage_metadata = {"input_tokens": tokens, "output_tokens": 5,
                                                        "total_tokens": tokens + 5}
        return result


def script() -> list[AIMessage]:
    calls = [AIMessage(content=f"Reading chunk {n}.", tool_calls=[
        {"name": "read_chunk", "args": {"n": n}, "id": f"call_{n:03d}", "type": "tool_call"}]) for n in range(STEPS)]
    return [*calls, AIMessage(content="done")]


def engine_in(tmp_path: Path, **options: Any) -> ContextEngine:
    session = MemorySessionLog(session_id="lc", blobs=FileBlobStore(tmp_path / "blobs"))
    return ContextEngine(session, window=WINDOW, max_output=MAX_OUTPUT, **options)


def ask() -> dict[str, Any]:
    return {"messages": [HumanMessage("Read the whole log, chunk by chunk.")]}


CONFIG = {"recursion_limit": 4 * STEPS + 20}


def check_run(engine: ContextEngine, model: WindowedFake, state: dict[str, Any]) -> None:
    """The must-show: every request fit and was valid; the log has every message the agent produced;
    every tool output comes back byte for byte."""
    assert state["messages"][-1].content == "done"
    assert len(model.received) == STEPS + 1
    for messages in model.received:
        canonical = to_ctxwin([m for m in messages if not isinstance(m, SystemMessage)])
        assert validate(canonical, "anthropic") == [], "every tool call is paired with its result"
        assert request_tokens(messages, model.tools) <= engine.budget
    logged = {m.content_key for m in engine.messages}
    assert all(m.content_key in logged for m in to_ctxwin(state["messages"])), "every message is in the log"
    last_request = "\n".join(m.text for m in model.received[-1])
    assert "NEEDLE-000" not in last_request, "the early outputs left the window"
    logged_results = [(e.id, Message.from_dict(e.payload)) for e in engine.session.path() if e.kind == "message"]
    results = {r.call_id: (entry_id, r.text) for entry_id, m in logged_results for r in m.tool_results}
    for n in range(STEPS):
        entry_id, text = results[f"call_{n:03d}"]
        if n == BIG_STEP:  # spilled by wrap_tool_call: the state has the preview, the blob the output
            assert text.startswith("[Output too large for the context")
            handle = text.split("Full output: ", 1)[1].split(" ", 1)[0]
            assert engine.recall(handle) == chunk(n)
        else:
            assert engine.recall(f"entry:{entry_id}#call_{n:03d}") == chunk(n)


# --------------------------------------------------------------------------------------------------
# The must-show


def test_without_ctxwin_the_window_overflows() -> None:
    model = WindowedFake(messages=iter(script()), window=WINDOW - MAX_OUTPUT)
    agent = create_agent(model, tools=[read_chunk], system_prompt=SYSTEM)
    with pytest.raises(LangChainOverflow, match="prompt is too long"):
        agent.invoke(ask(), CONFIG)
    assert 3 < len(model.received) < STEPS  # it got some way, then the history no longer fit


def test_langchain_create_agent_with_ctxwin_never_overflows(tmp_path: Path) -> None:
    engine = engine_in(tmp_path)
    model = WindowedFake(messages=iter(script()), window=engine.budget)
    agent = create_agent(model, tools=[read_chunk], system_prompt=SYSTEM, middleware=[CtxwinMiddleware(engine)])
    state = agent.invoke(ask(), CONFIG)
    check_run(engine, model, state)


def test_async_agent_with_ctxwin_never_overflows(tmp_path: Path) -> None:
    engine = engine_in(tmp_path)
    model = WindowedFake(messages=iter(script()), window=engine.budget)
    agent = create_agent(model, tools=[read_chunk], system_prompt=SYSTEM, middleware=[CtxwinMiddleware(engine)])
    state = asyncio.run(agent.ainvoke(ask(), CONFIG))
    check_run(engine, model, state)


def test_an_overflow_error_is_recovered_and_retried(tmp_path: Path) -> None:
    # The engine believes in a 20K window; the provider's is smaller. Its error names the real limit,
    # the engine learns it and compacts, and the same model call is retried.
    engine = engine_in(tmp_path)
    model = WindowedFake(messages=iter(script()), window=5_000)
    agent = create_agent(model, tools=[read_chunk], system_prompt=SYSTEM, middleware=[CtxwinMiddleware(engine)])
    state = agent.invoke(ask(), CONFIG)
    assert state["messages"][-1].content == "done"
    assert engine.window == 5_000
    assert len(model.received) == STEPS + 1  # every call answered once, none lost to the error
    assert all(request_tokens(m, model.tools) <= 5_000 for m in model.received)


def test_other_model_errors_propagate(tmp_path: Path) -> None:
    class Broken(WindowedFake):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("rate limited")

    agent = create_agent(Broken(messages=iter(script())), tools=[read_chunk],
                         middleware=[CtxwinMiddleware(engine_in(tmp_path))])
    with pytest.raises(RuntimeError, match="rate limited"):
        agent.invoke(ask(), CONFIG)


def test_the_engine_system_prompt_replaces_the_agents(tmp_path: Path) -> None:
    engine = engine_in(tmp_path, system="ctxwin's own prompt")
    model = WindowedFake(messages=iter([AIMessage(content="hi")]))
    agent = create_agent(model, tools=[read_chunk], system_prompt=SYSTEM, middleware=[CtxwinMiddleware(engine)])
    agent.invoke(ask(), CONFIG)
    assert model.received[0][0] == SystemMessage(content="ctxwin's own prompt")


def test_one_engine_per_thread_from_a_factory(tmp_path: Path) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    made: dict[str, ContextEngine] = {}

    def factory(thread: str) -> ContextEngine:
        made[thread] = engine_in(tmp_path / thread)
        return made[thread]

    model = WindowedFake(messages=iter([AIMessage(content="one"), AIMessage(content="two")]))
    agent = create_agent(model, tools=[read_chunk], middleware=[CtxwinMiddleware(factory)],
                         checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("first")]}, {"configurable": {"thread_id": "a"}})
    agent.invoke({"messages": [HumanMessage("second")]}, {"configurable": {"thread_id": "b"}})
    assert sorted(made) == ["a", "b"]
    assert [m.text for m in made["a"].messages] == ["first", "one"]
    assert [m.text for m in made["b"].messages] == ["second", "two"]


def test_the_recall_tool_brings_back_what_a_placeholder_names(tmp_path: Path) -> None:
    engine = engine_in(tmp_path)
    ids = engine.append([*to_ctxwin([HumanMessage("q"), AIMessage(content="", tool_calls=[
        {"name": "read_chunk", "args": {"n": 7}, "id": "c7", "type": "tool_call"}]),
        ToolMessage(content=chunk(7), tool_call_id="c7")])])
    middleware = CtxwinMiddleware(engine, recall=True)
    [recall] = middleware.tools
    assert recall.name == "ctxwin_recall"
    assert recall.invoke({"ref": f"entry:{ids[2]}#c7"}) == chunk(7)
    assert recall.invoke({"ref": f"entry:{ids[2]}#c7", "offset": 3, "limit": 9}) == chunk(7)[3:12]
    assert "no such entry" in recall.invoke({"ref": "entry:nope"})  # a tool error, not an exception
    assert recall_tool(engine).invoke({"ref": f"entry:{ids[0]}"}) == "q"


# --------------------------------------------------------------------------------------------------
# Tool results: the pipeline's own spill and cap


def test_tool_results_over_the_spill_threshold_go_to_the_blob_store(tmp_path: Path) -> None:
    engine = engine_in(tmp_path)
    text = chunk(BIG_STEP)
    spilled = budget_tool_text(engine, text)
    assert spilled is not None
    shown, handle, action = spilled
    assert action == "spilled" and handle in shown and len(shown) < 3_000
    assert engine.recall(handle) == text
    assert budget_tool_text(engine, chunk(1)) is None  # under every threshold: left alone


def test_results_are_left_to_the_engine_without_a_blob_store() -> None:
    engine = ContextEngine(window=WINDOW, max_output=MAX_OUTPUT)
    assert budget_tool_text(engine, chunk(BIG_STEP)) is None


def test_capped_results_keep_the_policy_notice(tmp_path: Path) -> None:
    engine = engine_in(tmp_path, policy="openclaw")  # result budget on (16K characters), no spill
    text = "line\n" * 8_000 + "Error: the last line matters"
    capped = budget_tool_text(engine, text)
    assert capped is not None
    shown, handle, action = capped
    assert action == "capped" and len(shown) <= 16_000 and handle in shown
    assert shown.endswith("Error: the last line matters")  # the pipeline keeps an important tail
    assert engine.recall(handle) == text


# --------------------------------------------------------------------------------------------------
# The conversion


def test_conversion_keeps_what_ctxwin_has_no_block_for() -> None:
    messages: list[BaseMessage] = [
        HumanMessage(content=[{"type": "text", "text": "look"},
                              {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                              {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]),
        AIMessage(content=[{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                           {"type": "text", "text": "calling"},
                           {"type": "tool_use", "id": "t1", "name": "read_chunk", "input": {"n": 1}}],
                  tool_calls=[{"name": "read_chunk", "args": {"n": 1}, "id": "t1", "type": "tool_call"},
                              {"name": "read_chunk", "args": {"n": 2}, "id": "t2", "type": "tool_call"}]),
        ToolMessage(content="one", tool_call_id="t1", name="read_chunk"),
        ToolMessage(content="boom", tool_call_id="t2", status="error"),
        AIMessage(content="done"),
    ]
    canonical = to_ctxwin(messages)
    assert [m.role for m in canonical] == ["user", "assistant", "tool", "assistant"]
    user, call, results, _ = canonical
    assert isinstance(user.blocks[1], Image) and user.blocks[1].url == "https://example.com/a.png"
    assert isinstance(call.blocks[0], Thinking) and call.blocks[0].signature == "sig"
    assert [c.id for c in call.tool_calls] == ["t1", "t2"]
    assert [(r.call_id, r.is_error, r.name) for r in results.tool_results] == [
        ("t1", False, "read_chunk"), ("t2", True, None)]
    assert validate(canonical, "anthropic") == []
    rebuilt = from_ctxwin(canonical)  # without the originals: built anew from the canonical form
    assert rebuilt[0].content == messages[0].content  # parts ctxwin cannot model come back verbatim
    assert [type(m) for m in rebuilt] == [HumanMessage, AIMessage, ToolMessage, ToolMessage, AIMessage]
    assert rebuilt[1].tool_calls == messages[1].tool_calls
    assert rebuilt[3].status == "error" and rebuilt[3].tool_call_id == "t2"
    assert to_ctxwin(rebuilt) == canonical
    again, originals = originals_of(messages)
    assert all(a is b for a, b in zip(from_ctxwin(again, originals), messages, strict=True))


def test_conversions_convert_only_what_follows_the_same_objects() -> None:
    call = AIMessage(content="", tool_calls=[{"name": "read_chunk", "args": {"n": 1}, "id": "a", "type": "tool_call"},
                                             {"name": "read_chunk", "args": {"n": 2}, "id": "b", "type": "tool_call"}])
    first = [HumanMessage("q"), call, ToolMessage(content="one", tool_call_id="a")]
    conversions = Conversions()
    before = conversions.convert(first)
    grown = [*first, ToolMessage(content="two", tool_call_id="b"), AIMessage(content="ok")]
    after = conversions.convert(grown)
    assert after[0][0] is before[0][0] and after[1][0] is before[1][0]  # the same objects: not converted again
    assert [m for m, _ in after] == to_ctxwin(grown)  # the run of tool results that went on is whole
    edited = [HumanMessage("q"), *grown[1:]]  # an equal but new first message: everything again
    assert [m for m, _ in conversions.convert(edited)] == to_ctxwin(edited)
    assert conversions.convert(edited)[0][1] == [edited[0]]


def test_generic_messages_by_role_and_a_clear_refusal_otherwise() -> None:
    from langchain_core.messages import ChatMessage, FunctionMessage

    [message] = to_ctxwin([ChatMessage(role="assistant", content="hello")])
    assert message.role == "assistant" and message.text == "hello"
    with pytest.raises(InputError, match="no ctxwin role"):
        to_ctxwin([FunctionMessage(name="f", content="x")])


def test_a_changed_block_is_not_given_its_old_part_back() -> None:
    [message] = to_ctxwin([HumanMessage(content=[{"type": "text", "text": "long", "cache_control": {"x": 1}}])])
    masked = message.replace(blocks=(Text("[masked]", message.blocks[0].extra),))
    assert from_ctxwin([masked])[0].content == [{"type": "text", "text": "[masked]"}]


def test_bad_arguments_are_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not both"):
        CtxwinMiddleware(engine_in(tmp_path), window=5)
    with pytest.raises(InputError, match="ContextEngine"):
        CtxwinMiddleware(42)  # type: ignore[arg-type]


def test_the_agent_gets_an_evicted_output_back_with_ctxwin_recall(tmp_path: Path) -> None:
    """After the long loop the model finds a placeholder's ref in its request and calls the recall
    tool the middleware gave it; the tool answers with the evicted output, byte for byte."""
    import re

    ref_of = re.compile(r'recall\("(entry:[^"]+#call_(\d+))"\)')

    class Recaller(WindowedFake):
        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> Any:
            if len(self.received) == STEPS:  # the loop is done: look back for something evicted
                found = ref_of.search("\n".join(m.text for m in messages))
                assert found is not None, "the request names an evicted output by its ref"
                self.messages = iter([AIMessage(content="", tool_calls=[{
                    "name": "ctxwin_recall", "args": {"ref": found.group(1)}, "id": "recall_1",
                    "type": "tool_call"}]), AIMessage(content="done")])
            return super()._generate(messages, stop, run_manager, **kwargs)

    engine = engine_in(tmp_path)
    model = Recaller(messages=iter(script()[:-1]), window=engine.budget)
    middleware = CtxwinMiddleware(engine, recall=True)
    agent = create_agent(model, tools=[read_chunk], system_prompt=SYSTEM, middleware=[middleware])
    state = agent.invoke(ask(), CONFIG)
    assert state["messages"][-1].content == "done"
    [answer] = [m for m in state["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "recall_1"]
    step = int(ref_of.search("\n".join(m.text for m in model.received[STEPS])).group(2))
    assert answer.content == chunk(step) and answer.status == "success"


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


@st.composite
def conversations(draw: st.DrawFn) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for turn in range(draw(st.integers(0, 5))):
        out.append(HumanMessage(content=draw(texts)))
        ids = [f"t{turn}_{k}" for k in range(draw(st.integers(0, 3)))]
        out.append(AIMessage(content=draw(st.one_of(st.just(""), texts)), tool_calls=[
            {"name": "read_chunk", "args": {"n": draw(st.integers(0, 9))}, "id": i, "type": "tool_call"} for i in ids]))
        out.extend(ToolMessage(content=draw(texts), tool_call_id=i, status=draw(st.sampled_from(["success", "error"])))
                   for i in ids)
    return out


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_the_conversion_round_trips(messages: list[BaseMessage]) -> None:
    canonical = to_ctxwin(messages)
    assert to_ctxwin(from_ctxwin(canonical)) == canonical
    assert [r.call_id for m in canonical for r in m.tool_results] == [
        m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    again, originals = originals_of(messages)
    assert all(a is b for a, b in zip(from_ctxwin(again, originals), messages, strict=True))


def test_the_middleware_reads_the_model_window_and_output_from_the_chat_model(tmp_path: Path) -> None:
    """`CtxwinMiddleware()` with no engine: its engine takes the chat model's name, the window of its
    profile and its max_tokens, so none of them is written twice; an option given wins."""
    langchain_openai = pytest.importorskip("langchain_openai")
    from ctxwin.adapters.langchain import chat_model_limits
    from ctxwin.testing import FakeProvider

    with FakeProvider(context_window=200_000, max_output=4_000) as fake:
        fake.reply("hello")
        chat = langchain_openai.ChatOpenAI(model="gpt-4.1", base_url=fake.openai_base_url, api_key="sk-test",
                                           max_tokens=700, max_retries=0)
        assert chat.profile["max_input_tokens"] == 1_047_576  # what LangChain knows of the model
        middleware = CtxwinMiddleware()
        agent = create_agent(chat, tools=[read_chunk], middleware=[middleware])
        assert agent.invoke(ask())["messages"][-1].content == "hello"
        engine = middleware.engine_for()
        assert (engine.model, engine.window, engine.max_output) == ("gpt-4.1", 1_047_576, 700)
        body = fake.requests[-1].body
        assert body.get("max_completion_tokens", body.get("max_tokens")) == 700  # what the reserve follows

        fake.reply("again")
        chosen = CtxwinMiddleware(window=50_000)  # given: wins over the profile
        create_agent(chat, tools=[read_chunk], middleware=[chosen]).invoke(ask())
        assert (chosen.engine_for().window, chosen.engine_for().max_output) == (50_000, 700)
    assert chat_model_limits(WindowedFake(messages=iter(script()))) == {}  # a model that says nothing
    assert chat_model_limits(None) == {}
