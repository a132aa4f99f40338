"""ctxwin in PydanticAI: the history processor (`CtxwinHistory`, plain and RunContext forms and as
`ProcessHistory`) and `CtxwinCapability`, with an `Agent` on PydanticAI's own `FunctionModel`.

The FunctionModel plays a provider: it counts every request with ctxwin's counter and refuses one over
its window with the error PydanticAI's models raise for that (`ModelContextWindowExceededError`, an
HTTP 400 `ModelHTTPError`)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import ModelContextWindowExceededError, ModelHTTPError
from pydantic_ai.messages import (
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from ctxwin import ContextEngine, Session, policies
from ctxwin.adapters.pydantic_ai import CtxwinCapability, CtxwinHistory, from_messages, to_messages
from ctxwin.errors import ContextOverflowError, InputError
from ctxwin.messages import Message, validate
from ctxwin.tokens import counter_for

WINDOW = 64_000
MAX_OUTPUT = 8_000
COUNTER = counter_for(None)
INSTRUCTIONS = "You read files and report what they define."


def overflow_error(tokens: int, window: int) -> ModelHTTPError:
    body = {"error": {"message": f"This model's maximum context length is {window} tokens. However, your "
                                 f"messages resulted in {tokens} tokens.", "type": "invalid_request_error",
                      "code": "context_length_exceeded"}}
    return ModelHTTPError.for_category(ModelContextWindowExceededError, status_code=400, model_name="provider",
                                       body=body, provider_error_code="context_length_exceeded")


def system_text(messages: list[ModelMessage]) -> str:
    """The system prompt the model receives: every system prompt part, in order."""
    return "\n\n".join(p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
                        if isinstance(p, SystemPromptPart) and p.content)


def request_tokens(messages: list[ModelMessage], info: AgentInfo) -> int:
    """A request as a provider counts it: the system prompt parts, the instructions, every other
    message, and the definitions of the function tools and the output tools."""
    tools = [{"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
             for t in [*info.function_tools, *info.output_tools]]
    return (COUNTER.count_text(system_text(messages)) + COUNTER.count_text(info.instructions or "")
            + sum(COUNTER.count_message(m) for m in to_messages(messages) if m.role != "system")
            + COUNTER.count_text(json.dumps(tools, sort_keys=True)))


def result_text(path: str) -> str:
    """A large, distinct tool result (about 5,000 tokens) with a needle only it holds."""
    lines = [f"{path}:{n}: def handler_{n}(request): return route(request, {n * 37})" for n in range(200)]
    return f"NEEDLE-{path}\n" + "\n".join(lines)


class Provider:
    """A FunctionModel over a script: each accepted request takes the next response; one over the
    window is refused without taking one. Every request is recorded as the model received it."""

    def __init__(self, plan: list[list[Any]], window: int = WINDOW, watch: Any = None) -> None:
        self.plan = list(plan)
        self.window = window
        self.watch = watch  # called on each accepted request (to read what the engine prepared for it)
        self.requests: list[list[ModelMessage]] = []
        self.accepted: list[int] = []
        self.refused: list[int] = []
        self.model = FunctionModel(self.respond)

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tokens = request_tokens(messages, info)
        if tokens > self.window:
            self.refused.append(tokens)
            raise overflow_error(tokens, self.window)
        self.requests.append(list(messages))
        self.accepted.append(tokens)
        if self.watch is not None:
            self.watch()
        return ModelResponse(parts=self.plan.pop(0), usage=RequestUsage(input_tokens=tokens, output_tokens=20))


RUNS = ((1, "Read r1/f0..f9.", 10, 2), (2, "Now r2/f0..f8.", 9, 3), (3, "And r3/f0..f6.", 7, 2))
"""(run, prompt, reads, reads per turn): 26 results of about 5K tokens."""


def conversation_plan() -> list[list[Any]]:
    plan: list[list[Any]] = []
    for run, _, calls, parallel in RUNS:
        for start in range(0, calls, parallel):
            plan.append([ToolCallPart("read_file", {"path": f"r{run}/f{n}.py"}, tool_call_id=f"call-{run}-{n}")
                         for n in range(start, min(start + parallel, calls))])
        plan.append([TextPart(f"run {run} done")])
    return plan


RESULTS = {f"call-{run}-{n}": result_text(f"r{run}/f{n}.py") for run, _, calls, _ in RUNS for n in range(calls)}


def make_agent(model: FunctionModel, capabilities: list[Any]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, instructions=INSTRUCTIONS, capabilities=capabilities)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return result_text(path)

    return agent


def run_conversation(agent: Agent[None, str]) -> list[ModelMessage]:
    history: list[ModelMessage] = []
    for run, prompt, _, _ in RUNS:
        result = agent.run_sync(prompt, message_history=history)
        assert result.output == f"run {run} done"
        history = result.all_messages()
    return history


def engine_at(path: Path) -> ContextEngine:
    return ContextEngine(Session.open(path, durability="batch"), window=WINDOW, max_output=MAX_OUTPUT)


def check_requests(provider: Provider, budgets: list[tuple[int, int]]) -> None:
    """Never over the window nor over the engine's budget, and every request valid."""
    assert provider.refused == []
    assert max(provider.accepted) <= WINDOW
    assert all(tokens <= budget for tokens, budget in budgets)
    for request in provider.requests:
        canonical = [m for m in to_messages(request) if m.role != "system"]
        assert validate(canonical, "anthropic", request=True) == []
        calls = {p.tool_call_id for m in request if isinstance(m, ModelResponse) for p in m.parts
                 if isinstance(p, ToolCallPart)}
        returns = {p.tool_call_id for m in request if isinstance(m, ModelRequest) for p in m.parts
                   if isinstance(p, ToolReturnPart)}
        assert calls == returns


