"""What every tool returns (`ToolOutput`), the error a tool raises when it refuses (`ToolError`), and
the limits every tool reads from its workspace (`Limits`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, ParamSpec

from ctxwin.errors import InputError, ToolError
from ctxwin.messages import Image, Text, ToolResult, block_to_dict
from ctxwin.paths import printable  # named here too: the tools import it from here
from ctxwin.tools.truncate import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    GREP_MAX_LINE_CHARS,
    READ_MAX_LINE_CHARS,
    format_size,
)

READ_MAX_FILE_BYTES = 256 * 1024  # read refuses whole files above this size unless offset/limit page them
READ_MAX_TOKENS = 25_000  # read refuses a page whose text is above this many tokens (token-dense files)
READ_MAX_IMAGE_BYTES = 5 * 1024 * 1024  # images above this size are described, not attached
READ_MAX_NOTEBOOK_BYTES = 32 * 1024 * 1024  # notebooks are parsed whole; above this they are refused
READ_PDF_PAGES_WITHOUT_RANGE = 10  # PDFs with more pages than this need a `pages` range
READ_PDF_MAX_PAGES = 20  # pages one read of a PDF returns at most
COUNT_LINES_MAX_BYTES = 64 * 1024 * 1024  # beyond this, a paged read does not count the file's total lines
GREP_DEFAULT_LIMIT = 100  # matching lines grep shows at most
GREP_MAX_FILE_BYTES = 50 * 1024 * 1024  # grep skips files larger than this
FIND_DEFAULT_LIMIT = 1000  # paths find shows at most
LS_DEFAULT_LIMIT = 500  # entries ls shows at most
SHELL_TIMEOUT_S = 120.0  # default shell timeout; the whole process group is killed after it
SHELL_MAX_CAPTURE_BYTES = 100 * 1024 * 1024  # shell output kept for the blob store at most (the tail is always shown)
SPILL_PREVIEW_CHARS = 2000  # characters of a JSON preview by default
QUERY_TIMEOUT_S = 10.0  # query_json's jq/JMESPath process is stopped after this long
QUERY_MAX_MEMORY_BYTES = 2 * 1024**3  # address space of query_json's process (RLIMIT_AS)
SHELL_MAX_TIMEOUT_S = 24 * 3600.0  # the longest timeout a shell call may ask for


# The limits tool descriptions quote, by name (`{lines}` in a tool's docstring; see tools.spec).
DESCRIPTION_FACTS: Mapping[str, object] = {
    "lines": DEFAULT_MAX_LINES,
    "next_offset": DEFAULT_MAX_LINES + 1,
    "bytes": format_size(DEFAULT_MAX_BYTES),
    "read_max_file": format_size(READ_MAX_FILE_BYTES),
    "read_max_tokens": READ_MAX_TOKENS,
    "read_line_chars": READ_MAX_LINE_CHARS,
    "grep_line_chars": GREP_MAX_LINE_CHARS,
    "pdf_max_pages": READ_PDF_MAX_PAGES,
    "pdf_without_range": READ_PDF_PAGES_WITHOUT_RANGE,
    "grep_limit": GREP_DEFAULT_LIMIT,
    "find_limit": FIND_DEFAULT_LIMIT,
    "ls_limit": LS_DEFAULT_LIMIT,
    "shell_timeout": f"{SHELL_TIMEOUT_S:g}",
}


@dataclass(frozen=True, slots=True)
class Limits:
    """Every cap the tools apply, in one place a harness can override (`Workspace(limits=...)`)."""

    max_lines: int = DEFAULT_MAX_LINES
    max_bytes: int = DEFAULT_MAX_BYTES
    read_max_line_chars: int = READ_MAX_LINE_CHARS
    read_max_file_bytes: int = READ_MAX_FILE_BYTES
    read_max_tokens: int = READ_MAX_TOKENS
    read_max_image_bytes: int = READ_MAX_IMAGE_BYTES
    read_max_notebook_bytes: int = READ_MAX_NOTEBOOK_BYTES
    pdf_pages_without_range: int = READ_PDF_PAGES_WITHOUT_RANGE
    pdf_max_pages: int = READ_PDF_MAX_PAGES
    count_lines_max_bytes: int = COUNT_LINES_MAX_BYTES
    grep_max_line_chars: int = GREP_MAX_LINE_CHARS
    grep_max_file_bytes: int = GREP_MAX_FILE_BYTES
    shell_timeout_s: float = SHELL_TIMEOUT_S
    shell_max_capture_bytes: int = SHELL_MAX_CAPTURE_BYTES
    shell_max_timeout_s: float = SHELL_MAX_TIMEOUT_S
    query_timeout_s: float = QUERY_TIMEOUT_S
    query_max_memory_bytes: int = QUERY_MAX_MEMORY_BYTES


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What the model sees (`text`, and `parts`: the text plus any images, in order) and the facts
    of what the tool did (`details`: plain JSON)."""

    text: str
    parts: tuple[Text | Image, ...] = ()
    is_error: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.parts:
            object.__setattr__(self, "parts", (Text(self.text),))

    @staticmethod
    def error(error: ToolError, **details: Any) -> ToolOutput:
        text = f"{error.message}\n{error.hint}" if error.hint else error.message
        return ToolOutput(text, is_error=True, details={"error": error.reason, **details})

    def to_tool_result(self, call_id: str, name: str | None = None) -> ToolResult:
        return ToolResult(call_id=call_id, content=self.parts, is_error=self.is_error, name=name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "parts": [block_to_dict(p) for p in self.parts],
            "is_error": self.is_error,
            "details": dict(self.details),
        }


P = ParamSpec("P")


def refusals_as_output(func: Callable[P, ToolOutput]) -> Callable[P, ToolOutput]:
    """A tool never raises for what the model asked: its refusals, and the file system's, become
    error outputs."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> ToolOutput:
        try:
            return func(*args, **kwargs)
        except ToolError as error:
            return ToolOutput.error(error)
        except InputError as error:  # e.g. a blob store's "no such handle"
            return ToolOutput.error(ToolError("input", error.message, error.hint))
        except OSError as error:  # the file system refused (EIO, EACCES, a file gone mid-read)
            name = f" ({printable(str(error.filename))})" if error.filename else ""
            return ToolOutput.error(ToolError("os_error", f"The file system refused{name}: {error.strerror or error}."))

    return wrapper


# A name with one of these (or a leading quote) is shown as a JSON string literal: a newline in a file
# name must not make one entry read as two, and the quoting must not be mistaken for a plain name.
_QUOTE_IF = re.compile('[\x00-\x1f\x7f\x85\u2028\u2029\\\\]|^"')


def shown_name(name: str, suffix: str = "") -> str:
    """A path as listings print it (`suffix`: "/" for folders): `printable`, and quoted as a JSON
    string when it holds a control character, a backslash or a leading double quote."""
    text = printable(name) + suffix
    return json.dumps(text, ensure_ascii=False) if _QUOTE_IF.search(text) else text
