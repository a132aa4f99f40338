"""How fast pairing validation and repair run on a long session, and the provider writers with them.

A 2,000-message history with 800 tool calls (400 assistant turns with two parallel calls each, signed
thinking, 2 KB results), like a long coding session. Times are medians in milliseconds.

    /work/venv/bin/python benchmarks/pairing.py

Prints one JSON object on its last line.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from ctxwin.messages import (
    Message,
    Text,
    Thinking,
    ToolCall,
    ToolResult,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
    repair,
    to_anthropic,
    to_openai_chat,
    to_openai_responses,
    validate,
)
from ctxwin.messages.pairing import PROVIDERS

TURNS = 400  # assistant turns that call tools
CALLS_PER_TURN = 2  # parallel calls per turn
RESULT_BYTES = 2_000  # size of each tool result
RUNS = 30  # timed repetitions per measurement


def history() -> list[Message]:
    out = [Message("system", (Text("You are a coding agent. " * 40),))]
    output = ("x = compute(y)  # some line of source code\n" * (RESULT_BYTES // 44))[:RESULT_BYTES]
    for turn in range(TURNS):
        out.append(Message("user", (Text(f"Step {turn}: look at the next module and fix what fails."),)))
        calls = tuple(ToolCall(f"toolu_{turn:04d}_{k}", "Read", {"file_path": f"/src/m{turn}_{k}.py"})
                      for k in range(CALLS_PER_TURN))
        out.append(Message("assistant", (Thinking(f"Planning step {turn}.", signature=f"sig{turn}"),
                                         Text("Reading the files."), *calls)))
        out.append(Message("tool", tuple(ToolResult(c.id, (Text(output),), False, c.name) for c in calls)))
        out.append(Message("assistant", (Text(f"Step {turn} is done: the tests pass."),)))
        if turn < TURNS - 1:
            out.append(Message("user", (Text("ok, continue"),)))
    return out[:2000]


def median_ms(fn: Callable[[], Any], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 3)


def main() -> None:
    messages = history()
    calls = sum(len(m.tool_calls) for m in messages)
    # a cut at both ends: it starts at a tool message (orphan results) and ends right after a call
    start = next(i for i in range(100, len(messages)) if messages[i].role == "tool")
    end = max(i for i, m in enumerate(messages) if m.tool_calls) + 1
    cut = messages[start:end]
    report: dict[str, Any] = {"messages": len(messages), "tool_calls": calls, "runs": RUNS}
    for provider in PROVIDERS:
        assert validate(messages, provider) == [], provider
        report[f"validate_ms_{provider}"] = median_ms(lambda p=provider: validate(messages, p))
        report[f"repair_valid_ms_{provider}"] = median_ms(lambda p=provider: repair(messages, p))
        fixed = repair(cut, provider)
        assert fixed.changes and validate(fixed.messages, provider) == []
        report[f"repair_cut_ms_{provider}"] = median_ms(lambda p=provider: repair(cut, p))
        report[f"repair_cut_changes_{provider}"] = len(fixed.changes)
    anthropic = to_anthropic(messages)
    chat = to_openai_chat(messages)
    responses = to_openai_responses(messages)
    report["to_anthropic_ms"] = median_ms(lambda: to_anthropic(messages), 10)
    report["to_openai_chat_ms"] = median_ms(lambda: to_openai_chat(messages), 10)
    report["to_openai_responses_ms"] = median_ms(lambda: to_openai_responses(messages), 10)
    report["from_anthropic_ms"] = median_ms(lambda: from_anthropic(anthropic["messages"], anthropic["system"]), 10)
    report["from_openai_chat_ms"] = median_ms(lambda: from_openai_chat(chat), 10)
    report["from_openai_responses_ms"] = median_ms(lambda: from_openai_responses(responses), 10)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
