"""`ctxwin tool NAME [ARGS...] [--root DIR] [--json]`: runs one budgeted tool and prints exactly what
the model would see (`ctxwin.tools.run_tool` plus printing), so a person can try the limits.

Positional arguments fill the tool's main parameters in order (read: PATH; grep: PATTERN [PATH]; ...);
every other parameter is an option: `--offset 2001`, `--glob '*.py'`, `--ignore-case`.
"""

from __future__ import annotations

import sys
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


@app.command(
    "tool",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    help="Run a budgeted tool (read, grep, find, ls, shell, read_spilled, grep_spilled, query_json) and print "
    "what the model would see. Example: ctxwin tool read FILE --offset 2001",
)
@handle_errors
def tool(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="Tool: read, grep, find, ls, shell, read_spilled, grep_spilled, query_json."),
    root: list[Path] = typer.Option(None, "--root", help="Workspace root (repeatable; default: the current folder)."),
    json_out: bool = typer.Option(False, "--json", help="Print the whole tool output (text, parts, details) as JSON."),
    allow_shell: bool = typer.Option(False, "--allow-shell", help="Enable the shell tool."),
    blobs: Path | None = typer.Option(None, "--blobs", help="Blob store folder (shell spill, spilled-output tools)."),
) -> None:
    from ctxwin.store.blobs import FileBlobStore
    from ctxwin.tools import Workspace, run_tool

    args = parse_tool_args(name, list(ctx.args))
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
