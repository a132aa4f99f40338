"""Claude Code session files (`~/.claude/projects/<project>/<session>.jsonl`).

What the file holds and what the model saw differ, and this reader keeps to what the model saw:
- one API response is written over several `assistant` lines sharing `message.id` (one content
  block each, with tool results of parallel calls interleaved); they become one assistant message;
- tool results are `user` records with `tool_result` blocks; they become `tool` messages (a record
  with tool results and text gives a tool message, then a user message);
- `isMeta` user records (system reminders, command output) were sent, so they are kept, flagged;
- `system/local_command` records (slash-command output) are sent as user messages, so they are kept;
- progress, file-history, queue and other `system` records were never sent: counted in `skipped`;
- content blocks are read by the Anthropic converter (`from_anthropic`): Claude Code writes them as is;
- `system/compact_boundary` plus the next `isCompactSummary` user record is a real compaction: a
  `CompactionRecord`. The summary message is the harness's artifact, so it is not in `messages`;
- sidechain (sub-agent) records, and the sub-agent messages inside `agent_progress` records, go to
  `Transcript.sidechains` keyed by agent id; a file holding only sidechain records (a sub-agent file)
  is imported as the main conversation, with `metadata["sidechain"]` saying so.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from ctxwin.messages import Message, Text, ToolCall, ToolResult, stable_id
from ctxwin.messages.providers.anthropic import from_anthropic
from ctxwin.transcripts.build import Conversation
from ctxwin.transcripts.model import CompactionRecord, Transcript, UsageRecord
from ctxwin.transcripts.source import ImportLog, Record, Source, parse_json_lines

FORMAT = "claude-code"
TASK_NOTIFICATION = "<task-notification>"
"""How a background task's notification starts: queued like a prompt, but not something the user typed."""
SKIPPED_RECORD_TYPES = ("progress", "file-history-snapshot", "queue-operation", "summary")  # never sent
SENT_SYSTEM_SUBTYPES = ("local_command",)  # system records Claude Code turns into user messages
SYNTHETIC_MODEL = "<synthetic>"  # Claude Code's model name for messages it made up (API errors)
MAIN = ""  # the key of the main conversation while records are sorted by conversation


def read(source: Source) -> Transcript:
    log = source.log
    records = parse_json_lines(source)
    groups, facts = _sort_records(records, log)

    main_records = groups.pop(MAIN, [])
    sidechain_only = not main_records and len(groups) == 1
    if sidechain_only:
        agent_id, main_records = groups.popitem()
    conversation, models = _convert(main_records, log)
    messages, usage, compactions = conversation.finish(log)

    sidechains = {}
    for key, side_records in groups.items():
        side_messages, _, _ = _convert(side_records, log)[0].finish(log)
        sidechains[key] = side_messages

    metadata: dict[str, Any] = {k: v for k, v in facts.items() if k not in ("cwd", "session_id", "first", "last")}
    if models:
        metadata["models"] = dict(models)
    if sidechain_only:
        metadata["sidechain"] = True
        metadata["agent_id"] = agent_id
    return Transcript(
        format=FORMAT,
        messages=messages,
        compactions=compactions,
        usage=usage,
        model=_main_model(usage, models),
        cwd=facts.get("cwd"),
        session_id=facts.get("session_id"),
        started_at=facts.get("first"),
        ended_at=facts.get("last"),
        source=str(source.path),
        skipped=log.skipped,
        warnings=log.warnings,
        sidechains=sidechains,
        metadata=metadata,
    )


def _main_model(usage: list[UsageRecord], models: Counter[str]) -> str | None:
    """The model of the last real model call (the one a replay continues with)."""
    for record in reversed(usage):
        if record.model:
            return record.model
    return models.most_common(1)[0][0] if models else None


