"""What a failing tool output says: its telling lines. One reading, used by masking (the line a
placeholder keeps) and by the summarizer (the error lines a summary keeps verbatim).

(The retention checker in `ctxwin.evaluation.probes` has its own rules on purpose: a summary scored
by the code that wrote it would be scored by itself.)
"""

from __future__ import annotations

import re

from ctxwin.pipeline.cut import clip

ERROR_LINES_PER_FAILURE = 4  # distinct error lines kept from one failing output
DIAGNOSTIC_CHARS = 500  # a longer line is output that mentions an error, not an error message
ERROR_SCAN_CHARS = 16_000  # of a longer failing output, this much at each end is looked at for error lines
ERROR_LINE_CHARS = 300  # an error line is cut here

# Words that mark an error line: strong ones first (an exception name, "error:", "fatal"), then weak
# ones that also occur in ordinary output (a test named "handles invalid input").
# Diagnostics marked with a cross (biome, vitest, cargo's `✗`) are errors too.
_STRONG_ERROR = re.compile(r"\w*(?:Error|Exception)\b|\b(?:errors?|fatal|failed|failures?|panic|traceback)\b|"
                           r"^[×✗✘]\s", re.I)
_WEAK_ERROR = re.compile(
    r"\b(?:cannot|can't|could not|couldn't|not found|no such|denied|invalid|undefined|refused|timed out|unable|"
    r"missing)\b",
    re.I,
)
_GENERIC_ERROR = re.compile(r"^(?:exit code \d+|command exited with code \d+|errors?:?|error output:?)$", re.I)
_EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b")


def error_line(text: str) -> str:
    """The distinctive line of a failure: a Python traceback's exception line, else the first line
    naming an error strongly (an exception name, error, fatal, failed), else weakly (not found,
    invalid, denied ...), else the first line that is not a bare exit code."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    start = text.rfind("Traceback (most recent call last)")
    if start >= 0:
        tail = [line.strip() for line in text[start:].splitlines() if line.strip()]
        exceptions = [line for line in tail if _EXCEPTION_LINE.match(line)]
        return clip(exceptions[-1] if exceptions else tail[-1], ERROR_LINE_CHARS)
    for pattern in (_STRONG_ERROR, _WEAK_ERROR):
        for line in lines:
            if pattern.search(line) and not _GENERIC_ERROR.match(line):
                return clip(line, ERROR_LINE_CHARS)
    for line in lines:
        if not _GENERIC_ERROR.match(line):
            return clip(line, ERROR_LINE_CHARS)
    return clip(lines[0], ERROR_LINE_CHARS)


def error_lines(text: str, limit: int = ERROR_LINES_PER_FAILURE) -> list[str]:
    """The distinctive lines of a failing output, verbatim, in the order they appear, at most
    `limit`: a traceback's exception line, the first line naming an error (strongly or weakly), the
    first and last strong ones (the cause, and the tally at the end), or else the first line that
    is not a bare exit code. Escaped line breaks (`\\n` in serialized errors) split lines."""
    if len(text) > 2 * ERROR_SCAN_CHARS:  # errors are printed first or last; a long middle is output
        text = text[:ERROR_SCAN_CHARS] + "\n" + text[-ERROR_SCAN_CHARS:]
    lines = [line.strip() for line in text.replace("\\n", "\n").splitlines() if line.strip()]
    lines = [line for line in lines if not _GENERIC_ERROR.match(line)]
    if not lines:
        return []
    chosen: list[int] = []
    start = next((i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line), None)
    if start is not None:
        exception = [i for i in range(start, len(lines)) if _EXCEPTION_LINE.match(lines[i])]
        chosen.extend(exception[-1:])
    # A line longer than a diagnostic is a dump (HTML, JSON, minified code) that happens to hold a word.
    strong = [i for i, line in enumerate(lines) if len(line) <= DIAGNOSTIC_CHARS and _STRONG_ERROR.search(line)]
    weak = [i for i, line in enumerate(lines) if len(line) <= DIAGNOSTIC_CHARS and _WEAK_ERROR.search(line)]
    chosen.extend(strong[:1] + weak[:1] + strong[-1:])
    if not chosen:
        chosen.append(0)
    picked = sorted(dict.fromkeys(chosen))[:limit]
    return [clip(lines[i], ERROR_LINE_CHARS) for i in picked]
