"""Where a session's tokens go: per role, per tool, the largest tool results, the recorded
compactions and usage. `ctxwin inspect` prints this; `--json` prints it as is."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ctxwin.messages import Message
from ctxwin.tokens import TokenCounter, counter_for
from ctxwin.transcripts.model import Transcript

LARGEST_RESULTS = 10  # how many of the largest tool results the report lists
FIRST_WARNINGS = 5  # how many warnings the report quotes (all are counted)
METADATA_VALUE_CHARS = 500  # metadata values longer than this (as JSON) are reported by size only
UNKNOWN_TOOL = "(unknown)"  # the tool name of a result whose call was not found


def inspect_transcript(transcript: Transcript, counter: TokenCounter | None = None) -> dict[str, Any]:
    """One JSON-able report of a transcript. Token counts are the counter's (the best one for the
    transcript's model unless given); recorded usage is reported beside them as the harness saw it."""
    counter = counter or counter_for(transcript.model)
    by_role: Counter[str] = Counter()
    by_tool: Counter[str] = Counter()
    results_per_tool: Counter[str] = Counter()
    calls_per_tool: Counter[str] = Counter()
    results: list[dict[str, Any]] = []
    for index, message in enumerate(transcript.messages):
        tokens = counter.count_message(message)
        by_role[message.role] += tokens
        for call in message.tool_calls:
            calls_per_tool[call.name] += 1
        if message.role == "tool":
            for tool, result_tokens, call_id in _result_tokens(message, tokens, counter):
                by_tool[tool] += result_tokens
                results_per_tool[tool] += 1
                results.append({"tool": tool, "tokens": result_tokens, "index": index, "call_id": call_id})
    total = sum(by_role.values())
    tool_tokens = by_role.get("tool", 0)
    results.sort(key=lambda r: (-r["tokens"], r["index"]))
    return {
        "format": transcript.format,
        "source": transcript.source,
        "model": transcript.model,
        "session_id": transcript.session_id,
        "cwd": transcript.cwd,
        "started_at": transcript.started_at,
        "ended_at": transcript.ended_at,
        "messages": len(transcript.messages),
        "messages_by_role": dict(Counter(m.role for m in transcript.messages)),
        "tool_calls": transcript.tool_calls,
        "tool_results": transcript.tool_results,
        "counter": counter.name,
        "counter_exact": counter.exact,
        "tokens": {
            "total": total,
            "by_role": dict(by_role.most_common()),
            "by_tool": dict(by_tool.most_common()),
        },
        "tools": {
            name: {"calls": calls_per_tool[name], "results": results_per_tool[name], "tokens": by_tool[name]}
            for name in sorted(set(calls_per_tool) | set(results_per_tool), key=lambda n: (-by_tool[n], n))
        },
        "tool_output_share": round(tool_tokens / total, 4) if total else 0.0,
        "largest_tool_results": results[:LARGEST_RESULTS],
        "compactions": [
            {
                "index": c.index,
                "first_kept_index": c.first_kept_index,
                "tokens_before": c.tokens_before,
                "summary_chars": len(c.summary),
                "trigger": c.trigger,
                "line": c.line,
            }
            for c in transcript.compactions
        ],
        "usage": _usage_summary(transcript),
        "sidechains": {key: len(messages) for key, messages in transcript.sidechains.items()},
        "skipped": dict(transcript.skipped.most_common()),
        "warnings": {"count": len(transcript.warnings), "first": transcript.warnings[:FIRST_WARNINGS]},
        "metadata": _small_metadata(transcript.metadata),
    }


def _small_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        size = len(json.dumps(value, ensure_ascii=False, default=str))
        out[key] = value if size <= METADATA_VALUE_CHARS else {"omitted_chars": size}
    return out


def _result_tokens(message: Message, message_tokens: int, counter: TokenCounter) -> list[tuple[str, int, str]]:
    """Each tool result of a tool message with its tokens. A message with one result is counted
    whole (framing included); several results are counted one by one."""
    results = message.tool_results
    if len(results) == 1:
        return [(results[0].name or UNKNOWN_TOOL, message_tokens, results[0].call_id)]
    return [
        (r.name or UNKNOWN_TOOL, counter.count_message(Message("tool", (r,))), r.call_id) for r in results
    ]


def _usage_summary(transcript: Transcript) -> dict[str, Any] | None:
    """What the provider reported, when the file recorded it: the number of model calls, the peak
    context (input plus cache reads and writes of one call) and the totals."""
    usage = transcript.usage
    if not usage:
        return None
    peak = max(usage, key=lambda u: u.context_tokens)
    return {
        "model_calls": len(usage),
        "peak_context_tokens": peak.context_tokens,
        "peak_at_index": peak.message_index,
        "last_context_tokens": usage[-1].context_tokens,
        "input_tokens": sum(u.input_tokens for u in usage),
        "output_tokens": sum(u.output_tokens for u in usage),
        "cache_read_tokens": sum(u.cache_read_tokens for u in usage),
        "cache_write_tokens": sum(u.cache_write_tokens for u in usage),
    }
