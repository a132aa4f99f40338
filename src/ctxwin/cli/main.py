"""Entry point of the `ctxwin` command.

Each command lives in its own module of this package and registers itself on the shared app
(`ctxwin.cli.app.app`) when imported. The root below lists every command from `COMMANDS` without
importing any of them, and imports a command's module only when that command runs or shows its help:
`ctxwin --help` and a light command start without loading what the others need
(`tests/test_cli_startup.py` keeps it so).
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any, NamedTuple

import typer
from typer.core import TyperGroup

from ctxwin.cli import app as _app


class Command(NamedTuple):
    module: str  # the module of this package that registers it
    summary: str  # its help's first sentence, shown by `ctxwin --help` (a test keeps them equal)


COMMANDS: dict[str, Command] = {
    "demo": Command("demo", "Run the main job on ctxwin's own source: a realistic long session, replayed under every "
                    "policy."),
    "run": Command("run", "Run the agent loop on TASK headless, printing what it does."),
    "chat": Command("chat", "Chat with the agent in the terminal."),
    "inspect": Command("inspect", "Show where a session's tokens go: per role, per tool, the largest tool results, the "
                       "recorded compactions."),
    "health": Command("health", "Show where the tokens of the context a session would send next go, and the pressure "
                      "level."),
    "replay": Command("replay", "Replay a real session under a policy: tokens sent and cached at every model call, "
                      "events, cost."),
    "eval": Command("evaluate", "Evaluate policies on real sessions: probe retention, needles."),
    "report": Command("report", "Write one self-contained HTML report: token timelines, the policy comparison, "
                      "retention by probe type."),
    "compact": Command("compact", "Compact now, like /compact: summarize the older history, keep the recent tail."),
    "session": Command("session", "Restore points of a stored session: mark, list, rewind."),
    "memory": Command("memory", "The workspace's memory: index it, show it, search it."),
    "search": Command("memory", "Search every message of a session, the ones compaction or masking took out of the "
                      "view included."),
    "tool": Command("tool", "Run one budgeted tool and print what the model would see."),
    "import": Command("store", "Import a transcript as a session: its messages, its recorded compactions, its "
                      "sub-agent conversations."),
    "sessions": Command("store", "List the stored sessions: size, entries, last activity, and what is wrong with any."),
    "proxy": Command("proxy", "Serve Anthropic- and OpenAI-compatible endpoints that manage the context of the "
                     "traffic they forward."),
    "mcp": Command("mcp", "Serve ctxwin's tools, recall and memory to any MCP client, over stdio or streamable HTTP."),
    "policies": Command("policies", "List the policy presets and their levels, or print one as TOML."),
}


class LazyCommands(TyperGroup):
    """The root group: commands by name from `COMMANDS`, each built from its module on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        importlib.import_module(f"ctxwin.cli.{entry.module}")
        command = typer.main.get_group(_app.app).commands.get(cmd_name)
        if command is not None:
            _name_arguments(command)
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        """The listing from the summaries alone: `ctxwin --help` imports no command."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, command.summary) for name, command in COMMANDS.items()])


def _name_arguments(command: Any) -> None:
    """Arguments named in capitals in usage lines and help (`FILE`, `SESSION NAME`), as options'
    values are; typer would show `{file}`."""
    for param in command.params:
        if param.param_type_name == "argument" and param.metavar is None and param.name:
            param.metavar = param.name.upper()
    for sub in getattr(command, "commands", {}).values():
        _name_arguments(sub)


def _version(value: bool) -> None:
    if value:
        from ctxwin import __version__

        sys.stdout.write(f"ctxwin {__version__}\n")
        raise typer.Exit()


app = typer.Typer(name="ctxwin", cls=LazyCommands, help=_app.HELP, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None)


@app.callback()
def root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print ctxwin's version and exit.")) -> None:
    """Manage, inspect and replay the context window of LLM agents."""


def main() -> None:
    """Runs the app; output that could not be written when it is flushed at the end (stdout on a full
    disk) is one line and a non-zero exit, not the interpreter's "Exception ignored" traceback."""
    code: int | str | None = 0
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code
    failed = _app.flush_stdout_or_fail(report=not code)
    # Everything is written and closed: the objects left need no collector pass at exit, which took
    # 0.3-0.6 s after a `ctxwin run` (a heap of messages, counters and parsed sessions); their memory
    # goes back with the process.
    gc.freeze()
    sys.exit(failed if failed is not None and not code else code)


if __name__ == "__main__":
    main()
