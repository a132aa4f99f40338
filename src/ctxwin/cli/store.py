"""`ctxwin import FILE` and `ctxwin sessions [DIR]`: thin wrappers over
`ctxwin.transcripts.importer.import_transcript` and `ctxwin.store.list_sessions`. Sessions live under
`./.ctxwin/sessions` unless told otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from ctxwin.cli.app import app, console, err_console, handle_errors, print_json, print_table
from ctxwin.cli.reads import SessionReads
from ctxwin.store.session import DEFAULT_ROOT

PROBLEMS_SHOWN = 10  # problems printed per session by `ctxwin sessions`; the rest are counted


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB"):
        if value < 1024:
            return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


@app.command("import")
@handle_errors
def import_(
    file: Path = typer.Argument(..., help="A session file in any format `ctxwin inspect` reads.", show_default=False),
    into: Path = typer.Option(DEFAULT_ROOT, "--into", help="The folder that holds sessions; the new session is a "
                              "sub-folder named after the transcript's session id."),
    format: str | None = typer.Option(None, "--format", "-f", help="Read as this format (default: detected).",
                                      show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
) -> None:
    """Import a transcript as a session: its messages, its recorded compactions, its sub-agent conversations."""
    from ctxwin.transcripts.importer import import_transcript  # the transcript readers cost ~0.3 s to import

    reads = SessionReads()
    with reads.collect(), import_transcript(file, into, format=format) as log:
        result: dict[str, Any] = {
            "path": str(log.directory),
            "session_id": log.session_id,
            "entries": len(log),
            "kinds": log.kind_counts(),
            "import": log.header.get("meta", {}).get("import", {}),
        }
    if as_json:
        print_json(result | {"read": reads.to_dict()})
    else:
        info = result["import"]
        kinds = ", ".join(f"{count:,} {kind}" for kind, count in result["kinds"].items())
        console.print(f"imported [bold]{escape(str(file))}[/] ({info.get('format')}) into "
                      f"[bold]{escape(result['path'])}[/]", highlight=False)
        console.print(f"{result['entries']:,} entries: {kinds}", highlight=False)
    reads.finish()


@app.command("sessions")
@handle_errors
def sessions(
    root: Path = typer.Argument(DEFAULT_ROOT, help="The folder that holds sessions (or one session folder)."),
    as_json: bool = typer.Option(False, "--json", help="Print the list as one JSON object."),
) -> None:
    """List the stored sessions: size, entries, last activity, and what is wrong with any.

    Most recent first; each problem (damaged lines, orphans re-attached, bad payloads) on stderr."""
    from ctxwin.store.session import list_sessions

    infos = list_sessions(root)
    if as_json:
        print_json({"root": str(root), "sessions": [i.to_dict() for i in infos]})
        return
    if not infos:
        console.print(f"no sessions in {escape(str(root))}", highlight=False)
        return
    table = Table(title=str(root), title_justify="left")
    for column in ("session", "entries", "size", "blobs", "last activity", "problems"):
        table.add_column(column, justify="left" if column in ("session", "last activity") else "right")
    for info in infos:
        table.add_row(escape(Path(info.path).name), f"{info.entries:,}", _size(info.size_bytes), f"{info.blobs:,}",
                      info.last_activity or "", str(info.problems) if info.problems else "")
    print_table(table)
    for info in infos:
        shown = info.problem_list[:PROBLEMS_SHOWN]
        for problem in shown:
            err_console.print(f"[yellow]problem:[/] {escape(Path(info.path).name)}: {escape(problem.message)}",
                              highlight=False, soft_wrap=True)
        if info.problems > len(shown):
            err_console.print(f"[yellow]problem:[/] {escape(Path(info.path).name)}: … and "
                              f"{info.problems - len(shown)} more (`ctxwin sessions --json` lists them all)")
