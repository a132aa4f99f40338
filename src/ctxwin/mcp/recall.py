"""`recall` as a tool: what a placeholder, notice or summary points at, read back from the session log
(`entry:<id>`, `entry:<id>#<call id>`) or the blob store (`blob:<hex>`), paged by characters under the
same byte cap as every other tool. The library's `ContextEngine.recall` answers the same refs for a
harness that holds the engine; a server has only the stored session, so it reads the log directly
(`memory.recall.resolve_ref`, byte for byte as the engine does)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ctxwin.memory.recall import resolve_ref
from ctxwin.store.base import BlobStore
from ctxwin.tools.base import DESCRIPTION_FACTS, Limits, ToolError, ToolOutput
from ctxwin.tools.sniff import SNIFF_BYTES, sniff
from ctxwin.tools.spec import NonNegative, Positive, tool
from ctxwin.tools.truncate import format_size, utf8_len


@dataclass(frozen=True, slots=True)
class RecallSource:
    """Where refs are looked up: the session folder (entry refs) and the blob store (blob refs)."""

    session: Path | None = None
    blobs: BlobStore | None = None
    limits: Limits = field(default_factory=Limits)


def _text_of(source: RecallSource, ref: str) -> str:
    if ref.startswith("blob:"):
        if source.blobs is None:
            raise ToolError("no_blob_store", f"{ref}: this server has no blob store.",
                            "Start ctxwin mcp with --blobs DIR or --session ID.")
        data = source.blobs.get(ref)
        facts = sniff(data[:SNIFF_BYTES], at_eof=len(data) <= SNIFF_BYTES)
        if facts.binary:
            raise ToolError("binary", f"{ref} holds binary data ({facts.description}, {format_size(len(data))}).")
        return data.decode("utf-8", "replace")
    if ref.startswith("entry:"):
        if source.session is None:
            raise ToolError("no_session", f"{ref}: this server has no session log to look entries up in.",
                            "Start ctxwin mcp with --store DIR --session ID.")
        from ctxwin.store.session import Session

        # Opened per call: another process (the agent) may be appending to the session.
        with Session.open(source.session, readonly=True) as log:
            return resolve_ref(log, ref)
    raise ToolError("bad_argument", f"not a recall reference: {ref[:100]!r}",
                    "Refs look like entry:<id>, entry:<id>#<call id> or blob:<hex>, as the placeholder names them.")


def _cut(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` within `max_bytes` UTF-8 bytes, never splitting a character."""
    if utf8_len(text) <= max_bytes:
        return text
    encoded = text.encode("utf-8", "surrogatepass")
    end = max_bytes
    while end > 0 and (encoded[end] & 0xC0) == 0x80:  # a continuation byte: the character started earlier
        end -= 1
    return encoded[:end].decode("utf-8", "surrogatepass")


@tool(facts=DESCRIPTION_FACTS)
def recall(source: RecallSource, ref: str, offset: NonNegative = 0, limit: Positive | None = None) -> ToolOutput:
    """Get back, exactly as it was, something that was taken out of your context to save room. A
    placeholder, notice or summary names it with a ref: entry:<id> (a whole message), entry:<id>#<call
    id> (one tool result, or the input of a cleared tool call) or blob:<hex> (output saved when it was
    too large to show).

    Limits: at most {bytes} per call. When more remains, the output ends with a notice such as
    [Characters 0-51200 of 300000 shown. Use offset=51200 to continue.]: call recall again with that
    offset. offset and limit count characters from 0.
    - For large saved output, read_spilled (numbered lines) and grep_spilled (search) are usually better
      than paging through it whole.
    - conversation_search finds the refs of earlier messages by their content.

    Args:
        ref: The ref as the placeholder names it: entry:<id>, entry:<id>#<call id> or blob:<hex>.
        offset: First character to return, 0-based.
        limit: Most characters to return.
    """
    text = _text_of(source, ref.strip())
    if offset > len(text):
        raise ToolError("bad_argument", f"offset={offset} is past the end of {ref} ({len(text)} characters).",
                        "Start again at offset=0.")
    shown = _cut(text[offset: None if limit is None else offset + limit], source.limits.max_bytes)
    end = offset + len(shown)
    details = {"ref": ref, "chars": len(text), "offset": offset, "end": end, "truncated": end < len(text)}
    if end < len(text):
        shown += f"\n\n[Characters {offset}-{end} of {len(text)} shown. Use offset={end} to continue.]"
    return ToolOutput(shown, details=details)
