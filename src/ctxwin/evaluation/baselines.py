"""The Python ecosystem's own answers, as baselines in `ctxwin replay --compare`.

- `langchain`: LangChain v1's real middleware, run on every replayed call the way `create_agent`
  runs it: `SummarizationMiddleware.before_model` rewrites the agent's state (through LangGraph's
  `add_messages` reducer), then `ContextEditingMiddleware(edits=[ClearToolUsesEdit()])` edits the
  request in `wrap_model_call`; what reaches the handler is what the model would receive. Nothing is
  re-implemented here. Needs the `langchain` extra.
- `anthropic-edits`: Anthropic's server-side context editing `clear_tool_uses_20250919` with its
  documented defaults, a faithful pure implementation (`clear_tool_uses`).

Both are counted exactly like the presets: every replayed call goes through the same `raw` replay
(same messages, same repair of the recorded history, same clock), the baseline's request is counted
with the engine's counter and calibration plus the same fixed overhead (the harness's system prompt
and tools), priced by the same cache model, checked by the same validator, and held against the
budget of the model's real window (window minus the default reserve, as for `truncate`), so requests
over the window are counted as over budget, not hidden. A summary call LangChain makes is not
counted, as no policy's compaction call is. A call's latency is the baseline's whole step, the
conversion to and from LangChain messages and the counting included (for LangChain an upper bound of
what the middleware itself costs; `benchmarks/langchain_side_by_side.py` times it inside an agent).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from ctxwin import policies
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.engine.budget import Budget
from ctxwin.errors import InputError, MissingExtraError
from ctxwin.evaluation.replay import iter_replay
from ctxwin.messages import Message, Text, ToolResult, validate
from ctxwin.pipeline.events import Compacted, ToolUsesCleared
from ctxwin.pipeline.validate import common_prefix
from ctxwin.pipeline.view import Event, Item, keys_of, total_tokens
from ctxwin.tokens import model_info
from ctxwin.transcripts.model import Transcript

LANGCHAIN = "langchain"
ANTHROPIC_EDITS = "anthropic-edits"
NAMES = (LANGCHAIN, ANTHROPIC_EDITS)
"""The baselines `compare` runs besides the presets and `raw`/`truncate`/`masking`/`recorded`."""

# --- Anthropic `clear_tool_uses_20250919`: the documented defaults
# (https://platform.claude.com/docs/en/build-with-claude/context-editing, "Configuration options").
TRIGGER_INPUT_TOKENS = 100_000
"""`trigger`: {"type": "input_tokens", "value": 100000}: the strategy activates once the prompt exceeds it."""
KEEP_TOOL_USES = 3
"""`keep`: {"type": "tool_uses", "value": 3}: the most recent tool use/result pairs left as they are."""
CLEARED_PLACEHOLDER = "[cleared]"
"""The text a cleared tool result is replaced by. Anthropic documents only that a placeholder tells
Claude the result was removed, not its wording; this is the text of LangChain's `ClearToolUsesEdit`,
which states that it mirrors `clear_tool_uses_20250919`."""

# --- LangChain's configuration (everything else is the middleware's own default)
LANGCHAIN_TRIGGER: tuple[Literal["fraction"], float] = ("fraction", 0.8)
"""`SummarizationMiddleware(trigger=...)` has no default (None never summarizes); 80 % of the model's
window is the example its docstring gives."""
SUMMARY_TOKENS = 2_000
"""Size of the summary the fake summary model returns, whatever it is asked (about 8,000 characters)."""
SUMMARY_WORDS = ("the", "user", "asked", "for", "changes", "to", "project", "files;", "the", "assistant", "read,",
                 "edited", "and", "tested", "them.")
"""The summary's text, repeated to size (about six characters a word, four characters a token)."""
SUMMARY_MARK = "lc_source"


@dataclass(frozen=True, slots=True)
class AnthropicEdits:
    """`clear_tool_uses_20250919`, configured as the API takes it; the defaults are the documented
    ones: trigger 100,000 input tokens, keep 3 tool uses, `clear_at_least` none, `clear_tool_inputs`
    false, `exclude_tools` none."""

    trigger_input_tokens: int = TRIGGER_INPUT_TOKENS
    keep_tool_uses: int = KEEP_TOOL_USES
    clear_at_least: int | None = None
    clear_tool_inputs: bool | tuple[str, ...] = False
    exclude_tools: tuple[str, ...] = ()
    placeholder: str = CLEARED_PLACEHOLDER


