"""ctxwin in PydanticAI (extra `pydantic-ai`), through its history processing and capabilities.

- `CtxwinHistory(engine)`: a history processor. `processor(messages)` and the RunContext variant
  `processor.with_context(ctx, messages)` bring the engine up to date with the history and return the
  prepared view as `ModelMessage`s (only the RunContext variant sees the run's tool definitions and
  counts them); `processor.capability()` is the capability form PydanticAI 2
  spells `ProcessHistory(fn)`. A history processor rewrites the run's history, so the view it
  returned comes back on the next call: the processor recognises its own output and logs only
  what follows it. (A new processor handed such a managed history, after a restart, cannot tell its
  summary from the conversation: the log continues on a branch, nothing lost, and the summary is
  logged as a message. `CtxwinCapability` has no such case.)
- `CtxwinCapability(engine)`: the same management as a capability that changes only what each request
  sends (`prepare_model_request`), so the run's history and `result.all_messages()` stay whole; an
  overflow error from the provider is recovered from (`engine.recover`) and the attempt retried
  (`RetryModelRequest`), bounded by the engine; the provider's usage calibrates the engine's counts.

Typical use::

    engine = ContextEngine(Session.open("runs/abc"), model="gpt-4.1")
    agent = Agent(model, tools=[...], capabilities=[CtxwinCapability(engine)])

Parts convert once, in `to_messages` / `from_messages`: a `ModelRequest` becomes a system, user or
tool message per run of its parts, a `ModelResponse` one assistant message (TextPart, ThinkingPart,
ToolCallPart as blocks). Every part is kept (its content only once, in the block, when the block
holds it exactly), so an unchanged message comes back as it was; parts ctxwin has no block for
(files, native tools, compaction parts) ride along verbatim. The conversation's system prompt parts
are joined to the engine's own (`system=`, bootstrap's workspace files): the view carries that whole
prompt at the front of its first request, the conversation's parts as they were after one part with
the engine's text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwin.errors import InputError, MissingExtraError

try:
    from pydantic_ai.capabilities import AbstractCapability, ProcessHistory
    from pydantic_ai.exceptions import RetryModelRequest
    from pydantic_ai.messages import (
        BaseToolReturnPart,
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        UserPromptPart,
    )
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import RunContext
except ImportError as error:  # pragma: no cover - the extra is part of the dev install
    raise MissingExtraError(f"ctxwin.adapters.pydantic_ai needs PydanticAI ({error.name} is missing)",
                            "pip install 'ctxwin[pydantic-ai]'") from error

from ctxwin.adapters.inputs import list_of
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.messages import Block, Message, Role, Text, Thinking, ToolCall, ToolResult, block_to_dict

ENGINE_PART = "ctxwin:engine-system"
"""The `dynamic_ref` of the system prompt parts a view adds with the engine's own text (its `system=`,
bootstrap's files). A history processor's view becomes the run's history; when such a history comes
back these parts are left out, so the engine never takes its own text for the conversation's (no
PydanticAI system prompt function has this ref, so PydanticAI leaves them as they are)."""
NS = "pydantic_ai"
"""Message meta key: the parts (and, on the first message of each ModelMessage, its fields) a
canonical message was made from."""
_ELIDED = "elided"  # which field of a kept part the block holds instead


# -- parts <-> blocks -------------------------------------------------------------------------------


def _history_of(history: Any) -> list[ModelMessage]:
    return list_of(history, (ModelRequest, ModelResponse), "the PydanticAI history",
                   "pass the agent's message history (result.all_messages()): ModelRequests and ModelResponses")


def _dump(message: ModelMessage) -> dict[str, Any]:
    return ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]


def _load(data: dict[str, Any]) -> ModelMessage:
    return ModelMessagesTypeAdapter.validate_python([data])[0]


def _text_of(part: Any) -> str:
    """What the model reads of a request part ctxwin keeps as text."""
    if hasattr(part, "model_response"):
        return str(part.model_response())
    content = getattr(part, "content", "")
    if isinstance(content, str):
        return content
    return "\n".join(c if isinstance(c, str) else f"[{getattr(c, 'kind', type(c).__name__)}]" for c in content) \
        if isinstance(content, Sequence) else str(content)


def _request_block(part: Any, kept: dict[str, Any]) -> tuple[Role, Block, dict[str, Any]]:
    """(role, block, what to keep of the part) for one request part."""
    if isinstance(part, SystemPromptPart):
        return "system", Text(part.content), _elide(kept, "content")
    if isinstance(part, UserPromptPart) and isinstance(part.content, str):
        return "user", Text(part.content), _elide(kept, "content")
    if isinstance(part, BaseToolReturnPart):
        text = part.model_response_str()
        block = ToolResult(part.tool_call_id, (Text(text),), part.outcome in ("failed", "retried"), part.tool_name)
        return "tool", block, _elide(kept, "content") if part.content == text else _whole(kept, block)
    if isinstance(part, RetryPromptPart) and part.tool_name is not None:
        block = ToolResult(part.tool_call_id, (Text(part.model_response()),), True, part.tool_name)
        return "tool", block, _whole(kept, block)
    shown = Text(_text_of(part))
    return "user", shown, _whole(kept, shown)


def _response_block(part: Any, kept: dict[str, Any]) -> tuple[Block, dict[str, Any]]:
    if isinstance(part, TextPart):
        return Text(part.content), _elide(kept, "content")
    if isinstance(part, ThinkingPart):
        return Thinking(part.content, part.signature), _elide(kept, "content")
    if isinstance(part, ToolCallPart):
        call = ToolCall(part.tool_call_id, part.tool_name, part.args_as_dict())
        return call, _elide(kept, "args") if isinstance(part.args, dict) or part.args is None else _whole(kept, call)
    text = Text(f"[{getattr(part, 'part_kind', type(part).__name__)}]")
    return text, _whole(kept, text)


def _whole(kept: dict[str, Any], block: Block) -> dict[str, Any]:
    """A part kept whole, with the block it gave: while the block is unchanged, the part goes back."""
    return {"part": kept, "block": block_to_dict(block)}


def _elide(kept: dict[str, Any], name: str) -> dict[str, Any]:
    return {"part": {k: v for k, v in kept.items() if k != name}, _ELIDED: name}


def to_messages(history: Sequence[ModelMessage]) -> list[Message]:
    """PydanticAI messages as canonical messages (see the module doc)."""
    out: list[Message] = []
    for message in _history_of(history):
        fields = _dump(message)
        dumped_parts = fields.pop("parts")
        if isinstance(message, ModelResponse):
            pairs = [_response_block(p, d) for p, d in zip(message.parts, dumped_parts, strict=True)]
            meta = {NS: {"message": fields, "parts": [k for _, k in pairs]}}
            out.append(Message("assistant", tuple(b for b, _ in pairs), meta=meta))
            continue
        runs: list[tuple[Role, list[Block], list[dict[str, Any]]]] = []
        for part, dumped in zip(message.parts, dumped_parts, strict=True):
            role, block, kept = _request_block(part, dumped)
            if runs and runs[-1][0] == role:
                runs[-1][1].append(block)
                runs[-1][2].append(kept)
            else:
                runs.append((role, [block], [kept]))
        if not runs:
            out.append(Message("user", (), meta={NS: {"message": fields, "parts": []}}))
        for n, (role, blocks, kept_parts) in enumerate(runs):
            kept_meta: dict[str, Any] = {"parts": kept_parts}
            if n == 0:
                kept_meta["message"] = fields
            out.append(Message(role, tuple(blocks), meta={NS: kept_meta}))
    return out


def _part_json(block: Block, kept: dict[str, Any] | None, role: Role) -> dict[str, Any]:
    """The part a block stands for: the kept part with what the block holds put back, or a new part
    when ctxwin changed the block (a placeholder, a truncation) or made it (a summary, a repair)."""
    if kept is not None and _fits(block, kept, role):
        part = dict(kept["part"])
        elided = kept.get(_ELIDED)
        if elided == "content" and isinstance(block, Text | Thinking) and part.get("part_kind") != "tool-return":
            part["content"] = block.text if isinstance(block, Text) else block.thinking
            return part
        if elided == "content" and isinstance(block, ToolResult):
            part["content"] = block.text
            return part
        if elided == "args" and isinstance(block, ToolCall):
            part["args"] = block.arguments
            return part
        if elided is None and kept.get("block") == block_to_dict(block):
            return part
    if isinstance(block, ToolResult):
        return {"part_kind": "tool-return", "tool_name": block.name or "", "content": block.text,
                "tool_call_id": block.call_id}
    if isinstance(block, ToolCall):
        return {"part_kind": "tool-call", "tool_name": block.name, "args": block.arguments,
                "tool_call_id": block.id}
    if isinstance(block, Thinking):
        return {"part_kind": "thinking", "content": block.thinking, "signature": block.signature}
    text = block.text if isinstance(block, Text) else ""
    kind = {"system": "system-prompt", "assistant": "text"}.get(role, "user-prompt")
    return {"part_kind": kind, "content": text}


_TEXT_KINDS = {"system": "system-prompt", "user": "user-prompt", "assistant": "text"}


def _kept_for(block: Block, index: int, kept: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The kept part of a block: the one at its position, or, for a call or a result that moved (a
    block before it was dropped), the one with its call id."""
    at = kept[index] if index < len(kept) else None
    call_id = block.call_id if isinstance(block, ToolResult) else block.id if isinstance(block, ToolCall) else None
    if call_id is None or (at is not None and at["part"].get("tool_call_id") == call_id):
        return at
    return next((k for k in kept if k["part"].get("tool_call_id") == call_id), None)


