"""Progress bars for long commands: shown on stderr only once the work has taken more than a second,
never with `--quiet` or `--json`, and gone when the work is done.

Library functions take a `progress(task, done, total)` callback (`ctxwin.evaluation.compare.Progress`);
`progress_bars(enabled)` yields one that drives rich bars, one bar per task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ctxwin.cli.app import err_console, real_console

SHOW_AFTER_SECONDS = 1.0  # work that finishes sooner never shows a bar


@contextmanager
def progress_bars(enabled: bool = True) -> Iterator[Callable[[str, int, int], None]]:
    """A progress callback; with `enabled` False it does nothing."""
    started = time.monotonic()
    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=real_console(err_console), transient=True)
    tasks: dict[str, TaskID] = {}
    shown = False

    def update(task: str, done: int, total: int) -> None:
        nonlocal shown
        if not enabled:
            return
        if task not in tasks:
            tasks[task] = bars.add_task(task, total=total)
        bars.update(tasks[task], completed=done, total=total)
        if not shown and time.monotonic() - started > SHOW_AFTER_SECONDS:
            bars.start()
            shown = True

    try:
        yield update
    finally:
        if shown:
            bars.stop()
