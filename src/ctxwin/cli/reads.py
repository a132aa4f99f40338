"""How every command that reads session files reports what was wrong with them, the same way:

- each problem (a skipped line, replaced bytes, a cut gzip stream) on stderr as `warning: line N: ...`
  (prefixed by the file when several were read), at most `WARNINGS_SHOWN` per file, after the output;
- the counts in the `read` object of `--json` output;
- exit code 3 when anything was damaged (the output is complete for what could be read); 2 (from the
  `InputError`) when nothing could be read.

The library says what it found through `DamagedInputWarning` (one per damaged file, from
`load_transcript`), so the commands need no access to the transcripts a library call loaded:

    reads = SessionReads()
    with reads.collect():
        result = library_call(...)
    print_json(result.to_dict() | {"read": reads.to_dict()})
    reads.finish()
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import typer
from rich.markup import escape

from ctxwin.cli.app import err_console
from ctxwin.transcripts.model import DamagedInputWarning, ReadReport

EXIT_DAMAGED = 3  # the output was printed, but parts of the input were damaged (listed on stderr)
WARNINGS_SHOWN = 20  # problems printed per file; the rest are counted


@dataclass
class SessionReads:
    """The damaged (or repaired) files seen while a command ran, and the other library warnings (printed once each)."""

    reports: dict[tuple[str, str], ReadReport] = field(default_factory=dict)

    @contextmanager
    def collect(self) -> Iterator[SessionReads]:
        """Record the library's warnings while the block runs. Damage reports are kept for `finish`;
        every other warning is printed once on stderr when the block ends."""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield self
            finally:
                others: dict[str, None] = {}
                for warning in caught:
                    if issubclass(warning.category, ResourceWarning):
                        continue  # the collector's notes on objects of whatever ran before: not about the input
                    if isinstance(warning.message, DamagedInputWarning) and warning.message.report is not None:
                        report = warning.message.report
                        self.reports.setdefault((report.source, report.format), report)
                    else:
                        others.setdefault(str(warning.message))
                for message in others:
                    err_console.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)

    @property
    def damaged(self) -> bool:
        return any(report.is_damaged for report in self.reports.values())

    def to_dict(self) -> dict[str, Any]:
        """The `read` object of `--json` output: totals, and one entry per damaged file."""
        files = [report.to_dict() for report in self.reports.values()]
        return {
            "damaged_files": sum(report.is_damaged for report in self.reports.values()),
            "damaged": sum(f["damaged_total"] for f in files),
            "repaired": sum(f["repairs"] for f in files),
            "warnings": sum(f["warnings"] for f in files),
            "files": files,
        }

    def finish(self) -> None:
        """Print each damaged file's problems on stderr, then exit 3 if there were any."""
        several = len(self.reports) > 1
        for report in self.reports.values():
            prefix = f"{report.source}: " if several else ""
            for note in report.notes():
                err_console.print(f"note: {escape(prefix + note)}", highlight=False, soft_wrap=True)
            for problem in report.warnings[:WARNINGS_SHOWN]:
                err_console.print(f"[yellow]warning:[/] {escape(prefix + problem)}", highlight=False, soft_wrap=True)
            if len(report.warnings) > WARNINGS_SHOWN:
                err_console.print(f"[yellow]warning:[/] {escape(prefix)}… and "
                                  f"{len(report.warnings) - WARNINGS_SHOWN} more", highlight=False)
        if self.damaged:
            raise typer.Exit(EXIT_DAMAGED)
