"""ctxwin inside LangChain v1 agents: `CtxwinMiddleware` for `create_agent(model, tools, middleware=[...])`.

It takes the place of `SummarizationMiddleware` and `ContextEditingMiddleware`:

- `wrap_model_call` (and `awrap_model_call`) converts the agent's messages to ctxwin's model, syncs
  them into the engine's session (only what the log does not have yet is appended), runs
  `engine.prepare()` and hands the model the prepared messages, converted back. Messages the engine
  left as they were are handed over as the very LangChain objects the agent had. An overflow error
  from the model is answered by `engine.recover()` and a retry, a bounded number of times. The
  model's answer is logged at once, so the session has every message even if the run stops there.
- `wrap_tool_call` (and `awrap_tool_call`) applies the policy's result budget and spill to each tool
  result before it enters the agent's state: the full output goes to the session's blob store and the
  state keeps the pipeline's own capped text or preview with the handle (the same functions as the
  engine's `result_budget` and `spill` stages). Without a blob store it leaves results alone, and the
  engine applies the same stages to the view, with recall refs into the log.
- `after_agent` syncs the final state, so every message the agent produced is in the session log.
- `recall_tool(...)` (registered by the middleware with `recall=True`) is a LangChain tool over
  `engine.recall`: what a placeholder or notice points at, byte for byte.

The agent's own state is never rewritten: what leaves the window leaves only the request, and the log
keeps everything. The LangChain <-> ctxwin message conversion lives here and nowhere else
(`to_ctxwin`, `from_ctxwin`); ctxwin's evaluation uses it for its `langchain` baseline.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwin.adapters.inputs import list_of
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.errors import CtxwinError, InputError, MissingExtraError
from ctxwin.messages import Block, Image, Message, Role, Text, Thinking, ToolCall, ToolResult
from ctxwin.pipeline.budget import cap_text, result_cap
from ctxwin.pipeline.spill import spilled_text

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langchain.agents.middleware.types import ExtendedModelResponse
    from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.tools import StructuredTool, ToolException
    from langchain_core.utils.function_calling import convert_to_openai_tool
except ImportError as error:  # pragma: no cover - the extra is installed in the dev environment
    raise MissingExtraError(f"ctxwin.adapters.langchain needs LangChain v1 ({error.name} is missing)",
                            "pip install 'ctxwin[langchain]'") from None

NS = "langchain"
"""Key under which a block keeps the LangChain content part it was read from (written back as it was)."""
DEFAULT_THREAD = "default"
"""The conversation an engine factory is asked for when the run has no `thread_id`."""
RECALL_TOOL_NAME = "ctxwin_recall"
RECALL_DESCRIPTION = """Get back, byte for byte, content that was taken out of your context to save room.

When an old tool output, a long result or an earlier part of the conversation no longer fits, it is
replaced by a short placeholder or notice that names a reference: `entry:<id>` (a whole message as it
was logged), `entry:<id>#<call id>` (one tool result, or the input of a cleared tool call) or
`blob:<hash>` (a spilled output). Placeholders may phrase this as recall("<ref>"): call this tool with
that ref. Nothing is ever deleted, so every ref keeps working for the whole session.

Long content comes back in pages: pass `offset` (characters already read) and `limit` (characters
wanted), and continue from offset + limit. Without a limit you get everything from the offset on."""

_CHAT_ROLES: dict[str, Role] = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
                                 "system": "system", "developer": "system"}

EngineSource = ContextEngine | Callable[[str], ContextEngine]
"""An engine for every conversation, or a factory called once per LangGraph `thread_id`."""


# --------------------------------------------------------------------------------------------------
# LangChain messages <-> ctxwin messages


def to_ctxwin(messages: Iterable[BaseMessage]) -> list[Message]:
    """LangChain messages as canonical messages. Each run of consecutive `ToolMessage`s becomes one
    `tool` message (one `ToolResult` each), as ctxwin keeps the results of one turn. Content parts
    the canonical model has no block for are kept verbatim in the block's `extra` and written back
    by `from_ctxwin`; the message's own id is kept in `meta`."""
    return [message for message, _ in _convert(messages)]


