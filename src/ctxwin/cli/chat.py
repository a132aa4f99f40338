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
from ctxwin.cli.app import app, console, handle_errors, os_error_line, print_table, visible
from ctxwin.cli.run import (
    DEFAULT_TIMEOUT_S,
    AgentsOption,
    AllowShellOption,
    ApiKeyOption,
    ApiOption,
    BaseUrlOption,
    MaxOutputOption,
    MaxStepsOption,
    ModelOption,
    PolicyOption,
    SessionsOption,
    StreamOption,
    SubagentsOption,
    TimeoutOption,
    WorkspaceOption,
    describe,
    new_session_folder,
    options,
)
from ctxwin.errors import CtxwinError
from ctxwin.memory.consolidate.schedule import CLOSE_WAIT_S, SleepConfig
from ctxwin.store import DEFAULT_ROOT
from ctxwin.tokens.breakdown import LABELS

# (command, arguments, what it does): /help prints this, aligned; the dispatcher below follows it.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("/compact", "[focus]", "compact the history now (optionally focused on a topic)"),
    ("/new", "", "start a new session (the current one stays on disk)"),
    ("/checkpoint", "[name]", "make a restore point here (OpenClaw's /checkpoint)"),
    ("/rewind", "[name]", "go back to a restore point (the latest without a name); what came after stays"),
    ("/marks", "", "list the restore points"),
    ("/summarize", "", "ask the agent to write its state summary now (Alyx's checkpoint)"),
    ("/context", "", "where the tokens of the next request go"),
    ("/health", "", "one line: context use and what is due"),
    ("/resume", "[DIR]", "continue a stopped turn, or open the session in DIR and continue it"),
    ("/help", "", "this list"),
    ("/quit", "", "leave (Ctrl-D too)"),
)


def help_text() -> str:
    """The commands in two aligned columns (plain text: `[focus]` is not markup)."""
    usage = [f"{name} {args}".rstrip() for name, args, _ in COMMANDS]
    width = max(map(len, usage)) + 2
    return "Commands:\n" + "\n".join(f"  {u.ljust(width)}{what}" for u, (_, _, what) in zip(usage, COMMANDS,
                                                                                           strict=True))