@dataclass(frozen=True, slots=True)
class Cleared:
    """What one application of the edit did (the API reports `cleared_tool_uses` and
    `cleared_input_tokens` the same way)."""

    messages: list[Message]
    cleared_tool_uses: int
    cleared_input_tokens: int
    cleared_ids: tuple[str, ...] = ()


def clear_tool_uses(messages: Sequence[Message], input_tokens: int, count: Callable[[Message], int],
                    edit: AnthropicEdits = AnthropicEdits()) -> Cleared:
    """The request as the model sees it after `clear_tool_uses_20250919`. The edit is applied
    server-side to each request as the client sent it (the client keeps its full history, so every
    request starts from everything): when `input_tokens` (the whole prompt) exceeds the trigger,
    the oldest tool results are replaced by the placeholder in chronological order, all but the
    `keep` most recent tool uses, skipping `exclude_tools`; with `clear_tool_inputs` the matching
    tool-use inputs are emptied too (all tools, or those named). With `clear_at_least`, nothing is
    cleared unless at least that many tokens can be. `count` gives one message's tokens."""
    if input_tokens <= edit.trigger_input_tokens:
        return Cleared(list(messages), 0, 0)
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    uses = [(i, r.call_id) for i, m in enumerate(messages) for r in m.tool_results]
    clearable = uses[: max(0, len(uses) - edit.keep_tool_uses)]
    clearable = [(i, c) for i, c in clearable if names.get(c) not in edit.exclude_tools]
    targets: dict[int, set[str]] = {}
    for index, call_id in clearable:
        targets.setdefault(index, set()).add(call_id)
    inputs = set() if edit.clear_tool_inputs is False else {
        c for _, c in clearable if edit.clear_tool_inputs is True or names.get(c) in edit.clear_tool_inputs}
    out = list(messages)
    for index, ids in targets.items():
        blocks = tuple(replace(b, content=(Text(edit.placeholder),)) if isinstance(b, ToolResult) and b.call_id in ids
                       else b for b in out[index].blocks)
        out[index] = out[index].replace(blocks=blocks)
    if inputs:
        for index, message in enumerate(out):
            if any(c.id in inputs for c in message.tool_calls):
                out[index] = message.replace(blocks=tuple(
                    replace(b, arguments={}) if b in message.tool_calls and b.id in inputs else b
                    for b in message.blocks))
    saved = sum(count(a) - count(b) for a, b in zip(messages, out, strict=True) if a is not b)
    if edit.clear_at_least is not None and saved < edit.clear_at_least:
        return Cleared(list(messages), 0, 0)  # "the strategy will not be applied"
    return Cleared(out, len(clearable), saved, tuple(c for _, c in clearable))


# --------------------------------------------------------------------------------------------------
# Replaying under a baseline


def iter_baseline(transcript: Transcript, name: str, *, model: str | None = None, window: int | None = None,
                  overhead_tokens: int = 0, calibration: float | None = None,
                  **options: Any) -> Iterator[tuple[int, Prepared, ContextEngine]]:
    """Like `iter_replay`, for a baseline: (message index, the request the baseline sends, the replay's
    engine) at every model call. Raises `InputError` for an unknown name or a missing extra."""
    model = model or transcript.model
    info = model_info(model)
    budget = Budget.for_policy(policies.get("truncate"), window or info.context_window, info.max_output)
    step = baseline_step(name, budget, model)
    pricer = Pricer(budget)
    for index, prepared, engine in iter_replay(transcript, "raw", model=model, overhead_tokens=overhead_tokens,
                                               calibration=calibration, **options):
        started = time.perf_counter()
        items, events = step(prepared, engine)
        elapsed = (time.perf_counter() - started) * 1000
        yield index, pricer.price(items, prepared, engine, events, elapsed), engine


Step = Callable[[Prepared, ContextEngine], tuple[list[Item], list[Event]]]


