"""`import_transcript` and the `ctxwin import` / `ctxwin sessions` commands, on real transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import shared_path
from ctxwin.cli.main import app
from ctxwin.messages import Message
from ctxwin.store import Session
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.importer import import_transcript

runner = CliRunner()


@pytest.mark.shared
@pytest.mark.parametrize("parts", [("pi", "before-compaction.jsonl"),
                                   ("claude-code", "258c7280-ae70-4798-800f-63464d01a85d.jsonl"),
                                   ("swe-agent", "function_calling_simple.traj")])
def test_import_keeps_every_message_and_compaction(tmp_path: Path, parts: tuple[str, str]) -> None:
    source = shared_path(*parts)
    transcript = load_transcript(source)
    with import_transcript(source, tmp_path) as log:
        folder = log.directory
    with Session.open(folder, readonly=True) as log:
        main = list(log.path())
        messages = [Message.from_dict(e.payload) for e in main if e.kind == "message"]
        assert messages == transcript.messages  # the leaf is the main conversation's last message
        compactions = [e for e in main if e.kind == "compaction"]
        assert len(compactions) == len(transcript.compactions)
        message_ids = [e.id for e in main if e.kind == "message"]
        for entry, record in zip(compactions, transcript.compactions, strict=True):
            assert entry.payload["summary"] == record.summary
            assert entry.payload["tokens_before"] == record.tokens_before
            # it sits right before the first message after the compaction
            position = [e.id for e in main].index(entry.id)
            following = [e for e in main[position + 1:] if e.kind == "message"]
            assert not following or following[0].id == message_ids[record.index]
            kept = record.first_kept_index
            if kept is not None and kept < record.index:
                assert entry.payload["first_kept_id"] == message_ids[kept]
            assert set(entry.payload["covered_ids"]) <= set(message_ids[: record.index])
        side = sum(len(m) for m in transcript.sidechains.values())
        assert log.kind_counts().get("message", 0) == len(transcript.messages) + side
        assert log.kind_counts().get("label", 0) == len(transcript.sidechains)
        meta = log.header["meta"]["import"]
        assert meta["format"] == transcript.format and meta["messages"] == len(transcript.messages)
        if transcript.model:
            assert main[0].kind == "model_change" and main[0].payload["model"] == transcript.model


@pytest.mark.shared
def test_cli_import_and_sessions(tmp_path: Path) -> None:
    source = shared_path("pi", "before-compaction.jsonl")
    root = tmp_path / "sessions"
    result = runner.invoke(app, ["import", str(source), "--into", str(root), "--json"])
    assert result.exit_code == 0, result.output
    imported = json.loads(result.stdout)
    assert imported["kinds"]["compaction"] == 2 and imported["import"]["format"] == "pi"
    assert Path(imported["path"]).parent == root

    again = runner.invoke(app, ["import", str(source), "--into", str(root)])
    assert again.exit_code == 2 and "already holds a session" in again.output

    listed = runner.invoke(app, ["sessions", str(root), "--json"])
    assert listed.exit_code == 0, listed.output
    sessions = json.loads(listed.stdout)["sessions"]
    assert [s["entries"] for s in sessions] == [imported["entries"]]
    assert sessions[0]["last_activity"].startswith("20")

    table = runner.invoke(app, ["sessions", str(root)])
    assert table.exit_code == 0 and "entries" in table.output


def test_cli_errors_are_clear(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["sessions", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no sessions folder" in missing.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text("hello\n")
    result = runner.invoke(app, ["import", str(bad), "--into", str(tmp_path / "s")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())
