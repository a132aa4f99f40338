"""`ctxwin eval retention|needles FILES...`: what the model would still know under each policy. Thin
wrappers over `ctxwin.evaluation.retention` and `ctxwin.evaluation.needles`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ctxwin.cli.app import app, console, handle_errors, print_json, print_table
from ctxwin.cli.progress import progress_bars
from ctxwin.cli.reads import SessionReads
from ctxwin.cli.replay import split_names
from ctxwin.errors import InputError
from ctxwin.evaluation.needles import AGES
from ctxwin.evaluation.needles import DEFAULT_POLICIES as NEEDLE_POLICIES
from ctxwin.evaluation.needles import needles as find_needles
from ctxwin.evaluation.probes import PROBE_TYPES
from ctxwin.evaluation.retention import DEFAULT_POLICIES as RETENTION_POLICIES
from ctxwin.evaluation.retention import retention as score_retention

eval_app = typer.Typer(name="eval", help="Evaluate policies on real sessions: probe retention, needles.",
                       no_args_is_help=True, rich_markup_mode=None)
app.add_typer(eval_app, name="eval")

SHORT = {"modified_files": "modified", "read_files": "read", "errors": "errors", "commands": "commands",
         "identifiers": "ids", "continuation": "next", "user_constraints": "user"}


def _recall(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


@eval_app.command("retention")
@handle_errors
def retention(
    files: list[Path] = typer.Argument(..., help="Session files (real compaction points are used; files without "
                                                 "one get synthetic points at 50 % and 80 % of their calls).",
                                       show_default=False),
    policy: str | None = typer.Option(None, "--policy", "-p", help="Policies, comma-separated (default: "
                                      f"{','.join(RETENTION_POLICIES)}).", show_default=False),
    model: str | None = typer.Option(None, "--model", "-m", help="Replay for this model (default: each session's).",
                                     show_default=False),
    window: int | None = typer.Option(None, "--window", "-w", help="Context window in tokens (default: the model's).",
                                      show_default=False),
    views: Path | None = typer.Option(None, "--views", help="Write each scored request as plain text to "
                                      "DIR/<file stem>.<policy>.p<N>.txt (N: the compaction point, from 0).",
                                      show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: {\"summary\": ..., \"sessions\": ...}."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Which facts survive each policy's compaction: recall per probe type at every compaction point,
    in the view's text (the headline) and recoverable through the refs it shows (second)."""
    names = split_names(policy) or list(RETENTION_POLICIES)
    reads = SessionReads()
    with reads.collect(), progress_bars(not (quiet or as_json)) as progress:
        result = score_retention([str(f) for f in files], names, model=model, window=window,
                                 progress=progress, views=views)
    data = result.to_dict()
    if as_json:
        print_json(data | {"read": reads.to_dict()})
    else:
        for session in data["sessions"]:
            _print_point(session)
        _print_summary(data["summary"])
    reads.finish()


def _print_point(session: dict[str, Any]) -> None:
    probes = session["probes"]
    recorded = session["recorded_next_call_tokens"]
    title = (f"{escape(Path(session['file'] or '').name)} · {session['point']} · history "
             f"{session['history_tokens']:,} tokens")
    if recorded:
        title += f" · harness's next call {recorded:,} tokens"
    table = Table(title=title, title_justify="left")
    table.add_column("policy")
    for kind in PROBE_TYPES:
        table.add_column(f"{SHORT[kind]} ({probes[kind]})", justify="right")
    table.add_column("view tokens", justify="right")
    table.add_column("ratio", justify="right")
    for name, view in session["policies"].items():
        by_ref = view["recall_recoverable_by_ref"]
        table.add_row(escape(name), *(_both(view["recall"][k], by_ref[k]) for k in PROBE_TYPES),
                      f"{view['view_tokens']:,}",
                      "" if view["compression_ratio"] is None else f"{view['compression_ratio']:.1f}x")
    print_table(table)
    console.print("recall in the view's text; in brackets, with what its refs return byte for byte where that "
                  "is more", highlight=False)


