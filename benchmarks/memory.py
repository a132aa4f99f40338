"""Retrieval quality and speed of the memory index (issue 13), BM25-only, vector-only and hybrid side by
side in one run, with the default embedder (wordllama) on SQLite.

1. Letta file-system questions (`../shared/transcripts/letta-filesystem`): the 10 record files are
   indexed (~400-token chunks, 80 overlap); for each of the 100 questions (the "Question:" line is
   the query), is a chunk holding the ground-truth answer among the top 5 / top 10? Every question is
   a multi-hop chain (the answer is a person found through two to four look-ups), so one search rarely
   holds it; `letta_first_hop_at_5` says how often the top 5 hold the entity the question quotes
   ('Eduardo', '7D U3378'), the record an agent's chain starts from.
2. Needles: unique values injected into old tool outputs of the shared Claude Code and Pi sessions
   (`ctxwin.evaluation.needles.inject`), the session replayed under the `ctxwin` policy, its log
   indexed; each needle no longer in the view (masked or compacted away) is searched for by its key.
   Found means a result at rank ≤ 5 whose ref, given to the engine's `recall`, returns the injected
   output byte-identical (and `memory.resolve_ref` on the log returns the same bytes).
3. Speed: an index of 100,000 chunks (real text: the ~5,700 chunks of the session messages and Letta
   records, repeated with a suffix that makes each chunk distinct) built through
   `MemoryIndex.add_chunks`, embedder included (`index_chunks_per_s`; the embedder's token cache makes
   the repeats cheaper, so `index_chunks_per_s_unique_texts` is also given: the real texts indexed
   once each with a fresh embedder); then the p95 of 300 hybrid searches over it (100 Letta questions
   and 200 chunk openings; `search_p95_ms_100k`, wall clock, and `search_cpu_p95_ms_100k`, this
   process's CPU time, which other processes' load does not inflate). Peak RSS of the whole run. The
   machine's load average during the speed part is reported too: it is shared.

Prints one JSON object on its last line.

    PYTHONPATH=src /work/main/.venv/bin/python benchmarks/memory.py [--quick]
"""

from __future__ import annotations

import json
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ctxwin.memory import MemoryIndex, resolve_ref
from ctxwin.memory.chunks import Chunk, chunk_id, entry_chunks, text_hash

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CTXWIN_SHARED_DIR", ROOT.parent / "shared")) / "transcripts"
if not SHARED.exists():
    SHARED = Path("/work/shared/transcripts")
LETTA = SHARED / "letta-filesystem"
SESSIONS = [SHARED / "claude-code" / name for name in (
    "258c7280-ae70-4798-800f-63464d01a85d.jsonl", "4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl")] + [SHARED / "pi" / "before-compaction.jsonl"]
MODES = {"bm25": ("bm25", "weighted"), "vector": ("vector", "weighted"), "hybrid_weighted": ("hybrid", "weighted"),
         "hybrid_rrf": ("hybrid", "rrf")}
SPEED_CHUNKS = int(os.environ.get("CTXWIN_BENCH_CHUNKS", "100000"))
SEARCHES = 300
TARGETS = {"needles_found_at_5": 0.95, "search_p95_ms_100k": 10.0, "index_chunks_per_s": 2_000}


def question(text: str) -> str:
    return text.rsplit("Question:", 1)[-1].strip()


def letta(index_dir: Path) -> dict[str, Any]:
    questions = [json.loads(line) for line in (LETTA / "questions.jsonl").read_text().splitlines() if line.strip()]
    files = sorted(p.name for p in (LETTA / "files").iterdir())
    with MemoryIndex.open(index_dir / "letta.sqlite") as index:
        started = time.perf_counter()
        report = index.index_files(LETTA / "files", files, "files")
        seconds = time.perf_counter() - started
        lines = {name: (LETTA / "files" / name).read_text().split("\n") for name in files}
        at5 = {m: 0 for m in MODES}
        at10 = {m: 0 for m in MODES}
        hop5 = {m: 0 for m in MODES}
        with_entity = 0
        for item in questions:
            truth = str(item["ground_truth"]).strip().lower()
            # The entities the question names in quotes ('Eduardo', '7D U3378'): the first hop of its chain.
            entities = [e.lower() for e in re.findall(r"'([^']+)'", question(item["input"]))]
            with_entity += bool(entities)
            for name, (mode, fusion) in MODES.items():
                hits = index.search(question(item["input"]), k=10, mode=mode, fusion=fusion)  # type: ignore[arg-type]
                texts = ["\n".join(lines[h.path][h.start_line - 1:h.end_line]).lower() for h in hits]
                found = [truth in t for t in texts]
                at5[name] += any(found[:5])
                at10[name] += any(found[:10])
                hop5[name] += bool(entities) and any(e in t for t in texts[:5] for e in entities)
    n = len(questions)
    return {"questions": n, "chunks": report.chunks_added, "index_s": round(seconds, 3),
            "at5": {m: round(v / n, 4) for m, v in at5.items()}, "at10": {m: round(v / n, 4) for m, v in at10.items()},
            "first_hop_at5": {m: round(v / max(with_entity, 1), 4) for m, v in hop5.items()},
            "questions_with_entity": with_entity}