def baseline_step(name: str, budget: Budget, model: str | None = None) -> Step:
    if name == ANTHROPIC_EDITS:
        return AnthropicStep()
    if name == LANGCHAIN:
        return LangChainStep(budget.window, model)
    raise InputError(f"unknown baseline {name!r}", f"use one of {', '.join(NAMES)}")


@dataclass
class Pricer:
    """Turns a baseline's view into a `Prepared` counted exactly as the engine counts its own: the raw
    replay's system tokens (system prompt, tools, overhead), the engine's counter and calibration, the
    prefix shared with the previous call, and the validator's problems."""

    budget: Budget
    last_keys: list[str] = field(default_factory=list)

    def price(self, items: list[Item], base: Prepared, engine: ContextEngine, events: list[Event],
              elapsed_ms: float) -> Prepared:
        keys = keys_of(items)
        stable = common_prefix(keys, self.last_keys)
        raw = base.system_tokens + total_tokens(items)
        factor = engine.calibrator.factor or 1.0
        prepared = Prepared(
            system=base.system, items=items, tokens=round(raw * factor), raw_tokens=raw, budget=self.budget.tokens,
            window=self.budget.window, events=events, problems=validate([i.message for i in items], "anthropic"),
            tools=base.tools, system_tokens=base.system_tokens, stable_prefix=stable,
            stable_prefix_tokens=raw - total_tokens(items[stable:]), prefix_kept=stable == len(self.last_keys),
            elapsed_ms=elapsed_ms)
        self.last_keys = keys
        return prepared


@dataclass
class AnthropicStep:
    """`clear_tool_uses_20250919` on each request: stateless, as the server is."""

    edit: AnthropicEdits = AnthropicEdits()
    cleared: int = 0

    def __call__(self, prepared: Prepared, engine: ContextEngine) -> tuple[list[Item], list[Event]]:
        def count(message: Message) -> int:
            return engine.counter.count_message(message)

        result = clear_tool_uses(prepared.messages, prepared.tokens, count, self.edit)
        items = [item if message is item.message else Item(item.entry_id, message, count(message),
                                                           rendered_by=ANTHROPIC_EDITS)
                 for item, message in zip(prepared.items, result.messages, strict=True)]
        events: list[Event] = []
        if result.cleared_tool_uses != self.cleared:  # the request changed shape: say so, once
            events.append(ToolUsesCleared(result.cleared_ids, prepared.raw_tokens,
                                          prepared.raw_tokens - result.cleared_input_tokens,
                                          f"{result.cleared_tool_uses} tool result(s) cleared above "
                                          f"{self.edit.trigger_input_tokens:,} input tokens",
                                          cleared_tool_uses=result.cleared_tool_uses,
                                          cleared_input_tokens=result.cleared_input_tokens))
        self.cleared = result.cleared_tool_uses
        return items, events


def require(name: str) -> None:
    """Refuse a baseline that cannot run here (LangChain missing), before any replay starts."""
    if name == LANGCHAIN:
        try:
            import langchain.agents.middleware  # noqa: F401
        except ImportError as error:
            raise MissingExtraError(f"the `langchain` baseline runs LangChain's own middleware, and {error.name} "
                                    "is not installed", "pip install 'ctxwin[langchain]', or leave `langchain` out"
                                    ) from None


