"""Tool specs: name, description (the limits and how to page, as the anchors' descriptions say),
JSON Schema of the arguments, and how to run it. Exported as OpenAI function tools, Anthropic tools
or plain JSON Schema; `run_tool` runs one by name with a model's arguments."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ctxwin.tools.base import (
    FIND_DEFAULT_LIMIT,
    GREP_DEFAULT_LIMIT,
    LS_DEFAULT_LIMIT,
    READ_MAX_FILE_BYTES,
    READ_MAX_TOKENS,
    READ_PDF_MAX_PAGES,
    READ_PDF_PAGES_WITHOUT_RANGE,
    SHELL_TIMEOUT_S,
    ToolError,
    ToolOutput,
)
from ctxwin.tools.read import ReadState, read
from ctxwin.tools.search import GREP_MAX_CONTEXT, find, grep, ls
from ctxwin.tools.shell import shell
from ctxwin.tools.spilled import grep_spilled, query_json, read_spilled
from ctxwin.tools.truncate import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    GREP_MAX_LINE_CHARS,
    READ_MAX_LINE_CHARS,
    format_size,
)
from ctxwin.tools.workspace import Workspace

SchemaFormat = Literal["openai", "openai-responses", "anthropic", "jsonschema"]
Runner = Callable[[Workspace, dict[str, Any], "ReadState | None", "str | None"], ToolOutput]
_LINES = DEFAULT_MAX_LINES
_BYTES = format_size(DEFAULT_MAX_BYTES)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON Schema of the arguments object
    run: Runner
    needs: Literal["shell", "blobs"] | None = None  # what the workspace must allow for the tool to be offered


def _int(description: str, minimum: int = 1, default: int | None = None, maximum: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer", "minimum": minimum, "description": description}
    if default is not None:
        schema["default"] = default
    if maximum is not None:
        schema["maximum"] = maximum
    return schema


def _object(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_READ = (
    "Read a file in the workspace. Output is numbered lines, cat -n style: the line number right-aligned in 6 "
    "columns, a tab, then the line.\n"
    f"Limits: at most {_LINES} lines or {_BYTES} per call, whichever comes first. When more remains, the output ends "
    f"with a notice such as [Showing lines 1-{_LINES} of 50000. Use offset={_LINES + 1} to continue.]: call read "
    "again with that offset until you have what you need.\n"
    "- offset: first line to read (1-based); limit: number of lines. Use them to read a part of a large file.\n"
    f"- Files over {format_size(READ_MAX_FILE_BYTES)} cannot be read whole: page them with offset/limit, or find the "
    f"part you need with grep first. A page over {READ_MAX_TOKENS} tokens is refused the same way.\n"
    f"- Lines longer than {READ_MAX_LINE_CHARS} characters are cut; the marker at the cut says which offset and "
    "column to read the rest of that line with.\n"
    "- Reading the same range of an unchanged file again returns a short note pointing at your earlier result "
    "instead of the content.\n"
    "- Jupyter notebooks (.ipynb) are shown as cells with outputs summarized. PDFs are shown as text per page: "
    f'pages="1-10" picks pages (at most {READ_PDF_MAX_PAGES} per call, required above '
    f"{READ_PDF_PAGES_WITHOUT_RANGE} pages). Images (png, jpeg, gif, webp) are attached as images.\n"
    "- Binary files are described, not shown. Paths outside the workspace and secrets (.env, keys, credentials) "
    "are refused."
)

_GREP = (
    "Search file contents for a regular expression (ripgrep syntax; literal=true searches for plain text) in a "
    "folder (recursively) or one file.\n"
    "Output lines are path:line:text; with context, surrounding lines are path-line-text and separate groups are "
    "divided by --.\n"
    f"Limits: at most `limit` matching lines (default {GREP_DEFAULT_LIMIT}), {_BYTES} of output, and "
    f"{GREP_MAX_LINE_CHARS} characters per line. A notice says when a limit was hit: raise limit, narrow the "
    "pattern or the path/glob, or read the file for full lines.\n"
    "- glob filters files: '*.py' matches names at any depth, 'src/**/*.ts' matches paths relative to `path`; "
    "a path the glob names is searched even if .gitignore skips it.\n"
    "- Skips .git, node_modules, .gitignore'd paths, binary files and secrets."
)

_FIND = (
    "Find files and folders by glob pattern under a folder. '*.py' matches names at any depth; a pattern with '/' "
    "matches the path relative to `path` ('src/**/test_*.py'); '**' crosses folders. Folders end with '/'.\n"
    f"Limits: at most `limit` results (default {FIND_DEFAULT_LIMIT}) or {_BYTES}; a notice says when the limit was "
    "hit (raise limit or refine the pattern).\n"
    "Skips .git, node_modules and .gitignore'd paths."
)

_LS = (
    "List the entries of one folder (not recursive): sorted case-insensitively, folders end with '/', symlinks "
    "show their target, dotfiles included.\n"
    f"Limits: at most `limit` entries (default {LS_DEFAULT_LIMIT}) or {_BYTES}; a notice says when the limit was "
    "hit.\n"
    ".git, node_modules and .gitignore'd entries are left out unless ignored_too=true; a notice says how many were "
    "left out."
)

_SHELL = (
    "Run a bash command in the workspace root. stdout and stderr come back together.\n"
    f"Limits: timeout in seconds (default {SHELL_TIMEOUT_S:g}; the whole process group is killed when it passes). "
    f"Only the LAST {_LINES} lines or {_BYTES} of output are shown. When that is not all of it, the notice names a "
    "blob handle holding the full output: page it with read_spilled or search it with grep_spilled instead of "
    "running the command again.\n"
    "Non-zero exit codes, signals and timeouts are reported after the output."
)

_READ_SPILLED = (
    "Read output that was too large to show in full and was saved under a blob handle (blob:<hex>), by lines, "
    f"like read: numbered lines, at most {_LINES} lines or {_BYTES} per call, and a notice with the offset to "
    "continue from. offset/limit pick lines; column reads on inside a cut long line."
)

_GREP_SPILLED = (
    "Search output saved under a blob handle for a regular expression (literal=true for plain text). Output lines "
    f"are handle:line:text. At most `limit` matching lines (default {GREP_DEFAULT_LIMIT}) and {_BYTES}; a notice "
    "says when a limit was hit. Then use read_spilled with offset to see around a match."
)

_QUERY_JSON = (
    'Run a jq expression (default) or a JMESPath expression (language="jmespath") over JSON saved under a blob '
    "handle, or over a JSON / JSON Lines file in the workspace, and show the result as indented JSON.\n"
    "Use it to drill into a large JSON result after seeing its preview: '.items | length', '.items[:10]', "
    "'.items[] | select(.status == \"error\") | .id', '[.items[].name]'.\n"
    f"Limits: at most {_LINES} lines or {_BYTES} of result; a notice says when it was cut: narrow the expression "
    "(slice arrays, select fields)."
)


def _args(args: Mapping[str, Any], *names: str) -> dict[str, Any]:
    return {name: args[name] for name in names if name in args and args[name] is not None}


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "read",
            _READ,
            _object(
                {
                    "path": {"type": "string", "description": "File to read, relative to the workspace root."},
                    "offset": _int("First line to read, 1-based. Omit to start at the top."),
                    "limit": _int(f"Number of lines to read (at most {_LINES} are shown per call)."),
                    "column": _int("Read one long line from this character on (1-based); use with offset."),
                    "pages": {"type": "string", "description": 'PDF page range such as "1-10" or "3".'},
                },
                ["path"],
            ),
            lambda ws, a, state, call_id: read(
                ws, a["path"], **_args(a, "offset", "limit", "column", "pages"), state=state, call_id=call_id
            ),
        ),
        ToolSpec(
            "grep",
            _GREP,
            _object(
                {
                    "pattern": {"type": "string", "description": "Regular expression (or text with literal=true)."},
                    "path": {"type": "string", "description": "Folder or file to search.", "default": "."},
                    "glob": {"type": "string", "description": "Only files matching this glob, e.g. '*.py'."},
                    "context": _int("Lines of context before and after each match.", 0, 0, GREP_MAX_CONTEXT),
                    "limit": _int("Most matching lines to show.", 1, GREP_DEFAULT_LIMIT),
                    "ignore_case": {"type": "boolean", "default": False},
                    "literal": {"type": "boolean", "default": False, "description": "Treat pattern as plain text."},
                },
                ["pattern"],
            ),
            lambda ws, a, state, call_id: grep(
                ws, a["pattern"], **_args(a, "path", "glob", "context", "limit", "ignore_case", "literal")
            ),
        ),
        ToolSpec(
            "find",
            _FIND,
            _object(
                {
                    "pattern": {"type": "string", "description": "Glob such as '*.py' or 'src/**/test_*.py'."},
                    "path": {"type": "string", "description": "Folder to search.", "default": "."},
                    "limit": _int("Most results to show.", 1, FIND_DEFAULT_LIMIT),
                },
                ["pattern"],
            ),
            lambda ws, a, state, call_id: find(ws, a["pattern"], **_args(a, "path", "limit")),
        ),
        ToolSpec(
            "ls",
            _LS,
            _object(
                {
                    "path": {"type": "string", "description": "Folder to list.", "default": "."},
                    "limit": _int("Most entries to show.", 1, LS_DEFAULT_LIMIT),
                    "ignored_too": {"type": "boolean", "default": False, "description": "Also list ignored entries."},
                },
                [],
            ),
            lambda ws, a, state, call_id: ls(ws, **_args(a, "path", "limit", "ignored_too")),
        ),
        ToolSpec(
            "shell",
            _SHELL,
            _object(
                {
                    "command": {"type": "string", "description": "Bash command to run."},
                    "timeout": {
                        "type": "number", "exclusiveMinimum": 0, "default": SHELL_TIMEOUT_S,
                        "description": "Seconds before the command is killed.",
                    },
                },
                ["command"],
            ),
            lambda ws, a, state, call_id: shell(ws, a["command"], **_args(a, "timeout")),
            needs="shell",
        ),
        ToolSpec(
            "read_spilled",
            _READ_SPILLED,
            _object(
                {
                    "handle": {"type": "string", "description": "Blob handle, blob:<hex>."},
                    "offset": _int("First line to read, 1-based."),
                    "limit": _int("Number of lines to read."),
                    "column": _int("Read one long line from this character on; use with offset."),
                },
                ["handle"],
            ),
            lambda ws, a, state, call_id: read_spilled(ws, a["handle"], **_args(a, "offset", "limit", "column")),
            needs="blobs",
        ),
        ToolSpec(
            "grep_spilled",
            _GREP_SPILLED,
            _object(
                {
                    "handle": {"type": "string", "description": "Blob handle, blob:<hex>."},
                    "pattern": {"type": "string", "description": "Regular expression (or text with literal=true)."},
                    "limit": _int("Most matching lines to show.", 1, GREP_DEFAULT_LIMIT),
                    "context": _int("Lines of context before and after each match.", 0, 0, GREP_MAX_CONTEXT),
                    "ignore_case": {"type": "boolean", "default": False},
                    "literal": {"type": "boolean", "default": False},
                },
                ["handle", "pattern"],
            ),
            lambda ws, a, state, call_id: grep_spilled(
                ws, a["handle"], a["pattern"], **_args(a, "limit", "context", "ignore_case", "literal")
            ),
            needs="blobs",
        ),
        ToolSpec(
            "query_json",
            _QUERY_JSON,
            _object(
                {
                    "handle": {"type": "string", "description": "Blob handle (blob:<hex>) or a JSON file path."},
                    "expr": {"type": "string", "description": "jq (or JMESPath) expression."},
                    "language": {"type": "string", "enum": ["jq", "jmespath"], "default": "jq"},
                },
                ["handle", "expr"],
            ),
            lambda ws, a, state, call_id: query_json(ws, a["handle"], a["expr"], **_args(a, "language")),
        ),
    )
}


def available(ws: Workspace | None = None, names: Sequence[str] | None = None) -> list[ToolSpec]:
    """The specs to offer: all, or those `ws` allows (no shell unless allowed, no spilled-output
    tools without a blob store), optionally only `names`."""
    specs = [TOOLS[name] for name in (names or TOOLS)]
    if ws is not None:
        specs = [
            s for s in specs
            if not (s.needs == "shell" and not ws.allow_shell) and not (s.needs == "blobs" and ws.blobs is None)
        ]
    return specs


def schemas(
    format: SchemaFormat = "openai", *, ws: Workspace | None = None, names: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The tool definitions in a provider's format: `openai` (Chat Completions function tools),
    `openai-responses`, `anthropic`, or `jsonschema` (one JSON Schema document per tool)."""
    out: list[dict[str, Any]] = []
    for spec in available(ws, names):
        params = dict(spec.parameters)
        if format == "openai":
            function = {"name": spec.name, "description": spec.description, "parameters": params}
            out.append({"type": "function", "function": function})
        elif format == "openai-responses":
            out.append({"type": "function", "name": spec.name, "description": spec.description, "parameters": params})
        elif format == "anthropic":
            out.append({"name": spec.name, "description": spec.description, "input_schema": params})
        elif format == "jsonschema":
            out.append({
                "$schema": "https://json-schema.org/draft/2020-12/schema", "title": spec.name,
                "description": spec.description, **params,
            })
        else:
            hint = "Use openai, openai-responses, anthropic or jsonschema."
            raise ToolError("bad_argument", f"unknown schema format {format!r}", hint)
    return out


