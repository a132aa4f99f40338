"""`ctxwin session mark|rewind|marks SESSION [NAME]`: restore points of a stored session.

`marks` only reads (the session is opened read-only: nothing is created, locked or changed); `mark` and
`rewind` append to an existing session and refuse a folder that holds none (nothing is made there)."""

from __future__ import annotations

import typer

from ctxwin.cli.app import app, console, handle_errors, print_json, visible
from ctxwin.engine import ContextEngine
from ctxwin.store.session import Session

session_app = typer.Typer(help="Restore points of a stored session: mark, list, rewind.", no_args_is_help=True,
                          rich_markup_mode=None)
app.add_typer(session_app, name="session")


def _engine(path: str, policy: str, *, readonly: bool = False) -> ContextEngine:
    return ContextEngine(Session.open(path, readonly=readonly, create=False), policy=policy)


@session_app.command("mark")
@handle_errors
def mark(session: str = typer.Argument(..., help="A stored session folder."),
         name: str = typer.Argument(..., help="The restore point's name."),
         json_output: bool = typer.Option(False, "--json", help="One JSON object.")) -> None:
    """Label the session's current leaf as a restore point."""
    engine = _engine(session, "ctxwin")
    try:
        target = engine.mark(name)
    finally:
        engine.session.close()
    if json_output:
        print_json({"mark": name, "entry": target})
    else:
        console.print(f"restore point [bold]{visible(name)}[/] at entry {target or '(the start)'}", highlight=False)


@session_app.command("marks")
@handle_errors
def marks(session: str = typer.Argument(..., help="A stored session folder."),
          json_output: bool = typer.Option(False, "--json", help="One JSON object.")) -> None:
    """List the session's restore points (on every branch)."""
    engine = _engine(session, "ctxwin", readonly=True)
    try:
        found = engine.marks()
    finally:
        engine.session.close()
    if json_output:
        print_json({"marks": [{"mark": k, "entry": v} for k, v in found.items()]})
        return
    for name, target in found.items():
        console.print(f"{visible(name)}\t{target or '(the start)'}", highlight=False)
    if not found:
        console.print("no restore points yet: ctxwin session mark SESSION NAME", highlight=False)


@session_app.command("rewind")
@handle_errors
def rewind(session: str = typer.Argument(..., help="A stored session folder."),
           name: str = typer.Argument(..., help="The restore point to go back to."),
           policy: str = typer.Option("ctxwin", "--policy", help="Policy used to report the request after it."),
           json_output: bool = typer.Option(False, "--json", help="One JSON object.")) -> None:
    """Continue the session from a restore point, on a new branch; what came after stays on its own."""
    engine = _engine(session, policy)
    try:
        prepared = engine.rewind(name)
        messages = len(engine.messages)
    finally:
        engine.session.close()
    if json_output:
        print_json({"mark": name, "messages": messages, "tokens": prepared.tokens})
    else:
        console.print(f"rewound to [bold]{visible(name)}[/]: {messages} message(s), next request "
                      f"{prepared.tokens:,} tokens", highlight=False)
