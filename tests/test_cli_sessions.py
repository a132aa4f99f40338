"""ctxwin's own sessions on the command line: every reading command takes the folder `ctxwin run` wrote (or
its session.jsonl, or a copy of it), `ctxwin run` keeps a session by default and says where, and the
commands that only read never create, lock or change anything."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_fake import ScriptedFake, long_task, make_workspace
from ctxwin import ContextEngine, Session
from ctxwin.cli.main import app
from ctxwin.errors import InputError
from ctxwin.transcripts import detect_format, load_transcript

WINDOW = 16_000
MAX_OUTPUT = 1_000
runner = CliRunner()


def cli(*args: str) -> Any:
    return runner.invoke(app, list(args))


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder`: its size and modification time, to see that nothing changed."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session `ctxwin run` wrote by default (no --session) over a long tool loop that compacts."""
    base = tmp_path_factory.mktemp("run")
    root = make_workspace(base / "ws", files=12)
    with ScriptedFake(long_task(30, files=12), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        done = cli("run", "Turn 1: read the docs.", "--base-url", fake.openai_base_url, "--api-key", "k",
                   "--workspace", str(root), "--window", str(WINDOW), "--max-output", str(MAX_OUTPUT),
                   "--sessions", str(base / "sessions"), "--max-steps", "100", "--json")
    assert done.exit_code == 0, done.output
    totals = json.loads(done.stdout.splitlines()[-1])
    folder = Path(totals["session"])
    assert folder == base / "sessions" / "run-0001" and totals["compactions"] >= 1
    return folder


def test_run_keeps_its_session_by_default_and_says_where(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", files=3)
    with ScriptedFake(long_task(2, files=3), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        args = ["run", "Turn 1: read", "--base-url", fake.openai_base_url, "--api-key", "sk-secret-1", "--workspace",
                str(root), "--sessions", str(tmp_path / "sessions"), "--window", str(WINDOW), "--max-output",
                str(MAX_OUTPUT)]
        first, second = cli(*args), cli(*args)
    assert first.exit_code == 0 and second.exit_code == 0, first.output
    for done, name in ((first, "run-0001"), (second, "run-0002")):
        folder = tmp_path / "sessions" / name
        assert f"session {folder}\n" in done.output and f"the session is in {folder}: ctxwin inspect" in done.output
        assert (folder / "session.jsonl").is_file()
    header = json.loads((tmp_path / "sessions" / "run-0001" / "session.jsonl").read_text().splitlines()[0])
    assert header["meta"]["model"] == "gpt-4o" and header["meta"]["api"] == "openai"
    assert set(header["meta"]) == {"model", "api", "window", "policy", "workspace"}  # never the key or the URL
    assert "sk-secret-1" not in (tmp_path / "sessions" / "run-0001" / "session.jsonl").read_text()


def test_a_bad_argument_makes_no_session_folder(tmp_path: Path) -> None:
    done = cli("run", "x", "--base-url", "http://127.0.0.1:9/v1", "--api", "gemini", "--sessions",
               str(tmp_path / "sessions"))
    assert done.exit_code == 2 and not (tmp_path / "sessions").exists()
    done = cli("run", "x", "--base-url", "http://127.0.0.1:9/v1", "--max-steps", "0", "--sessions",
               str(tmp_path / "sessions"))
    assert done.exit_code == 2 and "Traceback" not in done.output and "--max-steps" in done.output
    assert not (tmp_path / "sessions").exists()


def test_the_folder_its_log_and_a_copy_read_as_the_same_ctxwin_transcript(run_session: Path, tmp_path: Path) -> None:
    with Session.open(run_session, readonly=True) as log:
        engine = ContextEngine(log)
        logged = [m.text for m in engine.messages]
        compactions = [e for e in log.path() if e.kind == "compaction"]
    folder = load_transcript(run_session)
    assert folder.format == "ctxwin" and [m.text for m in folder.messages] == logged
    assert folder.model == "gpt-4o" and len(folder.compactions) == len(compactions) >= 1
    first = folder.compactions[0]
    assert 0 < first.index <= len(logged) and first.first_kept_index is not None and first.summary
    assert first.tokens_before == compactions[0].payload["tokens_before"]
    log_file = load_transcript(run_session / "session.jsonl")
    copy = tmp_path / "copy.jsonl.gz"
    copy.write_bytes(gzip.compress((run_session / "session.jsonl").read_bytes()))
    assert detect_format(copy) == "ctxwin"
    copied = load_transcript(copy)
    for other in (log_file, copied, load_transcript(run_session, format="ctxwin")):
        assert [m.text for m in other.messages] == logged
        assert [c.index for c in other.compactions] == [c.index for c in folder.compactions]


@pytest.mark.parametrize("target", ["folder", "log"])
def test_every_reading_command_takes_a_ctxwin_session(run_session: Path, tmp_path: Path, target: str) -> None:
    path = str(run_session if target == "folder" else run_session / "session.jsonl")
    before = files_of(run_session)
    inspect = cli("inspect", path, "--json")
    assert inspect.exit_code == 0, inspect.output
    report = json.loads(inspect.stdout)
    assert report["format"] == "ctxwin" and report["model"] == "gpt-4o" and report["compactions"]
    assert cli("inspect", path, "--format", "ctxwin").exit_code == 0
    health = cli("health", path, "--json")
    assert health.exit_code == 0 and json.loads(health.stdout)["context_window"] > 0
    replay = cli("replay", path, "--compare", "pi,raw", "--json", "--quiet")
    assert replay.exit_code == 0, replay.output
    data = json.loads(replay.stdout)
    assert data["model"] == "gpt-4o" and set(data["policies"]) == {"ctxwin", "pi", "raw"}
    assert data["policies"]["raw"]["calls"] == report["usage"]["model_calls"] if report["usage"] else True
    retention = cli("eval", "retention", path, "--policy", "ctxwin", "--json", "--quiet")
    assert retention.exit_code == 0, retention.output
    assert json.loads(retention.stdout)["sessions"]
    html = tmp_path / "r.html"
    made = cli("report", path, "-o", str(html), "--policy", "ctxwin,raw", "--no-retention", "--quiet")
    assert made.exit_code == 0 and html.stat().st_size > 0, made.output
    assert files_of(run_session) == before  # read-only: nothing created, rewritten or locked


def test_a_folder_that_is_not_a_session_is_refused_and_left_alone(tmp_path: Path) -> None:
    empty = tmp_path / "plain"
    empty.mkdir()
    (empty / "notes.txt").write_text("hello\n")
    for args in (["inspect", str(empty)], ["health", str(empty)], ["replay", str(empty)],
                 ["eval", "retention", str(empty)], ["report", str(empty), "-o", str(tmp_path / "r.html")],
                 ["session", "marks", str(empty)], ["session", "rewind", str(empty), "x"],
                 ["session", "mark", str(empty), "x"]):
        done = cli(*args)
        assert done.exit_code == 2, (args, done.output)
        assert "Traceback" not in done.output and ("not a ctxwin session" in done.output or
                                                   "no session at" in done.output), done.output
    assert sorted(p.name for p in empty.iterdir()) == ["notes.txt"]
    missing = tmp_path / "missing"
    assert cli("session", "mark", str(missing), "x").exit_code == 2 and not missing.exists()
    assert cli("session", "marks", str(missing)).exit_code == 2 and not missing.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_marks_of_a_session_in_a_read_only_folder(run_session: Path, tmp_path: Path) -> None:
    copy = tmp_path / "ro"
    shutil.copytree(run_session, copy)
    copy.chmod(0o555)
    try:
        assert cli("session", "marks", str(copy)).exit_code == 0
    finally:
        copy.chmod(0o755)


def test_marks_reads_a_session_a_writer_holds_open(run_session: Path, tmp_path: Path) -> None:
    copy = tmp_path / "live"
    shutil.copytree(run_session, copy)
    with Session.open(copy) as writer:  # holds the writer's lock
        ContextEngine(writer).mark("before")
        listed = cli("session", "marks", str(copy), "--json")
        assert listed.exit_code == 0, listed.output
        assert [m["mark"] for m in json.loads(listed.stdout)["marks"]] == ["before"]
        refused = cli("session", "mark", str(copy), "other")  # a second writer is refused, with the reason
        assert refused.exit_code == 1 and "already open for writing" in refused.output


def test_restore_point_names_are_shown_not_obeyed(run_session: Path, tmp_path: Path) -> None:
    copy = tmp_path / "names"
    shutil.copytree(run_session, copy)
    name = "evil\x1b]0;owned\x07\x1b[31m[bold]red"
    assert cli("session", "mark", str(copy), name).exit_code == 0
    for done in (cli("session", "marks", str(copy)), cli("session", "rewind", str(copy), "nope")):
        assert "\x1b" not in done.output and "\x07" not in done.output
        assert "evil\\x1b]0;owned\\x07\\x1b[31m[bold]red" in done.output
    assert json.loads(cli("session", "marks", str(copy), "--json").stdout)["marks"][0]["mark"] == name


def test_a_damaged_ctxwin_session_is_read_with_its_damage_reported(run_session: Path, tmp_path: Path) -> None:
    copy = tmp_path / "damaged"
    shutil.copytree(run_session, copy)
    lines = (copy / "session.jsonl").read_text().splitlines(keepends=True)
    lines.insert(3, '{"id": "broken", "parent_id": \n')
    (copy / "session.jsonl").write_text("".join(lines))
    for path in (copy, copy / "session.jsonl"):
        done = cli("inspect", str(path), "--json")
        assert done.exit_code == 3, done.output
        assert json.loads(done.stdout)["read"]["damaged_files"] == 1
    lone = tmp_path / "renamed.jsonl"
    lone.write_text("".join(lines))
    done = cli("inspect", str(lone), "--json")
    assert done.exit_code == 3 and "line 4" in done.stderr


def test_load_transcript_refuses_an_empty_session(tmp_path: Path) -> None:
    Session.open(tmp_path / "new").close()
    with pytest.raises(InputError, match="no conversation found"):
        load_transcript(tmp_path / "new")


def test_run_stops_at_its_cost_limit_and_says_so(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", files=6)
    with ScriptedFake(long_task(30, files=6), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        done = cli("run", "Turn 1: read the docs.", "--base-url", fake.openai_base_url, "--api-key", "k",
                   "--workspace", str(root), "--window", str(WINDOW), "--max-output", str(MAX_OUTPUT),
                   "--sessions", str(tmp_path / "sessions"), "--max-cost-usd", "0.05", "--price", "3,15", "--json")
    assert done.exit_code == 0, done.output
    totals = json.loads(done.stdout.splitlines()[-1])
    assert totals["stop"] == "max_cost" and totals["cost_usd"] >= 0.05
    largest_call = (WINDOW * 3.0 + MAX_OUTPUT * 15.0) / 1e6  # it checks before each call: over by one at most
    assert totals["cost_usd"] <= 0.05 + largest_call and totals["model_calls"] < 30


@pytest.mark.parametrize("args, said", [
    (["--max-cost-usd", "1"], "--max-cost-usd needs --price"),
    (["--price", "3"], "is not two prices"), (["--price", "a,b"], "is not two prices"),
    (["--price", "3,-1"], "is not two prices"), (["--max-cost-usd", "-1", "--price", "3,15"], "--max-cost-usd"),
    (["--max-cost-usd", "nan", "--price", "3,15"], "--max-cost-usd"),
])
def test_a_bad_cost_limit_or_price_is_refused_before_anything_runs(tmp_path: Path, args: list[str], said: str) -> None:
    done = cli("run", "x", "--base-url", "http://127.0.0.1:9/v1", "--sessions", str(tmp_path / "sessions"), *args)
    assert done.exit_code == 2 and said in done.output and "Traceback" not in done.output, done.output
    assert not (tmp_path / "sessions").exists()
