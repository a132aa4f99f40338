"""ctxwin in the OpenAI Agents SDK: `CtxwinSession` (the SDK's Session protocol on a ctxwin log),
`CtxwinInputFilter` (RunConfig.call_model_input_filter) and `CtxwinModel` (overflow recovery).

The model is the SDK's own `ScriptedModel`, whose responder plays a provider: it counts every request
it receives with ctxwin's counter, the whole body the SDK's Responses model would send for it
(instructions, input, tools, handoffs, output schema, every other field), and refuses one over its
window with the error OpenAI's API gives (`openai.BadRequestError`, code `context_length_exceeded`)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.mcp import MCPServerStdio
from agents.memory.session import Session as SessionProtocol
from agents.memory.session_settings import SessionSettings
from agents.model_settings import ModelSettings
from agents.models.openai_responses import OpenAIResponsesModel
from agents.run_config import CallModelData, ModelInputData
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from ctxwin import ContextEngine
from ctxwin.adapters.openai_agents import (
    CLEAR_ENTRY,
    POP_ENTRY,
    CtxwinInputFilter,
    CtxwinModel,
    CtxwinSession,
    UnwrappedModelWarning,
    _ItemHistory,
    items_to_messages,
    messages_to_items,
)
from ctxwin.errors import ContextOverflowError, InputError
from ctxwin.messages import Message, from_openai_responses, validate
from ctxwin.tokens import counter_for

WINDOW = 64_000
MAX_OUTPUT = 8_000
COUNTER = counter_for(None)  # the engine's counter for a model the registry does not name
NO_TRACING = {"tracing_disabled": True}


# -- a provider with a window ------------------------------------------------------------------------


def overflow_error(tokens: int, window: int) -> openai.BadRequestError:
    """What OpenAI's API answers to a request over the window."""
    body = {"error": {"message": f"This model's maximum context length is {window} tokens. However, your "
                                 f"messages resulted in {tokens} tokens. Please reduce the length of the messages.",
                      "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}
    request = httpx.Request("POST", "https://api.openai.com/v1/responses")
    return openai.BadRequestError(f"Error code: 400 - {json.dumps(body)}",
                                  response=httpx.Response(400, request=request, json=body), body=body["error"])


RESPONSES = OpenAIResponsesModel("gpt-4.1", openai.AsyncOpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1"))
"""Builds the body the SDK would POST to /v1/responses for a call (nothing is sent)."""
NOT_SENT = frozenset({"input", "instructions", "extra_headers", "extra_query", "extra_body"})


def request_body(call: Any) -> dict[str, Any]:
    """What the Responses API would receive for `call`: the SDK's own request, fields it omits left out."""
    body = RESPONSES._build_response_create_kwargs(
        call.system_instructions, call.input, call.model_settings, call.tools, call.output_schema, call.handoffs,
        call.previous_response_id, call.conversation_id, call.streamed, call.prompt)
    return {k: v for k, v in body.items() if not isinstance(v, openai.Omit) and v is not None and v != []}


def request_tokens(call: Any) -> int:
    """A request as the provider counts it: the instructions, every input item, and everything else
    in the body (tools, handoffs, output schema, settings) as the JSON it is sent as."""
    body = request_body(call)
    rest = {k: v for k, v in body.items() if k not in NOT_SENT}
    return (COUNTER.count_text(body.get("instructions") or "")
            + sum(COUNTER.count_message(m) for m in from_openai_responses(body["input"]))
            + COUNTER.count_text(json.dumps(rest, sort_keys=True, default=str)))


class Provider:
    """Plays the model over a script of outputs: each accepted call takes the next output; a call over
    `window` is refused (and recorded) without taking one. Usage reported like the Responses API."""

    def __init__(self, plan: list[list[Any]], window: int = WINDOW, watch: Any = None) -> None:
        self.plan = list(plan)
        self.window = window
        self.watch = watch  # called with each request's count before it is answered or refused
        self.accepted: list[int] = []
        self.refused: list[int] = []
        self.model = ScriptedModel([ModelStep.respond(self.respond) for _ in range(3 * len(plan) + 10)])

    def respond(self, call: Any) -> ModelStep:
        tokens = request_tokens(call)
        if self.watch is not None:
            self.watch(tokens)
        if tokens > self.window:
            self.refused.append(tokens)
            raise overflow_error(tokens, self.window)
        self.accepted.append(tokens)
        return ModelStep(output=self.plan.pop(0), usage=Usage(requests=1, input_tokens=tokens, output_tokens=20,
                                                             total_tokens=tokens + 20))


def result_text(path: str) -> str:
    """A large, distinct tool result (about 5,000 tokens) with a needle only it holds."""
    lines = [f"{path}:{n}: def handler_{n}(request): return route(request, {n * 37})" for n in range(200)]
    return f"NEEDLE-{path}\n" + "\n".join(lines)


@function_tool
def read_file(path: str) -> str:
    """Read a file of the workspace."""
    return result_text(path)


def tool_plan(run: int, calls: int, *, parallel: int = 2) -> list[list[Any]]:
    """A run of `calls` reads, `parallel` per turn, then an answer."""
    plan: list[list[Any]] = []
    n = 0
    while n < calls:
        turn = [function_call("read_file", {"path": f"r{run}/f{n + k}.py"}, call_id=f"call-{run}-{n + k}")
                for k in range(min(parallel, calls - n))]
        plan.append(turn)
        n += len(turn)
    plan.append([assistant_message(f"run {run} done", item_id=f"msg-{run}")])
    return plan


def agent_for(model: Any) -> Agent[Any]:
    return Agent(name="reader", instructions="You read files and report what they define.", model=model,
                 tools=[read_file])


def open_session(path: Path, **options: Any) -> CtxwinSession:
    return CtxwinSession.open(path, durability="batch", window=WINDOW, max_output=MAX_OUTPUT, **options)


def all_logged_text(session: CtxwinSession) -> str:
    """Everything the log holds, every branch."""
    return "\n".join(json.dumps(e.payload, ensure_ascii=False) for e in session.engine.session)


# -- must show: a long tool-using conversation ------------------------------------------------------


RUNS = ((1, "Read r1/f0..f9.", 10, 2), (2, "Now r2/f0..f8.", 9, 3), (3, "And r3/f0..f6.", 7, 2))
"""The conversation: (run, prompt, reads, reads per turn). 26 results of about 5K tokens each."""


def conversation_plan() -> list[list[Any]]:
    return [turn for run, _, calls, parallel in RUNS for turn in tool_plan(run, calls, parallel=parallel)]


def test_without_ctxwin_the_conversation_overflows_the_window(tmp_path: Path) -> None:
    """The same runs with the SDK's own SQLiteSession and no filter: the second run is refused."""
    provider = Provider(conversation_plan())
    session = SQLiteSession("plain", str(tmp_path / "plain.db"))
    Runner.run_sync(agent_for(provider.model), RUNS[0][1], max_turns=40, session=session,
                    run_config=RunConfig(**NO_TRACING))
    with pytest.raises(openai.BadRequestError) as raised:
        Runner.run_sync(agent_for(provider.model), RUNS[1][1], max_turns=40, session=session,
                        run_config=RunConfig(**NO_TRACING))
    assert raised.value.code == "context_length_exceeded"
    assert provider.refused and provider.refused[0] > WINDOW


def test_runner_with_ctxwin_never_sends_an_over_budget_or_invalid_request_and_loses_nothing(tmp_path: Path) -> None:
    session = open_session(tmp_path / "s")
    provider = Provider(conversation_plan())
    agent = agent_for(session.wrap(provider.model))
    config = RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING)
    budgets: list[tuple[int, int]] = []
    inner = session.input_filter

    def watched(data: Any) -> Any:
        out = inner(data)
        assert inner.last is not None
        budgets.append((inner.last.tokens, inner.last.budget))
        return out

    config.call_model_input_filter = watched
    first = asyncio.run(Runner.run(agent, RUNS[0][1], session=session, run_config=config, max_turns=40))
    second = Runner.run_sync(agent, RUNS[1][1], session=session, run_config=config, max_turns=40)
    third = asyncio.run(Runner.run(agent, RUNS[2][1], session=session, run_config=config, max_turns=40))
    assert (first.final_output, second.final_output, third.final_output) == ("run 1 done", "run 2 done", "run 3 done")

    # The model never received a request over its window, nor one over the engine's budget, nor an invalid one.
    assert provider.refused == []
    assert len(provider.accepted) == len(provider.model.calls) == 6 + 4 + 5
    assert max(provider.accepted) <= WINDOW
    assert all(tokens <= budget for tokens, budget in budgets)
    for call in provider.model.calls:
        assert validate(from_openai_responses(call.input), "openai_responses", request=True) == []
    results = {f"call-{run}-{n}": result_text(f"r{run}/f{n}.py") for run, _, count, _ in RUNS for n in range(count)}
    assert sum(COUNTER.count_text(text) for text in results.values()) > 2 * WINDOW  # the history without ctxwin

    # Nothing lost: the session holds every item the runs produced, results byte for byte, and
    # whatever left the window is recallable from the engine.
    items = asyncio.run(session.get_items())
    assert {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"} == results
    assert [i["content"] for i in items if i.get("role") == "user"] == [prompt for _, prompt, _, _ in RUNS]
    assert {i["call_id"] for i in items if i.get("type") == "function_call"} == set(results)
    assert [i["content"][0]["text"] for i in items if i.get("role") == "assistant"] == [
        f"run {run} done" for run, _, _, _ in RUNS]
    last_call = provider.model.calls[-1].input
    sent = {i["call_id"]: i.get("output") for i in last_call if i.get("type") == "function_call_output"}
    assert sent["call-3-6"] == results["call-3-6"]  # the newest result is seen whole
    evicted = {c for c in results if sent.get(c) != results[c]}
    recalled = {block["call_id"]: session.engine.recall(f"entry:{entry.id}#{block['call_id']}")
                for entry in session.engine.session.path() for block in entry.payload.get("blocks", ())
                if block.get("type") == "tool_result" and block["call_id"] in evicted}
    assert len(evicted) > len(results) // 2 and recalled == {c: results[c] for c in evicted}
    # one branch: the filter matched the runner's history to the session's every time, nothing twice
    on_branch = [e.id for e in session.engine.session.path() if e.kind == "message"]
    assert on_branch == [e.id for e in session.engine.session if e.kind == "message"]
    # the session log reopens to the same items
    session.close()
    with open_session(tmp_path / "s") as again:
        assert asyncio.run(again.get_items()) == items


def test_filter_without_a_ctxwin_session_keeps_the_log_itself(tmp_path: Path) -> None:
    """The filter works with any session (here the SDK's SQLiteSession): it logs what it sees."""
    engine = ContextEngine(window=WINDOW, max_output=MAX_OUTPUT)
    provider = Provider(tool_plan(0, 14))
    with pytest.warns(UnwrappedModelWarning):  # no CtxwinModel here: overflows would not be recovered
        result = Runner.run_sync(agent_for(provider.model), "Read them.", max_turns=40,
                                 session=SQLiteSession("x", str(tmp_path / "x.db")),
                                 run_config=RunConfig(call_model_input_filter=CtxwinInputFilter(engine), **NO_TRACING))
    assert result.final_output == "run 0 done" and provider.refused == []
    logged = "\n".join(r.text for m in engine.messages for r in m.tool_results)
    assert all(result_text(f"r0/f{n}.py") in logged for n in range(14))


def test_the_filter_without_a_wrapped_model_says_overflows_will_not_be_recovered(tmp_path: Path) -> None:
    """The README's snippet gives the agent `model=session.wrap(model)`; left out, nothing recovers an
    overflow, and the filter says so once (at its second call: the first request went unwrapped)."""
    session = open_session(tmp_path / "s")
    config = RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING)
    with pytest.warns(UnwrappedModelWarning, match=r"model=session\.wrap\(model\)") as caught:
        Runner.run_sync(agent_for(Provider(tool_plan(0, 4)).model), "Read them.", session=session, run_config=config,
                        max_turns=20)
    assert len([w for w in caught if issubclass(w.category, UnwrappedModelWarning)]) == 1
    wrapped = open_session(tmp_path / "t")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnwrappedModelWarning)
        result = Runner.run_sync(agent_for(wrapped.wrap(Provider(tool_plan(0, 4)).model)), "Read them.",
                                 session=wrapped, max_turns=20,
                                 run_config=RunConfig(call_model_input_filter=wrapped.input_filter, **NO_TRACING))
    assert result.final_output == "run 0 done"


@pytest.mark.parametrize("where", ["agent", "run_config"])
def test_the_output_the_request_asks_for_is_its_reserve(tmp_path: Path, where: str) -> None:
    """`max_tokens` in the agent's model settings (or the run's, which win) is the reserve each
    request is budgeted with, not the engine's default."""
    session = open_session(tmp_path / "s")
    settings = ModelSettings(max_tokens=1_500)
    agent = Agent(name="reader", instructions="Read.", model=session.wrap(Provider(tool_plan(0, 2)).model),
                  tools=[read_file], **({"model_settings": settings} if where == "agent" else {}))
    budgets: list[int] = []
    inner = session.input_filter
    original = inner.settle

    def watched(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        assert inner.last is not None
        budgets.append(inner.last.budget)
        return out

    inner.settle = watched  # type: ignore[method-assign]
    config = RunConfig(call_model_input_filter=inner, **({"model_settings": settings} if where == "run_config" else {}),
                       **NO_TRACING)
    assert Runner.run_sync(agent, "Read them.", session=session, run_config=config, max_turns=10).final_output
    expected = session.engine.prepare(max_output=1_500).budget
    assert budgets and set(budgets) == {expected} and expected > session.engine.prepare().budget


def test_overflow_from_the_provider_is_recovered_and_the_request_retried(tmp_path: Path) -> None:
    """The engine believes the window is 16K; the provider's is 8K. The refused request is compacted
    and retried by CtxwinModel; the run goes on, and the recovery is in the log."""
    session = open_session(tmp_path / "s", policy="masking")
    provider = Provider(tool_plan(0, 8, parallel=1), window=8_000)
    result = Runner.run_sync(agent_for(session.wrap(provider.model)), "Read f0..f7.", session=session, max_turns=30,
                             run_config=RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING))
    assert result.final_output == "run 0 done"
    assert provider.refused, "the scenario must hit the provider's real window"
    assert max(provider.accepted) <= 8_000
    assert any(e.payload.get("type") == "recovery" for e in session.engine.session)
    outputs = [i for i in asyncio.run(session.get_items()) if i.get("type") == "function_call_output"]
    assert len(outputs) == 8


def test_streamed_runs_are_managed_and_recovered_too(tmp_path: Path) -> None:
    """`Runner.run_streamed`: the same filter, and an overflow refused before the stream starts is
    recovered from like a plain call."""
    session = open_session(tmp_path / "s", policy="masking")
    provider = Provider(tool_plan(0, 8, parallel=1), window=8_000)
    agent = agent_for(session.wrap(provider.model))

    async def stream() -> Any:
        result = Runner.run_streamed(agent, "Read f0..f7.", session=session, max_turns=30,
                                     run_config=RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING))
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(stream())
    assert result.final_output == "run 0 done"
    assert provider.refused and max(provider.accepted) <= 8_000
    assert all(call.streamed for call in provider.model.calls)
    outputs = [i for i in asyncio.run(session.get_items()) if i.get("type") == "function_call_output"]
    assert [o["output"] for o in outputs] == [result_text(f"r0/f{n}.py") for n in range(8)]


