"""Everything an engine changes between calls, in one place.

`Runtime` is the engine's only mutable state. The façade (`engine`), the stage order (`run`), the view
(`cache`) and the repair (`repair`) read and write it here and keep nothing of their own; what they
hold otherwise is configuration (the log, the counter, the policy).

- `Runtime.branch` (`Branch`) is what holds for the branch of the log the engine is on, made anew
  whenever the engine derives everything from the log again (opening, a rewind, a resent history that
  branched, a log that branched under `catch_up`). In it, `state` is the reducer's: derived from the log
  by `state.apply`, on open and on every append, so it never disagrees with the log. Beside it, what
  this engine keeps about the requests it built on that branch (how far the per-message stages got,
  dedup's memory, the circuit breaker, the previous request's keys) and what only caches work (the
  view, the repair of its prefix, the mask scan); each could be rebuilt from the log and is, on a
  reopen, which is why a resumed engine sends what a running one would.
- The rest lasts as long as the engine: what the store found damaged (reported once), events waiting
  for the next request, the recovery count, the last request built, observers that failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwin.pipeline.dedup import DedupState
from ctxwin.pipeline.mask import MaskScan
from ctxwin.pipeline.view import Event
from ctxwin.store.base import StoreProblem

from .cache import ViewCache
from .prepared import Prepared, StageRun
from .repair import RepairCache
from .state import SessionState


@dataclass
class Breaker:
    """The compaction circuit breaker (Claude Code stops after 3 consecutive failures)."""

    failures: int = 0
    """Automatic compactions that failed in a row."""
    failed_at_tokens: int = 0
    """The view's size at the last failure: the breaker stays open until the view grows past it."""
    last_failure: str = ""
    """The last failure's message: a failure is reported once, not on every call it repeats."""


@dataclass
class Branch:
    """The state of the branch the engine is on (see the module docstring)."""

    state: SessionState
    """The reducer's: everything the log says, folded in entry by entry."""
    read: tuple[str | None, int] = (None, 0)
    """The last entry folded into `state` and the length of the path it ends: what `catch_up` reads on from."""
    processed: int = 0
    """Records the per-message stages have run on."""
    dedup: DedupState = field(default_factory=DedupState)
    last_call_at: float | None = None
    """When the last request was built (cache-TTL pruning reads it)."""
    last_keys: list[str] = field(default_factory=list)
    """The previous request's message keys, and its system prompt and tools: what its prefix was."""
    last_system_key: str | None = None
    breaker: Breaker = field(default_factory=Breaker)
    runs: list[StageRun] = field(default_factory=list)
    """The stages that acted since the last request was built (the request being built gets them)."""
    view: ViewCache = field(default_factory=ViewCache)
    repair: RepairCache = field(default_factory=RepairCache)
    mask: tuple[int, object, MaskScan] | None = None
    """(view generation, mask policy, scan): the mask stage's memo, valid while both are unchanged."""

    def forget_own_requests(self) -> None:
        """Another writer sent the requests since this engine's last: what it remembers of its own (the
        previous request's prefix, the breaker, what repair last reported) starts afresh, as in an
        engine opened on the log now."""
        self.last_keys, self.last_system_key = [], None
        self.breaker = Breaker()
        self.repair = RepairCache()

    def mask_scan(self, policy: object) -> MaskScan:
        """The memo for a mask scan of the current view under `policy`: the same one while the view only
        grew and the policy stayed; a new one otherwise."""
        memo = self.mask
        if memo is None or memo[0] != self.view.generation or memo[1] is not policy:
            memo = self.mask = (self.view.generation, policy, MaskScan())
        return memo[2]


@dataclass
class Runtime:
    """The engine's mutable state (see the module docstring)."""

    branch: Branch
    problems: list[StoreProblem] = field(default_factory=list)
    """What the store found damaged when the engine opened the log (and re-attached)."""
    pending: list[Event] = field(default_factory=list)
    """Events reported with the next request (store damage, a rewind, a failed observer)."""
    recovery_attempts: int = 0
    """Overflow recoveries since the last successful call."""
    last: Prepared | None = None
    """The last request built, until something changes what the next one would be."""
    last_max_output: int | None = None
    """The answer size the last `prepare` was asked to reserve for (None: the engine's); `recover`
    retries with it."""
    observer_failures: set[tuple[str, str]] = field(default_factory=set)
    """(observer, error type) already reported."""
