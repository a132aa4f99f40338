"""Patterns that come from a model (grep regexes, find/grep globs), compiled for RE2, whose matching
time is linear in the input: no pattern can backtrack for ever, as `(a+)+$` or `*****…*x` do in
Python's `re`. RE2's syntax is the one ripgrep's default engine reads (no look-around, no
back-references), so both grep engines understand a pattern the same way. The harness's deny lists
are compiled the same way, in `ctxwin.paths`."""

from __future__ import annotations

import re2

from ctxwin.errors import ToolError

# The glob pieces live in `ctxwin.paths` (the deny list, which the memory index applies too, is built
# on them); they are named here as well, where the tools have always found them.
from ctxwin.paths import (
    RE2_MAX_MEM,
    PathRegex,
    Regex,
    compile_glob_alternatives,
    compile_path_regex,
    glob_to_regex,
    path_options,
    re2_options,
)

__all__ = [
    "MAX_PATTERN_CHARS", "RE2_MAX_MEM", "PathRegex", "Regex", "check_text_argument", "compile_glob",
    "compile_glob_alternatives", "compile_regex", "glob_to_regex", "path_options",
]

MAX_PATTERN_CHARS = 1000  # longest regex or glob accepted (Letta's cap for grep patterns)


def check_text_argument(name: str, value: object, *, allow_empty: bool = False) -> str:
    """A string argument a model sent: a str, no NUL byte (no OS call or regex takes one), not too long."""
    if not isinstance(value, str):
        raise ToolError("bad_argument", f"{name} must be a string, not {type(value).__name__}")
    if not value and not allow_empty:
        raise ToolError("bad_argument", f"{name} is empty")
    if "\x00" in value:
        raise ToolError("bad_argument", f"{name} contains a NUL byte", f"Give {name} without NUL characters.")
    return value


def compile_regex(pattern: str, *, ignore_case: bool = False, literal: bool = False) -> Regex:
    """A user's regex for searching UTF-8 bytes line by line (`^`/`$` match at line ends)."""
    check_text_argument("pattern", pattern)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError("bad_argument", f"pattern is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}.")
    body = re2.escape(pattern) if literal else pattern
    flags = "(?m" + ("i" if ignore_case else "") + ")"
    try:
        return re2.compile((flags + body).encode("utf-8", "surrogateescape"), re2_options())
    except re2.error as error:
        message = error.args[0].decode("utf-8", "replace") if error.args and isinstance(error.args[0], bytes) else error
        raise ToolError(
            "bad_pattern", f"invalid regex {pattern!r}: {message}",
            "Check the pattern. The syntax is RE2's (as ripgrep's): no look-around, no back-references.",
        ) from None


def compile_glob(pattern: str, *, name: str = "glob") -> PathRegex:
    """A glob for find/grep, matched with `fullmatch` against a relative path: with a `/` it
    matches the whole path, otherwise the last segment at any depth."""
    check_text_argument(name, pattern)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError("bad_argument", f"{name} is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}.")
    body = glob_to_regex(pattern.lstrip("/"))
    return compile_path_regex(body if "/" in pattern else f"(?:.*/)?{body}", pattern, name)