def test_recovery_is_bounded_and_other_errors_pass_through(tmp_path: Path) -> None:
    session = open_session(tmp_path / "s")
    hopeless = ScriptedModel([overflow_error(50_000, 8_000) for _ in range(10)])
    with pytest.raises(ContextOverflowError):
        Runner.run_sync(agent_for(session.wrap(hopeless)), "hi", session=session,
                        run_config=RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING))
    broken = ScriptedModel([RuntimeError("connection reset")])
    with pytest.raises(RuntimeError, match="connection reset"):
        Runner.run_sync(agent_for(session.wrap(broken)), "hi again", session=session,
                        run_config=RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING))
    assert len(broken.calls) == 1


def test_instructions_are_kept_and_counted(tmp_path: Path) -> None:
    session = open_session(tmp_path / "s")
    provider = Provider([[assistant_message("ok", item_id="m")]])
    agent = Agent(name="a", instructions="Answer in French. " * 200, model=provider.model, tools=[read_file])
    Runner.run_sync(agent, "bonjour", session=session,
                    run_config=RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING))
    call = provider.model.calls[0]
    assert call.system_instructions == "Answer in French. " * 200
    prepared = session.input_filter.last
    assert prepared is not None
    assert prepared.tokens >= COUNTER.count_text("Answer in French. " * 200)


