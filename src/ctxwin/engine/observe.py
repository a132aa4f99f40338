"""What the engine tells its observers (telemetry, logs, dashboards) after each request it builds.

`ContextEngine.observers` is a list of plain callables; after every `prepare()`, `compact()` and
`recover()` each one is called with an `Observation`: the operation, when it started and ended, the
request it returned (whose `stages` and `events` say what each stage did), and for a recovery what
was learned from the error. The engine imports no observer: they subscribe themselves. An observer
that raises never breaks the request it watches; the engine reports it once per observer and kind
of error (not per message), as an event on the next request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ctxwin.pipeline.events import ObserverFailed

from .prepared import Prepared
from .recovery import Recovery

Operation = Literal["prepare", "compact", "recover"]


@dataclass(frozen=True)
class Observation:
    """One engine call. `started_ns`/`ended_ns`: wall-clock nanoseconds since the epoch. `prepared`:
    the request returned (None when the call raised; `error` is what it raised). `recovery`: for
    `recover`, the provider's error as understood (provider, observed and limit tokens) and the
    budget kept from now on."""

    operation: Operation
    started_ns: int
    ended_ns: int
    prepared: Prepared | None = None
    recovery: Recovery | None = None
    error: BaseException | None = None


Observer = Callable[[Observation], None]
MAX_OBSERVER_FAILURES = 64
"""The most (observer, error type) failures an engine reports; past them, failures go unreported
(a long-lived engine with observers that keep failing in new ways must not grow without bound)."""


def failed_observer(observer: Observer, error: Exception) -> ObserverFailed:
    """The event that reports an observer that raised (the request itself was not affected)."""
    name = getattr(observer, "__qualname__", None) or type(observer).__name__
    return ObserverFailed((), 0, 0,
                          f"observer {name} raised {type(error).__name__}: {error}; the request was built and sent "
                          "as usual", observer=name, error=type(error).__name__)