def from_ctxwin(messages: Iterable[Message], originals: Mapping[str, Sequence[Sequence[BaseMessage]]] | None = None,
                built: dict[str, list[BaseMessage]] | None = None) -> list[BaseMessage]:
    """Canonical messages as LangChain messages. A message whose content key is in `originals` is
    given back as those original objects (ids, metadata, usage and all; the n-th message of a content
    gets the n-th original of it); others are built anew, or taken from `built` (content key -> what
    an earlier call built for it; kept to what this call used)."""
    out: list[BaseMessage] = []
    seen: dict[str, int] = {}
    used: dict[str, list[BaseMessage]] = {}
    for message in messages:
        key = message.content_key if originals or built is not None else ""
        kept = originals.get(key) if originals else None
        if kept:
            n = seen.get(key, 0)
            seen[key] = n + 1
            out.extend(kept[min(n, len(kept) - 1)])
            continue
        made = built.get(key) if built is not None else None
        if made is None:
            made = _to_langchain(message)
        used[key] = made
        out.extend(made)
    if built is not None:
        built.clear()
        built.update(used)
    return out


def originals_of(messages: Sequence[BaseMessage], conversions: Conversions | None = None,
                 ) -> tuple[list[Message], dict[str, list[list[BaseMessage]]]]:
    """(canonical messages, content key -> the LangChain messages each came from, in order). With
    `conversions`, what an earlier call converted (the same objects, as an agent's state keeps them)
    is not converted again."""
    canonical: list[Message] = []
    by_key: dict[str, list[list[BaseMessage]]] = {}
    pairs = conversions.convert(messages) if conversions is not None else _convert(messages)
    for message, sources in pairs:
        canonical.append(message)
        by_key.setdefault(message.content_key, []).append(sources)
    return canonical, by_key


@dataclass
class Conversions:
    """One conversation's conversions, kept between calls. An agent resends its whole state on every
    model call, as the same message objects plus new ones at the end: the longest prefix of the very
    same objects is taken as converted before, and only what follows is converted. Messages are taken
    as immutable, as LangGraph's reducer treats them (a middleware that edits a message in place must
    replace it instead). `built` keeps what `from_ctxwin` built for the engine's own renderings."""

    objects: list[BaseMessage] = field(default_factory=list)
    groups: list[tuple[int, Message, list[BaseMessage]]] = field(default_factory=list)
    """(end position in `objects`, canonical message, the LangChain messages it came from)."""
    built: dict[str, list[BaseMessage]] = field(default_factory=dict)

    def convert(self, messages: Sequence[BaseMessage]) -> list[tuple[Message, list[BaseMessage]]]:
        shared = 0
        for old, new in zip(self.objects, messages, strict=False):
            if old is not new:
                break
            shared += 1
        keep = 0
        while keep < len(self.groups) and self.groups[keep][0] <= shared:
            keep += 1
        if keep and shared < len(messages) and isinstance(messages[shared], ToolMessage) \
                and isinstance(self.groups[keep - 1][2][0], ToolMessage):
            keep -= 1  # a run of tool messages that goes on: convert it whole again
        start = self.groups[keep - 1][0] if keep else 0
        groups = self.groups[:keep]
        end = start
        for message, sources in _convert(messages[start:]):
            end += len(sources)
            groups.append((end, message, sources))
        self.objects, self.groups = list(messages), groups
        return [(message, sources) for _, message, sources in groups]


def _convert(messages: Iterable[BaseMessage]) -> list[tuple[Message, list[BaseMessage]]]:
    out: list[tuple[Message, list[BaseMessage]]] = []
    results: list[ToolMessage] = []
    for message in list_of(messages, BaseMessage, "the LangChain history",
                           "pass LangChain messages (HumanMessage, AIMessage, ToolMessage, ...)"):
        if isinstance(message, ToolMessage):
            results.append(message)
            continue
        if results:
            out.append((Message("tool", tuple(_tool_result(m) for m in results)), list(results)))
            results = []
        out.append((_message(message), [message]))
    if results:
        out.append((Message("tool", tuple(_tool_result(m) for m in results)), list(results)))
    return out


