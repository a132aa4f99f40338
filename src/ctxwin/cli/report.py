"""`ctxwin report FILES... -o report.html`: one self-contained HTML page with per-policy token
timelines, the comparison table and retention by probe type. A thin wrapper over
`ctxwin.evaluation.report.report`."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer
from rich.markup import escape

from ctxwin.cli.app import app, console, handle_errors, print_json
from ctxwin.cli.progress import progress_bars
from ctxwin.cli.reads import SessionReads
from ctxwin.cli.replay import split_names
from ctxwin.evaluation.report import report as write_html_report
from ctxwin.tools import format_size


@app.command("report")
@handle_errors
def report(
    files: list[Path] = typer.Argument(..., help="Session files (any format `ctxwin inspect` reads).",
                                       show_default=False),
    output: Path = typer.Option(Path("report.html"), "--output", "-o", help="The HTML file to write."),
    policy: str | None = typer.Option(None, "--policy", "-p", help="Policies, comma-separated (default: every "
                                      "preset, plus `recorded` for files with usage records).", show_default=False),
    model: str | None = typer.Option(None, "--model", "-m", help="Replay for this model (default: each session's).",
                                     show_default=False),
    window: int | None = typer.Option(None, "--window", "-w", help="Context window in tokens (default: the model's).",
                                      show_default=False),
    retention: bool = typer.Option(True, "--retention/--no-retention", help="Score probe retention (the slow part)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: what was written and the numbers."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Write one self-contained HTML report: token timelines, the policy comparison, retention by probe type."""
    args = [*map(str, files), "-o", str(output)]
    for flag, value in (("--policy", policy), ("--model", model), ("--window", window)):
        if value is not None:
            args += [flag, str(value)]
    command = shlex.join(["ctxwin", "report", *args, *([] if retention else ["--no-retention"])])
    reads = SessionReads()
    with reads.collect(), progress_bars(not (quiet or as_json)) as progress:
        result = write_html_report(files, output, policies=split_names(policy) or None, model=model, window=window,
                                   with_retention=retention, progress=progress, command=command)
    if as_json:
        print_json(result.to_dict() | {"read": reads.to_dict()})
    else:
        console.print(f"Wrote [bold]{escape(result.path)}[/] ({format_size(result.bytes)}): "
                      f"{len(result.sessions)} session(s), {len(result.policies)} policies, "
                      f"{result.retention_points} retention point(s), in {result.seconds['total']:.1f} s. "
                      "Open it in a browser; it loads nothing from the network.", highlight=False)
    reads.finish()
