"""The `ctxwin_recall` tool, answered by the proxy itself.

The model sees placeholders where old outputs were cleared; each names a ref (`entry:<id>#<call>`,
`blob:<hash>`). When it calls `ctxwin_recall`, the proxy answers from the session log and blob store
(`engine.recall`, byte for byte, paged by characters) or, given a `query`, searches the session's
earlier messages (the engine's memory index when one is configured, else a throwaway index of this
session's log), then calls the upstream again: the agent never sees the tool.

The exchange (the model's call and the proxy's answer) is logged as messages ctxwin wrote itself
(`meta["ctxwin"] = "recall"`): the model keeps seeing it on later requests, where it was, so the
cached prefix holds, and `engine.sync` steps over it since the agent's own history never has it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxwin.engine import ContextEngine
from ctxwin.errors import CtxwinError
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.providers.base import Completion

from .apis import RECALL_TOOL

DEFAULT_LIMIT = 20_000
"""Characters one recall returns unless the model asks for more (a page, not a flood)."""
MAX_LIMIT = 100_000
SEARCH_HITS = 8
MAX_HOPS = 5  # searches one recall may chain (memory.hops)
META = {"ctxwin": "recall"}
MAX_ROUNDS = 4
"""Recall round trips per request: a model that keeps asking gets its answer without the tool after
this many (the last answer's recall calls are dropped)."""


def answer(engine: ContextEngine, call: ToolCall) -> tuple[str, bool]:
    """(text, is_error) for one ctxwin_recall call. Never raises: a bad ref is an error result the
    model can read and correct."""
    arguments = call.arguments if isinstance(call.arguments, Mapping) else {}
    ref, query = arguments.get("ref"), arguments.get("query")
    try:
        if isinstance(ref, str) and ref:
            offset = _int(arguments.get("offset"), 0)
            limit = min(_int(arguments.get("limit"), DEFAULT_LIMIT), MAX_LIMIT)
            text = engine.recall(ref.strip().strip('"'), offset, limit)
            full = len(engine.recall(ref.strip().strip('"')))
            if offset + len(text) < full:
                text += f"\n[ctxwin_recall: characters {offset}-{offset + len(text)} of {full}; " \
                        f"call again with offset={offset + len(text)} for more]"
            return text, False
        if isinstance(query, str) and query.strip():
            hops = min(max(_int(arguments.get("hops"), 1), 1), MAX_HOPS)
            return _search(engine, query.strip(), hops), False
    except CtxwinError as error:
        return f"ctxwin_recall failed: {error}", True
    return ("ctxwin_recall needs `ref` (as a placeholder names it, e.g. entry:<id>#<call id> or blob:<hash>) "
            "or `query`"), True


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _search(engine: ContextEngine, query: str, hops: int = 1) -> str:
    from ctxwin.memory.recall import conversation_search, search_log

    session = engine.session.session_id
    if engine.memory_index is not None:
        hits = conversation_search(engine.memory_index, query, sessions=[session], limit=SEARCH_HITS, hops=hops)
    else:
        hits = search_log(engine.session, query, limit=SEARCH_HITS, hops=hops)
    if not hits:
        return f"no earlier content matches {query!r}"
    return "\n".join(f"- {h.ref} ({h.role}): {h.snippet}" for h in hits) + \
        "\n(pass a ref to ctxwin_recall for the whole content)"


def exchange(engine: ContextEngine, completion: Completion, calls: Sequence[ToolCall]) -> list[Message]:
    """The model's recall turn and the proxy's answers, as the two messages to log."""
    results = []
    for call in calls:
        text, is_error = answer(engine, call)
        results.append(ToolResult(call.id, (Text(text),), is_error, RECALL_TOOL))
    asked = Message("assistant", completion.message.blocks, meta=META)
    return [asked, Message("tool", tuple(results), meta=META)]
