"""Write the README's Performance figures from what the benchmarks printed, never by hand.

    .venv/bin/python scripts/readme_benchmarks.py --run [NAME ...]   # run them (quiet machine), save the results
    .venv/bin/python scripts/readme_benchmarks.py --write            # README.md from the saved results

Each benchmark prints one JSON object on its last line; `--run` saves it, with the commit, the date and the
machine's load average around the run, to `benchmarks/results/NAME.json`. The figures sit in README.md
between `<!-- b:NAME -->` and `<!-- /b -->`; `--write` rewrites only those, and fails on a marker it
has no figure for (a renamed key is seen, not silently left stale). Without `--write` the figures are
printed as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
RESULTS = REPO / "benchmarks" / "results"
MARK = re.compile(r"<!-- b:(?P<name>[a-z0-9_]+) -->(?P<value>.*?)<!-- /b -->", re.S)
PREVIOUS_RELEASE = "a89843b"  # what `overhead.py --against` measures beside this tree

BENCHMARKS: dict[str, list[str]] = {
    "overhead": ["benchmarks/overhead.py", "--against", PREVIOUS_RELEASE],
    "proxy": ["benchmarks/proxy.py"],
    "proxy_hostile": ["benchmarks/proxy_hostile.py"],
    "startup": ["benchmarks/startup.py"],
    "memory": ["benchmarks/memory.py"],
}


def run(name: str) -> dict[str, Any]:
    """One benchmark in a fresh process; its last line, with where and when it was measured."""
    load_before = os.getloadavg()[0]
    started = time.time()
    done = subprocess.run([sys.executable, *BENCHMARKS[name]], cwd=REPO, capture_output=True, text=True,
                          check=False)
    if done.returncode:
        raise SystemExit(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=False).stdout.strip()
    return {"benchmark": name, "commit": commit, "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
            "seconds": round(time.time() - started, 1),
            "load_average": round((load_before + os.getloadavg()[0]) / 2, 2),
            "result": json.loads(done.stdout.strip().splitlines()[-1])}


def ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def span(values: Iterable[float]) -> str:
    """`lo–hi` of `values` (one value when they agree), in ms as `ms` writes them."""
    ordered = sorted(values)
    low, high = ms(ordered[0]), ms(ordered[-1])
    return low if low == high else f"{low}–{high}"


def overhead(saved: dict[str, Any]) -> dict[str, str]:
    this, ref = saved["result"]["this"], saved["result"]["ref"]

    def sessions(tree: dict[str, Any], key: str) -> str:
        return span(row[key] for row in tree["sessions"].values())

    return {
        "overhead_rounds": str(saved["result"]["rounds"]),
        "overhead_p50": sessions(this, "p50_ms"), "overhead_p50_ref": sessions(ref, "p50_ms"),
        "overhead_p95": sessions(this, "p95_ms"), "overhead_p95_ref": sessions(ref, "p95_ms"),
        "overhead_max": sessions(this, "max_ms"), "overhead_max_ref": sessions(ref, "max_ms"),
        "overhead_naive_p95": sessions(this, "naive_p95_ms"),
        "overhead_synthetic_p95": ms(this["synthetic_p95_ms"]),
        "overhead_synthetic_p95_ref": ms(ref["synthetic_p95_ms"]),
        "overhead_synthetic_max": ms(this["synthetic_max_ms"]),
        "overhead_synthetic_max_ref": ms(ref["synthetic_max_ms"]),
        "overhead_synthetic_gc": ms(this["synthetic_gc_full_max_ms"]),
        "overhead_load": f"{saved['load_average']:.1f}",
    }


def proxy(saved: dict[str, Any]) -> dict[str, str]:
    r = saved["result"]
    return {
        "proxy_p95_added": ms(r["p95_added_ms_170k"]), "proxy_p50_added": ms(r["p50_added_ms_170k"]),
        "proxy_bare_p95_added": ms(r["bare_p95_added_ms_170k"]), "proxy_above_bare": ms(r["p95_above_bare_ms"]),
        "proxy_cpu": ms(r["proxy_cpu_ms_per_request"]), "proxy_bare_cpu": ms(r["bare_cpu_ms_per_request"]),
        "proxy_concurrent_sessions": str(r["concurrent_sessions"]),
        "proxy_concurrent_requests": str(r["concurrent_requests"]), "proxy_concurrent_p95": ms(r["concurrent_p95_ms"]),
        "proxy_postgres_p95_added": ms(r["postgres_p95_added_ms_170k"]),
        "proxy_alternating_p95_added": ms(r["postgres_alternating_p95_added_ms_170k"]),
        "proxy_two_workers_p95_added": ms(r["postgres_2_workers_p95_added_ms_170k"]),
        "proxy_errors": str(r["errors_total"]), "proxy_load": f"{saved['load_average']:.1f}",
    }


def proxy_hostile(saved: dict[str, Any]) -> dict[str, str]:
    r = saved["result"]
    return {
        "hostile_line_mb": f"{r['flood_line_bytes'] / 2**20:,.0f}", "hostile_floods": str(r["floods"]),
        "hostile_error_p50": ms(r["flood_to_error_ms_p50"]), "hostile_error_max": ms(r["flood_to_error_ms_max"]),
        "hostile_slowdown_p50": f"{r['other_slowdown_p50']:.2f}",
        "hostile_other_p95_rest": ms(r["other_p95_ms_at_rest"]),
        "hostile_other_p95_flood": ms(r["other_p95_ms_during_flood"]),
        "hostile_errors": str(r["errors"]), "hostile_load": f"{saved['load_average']:.1f}",
    }


def startup(saved: dict[str, Any]) -> dict[str, str]:
    r = saved["result"]

    def wall(key: str) -> str:
        return f"{r[key]['wall_median_s']:.3f}"

    return {
        "startup_import": wall("import ctxwin"), "startup_import_modules": str(r["import ctxwin"]["modules"]),
        "startup_engine": wall("from ctxwin import ContextEngine"), "startup_help": wall("ctxwin --help"),
        "startup_inspect": wall("ctxwin inspect (10 lines)"), "startup_load": f"{saved['load_average']:.1f}",
    }


def memory(saved: dict[str, Any]) -> dict[str, str]:
    r = saved["result"]
    speed, letta = r["speed"], r["letta"]["answer_in_top5_text"]
    return {
        "memory_units": f"{speed['units']:,}", "memory_p95_hops1": ms(speed["search_p95_ms_hops1"]),
        "memory_p95_hops3": ms(speed["search_p95_ms_hops3"]), "memory_index_rate": f"{speed['index_units_per_s']:,}",
        "memory_rss": f"{r['peak_rss_mb']:.0f}", "memory_needles": f"{r['needles']['found_at_5']:.2f}",
        "memory_letta_hops4": f"{letta['hops_4']:.2f}", "memory_load": f"{saved['load_average']:.1f}",
    }


FIGURES: dict[str, Callable[[dict[str, Any]], dict[str, str]]] = {
    "overhead": overhead, "proxy": proxy, "proxy_hostile": proxy_hostile, "startup": startup, "memory": memory,
}


def figures() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, make in FIGURES.items():
        path = RESULTS / f"{name}.json"
        if path.is_file():
            out.update(make(json.loads(path.read_text())))
    return out


def write(values: dict[str, str]) -> None:
    text = README.read_text()
    missing = sorted({m["name"] for m in MARK.finditer(text)} - set(values))
    if missing:
        raise SystemExit(f"README.md marks figures no saved result gives: {', '.join(missing)} "
                         f"(run: {sys.argv[0]} --run)")
    README.write_text(MARK.sub(lambda m: f"<!-- b:{m['name']} -->{values[m['name']]}<!-- /b -->", text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", nargs="*", metavar="NAME", help=f"run these benchmarks ({', '.join(BENCHMARKS)}; "
                        "none named: all) and save their results")
    parser.add_argument("--write", action="store_true", help="rewrite README.md's marked figures")
    args = parser.parse_args()
    if args.run is not None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        for name in args.run or list(BENCHMARKS):
            if name not in BENCHMARKS:
                raise SystemExit(f"unknown benchmark {name!r}; the names: {', '.join(BENCHMARKS)}")
            print(f"running {name} ...", file=sys.stderr, flush=True)
            (RESULTS / f"{name}.json").write_text(json.dumps(run(name), indent=1) + "\n")
    values = figures()
    if args.write:
        write(values)
    print(json.dumps(values, sort_keys=True))


if __name__ == "__main__":
    main()