def check_nothing_lost(engine: ContextEngine, provider: Provider) -> None:
    """Every result is in the log byte for byte; what the last request did not carry whole is recallable."""
    logged = {r.call_id: (e.id, r) for e in engine.session.path() if e.kind == "message"
              for r in Message.from_dict(e.payload).tool_results}
    assert {c: r.text for c, (_, r) in logged.items()} == RESULTS
    last = {p.tool_call_id: p.content for m in provider.requests[-1] if isinstance(m, ModelRequest)
            for p in m.parts if isinstance(p, ToolReturnPart)}
    evicted = [c for c in RESULTS if last.get(c) != RESULTS[c]]
    assert len(evicted) > len(RESULTS) // 2
    for call_id in evicted:
        assert engine.recall(f"entry:{logged[call_id][0]}#{call_id}") == RESULTS[call_id]
    assert {c.id for m in engine.messages for c in m.tool_calls} == set(RESULTS)
    answers = [m.text for m in engine.messages if m.role == "assistant" and m.text]
    assert answers == [f"run {run} done" for run, _, _, _ in RUNS]
    prompts = [m.text for m in engine.messages if m.role == "user" and not m.meta.get("ctxwin")]
    assert [p for p in prompts if p.startswith(("Read", "Now", "And"))] == [prompt for _, prompt, _, _ in RUNS]
    # one branch: each history was matched to the log, nothing logged twice
    on_branch = [e.id for e in engine.session.path() if e.kind == "message"]
    assert on_branch == [e.id for e in engine.session if e.kind == "message"]


def test_without_ctxwin_the_conversation_overflows_the_window() -> None:
    provider = Provider(conversation_plan())
    with pytest.raises(ModelContextWindowExceededError):
        run_conversation(make_agent(provider.model, []))
    assert provider.refused and provider.refused[0] > WINDOW
    assert sum(COUNTER.count_text(text) for text in RESULTS.values()) > 2 * WINDOW


