"""Codex CLI rollout files (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`).

Each line is `{timestamp, type, payload}`: `session_meta` (id, cwd, instructions), `turn_context`
(the model of the turn), `response_item` (an item sent to or returned by the model: OpenAI Responses
items), `event_msg` (UI events; only `token_count` matters here: the usage of the last model call)
and `compacted` (a compaction: the summary, and in newer versions the history that replaced the old
one). Older rollouts wrote bare response items, one per line, after a meta line.

The items are converted by the provider converter (`from_openai_responses`), one model call at a
time: a `token_count` event closes a call, so the items one call returned become one assistant
message and its usage record points at it. The compaction summary is Codex's artifact, so like the
other readers this one records it as a `CompactionRecord` and keeps it out of `messages`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ctxwin.messages import Message, ToolResult, stable_id
from ctxwin.messages.providers.openai_responses import from_openai_responses
from ctxwin.transcripts.build import Conversation
from ctxwin.transcripts.model import CompactionRecord, Transcript, UsageRecord
from ctxwin.transcripts.source import ImportLog, Record, Source, parse_json_lines

FORMAT = "codex"
ITEM_TYPES = ("message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
              "custom_tool_call_output", "local_shell_call", "local_shell_call_output", "web_search_call",
              "ghost_snapshot", "compaction")
UNREADABLE_ITEMS = ("ghost_snapshot", "compaction")  # undo snapshots; encrypted compaction summaries
TURN_ITEMS = ("reasoning", "function_call", "custom_tool_call")  # items of an assistant turn (and `*_call`)
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output")
CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md instructions")  # injected by Codex


@dataclass(frozen=True, slots=True)
class _Item:
    line: int
    timestamp: str | None
    data: dict[str, Any]


@dataclass
class _State:
    conversation: Conversation = field(default_factory=Conversation)
    pending: list[_Item] = field(default_factory=list)  # items of the model call being read
    call_names: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    models: Counter[str] = field(default_factory=Counter)
    last_total: Any = None  # total_token_usage of the last token_count (repeats are skipped)
    last_context: int | None = None  # tokens of the last model call, for a compaction's tokens_before
    timestamp: str | None = None  # of the record being read (response items carry none of their own)
    facts: dict[str, Any] = field(default_factory=dict)


def read(source: Source) -> Transcript:
    log = source.log
    state = _State()
    timestamps: list[str] = []
    for record in parse_json_lines(source):
        data = record.data
        if not isinstance(data, dict):
            log.skip_bad("not_an_object", f"a JSON {type(data).__name__}, not a record object; skipped", record.line)
            continue
        state.timestamp = data.get("timestamp") if isinstance(data.get("timestamp"), str) else None
        if state.timestamp:
            timestamps.append(state.timestamp)
        _record(record, state, log)
    _flush(state, log)

    messages, usage, compactions = state.conversation.finish(log)
    facts = state.facts
    metadata = {k: v for k, v in facts.items() if k not in ("cwd", "id", "timestamp")}
    if state.models:
        metadata["models"] = dict(state.models)
    return Transcript(
        format=FORMAT,
        messages=messages,
        compactions=compactions,
        usage=usage,
        model=state.model,
        cwd=facts.get("cwd"),
        session_id=facts.get("id"),
        started_at=facts.get("timestamp") or (timestamps[0] if timestamps else None),
        ended_at=timestamps[-1] if timestamps else None,
        source=str(source.path),
        skipped=log.skipped,
        warnings=log.warnings,
        metadata=metadata,
    )


def _record(record: Record, state: _State, log: ImportLog) -> None:
    data = record.data
    kind = data.get("type")
    payload = data.get("payload")
    if "payload" not in data:
        _legacy(record, state, log)
    elif not isinstance(payload, dict):
        log.skip_bad("malformed_record", f"a {kind} record whose payload is not an object; skipped", record.line)
    elif kind == "response_item":
        _item(Record(record.line, payload), state, log)
    elif kind == "session_meta":
        log.skip("session_meta")
        for key in ("id", "cwd", "timestamp", "cli_version", "originator", "model_provider", "instructions"):
            if payload.get(key):
                state.facts.setdefault(key, payload[key])
    elif kind == "turn_context":
        log.skip("turn_context")
        if isinstance(payload.get("model"), str):
            state.model = payload["model"]
        if isinstance(payload.get("cwd"), str):
            state.facts.setdefault("cwd", payload["cwd"])
    elif kind == "event_msg":
        log.skip(f"event_msg:{payload.get('type', 'other')}")
        if payload.get("type") == "token_count":
            _token_count(payload, state, log)
    elif kind == "compacted":
        log.skip("compacted")
        _flush(state, log)
        _compacted(record, payload, state)
    elif isinstance(kind, str):
        log.skip(f"other:{kind}")
    else:
        log.skip_bad("unknown_record", "a record without a 'type' field; skipped", record.line)


def _legacy(record: Record, state: _State, log: ImportLog) -> None:
    """Rollouts before `{type, payload}` lines: a meta line, then bare response items."""
    data = record.data
    if data.get("type") in ITEM_TYPES:
        _item(record, state, log)
    elif data.get("record_type") == "state":
        log.skip("state")
    elif "id" in data and "type" not in data:
        log.skip("session_meta")
        for key in ("id", "timestamp", "instructions"):
            if data.get(key):
                state.facts.setdefault(key, data[key])
    elif isinstance(data.get("type"), str):
        log.skip(f"other:{data['type']}")
    else:
        log.skip_bad("unknown_record", "a record without a 'type' field; skipped", record.line)


def _item(record: Record, state: _State, log: ImportLog) -> None:
    kind = record.data.get("type")
    if kind in UNREADABLE_ITEMS:
        log.skip(str(kind))
        return
    state.pending.append(_Item(record.line, state.timestamp, _normalized(record.data)))


def _normalized(item: dict[str, Any]) -> dict[str, Any]:
    """Codex's variants of Responses items, in the shape the converter reads: a local shell call is a
    function call named `local_shell`; an output object `{content, success}` is its content; a content
    part of type `text` (some Codex versions write it) is the role's text part."""
    kind = item.get("type")
    if kind == "message" and isinstance(item.get("content"), list):
        item = {**item, "content": _text_parts(item["content"], item.get("role"))}
    if kind == "local_shell_call":
        rest = {k: v for k, v in item.items() if k not in ("type", "action", "call_id", "id")}
        return {"type": "function_call", "name": "local_shell", "call_id": item.get("call_id") or item.get("id"),
                "arguments": json.dumps(item.get("action", {}), ensure_ascii=False), **rest}
    if kind == "local_shell_call_output":
        item = {**item, "type": "function_call_output"}
    output = item.get("output")
    if kind in (*OUTPUT_ITEMS, "local_shell_call_output") and isinstance(output, dict):
        content = output.get("content")
        item = {**item, "output": content if isinstance(content, str | list) else json.dumps(output)}
        if output.get("success") is False:
            item["success"] = False
    return item