def langchain_middleware(window: int, model_name: str | None = None) -> tuple[Any, Any]:
    """(SummarizationMiddleware, ContextEditingMiddleware) as the `langchain` baseline configures them
    (the side-by-side benchmark uses the same). The summary model is LangChain's `GenericFakeChatModel`
    answering every summary request with the same `SUMMARY_TOKENS`-sized text; its profile carries the
    model's window (for the fractional trigger), and its LLM type is Anthropic's when the replayed
    model is Claude, so that LangChain picks the token counter it picks for Claude (3.3 characters a
    token). Raises `InputError` when LangChain is not installed."""
    require(LANGCHAIN)
    from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware, SummarizationMiddleware
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    class SummaryModel(GenericFakeChatModel):
        llm_type: str = "generic-fake-chat-model"

        @property
        def _llm_type(self) -> str:
            return self.llm_type

    summary = " ".join(itertools.islice(itertools.cycle(SUMMARY_WORDS), SUMMARY_TOKENS * 4 // 6))
    claude = model_name is not None and "claude" in model_name.lower()
    model = SummaryModel(messages=itertools.repeat(AIMessage(content=summary)), profile={"max_input_tokens": window},
                         llm_type="anthropic-chat" if claude else "generic-fake-chat-model")
    return SummarizationMiddleware(model, trigger=LANGCHAIN_TRIGGER), ContextEditingMiddleware(
        edits=[ClearToolUsesEdit()])


class LangChainStep:
    """LangChain's middleware (`langchain_middleware`) on each call, with an agent state that lives
    across calls as it does in `create_agent`: new messages are appended to it, the summarization
    rewrites it, the context edits apply to each request only."""

    def __init__(self, window: int, model_name: str | None = None) -> None:
        self.summarization, self.editing = langchain_middleware(window, model_name)
        from langchain.agents.middleware import ModelRequest
        from langchain_core.messages import AIMessage
        from langgraph.graph.message import add_messages

        from ctxwin.adapters.langchain import from_ctxwin, to_ctxwin

        self.model = self.summarization.model
        self._request = ModelRequest
        self._reply = AIMessage(content="")
        self._add = add_messages
        self._from, self._to = from_ctxwin, to_ctxwin
        self.state: list[Any] = []
        self.seen: set[tuple[str, str]] = set()
        self.cache: dict[Any, Message] = {}
        self.cleared = 0

    def __call__(self, prepared: Prepared, engine: ContextEngine) -> tuple[list[Item], list[Event]]:
        for item in prepared.items:  # the history as the agent's state gets it: once, in order
            if (item.entry_id, item.key) in self.seen:
                continue
            self.seen.add((item.entry_id, item.key))
            converted = self._from([item.message])
            for n, message in enumerate(converted):
                message.id = item.entry_id if n == 0 else f"{item.entry_id}#{n}"
            self.state.extend(converted)
        events: list[Event] = []
        before = len(self.state)
        update = self.summarization.before_model({"messages": self.state}, None)
        if update:
            self.state = cast(list[Any], self._add(self.state, update["messages"]))  # lists in, a list out
            events.append(Compacted((), 0, 0,
                                    f"SummarizationMiddleware summarized {before - len(self.state) + 1} message(s)",
                                    strategy="langchain"))
        sent: list[Any] = []

        def handler(request: Any) -> Any:
            sent.extend(request.messages)
            return self._reply

        self.editing.wrap_model_call(self._request(model=self.model, messages=list(self.state), state={
            "messages": self.state}), handler)
        items = self._items(sent, engine)
        cleared = sum(1 for m in sent if (getattr(m, "response_metadata", None) or {}).get(
            "context_editing", {}).get("cleared"))
        if cleared != self.cleared:
            events.append(ToolUsesCleared((), 0, 0, f"ContextEditingMiddleware: {cleared} tool result(s) cleared"))
        self.cleared = cleared
        return items, events

    def _items(self, sent: list[Any], engine: ContextEngine) -> list[Item]:
        """The request as ctxwin items, converting each message (or run of tool messages) once: the
        edits copy every message, so they are recognised by id and content."""
        runs: list[list[Any]] = []
        for message in sent:
            if message.type == "tool" and runs and runs[-1][0].type == "tool":
                runs[-1].append(message)
            else:
                runs.append([message])
        items = []
        for run in runs:
            key = tuple((m.id, m.type, m.content if isinstance(m.content, str) else json.dumps(m.content, default=str),
                         json.dumps(getattr(m, "tool_calls", None), default=str, sort_keys=True)) for m in run)
            message = self.cache.get(key)
            if message is None:
                [message] = self._to(run)
                self.cache[key] = message
            first = run[0]
            synthetic = bool((getattr(first, "additional_kwargs", None) or {}).get(SUMMARY_MARK))
            entry_id = str(first.id or "langchain").split("#", 1)[0]
            items.append(Item(entry_id, message, engine.counter.count_message(message), synthetic=synthetic,
                              rendered_by=LANGCHAIN))
        return items