def test_history_processor_over_several_runs(tmp_path: Path) -> None:
    """`ProcessHistory(processor)`: the processor's view replaces the run's history, and comes back."""
    engine = engine_at(tmp_path / "s")
    processor = CtxwinHistory(engine)
    budgets: list[tuple[int, int]] = []

    def watched(messages: list[ModelMessage]) -> list[ModelMessage]:
        out = processor(messages)
        assert processor.last is not None
        budgets.append((processor.last.tokens, processor.last.budget))
        return out

    provider = Provider(conversation_plan())
    history = run_conversation(make_agent(provider.model, [ProcessHistory(watched)]))
    processor.log(history)  # the last run's answer, which no request followed
    assert len(provider.requests) == len(conversation_plan())
    check_requests(provider, budgets)
    check_nothing_lost(engine, provider)
    # the processor recognised its own view each time: nothing was logged twice, no branch was made
    assert len([m for m in engine.messages if m.role == "tool"]) == sum(-(-c // p) for _, _, c, p in RUNS)
    assert isinstance(history[-1], ModelResponse)


def test_history_processor_with_run_context_as_a_capability(tmp_path: Path) -> None:
    engine = engine_at(tmp_path / "s")
    processor = CtxwinHistory(engine)
    budgets: list[tuple[int, int]] = []
    provider = Provider(conversation_plan(), watch=lambda: budgets.append((processor.last.tokens,
                                                                           processor.last.budget)))
    run_conversation(make_agent(provider.model, [processor.capability()]))
    assert len(budgets) == len(provider.requests)
    check_requests(provider, budgets)
    check_nothing_lost(engine, provider)


def test_the_processors_capability_form_keeps_the_runs_history_whole(tmp_path: Path) -> None:
    """`processor.capability()` sends the view and leaves the run's history alone: `all_messages()` is
    the real conversation (it used to be the managed view: 3 of 26 results whole, in 6 messages)."""
    engine = engine_at(tmp_path / "s")
    processor = CtxwinHistory(engine)
    budgets: list[tuple[int, int]] = []
    provider = Provider(conversation_plan(), watch=lambda: budgets.append((processor.last.tokens,
                                                                           processor.last.budget)))
    history = run_conversation(make_agent(provider.model, [processor.capability()]))
    check_requests(provider, budgets)
    check_nothing_lost(engine, provider)
    returned = {p.tool_call_id: p.content for m in history if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, ToolReturnPart)}
    assert returned == RESULTS
    assert len(history) == 2 * len(conversation_plan())  # every request and response of the three runs


def test_the_2x_spelling_of_history_processors(tmp_path: Path) -> None:
    """PydanticAI 2 has no `history_processors=` (`Agent(history_processors=[...])` is a TypeError);
    its spelling is `capabilities=[ProcessHistory(processor)]`, and the processor plugs in as it is."""
    with pytest.raises(TypeError, match="history_processors"):
        Agent(FunctionModel(lambda m, i: ModelResponse(parts=[TextPart("x")])),  # type: ignore[call-arg]
              history_processors=[CtxwinHistory(engine_at(tmp_path / "unused"))])
    engine = engine_at(tmp_path / "s")
    processor = CtxwinHistory(engine)
    provider = Provider(conversation_plan())
    history = run_conversation(make_agent(provider.model, [ProcessHistory(processor)]))
    processor.log(history)
    assert provider.refused == [] and max(provider.accepted) <= WINDOW
    check_nothing_lost(engine, provider)


def test_capability_keeps_the_runs_history_whole(tmp_path: Path) -> None:
    engine = engine_at(tmp_path / "s")
    capability = CtxwinCapability(engine)
    budgets: list[tuple[int, int]] = []
    provider = Provider(conversation_plan(), watch=lambda: budgets.append((capability.last.tokens,
                                                                           capability.last.budget)))
    history = run_conversation(make_agent(provider.model, [capability]))
    assert len(budgets) == len(provider.requests)
    check_requests(provider, budgets)
    check_nothing_lost(engine, provider)
    returned = {p.tool_call_id: p.content for m in history if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, ToolReturnPart)}
    assert returned == RESULTS  # the caller's history still has every result whole
    engine.session.close()
    reopened = engine_at(tmp_path / "s")
    assert {r.call_id: r.text for m in reopened.messages for r in m.tool_results} == RESULTS


def test_capability_recovers_from_the_providers_overflow(tmp_path: Path) -> None:
    """The engine believes in 64K; the provider's window is 12K. The refused attempt is recovered from
    and retried; the run goes on."""
    engine = engine_at(tmp_path / "s")
    plan: list[list[Any]] = [[ToolCallPart("read_file", {"path": f"f{n}.py"}, tool_call_id=f"c{n}")] for n in range(6)]
    provider = Provider([*plan, [TextPart("done")]], window=12_000)
    result = make_agent(provider.model, [CtxwinCapability(engine)]).run_sync("Read f0..f5.")
    assert result.output == "done"
    assert provider.refused, "the scenario must hit the provider's real window"
    assert max(provider.accepted) <= 12_000
    assert any(e.payload.get("type") == "recovery" for e in engine.session)