def _both(text: float | None, by_ref: float | None) -> str:
    """The headline recall, and the recoverable-by-ref one in brackets when it differs."""
    if text is None or by_ref is None or by_ref == text:
        return _recall(text)
    return f"{_recall(text)} ({_recall(by_ref)})"


def _print_summary(summary: dict[str, dict[str, Any]]) -> None:
    table = Table(title="recall pooled over every point (in brackets: recoverable by ref)", title_justify="left")
    table.add_column("policy")
    for kind in PROBE_TYPES:
        table.add_column(SHORT[kind], justify="right")
    table.add_column("mean view tokens", justify="right")
    for name, row in summary.items():
        by_ref = row["recoverable_by_ref"]
        table.add_row(escape(name), *(_both(row[k], by_ref[k]) for k in PROBE_TYPES), f"{row['view_tokens']:,}")
    print_table(table)


@eval_app.command("needles")
@handle_errors
def needles(
    files: list[Path] = typer.Argument(..., help="Session files to inject needles into.", show_default=False),
    policy: str | None = typer.Option(None, "--policy", "-p", help="Policies, comma-separated (default: "
                                      f"{','.join(NEEDLE_POLICIES)}).", show_default=False),
    ages: str | None = typer.Option(None, "--ages", help="Ages in model calls, comma-separated (default: "
                                    f"{','.join(map(str, AGES))}).", show_default=False),
    model: str | None = typer.Option(None, "--model", "-m", help="Replay for this model (default: each session's).",
                                     show_default=False),
    window: int | None = typer.Option(None, "--window", "-w", help="Context window in tokens (default: the model's).",
                                      show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: {\"policies\": {NAME: grid}, ...}."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Inject unique values into real tool outputs; report per policy the share in view, recoverable, or lost."""
    names = split_names(policy) or list(NEEDLE_POLICIES)
    try:
        age_list = [int(a) for a in split_names(ages)] or list(AGES)
    except ValueError:
        raise InputError(f"--ages {ages!r}: not a list of numbers", "for example --ages 1,10,100") from None
    reads = SessionReads()
    with reads.collect(), progress_bars(not (quiet or as_json)) as progress:
        result = find_needles([str(f) for f in files], names, ages=age_list, model=model, window=window,
                                        progress=progress)
    data = result.to_dict()
    if as_json:
        print_json(data | {"read": reads.to_dict()})
    else:
        _print_needles(data)
    reads.finish()


def _print_needles(data: dict[str, Any]) -> None:
    grid = data["policies"]
    buckets = data["age_buckets"]
    for state, label in (("in_view", "still in the view"), ("recoverable", "recoverable through a ref in the view"),
                         ("lost", "lost")):
        table = Table(title=f"needles {label}, % by age (model calls since the output)", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("policy", no_wrap=True)
        for bucket in [*buckets, "all"]:
            table.add_column(bucket, justify="right", no_wrap=True)
        for name, row in grid.items():
            cells = [_cell(row["by_age"].get(b), state) for b in buckets]
            table.add_row(escape(name), *cells, _cell(row["overall"], state))
        print_table(table)
    counts = "  ".join(f"{b}: {n}" for b, n in zip(buckets, (next(iter(grid.values()))["by_age"].get(b, {}).get("n", 0)
                                                          for b in buckets), strict=True)) if grid else ""
    console.print(f"{len(data['needles'])} needles at the start, middle and end of real tool outputs "
                  f"(per age: {counts}). Recoverable: behind an entry: ref or blob: handle shown in the view that "
                  "returns the output byte for byte.", highlight=False)


def _cell(shares: dict[str, Any] | None, state: str) -> str:
    return "" if not shares or not shares["n"] else f"{shares[state] * 100:.0f}"
