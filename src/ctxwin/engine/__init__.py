"""The engine: `ContextEngine`, a small façade over the session state (derived from the log by one
reducer, `state`), the view and repair caches (`cache`), the request budget (`budget`), the stage
order (`run`), recall (`recall`) and `sync` matching; `Prepared` is the request it returns (with
`stages`, what each stage that acted did, timed); `observe` is the hook telemetry subscribes to. (Replaying
a transcript through an engine is evaluation's: `ctxwin.evaluation.replay`.)
Imports everything below it (store, pipeline, compaction, providers' overflow catalog, memory);
nothing above (tools, agent, integrations, edges)."""

from ctxwin.engine.engine import ContextEngine
from ctxwin.engine.prepared import Prepared

__all__ = ["ContextEngine", "Prepared"]
