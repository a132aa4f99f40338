""".gitignore matching and the directory walk that grep's fallback, find and ls share.

The rules follow gitignore(5): blank lines and `#` comments skipped, `!` negates, a trailing `/`
matches directories only, a pattern with a `/` before its end is anchored to its file's folder,
otherwise it matches a name at any depth; `*` and `?` stay inside one path segment, `**` crosses
them. Later rules win, deeper files after shallower ones. A path inside an ignored folder is ignored
(the walk never enters it), as git and ripgrep do.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

ALWAYS_SKIPPED = (".git", "node_modules")  # folder names never walked into, ignore files or not
IGNORE_FILE = ".gitignore"  # the only ignore file honoured (ripgrep is told the same)


@dataclass(frozen=True, slots=True)
class Rule:
    base: str  # folder of the .gitignore, relative to the walk's root ("" for the root)
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def glob_to_regex(glob: str) -> str:
    """A gitignore glob (no leading/trailing slash handling) as a regex body over a relative path."""
    out: list[str] = []
    i = 0
    n = len(glob)
    while i < n:
        c = glob[i]
        if c == "*":
            if glob[i : i + 2] == "**":
                at_start = i == 0 or glob[i - 1] == "/"
                j = i + 2
                if at_start and (j == n or glob[j] == "/"):
                    if j == n:
                        out.append(".*")  # trailing "/**": everything inside
                        i = j
                    else:
                        out.append("(?:.*/)?")  # "**/": zero or more folders
                        i = j + 1
                    continue
                out.append("[^/]*")
                i = j
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = glob[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse_rule(line: str, base: str) -> Rule | None:
    """One .gitignore line as a rule, or None for blanks and comments."""
    line = line.rstrip("\n").rstrip("\r")
    if not line or line.startswith("#"):
        return None
    # Trailing spaces are ignored unless escaped with a backslash.
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        stripped += " "
    line = stripped
    negate = line.startswith("!")
    if negate or line.startswith("\\!") or line.startswith("\\#"):
        line = line[1:]
    dir_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    body = glob_to_regex(line)
    regex = re.compile(body if anchored else f"(?:.*/)?{body}", re.DOTALL)
    return Rule(base, regex, negate, dir_only)


def parse_rules(text: str, base: str) -> list[Rule]:
    return [rule for line in text.split("\n") if (rule := parse_rule(line, base)) is not None]


def ignored(rules: Sequence[Rule], rel: str, is_dir: bool) -> bool:
    """Whether `rel` (relative to the walk's root, `/`-separated) is ignored by `rules` (last match wins)."""
    for rule in reversed(rules):
        if rule.dir_only and not is_dir:
            continue
        if rule.base:
            if not rel.startswith(rule.base + "/"):
                continue
            local = rel[len(rule.base) + 1 :]
        else:
            local = rel
        if rule.regex.fullmatch(local):
            return not rule.negate
    return False


def glob_matcher(pattern: str) -> re.Pattern[str]:
    """A glob for find/grep: with a `/` it matches the whole relative path, otherwise the name;
    `**` crosses folders."""
    body = glob_to_regex(pattern.lstrip("/"))
    return re.compile(body if "/" in pattern else f"(?:.*/)?{body}", re.DOTALL)


def load_rules(directory: str, base: str) -> list[Rule]:
    try:
        with open(os.path.join(directory, IGNORE_FILE), encoding="utf-8", errors="replace") as handle:
            return parse_rules(handle.read(), base)
    except OSError:
        return []


def ancestor_rules(root: str, rel_dir: str) -> list[Rule]:
    """The rules of the .gitignore files from `root` down to (not including) `rel_dir`."""
    rules = load_rules(root, "") if rel_dir not in ("", ".") else []
    if rel_dir in ("", "."):
        return rules
    parts = rel_dir.split("/")
    for depth in range(1, len(parts)):
        base = "/".join(parts[:depth])
        rules += load_rules(os.path.join(root, base), base)
    return rules


@dataclass(frozen=True, slots=True)
class WalkEntry:
    rel: str  # relative to the walk's root, "/"-separated
    path: str  # absolute
    is_dir: bool
    size: int


def walk(
    root: str,
    start_rel: str,
    *,
    respect_ignore: bool = True,
    skip_name: Sequence[str] = ALWAYS_SKIPPED,
    denied: Callable[[str], bool] | None = None,
    unignore: Callable[[str], bool] | None = None,
) -> Iterator[WalkEntry]:
    """Regular files and folders under `root/start_rel` (not `start_rel` itself), depth first in
    name order. Symlinks are not followed and not listed (as ripgrep does by default); FIFOs,
    sockets and devices are skipped. `denied(rel)` prunes deny-listed names; `unignore(rel)` keeps
    an entry that .gitignore would skip (ripgrep's rule for paths its --glob names)."""
    start_rel = "" if start_rel in ("", ".") else start_rel
    rules = ancestor_rules(root, start_rel) if respect_ignore else []
    yield from _walk_dir(root, start_rel, rules, respect_ignore, frozenset(skip_name), denied, unignore)


def _walk_dir(
    root: str,
    rel_dir: str,
    rules: list[Rule],
    respect_ignore: bool,
    skip: frozenset[str],
    denied: Callable[[str], bool] | None,
    unignore: Callable[[str], bool] | None,
) -> Iterator[WalkEntry]:
    directory = os.path.join(root, rel_dir) if rel_dir else root
    if respect_ignore:
        own = load_rules(directory, rel_dir)
        if own:
            rules = rules + own
    try:
        with os.scandir(directory) as scan:
            entries = sorted(scan, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        mode = info.st_mode
        is_dir = stat.S_ISDIR(mode)
        if not is_dir and not stat.S_ISREG(mode):
            continue  # symlinks, FIFOs, sockets, devices
        if is_dir and entry.name in skip:
            continue
        if denied is not None and denied(rel):
            continue
        if respect_ignore and rules and ignored(rules, rel, is_dir) and (unignore is None or not unignore(rel)):
            continue
        yield WalkEntry(rel, entry.path, is_dir, info.st_size)
        if is_dir:
            yield from _walk_dir(root, rel, rules, respect_ignore, skip, denied, unignore)


def path_key(rel: str) -> tuple[str, ...]:
    """Sort key of a relative path: folder by folder, as a tree walk in name order lists them."""
    return tuple(rel.split("/"))


def rebase_line(line: str, base: str) -> str | None:
    """A .gitignore line from folder `base` rewritten to mean the same from the walk's root (for
    handing parent folders' rules to ripgrep as one `--ignore-file`)."""
    raw = line.rstrip("\n").rstrip("\r")
    if not raw.strip() or raw.startswith("#"):
        return None
    if not base:
        return raw
    negate = raw.startswith("!")
    body = raw[1:] if negate else raw
    trailing = "/" if body.rstrip(" ").endswith("/") else ""
    core = body.rstrip(" ").rstrip("/")
    if not core:
        return None
    anchored = "/" in core
    core = core.lstrip("/")
    rebased = f"/{base}/{core}" if anchored else f"/{base}/**/{core}"
    return ("!" if negate else "") + rebased + trailing


def ancestor_ignore_text(root: str, rel_dir: str) -> str:
    """The rules of the .gitignore files from `root` down to (not including) `rel_dir`, rebased
    to `root`, as the text of one ignore file."""
    if rel_dir in ("", "."):
        return ""
    parts = rel_dir.split("/")
    lines: list[str] = []
    for depth in range(len(parts)):
        base = "/".join(parts[:depth])
        folder = os.path.join(root, base) if base else root
        try:
            with open(os.path.join(folder, IGNORE_FILE), encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        lines += [rebased for line in text.split("\n") if (rebased := rebase_line(line, base)) is not None]
    return "\n".join(lines) + ("\n" if lines else "")