SPECIALISTS = [Agent(name=f"specialist_{n}", instructions="Handle it.",
                     handoff_description=f"Handles billing disputes, refunds, chargebacks and invoices for "
                                         f"enterprise customers in region {n}. " * 5) for n in range(10)]
"""Ten handoffs: about 1,400 tokens of function tools the SDK sends with every request of their triage agent."""


def test_handoffs_are_counted_against_the_budget(tmp_path: Path) -> None:
    """An agent with handoffs: the SDK sends them as function tools with every request, so the engine
    must count them. Its count of each request is the provider's (the whole body), within the few
    tokens of the body's settings; a provider whose window is the engine's budget refuses nothing."""
    session = open_session(tmp_path / "s")
    budget = session.engine.prepare().budget
    counted: list[tuple[int, int]] = []  # (the provider's count, the engine's) per request

    def watch(tokens: int) -> None:
        assert session.input_filter.last is not None
        counted.append((tokens, session.input_filter.last.tokens))

    provider = Provider(conversation_plan(), window=budget, watch=watch)
    agent = Agent(name="triage", instructions="You read files and report what they define.",
                  model=session.wrap(provider.model), tools=[read_file], handoffs=SPECIALISTS)
    config = RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING)
    for _, prompt, _, _ in RUNS:
        Runner.run_sync(agent, prompt, session=session, run_config=config, max_turns=40)
    assert len(provider.model.calls[0].handoffs) == 10
    assert provider.refused == []
    assert counted and all(abs(provider - engine) <= 25 for provider, engine in counted), counted


