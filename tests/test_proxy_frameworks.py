"""Every ecosystem client pointed at the proxy, on a model name the registry does not know, running a
tool-using task whose reads outgrow a 16K window several times over (issue 26): the official SDKs
(`anthropic`, `openai` Chat and Responses; sync and async, streamed and whole), LangChain's
`create_agent` with `ChatOpenAI` and `ChatAnthropic`, the Agents SDK on Chat and Responses, and
PydanticAI on Chat and Responses. Each with the proxy told nothing of the window (it learns it from
the provider's overflow errors: their numbers, or the refused request's own size where the error
has none, as Responses' does), and with `--window 16000` alone (the reserve is each request's own
`max_tokens` / `max_output_tokens`, not the registry's guess). No error reaches the caller: the task
ends with the model's final answer, every call of it answered once.
"""

from __future__ import annotations

import asyncio
import json
import re
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agent_fake import ScriptedFake, Turn
from ctxwin.messages import Message
from ctxwin.testing import FakeProvider
from proxy_server import Served, proxy_for
from test_proxy_sdk import file_content  # the same files: 60 numbered lines, about 1,300 tokens a read

WINDOW = 16_000
MAX_TOKENS = 600
SHORT, LONG = 16, 60
OPENAI_MODEL = "acme-coder-1"  # names the registry does not know
ANTHROPIC_MODEL = "acme-claude-1"
SYSTEM = "You read every file you are asked to, one call at a time, then say done."
TASK = "Read the project's files one by one."
MOD = re.compile(r"src/mod_(\d{3})\.py")
GENERATION = ("/messages", "/chat/completions", "/responses")
READ_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def reader(calls: int) -> Callable[[str, list[Message]], Turn]:
    """The scripted model: call n reads src/mod_n.py; after `calls` reads it answers. Where it is comes
    from what it sees (the highest file number its view names: a call, a result, or a compaction
    summary listing the files read), as a model goes on from its notes."""
    def script(api: str, messages: list[Message]) -> Turn:
        seen = [int(n) for m in messages
                for n in MOD.findall(m.text + " ".join(str(c.arguments) for c in m.tool_calls)
                                     + " ".join(r.text for r in m.tool_results))]
        step = max(seen, default=0)
        if step >= calls:
            return Turn(text=f"done after {calls} reads")
        n = step + 1
        return Turn(text=f"Reading file {n}.", calls=[(f"call_{n:03d}", "read", {"path": f"src/mod_{n:03d}.py"})])
    return script


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="unknown model")  # the point: the registry does not know it
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def served_task(calls: int, window: int | None) -> Any:
    """The fake (16K, the scripted reader) and the proxy in front of it (`window`: `--window`)."""
    fake = ScriptedFake(reader(calls), context_window=WINDOW, max_output=MAX_TOKENS * 2)
    return fake, (lambda: proxy_for(fake, window=window))


def check(fake: FakeProvider, served: Served, text: str, calls: int, stream: bool) -> None:
    assert text == f"done after {calls} reads"
    requests = [r for r in fake.requests if r.path.endswith(GENERATION)]
    assert all(bool(r.body.get("stream")) is stream for r in requests)
    answered = [r for r in requests if r.status == 200]
    assert len(answered) == calls + 1  # every model call answered exactly once
    assert all(r.status in (200, 400) for r in requests)  # refusals are only the provider's overflow answers
    assert len(requests) - len(answered) <= 3  # the window is learned from the first refusals, not shrunk to
    entries = served.entries()
    assert len(entries) == calls + 1 and all(e["status"] == 200 for e in entries)  # nothing failed for the caller
    assert max(e["tokens_received"] for e in entries) > WINDOW  # the task did outgrow the window


def variants(*names: str) -> list[Any]:
    out = []
    for name in names:
        for stream in (False, True):
            for window in (None, WINDOW):
                for calls in (SHORT, LONG):
                    marks = [pytest.mark.slow] if calls == LONG or (window and name not in ("anthropic",)) else []
                    out.append(pytest.param(name, stream, window, calls, marks=marks,
                                            id=f"{name}-{'stream' if stream else 'whole'}-"
                                               f"{'window' if window else 'learned'}-{calls}"))
    return out


# ---------------------------------------------------------------------------------------------- official SDKs


