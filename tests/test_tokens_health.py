"""The usage breakdown (library) and `ctxwin health` (through the real CLI)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import shared_path
from ctxwin.cli.main import app
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.tokens import CATEGORIES, PRESSURE_LEVELS, EstimatorCounter, model_info, usage_breakdown
from ctxwin.tokens.breakdown import COMPACT_SHARE, SYSTEM_MESSAGE_TOKENS, WARN_SHARE, pressure_level, short_tokens
from ctxwin.transcripts.health import health

EXAMPLE = Path(__file__).parents[1] / "src" / "ctxwin" / "examples" / "claude-code-session.jsonl"
HEADLINE = re.compile(r"^Token usage: \d+(\.\d)?[KM]? / \d+(\.\d)?[KM]? \(\d+%\)")

runner = CliRunner()


def _session() -> list[Message]:
    memory = Message("user", (Text("<system-reminder>\nContents of /repo/CLAUDE.md:\nUse uv. Run ruff.\n"
                                   "</system-reminder>"),))
    return [
        memory,
        Message("user", (Text("Fix the failing test in tests/test_api.py"),)),
        Message("assistant", (Text("Reading it."), ToolCall("c1", "Read", {"file_path": "tests/test_api.py"}))),
        Message("tool", (ToolResult("c1", (Text("def test_api():\n    assert call() == 200\n" * 40),)),)),
        Message("assistant", (Text("The call returns 404; the route is misspelled."),)),
    ]


def test_breakdown_counts_every_category() -> None:
    counter = EstimatorCounter("claude")
    messages = _session()
    tools = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}]
    b = usage_breakdown(messages, model="claude-sonnet-4-5", counter=counter, system_prompt="You are an agent.",
                        tools=tools, memory={"AGENTS.md": "Be brief."}, summary="Earlier: set up the repo.")
    assert tuple(c.name for c in b.categories) == CATEGORIES
    assert b.tokens("system_prompt") == SYSTEM_MESSAGE_TOKENS + counter.count_text("You are an agent.")
    assert b.tokens("tool_schemas") == counter.count_text(json.dumps(tools, ensure_ascii=False, sort_keys=True))
    assert b.tokens("memory_files") == counter.count_text("Be brief.") + counter.count_message(messages[0])
    assert b.tokens("summary") == SYSTEM_MESSAGE_TOKENS + counter.count_text("Earlier: set up the repo.")
    assert b.tokens("tool_results") == counter.count_message(messages[3])
    assert b.tokens("messages") == sum(counter.count_message(m) for m in messages[1:3] + messages[4:])
    assert b.used == sum(c.tokens for c in b.categories[:6])
    assert b.reserved_output == min(model_info("claude-sonnet-4-5").max_output, 32_000)
    assert b.used + b.reserved_output + b.free == b.context_window == 200_000
    assert sum(c.percent for c in b.categories) == pytest.approx(100.0)
    assert b.pressure == "ok" and b.counter == "estimate:claude" and not b.exact


def test_pressure_levels() -> None:
    window, reserved = 200_000, 20_000
    usable = window - reserved
    assert pressure_level(0, window, reserved) == "ok"
    assert pressure_level(int(WARN_SHARE * usable) - 1, window, reserved) == "ok"
    assert pressure_level(int(WARN_SHARE * usable), window, reserved) == "warn"
    assert pressure_level(int(COMPACT_SHARE * usable), window, reserved) == "compact_due"
    assert pressure_level(usable, window, reserved) == "compact_due"
    assert pressure_level(usable + 1, window, reserved) == "over"
    assert set(PRESSURE_LEVELS) == {"ok", "warn", "compact_due", "over"}


def test_a_full_context_is_over_with_no_free_space() -> None:
    big = Message("tool", (ToolResult("c", (Text("0123456789abcdef " * 40_000),)),))
    b = usage_breakdown([big], model="gpt-4o")
    assert b.counter == "tiktoken:o200k_base" and b.exact
    assert b.pressure == "over" and b.free == 0 and b.percent_used > 100
    assert "compact" in b.suggestion


def test_short_tokens() -> None:
    assert [short_tokens(n) for n in (950, 1_000, 1_500, 12_345, 180_000, 1_000_000, 2_500_000)] == \
        ["950", "1K", "1.5K", "12K", "180K", "1M", "2.5M"]


def test_health_of_a_session_with_a_compaction() -> None:
    report = health(str(shared_path("pi", "before-compaction.jsonl")))
    data = report.to_dict()
    assert report.compaction and report.compaction["index"] > 0
    assert report.view_messages < report.total_messages
    assert data["categories"]["summary"]["tokens"] > 0 and data["calibration"]["pairs"] >= 3
    # what the session would send next is within 25 % of the last recorded context plus what came after it
    assert 0.9 * report.recorded_context < data["used"] < 1.5 * report.recorded_context


def _health(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["health", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("path", [EXAMPLE, "claude-code/tool_heavy.jsonl"], ids=["example", "shared"])
def test_cli_human_output_leads_with_usage_and_a_suggestion(path: Path | str) -> None:
    file = path if isinstance(path, Path) else shared_path(*path.split("/"))
    code, out, _ = _health(str(file))
    lines = out.splitlines()
    assert code == 0
    assert HEADLINE.match(lines[0]), lines[0]
    assert lines[0].rstrip().endswith(("ok", "warn", "compact due", "over"))
    assert lines[1].startswith("Suggestion: ")
    for label in ("System prompt", "Tool schemas", "Memory files", "Summary", "Messages", "Tool results",
                  "Reserved output", "Free space"):
        assert label in out


@pytest.mark.parametrize("path", [EXAMPLE, "claude-code/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"],
                         ids=["example", "shared"])
def test_cli_json_is_the_breakdown(path: Path | str) -> None:
    file = path if isinstance(path, Path) else shared_path(*path.split("/"))
    code, out, _ = _health(str(file), "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data["categories"]) == set(CATEGORIES)
    for category in data["categories"].values():
        assert isinstance(category["tokens"], int) and isinstance(category["percent"], float)
    assert data["pressure"] in PRESSURE_LEVELS
    assert data["used"] == sum(data["categories"][c]["tokens"] for c in CATEGORIES[:6])
    assert data["used"] + data["reserved_output"] + data["free"] >= data["context_window"]
    read = data.pop("read")
    assert read["damaged_files"] == 0 and read["warnings"] == 0  # the read report every session command adds
    assert data == health(str(file)).to_dict()  # the command prints the library's result


def test_cli_model_option_changes_the_counter_and_the_window() -> None:
    code, out, _ = _health(str(EXAMPLE), "--json", "--model", "gpt-4o")
    data = json.loads(out)
    assert code == 0 and data["counter"] == "tiktoken:o200k_base" and data["exact"]
    assert data["context_window"] == 128_000 and data["model"] == "gpt-4o"


def test_cli_unknown_model_warns_and_still_reports() -> None:
    code, out, err = _health(str(EXAMPLE), "--model", "acme-brain-9")
    assert code == 0 and HEADLINE.match(out.splitlines()[0])
    assert "unknown model 'acme-brain-9'" in err


def test_cli_bad_input_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    code, out, err = _health(str(tmp_path / "missing.jsonl"))
    assert code != 0 and "error:" in err and "Traceback" not in out + err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = _health(str(empty))
    assert code != 0 and "error:" in err
