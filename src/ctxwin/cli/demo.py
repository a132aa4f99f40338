"""`ctxwin demo`: a scripted agent works on ctxwin's own source with ctxwin's tools, the session is
replayed under every policy, and the comparison and `report.html` come out. No file, no network.
A thin wrapper over `ctxwin.evaluation.demo.demo`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ctxwin.cli.app import app, console, handle_errors, print_json, print_table
from ctxwin.cli.evaluate import _print_summary as print_retention
from ctxwin.cli.progress import progress_bars
from ctxwin.cli.replay import split_names
from ctxwin.evaluation.demo import DEMO_MODEL
from ctxwin.evaluation.demo import demo as run_demo
from ctxwin.tools import format_size


@app.command("demo")
@handle_errors
def demo(
    output: Path = typer.Option(Path("report.html"), "--output", "-o", help="The HTML report to write."),
    policy: str | None = typer.Option(None, "--policy", "-p", help="Policies, comma-separated (default: every "
                                      "preset).", show_default=False),
    window: int | None = typer.Option(None, "--window", "-w", help=f"Context window in tokens (default: "
                                      f"{DEMO_MODEL}'s).", show_default=False),
    source: Path | None = typer.Option(None, "--source", help="The package folder the agent works on (a copy is "
                                       "made; default: the installed ctxwin).", show_default=False),
    keep: Path | None = typer.Option(None, "--keep", metavar="DIR", help="Also keep the scripted session as a ctxwin "
                                     "session in DIR (a new folder), for inspect, health, replay and report.",
                                     show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: the session, comparison, retention."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars, and only the tables."),
) -> None:
    """Run the main job on ctxwin's own source: a realistic long session, replayed under every policy."""
    with progress_bars(not (quiet or as_json)) as progress:
        result = run_demo(output, source=source, policies=split_names(policy) or None, window=window,
                          progress=progress, keep=keep)
    if as_json:
        print_json(result.to_dict() | ({"kept": str(keep)} if keep else {}))
        return
    facts = result.session
    tools = ", ".join(f"{name} {count}" for name, count in facts["tools"].items())
    console.print(f"[bold]Scripted session[/] over ctxwin's own source ({facts['source_files']} files, "
                  f"{format_size(facts['source_bytes'])}): {facts['model_calls']} model calls, "
                  f"{facts['tool_calls']} tool calls ({tools}), {facts['tool_errors']} failing; "
                  f"{facts['tokens']:,} tokens of history for {escape(DEMO_MODEL)} "
                  f"(window {result.comparison['window']:,}).", highlight=False)
    _print_comparison(result.comparison["policies"], result.comparison["window"])
    print_retention(result.retention["summary"])
    seconds = result.seconds
    console.print(f"Wrote [bold]{escape(result.report)}[/] ({format_size(result.report_bytes)}); open it in a "
                  "browser.", highlight=False)
    if keep is not None:
        console.print(f"The session is in [bold]{escape(str(keep))}[/]: try ctxwin inspect {escape(str(keep))}, "
                      f"ctxwin replay {escape(str(keep))} --compare ctxwin,pi,raw", highlight=False)
    if not quiet:
        console.print(f"Done in {seconds['total']:.1f} s (session {seconds['session']:.1f} s, replays "
                      f"{seconds['replays']:.1f} s, retention {seconds['retention']:.1f} s, report "
                      f"{seconds['report']:.1f} s).", highlight=False)


def _print_comparison(rows: dict[str, dict[str, Any]], window: int | None = None) -> None:
    """The comparison in terminal width (`ctxwin replay --compare` prints every column)."""
    table = Table(title="each policy replayed on the session", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("policy", "tokens,\nall calls", "% of\nraw", "peak\nrequest", "compactions", "prefix\nkept",
                   "cost,\ncached"):
        table.add_column(column, justify="left" if column == "policy" else "right", no_wrap=True)
    cheapest = min(rows, key=lambda n: rows[n]["cost_cached_usd"], default=None)
    for name, row in rows.items():
        share = row.get("share_of_raw_tokens")
        table.add_row(f"[bold]{escape(name)}[/]" if name == cheapest else escape(name),
                      f"{row['cumulative_input_tokens']:,}", "" if share is None else f"{share:.0%}",
                      f"{row['peak_tokens']:,}", str(row["compactions"]), f"{row['prefix_kept_fraction']:.0%}",
                      f"${row['cost_cached_usd']:.2f}")
    print_table(table)
    invalid = [n for n, r in rows.items() if not r["valid"]]
    over = {n: r["over_budget_calls"] for n, r in rows.items() if r["over_budget_calls"]}
    checks = "every request valid and within budget" if not invalid and not over else (
        f"[red]invalid requests: {escape(', '.join(invalid)) or 'none'}; over budget: "
        f"{escape(', '.join(f'{n} {c}' for n, c in over.items())) or 'none'}[/]")
    if cheapest:
        console.print(f"Lowest cost with prompt caching: [bold]{escape(cheapest)}[/]; {checks}.", highlight=False)
    if window:
        for name, row in rows.items():
            if row["peak_tokens"] > window:  # raw: everything sent, no window applied
                console.print(f"{escape(name)} has no window: its largest request is {row['peak_tokens']:,} tokens, "
                              f"past the {window:,}-token window (a provider would refuse it).", highlight=False)
