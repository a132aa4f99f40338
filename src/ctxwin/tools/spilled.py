"""Tools over spilled output: page it, search it, and for JSON, preview it and query it with jq or
JMESPath (Alyx's split: a small preview for the model, the full copy for drilling into)."""

from __future__ import annotations

import io
import json
from typing import Any, Literal

from ctxwin.store.base import BlobStore
from ctxwin.tools.base import SPILL_PREVIEW_CHARS, Limits, ToolError, ToolOutput, refusals_as_output
from ctxwin.tools.paging import check_positive, page
from ctxwin.tools.patterns import compile_regex
from ctxwin.tools.search import FileHits, format_hits, hits_for, keep_bytes_for, match_lines
from ctxwin.tools.sniff import SNIFF_BYTES, sniff
from ctxwin.tools.truncate import format_size, truncate_head
from ctxwin.tools.workspace import Workspace

QUERY_MAX_FILE_BYTES = 64 * 1024 * 1024  # query_json parses workspace JSON files up to this size
PREVIEW_MAX_KEYS = 30  # keys of one object a preview lists at most (the roomiest level)

Source = Workspace | BlobStore
Language = Literal["jq", "jmespath"]


def _store_and_limits(source: Source) -> tuple[BlobStore, Limits]:
    if isinstance(source, Workspace):
        return source.require_blobs(), source.limits
    return source, Limits()


def _blob_text(store: BlobStore, handle: str) -> bytes:
    data = store.get(handle)
    facts = sniff(data[:SNIFF_BYTES], at_eof=len(data) <= SNIFF_BYTES)
    if facts.binary:
        raise ToolError("binary", f"{handle} holds binary data ({facts.description}, {format_size(len(data))}).")
    return data


@refusals_as_output
def read_spilled(
    source: Source, handle: str, offset: int | None = None, limit: int | None = None, *, column: int | None = None
) -> ToolOutput:
    """Pages spilled output by lines, exactly as read pages a file (same numbering, caps, notices)."""
    store, limits = _store_and_limits(source)
    data = _blob_text(store, handle)
    index = source.line_index.get(("blob", handle, len(data))) if isinstance(source, Workspace) else None
    result = page(io.BytesIO(data), len(data), offset=offset, limit=limit, column=column, limits=limits, index=index)
    return ToolOutput(result.text, details={"handle": handle, "size": len(data), **result.facts()})


@refusals_as_output
def grep_spilled(
    source: Source,
    handle: str,
    pattern: str,
    limit: int = 100,
    *,
    context: int = 0,
    ignore_case: bool = False,
    literal: bool = False,
) -> ToolOutput:
    """Lines of spilled output matching `pattern`, as `handle:line:text`, with grep's caps and notices."""
    store, limits = _store_and_limits(source)
    check_positive("limit", limit)
    if not isinstance(context, int) or context < 0:
        raise ToolError("bad_argument", f"context={context!r} is not valid; a whole number from 0.")
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("bad_argument", "pattern is empty", "Give a regular expression or, with literal=true, text.")
    regex = compile_regex(pattern, ignore_case=ignore_case, literal=literal)
    data = _blob_text(store, handle)
    hits = hits_for(io.BytesIO(data), match_lines(data, regex, limit + 1), context, keep_bytes_for(limits))
    files = [FileHits(handle, hits)] if hits else []
    return format_hits(files, context, limit, limits, "", {"handle": handle, "engine": "python"})


# --------------------------------------------------------------------------------------------------
# JSON preview

# (depth, items per array, characters per string, keys per object), from roomiest to tightest.
_LEVELS = (
    (6, 3, 80, PREVIEW_MAX_KEYS),
    (4, 2, 60, 20),
    (3, 1, 40, 12),
    (2, 1, 24, 8),
    (1, 1, 16, 5),
    (0, 1, 16, 3),
)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _shape(value: Any, depth: int, keys: int) -> str:
    """Keys, types and array lengths, no values: `{"items": [1523 × {"id": int}], "total": int}`."""
    if isinstance(value, dict):
        if depth <= 0:
            return f"{{{len(value)} keys}}"
        parts = [
            f"{json.dumps(k, ensure_ascii=False)}: {_shape(v, depth - 1, keys)}" for k, v in list(value.items())[:keys]
        ]
        if len(value) > keys:
            parts.append(f"… {len(value) - keys} more keys")
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if depth <= 0:
            return f"[{len(value)} items]"
        kinds = sorted({_type_name(v) for v in value[:20]})
        element = _shape(value[0], depth - 1, keys) if len(kinds) == 1 else "|".join(kinds)
        return f"[{len(value)} × {element}]"
    return _type_name(value)


def _sample(value: Any, depth: int, items: int, chars: int, keys: int) -> str:
    """The value itself, arrays cut to their first items and strings to their first characters."""
    if isinstance(value, dict):
        if depth <= 0:
            return f"{{…{len(value)} keys}}"
        parts = [
            f"{json.dumps(k, ensure_ascii=False)}: {_sample(v, depth - 1, items, chars, keys)}"
            for k, v in list(value.items())[:keys]
        ]
        if len(value) > keys:
            parts.append(f"… {len(value) - keys} more keys")
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list):
        if depth <= 0:
            return f"[…{len(value)} items]"
        parts = [_sample(v, depth - 1, items, chars, keys) for v in value[:items]]
        if len(value) > items:
            parts.append(f"… {len(value) - items} more")
        return "[" + ", ".join(parts) + "]"
    if isinstance(value, str) and len(value) > chars:
        return json.dumps(value[:chars], ensure_ascii=False)[:-1] + f"…\" (+{len(value) - chars} chars)"
    return json.dumps(value, ensure_ascii=False, default=str)


