"""ctxwin: the context window of an LLM agent, managed. Nothing is lost.

The public API, re-exported here; everything else is reachable through the subpackages
(`ctxwin.messages`, `ctxwin.tokens`, `ctxwin.store`, `ctxwin.tools`, `ctxwin.pipeline`,
`ctxwin.compaction`, `ctxwin.policy`, `ctxwin.engine`, `ctxwin.evaluation`).
"""

from ctxwin import policy as policies
from ctxwin.compaction.base import Summarizer, Summary
from ctxwin.compaction.extractive import ExtractiveSummarizer
from ctxwin.compaction.llm import LLMSummarizer
from ctxwin.compaction.overflow import is_overflow_error
from ctxwin.engine import ContextEngine, Prepared, ReplayResult, replay
from ctxwin.engine.engine import ContextOverflowError
from ctxwin.errors import CtxwinError, InputError
from ctxwin.memory.flush import daily_notes
from ctxwin.messages import Image, Message, Text, Thinking, ToolCall, ToolResult
from ctxwin.pipeline.fit import ContextBudgetError
from ctxwin.policy import Policy
from ctxwin.store import FileBlobStore, Session
from ctxwin.tokens import counter_for, model_info
from ctxwin.transcripts import Transcript, load_transcript

__version__ = "0.1.0"

__all__ = [
    "ContextBudgetError",
    "ContextEngine",
    "ContextOverflowError",
    "CtxwinError",
    "ExtractiveSummarizer",
    "FileBlobStore",
    "Image",
    "InputError",
    "LLMSummarizer",
    "Message",
    "Policy",
    "Prepared",
    "ReplayResult",
    "Session",
    "Summarizer",
    "Summary",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolResult",
    "Transcript",
    "counter_for",
    "daily_notes",
    "is_overflow_error",
    "load_transcript",
    "model_info",
    "policies",
    "replay",
]
