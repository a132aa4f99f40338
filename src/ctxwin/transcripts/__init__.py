"""Real session files, read into one `Transcript`: Claude Code, Pi, Codex CLI, SWE-agent and
OpenAI-format JSON, plain or gzipped, the format detected from the content (`format=` overrides).

An edge: imports anything below it (messages, tokens, store, engine); the core never imports it.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ctxwin.errors import InputError
from ctxwin.files import FileLimits, as_path
from ctxwin.transcripts import claude_code, codex, openai, pi, stored
from ctxwin.transcripts.model import CompactionRecord, DamagedInputWarning, ReadReport, Transcript, UsageRecord
from ctxwin.transcripts.source import ImportLog, Record, Source, read_source

FORMATS: tuple[str, ...] = ("claude-code", "pi", "codex", "swe-agent", "openai", "ctxwin")
JSONL_FORMATS = ("claude-code", "pi", "codex", "ctxwin")  # formats that are one JSON record per line
DETECT_RECORDS = 200  # how many records detection looks at
LINE_RANGES_SHOWN = 4  # line ranges named per format in the mixed-format error

READERS: dict[str, Callable[[Source], Transcript]] = {
    "claude-code": claude_code.read,
    "pi": pi.read,
    "codex": codex.read,
    "swe-agent": openai.read_swe_agent,
    "openai": openai.read_openai,
    "ctxwin": stored.read,
}

_CLAUDE_CODE_TYPES = ("user", "assistant", "system", "progress", "summary", "file-history-snapshot",
                      "queue-operation")
_CLAUDE_CODE_KEYS = ("uuid", "sessionId", "parentUuid", "leafUuid", "snapshot", "isSidechain")
_PI_TYPES = ("message", "compaction", "model_change", "thinking_level_change", "branch_summary", "custom_message",
             "custom", "label", "session_info")
_CODEX_TYPES = ("session_meta", "response_item", "event_msg", "turn_context", "compacted")


def load_transcript(path: str | Path, format: str | None = None, *, limits: FileLimits | None = None) -> Transcript:
    """Read a session file (plain or .gz). Raises `InputError` with a clear message for a file that
    is missing, not a regular file, over the size caps (`limits`; default: `FileLimits()` with the
    `CTXWIN_MAX_FILE_BYTES` / `CTXWIN_MAX_DECOMPRESSED_BYTES` overrides), empty, binary, of no known
    format, of several formats mixed, or holding no conversation at all. A malformed line is skipped
    with a warning naming it (`Transcript.warnings`) and counted (`Transcript.skipped`, `.damaged`);
    a transcript read with problems also issues one `DamagedInputWarning`.

    ctxwin's own sessions are read too: a session folder (or its `session.jsonl`) read-only through
    the store, any other copy of a session log from its lines (`ctxwin.transcripts.stored`)."""
    path = as_path(path, "the transcript's path")
    if format is not None and format not in FORMATS:
        raise InputError(f"unknown format {format!r}", f"use one of: {', '.join(FORMATS)}")
    folder = stored.session_folder(path) if format in (None, stored.FORMAT) else None
    if folder is not None and (path.is_dir() or format == stored.FORMAT or _starts_with_header(path)):
        log = ImportLog()
        return _finish(stored.read_folder(folder, log), log, compressed=False, path=folder, format=stored.FORMAT)
    if path.is_dir():
        raise InputError(f"{path} is a folder, not a ctxwin session (it holds no {stored.SESSION_FILE})",
                         "give a session file, or a session folder (`ctxwin sessions DIR` lists them)")
    source = read_source(path, limits)
    if format is None:
        format = _detect(source)  # refuses a mixed file: nothing of another format is left to filter
    elif format in JSONL_FORMATS and isinstance(source.document(), list):
        raise _array_error(source, format)
    elif format in JSONL_FORMATS or (format == "openai" and source.document() is None):
        log = source.log  # not `source`: the filter is kept on the source, and a cycle would keep its text alive
        source.filter_records(lambda records: _own_records(records, format, log))
    transcript = READERS[format](source)
    return _finish(transcript, source.log, compressed=source.compressed, path=source.path, format=format)


def _finish(transcript: Transcript, log: ImportLog, *, compressed: bool, path: Path, format: str) -> Transcript:
    """Refuses a transcript with no conversation; attaches what reading it found; warns when damaged."""
    if not transcript.messages:
        skipped = log.skipped
        raise InputError(
            f"no conversation found in {path} read as {format}"
            + (f" ({_describe(skipped)} skipped)" if skipped else ""),
            _first_problem(log.warnings) or "check the file, or pass --format if it was detected wrongly",
        )
    transcript.metadata.setdefault("compressed", compressed)
    transcript.warnings = log.warnings
    transcript.damaged = Counter(log.damaged)
    transcript.repaired = Counter(log.repaired)
    if transcript.is_damaged or transcript.repaired:
        warnings.warn(DamagedInputWarning(transcript.read_report()), stacklevel=3)
    return transcript


def _starts_with_header(path: Path) -> bool:
    """Whether the file's first line is a ctxwin session header (read without the whole file)."""
    try:
        with path.open("rb") as handle:
            head = handle.readline(4096)
    except OSError:
        return False
    try:
        return stored.is_header(json.loads(head))
    except ValueError:
        return False


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
    records = source.records()
    votes: Counter[str] = Counter()
    types_seen: Counter[str] = Counter()
    for record in records[:DETECT_RECORDS]:
        if isinstance(record.data, dict):
            for name, weight in _record_votes(record.data):
                votes[name] += weight
            types_seen[str(record.data.get("type", record.data.get("role", "?")))] += 1
    mixed = _formats_of(records)
    if len(mixed) > 1:
        raise _mixed_error(source, mixed)
    if not votes and mixed:  # the first records say nothing; a later one does
        votes[next(iter(mixed))] = 1
    if votes:
        best = max(votes.values())
        leaders = [name for name in FORMATS if votes[name] == best]
        return _tie_break(leaders, source)
    if not records:
        raise InputError(f"{source.path} is not JSON or JSONL (no line of it parses as JSON)",
                         _first_problem(source.log.warnings)
                         or f"give a session file in one of the formats: {', '.join(FORMATS)}")
    seen = ", ".join(f"{name} ({count})" for name, count in types_seen.most_common(5)) or "no JSON objects"
    raise InputError(f"{source.path} is not a known session format (record types seen: {seen})",
                     f"supported formats: {', '.join(FORMATS)}; pass --format to choose one")


