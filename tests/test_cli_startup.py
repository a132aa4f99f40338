"""The start-up budget (issue 27.2), kept by what is imported, not by the clock: `import ctxwin`, the
`ctxwin` command's help and the engine's import load none of the modules on the deny lists below, and a
command loads only its own module (each measured in a fresh interpreter). How long start-up takes:
`python -X importtime`, and the commands in the README's Performance section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
EXAMPLE = SRC / "ctxwin" / "examples" / "claude-code-session.jsonl"

HEAVY = ("numpy", "tiktoken", "httpx", "rich.table", "yaml", "pydantic_ai", "langchain", "langchain_core",
         "langgraph", "agents", "mcp", "starlette", "uvicorn", "opentelemetry", "psycopg", "wordllama")
INTEGRATIONS = ("ctxwin.adapters", "ctxwin.proxy", "ctxwin.mcp", "ctxwin.telemetry")
COMMAND_LIBRARIES = ("ctxwin.engine", "ctxwin.policies", "ctxwin.transcripts", "ctxwin.evaluation", "ctxwin.agent",
                     "ctxwin.tools", "ctxwin.memory", "ctxwin.store", "ctxwin.providers", "pydantic", "rich")


def modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def command(*args: str) -> str:
    return ("import contextlib, io, sys\nfrom ctxwin.cli.main import main\nsys.argv = ['ctxwin', "
            + ", ".join(repr(a) for a in args) + "]\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main()\n    except SystemExit as exit_:\n        assert not exit_.code, exit_.code")


def test_import_ctxwin_loads_only_the_errors() -> None:
    modules = modules_after("import ctxwin")
    assert loaded(modules, HEAVY + INTEGRATIONS + COMMAND_LIBRARIES) == []
    assert sorted(m for m in modules if m.startswith("ctxwin")) == ["ctxwin", "ctxwin.errors"]


def test_the_roots_names_still_load_on_use() -> None:
    modules = modules_after("import ctxwin\nassert ctxwin.ContextEngine.__name__ == 'ContextEngine'\n"
                            "from ctxwin import Session, policies\nassert policies.get('pi').name == 'pi'")
    assert {"ctxwin.engine", "ctxwin.store", "ctxwin.policies"} <= modules


@pytest.mark.parametrize("args", [["--help"], ["--version"], []])
def test_the_commands_listing_imports_no_command(args: list[str]) -> None:
    code = command(*args) if args else command("--help").replace("'--help'", "")
    if not args:  # bare `ctxwin` shows the help with a usage error code: let it through
        code = code.replace("assert not exit_.code, exit_.code", "pass")
    modules = modules_after(code)
    assert loaded(modules, HEAVY + INTEGRATIONS + COMMAND_LIBRARIES) == []
    assert sorted(m for m in modules if m.startswith("ctxwin.cli.")) == ["ctxwin.cli.app", "ctxwin.cli.main"]


def test_a_command_imports_only_its_own_module() -> None:
    modules = modules_after(command("policies", "--json"))
    assert sorted(m for m in modules if m.startswith("ctxwin.cli.")) == ["ctxwin.cli.app", "ctxwin.cli.main",
                                                                         "ctxwin.cli.policies"]
    assert loaded(modules, (*INTEGRATIONS, "numpy", "tiktoken", "httpx", "rich.table")) == []
    helped = modules_after(command("inspect", "--help"))
    assert sorted(m for m in helped if m.startswith("ctxwin.cli.")) == ["ctxwin.cli.app", "ctxwin.cli.inspect",
                                                                        "ctxwin.cli.main", "ctxwin.cli.reads"]
    assert loaded(helped, (*INTEGRATIONS, "httpx", "ctxwin.engine", "ctxwin.agent")) == []


def test_inspect_of_a_session_loads_no_integration_client_or_server() -> None:
    modules = modules_after(command("inspect", str(EXAMPLE), "--json"))
    assert loaded(modules, (*INTEGRATIONS, "httpx", "ctxwin.agent", "ctxwin.providers.base", "starlette",
                            "mcp")) == []


def test_the_engine_loads_its_heavy_parts_on_first_use_only() -> None:
    """Importing the engine loads none of them; appending and preparing for a Claude model then loads the
    estimator's numpy (its first use) and still no exact tokenizer, client, console or integration."""
    imported = modules_after("from ctxwin import ContextEngine")
    assert loaded(imported, HEAVY + INTEGRATIONS + ("rich", "typer", "ctxwin.memory.embed", "ctxwin.transcripts",
                                                    "ctxwin.evaluation", "ctxwin.agent", "ctxwin.cli")) == []
    used = modules_after("from ctxwin import ContextEngine\nengine = ContextEngine(model='claude-sonnet-4-5')\n"
                         "engine.append({'role': 'user', 'content': 'hello'})\nassert engine.prepare().tokens > 0")
    assert loaded(used, tuple(m for m in HEAVY if m != "numpy") + INTEGRATIONS + (
        "rich", "typer", "ctxwin.memory.embed", "ctxwin.transcripts", "ctxwin.evaluation", "ctxwin.agent")) == []
