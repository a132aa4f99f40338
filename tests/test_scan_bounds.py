"""One huge text costs bounded work per compaction: the identifier scan, the shell parser and the
decision finder read the ends of a text of megabytes, not all of it. Asserted as characters handed to
the scanners, never as wall time; and a text under the caps is scanned exactly as before."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwin.compaction import identifiers
from ctxwin.compaction.extractive import notes
from ctxwin.compaction.identifiers import (
    MAX_SHELL_SEGMENT_CHARS,
    TEXT_SCAN_CHARS,
    extract_identifiers,
    message_identifiers,
    scan_window,
    shell_file_ops,
)
from ctxwin.messages import assistant, user

HUGE_CHARS = 4_000_000
WINDOW_CHARS = 2 * TEXT_SCAN_CHARS + 1  # the two ends and the line break between them
HEAD_ID = "6f1c2e9a-0b3d-4c5e-8f70-9a1b2c3d4e5f"
MIDDLE_ID = "/srv/middle/lost_module.py"
TAIL_ID = "/srv/app/tail_module.py"


def _huge(head: str, middle: str, tail: str) -> str:
    filler = "word " * ((HUGE_CHARS - len(head) - len(middle) - len(tail)) // 10)
    return f"{head}\n{filler}\n{middle}\n{filler}\n{tail}"


class _Recording:
    """A compiled pattern that records how many characters each call was given."""

    def __init__(self, pattern: re.Pattern[str], seen: list[int]) -> None:
        self.pattern, self.seen = pattern, seen

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.pattern, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.seen.append(max((len(a) for a in args if isinstance(a, str)), default=0))
            return method(*args, **kwargs)

        return recorded


def test_a_huge_user_message_is_scanned_at_its_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    finder_chars: list[int] = []
    kebab_chars: list[int] = []
    real_call = identifiers._Finder.__call__

    def counting(self: identifiers._Finder, text: str, out: list[str]) -> str:
        finder_chars.append(len(text))
        return real_call(self, text, out)

    monkeypatch.setattr(identifiers._Finder, "__call__", counting)
    monkeypatch.setattr(identifiers, "_KEBAB", _Recording(identifiers._KEBAB, kebab_chars))
    message = user(_huge(f"Run {HEAD_ID} first.", f"then {MIDDLE_ID}", f"and fix {TAIL_ID}"))
    assert len(message.text) >= HUGE_CHARS * 0.99

    tokens, _ = message_identifiers(message)

    found = [t for t, _ in tokens]
    assert HEAD_ID in found and TAIL_ID in found
    assert MIDDLE_ID not in found  # the middle of a multi-megabyte paste is the price of the bound
    assert finder_chars and max(finder_chars) <= WINDOW_CHARS
    assert sum(finder_chars) <= 16 * WINDOW_CHARS  # every pass, not one per character of the message
    assert kebab_chars and max(kebab_chars) <= WINDOW_CHARS


def test_a_huge_assistant_text_is_scanned_at_its_ends() -> None:
    text = _huge(f"Wrote {TAIL_ID.replace('tail', 'head')}.", MIDDLE_ID, f"Next: {TAIL_ID}")
    found = extract_identifiers([assistant(text)])
    assert TAIL_ID.replace("tail", "head") in found and TAIL_ID in found and MIDDLE_ID not in found


@given(st.text(alphabet=st.sampled_from("ab /.-_#`:1\n\\n"), max_size=300))
def test_a_text_under_the_cap_is_scanned_whole(text: str) -> None:
    assert scan_window(text) is text  # the same object: identical results for every normal message


def test_the_window_cuts_no_word_in_half() -> None:
    cut_word = "x" * 50  # straddles the end of the head
    text = "a " * ((TEXT_SCAN_CHARS - 25) // 2) + cut_word + " " + "b " * TEXT_SCAN_CHARS + "end"
    window = scan_window(text)
    head, tail = window.split("\n")
    assert len(window) <= WINDOW_CHARS
    assert not head.endswith("x") and cut_word not in window
    assert text.startswith(head) and text.endswith(tail) and tail.startswith("b ")


def test_a_word_longer_than_an_identifier_is_cut_where_the_cap_falls() -> None:
    text = "y" * (3 * TEXT_SCAN_CHARS)
    assert scan_window(text) == "y" * TEXT_SCAN_CHARS + "\n" + "y" * TEXT_SCAN_CHARS


def test_the_shell_parser_skips_a_huge_piece_and_reads_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    given_chars: list[int] = []
    real_split = shlex.split

    def counting(text: str, *args: Any, **kwargs: Any) -> list[str]:
        given_chars.append(len(text))
        return real_split(text, *args, **kwargs)

    monkeypatch.setattr(identifiers.shlex, "split", counting)
    body = "payload " * 125_000  # 1 MB in one quoted argument: shlex took 20 s on it
    reads, writes = shell_file_ops(f"cat src/a.py && echo '{body}' > big.txt && sed -i s/a/b/ src/b.py")
    assert reads == ["src/a.py"] and writes == ["src/b.py"]  # big.txt is the price of the bound
    assert max(given_chars) <= MAX_SHELL_SEGMENT_CHARS


def test_decisions_of_a_huge_text_read_its_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    fence_chars: list[int] = []
    monkeypatch.setattr(notes, "_CODE_FENCE", _Recording(notes._CODE_FENCE, fence_chars))
    first = "We decided to use sqlite because it ships with Python."
    last = "I will use the head and tail instead of the whole text."
    found = notes.decisions([assistant(_huge(first, "We chose the middle because it is lost.", last))])
    assert found[0] == first and found[-1] == last and len(found) == 2
    assert max(fence_chars) <= WINDOW_CHARS
