"""Tool schemas for OpenAI, Anthropic and JSON Schema; run_tool with a model's arguments; the
`ctxwin tool` command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import pytest
from annotated_types import Ge, Le
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from ctxwin.cli.main import app
from ctxwin.errors import ToolDefinitionError
from ctxwin.store.blobs import FileBlobStore
from ctxwin.tools import (
    TOOLS,
    ReadState,
    Registry,
    ToolOutput,
    Workspace,
    available,
    default_registry,
    run_tool,
    schemas,
    spec_of,
    tool,
)

runner = CliRunner()


def test_every_tool_has_a_valid_schema_and_a_description_of_its_limits() -> None:
    assert set(TOOLS) == {"read", "grep", "find", "ls", "shell", "read_spilled", "grep_spilled", "query_json"}
    for document in schemas("jsonschema"):
        Draft202012Validator.check_schema(document)
        assert document["type"] == "object" and document["additionalProperties"] is False
    read_doc = TOOLS["read"].description
    for fact in ("2000 lines", "50.0KB", "offset=2001", "256.0KB", "25000 tokens", "2000 characters", "pages="):
        assert fact in read_doc, fact
    assert "100" in TOOLS["grep"].description and "500 characters" in TOOLS["grep"].description
    assert "1000" in TOOLS["find"].description and "500" in TOOLS["ls"].description
    assert "LAST 2000 lines" in TOOLS["shell"].description and "read_spilled" in TOOLS["shell"].description


def test_provider_formats() -> None:
    openai = schemas("openai")
    assert openai[0]["type"] == "function" and openai[0]["function"]["name"] == "read"
    assert openai[0]["function"]["parameters"]["required"] == ["path"]
    responses = schemas("openai-responses")
    assert responses[0]["name"] == "read" and "parameters" in responses[0]
    anthropic = schemas("anthropic")
    assert set(anthropic[0]) == {"name", "description", "input_schema"}
    assert json.loads(json.dumps(anthropic)) == anthropic  # plain JSON
    with pytest.raises(Exception, match="unknown schema format"):
        schemas("xml")  # type: ignore[arg-type]


def test_offered_tools_follow_the_workspace(tmp_path: Path) -> None:
    plain = [spec.name for spec in available(Workspace([tmp_path]))]
    assert "shell" not in plain and "read_spilled" not in plain and "read" in plain
    full = Workspace([tmp_path], allow_shell=True, blobs=FileBlobStore(tmp_path / "b"))
    assert [s["name"] for s in schemas("anthropic", ws=full)] == list(TOOLS)
    assert [s["name"] for s in schemas("anthropic", names=["read", "grep"])] == ["read", "grep"]


def test_run_tool_checks_arguments_and_never_raises(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"{n}\n" for n in range(1, 11)))
    ws = Workspace([tmp_path])
    ok = run_tool("read", {"path": "f.txt", "offset": "3", "limit": 2.0}, ws)
    assert ok.text == "     3\t3\n     4\t4\n\n[6 more lines in file. Use offset=5 to continue.]"
    assert run_tool("nope", {}, ws).details["error"] == "unknown_tool"
    assert "read, grep" in run_tool("nope", {}, ws).text
    assert run_tool("read", {}, ws).text == "read needs path"
    unknown = run_tool("read", {"path": "f.txt", "bogus": 1}, ws)
    assert unknown.is_error and "no argument bogus" in unknown.text
    assert run_tool("read", {"path": "f.txt", "offset": "two"}, ws).details["error"] == "bad_argument"
    assert run_tool("grep", {"pattern": "1", "ignore_case": "maybe"}, ws).details["error"] == "bad_argument"
    assert run_tool("query_json", {"handle": "f.txt", "expr": ".", "language": "sql"}, ws).is_error
    assert run_tool("shell", {"command": "echo hi"}, ws).details["error"] == "shell_disabled"
    assert run_tool("read", "not an object", ws).is_error  # type: ignore[arg-type]
    state = ReadState()
    run_tool("read", {"path": "f.txt"}, ws, state, call_id="call_1")
    assert run_tool("read", {"path": "f.txt"}, ws, state).text.startswith("File unchanged since call call_1")
    result = ok.to_tool_result("call_9", "read")
    assert result.call_id == "call_9" and result.text == ok.text and not result.is_error


# --------------------------------------------------------------------------------------------------
# The CLI


def test_cli_read_pages_a_3000_line_file(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("".join(f"line {n}\n" for n in range(1, 3001)))
    first = runner.invoke(app, ["tool", "read", "big.txt", "--root", str(tmp_path)])
    assert first.exit_code == 0, first.output
    lines = first.stdout.rstrip("\n").split("\n")
    assert lines[0] == "     1\tline 1" and lines[1999] == "  2000\tline 2000"
    assert lines[-1] == "[Showing lines 1-2000 of 3000. Use offset=2001 to continue.]"
    rest = runner.invoke(app, ["tool", "read", "big.txt", "--offset", "2001", "--root", str(tmp_path)])
    assert rest.exit_code == 0
    rest_lines = rest.stdout.rstrip("\n").split("\n")
    assert rest_lines[0] == "  2001\tline 2001" and rest_lines[-1] == "  3000\tline 3000" and len(rest_lines) == 1000


def test_cli_refuses_outside_the_root_with_the_reason(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("top secret\n")
    result = runner.invoke(app, ["tool", "read", "../secret.txt", "--root", str(root)])
    assert result.exit_code == 2
    assert "outside the workspace roots" in result.output and "top secret" not in result.output


def test_cli_options_json_grep_and_errors(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import os\nx = 1\n")
    (tmp_path / "b.txt").write_text("import nothing\n")
    grep = runner.invoke(app, ["tool", "grep", "import", "--glob", "*.py", "--root", str(tmp_path)])
    assert grep.exit_code == 0 and grep.stdout == "a.py:1:import os\n"
    as_json = runner.invoke(app, ["tool", "ls", "--json", "--root", str(tmp_path)])
    data = json.loads(as_json.stdout)
    assert data["text"] == "a.py\nb.txt" and data["is_error"] is False and data["details"]["entries"] == 2
    bad = runner.invoke(app, ["tool", "ls", "--bogus", "1", "--root", str(tmp_path)])
    assert bad.exit_code == 2 and "no option --bogus" in bad.output
    unknown = runner.invoke(app, ["tool", "cat", "x", "--root", str(tmp_path)])
    assert unknown.exit_code == 2 and "unknown tool" in unknown.output
    ignore_case = runner.invoke(app, ["tool", "grep", "IMPORT", ".", "--ignore-case", "--root", str(tmp_path)])
    assert ignore_case.stdout == "a.py:1:import os\nb.txt:1:import nothing\n"
    shell_off = runner.invoke(app, ["tool", "shell", "echo hi", "--root", str(tmp_path)])
    assert shell_off.exit_code == 2 and "disabled" in shell_off.output
    shell_on = runner.invoke(app, ["tool", "shell", "echo hi; exit 4", "--allow-shell", "--root", str(tmp_path)])
    assert shell_on.exit_code == 1 and shell_on.stdout == "hi\n\nCommand exited with code 4\n"


# --------------------------------------------------------------------------------------------------
# Schemas generated from the functions; a registry users add their own tools to


def test_user_tools_get_schemas_from_signature_and_docstring(tmp_path: Path) -> None:
    # (The hints are evaluated in the module's globals, as typing.get_type_hints does: Annotated, Ge,
    # Le and Literal are imported at the top of this file.)
    registry = default_registry()

    @registry.register
    @tool(facts={"most": 7})
    def forecast(
        ws: Workspace, city: str, days: Annotated[int, Ge(1), Le(7)] = 3, unit: Literal["c", "f"] = "c",
        detailed: bool = False, state: ReadState | None = None,
    ) -> ToolOutput:
        """Weather forecast for a city, at most {most} days.

        Args:
            city: The city's name.
            days: How many days, 1 to {most}.
            unit: Degrees Celsius or Fahrenheit.
            detailed: Hour by hour.
        """
        return ToolOutput(f"{city}: {days} days in {unit}{' (hourly)' if detailed else ''}, state={state is not None}")

    def shout(ws: Workspace, text: str) -> str:
        """Repeat the text in capitals.

        Args:
            text: What to repeat; any text, even a long one that is
                described over two lines.
        """
        return text.upper()

    registry.register(shout)  # a plain function: decorated with the defaults
    spec = registry.get("forecast")
    assert spec is not None and spec.description == "Weather forecast for a city, at most 7 days."
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city's name."},
            "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "How many days, 1 to 7.",
                     "default": 3},
            "unit": {"type": "string", "enum": ["c", "f"], "description": "Degrees Celsius or Fahrenheit.",
                     "default": "c"},
            "detailed": {"type": "boolean", "description": "Hour by hour.", "default": False},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    assert registry.get("shout").parameters["properties"]["text"]["description"].endswith(  # type: ignore[union-attr]
        "described over two lines."
    )
    ws = Workspace([tmp_path])
    names = [s["name"] for s in registry.schemas("anthropic", ws=ws)]
    assert names[-2:] == ["forecast", "shout"] and "read" in names and "shell" not in names
    for document in registry.schemas("jsonschema"):
        Draft202012Validator.check_schema(document)
    ok = registry.run("forecast", '{"city": "Oslo", "days": "2", "detailed": "true"}', ws, ReadState())
    assert ok.text == "Oslo: 2 days in c (hourly), state=True"
    assert registry.run("shout", {"text": "hi"}, ws).text == "HI"
    assert run_tool("shout", {"text": "hi"}, ws, registry=registry).text == "HI"
    assert "forecast" not in TOOLS and run_tool("forecast", {"city": "x"}, ws).details["error"] == "unknown_tool"
    for bad in ({"city": "Oslo", "days": 8}, {"city": "Oslo", "unit": "k"}, {"days": 2}, "{not json", "[1, 2]"):
        out = registry.run("forecast", bad, ws)  # type: ignore[arg-type]
        assert out.is_error and out.details["error"] == "bad_argument", (bad, out.text)
    assert "at most 7" in registry.run("forecast", {"city": "x", "days": 9}, ws).text


def test_functions_that_cannot_be_tools_are_refused_with_the_reason() -> None:
    def no_doc(ws: Workspace, x: str) -> str:
        return x

    def undocumented_parameter(ws: Workspace, x: str) -> str:
        """Something."""
        return x

    def untyped(ws, x):  # type: ignore[no-untyped-def]
        """Something.

        Args:
            x: A value.
        """

    def object_typed(ws: Workspace, x: object) -> str:
        """Something.

        Args:
            x: A value.
        """
        return ""

    for func, words in ((no_doc, "no docstring"), (undocumented_parameter, "no line in the docstring"),
                        (untyped, "no type hint"), (object_typed, "cannot be a tool argument")):
        with pytest.raises(ToolDefinitionError, match=words):
            spec_of(func)
    with pytest.raises(ToolDefinitionError, match="not valid"):
        tool(name="has space")(undocumented_parameter)
    registry = Registry()
    registry.register(TOOLS["read"])
    with pytest.raises(ToolDefinitionError, match="already registered"):
        registry.register(TOOLS["read"])
    registry.register(TOOLS["read"], replace=True)
    assert registry.names() == ["read"]


def test_the_read_tool_list_is_defined_once_and_known_below() -> None:
    """The tools that read files are marked on their specs; compaction's list of read-tool names
    (a lower layer, which cannot import tools) must name every one of them."""
    from ctxwin.compaction.identifiers import READ_TOOLS
    from ctxwin.tools import READ_TOOL_NAMES

    assert {"read"} == READ_TOOL_NAMES
    assert READ_TOOL_NAMES <= READ_TOOLS
