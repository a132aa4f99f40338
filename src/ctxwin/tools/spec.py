"""A tool's spec generated from its function, schema and implementation side by side (Pi's style).

`@tool(...)` reads the function's typed parameters and its docstring: the docstring is the model's
description, its `Args:` section gives each parameter's description, the type hints give the JSON
Schema (`str`, `int`, `float`, `bool`, `X | None`, `Literal[...]`, `list[str]`; bounds with
`annotated_types`: `Annotated[int, Ge(1)]`), defaults give `default` and which are required.

The function's first parameter is the workspace (or what the tool reads from); parameters named
`state` and `call_id` are handed in by the runner, never by the model; `hidden=` names others the
model does not see. `{name}` in the docstring is replaced by `facts[name]`, so the limits a
description quotes are the constants the code uses.

A spec turns into each provider's format by the one tool-schema conversion, `ctxwin.messages.tools.to_format`
(re-exported here): OpenAI Chat function tools, OpenAI Responses, Anthropic, plain JSON Schema.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, ParamSpec, Union

import annotated_types

from ctxwin.errors import ToolDefinitionError
from ctxwin.messages.tools import FORMATS as FORMATS  # re-exported: callers read the formats here
from ctxwin.messages.tools import SchemaFormat, to_format
from ctxwin.tools.base import ToolError, ToolOutput, refusals_as_output

CONTEXT_PARAMETERS = ("state", "call_id")  # handed in by the runner when the function takes them
Needs = Literal["shell", "blobs"]
Runner = Callable[..., ToolOutput]
P = ParamSpec("P")
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what OpenAI and Anthropic accept as a tool name
Positive = Annotated[int, annotated_types.Ge(1)]  # a count or a 1-based position
NonNegative = Annotated[int, annotated_types.Ge(0)]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One tool as a model sees it (name, description, JSON Schema of the arguments object) and how
    to run it: `run(ws, **arguments, state=..., call_id=...)` (the context only if it takes it)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    run: Runner
    needs: Needs | None = None  # what the workspace must allow for the tool to be offered
    reads_files: bool = False  # it reads workspace files (dedup and the read-file list key on these names)
    context: tuple[str, ...] = field(default=())  # which of CONTEXT_PARAMETERS `run` takes

    def to_format(self, format: SchemaFormat) -> dict[str, Any]:
        return to_format(self, format)

    def invoke(self, ws: Any, arguments: Mapping[str, Any], state: Any = None,
               call_id: str | None = None) -> ToolOutput:
        """Run with checked `arguments`, handing over the context the tool takes (its read state,
        the call's id)."""
        context = {"state": state, "call_id": call_id}
        return self.run(ws, **arguments, **{key: context[key] for key in self.context})


class Tool(Generic[P]):
    """A tool function as written (call it directly), with its generated `spec`."""

    def __init__(self, func: Callable[P, ToolOutput], spec: ToolSpec) -> None:
        self._func = func
        self.spec = spec
        functools.update_wrapper(self, func)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> ToolOutput:
        return self._func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.spec.name}>"


def tool(
    *,
    name: str | None = None,
    needs: Needs | None = None,
    reads_files: bool = False,
    facts: Mapping[str, object] | None = None,
    hidden: Sequence[str] = (),
) -> Callable[[Callable[P, Any]], Tool[P]]:
    """Turns a function into a tool whose spec comes from its signature and docstring. Its refusals
    (`ToolError`, input errors, OS errors) come back as error outputs; a `str` it returns becomes a
    `ToolOutput`."""

    def wrap(func: Callable[P, Any]) -> Tool[P]:
        runner = refusals_as_output(_as_output(func))
        spec = spec_of(func, runner, name=name, needs=needs, reads_files=reads_files, facts=facts or {},
                       hidden=hidden)
        return Tool(runner, spec)

    return wrap


def _as_output(func: Callable[P, Any]) -> Callable[P, ToolOutput]:
    @functools.wraps(func)
    def call(*args: P.args, **kwargs: P.kwargs) -> ToolOutput:
        result = func(*args, **kwargs)
        if isinstance(result, ToolOutput):
            return result
        if isinstance(result, str):
            return ToolOutput(result)
        raise ToolDefinitionError(
            f"tool {func.__name__} returned {type(result).__name__}", "Return a ToolOutput or a str."
        )

    return call


# --------------------------------------------------------------------------------------------------
# Reading the function


