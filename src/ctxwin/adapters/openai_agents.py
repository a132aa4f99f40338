"""ctxwin in the OpenAI Agents SDK (extra `openai-agents`), through the SDK's own extension points.

- `CtxwinSession`: the SDK's `Session` protocol on a ctxwin session log. Every item the runner saves
  is logged as a canonical message (the items it came from kept verbatim where converting back would
  not give them byte for byte), so `get_items` returns exactly what was added. `pop_item` and
  `clear_session` delete nothing: the session continues on a new branch of the log, with an entry
  saying what happened, and the removed items stay in the log.
- `CtxwinInputFilter`: a `RunConfig(call_model_input_filter=...)` that brings the engine up to date
  with the runner's input, runs `engine.prepare()` and returns the managed input (the agent's
  instructions kept, and counted against the budget with everything else the request carries: the
  tools, the handoffs, the output schema).
- `CtxwinModel`: wraps the agent's `Model`. It counts what the runner really hands the model (MCP
  servers' tools included, which the filter cannot see) and prepares again when that differs from
  what the filter assumed; an overflow error from the provider is recovered from (`engine.recover`)
  and the smaller request retried, bounded; the provider's usage calibrates the engine's counts.

Typical use (both halves: the filter manages what is sent, `session.wrap(model)` recovers when the
provider refuses a request as too long; a filter whose requests never pass through a wrapped model
warns once, at its second call, that overflow errors will reach the caller)::

    session = CtxwinSession.open("runs/abc", model="gpt-4.1")
    agent = Agent(name="a", instructions="...", tools=[...], model=session.wrap(model))
    await Runner.run(agent, "hi", session=session, run_config=RunConfig(call_model_input_filter=session.input_filter))

The runner sends its whole history on every call; the filter matches it against the log by content
(`engine.sync`), so only what is new is appended, and a history the caller rewrote continues on a
branch (one case of that: items saved before the caller switched to
`RunConfig(reasoning_item_id_policy="omit")` are replayed without their reasoning ids, so the first
call after the switch branches once; nothing is lost). Items are converted once, in `items_to_messages` /
`messages_to_items`. The engine's writes are short synchronous appends made on the event loop's
thread, so two of them never overlap.
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import json
import warnings
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from ctxwin.errors import InputError, MissingExtraError

try:
    from agents.agent_output import AgentOutputSchema, AgentOutputSchemaBase
    from agents.handoffs import Handoff, handoff
    from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
    from agents.memory.session_settings import SessionSettings
    from agents.model_settings import ModelSettings
    from agents.models.interface import Model, ModelTracing
    from agents.models.openai_responses import Converter
    from agents.run_config import CallModelData, ModelInputData
    from agents.tool import Tool
except ImportError as error:  # pragma: no cover - the extra is part of the dev install
    raise MissingExtraError(f"ctxwin.adapters.openai_agents needs the OpenAI Agents SDK ({error.name} is missing)",
                            "pip install 'ctxwin[openai-agents]'") from error

from ctxwin.adapters.inputs import list_of
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.messages import Message, ToolResult, from_openai_responses, to_openai_responses
from ctxwin.store import Session
from ctxwin.store.entries import CustomEntry, MessageEntry, parse
from ctxwin.store.jsonl import Durability

ITEMS_META = "openai_agents"
"""Message meta key: the SDK items a message was made from, kept when converting the message back
would not give them verbatim (a user message with string content, say)."""
POP_ENTRY = "openai_agents_pop"
CLEAR_ENTRY = "openai_agents_clear"
"""Custom log entries recording `pop_item` / `clear_session` (the log keeps what they removed)."""

SDK_ONLY_FIELDS = ("_agents_tool_description", "_agents_tool_title", "created_by")
"""Item fields the SDK saves with a session's items but strips before it replays them as model input
(`agents.run_internal.items.strip_internal_input_item_metadata`): kept with the items, left out of
the messages, so the history the runner resends matches the one the session logged."""
_CALLS = frozenset({"function_call", "custom_tool_call", "reasoning"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


# -- items <-> canonical messages -------------------------------------------------------------------


def plain_item(item: Any) -> dict[str, Any]:
    """One input item as plain JSON (the SDK's items are TypedDicts, or pydantic models from a
    response); refused with a clear error when it is neither."""
    if hasattr(item, "model_dump"):
        item = item.model_dump(mode="json", exclude_unset=True)
    if not isinstance(item, Mapping):
        raise InputError(f"a session item is a Responses input item (a dict), not {type(item).__name__}",
                         'pass items like {"role": "user", "content": "..."} or {"type": "function_call", ...}')
    for key in ("type", "role"):
        if not isinstance(item.get(key), str | None):
            raise InputError(f"a session item's {key} is a {type(item[key]).__name__}, not a string",
                             'pass items like {"role": "user", "content": "..."} or {"type": "function_call", ...}')
    try:
        return json.loads(json.dumps(item, ensure_ascii=False))
    except (TypeError, ValueError) as error:
        raise InputError(f"a session item is not JSON: {error}",
                         "pass Responses input items made of JSON values (str, numbers, lists, dicts)") from None


def _side(item: Mapping[str, Any]) -> str:
    """Which canonical message an item joins: the model's side of a turn ("assistant": its messages,
    reasoning and calls), the tool results ("tool"), or a message of its own ("own"), the grouping
    `from_openai_responses` makes."""
    kind, role = item.get("type"), item.get("role")
    if kind in (None, "message") and role is not None:
        return "assistant" if role == "assistant" and item.get("content") not in (None, "", []) else "own"
    if kind in _CALLS or (isinstance(kind, str) and kind.endswith("_call")):
        return "assistant"
    return "tool" if kind in _OUTPUTS else "own"


def _groups(items: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    groups: list[list[dict[str, Any]]] = []
    last = "own"
    for item in items:
        side = _side(item)
        if side != "own" and side == last and groups:
            groups[-1].append(item)
        else:
            groups.append([item])
        last = side
    return groups


def items_to_messages(items: Iterable[Any], calls: Mapping[str, str] | None = None) -> list[Message]:
    """Responses input items as canonical messages, one per turn side (what `from_openai_responses`
    gives for the whole list), each remembering the items it came from when they would not convert
    back verbatim. Tool results carry their tool's name when the call is in `items` or in `calls`
    (call id -> tool name, of the history before them)."""
    return [message for message, _ in _convert(items, calls)]


def _convert(items: Iterable[Any], calls: Mapping[str, str] | None) -> list[tuple[Message, int]]:
    """Each message with how many of the items it was made from."""
    out: list[tuple[Message, int]] = []
    names: dict[str, str] = dict(calls or {})
    listed = list_of(items, object, "the session's items", "pass a list of Responses input items")
    for group in _groups([plain_item(i) for i in listed]):
        try:
            converted = from_openai_responses([{k: v for k, v in i.items() if k not in SDK_ONLY_FIELDS} for i in group])
        except ValueError as error:
            raise InputError(f"an item the Responses API would not take: {error}",
                             "pass input items as the Agents SDK produces them") from None
        for n, message in enumerate(converted):
            for call in message.tool_calls:
                names[call.id] = call.name
            if message.role == "tool":
                message = message.replace(blocks=tuple(
                    dataclasses.replace(b, name=names.get(b.call_id)) if isinstance(b, ToolResult) and b.name is None
                    else b for b in message.blocks))
            own = group if n == 0 else []
            if to_openai_responses([message]) != own:
                message = message.replace(meta={**message.meta, ITEMS_META: {"items": copy.deepcopy(own)}})
            out.append((message, len(own)))
    return out


class _ItemHistory:
    """`items_to_messages` for a history resent on every call: the front the new list shares with the
    previous one keeps its messages, and only what follows is converted (the runner's input grows by
    a turn per call; converting it whole each time would cost the whole session per call)."""

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._messages: list[Message] = []
        self._ends: list[int] = []  # for each message, the index just past its items

    def messages(self, items: list[Any]) -> list[Message]:
        shared, limit = 0, min(len(items), len(self._items))
        while shared < limit and items[shared] == self._items[shared]:
            shared += 1
        keep = bisect.bisect_right(self._ends, shared)
        if keep and self._ends[keep - 1] == shared and shared < len(items):
            keep -= 1  # the items after it may continue it
        start = self._ends[keep - 1] if keep else 0
        calls = {call.id: call.name for message in self._messages[:keep] for call in message.tool_calls}
        fresh = _convert(items[start:], calls)
        self._messages[keep:] = [message for message, _ in fresh]
        ends, end = [], start
        for _, count in fresh:
            end += count
            ends.append(end)
        self._ends[keep:] = ends
        self._items = list(items)
        return list(self._messages)


def message_items(message: Message) -> list[dict[str, Any]]:
    """The SDK items one logged message stands for: the verbatim ones when kept, else converted."""
    kept = message.meta.get(ITEMS_META)
    if isinstance(kept, Mapping) and isinstance(kept.get("items"), list):
        return copy.deepcopy(kept["items"])
    return to_openai_responses([message])


def messages_to_items(messages: Iterable[Message]) -> list[dict[str, Any]]:
    return [item for message in messages for item in message_items(message)]


# -- the session ------------------------------------------------------------------------------------


class CtxwinSession:
    """The Agents SDK `Session` protocol on a ctxwin engine's session log (`engine.session`). The
    log is the truth: reopening the folder gives the same items. `input_filter` and `wrap(model)`
    give the filter and the model wrapper that manage the context from the same engine."""

    session_settings: SessionSettings | None

    def __init__(self, engine: ContextEngine, *, session_settings: SessionSettings | None = None) -> None:
        if not isinstance(engine, ContextEngine):
            raise InputError(f"CtxwinSession takes a ContextEngine, not {type(engine).__name__}",
                             'use CtxwinSession.open("runs/abc", model=...) or CtxwinSession(ContextEngine(...))')
        self.engine = engine
        self.session_settings = session_settings
        self._input_filter: CtxwinInputFilter | None = None
        # The current branch as last read: entry id -> position on the path, the path's ids, and its
        # messages as (position, entry id, message, the items it stands for).
        self._positions: dict[str, int] = {}
        self._path_ids: list[str] = []
        self._mirror: list[tuple[int, str, Message, list[dict[str, Any]]]] = []

    @classmethod
    def open(cls, path: str | Path, *, durability: Durability = "fsync",
             session_settings: SessionSettings | None = None, **engine_options: Any) -> CtxwinSession:
        """The session in folder `path` (a JSONL session log with its blobs, created if missing; see
        `ctxwin.Session.open` for `durability`), with an engine built from `engine_options`
        (`model`, `policy`, `window`, ...)."""
        return cls(ContextEngine(Session.open(path, durability=durability), **engine_options),
                   session_settings=session_settings)

    @property
    def session_id(self) -> str:
        return self.engine.session.session_id

    @property
    def input_filter(self) -> CtxwinInputFilter:
        """The `call_model_input_filter` for this session's engine."""
        if self._input_filter is None:
            self._input_filter = CtxwinInputFilter(self.engine)
        return self._input_filter

    def wrap(self, model: Model) -> CtxwinModel:
        """`model`, recovering from overflow errors through this session's engine."""
        return CtxwinModel(model, self.input_filter)

    def close(self) -> None:
        self.engine.session.close()

    def __enter__(self) -> CtxwinSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The protocol.

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InputError(f"limit is a number of items, 0 or more, or None (got {limit!r})",
                             "pass limit=None for every item, or the number of latest items wanted")
        self._branch()
        items = [item for _, _, _, kept in self._mirror for item in kept]
        chosen = items if limit is None else (items[-limit:] if limit else [])
        # the kept items are plain JSON of the SDK's input items (TypedDicts, so dicts at run time)
        return cast(list[TResponseInputItem], copy.deepcopy(chosen))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if isinstance(items, Mapping) or not isinstance(items, Iterable):
            raise InputError(f"add_items takes a list of items, not {type(items).__name__}",
                             "wrap a single item in a list")
        new = [plain_item(i) for i in items]
        if not new:
            return
        branch = self._branch()
        if not branch or branch[-1][1].role not in ("assistant", "tool"):
            self.engine.append(items_to_messages(new, _calls(branch)))
            return
        # The new items may continue the last message (more of the model's turn, more results):
        # converted together they make one message, which replaces it on a new branch.
        last_id, last = branch[-1]
        combined = items_to_messages(self._items(last_id) + new, _calls(branch))
        if combined[0].content_key == last.content_key:
            self.engine.append(combined[1:])
        else:
            self.engine.sync([m for _, m in branch[:-1]] + combined)

    async def pop_item(self) -> TResponseInputItem | None:
        branch = self._branch()
        if not branch:
            return None
        last_id, _ = branch[-1]
        items = self._items(last_id)
        if not items:  # a message that stands for no item (ctxwin never logs one, but a log may hold it)
            self.engine.sync([m for _, m in branch[:-1]])
            return await self.pop_item()
        popped = items[-1]
        self.engine.sync([m for _, m in branch[:-1]] + items_to_messages(items[:-1], _calls(branch[:-1])))
        self.engine.note(CustomEntry("custom", {"type": POP_ENTRY, "entry": last_id, "item": len(items) - 1}))
        return cast(TResponseInputItem, popped)  # plain JSON of an SDK input item (see get_items)

    async def clear_session(self) -> None:
        branch = self._branch()
        if not branch:
            return
        self.engine.sync([])
        self.engine.note(CustomEntry("custom", {"type": CLEAR_ENTRY, "entries": [e for e, _ in branch]}))

    # What the current branch holds, followed incrementally: the log's path shares its front with what
    # was read last time (a longer path, or a branch from an entry already read), so only the entries
    # after the last one both share are read.

    def _branch(self) -> list[tuple[str, Message]]:
        """The caller's messages on the current branch, in order (ctxwin's own requests left out)."""
        if self._path_ids and self.engine.session.leaf_id == self._path_ids[-1]:
            return [(entry_id, message) for _, entry_id, message, _ in self._mirror]
        path = self.engine.session.path()
        shared = len(path) - 1
        while shared >= 0 and self._positions.get(path[shared].id) != shared:
            shared -= 1
        for gone in self._path_ids[shared + 1:]:
            del self._positions[gone]
        del self._path_ids[shared + 1:]
        while self._mirror and self._mirror[-1][0] > shared:
            self._mirror.pop()
        for position in range(shared + 1, len(path)):
            entry = path[position]
            self._positions[entry.id] = position
            self._path_ids.append(entry.id)
            if entry.kind != MessageEntry.kind:
                continue
            record = parse(entry.kind, entry.payload, entry_id=entry.id)
            if isinstance(record, MessageEntry) and "ctxwin" not in record.message.meta:
                self._mirror.append((position, entry.id, record.message, message_items(record.message)))
        return [(entry_id, message) for _, entry_id, message, _ in self._mirror]

    def _items(self, entry_id: str) -> list[dict[str, Any]]:
        return copy.deepcopy(next(items for _, e, _, items in reversed(self._mirror) if e == entry_id))