def _message(message: BaseMessage) -> Message:
    meta = {NS: {"id": message.id}} if message.id else {}
    if isinstance(message, AIMessage):
        blocks = _blocks(message.content, assistant=True)
        calls = tuple(ToolCall(str(call.get("id") or ""), call["name"], dict(call.get("args") or {}))
                      for call in message.tool_calls)
        return Message("assistant", (*blocks, *calls), meta=meta)
    if isinstance(message, SystemMessage):
        return Message("system", _blocks(message.content), meta=meta)
    if isinstance(message, HumanMessage) or message.type in ("human", "user"):
        return Message("user", _blocks(message.content), meta=meta)
    if isinstance(message, ChatMessage) and message.role in _CHAT_ROLES:  # a generic message with a known role
        role = _CHAT_ROLES[message.role]
        return Message(role, _blocks(message.content, assistant=role == "assistant"), meta=meta)
    raise InputError(f"a LangChain {type(message).__name__} (type {message.type!r}) has no ctxwin role",
                     "pass system, human, AI and tool messages (convert other kinds before the model call)")


def _tool_result(message: ToolMessage) -> ToolResult:
    parts = tuple(b for b in _blocks(message.content) if isinstance(b, Text | Image))
    return ToolResult(message.tool_call_id, parts, message.status == "error", message.name)


def _blocks(content: str | list[Any], *, assistant: bool = False) -> tuple[Block, ...]:
    if isinstance(content, str):
        return (Text(content),) if content else ()
    out: list[Block] = []
    for part in content:
        block = _block(part, assistant)
        if block is not None:
            out.append(block)
    return tuple(out)


def _block(part: Any, assistant: bool) -> Block | None:
    if isinstance(part, str):
        return Text(part) if part else None
    if not isinstance(part, Mapping):
        return Text(str(part))
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return Text(part["text"], {NS: dict(part)} if part.keys() - {"type", "text"} else {})
    if assistant and kind in ("tool_use", "tool_call", "function_call"):
        return None  # the same call is in `tool_calls`, which is what ctxwin reads
    if assistant and kind == "thinking" and isinstance(part.get("thinking"), str):
        return Thinking(part["thinking"], part.get("signature"), extra={NS: dict(part)})
    if assistant and kind == "reasoning" and isinstance(part.get("reasoning"), str):
        return Thinking(part["reasoning"], extra={NS: dict(part)})
    if kind == "image_url":
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, Mapping) else url
        return Image(url=str(url or ""), extra={NS: dict(part)})
    if kind == "image":
        data = part.get("base64") or part.get("data")
        return Image(part.get("mime_type"), data, None if data else part.get("url"), extra={NS: dict(part)})
    # Anything else (audio, files, provider-specific parts) is counted as its JSON and sent as it was.
    return Text(json.dumps(part, ensure_ascii=False, sort_keys=True, default=str), {NS: dict(part)})


def _to_langchain(message: Message) -> list[BaseMessage]:
    if message.role == "tool":
        return [ToolMessage(content=_content(r.content), tool_call_id=r.call_id, name=r.name,
                            status="error" if r.is_error else "success")
                for r in message.tool_results]
    content = _content([b for b in message.blocks if not isinstance(b, ToolCall | ToolResult)])
    if message.role == "assistant":
        calls = [{"name": c.name, "args": c.arguments if isinstance(c.arguments, dict) else {"input": c.arguments},
                  "id": c.id, "type": "tool_call"} for c in message.tool_calls]
        return [AIMessage(content=content, tool_calls=calls)]
    if message.role == "system":
        return [SystemMessage(content=content)]
    return [HumanMessage(content=content)]


