"""What `ContextEngine.prepare()` returns: the request to send, its size, and what was done to it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxwin.messages import Message
from ctxwin.messages import system as system_message
from ctxwin.messages.pairing import Problem, Provider, repair, validate
from ctxwin.messages.providers import to_anthropic, to_openai_chat, to_openai_responses
from ctxwin.messages.tools import as_tool_schema, to_format
from ctxwin.pipeline.view import Event, Item


@dataclass(frozen=True, slots=True)
class StageRun:
    """One stage that acted on a request (emitted events or took decisions), timed: wall-clock
    nanoseconds since the epoch (what tracing backends take), and the tokens of what it worked on
    before and after, in counter units (the new messages for the per-message stages: result_budget,
    spill, dedup; the whole request, system prompt and tools included, for the others). `events` are
    the events it emitted (also in `Prepared.events`)."""

    stage: str
    started_ns: int
    ended_ns: int
    tokens_before: int
    tokens_after: int
    events: tuple[Event, ...] = ()


@dataclass
class Prepared:
    """A provider-ready request. `tokens` is the engine's count of everything sent (system prompt,
    tool schemas, messages), calibrated to the model; it is at most `budget` (= window - reserve)
    unless the policy has an unlimited window. `stable_prefix` is how many leading messages are
    byte-identical to the previous request's, and `stable_prefix_tokens` what a prompt cache could
    reuse (the system prompt and tools included when they did not change; raw counter units)."""

    system: str
    items: list[Item]
    tokens: int
    raw_tokens: int
    budget: int
    window: int
    events: list[Event] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    system_tokens: int = 0
    stable_prefix: int = 0
    stable_prefix_tokens: int = 0
    prefix_kept: bool = True
    elapsed_ms: float = 0.0
    """How long `prepare()` took."""
    stages: list[StageRun] = field(default_factory=list)
    """The stages that acted on this request, in the order they started (a compaction that `compact()`
    or `recover()` ran first included; the fit runs a repair makes to fit again, inside its run, come
    after it)."""

    @property
    def messages(self) -> list[Message]:
        return [item.message for item in self.items]

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def fits(self) -> bool:
        return self.tokens <= self.budget

    def to_anthropic(self) -> dict[str, Any]:
        """`{"system", "messages", "tools"}` for the Anthropic Messages API."""
        body = to_anthropic(self._with_system())
        if self.tools:
            body["tools"] = [to_format(as_tool_schema(t), "anthropic") for t in self.tools]
        return body

    def to_openai_chat(self) -> dict[str, Any]:
        """`{"messages", "tools"}` for OpenAI Chat Completions."""
        body: dict[str, Any] = {"messages": to_openai_chat(self._with_system(for_provider="openai_chat"))}
        if self.tools:
            body["tools"] = [to_format(as_tool_schema(t), "openai") for t in self.tools]
        return body

    def to_openai_responses(self) -> dict[str, Any]:
        """`{"instructions", "input", "tools"}` for the OpenAI Responses API."""
        body: dict[str, Any] = {"input": to_openai_responses(self._for("openai_responses"))}
        if self.system:
            body["instructions"] = self.system
        if self.tools:
            body["tools"] = [to_format(as_tool_schema(t), "openai-responses") for t in self.tools]
        return body

    def _for(self, provider: Provider) -> list[Message]:
        """The messages as the provider needs them. The engine keeps them valid for Anthropic; what
        another provider's rules add (OpenAI Chat answers each assistant turn of a run separately) is
        repaired here, deterministically, so the same request always converts to the same bytes."""
        messages = self.messages
        return repair(messages, provider).messages if validate(messages, provider) else messages

    def _with_system(self, for_provider: Provider = "anthropic") -> list[Message]:
        messages = self._for(for_provider) if for_provider != "anthropic" else self.messages
        if not self.system:
            return messages
        return [system_message(self.system), *messages]

    def summary(self) -> dict[str, Any]:
        return {
            "messages": len(self.items),
            "tokens": self.tokens,
            "budget": self.budget,
            "window": self.window,
            "valid": self.valid,
            "stable_prefix": self.stable_prefix,
            "prefix_kept": self.prefix_kept,
            "events": [e.to_dict() for e in self.events],
        }