def _calls(branch: Sequence[tuple[str, Message]]) -> dict[str, str]:
    return {call.id: call.name for _, message in branch for call in message.tool_calls}


# -- before each model call -------------------------------------------------------------------------


def request_extras(tools: Sequence[Any], handoffs: Sequence[Any], output_schema: AgentOutputSchemaBase | None
                   ) -> dict[str, Any]:
    """What a request carries besides its instructions and input, as the Responses API receives it
    (the SDK's own `Converter`): every tool (function, hosted, MCP servers'), the handoffs (sent as
    function tools) and the output schema (`text.format`)."""
    try:
        converted: list[Any] = list(Converter.convert_tools(list(tools), list(handoffs)).tools)
    except Exception:  # a tool the converter lays out only with the request's model (a computer tool)
        converted = [{"name": getattr(t, "name", type(t).__name__), "description": getattr(t, "description", ""),
                      "parameters": getattr(t, "params_json_schema", None)} for t in tools] + [
            {"name": h.tool_name, "description": h.tool_description, "parameters": h.input_json_schema}
            for h in handoffs]
    extras: dict[str, Any] = {"tools": converted} if converted else {}
    text_format = Converter.get_response_format(output_schema)
    if isinstance(text_format, Mapping):
        extras["text"] = dict(text_format)
    return extras


