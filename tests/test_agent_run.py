"""`ctxwin run` in a real process against the scripted fake: JSON lines, and a resume after SIGKILL that
sends the same bytes the uninterrupted run sent."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent_fake import ScriptedFake, long_task, make_workspace
from ctxwin.cli.run import SUMMARY_KEYS
from ctxwin.messages import Message
from ctxwin.testing import FakeProvider

SRC = Path(__file__).resolve().parents[1] / "src"
WINDOW = 16_000
MAX_OUTPUT = 1_000


def command(fake: FakeProvider, api: str, root: Path, session: Path, *args: str, stream: bool = False) -> list[str]:
    url = fake.anthropic_base_url if api == "anthropic" else fake.openai_base_url
    return [sys.executable, "-m", "ctxwin.cli.main", "run", *args, "--base-url", url, "--api", api,
            "--session", str(session), "--workspace", str(root), "--window", str(WINDOW), "--max-output",
            str(MAX_OUTPUT), "--max-steps", "200", "--api-key", "test-key", "--json",
            "--stream" if stream else "--no-stream"]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC)}


def bodies(fake: FakeProvider) -> list[str]:
    return [json.dumps(r.body) for r in fake.requests]


@pytest.mark.parametrize(("api", "stream"), [("anthropic", False), ("openai", True)])
def test_run_prints_json_events_and_the_totals_last(api: str, stream: bool, tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    with ScriptedFake(long_task(40), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        done = subprocess.run(command(fake, api, root, tmp_path / "s", "Turn 1: read the docs.", stream=stream),
                              env=env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    totals = lines[-1]
    assert set(SUMMARY_KEYS) <= set(totals)
    assert totals["turns"] == 1 and totals["model_calls"] == 41 and totals["window"] == WINDOW
    assert totals["errors"] == [] and totals["stop"] == "done"
    assert 0 < totals["max_request_tokens"] <= WINDOW - MAX_OUTPUT
    assert totals["compactions"] >= 1 and totals["compactions_inside_tool_loops"] >= 1
    kinds = {line["kind"] for line in lines[:-1]}
    assert {"user", "model_call", "assistant", "tool_call", "tool_result", "pipeline", "done"} <= kinds
    assert ("delta" in kinds) is stream
    assert all(r.body.get("stream", False) is stream for r in fake.requests)


@pytest.mark.slow  # three CLI processes, each paying ctxwin's import time
@pytest.mark.parametrize(("api", "stream"), [("anthropic", True), ("openai", False)])
def test_a_run_killed_with_sigkill_resumes_sending_the_same_bytes(api: str, stream: bool, tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws")
    task = "Turn 1: read the docs."
    with ScriptedFake(long_task(40), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        reference = subprocess.run(command(fake, api, root, tmp_path / "reference", task, stream=stream), env=env(),
                                   capture_output=True, text=True, timeout=120)
        expected = bodies(fake)
    assert reference.returncode == 0, reference.stderr

    kill_at = 23  # the 23rd request: the process dies before it gets the answer
    script = long_task(40)
    seen = {"n": 0}
    victim: dict[str, subprocess.Popen[str]] = {}

    def killing(api_name: str, messages: list[Message]) -> Any:
        seen["n"] += 1
        if seen["n"] == kill_at:
            os.kill(victim["proc"].pid, signal.SIGKILL)
            victim["proc"].wait(timeout=10)
        return script(api_name, messages)

    with ScriptedFake(killing, context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        victim["proc"] = subprocess.Popen(command(fake, api, root, tmp_path / "s", task, stream=stream), env=env(),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        victim["proc"].communicate(timeout=120)
        assert victim["proc"].returncode == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while len(fake.requests) < kill_at and time.monotonic() < deadline:
            time.sleep(0.01)  # the server records request 23 once its (unread) answer is built
        assert len(fake.requests) == kill_at
        resumed = subprocess.run(command(fake, api, root, tmp_path / "s", "--resume", stream=stream), env=env(),
                                 capture_output=True, text=True, timeout=120)
        sent = bodies(fake)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout.splitlines()[-1])["stop"] == "done"
    # The answer to request 23 was lost with the process: the resumed process sends it again, byte for byte.
    assert sent[kill_at] == sent[kill_at - 1]
    # And then the rest, every request what the uninterrupted run sent: the same bytes once each session's
    # (random) entry ids are named by their place in its log.
    ours, theirs = entry_names(tmp_path / "s"), entry_names(tmp_path / "reference")
    assert len(ours) == len(theirs)
    assert [rename(b, ours) for b in sent[:kill_at]] == [rename(b, theirs) for b in expected[:kill_at]]
    assert [rename(b, ours) for b in sent[kill_at:]] == [rename(b, theirs) for b in expected[kill_at - 1:]]


def entry_names(session: Path) -> dict[str, str]:
    lines = (session / "session.jsonl").read_text().splitlines()[1:]
    return {json.loads(line)["id"]: f"E{n}" for n, line in enumerate(lines)}


def rename(body: str, names: dict[str, str]) -> str:
    return re.sub(r"entry:([0-9a-f]{8})", lambda m: f"entry:{names.get(m.group(1), m.group(1))}", body)


def test_run_prints_events_for_a_person_and_refuses_bad_input_with_a_message(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ctxwin.cli.main import app

    root = make_workspace(tmp_path / "ws", files=5)
    runner = CliRunner()
    with ScriptedFake(long_task(3, files=5), context_window=WINDOW, max_output=MAX_OUTPUT) as fake:
        done = runner.invoke(app, ["run", "Turn 1: read", "--base-url", fake.openai_base_url, "--api-key", "k",
                                   "--workspace", str(root), "--window", str(WINDOW), "--max-output", str(MAX_OUTPUT),
                                   "--sessions", str(tmp_path / "sessions")])
    assert done.exit_code == 0, done.output
    assert "step 1: calling the model" in done.output and "step 1: Step 1 of turn 1. -> read" in done.output
    assert "done: turns 1, model_calls 4" in done.output.replace("\n", " ")
    for args, message in ((["run", "--base-url", "http://127.0.0.1:9/v1"], "give a TASK, or --resume"),
                          (["run", "x", "--base-url", "http://127.0.0.1:9/v1", "--api", "gemini"], "unknown --api"),
                          (["run", "--resume", "--base-url", "http://127.0.0.1:9/v1"], "--resume needs --session"),
                          (["run", "x", "--base-url", "http://127.0.0.1:9/v1", "--workspace", str(tmp_path / "no")],
                           "is not a folder")):
        bad = runner.invoke(app, args)
        assert bad.exit_code == 2 and message in bad.output and "Traceback" not in bad.output, bad.output
    # A server that is not there: a clear error and exit 1, no traceback.
    gone = runner.invoke(app, ["run", "x", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "k",
                               "--workspace", str(root), "--sessions", str(tmp_path / "sessions")])
    flat = " ".join(gone.output.split())  # (rich wraps long lines)
    assert gone.exit_code == 1 and "did not answer at http://127.0.0.1:9/v1/chat/completions" in flat
    assert "Traceback" not in gone.output
