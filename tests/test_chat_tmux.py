"""`ctxwin chat` driven in tmux (send-keys, capture-pane) against the scripted fake provider."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_fake import STEP, ScriptedFake, Turn, long_task, make_workspace
from ctxwin.messages import Message

SRC = Path(__file__).resolve().parents[1] / "src"
SLEEP = f"sleep 47.{os.getpid()}"  # a command no one else runs (not even this suite run twice at once): ours
COMMAND = f"{SLEEP} & {SLEEP}; wait"  # a grandchild in the background too: the whole group must go

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def chat_script() -> object:
    long = long_task(6, files=10)

    def script(api: str, messages: list[Message]) -> Turn:
        last = messages[-1]
        if last.role == "tool" and last.tool_results and last.tool_results[-1].call_id == "sl1":
            return Turn(text="Finished after the stop.")
        if last.role == "user" and "sleep please" in last.text:
            return Turn(text="Sleeping on it.", calls=[("sl1", "shell", {"command": COMMAND})])
        if last.role == "tool" or last.text.startswith("Turn ") or STEP.search(last.text):
            return long(api, messages)
        return Turn(text=f"You said: {last.text[:40]}")
    return script


class Tmux:
    def __init__(self, name: str) -> None:
        self.socket = f"ctxwin-test-{os.getpid()}-{name}"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True,
                              timeout=10).stdout

    def screen(self) -> str:
        return self("capture-pane", "-p", "-S", "-400", "-t", "chat")

    def wait_for(self, text: str, timeout: float = 20.0, after: int = 0) -> str:
        """Wait until `text` appears in the pane after the first `after` occurrences."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if screen.count(text) > after:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} did not appear; the screen:\n{self.screen()}")

    def type(self, line: str) -> None:
        self("send-keys", "-t", "chat", "-l", line)
        self("send-keys", "-t", "chat", "Enter")


def sleeping() -> bool:
    found = subprocess.run(["pgrep", "-f", SLEEP], capture_output=True, text=True)
    return bool(found.stdout.strip())