def _fits(block: Block, kept: dict[str, Any], role: Role) -> bool:
    """Whether a kept part is the one this block came from. Parts are kept by position, and a stage
    may have changed how many blocks a message has (a repair dropping an orphan result): a result or
    a call must be the same call's, a text the same kind of text."""
    part = kept["part"]
    kind = part.get("part_kind")
    if isinstance(block, ToolResult):
        return part.get("tool_call_id") == block.call_id
    if isinstance(block, ToolCall):
        return kind == "tool-call" and part.get("tool_call_id") == block.id
    if isinstance(block, Thinking):
        return kind == "thinking"
    return kept.get(_ELIDED) is None or kind == _TEXT_KINDS.get(role)


def from_messages(messages: Sequence[Message]) -> list[ModelMessage]:
    """Canonical messages as PydanticAI messages: each assistant message a ModelResponse, each run of
    other messages one ModelRequest (a new one where an original request began)."""
    out: list[ModelMessage] = []
    group: list[dict[str, Any]] | None = None  # parts of the request being filled
    fields: dict[str, Any] = {}

    def close() -> None:
        nonlocal group, fields
        if group is not None:
            out.append(_load({**fields, "kind": "request", "parts": group}))
        group, fields = None, {}

    for message in messages:
        info = raw if isinstance(raw := message.meta.get(NS), dict) else {}
        kept = raw if isinstance(raw := info.get("parts"), list) else []
        parts = [_part_json(b, _kept_for(b, i, kept), message.role) for i, b in enumerate(message.blocks)]
        if message.role == "assistant":
            close()
            out.append(_load({**info.get("message", {}), "kind": "response", "parts": parts}))
            continue
        if group is None or "message" in info:
            close()
            group, fields = [], dict(info.get("message", {}))
        group.extend(parts)
    close()
    return out


