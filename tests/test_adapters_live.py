"""The adapters against a real provider's HTTP API, the scripted fake provider on 127.0.0.1: LangChain's
`create_agent` with `ChatOpenAI` and `ChatAnthropic`, the Agents SDK with `OpenAIChatCompletionsModel`
and `OpenAIResponsesModel`, PydanticAI with `CtxwinCapability` on its Chat and Responses models. Each
runs a tool-using task of many model calls (60 in the slow variant) whose reads outgrow a 16K window
several times over, on a model name the registry does not know, streamed and not: the caller sees no
error, the model answers every call once, and the fake refuses whatever does not fit (so a request
over the window cannot pass unnoticed). The window is learned from the provider's overflow errors; the
output reserve is the framework's own max-tokens setting.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_fake import ScriptedFake, Turn
from ctxwin import ContextEngine, Session
from ctxwin.messages import Message
from ctxwin.testing import FakeProvider

WINDOW = 16_000
MAX_TOKENS = 600
FILE_LINES = 60  # about 1,300 tokens a read: the task outgrows the window after about ten reads
SHORT, LONG = 16, 60
OPENAI_MODEL = "acme-coder-1"
ANTHROPIC_MODEL = "acme-claude-1"
SYSTEM = "You read every file you are asked to, one call at a time, then say done."
TASK = "Read the project's files one by one."
MOD = re.compile(r"src/mod_(\d{3})\.py")


def file_content(path: str) -> str:
    seed = hashlib.sha256(path.encode()).hexdigest()
    lines = [f"FILE {path}", f"NEEDLE {seed[:16]}"]
    lines += [f"{n:04d} def step_{n}_{seed[n % 40:n % 40 + 8]}(value): return value * {n} + 0x{seed[:6]}"
              for n in range(FILE_LINES)]
    return "\n".join(lines)


def reader(calls: int) -> Callable[[str, list[Message]], Turn]:
    """The scripted model: call n reads src/mod_n.py; after `calls` reads it answers. Where it is comes
    from what it sees: the highest file number its view names (a call, a result, or a compaction
    summary that lists the files read), as a model would go on from its notes."""
    def script(api: str, messages: list[Message]) -> Turn:
        seen = [int(n) for m in messages for n in MOD.findall(m.text + " ".join(str(c.arguments) for c in m.tool_calls)
                                                              + " ".join(r.text for r in m.tool_results))]
        step = max(seen, default=0)
        if step >= calls:
            return Turn(text=f"done after {calls} reads")
        n = step + 1
        return Turn(text=f"Reading file {n}.", calls=[(f"call_{n:03d}", "read", {"path": f"src/mod_{n:03d}.py"})])
    return script


GENERATION = ("/messages", "/chat/completions", "/responses")


def check(fake: FakeProvider, text: str, calls: int, engine: ContextEngine, stream: bool) -> None:
    assert text == f"done after {calls} reads"
    requests = [r for r in fake.requests if r.path.endswith(GENERATION)]
    assert all(bool(r.body.get("stream")) is stream for r in requests)  # streamed (or not) as the variant says
    answered = [r for r in requests if r.status == 200]
    assert len(answered) == calls + 1  # every model call answered exactly once: no overflow reached the caller
    assert all(r.status in (200, 400) for r in requests)  # the refusals are the provider's overflow answers
    # The window is learned from the first refusal (numbers in the error, else the refused request's
    # own size), not found by shrinking again and again ...
    assert len(requests) - len(answered) <= 2
    # ... and the reserve is the output the framework asks for, not the registry's guess for a model
    # it does not know (8,192): the requests use the window up to about that much.
    assert max(r.input_tokens or 0 for r in answered) > WINDOW - MAX_TOKENS - 2_000
    logged = {r.call_id: r.text for m in engine.messages for r in m.tool_results}
    assert all(logged.get(f"call_{n:03d}") == file_content(f"src/mod_{n:03d}.py") for n in range(1, calls + 1))


def variants(*names: str) -> list[Any]:
    out = []
    for name in names:
        for stream in (False, True):
            for calls in (SHORT, LONG):
                marks = [pytest.mark.slow] if calls == LONG else []
                out.append(pytest.param(name, stream, calls, id=f"{name}-{'stream' if stream else 'whole'}-{calls}",
                                        marks=marks))
    return out


@pytest.fixture(autouse=True)
def _unknown_model_warnings() -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="unknown model")  # the point: the registry does not know it
        yield


# ---------------------------------------------------------------------------------------------- LangChain


@pytest.mark.parametrize(("api", "stream", "calls"), variants("openai", "anthropic"))
def test_langchain_create_agent(api: str, stream: bool, calls: int, tmp_path: Path) -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from ctxwin.adapters.langchain import CtxwinMiddleware

    @tool
    def read(path: str) -> str:
        """Read a file of the project."""
        return file_content(path)

    with ScriptedFake(reader(calls), context_window=WINDOW, max_output=MAX_TOKENS * 2) as fake:
        if api == "openai":
            chat: Any = pytest.importorskip("langchain_openai").ChatOpenAI(
                model=OPENAI_MODEL, base_url=fake.openai_base_url, api_key="sk-test", max_tokens=MAX_TOKENS,
                streaming=stream, max_retries=0)
        else:
            chat = pytest.importorskip("langchain_anthropic").ChatAnthropic(
                model=ANTHROPIC_MODEL, base_url=fake.anthropic_base_url, api_key="sk-test", max_tokens=MAX_TOKENS,
                streaming=stream, max_retries=0)
        # No model name, window or output size repeated: the middleware reads them from the chat model.
        middleware = CtxwinMiddleware(session=Session.open(tmp_path / "s", durability="batch"))
        agent = create_agent(chat, tools=[read], system_prompt=SYSTEM, middleware=[middleware])
        state = agent.invoke({"messages": [HumanMessage(TASK)]}, {"recursion_limit": 4 * calls + 20})
        engine = middleware.engine_for()
        assert engine.model == chat_name(chat) and engine.max_output == MAX_TOKENS
        check(fake, state["messages"][-1].text, calls, engine, stream)


def chat_name(chat: Any) -> str:
    return str(getattr(chat, "model_name", None) or chat.model)


# ---------------------------------------------------------------------------------------------- Agents SDK


@pytest.mark.parametrize(("api", "stream", "calls"), variants("chat", "responses"))
def test_openai_agents_sdk(api: str, stream: bool, calls: int, tmp_path: Path) -> None:
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    from ctxwin.adapters.openai_agents import CtxwinSession

    @agents.function_tool
    def read(path: str) -> str:
        """Read a file of the project."""
        return file_content(path)

    async def run(fake: FakeProvider) -> str:
        client = AsyncOpenAI(base_url=fake.openai_base_url, api_key="sk-test", max_retries=0)
        model_type = agents.OpenAIChatCompletionsModel if api == "chat" else agents.OpenAIResponsesModel
        model = model_type(model=OPENAI_MODEL, openai_client=client)
        session = CtxwinSession.open(tmp_path / "s", model=OPENAI_MODEL, durability="batch")
        agent = agents.Agent(name="reader", instructions=SYSTEM, tools=[read], model=session.wrap(model),
                             model_settings=agents.ModelSettings(max_tokens=MAX_TOKENS))
        config = agents.RunConfig(call_model_input_filter=session.input_filter, tracing_disabled=True)
        if stream:
            result = agents.Runner.run_streamed(agent, TASK, session=session, run_config=config, max_turns=calls + 5)
            async for _ in result.stream_events():
                pass
        else:
            result = await agents.Runner.run(agent, TASK, session=session, run_config=config, max_turns=calls + 5)
        check(fake, str(result.final_output), calls, session.engine, stream)
        return str(result.final_output)

    with ScriptedFake(reader(calls), context_window=WINDOW, max_output=MAX_TOKENS * 2) as fake:
        asyncio.run(run(fake))


# ---------------------------------------------------------------------------------------------- PydanticAI


@pytest.mark.parametrize(("api", "stream", "calls"), variants("chat", "responses"))
def test_pydantic_ai_capability(api: str, stream: bool, calls: int, tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.usage import UsageLimits

    from ctxwin.adapters.pydantic_ai import CtxwinCapability

    with ScriptedFake(reader(calls), context_window=WINDOW, max_output=MAX_TOKENS * 2) as fake:
        provider = OpenAIProvider(base_url=fake.openai_base_url, api_key="sk-test")
        model = (OpenAIChatModel if api == "chat" else OpenAIResponsesModel)(OPENAI_MODEL, provider=provider)
        engine = ContextEngine(Session.open(tmp_path / "s", durability="batch"), model=OPENAI_MODEL)
        agent: Agent[None, str] = Agent(model, instructions=SYSTEM, capabilities=[CtxwinCapability(engine)],
                                        model_settings=ModelSettings(max_tokens=MAX_TOKENS))

        @agent.tool_plain
        def read(path: str) -> str:
            """Read a file of the project."""
            return file_content(path)

        async def ignore(ctx: Any, events: Any) -> None:
            async for _ in events:
                pass

        result = agent.run_sync(TASK, event_stream_handler=ignore if stream else None,
                                usage_limits=UsageLimits(request_limit=2 * calls))  # the framework's own cap: 50
        check(fake, result.output, calls, engine, stream)