def _sort_records(records: list[Record], log: ImportLog) -> tuple[dict[str, list[Record]], dict[str, Any]]:
    """Splits records into the main conversation and sidechains; counts what is never sent; collects
    session facts (cwd, id, first and last timestamp, version, git branch)."""
    groups: dict[str, list[Record]] = defaultdict(list)
    facts: dict[str, Any] = {}
    for record in records:
        data = record.data
        if not isinstance(data, dict):
            log.skip_bad("not_an_object", f"a JSON {type(data).__name__}, not a record object; skipped", record.line)
            continue
        _collect_facts(data, facts)
        kind = data.get("type")
        if kind == "progress":
            log.skip("progress")
            inner = _agent_progress_record(data)
            if inner is not None:
                groups[str(data["data"].get("agentId") or "agent")].append(Record(record.line, inner))
        elif kind in ("user", "assistant", "system"):
            key = str(data.get("agentId") or data.get("sessionId") or "sidechain") if data.get("isSidechain") else MAIN
            groups[key].append(record)
        elif kind in SKIPPED_RECORD_TYPES:
            log.skip(kind)
            if kind == "queue-operation":
                _queued_prompt(data, record.line, facts)
                groups[MAIN].append(record)  # in order: a queued prompt reaches the model when it leaves the queue
        elif isinstance(kind, str):
            log.skip(f"other:{kind}")  # a record type this reader does not know; not sent to the model
        else:
            log.skip_bad("unknown_record", "a record without a 'type' field; skipped", record.line)
    # Sub-agent messages can appear both in progress records and in sidechain records: keep one copy.
    for key, group in groups.items():
        if key != MAIN:
            groups[key] = _dedupe(group)
    return groups, facts


def _agent_progress_record(data: dict[str, Any]) -> dict[str, Any] | None:
    payload = data.get("data")
    if not isinstance(payload, dict) or payload.get("type") != "agent_progress":
        return None
    inner = payload.get("message")
    if not isinstance(inner, dict) or inner.get("type") not in ("user", "assistant"):
        return None
    return inner


def _dedupe(records: list[Record]) -> list[Record]:
    seen: set[Any] = set()
    out = []
    for record in records:
        uuid = record.data.get("uuid")
        key = uuid if isinstance(uuid, str) and uuid else id(record)
        if key not in seen:
            seen.add(key)
            out.append(record)
    return out


def _queued_prompt(data: dict[str, Any], line: int, facts: dict[str, Any]) -> None:
    """A prompt the user typed while the agent was busy: never sent as a message of its own, so kept
    apart (`metadata["queued_prompts"]`) for scoring what the user asked."""
    content = data.get("content")
    if data.get("operation") == "enqueue" and isinstance(content, str) and content.strip():
        facts.setdefault("queued_prompts", []).append(
            {"line": line, "timestamp": data.get("timestamp"), "text": content})


def _collect_facts(data: dict[str, Any], facts: dict[str, Any]) -> None:
    timestamp = data.get("timestamp")
    if isinstance(timestamp, str):
        facts.setdefault("first", timestamp)
        facts["last"] = timestamp
    for key, name in (("cwd", "cwd"), ("sessionId", "session_id"), ("version", "version"),
                      ("gitBranch", "git_branch"), ("slug", "slug")):
        value = data.get(key)
        if isinstance(value, str) and value:
            facts.setdefault(name, value)
    cwd = data.get("cwd")
    if isinstance(cwd, str) and cwd and cwd not in facts.setdefault("cwds", []):
        facts["cwds"].append(cwd)


@dataclass
class _State:
    """Reading state of one conversation (main or one sidechain)."""

    conversation: Conversation = field(default_factory=Conversation)
    call_names: dict[str, str] = field(default_factory=dict)
    open_api_id: str | None = None  # message.id of the assistant message still being written
    open_index: int = -1
    boundary: Record | None = None  # a compact_boundary waiting for its summary
    models: Counter[str] = field(default_factory=Counter)
    queued: list[Record] = field(default_factory=list)  # prompts typed while the agent worked, still queued
    delivered: list[Record] = field(default_factory=list)  # taken off the queue, for the next model call


