"""What one tree of agents shares: a cancel that reaches every descendant (`Cancel`), and the record
of each child (`ChildRecord`) that the tree's totals are summed from (`tree_totals`).

A parent's interrupt must stop its children, running or still waiting for a slot, and theirs in
turn; each agent still clears its own cancel at the start of a run (a new user turn after Ctrl-C), so
the link runs one way: a cancel is set when it or any ancestor is set, and clearing it never clears
what it inherits.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxwin.agent.events import RunStats

POLL_SECONDS = 0.05
"""How often a wait looks at an ancestor given as a plain `threading.Event` (a `Cancel` parent wakes
its children at once)."""
SUMMED = ("turns", "steps", "model_calls", "compactions", "compactions_inside_tool_loops", "overflows_recovered",
          "retries", "input_tokens", "output_tokens", "cost_usd")
"""`RunStats` fields that add up over a tree (the others: the largest request, the root's window)."""


class Cancel(threading.Event):
    """A cancel event linked to its parent's: `is_set()` when it or any ancestor is set. `set()` also
    sets every child made from it (`child()`), so the waits of a whole subtree wake together; `clear()`
    clears only this one, so a child made under a cancelled parent stays cancelled whatever it clears.
    The provider clients take it as the plain `threading.Event` they expect."""

    def __init__(self, parent: threading.Event | None = None) -> None:
        super().__init__()
        self.parent = parent
        self._children: weakref.WeakSet[Cancel] = weakref.WeakSet()
        # Reentrant: Ctrl-C's handler sets the root's cancel on the main thread, which may be inside
        # this very lock (spawning a child) when the signal lands.
        self._links = threading.RLock()
        if isinstance(parent, Cancel):
            with parent._links:
                parent._children.add(self)

    def child(self) -> Cancel:
        return Cancel(self)

    def is_set(self) -> bool:
        return super().is_set() or (self.parent is not None and self.parent.is_set())

    def set(self) -> None:
        with self._links:
            super().set()
            children = list(self._children)
        for child in children:
            child.set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
            if left <= 0:
                return False
            super().wait(left)
        return True


@dataclass
class ChildRecord:
    """One sub-agent of an agent, as the tree's totals see it: its id and place, and live references
    to its `RunStats` and its own children's records (so a child's numbers keep adding up after the
    child itself is gone)."""

    id: str
    depth: int
    definition: str
    context: str
    session: str
    stats: RunStats
    children: list[ChildRecord] = field(default_factory=list)
    stop: str = "running"
    background: bool = False

    def row(self) -> dict[str, Any]:
        return {"agent": self.id, "depth": self.depth, "definition": self.definition, "context": self.context,
                "session": self.session, "stop": self.stop, "background": self.background, **self.stats.to_dict()}


def descendants(children: list[ChildRecord]) -> Iterator[ChildRecord]:
    """Every record under these, depth first, in spawn order."""
    for record in list(children):
        yield record
        yield from descendants(record.children)


def tree_totals(agent_id: str, stats: RunStats, children: list[ChildRecord]) -> dict[str, Any]:
    """The totals of an agent and all its descendants: the `RunStats` fields summed (the largest
    request over the tree, the root's window; each child's errors named by its id), then `agents`: one
    row per agent, the root first, with its own numbers."""
    records = list(descendants(children))
    own = stats.to_dict()
    rows = [{"agent": agent_id, "depth": 0, **own}] + [r.row() for r in records]
    totals: dict[str, Any] = dict(own)
    for key in SUMMED:
        totals[key] = sum(row[key] for row in rows)
    totals["cost_usd"] = round(totals["cost_usd"], 6)
    totals["max_request_tokens"] = max(row["max_request_tokens"] for row in rows)
    totals["errors"] = [*own["errors"], *(f"{r.id}: {e}" for r in records for e in r.stats.errors)]
    totals["agents"] = rows
    return totals
