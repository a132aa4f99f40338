"""Files read and modified (`identifiers.extract_file_ops` finds them), shown relative to the project
root most of them share."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

MIN_ROOT_FILES = 3  # paths shown relative to a project root only when this many share it
ROOT_GROUP_DEPTH = 3  # files are grouped by their first directories, this many deep, to find the root


def project_root(paths: Sequence[str]) -> str | None:
    """The directory most absolute paths share (at least MIN_ROOT_FILES of them, two levels deep), so
    file lists can show paths relative to it."""
    absolute = sorted({p for p in paths if p.startswith("/")})
    if len(absolute) < 2:
        return None
    groups: dict[str, list[str]] = {}
    for path in absolute:
        groups.setdefault("/".join(path.split("/")[:-1][:ROOT_GROUP_DEPTH + 1]), []).append(path)
    best = max(sorted(groups.items()), key=lambda kv: len(kv[1]))[1]
    if len(best) < MIN_ROOT_FILES:
        return None
    root = posixpath.commonpath(best)
    if root in best:  # a file, not a directory (one path is a prefix of another)
        root = posixpath.dirname(root)
    return root if root.count("/") >= 2 else None


def relative(path: str, root: str | None) -> str:
    if root and path.startswith(root + "/"):
        return path[len(root) + 1:]
    return path


def short_path(path: str) -> str:
    """A path by its last two components (how errors and fixes name files)."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return "/".join(parts[-2:]) if len(parts) >= 2 else (parts[0] if parts else path)
