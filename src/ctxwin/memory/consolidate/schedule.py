"""When consolidation runs by itself: after a session ends, or once the workspace has been idle for a
while (Letta's sleep-time agents run between sessions). Off unless configured.

`SleepTime(workspace, SleepConfig(...))` is the one object the agent loop, `ctxwin chat` and the proxy
hold: they call `begin()` and `end()` around a turn (the workspace is never idle in between), or
`activity()` for an instant (cheap: each notes the time under a lock the worker never holds while it
works), `session_ended()` when a session ends, and `close()` when they stop. The consolidation itself
runs on one background thread, so it never blocks a request; across processes the memory folder's lock
keeps two from running at once (a run that finds the lock taken is skipped: the other one is doing the
work). After an idle run, the next idle run waits for new
activity: an idle workspace is consolidated once, not every `idle_seconds`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ctxwin.errors import SessionLockedError
from ctxwin.memory.consolidate.render import MAX_MEMORY_CHARS
from ctxwin.memory.consolidate.run import ConsolidationReport, Extractor, consolidate

CLOSE_WAIT_S = 30.0
"""How long `close()` waits for a consolidation under way (it is never cut short: its writes are atomic)."""


class SleepConfig(BaseModel):
    """When sleep-time consolidation runs (see the module docstring). Off by default: a harness turns
    it on by holding a `SleepTime` built from one of these."""

    model_config = ConfigDict(extra="forbid")

    after_session: bool = True
    """Consolidate when a session ends (`session_ended()`: `/new`, `/quit`, a proxy session closed)."""
    idle_seconds: float | None = Field(None, gt=0)
    """Consolidate once the workspace has seen no activity for this many seconds (None: never)."""
    sessions: Path | None = None
    """The folder of ctxwin sessions to read (None: `<workspace>/.ctxwin/sessions` when it exists)."""
    max_chars: int = Field(MAX_MEMORY_CHARS, ge=1_000)
    """MEMORY.md's cap in characters."""


class SleepTime:
    """The background runner (see the module docstring). `reports` keeps the last runs' reports,
    `errors` what failed (a failed run changes nothing: the next one starts from the same state);
    `on_report` is called with each report, on the worker thread."""

    def __init__(self, workspace: str | Path, config: SleepConfig | None = None, *,
                 extractor: Extractor | None = None, on_report: Callable[[ConsolidationReport], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.workspace = Path(workspace)
        self.config = config or SleepConfig()
        self.extractor = extractor
        self.on_report = on_report
        self.clock = clock
        self.reports: list[ConsolidationReport] = []
        self.errors: list[str] = []
        self.runs = 0
        self.skipped = 0
        self._cond = threading.Condition()
        self._last_activity = clock()
        self._idle_done = True  # nothing to consolidate before the first activity
        self._due = False
        self._busy = 0  # begin() calls not ended yet: never idle while work is under way
        self._closed = False
        self._thread: threading.Thread | None = None

    # -- what the harness calls

    def activity(self) -> None:
        """A request or turn started: the idle clock starts again."""
        with self._cond:
            self._last_activity = self.clock()
            self._idle_done = False
            self._start()
            self._cond.notify()

    def begin(self) -> None:
        """Work started (a turn, a request): the workspace is not idle until the matching `end()`."""
        with self._cond:
            self._busy += 1
            self._last_activity = self.clock()
            self._idle_done = False
            self._start()

    def end(self) -> None:
        """The work `begin()` announced is over: the idle clock starts now."""
        with self._cond:
            self._busy = max(0, self._busy - 1)
            self._last_activity = self.clock()
            self._idle_done = False
            self._cond.notify()

    def session_ended(self) -> None:
        """A session ended: consolidate soon (on the worker thread)."""
        if not self.config.after_session:
            return
        with self._cond:
            self._due = True
            self._start()
            self._cond.notify()

    def close(self, wait: float | None = CLOSE_WAIT_S) -> None:
        """Stop: a consolidation asked for (`session_ended`) and not started yet still runs; one under
        way is waited for up to `wait` seconds."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(wait)

    def wait_for(self, runs: int, timeout: float) -> bool:
        """Block until `runs` consolidations have run (or been skipped); for tests and tools."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.runs + self.skipped < runs:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    # -- the worker

    def _start(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._loop, name="ctxwin-sleep-time", daemon=True)
            self._thread.start()

    def _next(self) -> bool:
        """Wait (holding the condition) until a run is due; False once closed with nothing due."""
        while True:
            if self._due:
                self._due = False
                return True
            if self._closed:
                return False
            idle = self.config.idle_seconds
            if idle is not None and not self._idle_done and not self._busy:
                left = self._last_activity + idle - self.clock()
                if left <= 0:
                    self._idle_done = True
                    return True
                self._cond.wait(left)
            else:
                self._cond.wait()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._next():
                    return
            self._consolidate()

    def _consolidate(self) -> None:
        report = None
        try:
            sessions = self.config.sessions
            if sessions is not None and not sessions.is_dir():
                sessions = None  # no session stored there yet (a proxy's store is made by its first request)
            report = consolidate(self.workspace, sessions=sessions, max_chars=self.config.max_chars,
                                 extractor=self.extractor, lock_timeout=0)
        except SessionLockedError:
            with self._cond:
                self.skipped += 1  # another process is consolidating this workspace right now
                self._cond.notify_all()
            return
        except Exception as error:  # a background run must never take its host down; the state is unchanged
            with self._cond:
                self.errors.append(f"{type(error).__name__}: {error}")
                del self.errors[:-10]
                self.runs += 1
                self._cond.notify_all()
            return
        with self._cond:
            self.reports.append(report)
            del self.reports[:-10]
            self.runs += 1
            self._cond.notify_all()
        if self.on_report is not None:
            try:
                self.on_report(report)
            except Exception as error:  # the harness's callback failing is its problem, not the worker's
                self.errors.append(f"on_report: {type(error).__name__}: {error}")


def sleep_time(workspace: str | Path | None, config: SleepConfig | None, *,
               sessions: str | Path | None = None) -> SleepTime | None:
    """The `SleepTime` a harness holds, or None when consolidation is off (no config, or no workspace
    to consolidate). `sessions` is where the harness keeps its sessions, used when the config names
    none."""
    if config is None or workspace is None:
        return None
    if config.sessions is None and sessions is not None:  # it may not exist yet: made with the first session
        config = config.model_copy(update={"sessions": Path(sessions)})
    return SleepTime(workspace, config)
