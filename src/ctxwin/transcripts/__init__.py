"""Real session files, read into one `Transcript`: Claude Code, Pi, Codex CLI, SWE-agent and
OpenAI-format JSON, plain or gzipped, the format detected from the content (`format=` overrides)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxwin.errors import InputError
from ctxwin.transcripts import claude_code, codex, openai, pi
from ctxwin.transcripts.model import CompactionRecord, Transcript, UsageRecord
from ctxwin.transcripts.source import Source, read_source

FORMATS: tuple[str, ...] = ("claude-code", "pi", "codex", "swe-agent", "openai")
JSONL_FORMATS = ("claude-code", "pi", "codex")  # formats that are one JSON record per line
DETECT_RECORDS = 200  # how many records detection looks at

READERS: dict[str, Callable[[Source], Transcript]] = {
    "claude-code": claude_code.read,
    "pi": pi.read,
    "codex": codex.read,
    "swe-agent": openai.read_swe_agent,
    "openai": openai.read_openai,
}

_CLAUDE_CODE_TYPES = ("user", "assistant", "system", "progress", "summary", "file-history-snapshot",
                      "queue-operation")
_CLAUDE_CODE_KEYS = ("uuid", "sessionId", "parentUuid", "leafUuid", "snapshot", "isSidechain")
_PI_TYPES = ("message", "compaction", "model_change", "thinking_level_change", "branch_summary", "custom_message",
             "custom", "label", "session_info")
_CODEX_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")


def load_transcript(path: str | Path, format: str | None = None) -> Transcript:
    """Read a session file (plain or .gz). Raises `InputError` with a clear message for a file that
    is missing, empty, binary, of no known format, or holds no conversation at all; a malformed line
    is skipped with a warning naming it (`Transcript.warnings`) and counted (`Transcript.skipped`)."""
    source = read_source(path)
    if format is None:
        format = _detect(source)
    elif format not in FORMATS:
        raise InputError(f"unknown format {format!r}", f"use one of: {', '.join(FORMATS)}")
    elif format in JSONL_FORMATS and isinstance(source.document(), list):
        raise _array_error(source, format)
    transcript = READERS[format](source)
    if not transcript.messages:
        raise InputError(
            f"no conversation found in {source.path} read as {format}"
            + (f" ({_describe(transcript.skipped)} skipped)" if transcript.skipped else ""),
            "check the file, or pass --format if it was detected wrongly",
        )
    transcript.metadata.setdefault("compressed", source.compressed)
    return transcript


def detect_format(path: Path) -> str:
    """The format of a session file, from its content (the name is only a tie-breaker). Raises
    `InputError` saying what was seen when it cannot tell."""
    return _detect(read_source(path))


def _detect(source: Source) -> str:
    document = source.document()
    if document is not None:
        found = _detect_document(document, source)
        if found is not None:
            return found
    votes: Counter[str] = Counter()
    types_seen: Counter[str] = Counter()
    parsed = 0
    for line in _first_lines(source.text, DETECT_RECORDS):
        record = _try_json(line)
        if record is None:
            continue
        parsed += 1
        if isinstance(record, dict):
            for name, weight in _record_votes(record):
                votes[name] += weight
            types_seen[str(record.get("type", record.get("role", "?")))] += 1
    if votes:
        best = max(votes.values())
        leaders = [name for name in FORMATS if votes[name] == best]
        return _tie_break(leaders, source)
    if not parsed:
        raise InputError(f"{source.path} is not JSON or JSONL (no line of it parses as JSON)",
                         f"give a session file in one of the formats: {', '.join(FORMATS)}")
    seen = ", ".join(f"{name} ({count})" for name, count in types_seen.most_common(5)) or "no JSON objects"
    raise InputError(f"{source.path} is not a known session format (record types seen: {seen})",
                     f"supported formats: {', '.join(FORMATS)}; pass --format to choose one")


def _first_lines(text: str, limit: int) -> list[str]:
    lines = []
    start = 0
    while len(lines) < limit and start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end].strip()
        if line:
            lines.append(line)
        start = end + 1
    return lines


def _try_json(line: str) -> Any | None:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _record_votes(record: dict[str, Any]) -> list[tuple[str, int]]:
    kind = record.get("type")
    votes = []
    if kind == "session" and "id" in record:
        votes.append(("pi", 10))
    if kind in _CODEX_TYPES and "payload" in record:
        votes.append(("codex", 10 if kind == "session_meta" else 2))
    if kind in codex.ITEM_TYPES and "message" not in record and ("role" in record or "call_id" in record):
        votes.append(("codex", 1))  # an old rollout: bare Responses items
    if kind in _CLAUDE_CODE_TYPES and any(k in record for k in _CLAUDE_CODE_KEYS):
        votes.append(("claude-code", 2))
    if kind == "message" and isinstance(record.get("message"), dict) and "payload" not in record:
        votes.append(("pi", 2))
    elif kind in _PI_TYPES and kind != "message" and not any(k in record for k in ("payload", "role", "call_id",
                                                                                   *_CLAUDE_CODE_KEYS)):
        votes.append(("pi", 1))
    if "type" not in record and record.get("role") in openai.CHAT_ROLES:
        votes.append(("openai", 2))
    return votes


def _tie_break(leaders: list[str], source: Source) -> str:
    name = source.name
    if "swe-agent" in leaders and name.endswith(".traj"):
        return "swe-agent"
    if "codex" in leaders and name.startswith("rollout-"):
        return "codex"
    return leaders[0]


def _detect_document(document: Any, source: Source) -> str | None:
    """The format of a file that is one JSON value; None when it is a one-line JSONL file."""
    if isinstance(document, dict):
        if isinstance(document.get("history"), list) or isinstance(document.get("trajectory"), list):
            return "swe-agent"
        if isinstance(document.get("messages"), list):
            return "openai"
        if _record_votes(document):
            return None
        keys = ", ".join(list(document)[:8]) or "none"
        raise InputError(f"{source.path} is one JSON object (keys: {keys}), not a known session format",
                         f"supported formats: {', '.join(FORMATS)}; pass --format to choose one")
    if isinstance(document, list):
        chat = sum(isinstance(i, dict) and i.get("role") in openai.CHAT_ROLES and "type" not in i for i in document)
        if chat and chat * 2 >= len(document):  # mostly chat messages: the others are skipped with warnings
            return "openai"
        raise _array_error(source, None)
    return None


def _array_error(source: Source, format: str | None) -> InputError:
    """The error for a JSON array where JSONL records were expected, naming the format its items
    look like when they look like one."""
    document = source.document()
    votes: Counter[str] = Counter()
    for item in document[:DETECT_RECORDS] if isinstance(document, list) else []:
        if isinstance(item, dict):
            for name, weight in _record_votes(item):
                votes[name] += weight
    looks_like = format or (votes.most_common(1)[0][0] if votes else None)
    if looks_like in JSONL_FORMATS:
        return InputError(
            f"{source.path} is a JSON array, but {looks_like} sessions are JSONL (one JSON record per line)",
            f"convert it with: jq -c '.[]' {source.path} > session.jsonl",
        )
    return InputError(
        f"{source.path} is a JSON array, but not of chat messages (each needs a 'role')",
        f"supported formats: {', '.join(FORMATS)}; an OpenAI-format file is a list of {{role, content}} messages",
    )


def _describe(skipped: Counter[str]) -> str:
    return ", ".join(f"{count} {reason}" for reason, count in skipped.most_common(4))


__all__ = [
    "FORMATS",
    "CompactionRecord",
    "Transcript",
    "UsageRecord",
    "detect_format",
    "load_transcript",
]
