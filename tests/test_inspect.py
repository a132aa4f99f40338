"""`ctxwin inspect`: the report (library) and the command (through the real CLI)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import TRANSCRIPTS, shared_path
from ctxwin.cli.main import app
from ctxwin.messages import Message
from ctxwin.tokens import counter_for
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.inspect import LARGEST_RESULTS, inspect_transcript

FIXTURES = Path(__file__).parent / "fixtures"
EXAMPLE = Path(__file__).parents[1] / "src" / "ctxwin" / "examples" / "claude-code-session.jsonl"
REQUIRED_KEYS = ("format", "messages", "tool_calls", "tool_results", "tokens", "counter", "tool_output_share",
                 "largest_tool_results", "compactions", "skipped", "warnings", "model")

runner = CliRunner()


def _inspect(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["inspect", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


class _WordCounter:
    """A real, tiny counter (whitespace words): the report must use whatever counter it is given."""

    name = "test:words"
    exact = True

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        return sum(self.count_text(b.text) for b in message.blocks if hasattr(b, "text"))


# --------------------------------------------------------------------------------------------------
# The report


def test_report_of_the_example_session() -> None:
    transcript = load_transcript(EXAMPLE)
    report = inspect_transcript(transcript)
    assert all(key in report for key in REQUIRED_KEYS)
    assert report["format"] == "claude-code"
    assert report["model"] == "claude-sonnet-4-5-20250929"
    assert (report["messages"], report["tool_calls"], report["tool_results"]) == (30, 12, 12)
    assert report["counter"] == counter_for(transcript.model).name
    tokens = report["tokens"]
    counter = counter_for(transcript.model)
    assert tokens["total"] == sum(counter.count_message(m) for m in transcript.messages)
    assert tokens["total"] == sum(tokens["by_role"].values())
    assert sum(tokens["by_tool"].values()) == tokens["by_role"]["tool"]
    assert set(tokens["by_tool"]) == {"Read", "Bash", "Edit", "Grep"}
    assert report["tool_output_share"] == round(tokens["by_role"]["tool"] / tokens["total"], 4)
    assert 0 < report["tool_output_share"] < 1
    largest = report["largest_tool_results"]
    assert len(largest) == LARGEST_RESULTS
    assert [r["tokens"] for r in largest] == sorted((r["tokens"] for r in largest), reverse=True)
    for row in largest:
        message = transcript.messages[row["index"]]
        assert message.role == "tool" and message.tool_results[0].name == row["tool"]
        assert row["tokens"] == counter.count_message(message)
    assert report["compactions"] == []
    assert report["skipped"] == {"progress": 2, "file-history-snapshot": 1, "system:turn_duration": 1}
    assert report["warnings"] == {"count": 0, "first": []}
    assert report["usage"]["model_calls"] == 14
    json.dumps(report)  # JSON-able as it is


def test_report_uses_the_counter_it_is_given() -> None:
    transcript = load_transcript(FIXTURES / "codex_rollout.jsonl")
    report = inspect_transcript(transcript, _WordCounter())
    assert report["counter"] == "test:words" and report["counter_exact"] is True
    words = sum(len(b.text.split()) for m in transcript.messages for b in m.blocks if hasattr(b, "text"))
    assert report["tokens"]["total"] == words
    # A tool message with two results is split into the two, each with its own count.
    assert report["tools"]["exec_command"] == {"calls": 3, "results": 3,
                                               "tokens": report["tokens"]["by_tool"]["exec_command"]}
    indices = [r["index"] for r in report["largest_tool_results"]]
    assert indices.count(4) == 2
    assert report["compactions"] == [{"index": 8, "first_kept_index": 8, "tokens_before": 9851,
                                      "summary_chars": len(transcript.compactions[0].summary), "trigger": None,
                                      "line": 20}]


@pytest.mark.shared
def test_report_of_the_pi_session() -> None:
    report = inspect_transcript(load_transcript(shared_path("pi", "before-compaction.jsonl")))
    assert [c["tokens_before"] for c in report["compactions"]] == [175_004, 185_014]
    assert report["usage"]["peak_context_tokens"] == 184_915
    assert report["tool_results"] == 448
    assert report["tokens"]["by_tool"]["bash"] > 0 and report["tokens"]["by_tool"]["read"] > 0


# --------------------------------------------------------------------------------------------------
# The command


def _shared_files() -> list[str]:
    if not TRANSCRIPTS.is_dir():
        return ["<absent>/<absent>.jsonl"]
    return sorted(str(p.relative_to(TRANSCRIPTS)) for p in TRANSCRIPTS.glob("*/*")
                  if p.suffix in (".jsonl", ".traj") and p.parent.name != "letta-filesystem")


@pytest.mark.shared
@pytest.mark.parametrize("relative", _shared_files())
def test_inspect_json_on_every_shared_session(relative: str) -> None:
    path = shared_path(*relative.split("/"))
    code, stdout, stderr = _inspect(str(path), "--json")
    report = json.loads(stdout)
    assert all(key in report for key in REQUIRED_KEYS)
    assert report["messages"] > 0
    if report["warnings"]["count"]:
        assert code == 3 and stderr.startswith("warning: line ")
    else:
        assert code == 0 and stderr == ""


def test_human_output_is_a_table() -> None:
    code, stdout, stderr = _inspect(str(EXAMPLE))
    assert code == 0 and stderr == ""
    for title in ("by role", "by tool", "largest tool results"):
        assert title in stdout
    assert "claude-code · claude-sonnet-4-5-20250929 · 30 messages" in stdout


def test_human_output_lists_compactions() -> None:
    code, stdout, _ = _inspect(str(FIXTURES / "pi_v3_tree.jsonl"))
    assert code == 0
    assert "recorded compactions" in stdout and "48,211" in stdout


def test_format_option_overrides_detection(tmp_path: Path) -> None:
    code, stdout, _ = _inspect(str(FIXTURES / "pi_v2_tree.jsonl"), "--json", "--format", "pi")
    assert code == 0 and json.loads(stdout)["format"] == "pi"
    code, _, stderr = _inspect(str(FIXTURES / "pi_v2_tree.jsonl"), "--format", "claude-code")
    assert code == 2 and "no conversation found" in stderr
    code, _, stderr = _inspect(str(EXAMPLE), "--format", "aider")
    assert code == 2 and "unknown format 'aider'" in stderr and "claude-code, pi, codex" in stderr


def test_cut_file_prints_the_report_and_warnings_and_exits_3(tmp_path: Path) -> None:
    text = EXAMPLE.read_text()
    path = tmp_path / "cut.jsonl"
    path.write_text(text[:-300])
    code, stdout, stderr = _inspect(str(path), "--json")
    assert code == 3
    report = json.loads(stdout)
    assert report["skipped"]["malformed_json"] == 1 and report["warnings"]["count"] == 1
    line = text[:-300].count("\n") + 1
    assert stderr.startswith(f"warning: line {line}: not valid JSON (the file seems cut off mid-line)")


def test_invalid_utf8_exits_3_with_the_line(tmp_path: Path) -> None:
    data = EXAMPLE.read_bytes().replace(b"fails on CI", b"fails on \xc3\x28 CI", 1)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(data)
    code, stdout, stderr = _inspect(str(path))
    assert code == 3 and "by role" in stdout
    assert stderr.startswith("warning: line 2: invalid UTF-8")


def test_gzipped_file(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl.gz"
    path.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    code, stdout, _ = _inspect(str(path), "--json")
    assert code == 0 and json.loads(stdout)["messages"] == 30


@pytest.mark.parametrize(("name", "content", "message"), [
    ("empty.jsonl", b"", "is empty"),
    ("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00" + bytes(range(256)), "is a binary file"),
    ("notes.txt", b"# notes\n- buy milk\n", "is not JSON or JSONL"),
    ("records.json", json.dumps([{"type": "user", "uuid": "u1", "sessionId": "s", "message": {
        "role": "user", "content": "hi"}}], indent=2).encode(), "claude-code sessions are JSONL"),
    ("other.jsonl", b'{"event": "click", "x": 1}\n{"event": "key"}\n', "is not a known session format"),
])
def test_unusable_input_exits_2_with_a_clear_message(tmp_path: Path, name: str, content: bytes,
                                                     message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    code, stdout, stderr = _inspect(str(path), "--json")
    assert code == 2 and stdout == ""
    assert stderr.startswith("error: ") and message in " ".join(stderr.split())
    assert "Traceback" not in stderr


def test_missing_file_exits_2(tmp_path: Path) -> None:
    code, _, stderr = _inspect(str(tmp_path / "nope.jsonl"))
    assert code == 2 and "no such file" in stderr


def test_the_installed_command_never_shows_a_traceback(tmp_path: Path) -> None:
    """The real entry point, in a subprocess: a binary file, a cut file, then a good one."""
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 8)
    cut = tmp_path / "cut.jsonl"
    cut.write_text(EXAMPLE.read_text()[:-100])
    expected = [(binary, 2), (cut, 3), (EXAMPLE, 0)]
    for path, code in expected:
        done = subprocess.run([sys.executable, "-m", "ctxwin.cli.main", "inspect", str(path), "--json"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == code, done.stderr
        assert "Traceback" not in done.stderr
        if code != 2:
            assert json.loads(done.stdout)["format"] == "claude-code"


def test_help_documents_the_exit_codes() -> None:
    result = runner.invoke(app, ["inspect", "--help"])
    text = " ".join(result.stdout.split())
    assert "0: the file was read cleanly" in text
    assert "2: the file cannot be used" in text
    assert "3: the report was printed, but malformed lines were skipped" in text