def agent_extras(agent: Any) -> dict[str, Any]:
    """`request_extras` as far as the agent itself says: its tools (MCP servers' tools are listed only
    at run time, and tools a run disables still count), handoffs and output type."""
    handoffs = [h if isinstance(h, Handoff) else handoff(h) for h in getattr(agent, "handoffs", None) or ()]
    output_type = getattr(agent, "output_type", None)
    schema = None if output_type is None or output_type is str else (
        output_type if isinstance(output_type, AgentOutputSchemaBase) else AgentOutputSchema(output_type))
    return request_extras(list(getattr(agent, "tools", None) or ()), handoffs, schema)


class CtxwinInputFilter:
    """`RunConfig(call_model_input_filter=CtxwinInputFilter(engine))`: before each model call, the
    runner's input is matched into the engine's log and replaced by the prepared request. The
    agent's instructions are kept (with any system text the engine adds after them) and, with what
    else the request carries (`request_extras`), counted against the budget. `last` is the last
    prepared request.

    The filter sees the agent, not the request: what it counts is the agent's tools, handoffs and
    output type, or what `CtxwinModel` found the last request of that agent to carry. With
    `CtxwinModel` (`settle`) the count is checked against the request itself, MCP servers' tools
    included, and the input prepared again when it was off; without it, tools only an MCP server
    lists are not counted.

    Alone (with another session, or none) the filter logs what it is shown, so a run's last answer,
    which no model call follows, reaches the log with the next run's first call; with a
    `CtxwinSession` every item is logged as the runner saves it."""

    def __init__(self, engine: ContextEngine) -> None:
        if not isinstance(engine, ContextEngine):
            raise InputError(f"CtxwinInputFilter takes a ContextEngine, not {type(engine).__name__}",
                             "pass the engine whose session the runner's history goes to")
        self.engine = engine
        self.last: Prepared | None = None
        self._instructions: str | None = None
        self._history = _ItemHistory()
        self._agent = ""
        self._extras: dict[str, int] = {}  # agent name -> tokens of the extras its last request carried
        self._sent: ModelInputData | None = None
        self._settled = False  # a CtxwinModel saw the last prepared request
        self._warned = False
        self._max_output: int | None = None  # the output the request being prepared asks for

    def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        if self._sent is not None and not self._settled and not self._warned:
            self._warned = True
            warnings.warn(UnwrappedModelWarning(
                "ctxwin: the requests this input filter prepares do not go through a CtxwinModel, so an "
                "overflow error from the provider will reach you instead of being recovered; give the agent "
                "model=session.wrap(model) (or CtxwinModel(model, input_filter))"), stacklevel=2)
        self._settled = False
        self._max_output = requested_output(getattr(data.agent, "model_settings", None))
        model_data = data.model_data
        raw = model_data.input
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw)
        self.engine.sync(self._history.messages(items))
        self._instructions = model_data.instructions
        self._agent = str(getattr(data.agent, "name", ""))
        extras = self._extras.get(self._agent)
        if extras is None:
            extras = self._extras_tokens(agent_extras(data.agent))
        self.engine.overhead_tokens = self._overhead(model_data.instructions, extras)
        return self._input(self.engine.prepare(max_output=self._max_output))

    def settle(self, instructions: str | None, input: Any, tools: Sequence[Any], output_schema: Any,
               handoffs: Sequence[Any], model_settings: ModelSettings | None = None) -> tuple[str | None, Any]:
        """The instructions and input to send with a request carrying `tools`, `output_schema` and
        `handoffs` with `model_settings` (what the runner hands the model). When the input is the one
        this filter prepared and the request carries more or less than it counted, or asks for
        another output size (the run's settings over the agent's), the engine prepares again with the
        true overhead and reserve; any other input (the filter not in the run's config) goes as it is."""
        self._settled = True
        sent = self._sent
        if sent is None or instructions != sent.instructions or input != sent.input:
            return instructions, input
        extras = self._extras_tokens(request_extras(tools, handoffs, output_schema))
        self._extras[self._agent] = extras
        overhead = self._overhead(self._instructions, extras)
        max_output = requested_output(model_settings) if model_settings is not None else self._max_output
        if overhead == self.engine.overhead_tokens and max_output == self._max_output:
            return instructions, input
        self.engine.overhead_tokens, self._max_output = overhead, max_output
        again = self._input(self.engine.prepare(max_output=max_output))
        return again.instructions, again.input

    def recover(self, error: object) -> ModelInputData | None:
        """After a failed call: the smaller input to retry with when `error` says the request did not
        fit (`engine.recover`, which raises `ContextOverflowError` once its bounded attempts are
        spent), else None."""
        if not self.engine.is_overflow_error(error):
            return None
        return self._input(self.engine.recover(error))

    def _input(self, prepared: Prepared) -> ModelInputData:
        self.last = prepared
        instructions = "\n\n".join(p for p in (self._instructions, prepared.system) if p) or None
        self._sent = ModelInputData(input=prepared.to_openai_responses()["input"], instructions=instructions)
        return ModelInputData(input=list(self._sent.input), instructions=instructions)

    def _extras_tokens(self, extras: Mapping[str, Any]) -> int:
        """`request_extras` in counter units (before calibration)."""
        return self.engine.counter.count_text(json.dumps(extras, sort_keys=True, default=str)) if extras else 0

    def _overhead(self, instructions: str | None, extras_tokens: int) -> int:
        """What the request carries besides the managed input, in model tokens: the instructions and
        the extras."""
        raw = (self.engine.counter.count_text(instructions) if instructions else 0) + extras_tokens
        return round(raw * self.engine.calibrator.factor)


