"""LangChain's own context middleware against CtxwinMiddleware, inside the same `create_agent` setup.

Each shared session (the three long Claude Code sessions and the Pi session; absent ones are skipped)
is driven through a real LangChain v1 agent twice: once with `SummarizationMiddleware` +
`ContextEditingMiddleware(ClearToolUsesEdit())` (configured as the `langchain` baseline of `ctxwin
replay --compare`: `ctxwin.evaluation.baselines.langchain_middleware`), once with `CtxwinMiddleware`
(the `ctxwin` policy, the session's model and window, a blob store). Everything else is the same:

- every user message of the session starts an agent run (`agent.invoke` with the state so far);
- the model is LangChain's `GenericFakeChatModel` replaying the session's assistant turns in order
  (consecutive assistant messages merged, as the Anthropic API merges them); a run whose recorded
  turns are used up ends with a short synthetic answer;
- tools: one per tool name of the session; a replay middleware answers each call with the recorded
  result (or says none was recorded), so the agent's ToolNode, and ctxwin's `wrap_tool_call`, run.

Per model call: the time from the agent's first `before_model` hook (a timer middleware, first in the
list, so it also covers LangChain's summarization node) to the model receiving the request; the
tokens the model received (its messages, counted with ctxwin's counter for the session's model, the
same for both); and whether the request was invalid (ctxwin's Anthropic validator) or over the
model's window. Last line: one JSON object.

    python benchmarks/langchain_side_by_side.py [--sessions N]     (CTXWIN_SHARED_DIR: where `shared` is)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool
from pydantic import Field

from ctxwin import ContextEngine
from ctxwin.adapters.langchain import CtxwinMiddleware, from_ctxwin, to_ctxwin
from ctxwin.evaluation.baselines import langchain_middleware
from ctxwin.messages import Message, validate
from ctxwin.store.blobs import FileBlobStore
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.tokens import CachedCounter, counter_for, model_info
from ctxwin.transcripts import load_transcript

SHARED = Path(os.environ.get("CTXWIN_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared")) / "transcripts"
SESSIONS = [
    SHARED / "claude-code" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    SHARED / "claude-code" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    SHARED / "claude-code" / "8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl",
    SHARED / "pi" / "before-compaction.jsonl",
]
END_OF_TURN = "[end of the recorded turn]"
NO_RESULT = "[no result was recorded for this call]"


# --------------------------------------------------------------------------------------------------
# The session as agent runs


def runs_of(messages: list[Message]) -> list[tuple[Message, list[Message]]]:
    """(user message, the assistant turns that followed it), consecutive assistant messages merged."""
    runs: list[tuple[Message, list[Message]]] = []
    for message in messages:
        if message.role == "user":
            runs.append((message, []))
        elif message.role == "assistant" and runs:
            turns = runs[-1][1]
            if turns and turns[-1].meta.get("_open"):
                turns[-1] = Message("assistant", turns[-1].blocks + message.blocks, meta={"_open": True})
            else:
                turns.append(Message("assistant", message.blocks, meta={"_open": True}))
        elif runs and runs[-1][1]:
            runs[-1][1][-1] = runs[-1][1][-1].replace(meta={})  # a tool message closes the assistant turn
    return runs


def results_of(messages: list[Message]) -> dict[str, str]:
    return {r.call_id: r.text for m in messages for r in m.tool_results}


class ReplayModel(GenericFakeChatModel):
    """The session's assistant turns, in order; records what it receives and when."""

    turns: list[list[AIMessage]] = Field(default_factory=list)
    run: int = -1
    received: list[list[BaseMessage]] = Field(default_factory=list)
    arrived: list[float] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ReplayModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:
        self.arrived.append(time.perf_counter())
        self.received.append(list(messages))
        queue = self.turns[self.run]
        reply = queue.pop(0) if queue else AIMessage(content=END_OF_TURN)
        self.messages = iter([reply])
        return super()._generate(messages, stop, run_manager, **kwargs)


class Timer(AgentMiddleware):  # type: ignore[misc]
    """First in the middleware list: when the agent starts preparing each model call."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[float] = []

    def before_model(self, state: Any, runtime: Any) -> None:
        self.started.append(time.perf_counter())


class RecordedTools(AgentMiddleware):  # type: ignore[misc]
    """Answers every tool call with the session's recorded result (last in the list: innermost)."""

    def __init__(self, results: dict[str, str]) -> None:
        super().__init__()
        self.results = results

    def wrap_tool_call(self, request: Any, handler: Any) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(content=self.results.get(call["id"], NO_RESULT), tool_call_id=call["id"],
                           name=call["name"])