class _History:
    """`to_messages` for a history that grows between calls: the messages the new history shares with
    the previous one (the same objects with the same parts) keep their conversion. A part changed in
    place, inside a message otherwise the same, is not noticed."""

    def __init__(self) -> None:
        self._seen: list[tuple[ModelMessage, tuple[Any, ...]]] = []
        self._converted: list[list[Message]] = []

    def messages(self, history: Sequence[ModelMessage]) -> list[Message]:
        shared, limit = 0, min(len(history), len(self._seen))
        while shared < limit and history[shared] is self._seen[shared][0] \
                and tuple(history[shared].parts) == self._seen[shared][1]:
            shared += 1
        self._seen[shared:] = [(m, tuple(getattr(m, "parts", ()))) for m in history[shared:]]
        self._converted[shared:] = [to_messages([_without_engine_parts(m)]) for m in history[shared:]]
        return [message for converted in self._converted for message in converted]


# -- applying the engine ----------------------------------------------------------------------------


def _overhead(engine: ContextEngine, instructions: str | None, tools: Sequence[Any]) -> int:
    """The instructions and tool definitions each request carries besides the history, in model tokens."""
    schemas = [{"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
               for t in tools]
    raw = (engine.counter.count_text(instructions) if instructions else 0) + (
        engine.counter.count_text(json.dumps(schemas, sort_keys=True)) if schemas else 0)
    return round(raw * engine.calibrator.factor)


def _instructions(history: Sequence[ModelMessage]) -> str | None:
    return next((m.instructions for m in reversed(history) if isinstance(m, ModelRequest) and m.instructions), None)


def _view(prepared: Prepared, history: Sequence[ModelMessage]) -> list[ModelMessage]:
    """The prepared request as PydanticAI messages, its system prompt (`prepared.system`) as system
    prompt parts at the front of the first request: the conversation's own parts as they were, with
    what the engine adds around them (its `system=` before, the workspace files bootstrap loads
    after) as parts of their own."""
    view = from_messages(prepared.messages)
    system = _system_parts(prepared.system, [p for m in history if isinstance(m, ModelRequest) for p in m.parts
                                              if isinstance(p, SystemPromptPart) and p.dynamic_ref != ENGINE_PART])
    if system and view and isinstance(view[0], ModelRequest):
        view[0].parts = [*system, *view[0].parts]
    elif system:
        view.insert(0, ModelRequest(parts=system))
    return view


def _without_engine_parts(message: ModelMessage) -> ModelMessage:
    """`message` without the parts a view added with the engine's own text (`ENGINE_PART`)."""
    if not isinstance(message, ModelRequest) or not any(
            isinstance(p, SystemPromptPart) and p.dynamic_ref == ENGINE_PART for p in message.parts):
        return message
    return replace(message, parts=[p for p in message.parts
                                   if not (isinstance(p, SystemPromptPart) and p.dynamic_ref == ENGINE_PART)])


def _system_parts(system: str, parts: list[SystemPromptPart]) -> list[SystemPromptPart]:
    """`system` as parts whose texts, joined by blank lines as the engine joins its prompt, give it
    back: the history's `parts` kept where the prompt holds them, the engine's text before and after
    them as a part each; the whole text as one part when the history's are not in it."""
    own = "\n\n".join(p.content for p in parts if p.content)
    at = system.find(own) if own else -1
    before, after = (system[:at], system[at + len(own):]) if at >= 0 else ("", "")
    if at < 0 or (before and not before.endswith("\n\n")) or (after and not after.startswith("\n\n")):
        return [SystemPromptPart(system, dynamic_ref=ENGINE_PART)] if system else []
    return [*([SystemPromptPart(before[:-2], dynamic_ref=ENGINE_PART)] if before else []), *parts,
            *([SystemPromptPart(after[2:], dynamic_ref=ENGINE_PART)] if after else [])]


@dataclass
class CtxwinHistory:
    """A history processor applying `engine` (see the module doc). `last` is the last prepared request."""

    engine: ContextEngine
    last: Prepared | None = None
    _sent: list[ModelMessage] = field(default_factory=list, repr=False)
    _history: _History = field(default_factory=_History, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.engine, ContextEngine):
            raise InputError(f"CtxwinHistory takes a ContextEngine, not {type(self.engine).__name__}",
                             "pass the engine whose session the agent's history goes to")

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        return self.process(messages)

    def with_context(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """The RunContext form: the run's tool definitions are counted against the budget too, and
        the output its settings ask for (`max_tokens`) is reserved."""
        return self.process(messages, tools=_run_tools(ctx), max_output=requested_output(ctx.model_settings))

    def capability(self) -> ProcessHistory[Any]:
        """`Agent(capabilities=[processor.capability()])`: this processor as a capability that sends
        its view without rewriting the run's history (`result.all_messages()` is the real history,
        as with `CtxwinCapability`; a bare `ProcessHistory(processor)` replaces the history with the
        view, as every history processor does), logs each model response as it arrives (a run's last
        answer is followed by no request, so a bare processor would only see it on the next run) and
        calibrates the engine's counts from its usage."""
        return _LoggingProcessHistory(self.with_context, history=self)

    def process(self, messages: list[ModelMessage], *, tools: Sequence[Any] = (),
                max_output: int | None = None) -> list[ModelMessage]:
        messages = _history_of(messages)
        self.log(messages)
        self.engine.overhead_tokens = _overhead(self.engine, _instructions(messages), tools)
        self.last = self.engine.prepare(max_output=max_output)
        self._sent = _view(self.last, messages)
        return list(self._sent)

    def log(self, messages: Sequence[ModelMessage]) -> None:
        """Bring the log up to date with a history without preparing a request. With a bare
        `ProcessHistory(processor)`, call it with `result.all_messages()` after the last run, so its
        answer is logged too."""
        sent = self._sent
        if sent and len(messages) >= len(sent) and all(a is b or a == b for a, b in zip(messages, sent, strict=False)):
            self.engine.append(to_messages(messages[len(sent):]))  # what followed the view we returned
        else:
            self.engine.sync(self._history.messages(messages))
        self._sent = list(messages)


@dataclass
class _LoggingProcessHistory(ProcessHistory[Any]):
    history: CtxwinHistory | None = field(default=None, repr=False)

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext
                                   ) -> ModelRequestContext:
        if self.history is None:
            return await super().before_model_request(ctx, request_context)
        # The request gets the view; the run's history (ctx.messages) stays as it is.
        request_context.messages = self.history.with_context(ctx, list(request_context.messages))
        return request_context

    async def after_model_request(self, ctx: RunContext[Any], *, request_context: ModelRequestContext,
                                  response: ModelResponse) -> ModelResponse:
        if self.history is not None:
            _record_usage(self.history.engine, response)
            self.history.log([*self.history._sent, response])
        return response


def _record_usage(engine: ContextEngine, response: ModelResponse) -> None:
    if response.usage.input_tokens:  # PydanticAI's input tokens include cache reads and writes
        engine.record_usage({"context_tokens": response.usage.input_tokens})


def requested_output(settings: Any) -> int | None:
    """The output a request asks for (its settings' `max_tokens`), the reserve it is budgeted with;
    None: the engine's default."""
    value = settings.get("max_tokens") if isinstance(settings, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _run_tools(ctx: RunContext[Any]) -> list[Any]:
    manager = getattr(ctx, "tool_manager", None)
    try:
        return list(manager.tool_defs) if manager is not None else []
    except ValueError:  # not prepared for this step yet
        return []


@dataclass
class CtxwinCapability(AbstractCapability[Any]):
    """The engine as a capability: each attempt sends the prepared view (the run's history is left
    whole); overflow errors are recovered from and the attempt retried. `last` is the last prepared
    request."""

    engine: ContextEngine
    last: Prepared | None = None
    _history: _History = field(default_factory=_History, repr=False)
    _request_history: list[ModelMessage] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.engine, ContextEngine):
            raise InputError(f"CtxwinCapability takes a ContextEngine, not {type(self.engine).__name__}",
                             "pass the engine whose session the agent's history goes to")

    async def prepare_model_request(self, ctx: RunContext[Any],
                                    request_context: ModelRequestContext) -> ModelRequestContext:
        history = list(request_context.messages)
        self._request_history = history
        self.engine.sync(self._history.messages(history))
        parameters = request_context.model_request_parameters
        tools = [*getattr(parameters, "function_tools", ()), *getattr(parameters, "output_tools", ())]
        self.engine.overhead_tokens = _overhead(self.engine, _instructions(history), tools)
        self.last = self.engine.prepare(max_output=requested_output(request_context.model_settings))
        request_context.messages = _view(self.last, history)
        return request_context

    async def on_model_request_error(self, ctx: RunContext[Any], *, request_context: ModelRequestContext,
                                     error: Exception) -> ModelResponse:
        if not self.engine.is_overflow_error(error):
            raise error
        self.engine.recover(error)  # raises ContextOverflowError once its bounded attempts are spent
        raise RetryModelRequest()

    async def after_model_request(self, ctx: RunContext[Any], *, request_context: ModelRequestContext,
                                  response: ModelResponse) -> ModelResponse:
        _record_usage(self.engine, response)
        # logged now: a run's last answer is followed by no request that would bring it
        self.engine.sync(self._history.messages([*self._request_history, response]))
        return response

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds an engine: not spec-serializable


__all__ = ["NS", "CtxwinCapability", "CtxwinHistory", "from_messages", "to_messages"]
