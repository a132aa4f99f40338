"""Speed of the session store: appends (fsync and batch), opening a 100,000-entry session with its
index present, the path of its newest leaf, look-ups, an index rebuild, and appends on PostgreSQL
(a throwaway local server; null with a reason when none can start). Both backends acknowledge the
same thing (`ctxwin.store.base`): a batch append has returned only once it survives a SIGKILL.

Entries are message payloads of realistic size (a few hundred bytes of text, every tenth a 4 KB
tool result). Prints one JSON object on its last line; times are the best of REPEATS.

    /work/venv/bin/python benchmarks/store.py
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxwin.messages import assistant, tool_result, user
from ctxwin.store import Session, pgtemp
from ctxwin.store.jsonl import INDEX_FILE

ENTRIES = 100_000  # the session size the targets are stated for
FSYNC_APPENDS = 300  # fsync appends timed (each waits for the disk)
BATCH_APPENDS = 20_000  # batch appends timed on a fresh session
PG_APPENDS = 20_000  # batch appends timed on PostgreSQL
PG_DURABLE_APPENDS = 3_000  # batch appends timed on a PostgreSQL server with fsync on
LOOKUPS = 1_000  # random get() calls timed
REPEATS = 3
TARGETS = {"open_100k_s": 1.0, "path_100k_ms": 50.0, "append_batch_per_s": 5_000}


def payloads(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "build", "runs",
             "tests", "again"]
    out = []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 80)))
        if i % 10 == 9:
            message = tool_result(f"c{i}", "\n".join(f"line {j}: {text[:60]}" for j in range(60)), name="bash")
        elif i % 2:
            message = assistant(text)
        else:
            message = user(text)
        out.append(message.to_dict())
    return out


def best(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def append_rate(folder: Path, data: list[dict[str, Any]], durability: str) -> float:
    shutil.rmtree(folder, ignore_errors=True)
    with Session.open(folder, durability=durability) as log:
        started = time.perf_counter()
        for payload in data:
            log.append("message", payload)
        log.flush()
        return len(data) / (time.perf_counter() - started)


def jsonl_numbers(work: Path) -> dict[str, Any]:
    data = payloads(ENTRIES)
    out: dict[str, Any] = {}
    out["append_fsync_per_s"] = round(append_rate(work / "fsync", data[:FSYNC_APPENDS], "fsync"), 1)
    out["append_batch_per_s"] = round(max(append_rate(work / "batch", data[:BATCH_APPENDS], "batch")
                                          for _ in range(REPEATS)), 1)

    big = work / "big"
    started = time.perf_counter()
    with Session.open(big, durability="batch") as log:
        ids = [log.append("message", payload).id for payload in data]
    out["build_100k_s"] = round(time.perf_counter() - started, 3)
    out["log_bytes_100k"] = (big / "session.jsonl").stat().st_size
    out["index_bytes_100k"] = (big / INDEX_FILE).stat().st_size

    def open_close(readonly: bool) -> None:
        with Session.open(big, readonly=readonly) as log:
            assert len(log) >= ENTRIES and log.report.index == "fresh", log.report

    out["open_100k_s"] = round(best(lambda: open_close(False)), 4)

    def open_and_append() -> None:
        # the writer's first append loads every id (so later appends need no index query)
        with Session.open(big) as log:
            log.append("custom", {"bench": True})

    out["open_and_first_append_100k_s"] = round(best(open_and_append, 1), 4)
    out["open_100k_readonly_s"] = round(best(lambda: open_close(True)), 4)

    with Session.open(big, readonly=True) as log:
        def newest_path() -> None:
            path = log.path()
            assert len(path) == ENTRIES + 1 and path[-2].id == ids[-1]

        out["path_100k_ms"] = round(best(newest_path) * 1000, 3)
        out["path_100k_materialize_s"] = round(best(lambda: len(list(log.path())), 1), 3)
        sample = random.Random(1).sample(ids, LOOKUPS)
        out["get_us"] = round(best(lambda: [log.get(i) for i in sample]) / LOOKUPS * 1e6, 1)

    def rebuild() -> None:
        (big / INDEX_FILE).unlink()
        with Session.open(big) as log:
            assert log.report.index == "rebuilt"

    out["index_rebuild_100k_s"] = round(best(rebuild, 1), 3)
    return out


def pg_rates(dsn: str, data: list[dict[str, Any]], prefix: str) -> dict[str, float]:
    """Appends per second in each durability (batch on PG_APPENDS entries, fsync on fewer)."""
    rates = {}
    for durability, count in (("batch", len(data)), ("fsync", FSYNC_APPENDS * 3)):
        with Session.postgres(dsn, f"{prefix}-{durability}", durability=durability) as log:
            started = time.perf_counter()
            for payload in data[:count]:
                log.append("message", payload)
            log.flush()
            rates[durability] = count / (time.perf_counter() - started)
    return rates


def pg_numbers() -> dict[str, Any]:
    reason = pgtemp.unavailable_reason()
    if reason:
        return {"pg_append_batch_per_s": None, "pg_append_fsync_per_s": None, "pg_unavailable": reason}
    data = payloads(PG_APPENDS)
    server = pgtemp.start()
    try:
        pgtemp.wait_ready(server.dsn)
        rates = pg_rates(server.dsn, data, "bench")
        with Session.postgres(server.dsn, "bench-batch", readonly=True) as log:
            path_ms = best(lambda: log.path()[-1]) * 1000
    finally:
        server.stop()
    # The same on a server that really waits for its disk: what batch (asynchronous commit) saves.
    durable = pgtemp.start(fsync=True)
    try:
        pgtemp.wait_ready(durable.dsn)
        disk = pg_rates(durable.dsn, data[:PG_DURABLE_APPENDS], "bench-disk")
    finally:
        durable.stop()
    return {"pg_append_batch_per_s": round(rates["batch"], 1), "pg_append_fsync_per_s": round(rates["fsync"], 1),
            "pg_path_20k_ms": round(path_ms, 3),
            "pg_disk_append_batch_per_s": round(disk["batch"], 1),
            "pg_disk_append_fsync_per_s": round(disk["fsync"], 1),
            "pg_note": "pg_append_*: server with fsync=off (throwaway); pg_disk_append_*: server with fsync=on. Batch "
                       "commits every append (synchronous_commit off): one round trip per append, no disk wait"}


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="ctxwin-bench-store-", dir=os.environ.get("CTXWIN_BENCH_DIR")))
    try:
        result = jsonl_numbers(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result.update(pg_numbers())
    result["targets_met"] = {
        "open_100k_s": result["open_100k_s"] < TARGETS["open_100k_s"],
        "path_100k_ms": result["path_100k_ms"] < TARGETS["path_100k_ms"],
        "append_batch_per_s": result["append_batch_per_s"] >= TARGETS["append_batch_per_s"],
    }
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