def anthropic_task(url: str, stream: bool, use_async: bool, limit: int) -> str:
    import anthropic

    history: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    tools = [{"name": "read", "description": "Read a file of the project.", "input_schema": READ_SCHEMA}]
    options = {"model": ANTHROPIC_MODEL, "max_tokens": MAX_TOKENS, "tools": tools, "system": SYSTEM}

    def step(message: Any) -> str | None:
        content = [b.model_dump(exclude_none=True, exclude={"parsed_output"}) for b in message.content]
        history.append({"role": "assistant", "content": content})
        results = [{"type": "tool_result", "tool_use_id": b["id"], "content": file_content(b["input"]["path"])}
                   for b in content if b["type"] == "tool_use"]
        if not results:
            return "".join(b["text"] for b in content if b["type"] == "text")
        history.append({"role": "user", "content": results})
        return None

    if not use_async:
        client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        for _ in range(limit):
            if stream:
                with client.messages.stream(messages=history, **options) as events:
                    message = events.get_final_message()
            else:
                message = client.messages.create(messages=history, **options)
            if (text := step(message)) is not None:
                return text
        raise AssertionError("the task did not end")

    async def main() -> str:
        client = anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        try:
            for _ in range(limit):
                if stream:
                    async with client.messages.stream(messages=history, **options) as events:
                        message = await events.get_final_message()
                else:
                    message = await client.messages.create(messages=history, **options)
                if (text := step(message)) is not None:
                    return text
        finally:
            await client.close()
        raise AssertionError("the task did not end")

    return asyncio.run(main())


def chat_task(url: str, stream: bool, use_async: bool, limit: int) -> str:
    import openai

    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    tools = [{"type": "function", "function": {"name": "read", "description": "Read a file of the project.",
                                               "parameters": READ_SCHEMA}}]
    options = {"model": OPENAI_MODEL, "max_tokens": MAX_TOKENS, "tools": tools}

    def step(message: Any) -> str | None:
        calls = message.tool_calls or []
        entry: dict[str, Any] = {"role": "assistant", "content": message.content}
        if calls:
            entry["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}} for c in calls]
        history.append(entry)
        if not calls:
            return str(message.content)
        history.extend({"role": "tool", "tool_call_id": c.id,
                        "content": file_content(json.loads(c.function.arguments)["path"])} for c in calls)
        return None

    if not use_async:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        for _ in range(limit):
            if stream:
                with client.chat.completions.stream(messages=history, **options) as events:
                    completion = events.get_final_completion()
            else:
                completion = client.chat.completions.create(messages=history, **options)
            if (text := step(completion.choices[0].message)) is not None:
                return text
        raise AssertionError("the task did not end")

    async def main() -> str:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        try:
            for _ in range(limit):
                if stream:
                    async with client.chat.completions.stream(messages=history, **options) as events:
                        completion = await events.get_final_completion()
                else:
                    completion = await client.chat.completions.create(messages=history, **options)
                if (text := step(completion.choices[0].message)) is not None:
                    return text
        finally:
            await client.close()
        raise AssertionError("the task did not end")

    return asyncio.run(main())


def responses_task(url: str, stream: bool, use_async: bool, limit: int) -> str:
    import openai

    history: list[Any] = [{"role": "user", "content": TASK}]
    tools = [{"type": "function", "name": "read", "description": "Read a file of the project.",
              "parameters": READ_SCHEMA}]
    options = {"model": OPENAI_MODEL, "max_output_tokens": MAX_TOKENS, "tools": tools, "instructions": SYSTEM}

    def step(response: Any) -> str | None:
        calls = []
        for item in response.output:
            history.append(item.model_dump(exclude_none=True))
            if item.type == "function_call":
                calls.append(item)
        if not calls:
            return str(response.output_text)
        history.extend({"type": "function_call_output", "call_id": c.call_id,
                        "output": file_content(json.loads(c.arguments)["path"])} for c in calls)
        return None

    if not use_async:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        for _ in range(limit):
            if stream:
                with client.responses.stream(input=history, **options) as events:
                    response = events.get_final_response()
            else:
                response = client.responses.create(input=history, **options)
            if (text := step(response)) is not None:
                return text
        raise AssertionError("the task did not end")

    async def main() -> str:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        try:
            for _ in range(limit):
                if stream:
                    async with client.responses.stream(input=history, **options) as events:
                        response = await events.get_final_response()
                else:
                    response = await client.responses.create(input=history, **options)
                if (text := step(response)) is not None:
                    return text
        finally:
            await client.close()
        raise AssertionError("the task did not end")

    return asyncio.run(main())


SDK_TASKS = {"anthropic": anthropic_task, "openai-chat": chat_task, "openai-responses": responses_task}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("api", "stream", "window", "calls"), variants(*SDK_TASKS))
def test_official_sdks(api: str, stream: bool, window: int | None, calls: int, use_async: bool) -> None:
    fake, proxy = served_task(calls, window)
    with fake, proxy() as served:
        text = SDK_TASKS[api](served.url, stream, use_async, calls + 5)
        check(fake, served, text, calls, stream)


