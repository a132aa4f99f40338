"""`ctxwin policies [--show NAME]`: the presets, or one of them as TOML."""

from __future__ import annotations

import sys

import typer

from ctxwin import policies
from ctxwin.cli.app import app, console, err_console, handle_errors, print_json, print_table
from ctxwin.policies.levels import LEVELS


@app.command("policies")
@handle_errors
def policies_command(
    show: str = typer.Option(None, "--show", help="Print this preset (or a .toml file) as TOML, fields commented."),
    from_openclaw: str = typer.Option(None, "--from-openclaw", metavar="FILE",
                                      help="Read an OpenClaw config (JSON or YAML) into a ctxwin policy, as TOML."),
    json_output: bool = typer.Option(False, "--json", help="One JSON object: the presets, or the policy shown."),
) -> None:
    """List the policy presets and their levels, or print one as TOML.

    `NAME:aggressive|balanced|conservative` is a strategy level on top of a preset."""
    if from_openclaw:
        imported = policies.openclaw_file(from_openclaw)
        if json_output:
            print_json({"policy": imported.policy.model_dump(), "unmapped": imported.unmapped})
            return
        sys.stdout.write(policies.to_toml(imported.policy))
        for key, why in imported.unmapped.items():
            err_console.print(f"[yellow]not mapped:[/] {key}: {why}", highlight=False, soft_wrap=True)
        return
    if show:
        policy = policies.get(show)
        if json_output:
            print_json(policy.model_dump())
        else:
            sys.stdout.write(policies.to_toml(policy))  # verbatim: a console would wrap long lines
        return
    rows = [(name, policies.get(name).description) for name in policies.names()]
    if json_output:
        print_json({"policies": [{"name": n, "description": d} for n, d in rows], "levels": list(LEVELS)})
        return
    from rich.table import Table  # only for a person: --json and the TOML need no table

    table = Table("policy", "what it does", title="Policies (ctxwin policies --show NAME prints one as TOML)")
    for name, description in rows:
        table.add_row(name, description)
    print_table(table)
    console.print("Levels on top of any preset: NAME:aggressive (compact earlier, keep half the recent tail) and "
                  "NAME:conservative (later, twice the tail); NAME:balanced is the preset itself. For example "
                  "--policy pi:aggressive, or ctxwin policies --show ctxwin:conservative.", highlight=False)
