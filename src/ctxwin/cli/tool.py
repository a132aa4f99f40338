"""`ctxwin tool NAME [ARGS...] [--root DIR] [--json]`: runs one budgeted tool and prints exactly what
the model would see (`ctxwin.tools.run_tool` plus printing), so a person can try the limits.

Positional arguments fill the tool's main parameters in order (read: PATH; grep: PATTERN [PATH]; ...);
every other parameter is an option: `--offset 2001`, `--glob '*.py'`, `--ignore-case`.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import typer

from ctxwin.cli.app import app, fail, handle_errors, print_json
from ctxwin.errors import InputError

POSITIONAL: dict[str, tuple[str, ...]] = {
    "read": ("path",),
    "grep": ("pattern", "path"),
    "find": ("pattern", "path"),
    "ls": ("path",),
    "shell": ("command",),
    "read_spilled": ("handle",),
    "grep_spilled": ("handle", "pattern"),
    "query_json": ("handle", "expr"),
}


def parse_tool_args(name: str, tokens: list[str]) -> dict[str, Any]:
    """Command-line tokens as the tool's argument object (values stay strings; `run_tool` checks
    and converts them against the schema)."""
    from ctxwin.tools import TOOLS

    spec = TOOLS.get(name)
    if spec is None:
        raise InputError(f"unknown tool {name!r}", f"tools: {', '.join(TOOLS)}")
    properties = spec.parameters["properties"]
    positional = list(POSITIONAL.get(name, ()))
    args: dict[str, Any] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token.startswith("--") and len(token) > 2:
            key, eq, value = token[2:].partition("=")
            key = key.replace("-", "_")
            if key not in properties:
                raise InputError(f"{name} has no option --{key.replace('_', '-')}",
                                 f"its options: {', '.join('--' + p.replace('_', '-') for p in properties)}")
            if not eq:
                if properties[key].get("type") == "boolean":
                    value = "true"
                elif index < len(tokens):
                    value = tokens[index]
                    index += 1
                else:
                    raise InputError(f"--{key.replace('_', '-')} needs a value")
            args[key] = value
            continue
        remaining = [p for p in positional if p not in args]
        if not remaining:
            raise InputError(f"unexpected argument {token!r} for {name}", "give other parameters as --name value")
        args[remaining[0]] = token
    return args


def tool_help(name: str) -> str:
    """The help of one tool, from its schema: its positional arguments, its own options (each with its
    type and description), then the options of `ctxwin tool` itself."""
    from ctxwin.tools import TOOLS

    spec = TOOLS.get(name)
    if spec is None:
        raise InputError(f"unknown tool {name!r}", f"tools: {', '.join(TOOLS)}")
    properties = spec.parameters["properties"]
    required = set(spec.parameters.get("required", ()))
    positional = [p for p in POSITIONAL.get(name, ()) if p in properties]
    usage = " ".join(p.upper() if p in required else f"[{p.upper()}]" for p in positional)
    lines = [f"Usage: ctxwin tool {name} {usage} [OPTIONS]".replace("  ", " "), ""]
    for paragraph in spec.description.splitlines():
        lines += textwrap.wrap(paragraph, HELP_WIDTH, initial_indent="  ",
                               subsequent_indent="    " if paragraph.startswith("- ") else "  ")
    rows = [(p.upper(), properties[p]) for p in positional]
    rows += [(f"--{p.replace('_', '-')}" + ("" if info.get("type") == "boolean" else f" <{info.get('type', 'value')}>"),
              info) for p, info in properties.items() if p not in positional]
    width = max(len(label) for label, _ in rows) + 2 if rows else 0
    lines += ["", "Arguments and options (the tool's own):"]
    for label, info in rows:
        bounds = ", ".join(f"{word} {info[key]}" for key, word in (("minimum", "at least"), ("maximum", "at most"))
                           if key in info)
        text = info.get("description", "").rstrip(".") + (f" ({bounds})." if bounds else ".")
        lines += textwrap.wrap(text, HELP_WIDTH, initial_indent=f"  {label.ljust(width)}",
                               subsequent_indent=" " * (width + 2)) or [f"  {label}"]
    lines += ["", "Options of ctxwin tool:", *(f"  {flag.ljust(18)}{text}" for flag, text in COMMAND_OPTIONS)]
    return "\n".join(lines) + "\n"


HELP_WIDTH = 100  # columns of a tool's help text

COMMAND_OPTIONS = (
    ("--root DIR", "Workspace root (repeatable; default: the current folder)."),
    ("--json", "Print the whole tool output (text, parts, details) as JSON."),
    ("--allow-shell", "Enable the shell tool."),
    ("--blobs DIR", "Blob store folder (shell spill, spilled-output tools)."),
    ("--help", "Show this message and exit (after a tool's name: that tool's own options)."),
)


@app.command(
    "tool",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    help="Run one budgeted tool and print what the model would see.\n\n"
    "Tools: read, grep, find, ls, shell, read_spilled, grep_spilled, query_json. Example: ctxwin tool read FILE "
    "--offset 2001; ctxwin tool read --help lists a tool's own options.",
)
@handle_errors
def tool(
    ctx: typer.Context,
    name: str | None = typer.Argument(None, help="Tool: read, grep, find, ls, shell, read_spilled, grep_spilled, "
                                      "query_json.", show_default=False, metavar="NAME"),
    root: list[Path] = typer.Option(None, "--root", help=COMMAND_OPTIONS[0][1], metavar="DIR"),
    json_out: bool = typer.Option(False, "--json", help=COMMAND_OPTIONS[1][1]),
    allow_shell: bool = typer.Option(False, "--allow-shell", help=COMMAND_OPTIONS[2][1]),
    blobs: Path | None = typer.Option(None, "--blobs", help=COMMAND_OPTIONS[3][1], metavar="DIR"),
    show_help: bool = typer.Option(False, "--help", is_eager=False, help=COMMAND_OPTIONS[4][1]),
) -> None:
    from ctxwin.store.blobs import FileBlobStore
    from ctxwin.tools import Workspace, run_tool

    extra = list(ctx.args)
    if show_help or "--help" in extra or "-h" in extra:  # the help is the tool's once a tool is named
        sys.stdout.write(tool_help(name) if name else ctx.get_help() + "\n")
        return
    if name is None:
        raise InputError("name a tool", "ctxwin tool read FILE; ctxwin tool --help lists them")
    args = parse_tool_args(name, extra)
    workspace = Workspace(
        roots=root or [Path.cwd()], blobs=FileBlobStore(blobs) if blobs else None, allow_shell=allow_shell
    )
    output = run_tool(name, args, workspace)
    # A refusal is only a message and a hint; other errors (a failed command, a query stopped after
    # too many results) carry output worth printing.
    refusal = output.is_error and set(output.details) == {"error"}
    if json_out:
        print_json(output.to_dict())
    elif refusal:
        message, _, hint = output.text.partition("\n")
        fail(message, hint or None, code=2)
    else:
        sys.stdout.write(output.text + "\n")
    if output.is_error:
        raise typer.Exit(2 if "error" in output.details else 1)