# ---------------------------------------------------------------------------------------------- frameworks


@pytest.mark.parametrize(("api", "stream", "window", "calls"), variants("langchain-openai", "langchain-anthropic"))
def test_langchain_create_agent(api: str, stream: bool, window: int | None, calls: int) -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    @tool
    def read(path: str) -> str:
        """Read a file of the project."""
        return file_content(path)

    fake, proxy = served_task(calls, window)
    with fake, proxy() as served:
        if api == "langchain-openai":
            chat: Any = pytest.importorskip("langchain_openai").ChatOpenAI(
                model=OPENAI_MODEL, base_url=f"{served.url}/v1", api_key="sk-test", max_tokens=MAX_TOKENS,
                streaming=stream, max_retries=0)
        else:
            chat = pytest.importorskip("langchain_anthropic").ChatAnthropic(
                model=ANTHROPIC_MODEL, base_url=served.url, api_key="sk-test", max_tokens=MAX_TOKENS,
                streaming=stream, max_retries=0)
        agent = create_agent(chat, tools=[read], system_prompt=SYSTEM)
        state = agent.invoke({"messages": [HumanMessage(TASK)]}, {"recursion_limit": 4 * calls + 20})
        check(fake, served, state["messages"][-1].text, calls, stream)


@pytest.mark.parametrize(("api", "stream", "window", "calls"), variants("agents-chat", "agents-responses"))
def test_openai_agents_sdk(api: str, stream: bool, window: int | None, calls: int) -> None:
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    @agents.function_tool
    def read(path: str) -> str:
        """Read a file of the project."""
        return file_content(path)

    async def run(url: str) -> str:
        client = AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
        model_type = agents.OpenAIChatCompletionsModel if api == "agents-chat" else agents.OpenAIResponsesModel
        agent = agents.Agent(name="reader", instructions=SYSTEM, tools=[read],
                             model=model_type(model=OPENAI_MODEL, openai_client=client),
                             model_settings=agents.ModelSettings(max_tokens=MAX_TOKENS))
        config = agents.RunConfig(tracing_disabled=True)
        if stream:
            result = agents.Runner.run_streamed(agent, TASK, run_config=config, max_turns=calls + 5)
            async for _ in result.stream_events():
                pass
        else:
            result = await agents.Runner.run(agent, TASK, run_config=config, max_turns=calls + 5)
        return str(result.final_output)

    fake, proxy = served_task(calls, window)
    with fake, proxy() as served:
        check(fake, served, asyncio.run(run(served.url)), calls, stream)


@pytest.mark.parametrize(("api", "stream", "window", "calls"), variants("pydantic-chat", "pydantic-responses"))
def test_pydantic_ai(api: str, stream: bool, window: int | None, calls: int) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.usage import UsageLimits

    fake, proxy = served_task(calls, window)
    with fake, proxy() as served:
        provider = OpenAIProvider(base_url=f"{served.url}/v1", api_key="sk-test")
        model = (OpenAIChatModel if api == "pydantic-chat" else OpenAIResponsesModel)(OPENAI_MODEL, provider=provider)
        agent: Agent[None, str] = Agent(model, instructions=SYSTEM, model_settings=ModelSettings(max_tokens=MAX_TOKENS))

        @agent.tool_plain
        def read(path: str) -> str:
            """Read a file of the project."""
            return file_content(path)

        async def ignore(ctx: Any, events: Any) -> None:  # streamed model calls, every event read
            async for _ in events:
                pass

        result = agent.run_sync(TASK, event_stream_handler=ignore if stream else None,
                                usage_limits=UsageLimits(request_limit=calls + 5))
        check(fake, served, str(result.output), calls, stream)
