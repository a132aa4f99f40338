"""`ctxwin run "TASK"`: the agent loop headless, on any OpenAI- or Anthropic-compatible endpoint. A thin
wrapper over `ctxwin.agent.create_agent(...).run(task)`: it prints each loop event (or, with `--json`,
one JSON event a line), then the run's totals over the agent and its sub-agents (with `--json`, the
last line). Ctrl-C (SIGINT) once interrupts the run and every sub-agent, answering what is open, and
prints the totals; twice exits at once (the log is valid either way: `--resume` continues it)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from ctxwin import telemetry
from ctxwin.agent import Agent, AgentConfig, AgentDefinition, HttpModel, LoopEvent, create_agent, load_definitions
from ctxwin.agent.subagents import SubAgents
from ctxwin.cli.app import app, console, err_console, handle_errors
from ctxwin.errors import InputError
from ctxwin.memory.consolidate.schedule import SleepConfig
from ctxwin.providers import APIS, client_for
from ctxwin.store import DEFAULT_ROOT, Session
from ctxwin.tools import Workspace

SUMMARY_KEYS = ("turns", "model_calls", "compactions", "compactions_inside_tool_loops", "overflows_recovered",
                "max_request_tokens", "window", "errors")


# The options `run` and `chat` share, declared once (each command gives its own default where they differ).
BaseUrlOption = Annotated[str, typer.Option("--base-url", help="The endpoint (OpenAI: with /v1; Anthropic: without).")]
ApiOption = Annotated[str, typer.Option("--api", help=f"Its API: {', '.join(APIS)}.")]
ModelOption = Annotated[str | None, typer.Option("--model", "-m", help="Model name (default per API).",
                                                 show_default=False)]
WorkspaceOption = Annotated[Path, typer.Option("--workspace", help="Where the tools work.")]
MaxOutputOption = Annotated[int | None, typer.Option("--max-output", help="Output cap in tokens.", show_default=False)]
PolicyOption = Annotated[str, typer.Option("--policy", help="Policy preset or TOML file.")]
AllowShellOption = Annotated[bool, typer.Option("--allow-shell", help="Offer the shell tool.")]
ApiKeyOption = Annotated[str | None, typer.Option(
    "--api-key", help="Key (default: ANTHROPIC_API_KEY / OPENAI_API_KEY).", show_default=False)]
SubagentsOption = Annotated[bool, typer.Option("--subagents/--no-subagents", help="Offer the task tool.")]
StreamOption = Annotated[bool, typer.Option("--stream/--no-stream", help="Stream the model's answers (SSE).")]
SessionsOption = Annotated[Path, typer.Option("--sessions", help="Where new sessions go (each in a folder of its "
                                              "own) when --session is not given.")]
TimeoutOption = Annotated[float, typer.Option(
    "--timeout", min=0.1, help="Seconds to wait for the endpoint to connect, and for each read of its answer (a "
    "server that stops sending is given up on after this long).")]
MaxStepsOption = Annotated[int, typer.Option("--max-steps", min=1, help="Model calls one turn may make.")]
MaxCostOption = Annotated[float | None, typer.Option(
    "--max-cost-usd", min=0, show_default=False,
    help="Stop once the run and its sub-agents have spent this many US dollars (needs --price).")]
PriceOption = Annotated[str | None, typer.Option(
    "--price", show_default=False, metavar="IN,OUT",
    help="The model's price in US dollars per million input and output tokens, e.g. 3,15.")]

DEFAULT_TIMEOUT_S = 60.0  # a read that waits longer is a stalled server, not a slow model: answers stream, and
# a non-streamed answer of a few thousand tokens comes back well inside a minute on the usual endpoints
AgentsOption = Annotated[Path | None, typer.Option(
    "--agents", help="A folder of agent definitions for the task tool (Claude Code's .claude/agents/*.md format).",
    show_default=False)]
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a process Ctrl-C stopped


@dataclass
class AgentOptions:
    """What `run` and `chat` share: where the model is, where the session and workspace are."""

    base_url: str
    api: str
    model: str
    session: Path | None
    workspace: Path
    window: int | None
    max_output: int | None
    policy: str
    max_steps: int
    allow_shell: bool
    api_key: str | None
    subagents: bool
    stream: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    agents: Path | None = None
    consolidate: SleepConfig | None = None  # sleep-time consolidation of the workspace's memory (chat)
    max_cost_usd: float | None = None  # over the agent and its sub-agents
    price: tuple[float, float] = (0.0, 0.0)  # USD per million input, output tokens
    clients: list[Any] = field(default_factory=list)  # the HTTP clients built, for close()

    def check(self) -> None:
        """Refuses what would fail once the agent is built (before anything is made on disk)."""
        if self.api not in APIS:
            raise InputError(f"unknown --api {self.api!r}", f"use one of {', '.join(APIS)}")
        if not self.workspace.is_dir():
            raise InputError(f"workspace {self.workspace} is not a folder", "give --workspace an existing folder")
        if not self.base_url.startswith(("http://", "https://")):  # (client_for says the same, once it is built)
            raise InputError(f"base URL {self.base_url!r} is not an http(s) URL", "pass e.g. http://127.0.0.1:8000/v1")
        if self.agents is not None:
            load_definitions(self.agents)  # a bad --agents folder is refused here too, before a session is made

    def build(self, on_event: Any, session: Path | None = None, *, create: bool = True) -> Agent:
        """The agent, on the session in `session` (or the options' own), made there unless `create` is false."""
        self.check()
        definitions = agent_definitions(self.agents) if self.agents is not None else []
        folder = session or self.session
        log = Session.open(folder, create=create, meta=self.session_meta()) if folder is not None else None
        client = client_for(self.api, self.base_url, self.model, api_key=self.api_key,  # type: ignore[arg-type]  # check() took api from APIS
                            timeout=self.timeout)
        self.clients.append(client)
        model = HttpModel(client, stream=self.stream)
        ws = Workspace([self.workspace], allow_shell=self.allow_shell, model=self.model,
                       blobs=log.blobs if log is not None else None)
        def other_model(name: str) -> HttpModel:  # an isolated sub-agent on another model of the same endpoint
            other = client_for(self.api, self.base_url, name, api_key=self.api_key,  # type: ignore[arg-type]  # check() took api from APIS
                               timeout=self.timeout)
            self.clients.append(other)
            return HttpModel(other, stream=self.stream)

        children = Path(folder).parent / "children" if folder else None
        # Persistent agents live with the workspace they work on, whatever session calls them.
        tools = SubAgents(definitions=definitions, sessions_root=children, models=other_model,
                          state_root=self.workspace / ".ctxwin" / "agents") if self.subagents else None
        config = AgentConfig(max_steps=self.max_steps, consolidate=self.consolidate, max_cost_usd=self.max_cost_usd,
                             input_usd_per_mtok=self.price[0], output_usd_per_mtok=self.price[1])
        agent = create_agent(model, session=log, workspace=ws, config=config,
                             policy=self.policy, window=self.window, max_output=self.max_output,
                             extra_tools=tools.tools() if tools else [], on_event=on_event)
        if tools is not None:
            tools.attach(agent)
        telemetry.instrument_agent(agent)  # spans when CTXWIN_OTEL=1 (or the app's provider); else nothing
        return agent

    def close(self) -> None:
        """Closes the HTTP clients `build` made (their connection pools)."""
        while self.clients:
            self.clients.pop().close()

    def session_meta(self) -> dict[str, Any]:
        """What a new session's header records of the run (read back by `ctxwin inspect` and the others);
        never the key, nor the endpoint (a URL can carry credentials)."""
        return {"model": self.model, "api": self.api, "window": self.window, "policy": self.policy,
                "workspace": str(self.workspace.resolve())}


def options(base_url: str, api: str, model: str | None, session: Path | None, workspace: Path, window: int | None,
            max_output: int | None, policy: str, max_steps: int, allow_shell: bool, api_key: str | None,
            subagents: bool, stream: bool = False, agents: Path | None = None,
            timeout: float = DEFAULT_TIMEOUT_S) -> AgentOptions:
    default = "claude-sonnet-4-5" if api == "anthropic" else "gpt-4o"
    return AgentOptions(base_url, api, model or default, session, workspace, window, max_output, policy, max_steps,
                        allow_shell, api_key, subagents, stream, timeout, agents)


def parse_price(text: str | None, max_cost_usd: float | None) -> tuple[float, float]:
    """`--price IN,OUT` as (input, output) US dollars per million tokens; a cost limit needs one, since
    the registry knows no prices (without it every call would cost nothing and the limit never stop)."""
    if text is None:
        if max_cost_usd is not None:
            raise InputError("--max-cost-usd needs --price IN,OUT to count what calls cost",
                             "e.g. --price 3,15 (USD per million input and output tokens)")
        return 0.0, 0.0
    parts = text.split(",")
    try:
        prices = tuple(float(part) for part in parts)
    except ValueError:
        prices = ()
    if len(prices) != 2 or not all(0 <= p < float("inf") for p in prices):
        raise InputError(f"--price {text!r} is not two prices IN,OUT", "e.g. --price 3,15 (USD per million tokens)")
    return prices[0], prices[1]


def new_session_folder(root: Path, prefix: str) -> Path:
    """A new, empty session folder `root/<prefix>-NNNN`, made here (two runs started at once never get
    the same one)."""
    n = 1
    while True:
        folder = root / f"{prefix}-{n:04d}"
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            n += 1
            continue
        except OSError as error:
            raise InputError(f"cannot make a session folder in {root}: {error.strerror or error}",
                             "give --sessions a folder you can write to, or --session DIR") from None
        return folder


def agent_definitions(folder: Path) -> list[AgentDefinition]:
    """`--agents DIR`: the definitions, with what loading left out said on stderr (never on stdout,
    which `--json` keeps to events)."""
    definitions = load_definitions(folder)
    for definition in definitions:
        for note in definition.notes:
            err_console.print(escape(f"agents: {definition.source}: {note}"), style="yellow", highlight=False)
    return definitions


@contextlib.contextmanager
def sigint_interrupts(agent: Agent) -> Iterator[None]:
    """While the run goes: the first SIGINT interrupts it (the agent and every sub-agent stop, the open
    calls are answered, the run returns `interrupted`); the second exits at once, with what the log
    has acknowledged kept (every append is durable when it returns) and nothing waited for."""
    hits = [0]

    def on_sigint(signum: int, frame: Any) -> None:
        hits[0] += 1
        if hits[0] > 1:
            os.write(2, b"ctxwin: interrupted again: exiting now (the session resumes with --resume)\n")
            os._exit(EXIT_INTERRUPTED)
        os.write(2, b"ctxwin: interrupting (Ctrl-C again exits at once)\n")
        agent.interrupt()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def describe(event: LoopEvent) -> str | None:
    """One line for a person, or None for events not worth a line (a sub-agent's named by its id)."""
    line = _line(event)
    return f"[{event.agent}] {line.lstrip()}" if line is not None and event.agent else line


def _line(event: LoopEvent) -> str | None:
    d = event.data
    if event.kind == "model_call":
        return f"step {event.step}: calling the model ({d['tokens']:,} / {d['budget']:,} tokens)"
    if event.kind == "assistant":
        calls = f" -> {', '.join(d['tool_calls'])}" if d["tool_calls"] else ""
        return f"step {event.step}: {d['text'][:200]}{calls}"
    if event.kind == "tool_result":
        return f"  {d['name']}: {d['chars']:,} chars" + (" (error)" if d["is_error"] else "")
    if event.kind == "pipeline" and event.event is not None:
        e = event.event
        if e.is_compaction_failure:  # a skip (nothing to do, too little gain) or a failed summary: the reason says
            return f"  [compaction not done] {e.reason}"
        where = " inside the tool loop" if d.get("inside_tool_loop") else ""
        return f"  [{e.stage} {e.action}{where}] {e.tokens_before:,} -> {e.tokens_after:,} tokens: {e.reason}"
    if event.kind == "interrupted":
        return "  interrupted (Ctrl-C): the model call and the tools running now were stopped" + (
            ": " + ", ".join(f"{k}={v}" for k, v in d.items()) if d else "")
    if event.kind in ("retry", "overflow", "error", "limit", "subagent"):
        return f"  {event.kind}: " + (", ".join(f"{k}={v}" for k, v in d.items()) or "(no details)")
    return None


def summary(agent: Agent, stop: str) -> dict[str, Any]:
    """The run's totals over the agent and its sub-agents (one row each under `agents`)."""
    return {**agent.totals(), "stop": stop}


@app.command("run")
@handle_errors
def run(
    base_url: BaseUrlOption,  # first: a required option can have no default only before those that do
    task: str | None = typer.Argument(None, help="What the agent should do (omit with --resume).", show_default=False),
    api: ApiOption = "openai", model: ModelOption = None,
    session: Path | None = typer.Option(None, "--session", help="Session folder to log to (and resume from; "
                                        "default: a new one under --sessions).", show_default=False),
    sessions: SessionsOption = DEFAULT_ROOT,
    workspace: WorkspaceOption = Path("."),
    window: int | None = typer.Option(None, "--window", help="Context window in tokens (default: the registry's).",
                                      show_default=False),
    max_output: MaxOutputOption = None, policy: PolicyOption = "ctxwin",
    max_steps: MaxStepsOption = 100, max_cost_usd: MaxCostOption = None, price: PriceOption = None,
    allow_shell: AllowShellOption = False, api_key: ApiKeyOption = None, subagents: SubagentsOption = True,
    stream: StreamOption = False, agents: AgentsOption = None, timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    resume: bool = typer.Option(False, "--resume", help="Continue the session from its last message."),
    as_json: bool = typer.Option(False, "--json", help="One JSON event a line; the totals on the last line."),
) -> None:
    """Run the agent loop on TASK headless, printing what it does."""
    if task is None and not resume:
        raise InputError("give a TASK, or --resume with --session", 'ctxwin run "fix the failing test" --base-url ...')
    if resume and session is None:
        raise InputError("--resume needs --session DIR", "give the session folder of the run to continue")

    def show(event: LoopEvent) -> None:
        if as_json:
            sys.stdout.write(json.dumps(event.to_dict(), ensure_ascii=False, default=str) + "\n")
            sys.stdout.flush()
            return
        line = describe(event)
        if line:
            console.print(escape(line), highlight=False)

    opts = options(base_url, api, model, session, workspace, window, max_output, policy, max_steps, allow_shell,
                   api_key, subagents, stream, agents, timeout)
    opts.max_cost_usd, opts.price = max_cost_usd, parse_price(price, max_cost_usd)
    opts.check()  # before a session folder is made for the run
    folder = opts.session = session if session is not None else new_session_folder(sessions, "run")
    agent = opts.build(show)
    if not as_json:
        console.print(escape(f"session {folder}"), highlight=False, soft_wrap=True)
    try:
        with sigint_interrupts(agent):
            try:
                result = agent.resume() if resume and task is None else agent.run(task)
            finally:
                if agent.subagents is not None:  # background children the run leaves (a limit): stopped
                    agent.subagents.close()
        stop = result.stop if result is not None else "nothing_to_resume"
    finally:
        agent.engine.session.close()
        opts.close()
    totals = summary(agent, stop) | {"session": str(folder)}
    if as_json:
        sys.stdout.write(json.dumps(totals, ensure_ascii=False) + "\n")
    else:
        console.print(escape(f"{stop}: " + ", ".join(f"{k} {totals[k]}" for k in SUMMARY_KEYS if k != "errors")),
                      highlight=False)
        for error in totals["errors"]:
            console.print(escape(f"error: {error}"), highlight=False)
        console.print(escape(f"the session is in {folder}: ctxwin inspect {folder} shows it; ctxwin run --resume "
                             f"--session {folder} ... continues it"), highlight=False, soft_wrap=True)
    if stop == "error":
        raise typer.Exit(1)
    if stop == "interrupted":
        raise typer.Exit(EXIT_INTERRUPTED)
