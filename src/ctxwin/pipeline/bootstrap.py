"""Bootstrap: workspace context files (AGENTS.md, CLAUDE.md, SOUL.md, ...) in the system prompt, with
a per-file and a total cap. A cut file keeps its head and tail around a marker naming the file, so the
agent knows to read it (OpenClaw's bootstrap; Pi injects without caps).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ctxwin.files import BINARY_REFUSAL, is_binary
from ctxwin.pipeline.cut import head_tail
from ctxwin.policies.model import BootstrapPolicy

LOG = logging.getLogger(__name__)
MIN_REMAINING_CHARS = 64
"""Stop adding files once fewer characters than this remain of the total budget."""
HEADER = "# Project Context\n\nThese workspace files were loaded for you:\n"
TRUNCATION_NOTICE = ("Some workspace files above were truncated to fit; read them directly (the marker in each "
                     "names the file) when you need their full content.")


@dataclass(frozen=True, slots=True)
class BootstrapFile:
    name: str
    chars: int
    injected_chars: int

    @property
    def truncated(self) -> bool:
        return self.injected_chars < self.chars


@dataclass(frozen=True, slots=True)
class Bootstrap:
    text: str
    files: tuple[BootstrapFile, ...]

    @property
    def truncated(self) -> bool:
        return any(f.truncated for f in self.files)


def marker(name: str) -> str:
    return f"\n[...truncated, read {name} for full content...]\n"


def fit_file(name: str, content: str, budget: int, head_share: float) -> str:
    if len(content) <= budget:
        return content
    mark = marker(name)
    room = max(budget - len(mark), 0)
    cut = head_tail(content, int(room * head_share), room - int(room * head_share))
    return f"{cut.head}{mark}{cut.tail}"


def render(files: Sequence[tuple[str, str]], policy: BootstrapPolicy) -> Bootstrap:
    """The system-prompt section for `files` ((name, content) pairs, in injection order)."""
    parts: list[str] = []
    report: list[BootstrapFile] = []
    remaining = policy.total_max_chars
    for name, content in files:
        if remaining < MIN_REMAINING_CHARS:
            report.append(BootstrapFile(name, len(content), 0))
            continue
        shown = fit_file(name, content, min(policy.per_file_max_chars, remaining), policy.head_share)
        remaining -= len(shown)
        parts.append(f"\n## {name}\n\n{shown}\n")
        report.append(BootstrapFile(name, len(content), len(shown)))
    if not parts:
        return Bootstrap("", tuple(report))
    text = HEADER + "".join(parts)
    if any(f.truncated for f in report):
        text += "\n" + TRUNCATION_NOTICE + "\n"
    return Bootstrap(text, tuple(report))


def refused(name: str, reason: str) -> str:
    """What the prompt holds in place of a file that was not loaded, so the agent knows it is there."""
    return f"[{name} was not loaded: {reason}.]"


def read_files(root: Path, policy: BootstrapPolicy) -> list[tuple[str, str]]:
    """The policy's files that exist under `root`, decoded as UTF-8 (invalid bytes replaced). A binary
    file is not loaded: a one-line notice stands in its place (`refused`) and a warning is logged."""
    found = []
    for name in policy.files:
        path = root / name
        if path.is_file():
            data = path.read_bytes()
            if is_binary(data):
                LOG.warning("bootstrap: %s not loaded: %s", name, BINARY_REFUSAL)
                found.append((name, refused(name, BINARY_REFUSAL)))
                continue
            found.append((name, data.decode("utf-8", "replace")))
    return found
