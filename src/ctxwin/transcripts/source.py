"""Reading a session file into text and records: gzip, binary and empty files, invalid UTF-8,
malformed JSON lines, lines holding two records glued together, JSON nested too deep, lone UTF-16
surrogates. Every format reader starts here, so every format gets the same robustness and the same
wording of warnings ("line N: ..."). The file itself is read by `ctxwin.files` (regular files only,
size and decompression caps)."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwin.errors import InputError, JSONTooDeepError, MalformedJSONError
from ctxwin.files import FileLimits, as_path, loads_json, may_hold_surrogates, read_file, replace_surrogates

BINARY_SNIFF_BYTES = 65_536  # how much of the start of a file decides "binary or text"
BINARY_REPLACED_SHARE = 0.10  # more undecodable characters than this in the sniffed start: binary
WARNING_SNIPPET_CHARS = 60  # how much of a bad line a warning quotes
MAX_FILE_BYTES_ENV = "CTXWIN_MAX_FILE_BYTES"  # overrides FileLimits.max_bytes for session files
MAX_DECOMPRESSED_BYTES_ENV = "CTXWIN_MAX_DECOMPRESSED_BYTES"  # ... and FileLimits.max_decompressed_bytes


def session_file_limits(environ: dict[str, str] | None = None) -> FileLimits:
    """The caps for reading session files: the defaults, or the environment's overrides (bytes)."""
    env = os.environ if environ is None else environ
    defaults = FileLimits()
    values = {}
    for name, field_name in ((MAX_FILE_BYTES_ENV, "max_bytes"), (MAX_DECOMPRESSED_BYTES_ENV, "max_decompressed_bytes")):
        raw = env.get(name)
        if raw is None or not raw.strip():
            continue
        try:
            value = int(raw.replace("_", ""))
        except ValueError:
            value = -1
        if value <= 0:
            raise InputError(f"{name}={raw!r} is not a positive number of bytes", f"set {name} to, e.g., 4294967296")
        values[field_name] = value
    return FileLimits(**{**defaults.__dict__, **values})


@dataclass
class ImportLog:
    """What an import skipped (counted by reason), what in it was damaged (counted by reason: the
    malformed part of `skipped`, plus content replaced or repaired in place), what was repaired with
    nothing lost (`repaired`), and the warnings it raised. Readers fill it in as they go; the
    `Transcript` gets all of it at the end."""

    skipped: Counter[str] = field(default_factory=Counter)
    damaged: Counter[str] = field(default_factory=Counter)
    repaired: Counter[str] = field(default_factory=Counter)
    _warnings: list[tuple[int, str]] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """The warnings in file order (those about the whole file first)."""
        return [text for _, text in sorted(self._warnings, key=lambda w: w[0])]

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] += count

    def warn(self, message: str, line: int | None = None) -> None:
        self._warnings.append((line or 0, f"line {line}: {message}" if line is not None else message))

    def damage(self, reason: str, message: str, line: int | None = None, count: int = 1) -> None:
        """Damaged content that was read anyway (replaced characters, a cut gzip stream): counted and
        warned about, not skipped."""
        self.damaged[reason] += count
        self.warn(message, line)

    def skip_bad(self, reason: str, message: str, line: int | None = None) -> None:
        """Skip something malformed: counted (as skipped and as damaged) and warned about (a normal skip
        is only counted)."""
        self.skip(reason)
        self.damage(reason, message, line)

    def repair(self, reason: str, count: int = 1) -> None:
        """Something malformed that was read in full after all (two records glued on one line)."""
        self.repaired[reason] += count