def test_capability_recovery_is_bounded(tmp_path: Path) -> None:
    engine = engine_at(tmp_path / "s")

    def always_over(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise overflow_error(90_000, 24_000)

    with pytest.raises(ContextOverflowError):
        make_agent(FunctionModel(always_over), [CtxwinCapability(engine)]).run_sync("hi")

    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("connection reset")

    with pytest.raises(RuntimeError, match="connection reset"):
        make_agent(FunctionModel(broken), [CtxwinCapability(engine)]).run_sync("hi")


ENGINE_SYSTEM = "ENGINE-SYSTEM: answer in the house style, cite paths."
AGENTS_MD = "AGENTS-MD: run the tests with make check before you answer."


@pytest.mark.parametrize("form", ["processor", "processor_capability", "capability"])
@pytest.mark.parametrize("agent_system", [None, "AGENT-SYSTEM: be brief."])
def test_the_engines_own_system_prompt_reaches_the_model(tmp_path: Path, form: str, agent_system: str | None) -> None:
    """The engine's `system=` and the workspace files bootstrap loads (AGENTS.md) are part of its
    system prompt: every request the model gets carries them, before the agent's own system prompt,
    and the engine counts what the model gets."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "AGENTS.md").write_text(AGENTS_MD)
    policy = policies.get("ctxwin")
    policy = policy.model_copy(update={"bootstrap": policy.bootstrap.model_copy(update={"enabled": True})})
    engine = ContextEngine(Session.open(tmp_path / "s", durability="batch"), window=WINDOW, max_output=MAX_OUTPUT,
                           policy=policy, system=ENGINE_SYSTEM, workspace=tmp_path / "ws")
    processor = CtxwinHistory(engine)
    plugged = {"processor": lambda: ProcessHistory(processor.with_context),
               "processor_capability": processor.capability, "capability": lambda: CtxwinCapability(engine)}[form]()
    seen: list[tuple[int, int, str]] = []  # (the provider's count, the engine's, the engine's system prompt)
    provider = Provider([[ToolCallPart("read_file", {"path": "a.py"}, tool_call_id="c1")], [TextPart("done")]],
                        watch=lambda: seen.append((provider.accepted[-1], last().tokens, last().system)))

    def last() -> Any:
        prepared = plugged.last if isinstance(plugged, CtxwinCapability) else processor.last
        assert prepared is not None
        return prepared

    agent: Agent[None, str] = Agent(provider.model, instructions=INSTRUCTIONS, capabilities=[plugged],
                                    **({"system_prompt": agent_system} if agent_system else {}))

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file of the workspace."""
        return result_text(path)

    assert agent.run_sync("Read a.py.").output == "done"
    assert len(provider.requests) == len(seen) == 2
    for request, (provider_tokens, engine_tokens, engine_system) in zip(provider.requests, seen, strict=True):
        sent = system_text(request)
        assert ENGINE_SYSTEM in sent and AGENTS_MD in sent
        assert sent == engine_system  # what the engine counted is what the model got
        assert abs(provider_tokens - engine_tokens) <= 5
        if agent_system:  # the agent's own part as it was
            assert [p for m in request if isinstance(m, ModelRequest) for p in m.parts
                    if isinstance(p, SystemPromptPart) and p.content == agent_system]


def test_a_processors_view_handed_back_does_not_double_the_engines_system_prompt(tmp_path: Path) -> None:
    """A history processor's view (with the engine's system text in it) becomes the run's history; a
    new processor (after a restart) handed that history takes only the agent's part as the
    conversation's, so the model gets the engine's text once."""
    engine = ContextEngine(Session.open(tmp_path / "s", durability="batch"), window=WINDOW, max_output=MAX_OUTPUT,
                           system=ENGINE_SYSTEM)
    provider = Provider([[TextPart("one")], [TextPart("two")]])

    def agent() -> Agent[None, str]:
        return Agent(provider.model, instructions=INSTRUCTIONS, system_prompt="AGENT-SYSTEM",
                     capabilities=[ProcessHistory(CtxwinHistory(engine).with_context)])

    history = agent().run_sync("first").all_messages()
    agent().run_sync("second", message_history=history)
    assert [system_text(r) for r in provider.requests] == [f"{ENGINE_SYSTEM}\n\nAGENT-SYSTEM"] * 2
    assert engine.system_prompt == f"{ENGINE_SYSTEM}\n\nAGENT-SYSTEM"


# -- one conversion ---------------------------------------------------------------------------------


with warnings.catch_warnings():  # deprecated in PydanticAI 2 for ToolReturnPart(outcome="retried"), still read
    warnings.simplefilter("ignore")
    RETRY = RetryPromptPart("path must be a string", tool_name="read_file", tool_call_id="c3")
HISTORY: list[ModelMessage] = [
    ModelRequest(parts=[SystemPromptPart("Be brief."), UserPromptPart("What is in a.py?")], instructions=INSTRUCTIONS),
    ModelResponse(parts=[ThinkingPart("I should read it.", signature="sig"), TextPart("Reading."),
                         ToolCallPart("read_file", {"path": "a.py"}, "c1"),
                         ToolCallPart("read_file", '{"path": "b.py"}', "c2")], model_name="m"),
    ModelRequest(parts=[ToolReturnPart("read_file", "def a(): pass", "c1"),
                        ToolReturnPart("read_file", {"defines": ["b"]}, "c2"),
                        UserPromptPart(["and then? see", ImageUrl(url="https://example.com/b.png")])]),
    ModelResponse(parts=[TextPart("a() and b()."), ToolCallPart("read_file", {"path": 3}, "c3")]),
    ModelRequest(parts=[RETRY]),
    ModelResponse(parts=[ToolCallPart("read_file", {"path": "3"}, "c4")]),
    ModelRequest(parts=[ToolReturnPart("read_file", "no such file: 3", "c4", outcome="retried")]),
    ModelResponse(parts=[TextPart("Done.")]),
]


def test_messages_round_trip_exactly() -> None:
    canonical = to_messages(HISTORY)
    assert [m.role for m in canonical] == ["system", "user", "assistant", "tool", "user", "assistant", "tool",
                                           "assistant", "tool", "assistant"]
    assert canonical[8].tool_results[0].is_error
    assert canonical[6].tool_results[0].is_error and "path must be a string" in canonical[6].tool_results[0].text
    assert [b.type for b in canonical[2].blocks] == ["thinking", "text", "tool_call", "tool_call"]
    assert canonical[3].tool_results[1].text == '{"defines":["b"]}'
    # as PydanticAI's own serialization gives it back (which turns the deprecated RetryPromptPart into
    # the ToolReturnPart(outcome="retried") that replaces it)
    reloaded = ModelMessagesTypeAdapter.validate_python(ModelMessagesTypeAdapter.dump_python(HISTORY, mode="json"))
    assert from_messages(canonical) == reloaded
    assert from_messages(canonical)[:4] == HISTORY[:4]
    # and through the log
    engine = ContextEngine(window=WINDOW, max_output=MAX_OUTPUT)
    engine.append(canonical)
    logged = [m for m in engine.messages]
    assert from_messages([canonical[0], *logged]) == reloaded


text = st.text(max_size=20)
request_parts = st.one_of(
    st.builds(UserPromptPart, text), st.builds(SystemPromptPart, text),
    st.builds(lambda c, n: ToolReturnPart("read_file", c, f"c{n}"), st.one_of(text, st.dictionaries(text, text,
                                                                                              max_size=2)),
              st.integers(0, 3)))
response_parts = st.one_of(
    st.builds(TextPart, text), st.builds(lambda t: ThinkingPart(t, signature="s"), text),
    st.builds(lambda a, n: ToolCallPart("read_file", a, f"c{n}"),
              st.one_of(st.dictionaries(text, text, max_size=2), st.just('{"path": "x"}')), st.integers(0, 3)))
histories = st.lists(st.one_of(st.builds(lambda p: ModelRequest(parts=p), st.lists(request_parts, max_size=4)),
                               st.builds(lambda p: ModelResponse(parts=p), st.lists(response_parts, max_size=4))),
                     max_size=6)


@settings(max_examples=100, deadline=None)
@given(histories)
def test_any_history_round_trips(history: list[ModelMessage]) -> None:
    assert from_messages(to_messages(history)) == history


def test_a_changed_block_becomes_a_new_part() -> None:
    canonical = to_messages(HISTORY)
    tool = canonical[3]
    masked = tool.replace(blocks=tuple(r.__class__(r.call_id, (r.content[0].__class__("[cleared]"),), r.is_error,
                                                   r.name) for r in tool.tool_results))
    rebuilt = from_messages([*canonical[:3], masked, *canonical[4:]])
    returns = [p for p in rebuilt[2].parts if isinstance(p, ToolReturnPart)]
    assert [(p.tool_call_id, p.content) for p in returns] == [("c1", "[cleared]"), ("c2", "[cleared]")]
    assert rebuilt[0] == HISTORY[0] and rebuilt[1] == HISTORY[1]


def test_a_dropped_block_does_not_shift_the_parts_of_the_others() -> None:
    """A repair that drops the first of two results leaves the second as it was."""
    canonical = to_messages(HISTORY)
    tool = canonical[3]
    rebuilt = from_messages([*canonical[:3], tool.replace(blocks=tool.blocks[1:]), *canonical[4:5]])
    returns = [p for p in rebuilt[2].parts if isinstance(p, ToolReturnPart)]
    assert [(p.tool_call_id, p.content) for p in returns] == [("c2", {"defines": ["b"]})]


def test_bad_input_is_refused_with_a_typed_error() -> None:
    with pytest.raises(InputError):
        to_messages(["hello"])  # type: ignore[list-item]
    with pytest.raises(InputError):
        CtxwinHistory("engine")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        CtxwinCapability("engine")  # type: ignore[arg-type]
