"""Dedup: content the model has already seen, shown once.

- A re-run of the same call (same tool, same arguments) that returned exactly the same output, such
  as an unchanged re-read of a file range, becomes a stub pointing at the earlier result (Claude
  Code's read stub, generalised: identical output is detected from content, so it works on any
  harness's transcript).
- For tools declared idempotent, a newer identical call supersedes the older output, which becomes
  a stub pointing forward (Alyx's idempotent-call dedup). That edits old content, so its event
  declares a prefix break.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.pipeline.events import DedupStubbed, DedupSuperseded
from ctxwin.pipeline.view import (
    Item,
    Rewrite,
    StageContext,
    StageResult,
    describe_call,
    recall_ref,
    text_result,
    with_results,
)
from ctxwin.policies.model import DedupPolicy


@dataclass(frozen=True, slots=True)
class Seen:
    entry_id: str
    call_id: str
    digest: str


@dataclass
class DedupState:
    """The latest result seen for each call signature (tool name + arguments)."""

    seen: dict[str, Seen] = field(default_factory=dict)


def call_signature(call: ToolCall) -> str:
    try:
        arguments = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        arguments = repr(call.arguments)
    return f"{call.name}\x00{arguments}"


def _block_index(message: Message, call_id: str) -> int | None:
    for index, block in enumerate(message.blocks):
        if isinstance(block, ToolResult) and block.call_id == call_id:
            return index
    return None


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def stage(items: Sequence[Item], policy: DedupPolicy, ctx: StageContext, state: DedupState,
          originals: Mapping[str, Message], earlier: Mapping[str, Item]) -> StageResult:
    """Dedup the results in `items` (new messages) against what `state` has seen. Outputs are
    compared as logged (`originals`, by entry id), whatever earlier stages did to their rendering;
    `earlier` maps entry ids of older view items (for superseding)."""
    edit = Rewrite("dedup", ctx, list(items))
    out = edit.items
    superseded: dict[str, dict[str, str]] = {}  # older entry id -> {call id: stub}
    for position, item in enumerate(out):
        changed: dict[int, ToolResult] = {}
        original = originals.get(item.entry_id, item.message)
        for block in original.blocks:
            if not isinstance(block, ToolResult) or block.is_error:
                continue
            call = ctx.calls.get(block.call_id)
            if call is None or not all(isinstance(p, Text) for p in block.content):
                continue
            index = _block_index(item.message, block.call_id)
            if index is None:
                continue
            text = block.text
            key = call_signature(call)
            digest = _digest(text)
            before = state.seen.get(key)
            state.seen[key] = Seen(item.entry_id, block.call_id, digest)
            if before is None or len(text) < policy.min_chars:
                continue
            if policy.rereads and before.digest == digest:
                ref = recall_ref(before.entry_id, before.call_id)
                changed[index] = text_result(block, (
                    f"[Unchanged: {describe_call(call)} returned exactly the same {len(text):,} characters as the "
                    f"earlier call ({ref}). Refer to that result.]"))
            elif call.name in policy.idempotent_tools and before.entry_id in earlier:
                ref = recall_ref(item.entry_id, block.call_id)
                superseded.setdefault(before.entry_id, {})[before.call_id] = (
                    f"[Superseded: a later identical call {describe_call(call)} has the current output ({ref}).]")
        if changed:
            new = edit.render(position, with_results(item.message, changed))
            edit.events.append(DedupStubbed((item.entry_id,), item.tokens, new.tokens,
                                            "identical output of an identical earlier call"))
    for entry_id, stubs in superseded.items():
        old = earlier[entry_id]
        blocks = {i: text_result(b, stubs[b.call_id]) for i, b in enumerate(old.message.blocks)
                  if isinstance(b, ToolResult) and b.call_id in stubs}
        message = with_results(old.message, blocks)
        edit.record(entry_id, message)
        edit.events.append(DedupSuperseded((entry_id,), old.tokens, ctx.count(message),
                                           "an idempotent call was repeated; only the newest output is kept"))
    return edit.result()
