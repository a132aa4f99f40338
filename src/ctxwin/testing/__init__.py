"""Test helpers that run real components: a fake model provider over real HTTP on 127.0.0.1, and the
scripted models that drive it.

An edge: imports anything below it; the core never imports it.
"""

from ctxwin.testing.scripted import (
    Call,
    Fault,
    ModelFn,
    ModelRequest,
    Reply,
    Script,
    demo_model,
    faults_at,
    overflow,
    overloaded,
    rate_limited,
    server_error,
)
from ctxwin.testing.server import FakeProvider, ForcedResponse, RecordedRequest

__all__ = [
    "Call",
    "FakeProvider",
    "Fault",
    "ForcedResponse",
    "ModelFn",
    "ModelRequest",
    "RecordedRequest",
    "Reply",
    "Script",
    "demo_model",
    "faults_at",
    "overflow",
    "overloaded",
    "rate_limited",
    "server_error",
]
