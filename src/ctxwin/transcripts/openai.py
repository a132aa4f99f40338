"""Conversations stored as OpenAI Chat Completions messages: plain OpenAI-format files (a JSON list
of messages, `{"messages": [...]}`, or JSONL with one message per line) and SWE-agent trajectories
(`.traj`, whose `history` is OpenAI chat with a few SWE-agent fields; without function calling, each
thought/action step becomes a call of the shell and the observation after it that call's result). The
conversion itself is the provider converter's (`ctxwin.messages.providers.from_openai_chat`); this
module only finds the messages, checks them one by one, and records what it had to skip."""

from __future__ import annotations

import json
from typing import Any

from ctxwin.errors import InputError
from ctxwin.messages import Message, stable_id
from ctxwin.messages.providers.openai_chat import from_openai_chat
from ctxwin.transcripts.model import Transcript
from ctxwin.transcripts.source import ImportLog, Source, parse_json_lines

OPENAI_FORMAT = "openai"
SWE_AGENT_FORMAT = "swe-agent"
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
SWE_AGENT_FIELDS = ("message_type", "agent", "is_demo")  # SWE-agent's own fields, kept in meta
ACTION_CALL_PREFIX = "swe_action_"  # ids of the calls made from thought/action steps (then the history index)
ACTION_TOOL = "bash"  # SWE-agent runs every action in its shell (its commands are installed there) ...
SPECIAL_COMMANDS = ("open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "append", "submit",
                    "search_file", "search_dir", "find_file", "filemap", "str_replace_editor")
"""... but these are its own commands (file viewer, editor, search, submit): an action that is one
becomes a call of that name with its arguments parsed (the action itself kept as `action`), so reads,
edits and the final submit are what they are, not shell lines."""
SUBMITTED = "(submitted)"
"""The result of a final action that has no observation after it (the trajectory's `info.submission`,
the patch, when it has one)."""


def read_openai(source: Source) -> Transcript:
    log = source.log
    document = source.document()
    metadata: dict[str, Any] = {}
    model = None
    if isinstance(document, list):
        raw = [(f"message {i}", item) for i, item in enumerate(document)]
    elif isinstance(document, dict) and isinstance(document.get("messages"), list):
        raw = [(f"messages[{i}]", item) for i, item in enumerate(document["messages"])]
        model = document.get("model") if isinstance(document.get("model"), str) else None
        metadata.update({k: v for k, v in document.items() if k in ("id", "created", "metadata") and v})
    else:
        raw = [(f"line {r.line}", r.data) for r in parse_json_lines(source)]
        metadata["jsonl"] = True
    messages = _convert(raw, log, "oa-", {})
    return Transcript(format=OPENAI_FORMAT, messages=messages, model=model, source=str(source.path),
                      skipped=log.skipped, warnings=log.warnings, metadata=metadata)


def read_swe_agent(source: Source) -> Transcript:
    log = source.log
    document = source.document()
    history = document.get("history") if isinstance(document, dict) else None
    if not isinstance(document, dict) or not isinstance(history, list):
        raise InputError(f"{source.path} has no 'history' list; not a SWE-agent trajectory",
                         "give a .traj file written by SWE-agent, or pass --format")
    raw: list[tuple[str, Any]] = []
    meta_of = {}
    actions = 0
    found = document.get("info")
    info: dict[str, Any] = found if isinstance(found, dict) else {}
    for i, entry in enumerate(history):
        where = f"history[{i}]"
        if isinstance(entry, dict):
            meta_of[where] = {k: entry[k] for k in SWE_AGENT_FIELDS if k in entry}
            if _is_action(entry) and i + 1 < len(history) and _is_observation(history[i + 1]):
                entry = _action_call(entry, f"{ACTION_CALL_PREFIX}{i}")
                actions += 1
            elif _is_action(entry) and i == len(history) - 1 and _special(entry["action"])[0] == "submit":
                # The last step, `submit`, has no observation in the history: its answer is the patch.
                raw.append((where, _action_call(entry, f"{ACTION_CALL_PREFIX}{i}")))
                submission = info.get("submission")
                entry = {"role": "tool", "tool_call_id": f"{ACTION_CALL_PREFIX}{i}",
                         "content": submission if isinstance(submission, str) and submission else SUBMITTED}
                actions += 1
            elif i > 0 and _is_action(history[i - 1]) and _is_observation(entry):
                call_id = f"{ACTION_CALL_PREFIX}{i - 1}"  # the observation of the action before it
                entry = {"role": "tool", "tool_call_id": call_id, "content": entry.get("content")}
            else:
                entry = _swe_agent_entry(entry, where, log)
        raw.append((where, entry))
    messages = _convert(raw, log, "swe-", meta_of)
    metadata: dict[str, Any] = {}
    for key in ("exit_status", "model_stats", "swe_agent_version"):
        if info.get(key) is not None:
            metadata[key] = info[key]
    if actions:
        metadata["thought_action_calls"] = actions
    if isinstance(document.get("trajectory"), list):
        metadata["steps"] = len(document["trajectory"])
        log.skip("trajectory_steps", len(document["trajectory"]))  # per-step copies of the same history
    return Transcript(format=SWE_AGENT_FORMAT, messages=messages, model=_swe_agent_model(document),
                      source=str(source.path), skipped=log.skipped, warnings=log.warnings, metadata=metadata)


