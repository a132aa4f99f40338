"""`ctxwin health FILE`: the token breakdown of the context a session would send next. A thin wrapper
over `ctxwin.transcripts.health.health`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from ctxwin.cli.app import app, console, handle_errors, print_json, print_table
from ctxwin.cli.reads import SessionReads
from ctxwin.tokens.breakdown import LABELS
from ctxwin.transcripts import FORMATS
from ctxwin.transcripts.health import HealthReport
from ctxwin.transcripts.health import health as health_report

PRESSURE_STYLES = {"ok": "green", "warn": "yellow", "compact_due": "bold yellow", "over": "bold red"}


@app.command("health")
@handle_errors
def health(
    file: Path = typer.Argument(..., help="A session file (any format `ctxwin inspect` reads).", show_default=False),
    model: str | None = typer.Option(None, "--model", "-m", help="Count for this model (default: the session's).",
                                     show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print the breakdown as one JSON object."),
    format: str | None = typer.Option(None, "--format", "-f", help=f"Read as this format: {', '.join(FORMATS)}.",
                                      show_default=False),
) -> None:
    """Show where the tokens of the context a session would send next go, and the pressure level."""
    reads = SessionReads()
    with reads.collect():
        report = health_report(str(file), model=model, format=format)
    if as_json:
        print_json(report.to_dict() | {"read": reads.to_dict()})
    else:
        _print_health(report)
    reads.finish()


def _print_health(report: HealthReport) -> None:
    b = report.breakdown
    style = PRESSURE_STYLES[b.pressure]
    console.print(f"[bold]{b.headline()}[/] [{style}]{b.pressure.replace('_', ' ')}[/]", highlight=False)
    console.print(f"Suggestion: {b.suggestion}", highlight=False)
    table = Table(title_justify="left", show_header=True)
    for column in ("category", "tokens", "window"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category in b.categories:
        table.add_row(LABELS[category.name], f"{category.tokens:,}", f"{category.percent:.1f}%")
    print_table(table)
    counted = f"{b.model} · {b.counter}" + (" (exact)" if b.exact else " (estimate)")
    console.print(f"Counted for {escape(counted)}; {report.view_messages:,} of {report.total_messages:,} messages "
                  "in view", highlight=False)
    if report.compaction:
        c = report.compaction
        console.print(f"After the compaction at message {c['index']} (summary of {c['summary_chars']:,} chars)",
                      highlight=False)
    if report.calibration:
        console.print(f"Calibrated on {report.calibration['pairs']} recorded usage deltas: "
                      f"x{report.calibration['factor']:.3f}", highlight=False)
    if report.recorded_context is not None:
        console.print(f"Last recorded usage: {report.recorded_context:,} tokens "
                      "(the provider's count at the last call)", highlight=False)
    for category in b.categories:
        if category.note:
            console.print(f"{LABELS[category.name]}: {category.note}", highlight=False)
    for note in b.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
