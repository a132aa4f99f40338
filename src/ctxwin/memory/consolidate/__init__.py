"""Sleep-time consolidation (Letta's dream agents, OpenClaw's Memory-Wiki): daily notes and session logs
since the last run become a short, current, sourced MEMORY.md under the bootstrap cap, and the rest, with
every superseded fact's history, the wiki pages `memory/wiki/<topic>.md`.

- `run`: `consolidate()`, one run under the memory folder's lock; its report.
- `sources`: what the notes and sessions gained past the watermark, as statements (`Unit`s).
- `extract`: the deterministic extractor (statements -> observations of facts); `dates`: relative dates
  made absolute; `llm`: the model extractor, when one is configured (same observations, same layout).
- `facts`: facts, and how observations merge into them (current, not cumulative); `render`: MEMORY.md.
- `refs`: the refs every line carries and what they resolve to; `schedule`: `SleepTime`, the background
  runner the agent loop, `ctxwin chat` and the proxy start (after a session, or when idle).

The wiki's pages are rendered by `ctxwin.memory.wiki`.

`ctxwin.memory.consolidate(workspace, ...)` calls `consolidate()` (the package is callable, since the
package and the function share the name the issue gives them); typed code imports the function:
`from ctxwin.memory.consolidate import consolidate`.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

from ctxwin.lazy import lazy_exports

_EXPORTS = {
    **{name: "run" for name in ("ConsolidationReport", "Extractor", "RuleExtractor", "consolidate")},
    **{name: "llm" for name in ("ModelExtractor",)},
    **{name: "schedule" for name in ("SleepTime", "SleepConfig", "sleep_time")},
    **{name: "refs" for name in ("EntryRef", "parse_entry", "resolve_entry")},
    **{name: "render" for name in ("MAX_MEMORY_CHARS",)},
}

if TYPE_CHECKING:
    from ctxwin.memory.consolidate.llm import ModelExtractor
    from ctxwin.memory.consolidate.refs import EntryRef, parse_entry, resolve_entry
    from ctxwin.memory.consolidate.render import MAX_MEMORY_CHARS
    from ctxwin.memory.consolidate.run import ConsolidationReport, Extractor, RuleExtractor, consolidate
    from ctxwin.memory.consolidate.schedule import SleepConfig, SleepTime, sleep_time

__getattr__ = lazy_exports(__name__, _EXPORTS)


class _CallablePackage(types.ModuleType):
    """Importing `ctxwin.memory.consolidate` binds the package, not the function, to that name; calling
    the package runs the function, so both spellings work."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from ctxwin.memory.consolidate.run import consolidate

        return consolidate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

__all__ = [
    "MAX_MEMORY_CHARS",
    "ConsolidationReport",
    "EntryRef",
    "Extractor",
    "ModelExtractor",
    "RuleExtractor",
    "SleepConfig",
    "SleepTime",
    "consolidate",
    "parse_entry",
    "resolve_entry",
    "sleep_time",
]
