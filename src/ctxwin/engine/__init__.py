"""The engine (`ContextEngine`, `Prepared`) and the replay driver."""

from ctxwin.engine.engine import ContextEngine
from ctxwin.engine.prepared import Prepared
from ctxwin.engine.replay import CallRecord, ReplayResult, call_record, iter_replay, replay

__all__ = ["CallRecord", "ContextEngine", "Prepared", "ReplayResult", "call_record", "iter_replay", "replay"]
