"""Where sleep-time consolidation runs by itself: the agent loop (idle), `ctxwin chat --consolidate`
(after the session) and the proxy (idle), each over real HTTP to the scripted fake provider; off by
default in all three."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from typer.testing import CliRunner

from ctxwin.agent import AgentConfig, HttpModel, create_agent
from ctxwin.cli.main import app
from ctxwin.memory.consolidate import SleepConfig
from ctxwin.providers.openai import OpenAIChatClient
from ctxwin.store import Session
from ctxwin.testing import FakeProvider, Reply
from ctxwin.tools import Workspace
from proxy_server import proxy_for

PREFERENCE = "I prefer pnpm over npm for every package in this repo."


def test_the_agent_loop_consolidates_when_idle(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with FakeProvider(model=lambda request: Reply("Noted.")) as fake:
        model = HttpModel(OpenAIChatClient(fake.openai_base_url, "test-key", "gpt-4o"))
        log = Session.open(workspace / ".ctxwin" / "sessions" / "s1")
        agent = create_agent(model, session=log, workspace=Workspace([workspace]),
                             config=AgentConfig(consolidate=SleepConfig(idle_seconds=0.05)))
        assert agent.sleep is not None
        try:
            assert agent.run(PREFERENCE).stop == "done"
            assert agent.sleep.wait_for(1, timeout=30), agent.sleep.errors
        finally:
            agent.sleep.close()
            log.close()
    memory = (workspace / "MEMORY.md").read_text()
    assert "prefer pnpm over npm" in memory and "@s1]" in memory


def test_the_agent_loop_does_not_consolidate_by_default(tmp_path: Path) -> None:
    with FakeProvider() as fake:
        model = HttpModel(OpenAIChatClient(fake.openai_base_url, "test-key", "gpt-4o"))
        agent = create_agent(model, workspace=Workspace([tmp_path]))
        assert agent.sleep is None
        agent.run(PREFERENCE)
    assert not (tmp_path / "MEMORY.md").exists()


def test_chat_consolidates_after_the_session(tmp_path: Path) -> None:
    runner = CliRunner()
    with FakeProvider(model=lambda request: Reply("Noted.")) as fake:
        args = ["chat", "--base-url", fake.openai_base_url, "--api", "openai", "--api-key", "test-key",
                "--workspace", str(tmp_path), "--sessions", str(tmp_path / ".ctxwin" / "sessions"), "--no-stream"]
        result = runner.invoke(app, args, input=f"{PREFERENCE}\n/quit\n")
        assert result.exit_code == 0, result.output
        assert not (tmp_path / "MEMORY.md").exists()  # off by default
        result = runner.invoke(app, [*args, "--consolidate"], input=f"{PREFERENCE}\n/new\nThe staging port is 9443.\n"
                               "/quit\n")
        assert result.exit_code == 0, result.output
    memory = (tmp_path / "MEMORY.md").read_text()
    assert "prefer pnpm over npm" in memory and "staging port is 9443" in memory
    assert "@chat-0002]" in memory and "@chat-0003]" in memory


def test_the_proxy_consolidates_when_idle(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = tmp_path / "store"
    with FakeProvider(context_window=50_000, max_output=2_000) as fake, \
            proxy_for(fake, store_dir=store, memory_workspace=workspace, consolidate_idle=0.05) as served:
        body = {"model": "gpt-4o", "max_tokens": 50, "messages": [{"role": "user", "content": PREFERENCE}]}
        response = httpx.post(f"{served.url}/v1/chat/completions", content=json.dumps(body),
                              headers={"content-type": "application/json", "authorization": "Bearer sk-test"},
                              timeout=30)
        assert response.status_code == 200, response.text
        sleep = served.proxy.sleep
        assert sleep is not None and sleep.wait_for(1, timeout=30), sleep.errors
    memory = (workspace / "MEMORY.md").read_text()
    assert "prefer pnpm over npm" in memory and "[entry:" in memory


def test_the_proxy_does_not_consolidate_by_default(tmp_path: Path) -> None:
    with FakeProvider() as fake, proxy_for(fake, store_dir=tmp_path / "store", memory_workspace=tmp_path) as served:
        assert served.proxy.sleep is None
