"""Pi coding-agent session files (`~/.pi/agent/sessions/--<cwd>--/<time>_<uuid>.jsonl`), every version.

- v1: a header line, then entries in order, without ids; a compaction names the first entry it kept
  by `firstKeptEntryIndex`, an index into the file's entries (the header is entry 0).
- v2: every entry has `id` and `parentId`: a tree. The conversation is the branch that ends at the
  last entry; compactions name `firstKeptEntryId`. v3 renames the `hookMessage` role to `custom`.

The messages are what Pi sends (its `convertToLlm` and `transformMessages`): assistant messages that
stopped with `error` or `aborted` are left out (counted as `unsent_answer:<reason>`, their usage summed
in `metadata["unsent_usage"]`), and so are results of their calls; `bashExecution` entries become a user message
"Ran `cmd`" with a fenced block of output; `custom_message` entries and `custom`/`hookMessage`
messages become user messages; a `branch_summary` becomes the user message Pi sends for it. A
compaction entry becomes a `CompactionRecord`; its summary message is Pi's artifact and is not in
`messages`, so the conversation stays what the user and the model actually said.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ctxwin.messages import Block, Image, Part, Text, Thinking, ToolCall, ToolResult, stable_id
from ctxwin.transcripts.build import Conversation
from ctxwin.transcripts.model import CompactionRecord, Transcript, UsageRecord
from ctxwin.transcripts.source import ImportLog, Record, Source, parse_json_lines

FORMAT = "pi"
BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
BRANCH_SUMMARY_SUFFIX = "</summary>"
COUNTED_ENTRY_TYPES = ("thinking_level_change", "model_change", "custom", "label", "session_info")  # not sent
# Answers Pi never sends again: its `transformMessages` skips assistant messages that stopped this way
# ("incomplete turns that shouldn't be replayed"), so the next request does not hold them.
UNSENT_STOP_REASONS = ("error", "aborted")


def read(source: Source) -> Transcript:
    log = source.log
    entries = parse_json_lines(source)  # Pi's own parser also drops lines that do not parse
    header = entries[0].data if entries and _is_header(entries[0].data) else {}
    if not header:
        log.warn("no Pi session header on the first line; reading the entries anyway")
    body = [(index, record) for index, record in enumerate(entries) if index > 0 or not header]
    tree = any(isinstance(r.data, dict) and "id" in r.data for _, r in body)
    path = _branch(body, log) if tree else body

    conversation = Conversation()
    first_message_at: dict[Any, int] = {}  # entry key (v1: index, v2+: id) -> message index at that entry
    facts: dict[str, Any] = {"models": Counter(), "model": header.get("modelId"), "unsent_calls": set(),
                             "unsent_usage": Counter()}
    for index, record in path:
        data = record.data
        if not isinstance(data, dict):
            log.skip_bad("not_an_object", f"a JSON {type(data).__name__}, not an entry object; skipped", record.line)
            continue
        key = data.get("id") if tree else index
        if isinstance(key, str | int):
            first_message_at[key] = len(conversation)
        _entry(record, conversation, first_message_at, facts, log)

    messages, usage, compactions = conversation.finish(log)
    timestamps = [r.data["timestamp"] for r in entries if isinstance(r.data, dict) and
                  isinstance(r.data.get("timestamp"), str)]
    metadata: dict[str, Any] = {"version": header.get("version", 2 if tree else 1)}
    for key in ("provider", "thinkingLevel", "branchedFrom", "parentSession"):
        if header.get(key):
            metadata[key] = header[key]
    for key in ("thinking_level", "name", "model_changes"):
        if facts.get(key):
            metadata[key] = facts[key]
    if facts["models"]:
        metadata["models"] = dict(facts["models"])
    if facts["unsent_usage"]:
        metadata["unsent_usage"] = dict(facts["unsent_usage"])
    return Transcript(
        format=FORMAT,
        messages=messages,
        compactions=compactions,
        usage=usage,
        model=facts.get("model"),
        cwd=header.get("cwd"),
        session_id=header.get("id"),
        started_at=header.get("timestamp") or (timestamps[0] if timestamps else None),
        ended_at=timestamps[-1] if timestamps else None,
        source=str(source.path),
        skipped=log.skipped,
        warnings=log.warnings,
        metadata=metadata,
    )


def _is_header(data: Any) -> bool:
    return isinstance(data, dict) and data.get("type") == "session"


def _branch(body: list[tuple[int, Record]], log: ImportLog) -> list[tuple[int, Record]]:
    """The entries on the path from the root to the last entry (Pi's current leaf), in order. Entries
    on other branches are counted as `other_branch`."""
    by_id: dict[str, tuple[int, Record]] = {}
    for index, record in body:
        entry_id = record.data.get("id") if isinstance(record.data, dict) else None
        if isinstance(entry_id, str):
            by_id[entry_id] = (index, record)
        else:
            log.skip_bad("malformed_entry", "an entry without an id in a session whose entries have ids",
                         record.line)
    if not by_id:
        return []
    path: list[tuple[int, Record]] = []
    current: tuple[int, Record] | None = max(by_id.values(), key=lambda item: item[0])
    seen: set[str] = set()
    while current is not None:
        entry_id = current[1].data["id"]
        if entry_id in seen:
            log.warn("the entries' parentId links form a cycle; the branch stops there", current[1].line)
            break
        seen.add(entry_id)
        path.append(current)
        parent = current[1].data.get("parentId")
        if parent is not None and not (isinstance(parent, str) and parent in by_id):
            log.warn(f"parentId {parent!r} names no entry; the branch starts here", current[1].line)
        current = by_id.get(parent) if isinstance(parent, str) else None
    path.reverse()
    off_branch = len(by_id) - len(path)
    if off_branch:
        log.skip("other_branch", off_branch)
    return path


def _entry(record: Record, conversation: Conversation, first_message_at: dict[Any, int],
           facts: dict[str, Any], log: ImportLog) -> None:
    data = record.data
    kind = data.get("type")
    if kind == "message":
        if isinstance(data.get("message"), dict):
            _message(record, data["message"], conversation, facts, log)
        else:
            log.skip_bad("malformed_entry", "a message entry without a message object; skipped", record.line)
    elif kind == "compaction":
        _compaction(record, conversation, first_message_at, log)
    elif kind == "custom_message":
        _add(conversation, record, "user", _parts(data.get("content"), record.line, log),
             pi_custom_type=data.get("customType"))
    elif kind == "branch_summary":
        if data.get("summary"):
            text = BRANCH_SUMMARY_PREFIX + str(data["summary"]) + BRANCH_SUMMARY_SUFFIX
            _add(conversation, record, "user", [Text(text)], pi_branch_summary=True)
        else:
            log.skip("branch_summary_empty")
    elif kind in COUNTED_ENTRY_TYPES:
        log.skip(kind)
        if kind == "model_change" and data.get("modelId"):
            facts["model"] = data["modelId"]
            facts.setdefault("model_changes", []).append(
                {"model": data["modelId"], "provider": data.get("provider"), "message_index": len(conversation)})
        elif kind == "thinking_level_change":
            facts["thinking_level"] = data.get("thinkingLevel")
        elif kind == "session_info" and data.get("name"):
            facts["name"] = data["name"]
    elif kind == "session":
        log.skip_bad("extra_header", "a second session header; skipped", record.line)
    elif isinstance(kind, str):
        log.skip(f"other:{kind}")
    else:
        log.skip_bad("malformed_entry", "an entry without a 'type' field; skipped", record.line)


def _message(record: Record, message: dict[str, Any], conversation: Conversation, facts: dict[str, Any],
             log: ImportLog) -> None:
    role = message.get("role")
    line = record.line
    if role == "user":
        _add(conversation, record, "user", _parts(message.get("content"), line, log))
    elif role == "assistant":
        _assistant(record, message, conversation, facts, log)
    elif role == "toolResult":
        call_id = message.get("toolCallId")
        if not isinstance(call_id, str) or not call_id:
            log.skip_bad("malformed_entry", "a toolResult without toolCallId; skipped", line)
            return
        if call_id in facts["unsent_calls"]:
            log.skip("unsent_result")  # answers a call of an answer Pi does not send
            return
        result = ToolResult(call_id, tuple(_parts(message.get("content"), line, log)),
                            bool(message.get("isError")), message.get("toolName"))
        _add(conversation, record, "tool", [result])
    elif role == "bashExecution":
        if message.get("excludeFromContext"):
            log.skip("bash_excluded_from_context")
            return
        _add(conversation, record, "user", [Text(bash_execution_text(message))], pi_bash_execution=True)
    elif role in ("custom", "hookMessage"):
        _add(conversation, record, "user", _parts(message.get("content"), line, log),
             pi_custom_type=message.get("customType"))
    else:
        log.skip_bad("unknown_role", f"a message with role {role!r}, which this reader does not know; skipped", line)


def bash_execution_text(message: dict[str, Any]) -> str:
    """The user message Pi sends for a `!command` the user ran (Pi's `bashExecutionToText`)."""
    text = f"Ran `{message.get('command', '')}`\n"
    output = message.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = message.get("exitCode")
    if message.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif exit_code not in (None, 0):
        text += f"\n\nCommand exited with code {exit_code}"
    if message.get("truncated") and message.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {message['fullOutputPath']}]"
    return text


def _assistant(record: Record, message: dict[str, Any], conversation: Conversation, facts: dict[str, Any],
               log: ImportLog) -> None:
    content = message.get("content")
    stop_reason = message.get("stopReason")
    if stop_reason in UNSENT_STOP_REASONS:
        log.skip(f"unsent_answer:{stop_reason}")
        for item in content if isinstance(content, list) else []:
            if isinstance(item, dict) and item.get("type") == "toolCall":
                facts["unsent_calls"].add(str(item.get("id")))
        usage = message.get("usage")
        if isinstance(usage, dict):
            facts["unsent_usage"]["calls"] += 1
            for key in ("input", "output", "cacheRead", "cacheWrite"):
                facts["unsent_usage"][key] += _int(usage.get(key))
        return
    blocks: list[Block] = []
    for item in content if isinstance(content, list) else []:
        block = _assistant_block(item, record.line, log)
        if block is not None:
            blocks.append(block)
    if isinstance(content, str) and content:
        blocks.append(Text(content))
    model = message.get("model")
    flags = {"model": model, "stop_reason": message.get("stopReason"), "error_message": message.get("errorMessage")}
    index = _add(conversation, record, "assistant", blocks, **flags)
    if isinstance(model, str) and model:
        facts["model"] = model
        facts["models"][model] += 1
    usage = message.get("usage")
    if isinstance(usage, dict) and any(_int(usage.get(k)) for k in ("input", "output", "cacheRead", "cacheWrite")):
        conversation.usage[index] = UsageRecord(
            message_index=index,
            input_tokens=_int(usage.get("input")),
            output_tokens=_int(usage.get("output")),
            cache_read_tokens=_int(usage.get("cacheRead")),
            cache_write_tokens=_int(usage.get("cacheWrite")),
            model=model if isinstance(model, str) else None,
        )


def _assistant_block(item: Any, line: int, log: ImportLog) -> Block | None:
    if not isinstance(item, dict):
        log.skip_bad("malformed_block", f"a content block that is a {type(item).__name__}, not an object", line)
        return None
    kind = item.get("type")
    if kind == "text":
        return Text(str(item.get("text", "")))
    if kind == "thinking":
        return Thinking(str(item.get("thinking", "")), item.get("thinkingSignature") or None,
                        bool(item.get("redacted")))
    if kind == "toolCall":
        if not item.get("id") or not item.get("name"):
            log.skip_bad("malformed_block", "a toolCall without id or name", line)
            return None
        extra = {k: v for k, v in item.items() if k not in ("type", "id", "name", "arguments")}
        return ToolCall(str(item["id"]), str(item["name"]), item.get("arguments", {}), extra)
    if kind == "image":
        return _image(item)
    return Text(json.dumps(item, ensure_ascii=False), {"pi_block": kind})


def _parts(content: Any, line: int, log: ImportLog) -> list[Part]:
    if isinstance(content, str):
        return [Text(content)]
    parts: list[Part] = []
    for item in content if isinstance(content, list) else []:
        if isinstance(item, dict) and item.get("type") == "text":
            parts.append(Text(str(item.get("text", ""))))
        elif isinstance(item, dict) and item.get("type") == "image":
            parts.append(_image(item))
        else:
            log.skip_bad("malformed_block", "a content part that is neither text nor image", line)
    return parts


def _image(item: dict[str, Any]) -> Image:
    return Image(media_type=item.get("mimeType"), data=item.get("data"), url=item.get("url"))


def _compaction(record: Record, conversation: Conversation, first_message_at: dict[Any, int], log: ImportLog) -> None:
    data = record.data
    if "firstKeptEntryId" in data:
        key: Any = data["firstKeptEntryId"]
    else:
        key = data.get("firstKeptEntryIndex")
    first_kept = first_message_at.get(key) if isinstance(key, str | int) and not isinstance(key, bool) else None
    if first_kept is None:
        log.warn(f"the compaction's first kept entry {key!r} is not on this branch", record.line)
    details = dict(data["details"]) if isinstance(data.get("details"), dict) else {}
    if data.get("fromHook"):
        details["from_hook"] = True
    tokens_before = data.get("tokensBefore")
    conversation.compactions.append(CompactionRecord(
        index=len(conversation),
        tokens_before=tokens_before if isinstance(tokens_before, int) else None,
        summary=str(data.get("summary", "")),
        first_kept_index=first_kept,
        line=record.line,
        details=details,
    ))


def _add(conversation: Conversation, record: Record, role: Any, blocks: list[Any], **flags: Any) -> int:
    data = record.data
    entry_id = data.get("id")
    message_id = entry_id if isinstance(entry_id, str) and entry_id else stable_id("pi-", record.line)
    meta: dict[str, Any] = {"line": record.line}
    if isinstance(data.get("timestamp"), str):
        meta["timestamp"] = data["timestamp"]
    meta.update({k: v for k, v in flags.items() if v})
    return conversation.add(role, blocks, message_id, meta)


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0
