"""The workspace's memory folder (OpenClaw's layout) and what of it is loaded at session start.

    <workspace>/MEMORY.md              curated long-term memory (decisions, preferences, durable facts)
    <workspace>/memory/YYYY-MM-DD.md   the day's notes, append-only

At session start the agent sees MEMORY.md and today's and yesterday's notes, through the bootstrap
stage and its caps (`bootstrap_files` gives the (name, content) pairs for `pipeline.bootstrap.render`).
After `/new` the same files are read again (`reinjection`), so notes the old session's flush wrote
moments ago reach the new one. Read once per session start, not per request: a note appended mid-
session must not change the system prompt (and break the provider's cache) on every call.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from ctxwin.files import too_many_links
from ctxwin.paths import DEFAULT_DENY, denied_tail
from ctxwin.pipeline import bootstrap
from ctxwin.policies.model import BootstrapPolicy

MEMORY_FILE = "MEMORY.md"
MEMORY_DIR = "memory"
STARTUP_DAYS = 2
"""Daily notes loaded at session start: today and yesterday."""
SKIP_DIRS = frozenset({".git", "node_modules", ".ctxwin", "__pycache__", ".venv", "venv", ".tox", ".mypy_cache"})
"""Folders `workspace_files` never walks into."""
FILE_MAX_BYTES = 2 * 1024 * 1024
"""Workspace files larger than this are not indexed for `semantic_search_files`."""
TEXT_SUFFIXES = frozenset({".md", ".txt", ".rst", ".py", ".js", ".ts", ".tsx", ".jsx", ".json", ".toml", ".yaml",
                           ".yml", ".ini", ".cfg", ".go", ".rs", ".java", ".c", ".h", ".cpp", ".hpp", ".rb", ".sh",
                           ".sql", ".html", ".css", ".csv", ".kt", ".swift", ".php", ".lua", ".r", ".scala"})
"""Suffixes `workspace_files` indexes (plus files with no suffix)."""


def daily_note_name(day: date) -> str:
    """`memory/YYYY-MM-DD.md`, relative to the workspace."""
    return f"{MEMORY_DIR}/{day:%Y-%m-%d}.md"


def daily_note_path(workspace: str | Path, day: date) -> Path:
    return Path(workspace) / daily_note_name(day)


def memory_files(workspace: str | Path) -> list[str]:
    """MEMORY.md (when present) and every memory/**/*.md, relative to the workspace, sorted. Symlinks
    are not followed out of the folder (a link is indexed only when it resolves inside it)."""
    root = Path(workspace)
    found: list[str] = []
    if (root / MEMORY_FILE).is_file():
        found.append(MEMORY_FILE)
    folder = root / MEMORY_DIR
    if folder.is_dir():
        inside = folder.resolve()
        for path in sorted(folder.rglob("*.md")):
            if path.is_file() and path.resolve().is_relative_to(inside):
                found.append(path.relative_to(root).as_posix())
    return found


@dataclass(frozen=True, slots=True)
class FileScope:
    """The folder `semantic_search_files` indexes and what of it is refused: `deny` are the workspace's
    deny patterns (a `Workspace`'s own when it has custom ones), and files with more than one hard link
    are left out unless `allow_hard_links` (their other names may be secrets: `ln .env notes.txt`), as
    the workspace tools do."""

    root: Path
    deny: Sequence[str] = DEFAULT_DENY
    allow_hard_links: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        object.__setattr__(self, "deny", tuple(self.deny))  # hashable: the compiled patterns are cached by it


def workspace_files(workspace: str | Path | FileScope) -> list[str]:
    """Text files of the workspace for `semantic_search_files`, relative to it: dot-folders, vendored
    and build folders, large files, the memory folder itself (indexed as `memory`) and whatever the
    deny list names (a denied folder is not entered) left out. Symlinks are never followed (neither
    to files nor into folders), so nothing outside the folder is listed."""
    scope = workspace if isinstance(workspace, FileScope) else FileScope(Path(workspace))
    root = scope.root
    found: list[str] = []
    for folder, dirs, names in os.walk(root):  # os.walk does not descend into symlinked folders
        here = Path(folder).relative_to(root).as_posix()
        prefix = "" if here == "." else here + "/"
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")
                         and not denied_tail(prefix + d, scope.deny))
        for name in sorted(names):
            rel = prefix + name
            if rel == MEMORY_FILE or rel.startswith(MEMORY_DIR + "/") or name.startswith("."):
                continue
            suffix = Path(name).suffix
            if suffix and suffix.lower() not in TEXT_SUFFIXES:
                continue
            if denied_tail(rel, scope.deny):  # the folders above were checked as the walk entered them
                continue
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISLNK(info.st_mode) or info.st_size > FILE_MAX_BYTES:
                continue
            if too_many_links(info, scope.allow_hard_links):
                continue
            found.append(rel)
    return found


def startup_names(today: date, days: int = STARTUP_DAYS) -> list[str]:
    """MEMORY.md, then the daily notes from the oldest of the `days` to today."""
    return [MEMORY_FILE, *(daily_note_name(today - timedelta(days=n)) for n in range(days - 1, -1, -1))]


def bootstrap_files(workspace: str | Path, today: date, policy: BootstrapPolicy, *,
                    days: int = STARTUP_DAYS) -> list[tuple[str, str]]:
    """The (name, content) pairs for `pipeline.bootstrap.render` at session start: the policy's files
    (`pipeline.bootstrap.read_files`), then MEMORY.md if the policy does not list it, then yesterday's
    and today's notes. Missing files are left out."""
    root = Path(workspace)
    found = bootstrap.read_files(root, policy)
    names = {name for name, _ in found}
    extra = [n for n in startup_names(today, days) if n not in names and n not in policy.files]
    found.extend(bootstrap.read_files(root, policy.model_copy(update={"files": extra})))
    return found


def startup_context(workspace: str | Path, today: date, policy: BootstrapPolicy, *,
                    days: int = STARTUP_DAYS) -> bootstrap.Bootstrap:
    """The system-prompt section for a session start: `bootstrap_files` through the bootstrap caps."""
    return bootstrap.render(bootstrap_files(workspace, today, policy, days=days), policy)


def reinjection(workspace: str | Path, today: date, policy: BootstrapPolicy, *,
                days: int = STARTUP_DAYS) -> bootstrap.Bootstrap:
    """What a session started by `/new` loads: the memory files read again now (including what the
    ended session's flush just appended), through the same caps. Only the memory files: the rest of
    the bootstrap is the new session's own start."""
    names = [n for n in startup_names(today, days)]
    files = bootstrap.read_files(Path(workspace), policy.model_copy(update={"files": names}))
    return bootstrap.render(files, policy)


def is_writable(workspace: str | Path) -> bool:
    """Whether the flush may write here: the workspace (or its memory folder, when present) is a
    folder this process can write to."""
    root = Path(workspace)
    folder = root / MEMORY_DIR
    target = folder if folder.is_dir() else root
    return target.is_dir() and os.access(target, os.W_OK | os.X_OK)
