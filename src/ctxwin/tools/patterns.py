"""Patterns that come from a model (grep regexes, find/grep globs) and from the harness (deny lists),
compiled for RE2, whose matching time is linear in the input: no pattern can backtrack for ever, as
`(a+)+$` or `*****…*x` do in Python's `re`. RE2's syntax is the one ripgrep's default engine reads
(no look-around, no back-references), so both grep engines understand a pattern the same way."""

from __future__ import annotations

from typing import Any

import re2

from ctxwin.tools.base import ToolError, printable

MAX_PATTERN_CHARS = 1000  # longest regex or glob accepted (Letta's cap for grep patterns)
RE2_MAX_MEM = 64 * 1024 * 1024  # memory RE2 may use for one compiled pattern (its default is 8 MB)

Regex = Any  # re2's compiled pattern (`re2._Regexp`; the package ships no type stubs)


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # errors come back as ToolError, not as lines on stderr
    options.max_mem = RE2_MAX_MEM
    return options


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
        return re2.compile((flags + body).encode("utf-8", "surrogateescape"), _options())
    except re2.error as error:
        message = error.args[0].decode("utf-8", "replace") if error.args and isinstance(error.args[0], bytes) else error
        raise ToolError(
            "bad_pattern", f"invalid regex {pattern!r}: {message}",
            "Check the pattern. The syntax is RE2's (as ripgrep's): no look-around, no back-references.",
        ) from None


def glob_to_regex(glob: str) -> str:
    """A gitignore-style glob as an RE2 regex body over a `/`-separated relative path: `*` and `?`
    stay inside one segment, `**` crosses them, `[...]` is a class, `\\` escapes."""
    out: list[str] = []
    i = 0
    n = len(glob)
    while i < n:
        c = glob[i]
        if c == "*":
            j = i
            while j < n and glob[j] == "*":
                j += 1
            at_start = i == 0 or glob[i - 1] == "/"
            if j - i >= 2 and at_start and (j == n or glob[j] == "/"):
                if j == n:
                    out.append(".*")  # trailing "/**": everything inside
                    i = j
                else:
                    out.append("(?:.*/)?")  # "**/": zero or more folders
                    i = j + 1
                continue
            out.append("[^/]*")  # a run of stars inside a segment is one star
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end == -1:
                out.append(re2.escape(c))
            else:
                body = glob[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re2.escape(glob[i]))
        else:
            out.append(re2.escape(c))
        i += 1
    return "".join(out)


class PathRegex:
    """A compiled glob or path regex. File names that are not UTF-8 (surrogate escapes) are matched
    with each bad byte read as U+FFFD, which RE2 can match (`?` and `*` do)."""

    __slots__ = ("_regex",)

    def __init__(self, regex: Regex) -> None:
        self._regex = regex

    def fullmatch(self, path: str) -> bool:
        return self._regex.fullmatch(printable(path)) is not None


def compile_glob(pattern: str, *, name: str = "glob") -> PathRegex:
    """A glob for find/grep, matched with `fullmatch` against a relative path: with a `/` it
    matches the whole path, otherwise the last segment at any depth."""
    check_text_argument(name, pattern)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError("bad_argument", f"{name} is {len(pattern)} characters; at most {MAX_PATTERN_CHARS}.")
    body = glob_to_regex(pattern.lstrip("/"))
    return _compile_glob_regex(body if "/" in pattern else f"(?:.*/)?{body}", pattern, name)


def compile_glob_alternatives(bodies: list[str]) -> PathRegex:
    """Several regex bodies from `glob_to_regex`, matched as one (the deny list's fast test)."""
    return _compile_glob_regex("|".join(f"(?:{b})" for b in bodies), " | ".join(bodies), "deny pattern")


def path_options() -> Any:
    """RE2 options for matching paths: a file name may hold a newline, which `*` matches."""
    options = _options()
    options.dot_nl = True
    return options


def _compile_glob_regex(regex: str, shown: str, name: str) -> PathRegex:
    try:
        return PathRegex(re2.compile(regex, path_options()))
    except re2.error:
        raise ToolError("bad_pattern", f"invalid {name} {shown!r}", "Check the [...] classes of the glob.") from None
