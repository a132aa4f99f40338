"""Sleep-time consolidation (issue 25): what a 12,000-character MEMORY.md holds of a long conversation,
against the last 12,000 characters of its notes; and how long 30 days of notes and 20 sessions take.

1. Answers in memory. Each of LoCoMo's ten multi-session chats (`longconv.locomo()`; the 1,531
   questions that are not adversarial and name their evidence) is written as daily notes
   (`longconv.write_daily_notes`: one `Speaker: text` line per turn, a heading per session with its
   date) into its own workspace and consolidated with the deterministic extractor (no model). For
   each question: does its gold answer appear in the consolidated MEMORY.md (`answer_in_memory`)? in
   the last 12,000 characters of the notes, read in date order (`answer_in_recent_baseline`)? in
   all of the notes (`answer_in_all_notes`: the ceiling this way of matching allows, since many gold
   answers are paraphrases the conversation never says word for word)?

   "Appears" is normalized containment, the same for every text: lowercase; punctuation, articles
   and extra spaces removed; dates written "7 May 2023", "May 7, 2023" or "2023-05-07" all read as
   2023-05-07 (consolidation writes resolved dates in ISO, the notes and the gold answers in words);
   the gold answer must occur as whole words. A gold answer that is a list ("pottery, camping") must
   occur whole: no partial credit. This scorer imports nothing of ctxwin.

   The ranking's constants (how much a fact's information counts, the density by length) were chosen
   looking at conversations 0-4 only; `*_heldout` are the same figures on conversations 5-9, which
   were not looked at while choosing.

2. Speed: 30 days of notes (the shared Claude Code and Pi sessions flushed into daily notes by
   `memory.flush.DailyNotes`, a day per slice of messages) and 20 ctxwin sessions (the same
   transcripts' messages, re-logged as sessions dated across the 30 days), consolidated once with no
   model (`speed_seconds`); then a second run with nothing new (`noop_seconds`, `noop_changed` false).

Prints one JSON object on its last line: `answer_in_memory`, `answer_in_recent_baseline`,
`memory_chars` (mean over the chats), `seconds` (consolidating all ten chats), and the rest.

    CTXWIN_LOCOMO=/tmp/locomo/locomo10.zip PYTHONPATH=src .venv/bin/python benchmarks/consolidate.py
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ctxwin.memory.consolidate import consolidate
from longconv import Conversation, locomo, write_daily_notes

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CTXWIN_SHARED_DIR", ROOT.parent / "shared")) / "transcripts"
if not SHARED.exists():
    SHARED = Path("/work/shared/transcripts")
CAP = 12_000
SPEED_DAYS = 30
SPEED_SESSIONS = 20

# -- the scorer (no ctxwin import)

_MONTHS = {m: i for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july", "august",
                                       "september", "october", "november", "december"), start=1)}
_MONTH = "(" + "|".join(_MONTHS) + ")"
_DMY = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? {_MONTH},? (\d{{4}})\b")
_MDY = re.compile(rf"\b{_MONTH} (\d{{1,2}})(?:st|nd|rd|th)?,? (\d{{4}})\b")
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")


def normalize(text: str) -> str:
    text = text.lower()
    text = _DMY.sub(lambda m: f"{m.group(3)}-{_MONTHS[m.group(2)]:02d}-{int(m.group(1)):02d}", text)
    text = _MDY.sub(lambda m: f"{m.group(3)}-{_MONTHS[m.group(1)]:02d}-{int(m.group(2)):02d}", text)
    text = re.sub(r"[^\w\s-]", " ", text)
    text = _ARTICLES.sub(" ", text)
    return " " + " ".join(text.split()) + " "


def appears(answer: str, normalized_text: str) -> bool:
    gold = normalize(answer)
    return gold.strip() != "" and gold in normalized_text


# -- 1. answers in memory


def notes_text(workspace: Path) -> str:
    return "".join(p.read_text() for p in sorted((workspace / "memory").glob("*.md")))


def run_locomo(conversations: list[Conversation], base: Path) -> dict[str, Any]:
    hits = {"memory": 0, "recent": 0, "all": 0}
    by_category: dict[str, dict[str, int]] = {}
    chars: list[int] = []
    seconds = 0.0
    facts = in_memory = 0
    for n, conversation in enumerate(conversations):
        workspace = base / f"locomo-{n}"
        write_daily_notes(conversation, workspace)
        notes = notes_text(workspace)
        started = time.perf_counter()
        report = consolidate(workspace, max_chars=CAP)
        seconds += time.perf_counter() - started
        memory = (workspace / "MEMORY.md").read_text()
        chars.append(len(memory))
        facts += report.current
        in_memory += report.in_memory
        texts = {"memory": normalize(memory), "recent": normalize(notes[-CAP:]), "all": normalize(notes)}
        for question in conversation.questions:
            row = by_category.setdefault(question.category, {"questions": 0, "memory": 0, "recent": 0, "all": 0})
            row["questions"] += 1
            for name, text in texts.items():
                found = appears(question.answer, text)
                hits[name] += found
                row[name] += found
    total = sum(len(c.questions) for c in conversations)
    return {
        "conversations": len(conversations), "questions": total,
        "answer_in_memory": round(hits["memory"] / total, 4),
        "answer_in_recent_baseline": round(hits["recent"] / total, 4),
        "answer_in_all_notes": round(hits["all"] / total, 4),
        "memory_chars": round(sum(chars) / len(chars)), "memory_chars_max": max(chars),
        "current_facts": facts, "facts_in_memory": in_memory, "seconds": round(seconds, 3),
        "by_category": {k: {"questions": v["questions"], "memory": round(v["memory"] / v["questions"], 4),
                            "recent": round(v["recent"] / v["questions"], 4),
                            "all_notes": round(v["all"] / v["questions"], 4)} for k, v in sorted(by_category.items())},
    }


# -- 2. speed


def speed(base: Path) -> dict[str, Any]:
    from ctxwin.memory.flush import daily_notes
    from ctxwin.messages import Message
    from ctxwin.store import Session
    from ctxwin.transcripts import load_transcript

    files = sorted((SHARED / "claude-code").glob("*.jsonl")) + sorted((SHARED / "pi").glob("*.jsonl"))
    messages: list[Message] = []
    for path in files:
        try:
            messages.extend(load_transcript(path).messages)
        except Exception as error:  # an edge-case file the reader refuses: not this benchmark's subject
            print(f"skipped {path.name}: {error}", file=sys.stderr)
    if not messages:
        return {"speed_skipped": f"no transcripts in {SHARED}"}
    workspace = base / "speed"
    workspace.mkdir()
    start = datetime(2026, 10, 1, 9, 0, tzinfo=UTC)
    per_day = max(1, len(messages) // SPEED_DAYS)
    for day in range(SPEED_DAYS):
        when = (start + timedelta(days=day)).timestamp()
        span = messages[day * per_day:(day + 1) * per_day]
        for part in range(0, len(span), 40):  # several flushes a day, as compactions come
            daily_notes(workspace, clock=lambda when=when + part: when)(span[part:part + 40])
    per_session = max(1, len(messages) // SPEED_SESSIONS)
    logged = 0
    for number in range(SPEED_SESSIONS):
        day = start + timedelta(days=number * SPEED_DAYS // SPEED_SESSIONS)
        with Session.open(workspace / ".ctxwin" / "sessions" / f"chat-{number:04d}", durability="batch") as log:
            for k, message in enumerate(messages[number * per_session:(number + 1) * per_session]):
                stamp = (day + timedelta(seconds=k)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
                log.append("message", message.to_dict(), timestamp=stamp)
                logged += 1
    note_bytes = sum(p.stat().st_size for p in (workspace / "memory").glob("*.md"))
    started = time.perf_counter()
    report = consolidate(workspace, max_chars=CAP)
    first = time.perf_counter() - started
    started = time.perf_counter()
    again = consolidate(workspace, max_chars=CAP)
    second = time.perf_counter() - started
    return {"speed_days": len(report.notes_read), "speed_sessions": len(report.sessions_read),
            "speed_note_bytes": note_bytes, "speed_session_messages": logged, "speed_statements": report.units,
            "speed_facts": report.facts, "speed_seconds": round(first, 3), "noop_seconds": round(second, 3),
            "noop_changed": again.changed, "speed_target_seconds": 10.0}


def main() -> None:
    result: dict[str, Any] = {"cap_chars": CAP, "extractor": "rules", "day": date.today().isoformat()}
    with tempfile.TemporaryDirectory(prefix="ctxwin-consolidate-") as tmp:
        base = Path(tmp)
        conversations = locomo()
        if conversations:
            result.update(run_locomo(conversations, base))
            held = run_locomo(conversations[5:], base / "held-out")
            result.update({"heldout_conversations": "5-9", "answer_in_memory_heldout": held["answer_in_memory"],
                           "answer_in_recent_baseline_heldout": held["answer_in_recent_baseline"],
                           "answer_in_all_notes_heldout": held["answer_in_all_notes"]})
        else:
            result["locomo_skipped"] = "set CTXWIN_LOCOMO (see benchmarks/longconv.py)"
        if "--no-speed" not in sys.argv:
            result.update(speed(base))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