def needles(index_dir: Path) -> dict[str, Any]:
    from ctxwin.engine import ContextEngine
    from ctxwin.evaluation.compare import blob_store, replay_setup
    from ctxwin.evaluation.needles import inject
    from ctxwin.evaluation.probes import message_text
    from ctxwin.evaluation.replay import iter_replay
    from ctxwin.evaluation.retention import entry_messages
    from ctxwin.messages import ToolResult
    from ctxwin.transcripts import load_transcript

    rows: list[dict[str, Any]] = []
    counts = {m: 0 for m in MODES}
    with MemoryIndex.open(index_dir / "needles.sqlite") as index:
        for number, path in enumerate(p for p in SESSIONS if p.exists()):
            transcript = load_transcript(path)
            setup = replay_setup(transcript)
            injected, placed = inject(transcript, label=str(number))
            made: list[ContextEngine] = []

            def factory(*args: Any, made: list[ContextEngine] = made, **kwargs: Any) -> ContextEngine:
                made.append(ContextEngine(*args, **kwargs))
                return made[-1]

            with blob_store() as blobs:
                for _ in iter_replay(injected, "ctxwin", blobs=blobs, engine_factory=factory,
                                     **setup.replay_options()):
                    pass
                engine = made[0]
                prepared = engine.prepare()
                view = "\n".join([prepared.system, *(message_text(m) for m in prepared.messages)])
                session = f"session-{number}"
                index.add_chunks(entry_chunks(engine.session, session))
                ids = list(entry_messages(engine, injected.messages))
                for needle in placed:
                    if needle.value in view:
                        continue  # still in the view: nothing to recall
                    message = injected.messages[needle.message_index]
                    original = next(b.text for b in message.blocks
                                    if isinstance(b, ToolResult) and b.call_id == needle.call_id)
                    expected_ref = f"entry:{ids[needle.message_index]}#{needle.call_id}"
                    row: dict[str, Any] = {"session": path.name, "key": needle.key, "age": needle.age}
                    for name, (mode, fusion) in MODES.items():
                        hits = index.search(f"verification code for {needle.key}", k=5, mode=mode,  # type: ignore[arg-type]
                                            fusion=fusion, sources=["session"], paths=[session])
                        rank = None
                        for position, hit in enumerate(hits, start=1):
                            if hit.ref == expected_ref:
                                recalled = engine.recall(hit.ref)
                                if recalled == original and resolve_ref(engine.session, hit.ref) == original:
                                    rank = position
                                    break
                        row[name] = rank
                        counts[name] += rank is not None
                    rows.append(row)
    n = len(rows)
    return {"needles_searched": n, "found_at_5": {m: round(v / n, 4) if n else None for m, v in counts.items()},
            "missed": [r for r in rows if r["hybrid_weighted"] is None][:10]}


def corpus(target: int) -> list[str]:
    """Real texts for the speed index: messages of the shared sessions, and Letta records."""
    from ctxwin.memory.chunks import message_parts, split_lines
    from ctxwin.transcripts import load_transcript

    texts: list[str] = []
    for path in SESSIONS:
        if path.exists():
            for message in load_transcript(path).messages:
                for _call, text in message_parts(message):
                    texts.extend(body for _s, _e, body in split_lines(text))
    for path in sorted((LETTA / "files").iterdir()):
        texts.extend(body for _s, _e, body in split_lines(path.read_text()))
    return texts[:target] if len(texts) >= target else texts


def unique_speed(index_dir: Path, base: list[str]) -> dict[str, Any]:
    """Indexing the real texts once each, with a fresh embedder (nothing cached): the cold rate."""
    from ctxwin.memory import WordLlamaEmbedder

    chunks = []
    for n, text in enumerate(base):
        digest = text_hash(text)
        chunks.append(Chunk(chunk_id("bench", "unique", n, n, digest), "files", f"unique/{n % 97}.txt", n, n, text,
                            digest))
    with MemoryIndex.open(index_dir / "unique.sqlite", WordLlamaEmbedder()) as index:
        started, started_cpu = time.perf_counter(), time.process_time()
        for start in range(0, len(chunks), 5_000):
            index.add_chunks(chunks[start:start + 5_000])
        seconds, cpu = time.perf_counter() - started, time.process_time() - started_cpu
    return {"chunks": len(chunks), "index_chunks_per_s": round(len(chunks) / seconds),
            "index_chunks_per_cpu_s": round(len(chunks) / cpu)}