class Report(BaseModel):
    """What the agent found."""

    summary: str = Field(description="One paragraph on what the files define, naming each handler. " * 10)
    files: list[str] = Field(description="Every path read, in the order read, as given to read_file. " * 10)


def test_the_output_schema_and_mcp_servers_tools_are_counted(tmp_path: Path) -> None:
    """What only the run knows: an MCP server's tools (here ctxwin's own server, over stdio) are
    listed when the run starts, and the output schema goes as `text.format`. CtxwinModel counts the
    request it is handed and the engine's count is the provider's."""
    (tmp_path / "root").mkdir()
    session = open_session(tmp_path / "s")
    counted: list[tuple[int, int]] = []

    def watch(tokens: int) -> None:
        assert session.input_filter.last is not None
        counted.append((tokens, session.input_filter.last.tokens))

    answer = Report(summary="r0 defines handlers", files=["r0/f0.py"]).model_dump_json()
    provider = Provider([*tool_plan(0, 2)[:-1], [assistant_message(answer, item_id="m")]], watch=watch)
    server = MCPServerStdio({"command": sys.executable, "args": ["-m", "ctxwin.cli.main", "mcp", "--root",
                                                                 str(tmp_path / "root")],
                             "env": {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}},
                            client_session_timeout_seconds=30)

    async def go() -> Any:
        async with server:
            agent = Agent(name="a", instructions="Read, then report.", model=session.wrap(provider.model),
                          tools=[read_file], mcp_servers=[server], output_type=Report)
            return await Runner.run(agent, "Read r0.", session=session, max_turns=10,
                                    run_config=RunConfig(call_model_input_filter=session.input_filter, **NO_TRACING))

    result = asyncio.run(go())
    assert result.final_output == Report.model_validate_json(answer)
    call = provider.model.calls[0]
    assert {t.name for t in call.tools} >= {"read_file", "read", "grep"} and call.output_schema is not None
    assert len(counted) == 2 and all(abs(p - e) <= 25 for p, e in counted), counted


