"""ctxwin: the context window of an LLM agent, managed. Nothing is lost.

The root holds the few names a harness needs (the engine, the session store, policies, the message
types, the request it returns, the errors); everything else is reachable from its package:
`ctxwin.messages`, `ctxwin.tokens`, `ctxwin.policies`, `ctxwin.store`, `ctxwin.pipeline`,
`ctxwin.compaction`, `ctxwin.providers`, `ctxwin.engine`, `ctxwin.tools`, `ctxwin.transcripts`,
`ctxwin.evaluation`, `ctxwin.testing`.
"""

from ctxwin import policies
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.errors import CompactionFailed, ContextBudgetError, ContextOverflowError, CtxwinError, InputError
from ctxwin.messages import Image, Message, Text, Thinking, ToolCall, ToolResult
from ctxwin.policies import Policy
from ctxwin.store import Session

__version__ = "0.1.0"

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
