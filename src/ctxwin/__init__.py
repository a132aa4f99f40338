"""ctxwin: the context window of an LLM agent, managed. Nothing is lost.

The root holds the few names a harness needs (the engine, the session store, policies, the message
types, the request it returns, the errors); everything else is reachable from its package:
`ctxwin.messages`, `ctxwin.tokens`, `ctxwin.policies`, `ctxwin.store`, `ctxwin.pipeline`,
`ctxwin.compaction`, `ctxwin.providers`, `ctxwin.engine`, `ctxwin.tools`, `ctxwin.transcripts`,
`ctxwin.evaluation`, `ctxwin.testing`.

The errors are here from the start; every other name loads its package on first use, so `import ctxwin`
(and the `ctxwin` command, which imports this package first) costs nothing until a name is used
(`tests/test_cli_startup.py` keeps it so).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from ctxwin.errors import CompactionFailed, ContextBudgetError, ContextOverflowError, CtxwinError, InputError

__version__ = "0.1.0"

_EXPORTS = {
    "ContextEngine": "ctxwin.engine",
    "Prepared": "ctxwin.engine",
    "Session": "ctxwin.store",
    "Policy": "ctxwin.policies",
    **{name: "ctxwin.messages" for name in ("Image", "Message", "Text", "Thinking", "ToolCall", "ToolResult")},
}
_SUBPACKAGES = ("policies", "telemetry")  # `from ctxwin import policies` and `ctxwin.policies` before an import

if TYPE_CHECKING:
    from ctxwin import policies, telemetry  # noqa: F401  (names __getattr__ serves)
    from ctxwin.engine import ContextEngine, Prepared
    from ctxwin.messages import Image, Message, Text, Thinking, ToolCall, ToolResult
    from ctxwin.policies import Policy
    from ctxwin.store import Session


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        value: Any = importlib.import_module(f"{__name__}.{name}")
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    setattr(sys.modules[__name__], name, value)
    return value


__all__ = [
    "CompactionFailed",
    "ContextBudgetError",
    "ContextEngine",
    "ContextOverflowError",
    "CtxwinError",
    "Image",
    "InputError",
    "Message",
    "Policy",
    "Prepared",
    "Session",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "policies",
]