# -- the Session protocol ---------------------------------------------------------------------------

ITEMS: list[dict[str, Any]] = [
    {"content": "What is in a.py?", "role": "user"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I should read it."}]},
    {"arguments": '{"path": "a.py"}', "call_id": "c1", "name": "read_file", "type": "function_call", "id": "fc_1"},
    {"arguments": '{"path":"b.py"}', "call_id": "c2", "name": "read_file", "type": "function_call", "id": "fc_2"},
    {"call_id": "c1", "output": "def a(): pass", "type": "function_call_output"},
    {"call_id": "c2", "output": [{"type": "input_text", "text": "def b(): pass"}], "type": "function_call_output"},
    {"id": "msg_1", "content": [{"annotations": [], "text": "a.py defines a().", "type": "output_text",
                                 "logprobs": []}], "role": "assistant", "status": "completed", "type": "message"},
    {"role": "developer", "content": "Be brief."},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
    {"content": [{"type": "input_text", "text": "thanks"}], "role": "user", "type": "message"},
]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_the_session_is_the_sdks_session_protocol(tmp_path: Path) -> None:
    with open_session(tmp_path / "s") as session:
        assert isinstance(session, SessionProtocol)
        assert session.session_id == session.engine.session.session_id


def test_items_come_back_verbatim_with_limit(tmp_path: Path) -> None:
    with open_session(tmp_path / "s") as session:
        run(session.add_items(ITEMS[:4]))
        run(session.add_items(ITEMS[4:]))
        assert run(session.get_items()) == ITEMS
        assert run(session.get_items(limit=3)) == ITEMS[-3:]
        assert run(session.get_items(limit=0)) == []
        assert run(session.get_items(limit=100)) == ITEMS
        for bad in (-1, "2", 1.5, True):
            with pytest.raises(InputError):
                run(session.get_items(limit=bad))


def test_items_persist_across_reopen(tmp_path: Path) -> None:
    with open_session(tmp_path / "s") as session:
        run(session.add_items(ITEMS))
        session_id = session.session_id
    with open_session(tmp_path / "s") as session:
        assert session.session_id == session_id
        assert run(session.get_items()) == ITEMS


def test_items_split_across_calls_join_the_same_turn(tmp_path: Path) -> None:
    """Reasoning then its calls, added one by one, make one assistant message, as the API sees it."""
    with open_session(tmp_path / "s") as session:
        for item in ITEMS[:6]:
            run(session.add_items([item]))
        assert run(session.get_items()) == ITEMS[:6]
        messages = session.engine.messages
        assert [m.role for m in messages] == ["user", "assistant", "tool"]
        assert len(messages[1].blocks) == 3 and len(messages[2].tool_results) == 2


def test_pop_item_is_recorded_not_deleted(tmp_path: Path) -> None:
    with open_session(tmp_path / "s") as session:
        run(session.add_items(ITEMS[:6]))
        assert run(session.pop_item()) == ITEMS[5]
        assert run(session.pop_item()) == ITEMS[4]
        assert run(session.pop_item()) == ITEMS[3]  # from inside the assistant's turn
        assert run(session.get_items()) == ITEMS[:3]
        pops = [e for e in session.engine.session if e.payload.get("type") == POP_ENTRY]
        assert len(pops) == 3
        assert "def b(): pass" in all_logged_text(session)  # the popped items are still in the log
        run(session.add_items([ITEMS[3]]))
        assert run(session.get_items()) == ITEMS[:4]
    with open_session(tmp_path / "s") as session:
        assert run(session.get_items()) == ITEMS[:4]


def test_pop_item_on_an_empty_session(tmp_path: Path) -> None:
    with open_session(tmp_path / "s") as session:
        assert run(session.pop_item()) is None


def test_clear_session_is_recorded_not_deleted(tmp_path: Path) -> None:
    with open_session(tmp_path / "s") as session:
        run(session.add_items(ITEMS))
        run(session.clear_session())
        assert run(session.get_items()) == []
        assert any(e.payload.get("type") == CLEAR_ENTRY for e in session.engine.session)
        assert "a.py defines a()." in all_logged_text(session)
        run(session.clear_session())  # clearing an empty session is fine
    with open_session(tmp_path / "s") as session:
        assert run(session.get_items()) == []
        run(session.add_items(ITEMS[:1]))
        assert run(session.get_items()) == ITEMS[:1]


def test_fields_the_sdk_strips_on_replay_do_not_fork_the_log(tmp_path: Path) -> None:
    """The runner saves a tool call with its `_agents_tool_description` and replays it without: the
    filter still finds the whole history in the log, and the session gives the field back."""
    saved = [ITEMS[0], {**ITEMS[2], "_agents_tool_description": "Read a file."}, ITEMS[4]]
    with open_session(tmp_path / "s") as session:
        run(session.add_items(saved))
        before = [e.id for e in session.engine.session if e.kind == "message"]
        replayed = [ITEMS[0], ITEMS[2], ITEMS[4]]
        session.input_filter(CallModelData(ModelInputData(replayed, "ins"), agent_for(None), None))
        assert [e.id for e in session.engine.session if e.kind == "message"] == before
        assert run(session.get_items()) == saved


def test_session_settings_limit_is_used_by_the_runner(tmp_path: Path) -> None:
    with open_session(tmp_path / "s", session_settings=SessionSettings(limit=1)) as session:
        run(session.add_items(ITEMS[:1]))
        provider = Provider([[assistant_message("ok", item_id="m")]])
        Runner.run_sync(agent_for(provider.model), "next", session=session, run_config=RunConfig(**NO_TRACING))
        sent = provider.model.calls[0].input
        assert [i["content"] for i in sent] == ["What is in a.py?", "next"]


def test_bad_input_is_refused_with_a_typed_error(tmp_path: Path) -> None:
    with open_session(tmp_path / "s") as session:
        with pytest.raises(InputError):
            run(session.add_items({"role": "user", "content": "x"}))  # type: ignore[arg-type]
        with pytest.raises(InputError):
            run(session.add_items(["text"]))  # type: ignore[list-item]
        with pytest.raises(InputError):
            run(session.add_items([{"content": "no role, no type"}]))  # type: ignore[list-item]
        with pytest.raises(InputError):
            run(session.add_items([{"role": "user", "content": object()}]))  # type: ignore[list-item]
        assert run(session.get_items()) == []
    with pytest.raises(InputError):
        CtxwinSession("engine")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        CtxwinModel("gpt-4.1", CtxwinInputFilter(ContextEngine()))  # type: ignore[arg-type]


# -- one conversion ---------------------------------------------------------------------------------


def item_strategy() -> st.SearchStrategy[list[dict[str, Any]]]:
    text = st.text(min_size=1, max_size=12)
    call_ids = st.sampled_from(["c1", "c2", "c3"])
    user = st.builds(lambda t: {"role": "user", "content": t}, text)
    said = st.builds(lambda t: {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                                                      "text": t}]}, text)
    call = st.builds(lambda c, p: {"type": "function_call", "call_id": c, "name": "read_file",
                                   "arguments": json.dumps({"path": p})}, call_ids, text)
    output = st.builds(lambda c, t: {"type": "function_call_output", "call_id": c, "output": t}, call_ids, text)
    reasoning = st.builds(lambda t: {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text",
                                                                                  "text": t}]}, text)
    return st.lists(st.one_of(user, said, call, output, reasoning), max_size=14)


