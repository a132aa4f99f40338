"""Tools over spilled output: page it, search it, and for JSON, preview it and query it with jq or
JMESPath (Alyx's split: a small preview for the model, the full copy for drilling into)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le

from ctxwin.store.base import BlobStore
from ctxwin.tools.base import DESCRIPTION_FACTS, GREP_DEFAULT_LIMIT, SPILL_PREVIEW_CHARS, Limits, ToolError, ToolOutput
from ctxwin.tools.paging import check_positive, page
from ctxwin.tools.patterns import check_text_argument, compile_regex
from ctxwin.tools.search import GREP_MAX_CONTEXT, FileHits, format_hits, hits_for, keep_bytes_for, match_lines
from ctxwin.tools.sniff import SNIFF_BYTES, sniff
from ctxwin.tools.spec import Positive, tool
from ctxwin.tools.truncate import format_size, truncate_head
from ctxwin.tools.workspace import Workspace

QUERY_MAX_FILE_BYTES = 64 * 1024 * 1024  # query_json parses workspace JSON files up to this size
QUERY_COUNT_MAX_LINES = 20_000  # result lines query_json counts at most (the total shown is then a lower bound)
QUERY_MAX_ANSWER_BYTES = 16 * 1024 * 1024  # what the query process may send back at most
MAX_EXPR_CHARS = 10_000  # longest jq / JMESPath expression accepted
_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_query_worker.py")
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


@tool(needs="blobs", facts=DESCRIPTION_FACTS)
def read_spilled(
    source: Source, handle: str, offset: Positive | None = None, limit: Positive | None = None, *,
    column: Positive | None = None,
) -> ToolOutput:
    """Read output that was too large to show in full and was saved under a blob handle (blob:<hex>),
    by lines, like read: numbered lines, at most {lines} lines or {bytes} per call, and a notice with
    the offset to continue from. offset/limit pick lines; column reads on inside a cut long line.

    Args:
        handle: Blob handle, blob:<hex>.
        offset: First line to read, 1-based.
        limit: Number of lines to read.
        column: Read one long line from this character on; use with offset.
    """
    # Pages exactly as read pages a file (same numbering, caps, notices).
    store, limits = _store_and_limits(source)
    data = _blob_text(store, handle)
    index = source.line_index.get(("blob", handle, len(data))) if isinstance(source, Workspace) else None
    result = page(io.BytesIO(data), len(data), offset=offset, limit=limit, column=column, limits=limits, index=index)
    return ToolOutput(result.text, details={"handle": handle, "size": len(data), **result.facts()})


@tool(needs="blobs", facts=DESCRIPTION_FACTS)
def grep_spilled(
    source: Source,
    handle: str,
    pattern: str,
    limit: Positive = GREP_DEFAULT_LIMIT,
    *,
    context: Annotated[int, Ge(0), Le(GREP_MAX_CONTEXT)] = 0,
    ignore_case: bool = False,
    literal: bool = False,
) -> ToolOutput:
    """Search output saved under a blob handle for a regular expression (literal=true for plain text).
    Output lines are handle:line:text. At most `limit` matching lines (default {grep_limit}) and
    {bytes}; a notice says when a limit was hit. Then use read_spilled with offset to see around a
    match.

    Args:
        handle: Blob handle, blob:<hex>.
        pattern: Regular expression (or text with literal=true).
        limit: Most matching lines to show.
        context: Lines of context before and after each match.
        ignore_case: Match letters in either case.
        literal: Treat pattern as plain text.
    """
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


# JSON types as the preview names them; bool before int (a bool is an int in Python).
_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (type(None), "null"), (bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (list, "array"),
    (dict, "object"),
)


def _type_name(value: Any) -> str:
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), type(value).__name__)


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


def _load_raw(source: Source, handle: str) -> tuple[bytes, str]:
    if not isinstance(handle, str):
        raise ToolError("bad_argument", f"handle must be a string, not {type(handle).__name__}")
    if handle.startswith("blob:"):
        store, _ = _store_and_limits(source)
        return store.get(handle), handle
    if not isinstance(source, Workspace):
        raise ToolError("bad_argument", f"{handle!r} is not a blob handle", "Handles look like blob:<hex>.")
    with source.opened(handle) as opened:
        resolved = opened.resolved
        source.require_file(resolved)
        if resolved.st.st_size > QUERY_MAX_FILE_BYTES:
            raise ToolError(
                "too_large", f"{resolved.display} is {format_size(resolved.st.st_size)}, over the "
                f"{format_size(QUERY_MAX_FILE_BYTES)} limit for query_json.", "Use grep on it instead.",
            )
        with opened.open_file() as stream:
            return stream.read(QUERY_MAX_FILE_BYTES + 1), resolved.display


def _missing(language: str) -> ToolError:
    other = "jmespath" if language == "jq" else "jq"
    return ToolError(
        "missing_extra", f"query_json with language='{language}' needs the {language} package, which is not installed.",
        f"Install it with pip install 'ctxwin[jq]', or use language='{other}'.",
    )


@dataclass(frozen=True, slots=True)
class QueryResult:
    lines: list[str]  # the first lines of the results, as indented JSON
    total_lines: int  # lines of all results, counted up to the count cap
    results: int
    complete: bool  # total_lines counts every line


def run_query(raw: bytes, expr: str, language: str, limits: Limits) -> QueryResult:
    """Runs `expr` over the JSON `raw` in a child process with a memory cap (RLIMIT_AS), a time
    limit and a cap on what it sends back, so no expression (`repeat(1)`, `def f: f; f`,
    `[range(1e9)]`) can hang, bloat or abort the caller."""
    if language not in ("jq", "jmespath"):
        raise ToolError("bad_argument", f"language={language!r} is not supported", "Use 'jq' or 'jmespath'.")
    if importlib.util.find_spec(language) is None:
        raise _missing(language)
    cmd = [
        sys.executable, "-I", _WORKER, language, expr, str(limits.query_max_memory_bytes),
        str(limits.max_lines + 1), str(limits.max_bytes + 1), str(QUERY_COUNT_MAX_LINES),
    ]
    try:
        proc = subprocess.run(
            cmd, input=raw, capture_output=True, timeout=limits.query_timeout_s, check=False, env={},
        )
    except subprocess.TimeoutExpired:
        raise ToolError(
            "timeout", f"The {language} expression ran for more than {limits.query_timeout_s:g} s and was stopped.",
            "Use an expression that ends (no endless recursion or repeat); narrow it with select or a slice.",
        ) from None
    try:
        answer = json.loads(proc.stdout[: QUERY_MAX_ANSWER_BYTES]) if proc.stdout else None
    except json.JSONDecodeError:
        answer = None
    if not isinstance(answer, dict):
        stderr = proc.stderr.lower()
        words = (b"memoryerror", b"allocate memory", b"out of memory")
        if proc.returncode < 0 or any(word in stderr for word in words):
            raise ToolError(
                "out_of_memory", f"The {language} expression needed more than "
                f"{format_size(limits.query_max_memory_bytes)} of memory and was stopped.",
                "Narrow the expression so it builds less (slice arrays, select fields, count with length).",
            )
        raise ToolError("query_failed", f"{language} failed (exit {proc.returncode}).", "Check the expression.")
    if not answer.get("ok"):
        return _query_error(answer, language, limits)
    return QueryResult(answer["lines"], answer["total_lines"], answer["results"], answer["complete"])


def _query_error(answer: dict[str, Any], language: str, limits: Limits) -> QueryResult:
    error, message = str(answer.get("error")), str(answer.get("message"))
    label = "jq" if language == "jq" else "JMESPath"
    if error == "missing_extra":
        raise _missing(language)
    if error == "not_json":
        raise ToolError("not_json", f"not JSON ({message}).", "Use read_spilled or grep_spilled for text output.")
    if error == "out_of_memory":
        raise ToolError("out_of_memory", f"{message} ({format_size(limits.query_max_memory_bytes)}).",
                        "Narrow the expression so it builds less.")
    if error == "too_deep":
        raise ToolError("too_deep", f"{label}: {message}.", "Query a part of it, or use grep_spilled.")
    raise ToolError("bad_expression", f"{label} error: {message}", f"Check the {label} expression.")


@tool(facts=DESCRIPTION_FACTS)
def query_json(source: Source, handle: str, expr: str, language: Language = "jq") -> ToolOutput:
    """Run a jq expression (default) or a JMESPath expression (language="jmespath") over JSON saved
    under a blob handle, or over a JSON / JSON Lines file in the workspace, and show the result as
    indented JSON.

    Use it to drill into a large JSON result after seeing its preview: '.items | length',
    '.items[:10]', '.items[] | select(.status == "error") | .id', '[.items[].name]'.

    Limits: at most {lines} lines or {bytes} of result; a notice says when it was cut: narrow the
    expression (slice arrays, select fields). An expression that runs too long, needs too much
    memory or yields endless results is stopped with an error.

    Args:
        handle: Blob handle (blob:<hex>) or a JSON file path.
        expr: jq (or JMESPath) expression.
        language: The expression's language.
    """
    if not isinstance(expr, str) or not expr.strip():
        raise ToolError("bad_argument", "expr is empty", "Give a jq expression such as '.items | length'.")
    check_text_argument("expr", expr)
    if len(expr) > MAX_EXPR_CHARS:
        raise ToolError("bad_argument", f"expr is {len(expr)} characters; at most {MAX_EXPR_CHARS}.")
    limits = source.limits if isinstance(source, Workspace) else Limits()
    if language not in ("jq", "jmespath"):
        raise ToolError("bad_argument", f"language={language!r} is not supported", "Use 'jq' or 'jmespath'.")
    raw, name = _load_raw(source, handle)
    try:
        found = run_query(raw, expr, language, limits)
    except ToolError as error:
        if error.reason == "not_json":
            raise ToolError("not_json", f"{name} is {error.message}", error.hint) from None
        raise
    lines = found.lines
    if not lines:
        return ToolOutput("(no results)", details={"source": name, "results": 0, "language": language})
    trunc = truncate_head(lines, limits.max_lines, limits.max_bytes)
    text = trunc.text
    if trunc.first_line_exceeds_limit:
        text = f"[The first result line is over the {format_size(limits.max_bytes)} limit.]"
    total = f"{found.total_lines}" if found.complete else f"more than {QUERY_COUNT_MAX_LINES}"
    if trunc.truncated or found.total_lines > trunc.output_lines:
        limit_note = f" ({format_size(limits.max_bytes)} limit)" if trunc.truncated_by == "bytes" else ""
        text += (
            f"\n\n[Showing lines 1-{trunc.output_lines} of {total} of the result{limit_note}. "
            "Narrow the expression to see the rest (e.g. slice an array with .[100:200], select fields, or count "
            "with length).]"
        )
    details: dict[str, Any] = {
        "source": name, "results": found.results, "results_complete": found.complete, "language": language,
        "total_lines": found.total_lines, "truncation": trunc.facts(),
    }
    if not found.complete:
        # An endless or huge stream of results (repeat, range(1e7)) is refused as such, its first page shown.
        details["error"] = "too_many_results"
        text += f"\n[Stopped after {QUERY_COUNT_MAX_LINES} result lines: the expression produces too many results.]"
    return ToolOutput(text, is_error=not found.complete, details=details)
