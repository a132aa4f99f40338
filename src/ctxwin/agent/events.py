"""What the loop reports: `LoopEvent` for every step (engine `Event`s ride inside `pipeline` events),
`RunStats` over the agent's life, `RunResult` for one run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxwin.pipeline.view import Event


@dataclass(frozen=True)
class LoopEvent:
    """Something the loop did. `kind`: `user`, `model_call`, `assistant`, `tool_call`, `tool_result`,
    `pipeline` (an engine `Event`: compaction, mask, fit ...; `event` holds it), `retry`, `overflow`,
    `limit`, `interrupted`, `error`, `subagent`, `done`. `turn` counts user turns of the session this
    process saw, `step` the model calls of the current run."""

    kind: str
    turn: int
    step: int
    data: Mapping[str, Any] = field(default_factory=dict)
    event: Event | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "turn": self.turn, "step": self.step, **self.data}
        if self.event is not None:
            out["event"] = self.event.to_dict()
        return out


@dataclass
class RunStats:
    """Totals over the agent's life in this process (what `ctxwin run --json` prints last)."""

    turns: int = 0
    steps: int = 0
    model_calls: int = 0
    compactions: int = 0
    compactions_inside_tool_loops: int = 0
    overflows_recovered: int = 0
    retries: int = 0
    max_request_tokens: int = 0
    window: int = 0
    errors: list[str] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"turns": self.turns, "steps": self.steps, "model_calls": self.model_calls,
                "compactions": self.compactions, "compactions_inside_tool_loops": self.compactions_inside_tool_loops,
                "overflows_recovered": self.overflows_recovered, "retries": self.retries,
                "max_request_tokens": self.max_request_tokens, "window": self.window, "errors": list(self.errors),
                "input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cost_usd": round(self.cost_usd, 6)}


@dataclass(frozen=True)
class RunResult:
    """How one run ended: `stop` is `done` (the model answered in text), `max_steps`, `max_cost`,
    `repeated_call`, `interrupted` or `error`; `text` the last assistant text."""

    stop: str
    text: str
    steps: int