def _content(blocks: Sequence[Block]) -> str | list[str | dict[str, Any]]:
    if not blocks:
        return ""
    if len(blocks) == 1 and isinstance(blocks[0], Text) and not blocks[0].extra:
        return blocks[0].text
    parts: list[str | dict[str, Any]] = []
    for block in blocks:
        original = block.extra.get(NS) if block.extra else None
        if isinstance(original, Mapping) and _unchanged(block, original):
            parts.append(dict(original))
        elif isinstance(block, Text):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, Thinking):
            parts.append({"type": "thinking", "thinking": block.thinking,
                          **({"signature": block.signature} if block.signature else {})})
        elif isinstance(block, Image):
            url = block.url or f"data:{block.media_type};base64,{block.data}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _unchanged(block: Block, original: Mapping[str, Any]) -> bool:
    """Whether a stage left the block as it was read (a masked text part must not get its old part back)."""
    if isinstance(block, Text):
        return original.get("text") == block.text or (
            original.get("type") != "text" and block.text == json.dumps(original, ensure_ascii=False,
                                                                         sort_keys=True, default=str))
    return True


# --------------------------------------------------------------------------------------------------
# The middleware


class CtxwinMiddleware(AgentMiddleware):
    """ctxwin as LangChain v1 agent middleware; replaces `SummarizationMiddleware` and
    `ContextEditingMiddleware` in `create_agent(model, tools, middleware=[CtxwinMiddleware(engine)])`.

    `engine`: a `ContextEngine` (one conversation), or a factory called with the LangGraph
    `thread_id` (one engine per conversation, kept for the middleware's life); None gives an
    in-memory engine per conversation, built at its first model call from what the chat model says
    of itself (`chat_model_limits`: its model name, its window from its profile, its `max_tokens`)
    and `engine_options` (`policy`, `session`, ...; any of `model`, `window`, `max_output` given
    there wins over the chat model's).
    `recall`: also give the agent the `ctxwin_recall` tool. `spill_tool_results`: cap and spill tool
    results in `wrap_tool_call` (when the session has a blob store).

    The system prompt: when the engine has one of its own (its `system`, or bootstrap files), the
    model gets the engine's; otherwise the agent's is sent as it is and counted against the budget
    as overhead, as are the agent's tool schemas unless the engine has its own.
    """

    def __init__(self, engine: EngineSource | None = None, *, recall: bool = False,
                 spill_tool_results: bool = True, **engine_options: Any) -> None:
        super().__init__()
        if engine is not None and engine_options:
            raise InputError("give an engine or engine options, not both",
                             "put model, policy, window ... on the ContextEngine you pass")
        if engine is not None and not (isinstance(engine, ContextEngine) or callable(engine)):
            raise InputError(f"engine must be a ContextEngine or a factory of one, not {type(engine).__name__}",
                             "pass ContextEngine(...) or a function thread_id -> ContextEngine")
        self._options = engine_options
        self._source: EngineSource | None = engine
        self._engines: dict[str, ContextEngine] = {}
        self._overheads: dict[tuple[int, str, tuple[str, ...]], int] = {}
        self._conversions: dict[int, Conversions] = {}  # per engine: one conversation's state each
        self.spill_tool_results = spill_tool_results
        self.tools = [recall_tool(self.engine_for)] if recall else []

    # -- which engine ------------------------------------------------------------------------------

    def engine_for(self, thread_id: str | None = None, *, chat_model: Any = None) -> ContextEngine:
        """The engine of conversation `thread_id` (the current run's when None); one this middleware
        builds takes the limits `chat_model` states (the model call's)."""
        if isinstance(self._source, ContextEngine):
            return self._source
        thread = thread_id or current_thread()
        engine = self._engines.get(thread)
        if engine is None:
            engine = self._source(thread) if self._source is not None else ContextEngine(
                **{**chat_model_limits(chat_model), **self._options})
            if not isinstance(engine, ContextEngine):
                raise InputError(f"the engine factory returned {type(engine).__name__}, not a ContextEngine",
                                 "make the factory return ContextEngine(...)")
            self._engines[thread] = engine
        return engine

    def _conversions_for(self, engine: ContextEngine) -> Conversions:
        return self._conversions.setdefault(id(engine), Conversions())

    # -- model calls -------------------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        engine = self.engine_for(chat_model=request.model)
        prepared, originals = self._prepare(engine, request)
        while True:
            try:
                response = handler(self._request(engine, request, prepared, originals))
            except Exception as error:
                prepared = self._recover(engine, error)
                continue
            return self._answered(engine, response)

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]) -> Any:
        engine = self.engine_for(chat_model=request.model)
        prepared, originals = self._prepare(engine, request)
        while True:
            try:
                response = await handler(self._request(engine, request, prepared, originals))
            except Exception as error:
                prepared = self._recover(engine, error)
                continue
            return self._answered(engine, response)

    def _prepare(self, engine: ContextEngine,
                 request: ModelRequest) -> tuple[Prepared, dict[str, list[list[BaseMessage]]]]:
        canonical, originals = originals_of(request.messages, self._conversions_for(engine))
        engine.sync(canonical)
        engine.overhead_tokens = self._overhead(engine, request)
        return engine.prepare(max_output=requested_output(request)), originals

    def _request(self, engine: ContextEngine, request: ModelRequest, prepared: Prepared,
                 originals: Mapping[str, Sequence[Sequence[BaseMessage]]]) -> ModelRequest:
        changes: dict[str, Any] = {"messages": from_ctxwin(prepared.messages, originals,
                                                           self._conversions_for(engine).built)}
        if prepared.system:  # the engine has a system prompt of its own (its `system`, bootstrap files)
            changes["system_message"] = SystemMessage(content=prepared.system)
        return request.override(**changes)

    @staticmethod
    def _recover(engine: ContextEngine, error: Exception) -> Prepared:
        """A smaller request after an overflow (bounded: `recover` raises `ContextOverflowError` once
        its attempts are used up); any other error is the caller's and propagates unchanged."""
        if not engine.is_overflow_error(error):
            raise error
        return engine.recover(error)

    @staticmethod
    def _answered(engine: ContextEngine, response: Any) -> Any:
        result = response.model_response.result if isinstance(response, ExtendedModelResponse) else (
            response.result if isinstance(response, ModelResponse) else [response])
        messages = [m for m in result if isinstance(m, BaseMessage)]
        usage = next((m.usage_metadata for m in messages if isinstance(m, AIMessage) and m.usage_metadata), None)
        if usage and usage.get("input_tokens"):
            # LangChain's input_tokens include cache reads and writes: the whole context the model read.
            engine.record_usage({"context_tokens": usage["input_tokens"]})
        engine.append(to_ctxwin(messages))
        return response

    def _overhead(self, engine: ContextEngine, request: ModelRequest) -> int:
        """The model tokens of what the request carries that the engine does not manage: the agent's
        system prompt (unless the engine has its own, which replaces it) and tool schemas (unless the
        engine has its own). Memoized per prompt and tool set."""
        system = request.system_message.text if request.system_message is not None and not engine.system_prompt \
            else ""
        tools = () if engine.tools else tuple(sorted(_tool_name(t) for t in request.tools))
        key = (id(engine), system, tools)
        raw = self._overheads.get(key)
        if raw is None:
            schemas = [] if engine.tools else [convert_to_openai_tool(t) for t in request.tools
                                               if not isinstance(t, Mapping) or "function" in t or "name" in t]
            raw = (engine.counter.count_text(system) if system else 0) + (
                engine.counter.count_text(json.dumps(schemas, sort_keys=True)) if schemas else 0)
            self._overheads[key] = raw
        return round(raw * engine.calibrator.factor)

    # -- tool calls --------------------------------------------------------------------------------

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        return self._budgeted(self.engine_for(), handler(request))

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        return self._budgeted(self.engine_for(), await handler(request))

    def _budgeted(self, engine: ContextEngine, result: Any) -> Any:
        if not self.spill_tool_results or not isinstance(result, ToolMessage) or not _all_text(result.content):
            return result
        budgeted = budget_tool_text(engine, _text_of(result.content))
        if budgeted is None:
            return result
        text, handle, action = budgeted
        return result.model_copy(update={"content": text, "response_metadata": {
            **result.response_metadata, "ctxwin": {"action": action, "full_output": handle}}})

    # -- the end of a run --------------------------------------------------------------------------

    def after_agent(self, state: Any, runtime: Any) -> None:
        engine = self.engine_for()
        engine.sync(originals_of(state["messages"], self._conversions_for(engine))[0])

    async def aafter_agent(self, state: Any, runtime: Any) -> None:
        self.after_agent(state, runtime)


