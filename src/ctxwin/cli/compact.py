"""`ctxwin compact SESSION`: compact a stored session (appends a compaction entry) or show what
compacting a transcript file would give."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from ctxwin.cli.app import app, console, handle_errors, print_json
from ctxwin.cli.reads import SessionReads
from ctxwin.pipeline.events import kind_of
from ctxwin.policies.model import STRATEGIES


@app.command("compact")
@handle_errors
def compact_command(
    session: Path = typer.Argument(..., help="A stored session folder, or any transcript file."),
    focus: str = typer.Option(None, "--focus", help="What the summary should concentrate on."),
    strategy: str = typer.Option(None, "--strategy", help=f"One of {', '.join(STRATEGIES)}."),
    policy: str = typer.Option("ctxwin", "--policy", help="Policy preset or TOML file (its other stages apply)."),
    window: int = typer.Option(None, "--window", help="Context window in tokens (default: the model's)."),
    model: str = typer.Option(None, "--model", help="Model name (default: the transcript's)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Compact now, like /compact: summarize the older history, keep the recent tail."""
    from ctxwin.transcripts.compact import compact

    reads = SessionReads()
    with reads.collect():
        result = compact(session, focus=focus, strategy=strategy, policy=policy, window=window, model=model)
    if json_output:
        print_json({k: v for k, v in result.items() if k != "summary"} | {"summary_chars": len(result["summary"]),
                                                                          "read": reads.to_dict()})
    else:
        _print_result(result)
    reads.finish()


def _print_result(result: dict[str, Any]) -> None:
    if not result["compacted"]:
        reasons = [e["reason"] for e in result["events"]
                   if kind_of(e).is_compaction_failure or kind_of(e).is_checkpoint_request]
        console.print(f"Nothing compacted ({result['strategy']}): the view is {result['tokens_before']:,} tokens of a "
                      f"{result['window']:,}-token window, {result['kept_messages']:,} messages; "
                      f"{escape(reasons[0] if reasons else 'the history is within the kept budget')}", highlight=False)
        return
    console.print(f"[bold]Compacted[/] with {result['strategy']}: {result['tokens_before']:,} -> "
                  f"{result['tokens_after']:,} tokens; the summary covers {result['covered_messages']:,} "
                  f"messages, {result['kept_messages']:,} kept verbatim; valid: {result['valid']}")
    if result["stored"]:
        console.print("A compaction entry was appended to the session log (nothing was deleted).")
    console.rule("summary")
    console.print(result["summary"], markup=False, highlight=False)