def requested_output(settings: ModelSettings | None) -> int | None:
    """The output a request asks for (`ModelSettings.max_tokens`), the reserve it is budgeted with;
    None: the engine's default."""
    value = getattr(settings, "max_tokens", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class UnwrappedModelWarning(UserWarning):
    """The input filter runs without `CtxwinModel`: overflow errors are not recovered."""


# -- where the SDK surfaces the provider's errors ---------------------------------------------------


class CtxwinModel(Model):
    """The agent's model, managed: a request the filter prepared is checked against what the runner
    hands the model with it (`CtxwinInputFilter.settle`: tools, handoffs, output schema), and
    prepared again when the filter counted those wrong; when the provider refuses a request as too
    long, the engine compacts (`CtxwinInputFilter.recover`) and the smaller request is sent instead,
    a bounded number of times. The usage of each response calibrates the engine's counts."""

    def __init__(self, model: Model, input_filter: CtxwinInputFilter) -> None:
        if not isinstance(model, Model):
            raise InputError(f"CtxwinModel wraps an Agents SDK Model, not {type(model).__name__}",
                             "pass a Model instance (OpenAIResponsesModel(...), a test model, ...)")
        self.model = model
        self.input_filter = input_filter

    async def get_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                           model_settings: ModelSettings, tools: list[Tool],
                           output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
                           tracing: ModelTracing, **kwargs: Any) -> ModelResponse:
        system_instructions, input = self.input_filter.settle(system_instructions, input, tools, output_schema,
                                                              handoffs, model_settings)
        while True:
            try:
                response = await self.model.get_response(system_instructions, input, model_settings, tools,
                                                         output_schema, handoffs, tracing, **kwargs)
            except Exception as error:
                retry = self.input_filter.recover(error)
                if retry is None:
                    raise
                system_instructions, input = retry.instructions, retry.input
                continue
            self.input_filter.engine.record_usage(response.usage)
            return response

    async def stream_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                              model_settings: ModelSettings, tools: list[Tool],
                              output_schema: AgentOutputSchemaBase | None, handoffs: list[Handoff],
                              tracing: ModelTracing, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        system_instructions, input = self.input_filter.settle(system_instructions, input, tools, output_schema,
                                                              handoffs, model_settings)
        while True:
            started = False
            try:
                async for event in self.model.stream_response(system_instructions, input, model_settings, tools,
                                                              output_schema, handoffs, tracing, **kwargs):
                    started = True
                    yield event
                    usage = getattr(getattr(event, "response", None), "usage", None)
                    if getattr(event, "type", None) == "response.completed" and usage is not None:
                        self.input_filter.engine.record_usage(usage)
                return
            except Exception as error:
                retry = None if started else self.input_filter.recover(error)  # a started stream cannot be redone
                if retry is None:
                    raise
                system_instructions, input = retry.instructions, retry.input

    def get_retry_advice(self, request: Any) -> Any:
        return self.model.get_retry_advice(request)

    async def close(self) -> None:
        await self.model.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        await self.model._cleanup_on_run_end(owner)  # the runner releases run-scoped resources of its model


__all__ = ["CLEAR_ENTRY", "ITEMS_META", "POP_ENTRY", "SDK_ONLY_FIELDS", "CtxwinInputFilter", "CtxwinModel",
           "CtxwinSession", "UnwrappedModelWarning", "agent_extras", "items_to_messages", "message_items",
           "messages_to_items", "plain_item", "request_extras"]