def _text_parts(content: list[Any], role: Any) -> list[Any]:
    """`{"type": "text"}` parts as `output_text` (assistant) or `input_text` (everyone else), the types the
    Responses API and the converter know; other parts unchanged."""
    kind = "output_text" if role == "assistant" else "input_text"
    return [{**part, "type": kind} if isinstance(part, dict) and part.get("type") == "text" else part
            for part in content]


def _flush(state: _State, log: ImportLog) -> None:
    """Converts the items read since the last model call ended and adds them as messages."""
    items, state.pending = state.pending, []
    good = []
    for item in items:
        try:
            from_openai_responses([item.data])
        except (ValueError, TypeError) as error:
            reason = str(error).replace("openai responses item 0", f"a {item.data.get('type')} item")
            log.skip_bad("malformed_item", f"{reason}; skipped", item.line)
        else:
            good.append(item)
    if not good:
        return
    messages = from_openai_responses([item.data for item in good])
    groups = _groups(good)
    if len(groups) != len(messages):  # grouped differently than expected: place them all at the first item
        groups = [good[:1]] * len(messages)
    for message, group in zip(messages, groups, strict=True):
        _add(state, message, group)


def _groups(items: list[_Item]) -> list[list[_Item]]:
    """Which items each converted message came from, the way the converter groups them: a run of
    assistant-side items is one message, a run of outputs is one, every other item is its own."""
    groups: list[list[_Item]] = []
    previous = None
    for item in items:
        kind = item.data.get("type")
        role = item.data.get("role")
        if kind in TURN_ITEMS or str(kind).endswith("_call") or (role == "assistant" and item.data.get("content")):
            group = "turn"
        elif kind in OUTPUT_ITEMS:
            group = "results"
        else:
            group = None
        if group is not None and group == previous:
            groups[-1].append(item)
        else:
            groups.append([item])
        previous = group
    return groups