def speed(index_dir: Path, total: int) -> dict[str, Any]:
    base = corpus(total)
    unique = unique_speed(index_dir, base)
    chunks: list[Chunk] = []
    for n in range(total):
        text = f"{base[n % len(base)]}\n[copy {n // len(base)} of chunk {n % len(base)}]"
        digest = text_hash(text)
        chunks.append(Chunk(chunk_id("bench", "speed", n, n, digest), "files", f"speed/{n % 97}.txt", n, n, text,
                            digest))
    with MemoryIndex.open(index_dir / "speed.sqlite") as index:
        started, started_cpu = time.perf_counter(), time.process_time()
        for start in range(0, total, 5_000):
            index.add_chunks(chunks[start:start + 5_000])
        build = time.perf_counter() - started
        build_cpu = time.process_time() - started_cpu
        queries = [question(json.loads(line)["input"]) for line in
                   (LETTA / "questions.jsonl").read_text().splitlines() if line.strip()]
        queries += [c.text[:80] for c in chunks[:: max(1, total // 200)] if c.text[:80].strip()]
        index.search("warm up the vector matrix", k=6)  # loads the matrix once, as an open index has
        times: list[float] = []
        cpu: list[float] = []
        for query in queries[:SEARCHES]:
            t, c = time.perf_counter(), time.process_time()
            index.search(query, k=6)
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
        times.sort()
        cpu.sort()
        bytes_ = index.stats()["bytes"]
    return {"chunks": total, "mean_chunk_chars": round(sum(len(c.text) for c in chunks) / total),
            "build_s": round(build, 2), "index_chunks_per_s": round(total / build),
            "index_chunks_per_cpu_s": round(total / build_cpu),
            "search_p50_ms": round(times[len(times) // 2], 2), "search_p95_ms": round(times[int(len(times) * 0.95)], 2),
            "search_cpu_p50_ms": round(cpu[len(cpu) // 2], 2), "search_cpu_p95_ms": round(cpu[int(len(cpu) * 0.95)], 2),
            "searches": len(times), "index_mb": round(bytes_ / 2**20, 1), "unique": unique,
            "load_average": os.getloadavg()}


def main() -> None:
    quick = "--quick" in sys.argv
    if not LETTA.exists():
        print(json.dumps({"error": f"{LETTA} is absent"}))
        return
    with tempfile.TemporaryDirectory(prefix="ctxwin-membench-") as folder:
        work = Path(folder)
        letta_result = letta(work)
        print("letta", json.dumps(letta_result), file=sys.stderr)
        needle_result = needles(work)
        print("needles", json.dumps(needle_result), file=sys.stderr)
        speed_result = speed(work, 10_000 if quick else SPEED_CHUNKS)
        print("speed", json.dumps(speed_result), file=sys.stderr)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    fusions = {"weighted": letta_result["at5"]["hybrid_weighted"] + needle_result["found_at_5"]["hybrid_weighted"],
               "rrf": letta_result["at5"]["hybrid_rrf"] + needle_result["found_at_5"]["hybrid_rrf"]}
    better = max(fusions, key=lambda f: fusions[f])

    def pick(row: dict[str, Any]) -> dict[str, Any]:
        return {"bm25": row["bm25"], "vector": row["vector"], "hybrid": row[f"hybrid_{better}"],
                "hybrid_weighted": row["hybrid_weighted"], "hybrid_rrf": row["hybrid_rrf"]}

    out = {
        "letta_recall_at_5": pick(letta_result["at5"]),
        "letta_recall_at_10": pick(letta_result["at10"]),
        "letta_first_hop_at_5": pick(letta_result["first_hop_at5"]),
        "letta_questions_with_quoted_entity": letta_result["questions_with_entity"],
        "needles_found_at_5": needle_result["found_at_5"][f"hybrid_{better}"],
        "needles_found_at_5_by_mode": pick(needle_result["found_at_5"]),
        "needles_searched": needle_result["needles_searched"],
        "fusion_kept": better,
        "search_p95_ms_100k": speed_result["search_p95_ms"],
        "search_p50_ms_100k": speed_result["search_p50_ms"],
        "search_cpu_p95_ms_100k": speed_result["search_cpu_p95_ms"],
        "index_chunks_per_s": speed_result["index_chunks_per_s"],
        "index_chunks_per_cpu_s": speed_result["index_chunks_per_cpu_s"],
        "index_chunks_per_s_unique_texts": speed_result["unique"]["index_chunks_per_s"],
        "index_chunks_per_cpu_s_unique_texts": speed_result["unique"]["index_chunks_per_cpu_s"],
        "unique_texts": speed_result["unique"]["chunks"],
        "speed_index_chunks": speed_result["chunks"],
        "load_average_during_speed": [round(x, 2) for x in speed_result["load_average"]],
        "mean_chunk_chars": speed_result["mean_chunk_chars"],
        "peak_rss_mb": round(peak, 1),
        "letta_chunks": letta_result["chunks"],
        "embedder": "wordllama:l2_supercat:256",
        "targets": TARGETS,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