def _convert(records: list[Record], log: ImportLog) -> tuple[Conversation, Counter[str]]:
    state = _State()
    for record in records:
        data = record.data
        kind = data.get("type")
        if kind == "queue-operation":
            _queue(record, state)
        elif kind == "assistant":
            message = data.get("message")
            if not (isinstance(message, dict) and message.get("id") and message.get("id") == state.open_api_id):
                _deliver(state, record)  # a new model call (not the next part of a streamed answer)
            _assistant(record, state, log)
        elif kind == "user":
            _user(record, state, log)
        else:
            _system(record, state, log)
    if state.boundary is not None:
        log.warn("a compact_boundary with no compact summary after it", state.boundary.line)
        _add_compaction(state, state.boundary, "", None)
    return state.conversation, state.models


def _queue(record: Record, state: _State) -> None:
    """Claude Code queues what the user types while the agent works (`enqueue`) and takes it off the
    queue (`remove`) when it hands it to the model with the next request; a prompt still queued when
    the session ends never reached the model. A `remove` names no prompt: it is taken to be the
    latest one the user typed (it follows that prompt's `enqueue` within seconds in every recorded
    session; background-task notifications are queued too but never removed, and stay out)."""
    data = record.data
    content = data.get("content")
    if data.get("operation") == "enqueue" and isinstance(content, str) and content.strip():
        if not content.lstrip().startswith(TASK_NOTIFICATION):
            state.queued.append(record)
    elif data.get("operation") == "remove" and state.queued:
        state.delivered.append(state.queued.pop())


def _deliver(state: _State, answer: Record) -> None:
    """The prompts taken off the queue since the last model call, as the user message they became
    (after the tool results that came back meanwhile, so no call is separated from its result); named
    after the answer they preceded (queue records have no uuid of their own)."""
    for n, record in enumerate(state.delivered):
        state.conversation.add("user", [Text(str(record.data["content"]))], f"{_record_id(answer)}#queued{n}",
                               _meta(record, queued=True))
    state.delivered = []


def _meta(record: Record, **flags: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"line": record.line}
    timestamp = record.data.get("timestamp")
    if isinstance(timestamp, str):
        meta["timestamp"] = timestamp
    meta.update({k: v for k, v in flags.items() if v})
    return meta


def _record_id(record: Record) -> str:
    uuid = record.data.get("uuid")
    return uuid if isinstance(uuid, str) and uuid else stable_id("cc-", record.line)


def _assistant(record: Record, state: _State, log: ImportLog) -> None:
    message = record.data.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content"), list | str):
        log.skip_bad("malformed_record", "an assistant record without a message content; skipped", record.line)
        return
    content = message["content"]
    if isinstance(content, list):
        # Streaming leaves whitespace-only text blocks; Claude Code drops them before sending.
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") == "text"
                                           and isinstance(b.get("text"), str) and not b["text"].strip())]
        if len(kept) < len(content):
            log.skip("blank_text_block", len(content) - len(kept))
            content = kept
    elif not content.strip():
        log.skip("blank_text_block")
        content = []
    blocks = [b for m in _converted("assistant", content, record.line, log) for b in m.blocks]
    for block in blocks:
        if isinstance(block, ToolCall):
            state.call_names[block.id] = block.name
    api_id = message.get("id")
    model = message.get("model")
    conversation = state.conversation
    if isinstance(api_id, str) and api_id and api_id == state.open_api_id:
        index = state.open_index
        draft = conversation.drafts[index]
        draft.blocks.extend(blocks)
        draft.meta["lines"].append(record.line)
    else:
        meta = _meta(record, api_message_id=api_id, model=model,
                     is_api_error=record.data.get("isApiErrorMessage"))
        meta["lines"] = [record.line]
        index = conversation.add("assistant", blocks, _record_id(record), meta)
        state.open_api_id = api_id if isinstance(api_id, str) else None
        state.open_index = index
        if isinstance(model, str) and model != SYNTHETIC_MODEL:
            state.models[model] += 1
    stop_reason = message.get("stop_reason")
    if stop_reason:
        conversation.drafts[index].meta["stop_reason"] = stop_reason
    usage = message.get("usage")
    if isinstance(model, str) and model != SYNTHETIC_MODEL and isinstance(usage, dict):
        # Every line repeats the usage; the last line of a response has the final output count.
        conversation.usage[index] = UsageRecord(
            message_index=index,
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            cache_read_tokens=_int(usage.get("cache_read_input_tokens")),
            cache_write_tokens=_int(usage.get("cache_creation_input_tokens")),
            model=model,
            cache_write_1h_tokens=_int(_dict(usage.get("cache_creation")).get("ephemeral_1h_input_tokens")),
        )


