"""`ctxwin chat`: a terminal REPL on the agent loop, on any OpenAI- or Anthropic-compatible endpoint.

Each line is a user turn (the agent works until it answers); lines starting with `/` are commands. A
status line after each turn shows context use. Ctrl-C stops the current step (the model call or the
tools running now, their processes killed), not the session; `/resume` continues the stopped turn.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from ctxwin.agent import Agent, LoopEvent
from ctxwin.cli.app import app, console, handle_errors
from ctxwin.cli.run import (
    AgentsOption,
    AllowShellOption,
    ApiKeyOption,
    ApiOption,
    BaseUrlOption,
    MaxOutputOption,
    ModelOption,
    PolicyOption,
    StreamOption,
    SubagentsOption,
    WorkspaceOption,
    describe,
    options,
)
from ctxwin.memory.consolidate.schedule import CLOSE_WAIT_S, SleepConfig
from ctxwin.store import DEFAULT_ROOT
from ctxwin.tokens.breakdown import LABELS

HELP = """Commands:
  /compact [focus]  compact the history now (optionally focused on a topic)
  /new              start a new session
  /checkpoint [name] make a restore point here (OpenClaw's /checkpoint)
  /rewind [name]    go back to a restore point (the latest without a name); what came after stays
  /marks            list the restore points
  /summarize        ask the agent to write its state summary now (Alyx's checkpoint)
  /context          where the tokens of the next request go
  /health           one line: context use and what is due
  /resume [DIR]     continue a stopped turn, or open the session in DIR and continue it
  /quit             leave (Ctrl-D too)"""


class Repl:
    """The chat's state: the options, the agent, and what to print."""

    def __init__(self, opts: Any, sessions: Path) -> None:
        self.opts = opts
        self.sessions = sessions
        self.streamed = False  # a streamed answer is being printed
        self.answered = False  # this turn's final answer was streamed to the screen
        self.agent: Agent = self._open(opts.session or self._fresh())

    def _fresh(self) -> Path:
        self.sessions.mkdir(parents=True, exist_ok=True)
        n = 1
        while (self.sessions / f"chat-{n:04d}").exists():
            n += 1
        return self.sessions / f"chat-{n:04d}"

    def _open(self, folder: Path) -> Agent:
        self.folder = folder
        agent = self.opts.build(self.show, session=folder)
        console.print(escape(f"session {folder} ({len(agent.engine.messages)} messages)"), highlight=False)
        return agent

    def show(self, event: LoopEvent) -> None:
        if event.kind == "delta":  # a streamed answer, shown as it arrives
            console.print(event.data["text"], end="", markup=False, highlight=False)
            self.streamed = True
            return
        if event.kind == "assistant":
            if self.streamed:
                console.print()
                calls = event.data["tool_calls"]
                if calls:
                    console.print(escape(f"  -> {', '.join(calls)}"), style="dim", highlight=False)
                else:
                    self.answered = True  # the answer is on the screen already
                self.streamed = False
                return
            if not event.data["tool_calls"]:
                return  # the answer is printed once the turn ends
        line = describe(event)
        if line and event.kind != "model_call":
            console.print(escape(line), style="dim", highlight=False)

    def status(self) -> None:
        console.print(escape(f"[{self.agent.engine.health()} · {self.agent.stats.compactions} compactions · "
                             f"{self.folder.name}]"), style="bold cyan", highlight=False)

    def turn(self, task: str | None, resume: bool = False) -> None:
        """Run one turn with Ctrl-C bound to stopping it."""
        previous = signal.signal(signal.SIGINT, lambda *_: self.agent.interrupt())
        self.streamed = self.answered = False
        try:
            result = self.agent.resume() if resume else self.agent.run(task)
        finally:
            signal.signal(signal.SIGINT, previous)
        if result is None:
            console.print("nothing to resume: the last turn is finished", highlight=False)
        elif result.stop == "interrupted":
            console.print("stopped (Ctrl-C); /resume continues the turn", style="yellow", highlight=False)
        elif result.stop != "done":
            console.print(escape(f"stopped: {result.stop}"), style="yellow", highlight=False)
            if result.stop == "error":
                console.print(escape(result.text), style="red", highlight=False)
        elif not self.answered:
            console.print(escape(result.text), highlight=False)
        self.status()

    def command(self, line: str) -> bool:
        """Run a /command; False to leave."""
        name, _, arg = line[1:].partition(" ")
        arg = arg.strip()
        agent = self.agent
        if name in ("quit", "exit", "q"):
            return False
        if name == "help":
            console.print(HELP, highlight=False)
        elif name == "compact":
            before = agent.engine.prepare().tokens
            after = agent.engine.compact(arg or None)
            console.print(escape(f"compacted: {before:,} -> {after.tokens:,} tokens"), highlight=False)
            self.status()
        elif name == "new":
            self.end_session(agent)
            agent.engine.session.close()
            self.agent = self._open(self._fresh())
            self.status()
        elif name == "checkpoint":
            marks = agent.engine.marks()
            label = arg or f"checkpoint-{len(marks) + 1}"
            agent.engine.mark(label)
            console.print(escape(f"restore point {label!r} made; /rewind {label} comes back here"), highlight=False)
        elif name == "rewind":
            marks = agent.engine.marks()
            label = arg or (list(marks)[-1] if marks else "")
            prepared = agent.engine.rewind(label)
            console.print(escape(f"rewound to {label!r}: the next request is {prepared.tokens:,} tokens"),
                          highlight=False)
            self.status()
        elif name == "marks":
            marks = agent.engine.marks()
            console.print(escape(", ".join(marks) if marks else "no restore points yet: /checkpoint NAME"),
                          highlight=False)
        elif name == "summarize":
            agent.request_checkpoint()
            self.turn(None, resume=True)
        elif name == "context":
            self.context()
        elif name == "health":
            console.print(escape(agent.engine.health()), highlight=False)
        elif name == "resume":
            if arg:
                self.end_session(agent)
                agent.engine.session.close()
                self.agent = self._open(Path(arg))
            self.turn(None, resume=True)
        else:
            console.print(escape(f"unknown command /{name}; /help lists them"), style="yellow", highlight=False)
        return True

    def context(self) -> None:
        b = self.agent.context_breakdown()
        console.print(escape(f"{b.headline()} · {b.pressure.replace('_', ' ')}"), style="bold", highlight=False)
        table = Table(show_header=True)
        for column in ("category", "tokens", "window"):
            table.add_column(column, justify="left" if column == "category" else "right")
        for category in b.categories:
            table.add_row(LABELS[category.name], f"{category.tokens:,}", f"{category.percent:.1f}%")
        console.print(table)

    def loop(self) -> None:
        console.print("ctxwin chat: /help for commands, Ctrl-C stops a step, Ctrl-D leaves.", highlight=False)
        self.status()
        while True:
            try:
                line = input("> ").strip()
            except EOFError:
                break
            except KeyboardInterrupt:
                console.print("^C (/quit or Ctrl-D leaves)", highlight=False)
                continue
            if not line:
                continue
            if line.startswith("/"):
                if not self.command(line):
                    break
                continue
            self.turn(line)
        self.end_session(self.agent, wait=CLOSE_WAIT_S)
        self.agent.engine.session.close()

    @staticmethod
    def end_session(agent: Agent, wait: float | None = 0) -> None:
        """A session ends (/new, /resume DIR, leaving): its background sub-agents are stopped; with
        --consolidate its memory is consolidated in the background (waited for up to `wait` seconds, so
        that leaving the chat does not cut it short)."""
        if agent.subagents is not None:  # its background children: stopped, their logs ended, not orphaned
            agent.subagents.close()
        if agent.sleep is not None:
            agent.sleep.session_ended()
            agent.sleep.close(wait)


@app.command("chat")
@handle_errors
def chat(
    base_url: BaseUrlOption = ..., api: ApiOption = "openai", model: ModelOption = None,
    session: Path | None = typer.Option(None, "--session", help="Session folder (default: a new one).",
                                        show_default=False),
    sessions: Path = typer.Option(DEFAULT_ROOT, "--sessions", help="Where new chat sessions go."),
    workspace: WorkspaceOption = Path("."),
    window: int | None = typer.Option(None, "--window", help="Context window in tokens.", show_default=False),
    max_output: MaxOutputOption = None, policy: PolicyOption = "ctxwin",
    max_steps: int = typer.Option(100, "--max-steps", help="Model calls one turn may make."),
    allow_shell: AllowShellOption = False, api_key: ApiKeyOption = None, subagents: SubagentsOption = True,
    stream: StreamOption = True, agents: AgentsOption = None,
    consolidate: bool = typer.Option(False, "--consolidate", help="After each session (/new, /quit), consolidate "
                                     "the workspace's memory into MEMORY.md and memory/wiki/ in the background."),
    consolidate_idle: float | None = typer.Option(None, "--consolidate-idle", min=1, help="Also consolidate after "
                                                  "this many seconds without a turn.", show_default=False),
) -> None:
    """Chat with the agent in the terminal."""
    opts = options(base_url, api, model, session, workspace, window, max_output, policy, max_steps, allow_shell,
                   api_key, subagents, stream, agents)
    if consolidate or consolidate_idle is not None:
        opts.consolidate = SleepConfig(after_session=consolidate, idle_seconds=consolidate_idle)
    Repl(opts, sessions).loop()