def test_chat_in_tmux(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", files=10)
    tmux = Tmux("chat")
    with ScriptedFake(chat_script(), context_window=16_000, max_output=1_000) as fake:  # type: ignore[arg-type]
        command = [sys.executable, "-m", "ctxwin.cli.main", "chat", "--base-url", fake.openai_base_url, "--api",
                   "openai", "--model", "gpt-4o", "--api-key", "k", "--workspace", str(root), "--sessions",
                   str(tmp_path / "sessions"), "--window", "16000", "--max-output", "1000", "--allow-shell"]
        env = f"PYTHONPATH={SRC} COLUMNS=140 TERM=xterm"
        tmux("new-session", "-d", "-s", "chat", "-x", "140", "-y", "50", f"env {env} {' '.join(command)}")
        try:
            tmux.wait_for("ctxwin chat:")
            tmux.wait_for("Token usage:")
            # A conversation, with the status line after each turn.
            tmux.type("hello there")
            tmux.wait_for("You said: hello there")
            tmux.type("Turn 1: read the docs")
            tmux.wait_for("Turn 1 done after 6 steps.")
            tmux.wait_for("Token usage:", after=2)  # the status line after each turn (printed after the answer)
            # /context: the engine's breakdown.
            tmux.type("/context")
            screen = tmux.wait_for("Free space")
            assert "Tool schemas" in screen and "Tool results" in screen
            # /compact
            tmux.type("/compact")
            screen = tmux.wait_for("compacted:")
            # Ctrl-C in the middle of a tool loop: the step stops, the tool process dies, the session stays.
            tmux.type("sleep please")
            tmux.wait_for("Sleeping on it.")
            deadline = time.monotonic() + 10
            while not sleeping() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sleeping(), "the shell tool never started"
            tmux("send-keys", "-t", "chat", "C-c")
            tmux.wait_for("stopped (Ctrl-C)")
            time.sleep(0.3)
            assert not sleeping(), "Ctrl-C left the tool's process running"
            # /resume continues the stopped turn.
            tmux.type("/resume")
            tmux.wait_for("Finished after the stop.")
            tmux.type("still there?")
            tmux.wait_for("You said: still there?")
            tmux.type("/health")
            # /checkpoint makes a restore point; /rewind goes back to it, what came after kept on its branch.
            tmux.type("/checkpoint before-detour")
            tmux.wait_for("restore point 'before-detour' made")
            tmux.type("a detour")
            tmux.wait_for("You said: a detour")
            tmux.type("/rewind before-detour")
            tmux.wait_for("rewound to 'before-detour'")
            # /summarize asks the agent for its state summary now (Alyx's checkpoint); the model answers it.
            tmux.type("/summarize")
            tmux.wait_for("You said: [ctxwin] The context is at")
            # /new starts a fresh session; the old one stays on disk.
            tmux.type("/new")
            tmux.wait_for("chat-0002 (0 messages)")
            tmux.type("/quit")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and "chat" in tmux("list-sessions", "-F", "#S"):
                time.sleep(0.1)
        except subprocess.CalledProcessError:
            pass  # the session ended (the chat quit): list-sessions fails once the server is gone
        finally:
            subprocess.run(["tmux", "-L", tmux.socket, "kill-server"], capture_output=True, timeout=10)
        requests = fake.requests
    assert all(r.status == 200 for r in requests)
    assert all(r.body.get("stream") is True for r in requests)  # chat streams by default
    assert (tmp_path / "sessions" / "chat-0001" / "session.jsonl").is_file()
    # After /rewind the detour is not in what the model sees (it stays in the log, on its branch).
    assert "a detour" in json.dumps(requests[-2].body) and "a detour" not in json.dumps(requests[-1].body)
    last = requests[-3].body["messages"]
    assert last[-1] == {"role": "user", "content": "still there?"}
    shell = next(m for m in last if m.get("role") == "tool" and m["tool_call_id"] == "sl1")
    assert "SIGKILL" in shell["content"] or "interrupted" in shell["content"]


def start_chat(tmux: Tmux, fake: object, root: Path, sessions: Path, *extra: str) -> None:
    command = [sys.executable, "-m", "ctxwin.cli.main", "chat", "--base-url", fake.openai_base_url,  # type: ignore[attr-defined]
               "--api", "openai", "--model", "gpt-4o", "--api-key", "k", "--workspace", str(root), "--sessions",
               str(sessions), "--window", "16000", "--max-output", "1000", *extra]
    env = f"PYTHONPATH={SRC} COLUMNS=140 TERM=xterm"
    tmux("new-session", "-d", "-s", "chat", "-x", "140", "-y", "50", f"env {env} {' '.join(command)}")


def test_every_slash_command_with_good_and_bad_arguments(tmp_path: Path) -> None:
    """Each command once as meant and once wrongly: a wrong one is a message, and the chat goes on."""
    root = make_workspace(tmp_path / "ws", files=10)
    sessions = tmp_path / "sessions"
    missing = tmp_path / "no" / "such" / "session"
    tmux = Tmux("every")
    with ScriptedFake(chat_script(), context_window=16_000, max_output=1_000) as fake:  # type: ignore[arg-type]
        start_chat(tmux, fake, root, sessions)
        try:
            tmux.wait_for("ctxwin chat:")
            # /help: plain text, the arguments shown, the descriptions in one column.
            tmux.type("/help")
            screen = tmux.wait_for("/quit")
            rows = [line for line in screen.splitlines() if line.startswith("  /")]
            assert any("/compact [focus]" in r for r in rows) and any("/checkpoint [name]" in r for r in rows)
            starts = {len(r) - len(r.split("  ", 2)[-1].lstrip()) for r in rows}
            assert len(starts) == 1, rows  # every description starts in the same column
            # On an empty session: nothing to compact, to rewind to or to resume; each says so.
            tmux.type("/compact")
            screen = tmux.wait_for("not compacted (")
            assert "compaction failed" not in screen
            tmux.type("/rewind")
            tmux.wait_for("no restore points yet: /checkpoint NAME makes one")
            tmux.type("/marks")
            tmux.wait_for("no restore points yet: /checkpoint NAME", after=1)
            tmux.type("/resume")
            tmux.wait_for("nothing to resume")
            tmux.type(f"/resume {missing}")
            tmux.wait_for(f"no session at {missing}")
            tmux.type("/frobnicate now")
            tmux.wait_for("unknown command /frobnicate; /help lists them")
            # Work, then the commands as meant.
            tmux.type("Turn 1: read the docs")
            tmux.wait_for("Turn 1 done after 6 steps.")
            tmux.type("/context")
            screen = tmux.wait_for("Free space")
            context = re.findall(r"Token usage: \S+ / \S+ \((\d+)%\)", screen)
            assert len(set(context[-2:])) == 1, context  # the status line says what /context says
            counts = [int(n) for n in re.findall(r"· (\d+) compactions? ·", screen)]
            tmux.type("/compact the docs")
            tmux.wait_for("compacted: ")
            status = tmux.wait_for(f"· {counts[-1] + 1} compactions ·")  # the manual one counted
            tmux.type("/checkpoint")
            tmux.wait_for("restore point 'checkpoint-1' made")
            tmux.type("/checkpoint checkpoint-1")
            tmux.wait_for("a restore point named 'checkpoint-1' exists")
            tmux.type("/checkpoint before-detour")
            tmux.wait_for("restore point 'before-detour' made")
            tmux.type("/marks")
            tmux.wait_for("checkpoint-1, before-detour")
            tmux.type("a detour")
            tmux.wait_for("You said: a detour")
            tmux.type("/rewind no-such-mark")
            tmux.wait_for("no restore point named 'no-such-mark'")
            tmux.type("/rewind")
            tmux.wait_for("rewound to 'before-detour'")
            tmux.type("/rewind checkpoint-1")
            tmux.wait_for("rewound to 'checkpoint-1'")
            tmux.type("/health")
            tmux.wait_for("Token usage:", after=status.count("Token usage:"))
            tmux.type("/summarize")
            tmux.wait_for("You said: [ctxwin] The context is at")
            first = sessions / "chat-0001"
            tmux.type("/new")
            tmux.wait_for("chat-0002 (0 messages)")
            tmux.type(f"/resume {first}")
            tmux.wait_for(f"session {first} (")
            tmux.type("still here?")
            tmux.wait_for("You said: still here?")
            tmux.type("/quit")
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and "chat" in tmux("list-sessions", "-F", "#S"):
                time.sleep(0.1)
        except subprocess.CalledProcessError:
            pass  # the session ended (the chat quit): list-sessions fails once the server is gone
        finally:
            screen_text = ""
            with contextlib.suppress(subprocess.CalledProcessError):  # the chat quit: no pane left
                screen_text = tmux.screen()
            subprocess.run(["tmux", "-L", tmux.socket, "kill-server"], capture_output=True, timeout=10)
        requests = fake.requests
    assert "Traceback" not in screen_text
    assert not missing.exists() and not missing.parent.exists()  # /resume made nothing at a wrong path
    assert sorted(p.name for p in sessions.iterdir() if p.is_dir()) == ["chat-0001", "chat-0002"]
    assert all(r.status == 200 for r in requests)
    assert json.dumps(requests[-1].body).count("still here?") == 1
