"""A scripted tool-using model on the fake provider, for the agent tests.

TEMPORARY: the providers branch is giving `FakeProvider` a scripted model (issue 14 item 5); until it
lands, `ScriptedFake` wraps the fake's normal answer (window checks, validation, usage and prompt-cache
accounting all still run) and replaces its content with what `script(api, messages)` decides: text
and/or tool calls. The script is a function of the request only, so a resumed agent that sends the same
request gets the same answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwin.messages import Message
from ctxwin.testing.fake_provider import FakeProvider, request_messages


@dataclass(frozen=True)
class Turn:
    """What the scripted model answers: text and tool calls `(id, name, arguments)`; arguments that
    are a str are sent as they are (invalid JSON on purpose)."""

    text: str = ""
    calls: Sequence[tuple[str, str, Any]] = field(default_factory=tuple)


Script = Callable[[str, list[Message]], Turn]


class ScriptedFake(FakeProvider):
    def __init__(self, script: Script, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.script = script

    def _answer(self, api: str, body: Mapping[str, Any], input_tokens: int, forced: Any) -> dict[str, Any]:
        answer = super()._answer(api, body, input_tokens, forced)
        if forced is not None and forced.text is not None:
            return answer
        return _rewrite(api, answer, self.script(api, request_messages(api, body)))


def _rewrite(api: str, answer: dict[str, Any], turn: Turn) -> dict[str, Any]:
    if api == "anthropic":
        content: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
        for call_id, name, args in turn.calls:
            # Anthropic's input is always an object; invalid JSON shows up there as a raw string field.
            content.append({"type": "tool_use", "id": call_id, "name": name,
                            "input": args if isinstance(args, dict) else {"__raw__": args}})
        return {**answer, "content": content or [{"type": "text", "text": "ok"}],
                "stop_reason": "tool_use" if turn.calls else "end_turn"}
    if api == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.calls:
            message["tool_calls"] = [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for call_id, name, args in turn.calls]
        choice = {**answer["choices"][0], "message": message, "finish_reason": "tool_calls" if turn.calls else "stop"}
        return {**answer, "choices": [choice]}
    raise AssertionError(f"the scripted fake speaks anthropic and chat, not {api}")


# --------------------------------------------------------------------------------------------------
# The long task: each user turn "Turn T: ..." is a tool loop of STEPS calls over the workspace files.

CALL_ID = re.compile(r"^t(\d+)s(\d+)([ab])$")
TURN = re.compile(r"Turn (\d+):")
STEP = re.compile(r"Step (\d+) of turn (\d+)\.")


def make_workspace(root: Path, files: int = 40, lines: int = 30) -> Path:
    """Files docs/fNNN.txt with distinct, greppable lines."""
    docs = root / "docs"
    docs.mkdir(parents=True, exist_ok=True)
    for n in range(files):
        body = "\n".join(f"file {n:03d} line {i:02d}: value-{n * 100 + i} lorem ipsum dolor sit amet"
                         for i in range(lines))
        (docs / f"f{n:03d}.txt").write_text(body + "\n", "utf-8")
    return root


def long_task(steps: int, files: int = 40, on_step: Callable[[int, int], None] | None = None) -> Script:
    """Turn T runs `steps` model calls: read docs/f{k}.txt, and on every 5th step a read and a grep
    in parallel; then a text answer. `on_step(turn, step)` lets a test inject errors at chosen steps."""

    def script(api: str, messages: list[Message]) -> Turn:
        last = messages[-1]
        turn, step = 0, 0
        if last.role == "tool" and last.tool_results:
            found = CALL_ID.match(last.tool_results[-1].call_id)
            if found:
                turn, step = int(found.group(1)), int(found.group(2))
        elif last.role == "user":
            steps_seen = STEP.findall(last.text)  # a compaction summary of this very tool loop
            found = TURN.search(last.text)
            if steps_seen:
                step, turn = (int(x) for x in steps_seen[-1])
            elif found:
                turn = int(found.group(1))
        if not turn:
            return Turn(text=f"(no task) {last.text[:40]}")
        if step >= steps:
            return Turn(text=f"Turn {turn} done after {steps} steps.")
        step += 1
        if on_step is not None:
            on_step(turn, step)
        path = f"docs/f{(turn * 7 + step) % files:03d}.txt"
        calls: list[tuple[str, str, Any]] = [(f"t{turn}s{step}a", "read", {"path": path})]
        if step % 5 == 0:
            calls.append((f"t{turn}s{step}b", "grep", {"pattern": f"value-{step}", "path": "docs"}))
        return Turn(text=f"Step {step} of turn {turn}.", calls=calls)

    return script


def overflow_body(api: str, tokens: int, window: int) -> dict[str, Any]:
    """The provider's real overflow error wording (as the fake itself sends it)."""
    if api == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error",
                                           "message": f"prompt is too long: {tokens} tokens > {window} maximum"}}
    return {"error": {"message": f"This model's maximum context length is {window} tokens. However, your messages "
                                 f"resulted in {tokens} tokens. Please reduce the length of the messages.",
                      "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}
