"""`ctxwin replay FILE --policy P [--compare P1,P2,...]`: what each policy would have sent at every
model call of a real session, and what it would have cost. A thin wrapper over
`ctxwin.evaluation.compare`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from ctxwin import policies
from ctxwin.cli.app import app, console, handle_errors, print_json, print_table
from ctxwin.cli.progress import progress_bars
from ctxwin.cli.reads import SessionReads
from ctxwin.errors import InputError
from ctxwin.evaluation.compare import HARNESS_FOLDERS, RECORDED, compare, latest_session
from ctxwin.evaluation.cost import SCHEMES, TTLS
from ctxwin.transcripts import FORMATS, load_transcript

EVENTS_SHOWN = 3  # events named per row of the per-call table


def split_names(value: str | None) -> list[str]:
    """`a,b, c` -> ["a", "b", "c"]."""
    return [n.strip() for n in (value or "").split(",") if n.strip()]


def resolve_file(file: Path | None, latest: str | None) -> Path:
    if file is not None and latest is not None:
        raise InputError("give a session file or --latest, not both")
    if latest is not None:
        return latest_session(latest)
    if file is None:
        raise InputError("no session file given", "name a session file, or use --latest claude-code|pi|codex")
    return file


@app.command("replay")
@handle_errors
def replay(
    file: Path | None = typer.Argument(None, help="A session file (any format `ctxwin inspect` reads).",
                                       show_default=False),
    policy: str = typer.Option(policies.DEFAULT, "--policy", "-p",
                               help=f"The policy shown call by call: a preset ({', '.join(policies.names())}), "
                                    f"`{RECORDED}` (what the harness sent) or a TOML file."),
    compare_with: str | None = typer.Option(None, "--compare", "-c",
                                            help="More policies to compare side by side, comma-separated: "
                                                 "presets, TOML files, `recorded`, and the ecosystem's own "
                                                 "`langchain` and `anthropic-edits`.",
                                            show_default=False),
    model: str | None = typer.Option(None, "--model", "-m", help="Replay for this model (default: the session's).",
                                     show_default=False),
    window: int | None = typer.Option(None, "--window", "-w", help="Context window in tokens (default: the model's).",
                                      show_default=False),
    pricing: str = typer.Option("anthropic", "--pricing", help=f"Prompt-caching price model: {', '.join(SCHEMES)}."),
    cache_ttl: str = typer.Option("5m", "--cache-ttl", help=f"Cache lifetime: {', '.join(TTLS)}."),
    latest: str | None = typer.Option(None, "--latest",
                                      help=f"Replay the newest session of a harness: {', '.join(HARNESS_FOLDERS)}.",
                                      show_default=False),
    format: str | None = typer.Option(None, "--format", "-f", help=f"Read as this format: {', '.join(FORMATS)}.",
                                      show_default=False),
    calls: bool = typer.Option(True, "--calls/--no-calls", help="Print the per-call table."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: {\"policies\": {NAME: {...}}, ...}."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Replay a real session under a policy: tokens sent and cached at every model call, events, cost."""
    path = resolve_file(file, latest)
    names = list(dict.fromkeys([policy, *split_names(compare_with)]))
    reads = SessionReads()
    with reads.collect(), progress_bars(not (quiet or as_json)) as progress:
        transcript = load_transcript(path, format)
        result = compare(transcript, names, model=model, window=window, pricing=pricing, cache_ttl=cache_ttl,
                         progress=progress)
    data = result.to_dict()
    if as_json:
        print_json(data | {"read": reads.to_dict()})
    else:
        _print_header(data)
        if calls:
            _print_calls(policy, data["policies"][policy])
        _print_summary(data)
    reads.finish()


def _print_header(data: dict[str, Any]) -> None:
    calibration = data["calibration"]
    price = data["pricing"]
    console.print(f"[bold]{escape(data['file'] or '')}[/]", highlight=False)
    model = escape(data["model"]) if data["model"] else "not recorded (the registry's default limits)"
    console.print(f"format {data['format']} · model {model} · window {data['window']:,} · "
                  f"overhead {data['overhead_tokens']:,} tokens per call (system prompt and tools, measured on the "
                  f"first call) · counter x{calibration['factor']:.3f} ({calibration['pairs']} usage pairs)",
                  highlight=False)
    console.print(f"Pricing: {price['scheme']}, ${price['input_usd_per_mtok']}/M input, cache reads "
                  f"x{price['cache_read_multiplier']}, writes x{price['cache_write_multiplier']}, lifetime "
                  f"{price['cache_ttl_seconds']:.0f}s", highlight=False)


def _event_text(events: list[dict[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for event in events:
        counts[event["stage"]] = counts.get(event["stage"], 0) + 1
    shown = [f"{stage}" + (f" x{n}" if n > 1 else "") for stage, n in list(counts.items())[:EVENTS_SHOWN]]
    return ", ".join(shown) + (" …" if len(counts) > EVENTS_SHOWN else "")


def _print_calls(name: str, row: dict[str, Any]) -> None:
    table = Table(title=f"{name}: every model call", title_justify="left")
    for column in ("call", "message", "tokens sent", "cached", "cost (input-token units)", "events"):
        table.add_column(column, justify="left" if column == "events" else "right")
    for call in row["timeline"]:
        table.add_row(str(call["call"]), str(call["message_index"]), f"{call['tokens']:,}",
                      f"{call['cached_tokens']:,}", f"{call['cost_units']:,}", escape(_event_text(call["events"])))
    print_table(table)


def _print_summary(data: dict[str, Any]) -> None:
    rows = data["policies"]
    table = Table(title="summary", title_justify="left")
    recorded = any(row.get("share_of_recorded_tokens") is not None for row in rows.values())
    columns = ("policy", "calls", "cumulative", "peak", "compactions", "prefix kept", "cached $", "uncached $",
               "% raw", *(("% recorded",) if recorded else ()), "valid", "over budget")
    for column in columns:
        table.add_column(column, justify="left" if column == "policy" else "right")
    cheapest = data.get("cheapest_cached")
    for name, row in rows.items():
        share_raw = row.get("share_of_raw_tokens")
        share_recorded = row.get("share_of_recorded_tokens")
        table.add_row(
            f"[bold]{escape(name)}[/]" if name == cheapest else escape(name),
            f"{row['calls']:,}", f"{row['cumulative_input_tokens']:,}", f"{row['peak_tokens']:,}",
            str(row["compactions"]), f"{row['prefix_kept_fraction']:.0%}", f"{row['cost_cached_usd']:.2f}",
            f"{row['cost_uncached_usd']:.2f}", "" if share_raw is None else f"{share_raw:.0%}",
            *(("" if share_recorded is None else f"{share_recorded:.0%}",) if recorded else ()),
            "yes" if row["valid"] else "[red]no[/]",
            str(row["over_budget_calls"]) if not row["over_budget_calls"] else f"[red]{row['over_budget_calls']}[/]")
    print_table(table)
    if cheapest:
        console.print(f"Lowest cost with prompt caching: [bold]{escape(cheapest)}[/]", highlight=False)
