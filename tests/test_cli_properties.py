"""A hypothesis property over the whole command line: any command with any mix of its own options,
values of the wrong kind, unknown options and stray arguments ends with a message and an exit code,
never a traceback; and a bad argument (an unknown option, a number that is not one, a file that is
not there) is exit 2."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ctxwin.cli.main import COMMANDS, app

EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "ctxwin" / "examples" / "claude-code-session.jsonl"
# Commands that serve, run the long demo or call a model: drawn only with a bad argument, which must stop
# them before they start.
LONG_RUNNING = {("proxy",), ("mcp",), ("demo",), ("run",), ("chat",)}
NEVER_DRAWN = {"--allow-shell", "--help", "--version", "--http", "--listen", "--workers"}  # no shell, no servers
runner = CliRunner()


def leaves() -> list[tuple[tuple[str, ...], Any]]:
    root = typer.main.get_command(app)
    found: list[tuple[tuple[str, ...], Any]] = []

    def walk(command: Any, words: tuple[str, ...]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name in subs:
                walk(subs[name], (*words, name))
        else:
            found.append((words, command))

    for name in COMMANDS:
        walk(root.get_command(None, name), (name,))
    return found


LEAVES = leaves()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("cli-world")
    small = base / "small.jsonl"
    small.write_text("\n".join(EXAMPLE.read_text().splitlines()[:12]) + "\n")
    (base / "empty").mkdir()
    (base / "notes.txt").write_text("hello\n")
    return {"small": small, "folder": base / "empty", "text": base / "notes.txt", "missing": base / "missing.jsonl",
            "base": base}


def values(world: dict[str, Path]) -> st.SearchStrategy[str]:
    return st.sampled_from([
        "0", "1", "-1", "3", "1e9", "abc", "", " ", "yesterday", "2026-01-02", "ctxwin", "pi:aggressive",
        "nosuchpolicy", "raw,ctxwin", "openai", "anthropic", "json", "\x1b[31m", "ü∂", "--", "-", "x" * 300,
        str(world["small"]), str(world["folder"]), str(world["text"]), str(world["missing"]), str(EXAMPLE),
    ])


def option_names(command: Any) -> list[tuple[str, bool, str]]:
    """(name, takes_a_value, type name) for each option of `command` the property may draw."""
    out = []
    for param in command.params:
        if param.param_type_name != "option":
            continue
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("--") and name not in NEVER_DRAWN:
                out.append((name, not param.is_flag, param.bare_type()))
    return out


def option_places(args: list[str], start: int, valued: set[str]) -> tuple[list[int], int]:
    """Where an option may be inserted into `args` (from `start`, never between an option and its value),
    and where the options end: the first `--` that is no option's value, or the end."""
    places, n = [start], start
    while n < len(args):
        if args[n] == "--":
            return places, n
        n += 2 if args[n] in valued else 1
        places.append(min(n, len(args)))
    return places, len(args)


@st.composite
def invocations(draw: st.DrawFn, world: dict[str, Path]) -> tuple[list[str], str | None]:
    """A command line and, when it holds one, the bad argument that must make it exit 2."""
    words, command = draw(st.sampled_from(LEAVES))
    args = list(words)
    options = option_names(command)
    for param in command.params:  # the command's own arguments, mostly of the right kind
        if param.param_type_name == "argument" and draw(st.integers(0, 9)) > 0:
            good = st.sampled_from([str(world["small"]), str(EXAMPLE)]) if param.type_descriptor.is_path else \
                st.sampled_from(["read", "grep", "staging", "before", "x"])
            args.append(draw(st.one_of(good, values(world))))
    for _ in range(draw(st.integers(0, 4))):
        if options:
            name, takes_value, _type = draw(st.sampled_from(options))
            args += [name, draw(values(world))] if takes_value else [name]
    if draw(st.integers(0, 4)) == 0:
        args += draw(st.lists(values(world), max_size=2))  # stray arguments now and then
    bad = draw(st.sampled_from([None, None, None, "unknown", "number", "missing"]))
    if words in LONG_RUNNING and bad is None:
        bad = "unknown"
    numbers = [name for name, takes_value, kind in options if takes_value and kind in ("int", "float")]
    if bad == "number" and not numbers:
        bad = "unknown"
    valued = {name for name, takes_value, _ in options if takes_value}
    places, stop = option_places(args, len(words), valued)
    if bad == "unknown":
        # Anywhere an option may stand: not as the value of the option before it, nor after a `--`.
        args.insert(draw(st.sampled_from(places)), "--no-such-option")
    elif bad == "number":
        # Last, before any `--`: a repeated option keeps its last value, so an earlier bad one would not count.
        args[stop:stop] = [draw(st.sampled_from(numbers)), "twelve"]
    elif bad == "missing":
        first = command.params and next((p for p in command.params if p.param_type_name == "argument"), None)
        if first is None or words == ("tool",):
            bad = "unknown"
            args.insert(len(words), "--no-such-option")
        else:
            args = [*words, str(world["missing"]), *args[len(words):]]
            bad = "missing" if first.type_descriptor.is_path else None
    return args, bad


EXAMPLES = int(os.environ.get("CTXWIN_CLI_EXAMPLES", "60"))  # 800 ran clean; CI may raise it


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_command_line_ends_in_a_message_not_a_traceback(world: dict[str, Path], data: st.DataObject,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    args, bad = data.draw(invocations(world))
    cwd = tmp_path_factory.mktemp("cwd")  # what a command writes by default (.ctxwin/, report.html) goes here
    shutil.copy(world["small"], cwd / "small.jsonl")
    here = os.getcwd()
    os.chdir(cwd)
    try:
        result = runner.invoke(app, args, input="")
    finally:
        os.chdir(here)
    shown = repr(args)
    event(f"exit {result.exit_code}{' (bad argument)' if bad else ''}")
    event(f"command {args[0]}")
    assert result.exception is None or isinstance(result.exception, SystemExit), (shown, result.exception)
    assert "Traceback" not in result.output, (shown, result.output)
    assert result.exit_code in (0, 1, 2, 3), (shown, result.exit_code, result.output)
    if bad is not None:
        assert result.exit_code == 2, (shown, bad, result.output)