def _coerce(name: str, value: Any, schema: Mapping[str, Any]) -> Any:
    """Checks one argument against its schema; numeric strings become numbers (models send them)."""
    kind = schema.get("type")
    if kind == "integer":
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ToolError("bad_argument", f"{name} must be a whole number, not {value!r}")
    elif kind == "number":
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ToolError("bad_argument", f"{name} must be a number, not {value!r}")
    elif kind == "boolean":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            raise ToolError("bad_argument", f"{name} must be true or false, not {value!r}")
    elif kind == "string" and not isinstance(value, str):
        raise ToolError("bad_argument", f"{name} must be a string, not {value!r}")
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError("bad_argument", f"{name} must be one of {', '.join(map(str, schema['enum']))}, not {value!r}")
    return value


def validate_args(spec: ToolSpec, args: Mapping[str, Any] | None) -> dict[str, Any]:
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ToolError("bad_argument", f"arguments of {spec.name} must be an object, not {type(args).__name__}")
    properties = spec.parameters["properties"]
    unknown = sorted(set(args) - set(properties))
    if unknown:
        raise ToolError(
            "bad_argument", f"{spec.name} has no argument {', '.join(unknown)}",
            f"Its arguments are: {', '.join(properties)}.",
        )
    missing = [name for name in spec.parameters["required"] if args.get(name) is None]
    if missing:
        raise ToolError("bad_argument", f"{spec.name} needs {', '.join(missing)}")
    return {name: _coerce(name, value, properties[name]) for name, value in args.items() if value is not None}


def run_tool(
    name: str,
    args: Mapping[str, Any] | None,
    ws: Workspace,
    state: ReadState | None = None,
    call_id: str | None = None,
) -> ToolOutput:
    """Runs the tool `name` with a model's `args`. Never raises for what the model sent: unknown
    tools, bad arguments and refusals all come back as error outputs."""
    spec = TOOLS.get(name)
    if spec is None:
        return ToolOutput.error(
            ToolError("unknown_tool", f"Unknown tool {name!r}.", f"Tools: {', '.join(TOOLS)}.")
        )
    try:
        checked = validate_args(spec, args)
    except ToolError as error:
        return ToolOutput.error(error)
    return spec.run(ws, checked, state, call_id)