def _user(record: Record, state: _State, log: ImportLog) -> None:
    data = record.data
    message = data.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list | str):
        log.skip_bad("malformed_record", "a user record without a message content; skipped", record.line)
        return
    if data.get("isCompactSummary"):
        log.skip("compact_summary")
        boundary, state.boundary = state.boundary, None
        _add_compaction(state, boundary or record, _plain_text(content), record)
        return
    conversation = state.conversation
    record_id = _record_id(record)
    for n, converted in enumerate(_converted("user", content, record.line, log)):
        blocks = list(converted.blocks)
        if converted.role == "tool":
            # Calls and results sit on different records: name each result after its call here.
            blocks = [_named(b, state.call_names) if isinstance(b, ToolResult) else b for b in blocks]
        else:
            state.open_api_id = None  # a user turn ends the assistant response being written
        meta = _meta(record, is_meta=data.get("isMeta"))
        meta.update(converted.meta)
        conversation.add(converted.role, blocks, record_id if n == 0 else f"{record_id}#{n}", meta)


def _converted(role: str, content: list[Any] | str, line: int, log: ImportLog) -> list[Message]:
    """A record's content as canonical messages, read by the Anthropic converter (Claude Code writes
    Anthropic content blocks). A block the converter rejects is skipped with a warning."""
    try:
        return from_anthropic([{"role": role, "content": content}])
    except (ValueError, TypeError):
        pass
    good = []
    for n, block in enumerate(content if isinstance(content, list) else []):
        try:
            from_anthropic([{"role": role, "content": [block]}])
        except (ValueError, TypeError) as error:
            reason = str(error).replace("anthropic message 0, block 0", f"content block {n}")
            log.skip_bad("malformed_block", f"{reason}; skipped", line)
        else:
            good.append(block)
    return from_anthropic([{"role": role, "content": good}]) if good else []


def _named(result: ToolResult, names: dict[str, str]) -> ToolResult:
    if result.name is not None or result.call_id not in names:
        return result
    return ToolResult(result.call_id, result.content, result.is_error, names[result.call_id], result.extra)


def _system(record: Record, state: _State, log: ImportLog) -> None:
    data = record.data
    subtype = data.get("subtype")
    if subtype == "compact_boundary":
        log.skip("system:compact_boundary")
        if state.boundary is not None:
            log.warn("a compact_boundary with no compact summary after it", state.boundary.line)
            _add_compaction(state, state.boundary, "", None)
        state.boundary = record
    elif subtype in SENT_SYSTEM_SUBTYPES and isinstance(data.get("content"), str):
        state.open_api_id = None
        state.conversation.add("user", [Text(data["content"])], _record_id(record),
                               _meta(record, claude_code_system=subtype))
    else:
        log.skip(f"system:{subtype or 'other'}")


def _add_compaction(state: _State, boundary: Record, summary: str, summary_record: Record | None) -> None:
    data = boundary.data if boundary.data.get("type") == "system" else {}
    raw_metadata = data.get("compactMetadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    details: dict[str, Any] = {}
    if data.get("uuid"):
        details["boundary_uuid"] = data["uuid"]
    if summary_record is not None and summary_record.data.get("uuid"):
        details["summary_uuid"] = summary_record.data["uuid"]
    index = len(state.conversation)
    pre_tokens = metadata.get("preTokens")
    state.conversation.compactions.append(CompactionRecord(
        index=index,
        tokens_before=pre_tokens if isinstance(pre_tokens, int) else None,
        summary=summary,
        first_kept_index=index,  # Claude Code keeps no verbatim tail
        trigger=metadata.get("trigger"),
        line=boundary.line,
        details=details,
    ))
    state.open_api_id = None


def _plain_text(content: list[Any] | str) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
