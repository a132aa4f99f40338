"""The engine: `ContextEngine`, a small façade over one owner of its mutable state (`runtime`: the
session state derived from the log by one reducer, `state`, and beside it the engine's own bookkeeping
and caches: the view, `cache`; the repair of its prefix, `repair`), the request budget (`budget`), the
stage order (`run`), recall (`recall`) and `sync` matching; `Prepared` is the request it returns (with
`stages`, what each stage that acted did, timed); `observe` is the hook telemetry subscribes to. (Replaying
a transcript through an engine is evaluation's: `ctxwin.evaluation.replay`.)
Imports everything below it (store, pipeline, compaction, providers' overflow catalog, memory);
nothing above (tools, agent, integrations, edges)."""

from ctxwin.engine.engine import ContextEngine
from ctxwin.engine.prepared import Prepared

__all__ = ["ContextEngine", "Prepared"]
