"""The command line as a user meets it (issue 28): help, --version, tables at 80 and 110 columns, the
messages of bad input, and the small things each command says."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import ctxwin
from ctxwin.cli.main import COMMANDS, app
from ctxwin.cli.memory import parse_day
from ctxwin.errors import InputError

SRC = Path(__file__).resolve().parents[1] / "src"
EXAMPLE = SRC / "ctxwin" / "examples" / "claude-code-session.jsonl"
runner = CliRunner()
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # styles (bold, dim) that NO_COLOR still leaves


def cli(*args: str) -> Any:
    return runner.invoke(app, list(args))


def command_paths() -> list[list[str]]:
    """Every command and sub-command, as the words that name it."""
    root = typer.main.get_command(app)
    paths: list[list[str]] = []

    def walk(command: Any, words: list[str]) -> None:
        paths.append(words)
        for name in getattr(command, "commands", {}) or {}:
            walk(command.commands[name], [*words, name])

    for name in COMMANDS:
        walk(root.get_command(None, name), [name])
    return paths


def run(*args: str, columns: int = 80, terminal: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": str(columns), "NO_COLOR": "1"}
    env.pop("TTY_COMPATIBLE", None)
    if terminal:
        env["TTY_COMPATIBLE"] = "1"  # rich treats the pipe as a terminal of COLUMNS columns
    return subprocess.run([sys.executable, "-m", "ctxwin.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=cwd)


def test_every_help_lists_its_options_without_type_noise() -> None:
    paths = command_paths()
    assert len(paths) >= len(COMMANDS) + 6  # eval, session and memory have sub-commands
    for words in [[], *paths]:
        done = cli(*words, "--help")
        assert done.exit_code == 0, (words, done.output)
        assert "<bool>" not in done.output and "Traceback" not in done.output, (words, done.output)
        assert "--help" in done.output


def test_the_root_summaries_are_the_commands_own() -> None:
    root = typer.main.get_command(app)
    for name, entry in COMMANDS.items():
        command = root.get_command(None, name)
        assert command is not None, name
        assert command.get_short_help_str(limit=10_000) == entry.summary, name
    listing = cli("--help").output
    assert all(name in listing for name in COMMANDS)


def test_version() -> None:
    done = cli("--version")
    assert done.exit_code == 0 and done.output == f"ctxwin {ctxwin.__version__}\n"


def test_tool_help_lists_the_tools_own_options() -> None:
    read = cli("tool", "read", "--help")
    assert read.exit_code == 0, read.output
    assert "Usage: ctxwin tool read PATH [OPTIONS]" in read.output
    for option in ("--offset <integer>", "--limit <integer>", "--column <integer>", "--pages <string>", "--root DIR"):
        assert option in read.output
    grep = cli("tool", "grep", "--help").output
    assert "PATTERN" in grep and "--ignore-case" in grep and "--ignore-case <" not in grep
    general = cli("tool", "--help")
    assert general.exit_code == 0 and "ctxwin tool read --help" in general.output
    assert cli("tool", "nope", "--help").exit_code == 2
    assert cli("tool").exit_code == 2


@pytest.mark.parametrize("columns", [80, 110])
@pytest.mark.parametrize("terminal", [False, True])
def test_tables_are_never_cut(columns: int, terminal: bool) -> None:
    replay = run("replay", str(EXAMPLE), "--compare", "ctxwin:conservative,pi:aggressive,claude-code,raw",
                 "--quiet", columns=columns, terminal=terminal)
    assert replay.returncode == 0, replay.stderr
    assert "…" not in replay.stdout
    for header in ("cumulative", "compactions", "prefix kept", "uncached $", "over budget", "ctxwin:conservative"):
        assert header in replay.stdout
    widths = {len(ANSI.sub("", line)) for line in replay.stdout.splitlines()}
    if terminal:
        assert max(widths) <= columns  # in a terminal: parts that fit, each with the policy column
        assert replay.stdout.count("ctxwin:conservative") >= 2
    retention = run("eval", "retention", str(EXAMPLE), "--policy", "ctxwin,pi", "--quiet", columns=columns,
                    terminal=terminal)
    assert retention.returncode == 0, retention.stderr
    assert "…" not in retention.stdout and "modified" in retention.stdout


def test_replay_says_when_the_session_names_no_model(tmp_path: Path) -> None:
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant",
                                                                                 "content": "hello"}]}))
    done = cli("replay", str(chat), "--quiet")
    assert done.exit_code == 0, done.output
    assert "model None" not in done.output and "model not recorded" in done.output


def test_search_of_a_file_without_times_shows_none(tmp_path: Path) -> None:
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"role": "user", "content": "where is the staging port"}\n'
                    '{"role": "assistant", "content": "the staging port is 8443"}\n')
    done = cli("search", str(chat), "staging port", "--json")
    assert done.exit_code == 0, done.output
    hits = json.loads(done.stdout)["results"]
    assert hits and all(h["timestamp"] is None for h in hits)
    assert "1970" not in cli("search", str(chat), "staging port").output


def test_since_and_until_take_relative_days_and_name_the_flag(tmp_path: Path) -> None:
    from datetime import date

    today = date(2026, 3, 10)
    assert parse_day("yesterday", "--since", today) == "2026-03-09"
    assert parse_day("today", "--since", today) == "2026-03-10"
    assert parse_day("7d", "--since", today) == "2026-03-03"
    assert parse_day("2026-01-02", "--since", today) == "2026-01-02"
    assert parse_day("2026-01-02T10:00:00Z", "--until", today) == "2026-01-02T10:00:00Z"
    with pytest.raises(InputError, match="--until 'soon' is not a date"):
        parse_day("soon", "--until", today)
    done = cli("search", str(EXAMPLE), "test", "--since", "yesterday")
    assert done.exit_code == 0, done.output
    bad = cli("search", str(EXAMPLE), "test", "--since", "last week")
    assert bad.exit_code == 2 and "--since 'last week' is not a date" in bad.output
    assert "start_date" not in bad.output


def test_bad_json_is_said_once(tmp_path: Path) -> None:
    config = tmp_path / "openclaw.json"
    config.write_text('{"compaction": {"mode": "safeguard",}')
    done = cli("policies", "--from-openclaw", str(config))
    assert done.exit_code == 2
    assert done.output.count("not valid JSON") == 1 and "Traceback" not in done.output


def test_an_unknown_embedder_is_a_bad_argument(tmp_path: Path) -> None:
    for args in (["memory", "index", "--workspace", str(tmp_path), "--embedder", "bogus"],
                 ["memory", "search", "x", "--workspace", str(tmp_path), "--embedder", "openai:"]):
        done = cli(*args)
        assert done.exit_code == 2 and "embedder" in done.output, done.output


def test_compact_says_why_and_how_big_when_nothing_is_compacted() -> None:
    done = cli("compact", str(EXAMPLE), "--window", "1000000")
    assert done.exit_code == 0, done.output
    flat = " ".join(done.output.split())
    assert flat.startswith("Nothing compacted (ctxwin): the view is ") and "-token window" in flat
    assert "messages; nothing to compact" in flat


def test_policies_names_the_levels() -> None:
    done = cli("policies")
    flat = " ".join(done.output.split())
    assert done.exit_code == 0 and "NAME:aggressive" in flat and "pi:aggressive" in flat
    assert json.loads(cli("policies", "--json").stdout)["levels"] == ["aggressive", "balanced", "conservative"]
    shown = cli("policies", "--show", "pi:aggressive")
    assert shown.exit_code == 0 and 'name = "pi:aggressive"' in shown.output


def test_an_openclaw_level_keeps_the_values_the_config_gives(tmp_path: Path) -> None:
    config = tmp_path / "openclaw.json"
    config.write_text(json.dumps({"strategy": "aggressive", "agents": {"defaults": {"compaction": {
        "mode": "safeguard", "reserveTokensFloor": 24000}}}}))
    done = cli("policies", "--from-openclaw", str(config), "--json")
    assert done.exit_code == 0, done.output
    policy = json.loads(done.stdout)["policy"]
    assert policy["compaction"]["reserve_tokens"] == 24000  # as written, not doubled by the level
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"agents": {"defaults": {"compaction": {"mode": "safeguard"}}}}))
    base = json.loads(cli("policies", "--from-openclaw", str(plain), "--json").stdout)["policy"]
    assert policy["compaction"]["keep_recent_tokens"] == base["compaction"]["keep_recent_tokens"] // 2  # level moved
    assert policy["name"] == "openclaw-import:aggressive"


class StallingServer:
    """An HTTP server on 127.0.0.1 that answers with headers and one byte of body, then sends nothing."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.recv(65_536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 500\r\n\r\n{")
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def test_a_server_that_stalls_after_its_headers_is_given_up_on(tmp_path: Path) -> None:
    server = StallingServer()
    try:
        done = run("run", "hello", "--base-url", f"http://127.0.0.1:{server.port}/v1", "--api-key", "k",
                   "--timeout", "1", "--sessions", str(tmp_path / "s"), "--workspace", str(tmp_path), cwd=tmp_path)
    finally:
        server.close()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "timed out" in " ".join(done.stdout.split()) and "Traceback" not in done.stdout + done.stderr
    assert server.connections == 1  # a read that timed out is not sent again
    help_text = cli("run", "--help").output
    assert "--timeout" in help_text and "[default: 60.0" in help_text


def test_describe_says_what_an_interrupt_did() -> None:
    from ctxwin.agent.events import loop_event
    from ctxwin.cli.run import describe

    line = describe(loop_event("interrupted", 1, 3, None))
    assert line is not None and line.strip() != "interrupted:" and "Ctrl-C" in line


def test_a_damage_warning_survives_being_passed_on_as_its_args() -> None:
    """pytest-xdist (and pickle) rebuild a warning from its args: the README's `pytest -n auto` crashed a
    worker on every DamagedInputWarning a test let through."""
    import pickle

    from ctxwin.transcripts.model import DamagedInputWarning, ReadReport

    warning = DamagedInputWarning(ReadReport("s.jsonl", "pi", 3, {"malformed_json": 1}, {}, ["line 2: bad"]))
    rebuilt = DamagedInputWarning(*warning.args)
    assert str(rebuilt) == str(warning) and rebuilt.report is None and warning.report is not None
    assert str(pickle.loads(pickle.dumps(warning))) == str(warning)
