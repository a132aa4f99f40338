"""Needles: injection at controlled depths and ages, and the three outcomes (in view, recoverable
through a verified ref, lost)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxwin.errors import InputError
from ctxwin.evaluation.needles import age_bucket, inject, insert, needles
from ctxwin.messages import ToolCall, assistant, tool_result, user
from ctxwin.transcripts.model import Transcript

CALLS = 12


def output(n: int) -> str:
    return "\n".join(f"line {i} of output {n}: some shell text that takes a little room" for i in range(120))


def session() -> Transcript:
    messages = [user("Run the checks one by one and tell me what fails.")]
    for n in range(CALLS):
        messages.append(assistant(f"Step {n}.", ToolCall(f"c{n}", "Bash", {"command": f"./check {n}"})))
        messages.append(tool_result(f"c{n}", output(n)))
    messages.append(assistant("All done."))
    return Transcript("test", messages, model="claude-sonnet-4-5", source="needles-test")


def test_insert_at_each_depth() -> None:
    text = "a\nb\nc\nd"
    assert insert(text, "X", "start") == "X\na\nb\nc\nd"
    assert insert(text, "X", "end") == "a\nb\nc\nd\nX"
    middle = insert(text, "X", "middle")
    assert middle.splitlines()[2] == "X" and middle.replace("X\n", "") == text


def test_age_buckets() -> None:
    assert [age_bucket(a) for a in (1, 2, 4, 5, 99, 100, 250)] == ["1", "2-4", "2-4", "5-9", "50-99", "100-199",
                                                                     "200+"]
    assert age_bucket(3, (5, 10)) == "5-9"  # younger than the first edge: the first bucket


def test_injection_is_deterministic_and_ages_count_calls() -> None:
    transcript = session()
    injected, placed = inject(transcript, ages=(1, 2, 5, 100), depths=("start", "end"))
    again, placed_again = inject(transcript, ages=(1, 2, 5, 100), depths=("start", "end"))
    assert placed == placed_again and injected.messages == again.messages
    # The last output was read by the final assistant call and is in the next view: age 2; the session
    # ends with an assistant message, so age 1 (outputs after it) falls back to the nearest older one.
    assert sorted({n.age for n in placed}) == [2, 3, 5]
    assert {n.target_age for n in placed} == {1, 2, 5}  # 100 calls: longer than the session, skipped
    assert len({n.value for n in placed}) == len(placed)
    for needle in placed:
        message = injected.messages[needle.message_index]
        text = message.tool_results[0].text
        assert needle.line in text
        if needle.depth == "start":
            assert text.startswith(needle.line)
        else:
            assert text.endswith(needle.line)
    assert transcript.messages != injected.messages  # the original is untouched
    assert all(needle.value not in m.text for m in transcript.messages for needle in placed)


def test_outcomes_in_view_recoverable_and_lost(tmp_path: Path) -> None:
    transcript = session()
    mask = tmp_path / "mask.toml"
    mask.write_text('name = "mask"\n[mask]\nenabled = true\nkeep_last = 2\nbatch = 1\nmin_tokens = 0\n')
    result = needles(transcript, ["raw", str(mask), "truncate"], ages=(2, 5, 10), window=30_000)
    grid = result.grid()
    assert grid["raw"]["overall"]["in_view"] == 1.0
    masked = grid[str(mask)]["by_age"]
    assert list(masked) == ["2-4", "5-9", "10+"]  # ages binned at the requested ones
    assert masked["2-4"]["in_view"] == 1.0  # among the last two outputs
    assert masked["10+"]["recoverable"] == 1.0  # masked, and its placeholder's ref returns it byte for byte
    truncated = grid["truncate"]["by_age"]
    assert truncated["10+"]["lost"] == 1.0  # the round was dropped to fit the 9,000-token budget: nothing points at it
    for row in grid.values():
        assert row["overall"]["in_log"] == 1.0  # nothing is lost from the log, whatever the view shows
        for cell in row["by_age"].values():
            assert cell["in_view"] + cell["recoverable"] + cell["lost"] == pytest.approx(1.0)
    data = result.to_dict()
    assert {n["depth"] for n in data["needles"]} == {"start", "middle", "end"}
    assert all(set(n["states"]) == {"raw", str(mask), "truncate"} for n in data["needles"])


def test_recorded_is_refused() -> None:
    with pytest.raises(InputError, match="`recorded` cannot be scored"):
        needles(session(), ["raw", "recorded"])
