"""The engine: `ContextEngine`, a small façade over the session state (derived from the log by one
reducer, `state`), the view and repair caches (`cache`), the request budget (`budget`), the stage
order (`run`), recall (`recall`) and `sync` matching; `Prepared` is the request it returns.
Imports everything below it (store, pipeline, compaction, providers' overflow catalog, memory);
nothing above (tools, agent, integrations, edges)."""

from ctxwin.engine.engine import ContextEngine
from ctxwin.engine.prepared import Prepared
from ctxwin.engine.replay import CallRecord, ReplayResult, call_record, iter_replay, replay

__all__ = ["CallRecord", "ContextEngine", "Prepared", "ReplayResult", "call_record", "iter_replay", "replay"]