def requested_output(request: ModelRequest) -> int | None:
    """The output this model call asks for (the reserve its request is budgeted with): a max-tokens
    setting of the call, else the chat model's `max_tokens`; None when neither says (the engine's
    default)."""
    settings = request.model_settings or {}
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = settings.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return chat_model_limits(request.model).get("max_output")


def chat_model_limits(model: Any) -> dict[str, Any]:
    """What a LangChain chat model says about itself, as `ContextEngine` options: `model` (its
    `model_name` or `model`), `window` (its profile's `max_input_tokens`, when it has a profile) and
    `max_output` (its `max_tokens`). What it does not say is left out (the registry decides)."""
    if model is None:
        return {}
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    profile = getattr(model, "profile", None)
    window = profile.get("max_input_tokens") if isinstance(profile, Mapping) else None
    max_tokens = getattr(model, "max_tokens", None)
    out: dict[str, Any] = {}
    if isinstance(name, str) and name:
        out["model"] = name
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        out["window"] = window
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
        out["max_output"] = max_tokens
    return out


def budget_tool_text(engine: ContextEngine, text: str) -> tuple[str, str, str] | None:
    """(text for the agent's state, blob handle of the full output, "spilled" | "capped") when the
    engine's policy would spill or cap `text`, else None. Uses the pipeline's own spill and result
    budget rendering, so the agent sees the same notices it would see from the engine's stages.
    Needs the session's blob store (the full output must stay reachable); without one, None."""
    blobs = engine.session.blobs
    policy = engine.policy
    if blobs is None:
        return None
    if policy.spill.enabled and len(text) > policy.spill.per_result_chars:
        handle = blobs.put(text.encode("utf-8", "surrogatepass"), media_type="text/plain",
                           origin="langchain tool result").handle
        return spilled_text(text, handle, policy.spill), handle, "spilled"
    if policy.result_budget.enabled:
        cap = result_cap(policy.result_budget, engine.window)
        if len(text) > cap:
            handle = blobs.put(text.encode("utf-8", "surrogatepass"), media_type="text/plain",
                               origin="langchain tool result").handle
            capped = cap_text(text, cap, policy.result_budget, handle)
            if capped is not None:
                return capped, handle, "capped"
    return None


