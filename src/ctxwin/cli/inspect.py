"""`ctxwin inspect FILE`: where a session's tokens go. A thin wrapper over
`ctxwin.transcripts.load_transcript` and `ctxwin.transcripts.inspect.inspect_transcript`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from ctxwin.cli.app import app, console, handle_errors, print_json, print_table
from ctxwin.cli.reads import SessionReads
from ctxwin.transcripts import FORMATS, load_transcript
from ctxwin.transcripts.inspect import inspect_transcript

TOOLS_SHOWN = 15  # rows of the per-tool table


@app.command("inspect")
@handle_errors
def inspect(
    file: Path = typer.Argument(..., help="A session file: Claude Code, Pi or Codex JSONL, a SWE-agent .traj, "
                                          "or OpenAI-format JSON/JSONL; plain or .gz.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    format: str | None = typer.Option(None, "--format", "-f", help=f"Read as this format: {', '.join(FORMATS)} "
                                      "(default: detected from the content).", show_default=False),
) -> None:
    """Show where a session's tokens go: per role, per tool, the largest tool results, the recorded compactions.

    Exit codes:

    0: the file was read cleanly.

    2: the file cannot be used (missing, empty, binary, not a known format); the reason is on stderr.

    3: the report was printed, but malformed lines were skipped; the warnings, with line numbers, are on stderr.
    """
    reads = SessionReads()
    with reads.collect():
        transcript = load_transcript(file, format)
        report = inspect_transcript(transcript)
    if as_json:
        print_json(report | {"read": reads.to_dict()})
    else:
        _print_report(report)
    reads.finish()


def _print_report(report: dict[str, Any]) -> None:
    tokens = report["tokens"]
    total = tokens["total"] or 1
    header = f"[bold]{escape(report['source'] or '')}[/]\n{report['format']}"
    if report["model"]:
        header += f" · {escape(report['model'])}"
    header += (f" · {report['messages']:,} messages · {report['tool_calls']:,} tool calls · "
               f"{report['tool_results']:,} results")
    console.print(header, highlight=False)
    console.print(f"{tokens['total']:,} tokens ({report['counter']}); tool output is "
                  f"{report['tool_output_share']:.0%} of them", highlight=False)

    roles = Table(title="by role", title_justify="left")
    for column in ("role", "messages", "tokens", "share"):
        roles.add_column(column, justify="left" if column == "role" else "right")
    for role, count in tokens["by_role"].items():
        roles.add_row(role, f"{report['messages_by_role'].get(role, 0):,}", f"{count:,}", f"{count / total:.1%}")
    print_table(roles)

    if report["tools"]:
        tools = Table(title="by tool", title_justify="left")
        for column in ("tool", "calls", "results", "tokens", "share"):
            tools.add_column(column, justify="left" if column == "tool" else "right")
        for name, row in list(report["tools"].items())[:TOOLS_SHOWN]:
            tools.add_row(name, f"{row['calls']:,}", f"{row['results']:,}", f"{row['tokens']:,}",
                          f"{row['tokens'] / total:.1%}")
        print_table(tools)

    if report["largest_tool_results"]:
        largest = Table(title="largest tool results", title_justify="left")
        for column in ("message", "tool", "tokens"):
            largest.add_column(column, justify="left" if column == "tool" else "right")
        for row in report["largest_tool_results"]:
            largest.add_row(str(row["index"]), row["tool"], f"{row['tokens']:,}")
        print_table(largest)

    if report["compactions"]:
        compactions = Table(title="recorded compactions", title_justify="left")
        for column in ("at message", "first kept", "tokens before", "summary chars", "trigger"):
            compactions.add_column(column, justify="right")
        for c in report["compactions"]:
            before = f"{c['tokens_before']:,}" if c["tokens_before"] is not None else "?"
            compactions.add_row(str(c["index"]), str(c["first_kept_index"]), before, f"{c['summary_chars']:,}",
                                c["trigger"] or "")
        print_table(compactions)

    usage = report["usage"]
    if usage:
        console.print(f"recorded usage: {usage['model_calls']:,} model calls, peak context "
                      f"{usage['peak_context_tokens']:,} tokens (at message {usage['peak_at_index']})", highlight=False)
    if report["sidechains"]:
        sides = ", ".join(f"{key} ({n} messages)" for key, n in report["sidechains"].items())
        console.print(f"sidechains: {sides}", highlight=False)
    if report["skipped"]:
        skipped = ", ".join(f"{reason} {count:,}" for reason, count in report["skipped"].items())
        console.print(f"skipped (never sent to the model, or malformed): {skipped}", highlight=False)
