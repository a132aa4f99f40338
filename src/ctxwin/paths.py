"""Relative paths as ctxwin's sandboxes see them: file names as printable text, gitignore-style globs
compiled for RE2, and the deny list of secrets built on them.

The tool workspace (`ctxwin.tools.workspace`) and the memory index (`ctxwin.memory.files`) both refuse
what `DEFAULT_DENY` names, so the one definition lives here, below both. RE2 matches in time linear in
the input: no pattern can backtrack for ever, as `(a+)+$` or `*****…*x` do in Python's `re`.

Imports only `ctxwin.errors`, `re2` and the standard library: this is a bottom layer (beside `files`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import re2

from ctxwin.errors import ToolError

RE2_MAX_MEM = 64 * 1024 * 1024  # memory RE2 may use for one compiled pattern (its default is 8 MB)

Regex = Any  # re2's compiled pattern (`re2._Regexp`; the package ships no type stubs)

DEFAULT_DENY: tuple[str, ...] = (
    ".env*",  # dotenv files (.env, .env.local, .envrc)
    "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",  # SSH private keys
    "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore",  # TLS / signing keys and keystores
    ".netrc", "_netrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials", ".htpasswd",  # credential files
    "credentials*", ".aws/credentials", ".docker/config.json", ".kube/config",  # cloud credentials
    "*.kdbx",  # password databases
)
"""Paths never read, listed or indexed, even inside the roots (secrets and credentials)."""


def printable(name: str) -> str:
    """A file name as text a model (and a terminal) can take: bytes that were not UTF-8 (kept by the
    OS as surrogate escapes) become U+FFFD."""
    if name.isascii():
        return name
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def re2_options() -> Any:
    """RE2 options every ctxwin pattern is compiled with: errors raised (not logged), a memory cap."""
    options = re2.Options()
    options.log_errors = False  # errors come back as ToolError, not as lines on stderr
    options.max_mem = RE2_MAX_MEM
    return options


def path_options() -> Any:
    """RE2 options for matching paths: a file name may hold a newline, which `*` matches."""
    options = re2_options()
    options.dot_nl = True
    return options


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


def compile_path_regex(regex: str, shown: str, name: str) -> PathRegex:
    """A regex body (from `glob_to_regex`) compiled for paths; `shown` and `name` word the error."""
    try:
        return PathRegex(re2.compile(regex, path_options()))
    except re2.error:
        raise ToolError("bad_pattern", f"invalid {name} {shown!r}", "Check the [...] classes of the glob.") from None


def compile_glob_alternatives(bodies: list[str]) -> PathRegex:
    """Several regex bodies from `glob_to_regex`, matched as one (the deny list's fast test)."""
    return compile_path_regex("|".join(f"(?:{b})" for b in bodies), " | ".join(bodies), "deny pattern")


@dataclass(frozen=True, slots=True)
class _DenyRegexes:
    """The deny patterns compiled (RE2) for the fast "any match?" test."""

    single: PathRegex | None  # the patterns that match one segment
    multi: tuple[tuple[int, PathRegex], ...]  # (segment count, regex) of the patterns with `/`
    last: PathRegex | None  # a segment that could end a match of any pattern: the one test most names need


@functools.lru_cache(maxsize=32)
def _deny_regexes(patterns: tuple[str, ...]) -> _DenyRegexes:
    single = [glob_to_regex(p.lower()) for p in patterns if "/" not in p]
    multi = tuple(
        (p.count("/") + 1, compile_glob_alternatives([glob_to_regex(p.lower())])) for p in patterns if "/" in p
    )
    last = single + [glob_to_regex(p.lower().rsplit("/", 1)[1]) for p in patterns if "/" in p]
    return _DenyRegexes(
        compile_glob_alternatives(single) if single else None, multi, compile_glob_alternatives(last) if last else None
    )


def _denied_by(rel: str, patterns: tuple[str, ...]) -> bool:
    parts = rel.lower().split("/")
    compiled = _deny_regexes(patterns)
    single, multi = compiled.single, compiled.multi
    if single is not None and any(single.fullmatch(part) for part in parts):
        return True
    return any(
        regex.fullmatch("/".join(parts[end - count : end]))
        for count, regex in multi
        for end in range(count, len(parts) + 1)
    )


def denied_tail(rel: str, patterns: Sequence[str]) -> bool:
    """Whether a deny pattern matches `rel` at its last segment (the windows that end there): enough
    for a walk, which has checked every folder above already; O(1) in the depth, not O(depth)."""
    compiled = _deny_regexes(tuple(patterns))
    name = rel.lower().rsplit("/", 1)[-1]
    if compiled.last is None or not compiled.last.fullmatch(name):
        return False  # no pattern can end at this name (one test, for almost every entry)
    if compiled.single is not None and compiled.single.fullmatch(name):
        return True
    parts = rel.lower().rsplit("/", max((count for count, _ in compiled.multi), default=1))
    return any(count <= len(parts) and regex.fullmatch("/".join(parts[-count:])) for count, regex in compiled.multi)


def deny_match(rel: str, patterns: Sequence[str]) -> str | None:
    """The first deny pattern that matches `rel` (a `/`-separated relative path), or None. A pattern
    without `/` matches any one segment (so a denied folder denies what is inside it); a pattern
    with `/` matches that many consecutive segments. Case-insensitive."""
    if rel in ("", "."):
        return None
    if not _denied_by(rel, tuple(patterns)):
        return None
    return next((p for p in patterns if _denied_by(rel, (p,))), None)  # which one, for the message
