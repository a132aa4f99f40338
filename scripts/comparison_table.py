"""Rebuild the README's comparison and retention tables from the CLI's own JSON output.

    python scripts/comparison_table.py [../shared/transcripts] [--policies P1,P2,...]

Runs `ctxwin replay FILE --compare ... --json` on each long shared session and `ctxwin eval retention
... --json` on all of them, and prints the Markdown tables (numbers only come from those commands).
`--policies` rebuilds only those rows of the comparison (raw and recorded are replayed too, for the
shares; no row is marked cheapest, and the retention table is skipped).
Retention cells give the recall in the view's text first (the headline), then, where more, the recall
with what the view's refs return byte for byte.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

POLICIES = ("ctxwin,ctxwin:aggressive,ctxwin:conservative,claude-code,pi,pi:aggressive,pi:conservative,openclaw,letta,"
            "masking,langchain,anthropic-edits,truncate,raw,recorded")
SESSIONS = {
    "Claude Code 258c7280": "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "Claude Code 4d5611e5": "claude-code/4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "Claude Code 8463c716": "claude-code/8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl",
    "Pi before-compaction": "pi/before-compaction.jsonl",
}
PROBES = ["modified_files", "read_files", "errors", "commands", "identifiers", "continuation", "user_constraints"]


def ctxwin(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "ctxwin.cli.main", *args, "--json", "--quiet"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    args = sys.argv[1:]
    only = None
    if "--policies" in args:
        at = args.index("--policies")
        only = args[at + 1].split(",")
        del args[at: at + 2]
    root = Path(args[0] if args else Path(__file__).resolve().parents[2] / "shared" / "transcripts")
    policies = ",".join(dict.fromkeys([*only, "raw", "recorded"])) if only else POLICIES
    print("| session | policy | input tokens, all calls | vs raw | vs recorded | peak | compactions "
          "| prefix kept | cost with caching | without |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    beyond: dict[str, tuple[int, int]] = {}  # session -> (raw's peak, window): raw applies no window
    for label, name in SESSIONS.items():
        replayed = ctxwin("replay", str(root / name), "--compare", policies)
        data = replayed["policies"]
        if data["raw"]["peak_tokens"] > replayed["window"]:
            beyond[label] = (data["raw"]["peak_tokens"], replayed["window"])
        raw, recorded = data["raw"]["cumulative_input_tokens"], data["recorded"]["cumulative_input_tokens"]
        cheapest = None if only else min(data, key=lambda p: data[p]["cost_cached_usd"])
        for policy in only or POLICIES.split(","):
            row = data[policy]
            tokens = row["cumulative_input_tokens"]
            cost = f"**${row['cost_cached_usd']:.2f}**" if policy == cheapest else f"${row['cost_cached_usd']:.2f}"
            print(f"| {label} | {policy} | {tokens / 1e6:.2f}M | {tokens / raw:.0%} | {tokens / recorded:.0%} "
                  f"| {row['peak_tokens'] / 1e3:.0f}K | {row['compactions']} | {row['prefix_kept_fraction']:.0%} "
                  f"| {cost} | ${row['cost_uncached_usd']:.2f} |")
    if beyond:
        print()
        print("`raw` applies no window: its peak is past the window in " + "; ".join(
            f"{label} ({peak / 1e3:.0f}K on {window / 1e3:.0f}K)" for label, (peak, window) in beyond.items())
              + ", requests a provider would refuse; it is the unmanaged baseline the shares are taken against.")
    if only:
        return
    retention = ctxwin("eval", "retention", *(str(root / n) for n in SESSIONS.values()),
                       "--policy", "ctxwin,ctxwin:aggressive,ctxwin:conservative,claude-code,pi,openclaw,letta,masking,"
                       "recorded")
    print()
    print("Recall in the text of the view (the headline); after the slash, recoverable through the refs the "
          "view shows, where that is more. In brackets: the number of probes.")
    print()
    print("| point | policy | view tokens | " + " | ".join(PROBES) + " |")
    print("|---|---|---|" + "---|" * len(PROBES))
    for session in retention["sessions"]:
        next_call = session.get("recorded_next_call_tokens") or 0
        point = f"{Path(session['file']).name[:8]} @{session['index']} (recorded next call {next_call:,})"
        for policy in ("ctxwin", "ctxwin:aggressive", "ctxwin:conservative", "recorded"):
            view = session["policies"].get(policy)
            if view is None:
                continue
            by_ref = view.get("recall_recoverable_by_ref", view["recall"])
            cells = [cell(view["recall"][p], by_ref[p], session["probes"][p]) for p in PROBES]
            print(f"| {point} | {policy} | {view['view_tokens']:,} | " + " | ".join(cells) + " |")
            if policy == "recorded" and "recall_summary_only" in view:
                only = view["recall_summary_only"]
                cells = [cell(only[p], only[p], session["probes"][p]) for p in PROBES]
                print(f"| {point} | recorded summary alone | – | " + " | ".join(cells) + " |")


def cell(text: float | None, by_ref: float | None, probes: int) -> str:
    """`0.95 (42)`, or `0.90 / 1.00 (42)` when the refs recover more than the text holds."""
    if text is None:
        return "–"
    more = f" / {by_ref:.2f}" if by_ref is not None and by_ref > text else ""
    return f"{text:.2f}{more} ({probes})"


if __name__ == "__main__":
    main()