def _record_format(data: Any) -> str | None:
    """The one format a record belongs to, when its shape names exactly one."""
    if not isinstance(data, dict):
        return None
    names = {name for name, _ in _record_votes(data)}
    return names.pop() if len(names) == 1 else None


def _formats_of(records: list[Record]) -> dict[str, list[int]]:
    """The line numbers of the records that belong to each format, formats in order of appearance."""
    found: dict[str, list[int]] = {}
    for record in records:
        name = _record_format(record.data)
        if name is not None:
            found.setdefault(name, []).append(record.line)
    return found


def _mixed_error(source: Source, found: dict[str, list[int]]) -> InputError:
    """Mixed files are refused rather than read record by record in each one's own format: the formats
    disagree on what a conversation is (a Pi tree, Claude Code's streamed responses, Codex's model calls
    closed by usage events), so no single conversation can be built from their union."""
    parts = [f"{name} ({len(lines):,} record{'s' if len(lines) != 1 else ''}, {_line_ranges(lines)})"
             for name, lines in found.items()]
    return InputError(
        f"{source.path} mixes records of several session formats: {'; '.join(parts)}",
        "split it into one file per format, or pass --format NAME to read only that format's records "
        "(the others are skipped, with a warning each)",
    )


def _own_records(records: list[Record], format: str, log: ImportLog) -> list[Record]:
    """`records` without those that belong to another format (each skipped with a warning): with
    `--format` forced on a mixed file, the other formats' records are never misread as this one's."""
    kept = []
    for record in records:
        other = _record_format(record.data)
        if other is not None and other != format:
            log.skip_bad("other_format", f"a {other} record in a file read as {format}; skipped", record.line)
        else:
            kept.append(record)
    return kept


def _line_ranges(lines: list[int]) -> str:
    ranges: list[list[int]] = []
    for line in lines:
        if ranges and line <= ranges[-1][1] + 1:
            ranges[-1][1] = line
        else:
            ranges.append([line, line])
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:LINE_RANGES_SHOWN]]
    more = f" and {len(ranges) - LINE_RANGES_SHOWN} more ranges" if len(ranges) > LINE_RANGES_SHOWN else ""
    return ("line " if len(lines) == 1 else "lines ") + ", ".join(shown) + more


def _first_problem(problems: list[str]) -> str | None:
    return f"first problem: {problems[0]}" if problems else None


def _record_votes(record: dict[str, Any]) -> list[tuple[str, int]]:
    kind = record.get("type")
    votes = []
    if stored.is_header(record):
        votes.append(("ctxwin", 10))
    elif "kind" in record and "parent_id" in record and "payload" in record and "type" not in record:
        votes.append(("ctxwin", 2))  # a session entry: {id, parent_id, kind, timestamp, payload}
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
    "DamagedInputWarning",
    "ReadReport",
    "Transcript",
    "UsageRecord",
    "detect_format",
    "load_transcript",
]
