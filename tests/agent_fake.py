"""Scripted tool-using models on the fake provider, for the agent tests.

A script here is a function of the request only (`script(api, messages) -> Turn`), so a resumed agent
that sends the same request gets the same answer; `ScriptedFake` serves it through the fake provider's
scripted model (`FakeProvider(model=...)`: window checks, validation, usage and prompt-cache accounting
all run first).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwin.messages import Message
from ctxwin.testing import Call, FakeProvider, Fault, ModelRequest, Reply


@dataclass(frozen=True)
class Turn:
    """What the scripted model answers: text and tool calls `(id, name, arguments)`."""

    text: str = ""
    calls: Sequence[tuple[str, str, Any]] = field(default_factory=tuple)


Script = Callable[[str, list[Message]], "Turn | Fault"]


def model_of(script: Script) -> Callable[[ModelRequest], Reply | Fault]:
    def model(request: ModelRequest) -> Reply | Fault:
        turn = script(request.api, list(request.messages))
        if isinstance(turn, Fault):
            return turn
        return Reply(turn.text, tuple(Call(name, args, call_id) for call_id, name, args in turn.calls))
    return model


def ScriptedFake(script: Script, **kwargs: Any) -> FakeProvider:
    return FakeProvider(model=model_of(script), **kwargs)


# --------------------------------------------------------------------------------------------------
# The long task: each user turn "Turn T: ..." is a tool loop of STEPS calls over the workspace files.

CALL_ID = re.compile(r"^t(\d+)s(\d+)([ab])$")
TURN = re.compile(r"Turn (\d+):")
CHECKPOINT_ASK = "[ctxwin] The context is at"  # the engine's checkpoint request (compaction.compact)
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


def long_task(steps: int, files: int = 40, faults: Mapping[int, Sequence[Fault]] | None = None) -> Script:
    """Turn T runs `steps` model calls: read docs/f{k}.txt, and on every 5th step a read and a grep
    in parallel; then a text answer. `faults[step]`: errors served, in order, to the request that would
    get that step's answer (in every turn); each retry of it gets the next one, then the answer."""
    served: dict[tuple[int, int], int] = {}
    lock = threading.Lock()

    def script(api: str, messages: list[Message]) -> Turn | Fault:
        last = messages[-1]
        checkpoint = last.role == "user" and last.text.startswith(CHECKPOINT_ASK)
        if checkpoint and len(messages) > 1:
            last = messages[-2]  # asked for a checkpoint mid-loop: answer it, then carry on from there
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
        pending = list((faults or {}).get(step, ()))
        with lock:
            n = served.get((turn, step), 0)
            if n < len(pending):
                served[(turn, step)] = n + 1
                return pending[n]
        path = f"docs/f{(turn * 7 + step) % files:03d}.txt"
        calls: list[tuple[str, str, Any]] = [(f"t{turn}s{step}a", "read", {"path": path})]
        if step % 5 == 0:
            calls.append((f"t{turn}s{step}b", "grep", {"pattern": f"value-{step}", "path": "docs"}))
        text = f"Step {step} of turn {turn}."
        if checkpoint:
            text = f"<checkpoint>Goal: turn {turn}, read the docs. Done: {step - 1} steps. {text}</checkpoint>\n{text}"
        return Turn(text=text, calls=calls)

    return script