class Repl:
    """The chat's state: the options, the agent, and what to print."""

    def __init__(self, opts: Any, sessions: Path) -> None:
        self.opts = opts
        self.sessions = sessions
        self.streamed = False  # a streamed answer is being printed
        self.answered = False  # this turn's final answer was streamed to the screen
        self.manual_compactions = 0  # /compact runs that compacted, for the status line
        self.agent: Agent = self._open(opts.session or new_session_folder(sessions, "chat"))

    def _open(self, folder: Path, *, create: bool = True) -> Agent:
        agent = self.opts.build(self.show, session=folder, create=create)
        self.folder = folder
        self.manual_compactions = 0
        console.print(f"session {visible(str(folder))} ({len(agent.engine.messages)} messages)", highlight=False)
        return agent

    def _switch(self, folder: Path, *, create: bool = True) -> None:
        """Open the session in `folder`, then end and close the current one (kept when the new one cannot be
        opened)."""
        old = self.agent
        self.agent = self._open(folder, create=create)
        if old.sleep is not None and self.agent.sleep is not None and old.sleep.config == self.agent.sleep.config:
            # One sleep-time worker for the whole chat: its runs follow each other, so the run for the
            # session ending here never finds the previous one holding the lock (and skips it).
            self.agent.sleep.close(0)
            self.agent.sleep, old.sleep = old.sleep, None
            self.agent.sleep.session_ended()
        self.end_session(old)
        old.engine.session.close()

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
        """The line after each turn: the same numbers as /context (one breakdown of the next request)."""
        b = self.agent.context_breakdown()
        compactions = self.agent.stats.compactions + self.manual_compactions
        console.print(escape(f"[{b.headline()} — {b.pressure.replace('_', ' ')} · {compactions} compaction"
                             f"{'' if compactions == 1 else 's'} · {self.folder.name}]"), style="bold cyan",
                      highlight=False)

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
        """Run a /command; False to leave. A command that fails says why; the chat goes on."""
        name, _, arg = line[1:].partition(" ")
        try:
            return self._command(name, arg.strip())
        except CtxwinError as error:
            console.print(f"[red]error:[/] {visible(error.message)}", highlight=False)
            if error.hint:
                console.print(f"  {visible(error.hint)}", highlight=False)
        except OSError as error:
            console.print(f"[red]error:[/] {visible(os_error_line(error))}", highlight=False)
        return True

    def _command(self, name: str, arg: str) -> bool:
        agent = self.agent
        if name in ("quit", "exit", "q"):
            return False
        if name == "help":
            console.print(help_text(), markup=False, highlight=False)
        elif name == "compact":
            before = agent.engine.prepare().tokens
            after = agent.engine.compact(arg or None)
            if any(e.is_compaction for e in after.events):
                self.manual_compactions += 1
                console.print(f"compacted: {before:,} -> {after.tokens:,} tokens", highlight=False)
            else:
                reason = next((e.reason for e in after.events if e.is_compaction_failure or e.is_checkpoint_request),
                              "nothing to do")
                console.print(f"not compacted ({before:,} tokens): {visible(reason)}", style="yellow", highlight=False)
            self.status()
        elif name == "new":
            self._switch(new_session_folder(self.sessions, "chat"))
            self.status()
        elif name == "checkpoint":
            marks = agent.engine.marks()
            n = len(marks) + 1
            while not arg and f"checkpoint-{n}" in marks:
                n += 1
            label = arg or f"checkpoint-{n}"
            agent.engine.mark(label)
            console.print(f"restore point {visible(repr(label))} made; /rewind {visible(label)} comes back here",
                          highlight=False)
        elif name == "rewind":
            marks = agent.engine.marks()
            if not arg and not marks:
                console.print("no restore points yet: /checkpoint NAME makes one", style="yellow", highlight=False)
                return True
            label = arg or list(marks)[-1]
            prepared = agent.engine.rewind(label)
            console.print(f"rewound to {visible(repr(label))}: the next request is {prepared.tokens:,} tokens",
                          highlight=False)
            self.status()
        elif name == "marks":
            marks = agent.engine.marks()
            console.print(visible(", ".join(marks)) if marks else "no restore points yet: /checkpoint NAME",
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
                self._switch(Path(arg), create=False)  # an existing session only: nothing is made at a typo
            self.turn(None, resume=True)
        else:
            console.print(f"unknown command /{visible(name)}; /help lists them", style="yellow", highlight=False)
        return True

    def context(self) -> None:
        b = self.agent.context_breakdown()
        console.print(escape(f"{b.headline()} — {b.pressure.replace('_', ' ')}"), style="bold", highlight=False)
        table = Table(show_header=True)
        for column in ("category", "tokens", "window"):
            table.add_column(column, justify="left" if column == "category" else "right")
        for category in b.categories:
            table.add_row(LABELS[category.name], f"{category.tokens:,}", f"{category.percent:.1f}%")
        print_table(table)

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
        self.opts.close()

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
    base_url: BaseUrlOption, api: ApiOption = "openai", model: ModelOption = None,
    session: Path | None = typer.Option(None, "--session", help="Session folder (default: a new one).",
                                        show_default=False),
    sessions: SessionsOption = DEFAULT_ROOT,
    workspace: WorkspaceOption = Path("."),
    window: int | None = typer.Option(None, "--window", help="Context window in tokens.", show_default=False),
    max_output: MaxOutputOption = None, policy: PolicyOption = "ctxwin",
    max_steps: MaxStepsOption = 100,
    allow_shell: AllowShellOption = False, api_key: ApiKeyOption = None, subagents: SubagentsOption = True,
    stream: StreamOption = True, agents: AgentsOption = None, timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    consolidate: bool = typer.Option(False, "--consolidate", help="After each session (/new, /quit), consolidate "
                                     "the workspace's memory into MEMORY.md and memory/wiki/ in the background."),
    consolidate_idle: float | None = typer.Option(None, "--consolidate-idle", min=1, help="Also consolidate after "
                                                  "this many seconds without a turn.", show_default=False),
) -> None:
    """Chat with the agent in the terminal."""
    opts = options(base_url, api, model, session, workspace, window, max_output, policy, max_steps, allow_shell,
                   api_key, subagents, stream, agents, timeout)
    if consolidate or consolidate_idle is not None:
        opts.consolidate = SleepConfig(after_session=consolidate, idle_seconds=consolidate_idle)
    opts.check()  # before a session folder is made for the chat
    Repl(opts, sessions).loop()
