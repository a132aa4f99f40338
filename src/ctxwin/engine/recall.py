"""Recall: what a placeholder points at, byte for byte, from the log and the blob store."""

from __future__ import annotations

import json

from ctxwin.compaction.extractive.lists import LIST_NAMES, list_text
from ctxwin.errors import BlobNotTextError, CtxwinError, InputError
from ctxwin.store.base import BlobStore

from .state import SessionState


def resolve(ref: str, state: SessionState, blobs: BlobStore | None) -> str:
    """`entry:<id>` (a message as logged), `entry:<id>#<call id>` (one tool result, or a cleared call's
    input), `entry:<id>#<list>` (a full list a summary cut for its budget: `commands`, `errors`, ...,
    from the compaction in effect that covers entry <id>; also `entry:<compaction id>[#<list>]`), or
    `blob:<hash>` (a spilled output)."""
    if not isinstance(ref, str):
        raise InputError(f"a recall reference is text, not {type(ref).__name__}",
                         "pass the ref a placeholder names: entry:<id>, entry:<id>#<call> or blob:<hash>")
    if ref.startswith("blob:"):
        if blobs is None:
            raise CtxwinError(f"{ref}: this session has no blob store", "open the session with a blob store")
        data = blobs.get(ref)
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as error:
            # Not text as recall returns it: say so rather than hand back altered bytes (the blob's are kept).
            raise BlobNotTextError(
                f"{ref} is not UTF-8 text ({len(data):,} bytes; the first byte that is not UTF-8 is at "
                f"{error.start:,})",
                "get its exact bytes with session.blobs.get(ref), or read it with the read_spilled or "
                "grep_spilled tool, which show a byte that is not UTF-8 as U+FFFD") from None
    if ref.startswith("entry:"):
        entry_id, _, call_id = ref[len("entry:"):].partition("#")
        position = state.index.get(entry_id)
        compaction = state.compaction
        if position is None and compaction is not None and entry_id == compaction.entry_id:
            found = compaction.summary.text if not call_id else list_text(compaction.summary.details, call_id)
            if found is None:
                raise CtxwinError(f"{ref}: the compaction has no list {call_id!r}", f"lists: {', '.join(LIST_NAMES)}")
            return found
        if position is None:
            raise CtxwinError(f"{ref}: no such entry in this session", "use a ref from a placeholder or notice")
        message = state.records[position].message
        if call_id:
            for result in message.tool_results:
                if result.call_id == call_id:
                    return result.text
            for call in message.tool_calls:  # a cleared call input: the call as it was made
                if call.id == call_id:
                    return json.dumps(call.arguments, ensure_ascii=False)
            if compaction is not None and entry_id in compaction.summary.covered_ids:
                listed = list_text(compaction.summary.details, call_id)  # a summary's full list
                if listed is not None:
                    return listed
            raise CtxwinError(f"{ref}: entry has no result or call {call_id}")
        return message.text or "\n".join(r.text for r in message.tool_results) or json.dumps(message.to_dict())
    raise CtxwinError(f"not a recall reference: {ref!r}",
                      "refs look like entry:<id>, entry:<id>#<call> or blob:<hash>")


def page(text: str, offset: int, limit: int | None) -> str:
    if not isinstance(offset, int) or offset < 0 or (limit is not None and (not isinstance(limit, int) or limit < 0)):
        raise InputError(f"recall offset and limit must be non-negative integers (got {offset!r}, {limit!r})",
                         "page forward from 0: offset=0, then offset+limit")
    return text[offset: None if limit is None else offset + limit]