@dataclass
class Source:
    """A session file read into text: decompressed, decoded (invalid bytes replaced, with a warning
    naming the line), and checked not to be binary or empty. Its records (JSONL) and its document (one
    JSON value) are parsed once, on first use, and shared by detection and the readers."""

    path: Path
    text: str
    compressed: bool
    log: ImportLog
    single_line: bool = False
    """Whether the file holds one non-blank line."""
    _document: Any = field(default=None, repr=False)
    _parsed: bool = field(default=False, repr=False)
    _records: list[Record] | None = field(default=None, repr=False)
    _record_filter: Callable[[list[Record]], list[Record]] | None = field(default=None, repr=False)

    def document(self) -> Any | None:
        """The whole file as one JSON value, or None when it is not one (JSONL, or broken JSON).
        A file of several lines whose first line is a JSON value of its own is JSONL and is not
        parsed whole."""
        if not self._parsed:
            self._parsed = True
            self._document = self._parse_document()
        return self._document

    def records(self) -> list[Record]:
        """Every non-blank line parsed as JSON (see `parse_json_lines`), once."""
        if self._records is None:
            document = self.document()
            if self.single_line and isinstance(document, dict):  # a one-record JSONL file: already parsed
                records = [Record(self.text.count("\n", 0, _content_start(self.text)) + 1, document)]
            else:
                records = _parse_lines(self)
            self._records = self._record_filter(records) if self._record_filter else records
        return self._records

    def filter_records(self, keep: Callable[[list[Record]], list[Record]]) -> None:
        """Have `records()` pass through `keep` (which logs what it drops), before any reader sees them."""
        self._record_filter = keep
        if self._records is not None:
            self._records = keep(self._records)

    @property
    def name(self) -> str:
        """The file name without a `.gz` suffix (what format hints look at)."""
        name = self.path.name
        return name[:-3] if name.endswith(".gz") else name

    def _parse_document(self) -> Any | None:
        text = self.text
        start = _content_start(text)
        if start >= len(text) or text[start] not in "[{":
            return None
        if not self.single_line:
            end = text.find("\n", start)
            try:
                loads_json(text[start:end])
            except InputError:
                pass
            else:
                return None  # the first line is a JSON value of its own: JSONL
        try:
            value = loads_json(text)
        except JSONTooDeepError as error:
            if not self.single_line and _looks_jsonl(text, start):
                return None  # JSONL whose first line is the deep one: that line is skipped with a warning
            raise JSONTooDeepError(f"{self.path}: {error.message}", error.hint) from error
        except MalformedJSONError:
            return None
        line = text.count("\n", 0, start) + 1 if self.single_line else None  # a one-record file: its line
        return _scrubbed(value, text, self.log, line)


@dataclass(frozen=True, slots=True)
class Record:
    """One parsed JSONL line: its 1-based line number and the decoded JSON value."""

    line: int
    data: Any


def read_source(path: str | Path, limits: FileLimits | None = None) -> Source:
    """Read a file for import. Raises `InputError` for what cannot be a session file (not a regular file,
    over the size caps, empty, binary, a corrupt gzip stream); everything else is read, with warnings
    (a gzip stream cut short is read up to the cut)."""
    path = as_path(path, "a transcript file")
    log = ImportLog()
    content = read_file(path, limits=limits or session_file_limits())
    compressed, truncated, raw = content.compressed, content.truncated, content.data
    del content  # the bytes are dropped as soon as they are decoded: a big file is held once, as text
    if _NON_BLANK_BYTES.search(raw) is None:  # not raw.strip(): that would copy a big file once more
        raise InputError(f"{path} is empty", "give a session file with at least one record")
    if _looks_binary(raw):
        raise InputError(
            f"{path} is a binary file, not a session transcript",
            "give a JSONL session file (Claude Code, Pi, Codex), a SWE-agent .traj or OpenAI-format JSON",
        )
    text = _decode(raw, log)
    del raw
    if text.startswith("\ufeff"):
        text = text[1:]
    if truncated:
        log.damage("truncated_gzip", "the gzip stream is truncated; read what it held before the cut")
    start = _content_start(text)
    newline = text.find("\n", start)
    single = newline < 0 or _NON_BLANK_AFTER.search(text, newline) is None
    return Source(path=path, text=text, compressed=compressed, log=log, single_line=single)


def _looks_binary(raw: bytes) -> bool:
    head = raw[:BINARY_SNIFF_BYTES]
    if b"\x00" in head:
        return True
    # A cut in the middle of a multi-byte character at the sniff boundary is not "binary".
    decoded = head.decode("utf-8", errors="replace")
    return decoded.count("\ufffd") > BINARY_REPLACED_SHARE * max(1, len(decoded))


def _decode(raw: bytes, log: ImportLog) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    # Slow path, only for broken files: find which lines hold the bad bytes, so the warning can say.
    out = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError as error:
            out.append(line.decode("utf-8", errors="replace"))
            log.damage("invalid_utf8", f"invalid UTF-8 at byte {error.start} of the line; replaced with U+FFFD", number)
    return "\n".join(out)


def parse_json_lines(source: Source) -> list[Record]:
    """Every non-blank line parsed as JSON, once per file. A line that does not parse is skipped with a
    warning naming it ("malformed_json"; a last line that stops mid-record says the file looks cut off),
    and so is one nested too deep ("too_deep"). A line holding several JSON values glued together
    (a harness that appended without a newline) gives a record for each, counted in `repaired`."""
    return source.records()