def _add(state: _State, message: Message, items: list[_Item]) -> None:
    first = items[0]
    blocks = list(message.blocks)
    meta: dict[str, Any] = {"line": first.line}
    if first.timestamp:
        meta["timestamp"] = first.timestamp
    if len(items) > 1:
        meta["lines"] = [item.line for item in items]
    meta.update(message.meta)
    if message.role == "assistant":
        if state.model:
            meta["model"] = state.model
            state.models[state.model] += 1
        for call in message.tool_calls:
            state.call_names[call.id] = call.name
    elif message.role == "tool":
        # Calls and their outputs can be converted in different batches: name the results here.
        blocks = [ToolResult(b.call_id, b.content, _failed(b, items), b.name or state.call_names.get(b.call_id),
                             b.extra) if isinstance(b, ToolResult) else b for b in blocks]
    elif message.role == "user" and message.text.lstrip().startswith(CONTEXT_PREFIXES):
        meta["is_meta"] = True
    item_id = first.data.get("id")
    message_id = item_id if isinstance(item_id, str) and item_id else stable_id("codex-", first.line,
                                                                                  message.content_key)
    state.conversation.add(message.role, blocks, message_id, meta)


def _failed(result: ToolResult, items: list[_Item]) -> bool:
    return result.is_error or any(i.data.get("call_id") == result.call_id and i.data.get("success") is False
                                  for i in items)


def _token_count(payload: dict[str, Any], state: _State, log: ImportLog) -> None:
    info = payload.get("info")
    if not isinstance(info, dict):
        return
    total, last = info.get("total_token_usage"), info.get("last_token_usage")
    if total == state.last_total or not isinstance(last, dict):
        return  # Codex repeats the event (rate-limit updates); one model call, one record
    state.last_total = total
    _flush(state, log)  # the model call is over
    conversation = state.conversation
    index = next((i for i in range(len(conversation) - 1, -1, -1) if conversation.drafts[i].role == "assistant"),
                 None)
    cached = _int(last.get("cached_input_tokens"))
    fresh = max(0, _int(last.get("input_tokens")) - cached)  # OpenAI counts cached input inside input
    output = _int(last.get("output_tokens"))
    state.last_context = _int(last.get("total_tokens")) or fresh + cached + output
    if index is not None and index not in conversation.usage:
        conversation.usage[index] = UsageRecord(index, fresh, output, cached, 0, state.model)


def _compacted(record: Record, payload: dict[str, Any], state: _State) -> None:
    history = payload.get("replacement_history")
    details: dict[str, Any] = {}
    if isinstance(history, list):
        details["replacement_history_items"] = len(history)
    if state.last_context is not None:
        details["tokens_before_source"] = "last token_count before the compaction"
    index = len(state.conversation)
    state.conversation.compactions.append(CompactionRecord(
        index=index,
        tokens_before=state.last_context,
        summary=str(payload.get("message") or ""),
        first_kept_index=index,
        trigger=payload.get("trigger") if isinstance(payload.get("trigger"), str) else None,
        line=record.line,
        details=details,
    ))


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
