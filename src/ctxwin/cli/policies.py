"""`ctxwin policies [--show NAME]`: the presets, or one of them as TOML."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from ctxwin import policy as policies
from ctxwin.cli.app import app, console, handle_errors, print_json


@app.command("policies")
@handle_errors
def policies_command(
    show: str = typer.Option(None, "--show", help="Print this preset (or a .toml file) as TOML, fields commented."),
    json_output: bool = typer.Option(False, "--json", help="One JSON object: the presets, or the policy shown."),
) -> None:
    """List the policy presets, or print one as TOML."""
    if show:
        policy = policies.get(show)
        if json_output:
            print_json(policy.model_dump())
        else:
            sys.stdout.write(policies.to_toml(policy))  # verbatim: a console would wrap long lines
        return
    rows = [(name, policies.get(name).description) for name in policies.names()]
    if json_output:
        print_json({"policies": [{"name": n, "description": d} for n, d in rows]})
        return
    table = Table("policy", "what it does", title="Policies (ctxwin policies --show NAME prints one as TOML)")
    for name, description in rows:
        table.add_row(name, description)
    console.print(table)
