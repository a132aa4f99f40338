"""Reading a session file into text and records: gzip, binary and empty files, invalid UTF-8,
malformed JSON lines. Every format reader starts here, so every format gets the same robustness and
the same wording of warnings ("line N: ...")."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwin.errors import InputError

GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip stream
BINARY_SNIFF_BYTES = 65_536  # how much of the start of a file decides "binary or text"
BINARY_REPLACED_SHARE = 0.10  # more undecodable characters than this in the sniffed start: binary
WARNING_SNIPPET_CHARS = 60  # how much of a bad line a warning quotes


@dataclass
class ImportLog:
    """What an import skipped (counted by reason) and the warnings it raised. Readers fill it in as
    they go; the `Transcript` gets both at the end."""

    skipped: Counter[str] = field(default_factory=Counter)
    _warnings: list[tuple[int, str]] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """The warnings in file order (those about the whole file first)."""
        return [text for _, text in sorted(self._warnings, key=lambda w: w[0])]

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] += count

    def warn(self, message: str, line: int | None = None) -> None:
        self._warnings.append((line or 0, f"line {line}: {message}" if line is not None else message))

    def skip_bad(self, reason: str, message: str, line: int | None = None) -> None:
        """Skip something malformed: counted and warned about (a normal skip is only counted)."""
        self.skip(reason)
        self.warn(message, line)


@dataclass
class Source:
    """A session file read into text: decompressed, decoded (invalid bytes replaced, with a warning
    naming the line), and checked not to be binary or empty."""

    path: Path
    text: str
    compressed: bool
    log: ImportLog
    _document: Any = field(default=None, repr=False)
    _parsed: bool = field(default=False, repr=False)

    def document(self) -> Any | None:
        """The whole file as one JSON value, or None when it is not one (JSONL, or broken JSON).
        Parsed once: detection and the readers of JSON formats share it."""
        if not self._parsed:
            self._document = _parse_document(self.stripped())
            self._parsed = True
        return self._document

    @property
    def name(self) -> str:
        """The file name without a `.gz` suffix (what format hints look at)."""
        name = self.path.name
        return name[:-3] if name.endswith(".gz") else name

    def stripped(self) -> str:
        return self.text.lstrip(" \t\r\n")


@dataclass(frozen=True, slots=True)
class Record:
    """One parsed JSONL line: its 1-based line number and the decoded JSON value."""

    line: int
    data: Any


def read_source(path: str | Path) -> Source:
    """Read a file for import. Raises `InputError` for what cannot be a session file (a directory,
    an empty file, a binary file, a corrupt gzip stream); everything else is read, with warnings."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such file: {path}", "check the path")
    if path.is_dir():
        raise InputError(f"{path} is a directory", "give one session file (.jsonl, .jsonl.gz, .traj or .json)")
    log = ImportLog()
    raw = path.read_bytes()
    compressed = raw.startswith(GZIP_MAGIC)
    if compressed:
        raw = _gunzip(raw, path, log)
    if not raw.strip():
        raise InputError(f"{path} is empty", "give a session file with at least one record")
    if _looks_binary(raw):
        raise InputError(
            f"{path} is a binary file, not a session transcript",
            "give a JSONL session file (Claude Code, Pi, Codex), a SWE-agent .traj or OpenAI-format JSON",
        )
    text = _decode(raw, log)
    return Source(path=path, text=text[1:] if text.startswith("\ufeff") else text, compressed=compressed, log=log)


def _gunzip(raw: bytes, path: Path, log: ImportLog) -> bytes:
    decompressor = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, largest window
    try:
        data = decompressor.decompress(raw)
    except zlib.error as error:
        raise InputError(f"{path} is not a readable gzip file ({error})", "check the file or give it uncompressed") \
            from error
    if not decompressor.eof:
        log.warn(f"the gzip stream is truncated; read the first {len(data):,} bytes of it")
    return data


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
    lines = raw.split(b"\n")
    out = []
    for number, line in enumerate(lines, start=1):
        try:
            out.append(line.decode("utf-8"))
        except UnicodeDecodeError as error:
            out.append(line.decode("utf-8", errors="replace"))
            log.warn(f"invalid UTF-8 at byte {error.start} of the line; replaced with U+FFFD", number)
    return "\n".join(out)


def parse_json_lines(source: Source) -> list[Record]:
    """Every non-blank line parsed as JSON. A line that does not parse is skipped with a warning
    naming it ("malformed_json"); a last line that stops mid-record says the file looks cut off."""
    records: list[Record] = []
    lines = source.text.split("\n")  # not splitlines(): U+2028 inside a JSON string is not a line break
    last = len(lines)
    while last > 0 and not lines[last - 1].strip():
        last -= 1
    for number, line in enumerate(lines[:last], start=1):
        stripped = line.strip()
        if not stripped:
            continue
        try:
            records.append(Record(number, json.loads(stripped)))
        except json.JSONDecodeError as error:
            cut = " (the file seems cut off mid-line)" if number == last else ""
            source.log.skip_bad("malformed_json", f"not valid JSON{cut}: {error.msg}; {_snippet(stripped)}", number)
    return records


def _parse_document(text: str) -> Any | None:
    if not text or text[0] not in "[{":
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _snippet(text: str) -> str:
    if len(text) <= WARNING_SNIPPET_CHARS:
        return repr(text)
    return repr(text[:WARNING_SNIPPET_CHARS]) + f"… ({len(text):,} chars)"