def json_preview(value: Any, budget_chars: int = SPILL_PREVIEW_CHARS) -> str:
    """A compact preview of a JSON value within `budget_chars`: its shape (keys, types, array
    lengths) and a sample (the value with arrays cut to their first items, strings to their first
    characters). The shape comes first and gets up to 60 % of the budget; the sample gets the rest;
    detail shrinks level by level until each fits."""
    shapes = [f"shape: {_shape(value, depth, keys)}" for depth, _, _, keys in _LEVELS]
    shape = next((s for s in shapes if len(s) <= budget_chars * 3 // 5), None)
    if shape is None:
        shape = next((s for s in shapes if len(s) <= budget_chars), shapes[-1][: max(0, budget_chars - 1)] + "…")
        return shape
    room = budget_chars - len(shape) - 1
    for depth, items, chars, keys in _LEVELS:
        if depth == 0 and isinstance(value, dict | list):
            break  # a sample that only counts keys says less than the shape already does
        sample = f"sample: {_sample(value, depth, items, chars, keys)}"
        if len(sample) <= room:
            return f"{shape}\n{sample}"
    return shape


# --------------------------------------------------------------------------------------------------
# query_json


def _load_json(source: Source, handle: str) -> tuple[Any, str]:
    if isinstance(handle, str) and handle.startswith("blob:"):
        store, _ = _store_and_limits(source)
        raw = store.get(handle)
        name = handle
    elif isinstance(source, Workspace):
        resolved = source.resolve(handle)
        source.require_file(resolved)
        if resolved.st.st_size > QUERY_MAX_FILE_BYTES:
            raise ToolError(
                "too_large", f"{resolved.display} is {format_size(resolved.st.st_size)}, over the "
                f"{format_size(QUERY_MAX_FILE_BYTES)} limit for query_json.", "Use grep on it instead.",
            )
        with source.open_file(resolved) as stream:
            raw = stream.read()
        name = resolved.display
    else:
        raise ToolError("bad_argument", f"{handle!r} is not a blob handle", "Handles look like blob:<hex>.")
    text = raw.decode("utf-8", "replace")
    try:
        return json.loads(text), name
    except json.JSONDecodeError as error:
        try:  # JSON Lines: one value per line
            return [json.loads(line) for line in text.splitlines() if line.strip()], name
        except json.JSONDecodeError:
            raise ToolError(
                "not_json", f"{name} is not JSON ({error.msg} at line {error.lineno} column {error.colno}).",
                "Use read_spilled or grep_spilled for text output.",
            ) from None


def _run_query(value: Any, expr: str, language: str) -> list[Any]:
    if language == "jq":
        try:
            import jq
        except ImportError:
            raise ToolError(
                "missing_extra", "query_json with language='jq' needs the jq package, which is not installed.",
                "Install it with pip install 'ctxwin[jq]', or use language='jmespath'.",
            ) from None
        try:
            return list(jq.compile(expr).input_value(value).all())
        except ValueError as error:
            raise ToolError("bad_expression", f"jq error: {error}", "Check the jq expression.") from None
    if language == "jmespath":
        try:
            import jmespath
            from jmespath.exceptions import JMESPathError
        except ImportError:
            raise ToolError(
                "missing_extra",
                "query_json with language='jmespath' needs the jmespath package, which is not installed.",
                "Install it with pip install 'ctxwin[jq]', or use language='jq'.",
            ) from None
        try:
            return [jmespath.search(expr, value)]
        except JMESPathError as error:
            raise ToolError("bad_expression", f"JMESPath error: {error}", "Check the JMESPath expression.") from None
    raise ToolError("bad_argument", f"language={language!r} is not supported", "Use 'jq' or 'jmespath'.")


@refusals_as_output
def query_json(source: Source, handle: str, expr: str, language: Language = "jq") -> ToolOutput:
    """Runs a jq or JMESPath expression over the JSON under `handle` (or a workspace JSON file);
    each result is shown as indented JSON, capped at 2,000 lines or 50 KB."""
    if not isinstance(expr, str) or not expr.strip():
        raise ToolError("bad_argument", "expr is empty", "Give a jq expression such as '.items | length'.")
    limits = source.limits if isinstance(source, Workspace) else Limits()
    value, name = _load_json(source, handle)
    results = _run_query(value, expr, language)
    lines: list[str] = []
    for result in results:
        lines += json.dumps(result, ensure_ascii=False, indent=2, default=str).split("\n")
    if not lines:
        return ToolOutput("(no results)", details={"source": name, "results": 0, "language": language})
    trunc = truncate_head(lines, limits.max_lines, limits.max_bytes)
    text = trunc.text
    if trunc.first_line_exceeds_limit:
        text = f"[The first result line is over the {format_size(limits.max_bytes)} limit.]"
    if trunc.truncated:
        limit_note = f" ({format_size(limits.max_bytes)} limit)" if trunc.truncated_by == "bytes" else ""
        text += (
            f"\n\n[Showing lines 1-{trunc.output_lines} of {trunc.total_lines} of the result{limit_note}. "
            "Narrow the expression to see the rest (e.g. slice an array with .[100:200], select fields, or count "
            "with length).]"
        )
    details = {"source": name, "results": len(results), "language": language, "truncation": trunc.facts()}
    return ToolOutput(text, details=details)