def recall_tool(engines: Callable[[str | None], ContextEngine] | ContextEngine, *,
                name: str = RECALL_TOOL_NAME) -> StructuredTool:
    """A LangChain tool over `engine.recall` (the current run's engine, when given a lookup by thread)."""
    lookup = (lambda _thread: engines) if isinstance(engines, ContextEngine) else engines

    def recall(ref: str, offset: int = 0, limit: int | None = None) -> str:
        try:
            return lookup(None).recall(ref, offset, limit)
        except CtxwinError as error:
            raise ToolException(str(error)) from None

    return StructuredTool.from_function(recall, name=name, description=RECALL_DESCRIPTION,
                                        handle_tool_error=True)


def current_thread() -> str:
    """The LangGraph `thread_id` of the run this is called in, else DEFAULT_THREAD."""
    try:
        from langgraph.config import get_config

        thread = (get_config().get("configurable") or {}).get("thread_id")
    except RuntimeError:  # outside a LangGraph run
        return DEFAULT_THREAD
    return str(thread) if thread is not None else DEFAULT_THREAD


def _tool_name(tool: Any) -> str:
    if isinstance(tool, Mapping):
        function = tool.get("function")
        return str((function or {}).get("name") if isinstance(function, Mapping) else tool.get("name"))
    return str(getattr(tool, "name", tool))


def _all_text(content: str | list[Any]) -> bool:
    """Whether a tool result is text only (a result with images is left for the engine's stages)."""
    return isinstance(content, str) or all(
        isinstance(p, str) or (isinstance(p, Mapping) and p.get("type") == "text") for p in content)


def _text_of(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content
                     if isinstance(p, str) or (isinstance(p, Mapping) and p.get("type") == "text"))


__all__ = ["Conversions", "CtxwinMiddleware", "budget_tool_text", "chat_model_limits", "current_thread", "from_ctxwin",
           "originals_of", "recall_tool", "to_ctxwin"]