def _swe_agent_entry(entry: dict[str, Any], where: str, log: ImportLog) -> dict[str, Any]:
    """A history entry as an OpenAI chat message: `tool_call_ids` (a list) becomes `tool_call_id`;
    SWE-agent's own fields (thought, action: copies of content and call) are left out."""
    message = {k: v for k, v in entry.items() if k in ("role", "content", "tool_calls", "name", "tool_call_id")}
    ids = entry.get("tool_call_ids")
    if entry.get("role") == "tool" and isinstance(ids, list) and ids and "tool_call_id" not in message:
        message["tool_call_id"] = ids[0]
        if len(ids) > 1:
            log.warn(f"{where}: one observation answers {len(ids)} calls; it is kept as the answer to the first")
    if message.get("tool_calls") is None:
        message.pop("tool_calls", None)
    return message


def _is_action(entry: Any) -> bool:
    """A thought/action step (SWE-agent without function calling): an assistant entry with an `action`
    and no tool calls."""
    return (isinstance(entry, dict) and entry.get("role") == "assistant" and not entry.get("tool_calls")
            and not entry.get("is_demo") and isinstance(entry.get("action"), str) and bool(entry["action"].strip()))


def _is_observation(entry: Any) -> bool:
    return isinstance(entry, dict) and entry.get("role") == "user" and not entry.get("is_demo")


def _action_call(entry: dict[str, Any], call_id: str) -> dict[str, Any]:
    """A thought/action step as the tool call it is: the thought as the text, the action as a call of
    one of SWE-agent's commands or of the shell, so that the observation after it becomes that call's
    result (and masking, budgets and dedup apply to it). The action's code fence is then not repeated
    in the text."""
    thought = entry.get("thought")
    text = thought.strip() if isinstance(thought, str) else ""
    name, parsed = _special(entry["action"])
    arguments = json.dumps(parsed, ensure_ascii=False)
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": text or None, "tool_calls": [call]}


def _special(action: str) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of an action: one of SWE-agent's commands with its arguments named
    (`open foo.py 40` -> open(path="foo.py", line_number=40), `create x.py`, `edit 3:5` + its text,
    `submit`, searches), else the shell with the action as its command."""
    stripped = action.strip()
    head, _, rest = stripped.partition("\n")
    words = head.split()
    name = words[0] if words else ""
    if name not in SPECIAL_COMMANDS:
        return ACTION_TOOL, {"command": action}
    args = words[1:]
    parsed: dict[str, Any] = {}
    if name == "open" and args:
        parsed["path"] = args[0].strip("\"'")
        if len(args) > 1 and args[1].isdigit():
            parsed["line_number"] = int(args[1])
    elif name == "create" and args:
        parsed["filename"] = args[0].strip("\"'")
    elif name == "goto" and args and args[0].isdigit():
        parsed["line_number"] = int(args[0])
    elif name in ("edit", "insert", "append"):
        if args:
            parsed["range"] = args[0]
        body = rest.rsplit("\nend_of_", 1)[0] if "\nend_of_" in rest else rest.removesuffix("end_of_" + name)
        if body:
            parsed["text"] = body
    elif name in ("search_file", "search_dir", "find_file") and args:
        parsed["search_term"] = args[0].strip("\"'")
        if len(args) > 1:
            parsed["file" if name == "search_file" else "dir"] = args[1].strip("\"'")
    elif name == "str_replace_editor" and len(args) >= 2:
        parsed.update(command=args[0], path=args[1].strip("\"'"))
    parsed["action"] = action
    return name, parsed


def _swe_agent_model(document: dict[str, Any]) -> str | None:
    config = document.get("replay_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            return None
    model = config.get("agent", {}).get("model", {}) if isinstance(config, dict) else {}
    name = model.get("name") if isinstance(model, dict) else None
    return name if isinstance(name, str) else None


def _convert(raw: list[tuple[str, Any]], log: ImportLog, prefix: str,
             meta_of: dict[str, dict[str, Any]]) -> list[Message]:
    """Each raw message checked on its own (not an object, no chat role, or rejected by the converter:
    skipped with a warning naming it), then the good ones converted together, so that the converter
    groups consecutive tool messages and names results after their calls."""
    good: list[tuple[str, dict[str, Any]]] = []
    for where, item in raw:
        if not isinstance(item, dict):
            log.skip_bad("not_a_message", f"{where}: a JSON {type(item).__name__}, not a message object; skipped")
        elif item.get("role") not in CHAT_ROLES:
            log.skip_bad("not_a_message", f"{where}: role {item.get('role')!r} is not a chat role; skipped")
        else:
            try:
                from_openai_chat([item])
            except (ValueError, TypeError) as error:
                reason = str(error).replace("openai chat message 0", where)
                log.skip_bad("malformed_message", f"{reason}; skipped")
            else:
                good.append((where, item))
    messages = from_openai_chat([item for _, item in good])
    sources = _sources(good)
    if len(sources) != len(messages):  # the converter grouped differently than expected: keep its output as is
        sources = [[] for _ in messages]
    out: list[Message] = []
    for message, wheres in zip(messages, sources, strict=True):
        meta: dict[str, Any] = {}
        if wheres:
            meta["source"] = wheres[0] if len(wheres) == 1 else wheres
            for where in wheres[:1]:
                meta.update(meta_of.get(where, {}))
        meta.update(message.meta)
        message_id = message.id or stable_id(prefix, wheres or len(out), message.content_key)
        out.append(message.replace(id=message_id, meta=meta))
    return out


def _sources(good: list[tuple[str, dict[str, Any]]]) -> list[list[str]]:
    """Which raw messages each converted message came from: one each, except that a run of consecutive
    tool messages becomes one."""
    groups: list[list[str]] = []
    previous_tool = False
    for where, item in good:
        is_tool = item.get("role") == "tool"
        if is_tool and previous_tool:
            groups[-1].append(where)
        else:
            groups.append([where])
        previous_tool = is_tool
    return groups