def _docstring(func: Callable[..., Any], facts: Mapping[str, object]) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) from a Google-style docstring with an `Args:` section."""
    text = inspect.cleandoc(func.__doc__ or "")
    text = re.sub(r"\{(\w+)\}", lambda m: str(facts[m.group(1)]) if m.group(1) in facts else m.group(0), text)
    head, _, args = text.partition("\nArgs:\n")
    described: dict[str, str] = {}
    current: str | None = None
    indent: int | None = None  # of the parameter lines; deeper lines continue the one above
    for line in args.split("\n"):
        depth = len(line) - len(line.lstrip())
        match = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
        if match and (indent is None or depth == indent):
            indent = depth
            current = match.group(1)
            described[current] = match.group(2).strip()
        elif current is not None and line.strip() and indent is not None and depth > indent:
            described[current] = (described[current] + " " + line.strip()).strip()
        elif line.strip():
            break  # the Args section ended (another section, or prose)
    return _reflow(head), described


def _reflow(text: str) -> str:
    """Docstring prose as one line per paragraph or bullet: source line breaks inside a paragraph are
    soft (the description must not depend on where the code wraps); paragraphs and `- ` bullets
    start new lines."""
    out: list[str] = []
    joining = False
    for line in text.strip().split("\n"):
        stripped = line.strip()
        if not stripped:
            joining = False
        elif joining and not stripped.startswith("- "):
            out[-1] += " " + stripped
        else:
            out.append(stripped)
            joining = True
    return "\n".join(out)


def spec_of(
    func: Callable[..., Any],
    runner: Runner | None = None,
    *,
    name: str | None = None,
    needs: Needs | None = None,
    reads_files: bool = False,
    facts: Mapping[str, object] | None = None,
    hidden: Sequence[str] = (),
) -> ToolSpec:
    """The spec of `func` (see the module docstring). Raises ToolDefinitionError for a function that
    cannot be a tool: no workspace parameter, a parameter without a type or a docstring line, a type
    JSON Schema cannot state."""
    tool_name = name or func.__name__
    if not _NAME.match(tool_name):
        raise ToolDefinitionError(f"tool name {tool_name!r} is not valid", "Use 1-64 letters, digits, _ or -.")
    description, described = _docstring(func, facts or {})
    if not description:
        raise ToolDefinitionError(f"tool {tool_name} has no docstring", "Its docstring is the model's description.")
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception as error:  # an annotation that does not evaluate
        raise ToolDefinitionError(f"the type hints of tool {tool_name} do not evaluate: {error}") from None
    parameters = list(inspect.signature(func).parameters.values())
    if not parameters or parameters[0].kind not in (inspect.Parameter.POSITIONAL_ONLY,
                                                    inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise ToolDefinitionError(
            f"tool {tool_name} needs a first parameter for the workspace", "Write def tool(ws: Workspace, ...)."
        )
    properties: dict[str, Any] = {}
    required: list[str] = []
    context: list[str] = []
    for parameter in parameters[1:]:
        if parameter.name in CONTEXT_PARAMETERS:
            context.append(parameter.name)
            continue
        if parameter.name in hidden or parameter.kind in (inspect.Parameter.VAR_POSITIONAL,
                                                          inspect.Parameter.VAR_KEYWORD):
            continue
        if parameter.name not in hints:
            raise ToolDefinitionError(f"parameter {parameter.name} of tool {tool_name} has no type hint")
        if parameter.name not in described:
            raise ToolDefinitionError(
                f"parameter {parameter.name} of tool {tool_name} has no line in the docstring's Args: section"
            )
        schema = json_schema_of(hints[parameter.name], f"{tool_name}.{parameter.name}")
        schema["description"] = described[parameter.name]
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif parameter.default is not None:
            schema["default"] = parameter.default
        properties[parameter.name] = schema
    schema_doc = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    return ToolSpec(tool_name, description, schema_doc, runner or refusals_as_output(_as_output(func)), needs,
                    reads_files, tuple(context))


def json_schema_of(hint: Any, where: str) -> dict[str, Any]:
    """The JSON Schema of one parameter type."""
    bounds: dict[str, Any] = {}
    if typing.get_origin(hint) is typing.Annotated:
        hint, *metadata = typing.get_args(hint)
        for item in metadata:
            bounds.update(_bound(item))
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(options) != 1:
            raise ToolDefinitionError(f"{where}: a union of {len(options)} types cannot be a tool argument")
        inner = json_schema_of(options[0], where)
        return {**inner, **bounds}
    if origin is Literal:
        values = list(typing.get_args(hint))
        kinds = {type(v) for v in values}
        if kinds != {str}:
            raise ToolDefinitionError(f"{where}: only string literals can be an enum")
        return {"type": "string", "enum": values, **bounds}
    if origin in (list, Sequence, tuple) or hint in (list, tuple):
        args = typing.get_args(hint)
        items = json_schema_of(args[0], where) if args else {}
        return {"type": "array", "items": items, **bounds}
    simple = {str: "string", bool: "boolean", int: "integer", float: "number"}
    if hint in simple:
        return {"type": simple[hint], **bounds}
    raise ToolDefinitionError(f"{where}: type {hint!r} cannot be a tool argument",
                              "Use str, int, float, bool, X | None, Literal[...] or list[...].")


# annotated_types markers as JSON Schema keywords: (marker, keyword, the marker's attribute).
_BOUNDS: tuple[tuple[type, str, str], ...] = (
    (annotated_types.Ge, "minimum", "ge"), (annotated_types.Gt, "exclusiveMinimum", "gt"),
    (annotated_types.Le, "maximum", "le"), (annotated_types.Lt, "exclusiveMaximum", "lt"),
    (annotated_types.MaxLen, "maxLength", "max_length"), (annotated_types.MinLen, "minLength", "min_length"),
)


def _bound(item: object) -> dict[str, Any]:
    return {keyword: getattr(item, attribute) for marker, keyword, attribute in _BOUNDS if isinstance(item, marker)}


# --------------------------------------------------------------------------------------------------
# Checking a model's arguments


def _coerce(name: str, value: Any, schema: Mapping[str, Any]) -> Any:
    """Checks one argument against its schema; numeric strings become numbers (models send them)."""
    kind = schema.get("type")
    if kind == "integer":
        if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 100:
            value = int(value)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ToolError("bad_argument", f"{name} must be a whole number, not {_shown(value)}")
    elif kind == "number":
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ToolError("bad_argument", f"{name} must be a number, not {_shown(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ToolError("bad_argument", f"{name} must be a finite number, not {value!r}")
    elif kind == "boolean":
        if isinstance(value, str) and value.lower() in ("true", "false"):
            value = value.lower() == "true"
        if not isinstance(value, bool):
            raise ToolError("bad_argument", f"{name} must be true or false, not {_shown(value)}")
    elif kind == "string":
        if not isinstance(value, str):
            raise ToolError("bad_argument", f"{name} must be a string, not {_shown(value)}")
        if "\x00" in value:
            raise ToolError("bad_argument", f"{name} contains a NUL byte", f"Give {name} without NUL characters.")
    elif kind == "array":
        if not isinstance(value, list):
            raise ToolError("bad_argument", f"{name} must be a list, not {_shown(value)}")
        value = [_coerce(f"{name}[{i}]", item, schema.get("items", {})) for i, item in enumerate(value)]
    if "enum" in schema and value not in schema["enum"]:
        raise ToolError("bad_argument", f"{name} must be one of {', '.join(map(str, schema['enum']))}, not "
                        f"{_shown(value)}")
    _check_bounds(name, value, schema)
    return value


# (keyword, fails(value, bound), what the message says)
_CHECKS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("minimum", lambda v, b: v < b, "at least"), ("exclusiveMinimum", lambda v, b: v <= b, "more than"),
    ("maximum", lambda v, b: v > b, "at most"), ("exclusiveMaximum", lambda v, b: v >= b, "less than"),
)


def _check_bounds(name: str, value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        for keyword, fails, words in _CHECKS:
            if keyword in schema and fails(value, schema[keyword]):
                raise ToolError("bad_argument", f"{name}={_shown(value)} is not valid; it must be {words} "
                                f"{schema[keyword]}.")
    if isinstance(value, str) and not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
        raise ToolError("bad_argument", f"{name} is {len(value)} characters; it must be "
                            f"{schema.get('minLength', 0)} to {schema.get('maxLength', 'any number of')}.")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_args(spec: ToolSpec, args: Mapping[str, Any] | None) -> dict[str, Any]:
    """A model's arguments checked and converted against the spec's schema (None values dropped)."""
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise ToolError("bad_argument", f"arguments of {spec.name} must be an object, not {type(args).__name__}")
    # A hand-written schema may leave out `properties` or `required` (JSON Schema: none of either);
    # only a schema that declares its properties refuses others.
    properties = spec.parameters.get("properties") or {}
    if "properties" in spec.parameters or spec.parameters.get("additionalProperties") is False:
        unknown = sorted(str(key) for key in set(args) - set(properties))
        if unknown:
            raise ToolError(
                "bad_argument", f"{spec.name} has no argument {', '.join(u[:80] for u in unknown)}",
                f"Its arguments are: {', '.join(properties) or 'none'}.",
            )
    missing = [name for name in spec.parameters.get("required") or () if args.get(name) is None]
    if missing:
        raise ToolError("bad_argument", f"{spec.name} needs {', '.join(missing)}")
    return {name: _coerce(name, value, properties.get(name, {})) for name, value in args.items() if value is not None}