def tools_for(messages: list[Message]) -> list[StructuredTool]:
    names = sorted({c.name for m in messages for c in m.tool_calls})
    schema = {"type": "object", "properties": {}, "additionalProperties": True}
    return [StructuredTool.from_function(lambda **_: NO_RESULT, name=name, description=f"The session's {name} tool.",
                                         args_schema=schema) for name in names]


# --------------------------------------------------------------------------------------------------
# One arm


def drive(messages: list[Message], middleware: list[Any], model_name: str | None) -> dict[str, Any]:
    """Run the session through `create_agent` with `middleware`; per-call times, tokens, invalid."""
    runs = runs_of(messages)
    model = ReplayModel(messages=iter(()), turns=[[from_ctxwin([t.replace(meta={})])[0] for t in turns]
                                                 for _, turns in runs])
    timer = Timer()
    agent = create_agent(model, tools=tools_for(messages),
                         middleware=[timer, *middleware, RecordedTools(results_of(messages))])
    state: list[BaseMessage] = []
    started = time.perf_counter()
    for n, (ask, turns) in enumerate(runs):
        model.run = n
        limit = 6 * len(turns) + 20
        state = agent.invoke({"messages": [*state, *from_ctxwin([ask])]}, {"recursion_limit": limit})["messages"]
    wall = time.perf_counter() - started
    counter = CachedCounter(counter_for(model_name))
    window = model_info(model_name).context_window
    tokens, invalid = [], 0
    for request in model.received:
        canonical = to_ctxwin([m for m in request if not isinstance(m, SystemMessage)])
        count = sum(counter.count_message(m) for m in canonical)
        tokens.append(count)
        invalid += bool(validate(canonical, "anthropic", request=True)) or count > window
    waits = [(a - s) * 1000 for s, a in zip(timer.started, model.arrived, strict=True)]
    return {"calls": len(model.received), "tokens": sum(tokens), "peak_tokens": max(tokens, default=0),
            "invalid": invalid, "ms": waits, "wall_s": round(wall, 2)}


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)] if ordered else 0.0


def sessions(limit: int | None) -> Iterator[Path]:
    for path in SESSIONS[:limit]:
        if path.exists():
            yield path
        else:
            print(f"skipped {path}: absent", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=None, help="Only the first N sessions.")
    args = parser.parse_args()
    totals: dict[str, dict[str, Any]] = {"langchain": {"ms": [], "tokens": 0, "invalid": 0, "calls": 0},
                                         "ctxwin": {"ms": [], "tokens": 0, "invalid": 0, "calls": 0}}
    per_session = {}
    for path in sessions(args.sessions):
        transcript = load_transcript(path)
        name = transcript.model
        window = model_info(name).context_window
        with tempfile.TemporaryDirectory(prefix="ctxwin-lc-") as blobs:
            engine = ContextEngine(MemorySessionLog(blobs=FileBlobStore(blobs)), model=name)
            arms = {"langchain": drive(transcript.messages, list(langchain_middleware(window, name)), name),
                    "ctxwin": drive(transcript.messages, [CtxwinMiddleware(engine)], name)}
        row = {}
        for arm, result in arms.items():
            total = totals[arm]
            total["ms"] += result["ms"]
            for key in ("tokens", "invalid", "calls"):
                total[key] += result[key]
            row[arm] = {"calls": result["calls"], "tokens": result["tokens"], "peak_tokens": result["peak_tokens"],
                        "invalid": result["invalid"], "p95_ms": round(p95(result["ms"]), 3),
                        "mean_ms": round(statistics.fmean(result["ms"]), 3) if result["ms"] else 0.0,
                        "wall_s": result["wall_s"]}
        per_session[path.name] = row
        print(json.dumps({path.name: row}), file=sys.stderr)
    out = {"sessions": per_session}
    for arm, total in totals.items():
        out[f"{arm}_p95_ms"] = round(p95(total["ms"]), 3)
        out[f"{arm}_mean_ms"] = round(statistics.fmean(total["ms"]), 3) if total["ms"] else 0.0
        out[f"{arm}_tokens"] = total["tokens"]
        out[f"{arm}_invalid"] = total["invalid"]
        out[f"{arm}_calls"] = total["calls"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