def _parse_lines(source: Source) -> list[Record]:
    text, log = source.text, source.log
    records: list[Record] = []
    last = text.count("\n", 0, _content_end(text)) + 1  # the last non-blank line
    for number, line in _lines(text):
        try:
            records.append(Record(number, _scrubbed(loads_json(line), line, log, number)))
        except JSONTooDeepError as error:
            log.skip_bad("too_deep", f"{error.message}; skipped", number)
        except MalformedJSONError as error:
            if error.msg == "Extra data":  # a complete value, then more: glued values, or trailing junk
                _glued(line, number, records, log)
                continue
            cut = " (the file seems cut off mid-line)" if number == last else ""
            log.skip_bad("malformed_json", f"not valid JSON{cut}: {error.msg}; {_snippet(line)}", number)
    return records


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, stripped line) of each non-blank line, one line copied at a time (no list of every
    line), split on "\n" only: U+2028 inside a JSON string is not a line break."""
    number = 0
    start = 0
    size = len(text)
    while start < size:
        end = text.find("\n", start)
        if end < 0:
            end = size
        number += 1
        if start == 0 and end == size:
            line = text.strip(" \t\r")  # the whole text: no copy when there is nothing to strip
        else:
            line = text[start:end].strip(" \t\r")
        if line:
            yield number, line
        start = end + 1


def _glued(line: str, number: int, records: list[Record], log: ImportLog) -> None:
    """Read a line whose first JSON value is followed by more (`{...}{...}`, from a harness that
    appended without a newline): a record for each complete value (counted in `repaired`), and a warning
    for whatever follows the last one if that is not JSON."""
    decoder = json.JSONDecoder()
    values: list[Any] = []  # decoded JSON, any shape
    position = 0
    while position < len(line):
        try:
            value, position = decoder.raw_decode(line, position)
        except json.JSONDecodeError as error:
            _rest_malformed(line, values, error, number, records, log)
            return
        values.append(value)
        while position < len(line) and line[position] in _BLANK:
            position += 1
    for value in values:
        records.append(Record(number, _scrubbed(value, line, log, number)))
    log.repair("glued_json_lines")
    log.repair("glued_json_records", len(values))


def _rest_malformed(line: str, values: list[Any], error: json.JSONDecodeError, number: int, records: list[Record],
                    log: ImportLog) -> None:
    for value in values:
        records.append(Record(number, _scrubbed(value, line, log, number)))
    log.skip_bad("malformed_json", f"{len(values)} JSON value(s) read, then not valid JSON at column {error.pos + 1}: "
                 f"{error.msg}; {_snippet(line[error.pos:])}", number)


def _scrubbed(value: Any, text: str, log: ImportLog, line: int | None) -> Any:
    """`value` with lone UTF-16 surrogates replaced by U+FFFD (no provider can encode them), reported as
    damaged content. Only walked when the text has a surrogate escape at all."""
    if not may_hold_surrogates(text):
        return value
    value, count = replace_surrogates(value)
    if count:
        log.damage("lone_surrogate", f"{count} lone UTF-16 surrogate(s) (a character cut in half) replaced "
                   "with U+FFFD", line, count)
    return value


_NON_BLANK_AFTER = re.compile(r"\n[ \t\r\n]*[^ \t\r\n]")
_NON_BLANK_BYTES = re.compile(rb"[^ \t\r\n\x0b\x0c]")
JSONL_SNIFF_LINES = 5  # lines looked at to tell JSONL with a bad first line from one deep JSON document
_BLANK = " \t\r\n"


def _looks_jsonl(text: str, start: int) -> bool:
    """Whether one of the first lines after the first is a JSON object by itself (a pretty-printed
    document has no such line)."""
    position = text.find("\n", start)
    for _ in range(JSONL_SNIFF_LINES):
        if position < 0:
            return False
        end = text.find("\n", position + 1)
        line = text[position + 1:end if end >= 0 else len(text)].strip()
        position = end
        if line.startswith("{"):
            try:
                if isinstance(loads_json(line), dict):
                    return True
            except InputError:
                continue
    return False


def _content_start(text: str) -> int:
    start = 0
    while start < len(text) and text[start] in _BLANK:
        start += 1
    return start


def _content_end(text: str) -> int:
    end = len(text)
    while end > 0 and text[end - 1] in _BLANK:
        end -= 1
    return end


def _snippet(text: str) -> str:
    if len(text) <= WARNING_SNIPPET_CHARS:
        return repr(text)
    return repr(text[:WARNING_SNIPPET_CHARS]) + f"… ({len(text):,} chars)"