@settings(max_examples=150, deadline=None)
@given(item_strategy(), st.integers(min_value=0, max_value=14))
def test_conversion_matches_the_whole_list_converter_and_round_trips(items: list[dict[str, Any]], cut: int) -> None:
    messages = items_to_messages(items)
    assert [m.content_key for m in messages] == [m.content_key for m in from_openai_responses(items)]
    assert messages_to_items(messages) == items
    # converted in two pieces with the first piece's calls known, the pieces join up the same way
    first = items_to_messages(items[:cut])
    calls = {c.id: c.name for m in first for c in m.tool_calls}
    rest = items_to_messages(items[cut:], calls)
    joined: list[Message] = first + rest
    if first and rest and first[-1].role == rest[0].role and first[-1].role in ("assistant", "tool"):
        return  # a cut inside one turn side: the session joins these itself (tested above)
    assert [m.content_key for m in joined] == [m.content_key for m in messages]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(item_strategy(), st.integers(min_value=0, max_value=14)), min_size=1, max_size=5))
def test_a_resent_history_converts_as_a_whole_would(steps: list[tuple[list[dict[str, Any]], int]]) -> None:
    """The filter converts only what follows the front a resent history shares with the previous one;
    the result is what converting the whole list gives, however the list changed (grew, was cut,
    was edited)."""
    history = _ItemHistory()
    items: list[dict[str, Any]] = []
    for extra, cut in steps:
        items = items[:cut] + extra if cut < len(items) else items + extra
        got = history.messages(items)
        want = items_to_messages(items)
        assert [m.content_key for m in got] == [m.content_key for m in want]
        assert messages_to_items(got) == items


OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.sampled_from(range(len(ITEMS))), min_size=1, max_size=4)),
    st.tuples(st.just("pop"), st.none()),
    st.tuples(st.just("get"), st.one_of(st.none(), st.integers(min_value=0, max_value=6))),
    st.tuples(st.just("clear"), st.none()),
    st.tuples(st.just("reopen"), st.none()),
), max_size=10)


@settings(max_examples=15, deadline=None)
@given(OPERATIONS)
def test_the_session_behaves_like_the_sdks_own_sqlite_session(operations: list[tuple[str, Any]]) -> None:
    """Any sequence of adds, pops, gets, clears and reopens: CtxwinSession answers what the SDK's
    reference implementation answers, and its log only ever grows."""
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(_compare_with_sqlite(Path(folder), operations))


async def _compare_with_sqlite(folder: Path, operations: list[tuple[str, Any]]) -> None:
    reference = SQLiteSession("ref", str(folder / "ref.db"))
    session = open_session(folder / "s")
    entries = 0
    try:
        for name, argument in operations:
            if name == "add":
                items = [copy.deepcopy(ITEMS[i]) for i in argument]
                await reference.add_items(copy.deepcopy(items))
                await session.add_items(items)
            elif name == "pop":
                assert await session.pop_item() == await reference.pop_item()
            elif name == "get":
                assert await session.get_items(argument) == await reference.get_items(argument)
            elif name == "clear":
                await session.clear_session()
                await reference.clear_session()
            else:
                session.close()
                session = open_session(folder / "s")
            logged = sum(1 for _ in session.engine.session)
            assert logged >= entries
            entries = logged
        assert await session.get_items() == await reference.get_items()
    finally:
        session.close()
        reference.close()
