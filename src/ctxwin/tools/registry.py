"""The tool registry: which tools exist, their schemas in each provider's format, and running one by
name with a model's JSON arguments (the agent loop and the MCP server use this API).

```python
registry = default_registry()            # the built-in tools
@registry.register                        # or registry.register(fn); a plain function is decorated
def weather(ws: Workspace, city: str) -> str:
    '''Today's weather in a city.

    Args:
        city: The city's name.
    '''
registry.schemas("anthropic", ws=ws)      # what to send the model
registry.run("weather", '{"city": "Oslo"}', ws)   # a ToolOutput, never an exception for what it sent
```

`TOOLS`, `available`, `schemas` and `run_tool` are the built-in registry's, as module-level names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from ctxwin.errors import ToolDefinitionError
from ctxwin.tools.base import ToolError, ToolOutput
from ctxwin.tools.read import ReadState, read
from ctxwin.tools.search import find, grep, ls
from ctxwin.tools.shell import shell
from ctxwin.tools.spec import SchemaFormat, Tool, ToolSpec, spec_of, to_format, validate_args
from ctxwin.tools.spilled import grep_spilled, query_json, read_spilled
from ctxwin.tools.workspace import Workspace

BUILTIN_TOOLS: tuple[Tool[Any], ...] = (read, grep, find, ls, shell, read_spilled, grep_spilled, query_json)
MAX_ARGUMENT_CHARS = 1024 * 1024  # a JSON argument string longer than this is refused unparsed


class Registry:
    """Tools by name, in registration order."""

    def __init__(self, tools: Sequence[Tool[Any] | ToolSpec | Callable[..., Any]] = ()) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for item in tools:
            self.register(item)

    def register(self, item: Any, *, replace: bool = False) -> Any:
        """Adds a tool: a `@tool`-decorated function, a `ToolSpec`, or a plain function (its spec is
        generated with the defaults). Returns `item`, so it works as a decorator."""
        if isinstance(item, Tool):
            spec = item.spec
        elif isinstance(item, ToolSpec):
            spec = item
        elif callable(item):
            spec = spec_of(item)
        else:
            raise ToolDefinitionError(f"cannot register {type(item).__name__} as a tool",
                                      "Give a function, a @tool function or a ToolSpec.")
        if spec.name in self._specs and not replace:
            raise ToolDefinitionError(f"a tool named {spec.name!r} is already registered", "Pass replace=True.")
        self._specs[spec.name] = spec
        return item

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    def names(self) -> list[str]:
        return list(self._specs)

    def mapping(self) -> Mapping[str, ToolSpec]:
        """A read-only view of the specs by name."""
        return MappingProxyType(self._specs)

    def specs(self, ws: Workspace | None = None, names: Sequence[str] | None = None) -> list[ToolSpec]:
        """The specs to offer: all, or those `ws` allows (no shell unless allowed, no spilled-output
        tools without a blob store), optionally only `names`."""
        unknown = [name for name in names or () if name not in self._specs]
        if unknown:
            raise ToolError("unknown_tool", f"Unknown tool {', '.join(unknown)}.", f"Tools: {', '.join(self)}.")
        specs = [self._specs[name] for name in (names or self._specs)]
        if ws is not None:
            specs = [
                s for s in specs
                if not (s.needs == "shell" and not ws.allow_shell) and not (s.needs == "blobs" and ws.blobs is None)
            ]
        return specs

    def schemas(
        self, format: SchemaFormat = "openai", *, ws: Workspace | None = None, names: Sequence[str] | None = None
    ) -> list[dict[str, Any]]:
        """The tool definitions in a provider's format (see `tools.spec.to_format`)."""
        return [to_format(spec, format) for spec in self.specs(ws, names)]

    def read_tool_names(self) -> frozenset[str]:
        """The names of the tools that read workspace files."""
        return frozenset(name for name, spec in self._specs.items() if spec.reads_files)

    def run(
        self,
        name: str,
        args: Mapping[str, Any] | str | None,
        ws: Workspace,
        state: ReadState | None = None,
        call_id: str | None = None,
    ) -> ToolOutput:
        """Runs the tool `name` with a model's `args` (an object, or its JSON text). Never raises for
        what the model sent: unknown tools, bad arguments and refusals all come back as error outputs."""
        spec = self._specs.get(name) if isinstance(name, str) else None
        if spec is None:
            shown = name if isinstance(name, str) else type(name).__name__
            return ToolOutput.error(
                ToolError("unknown_tool", f"Unknown tool {shown[:100]!r}.", f"Tools: {', '.join(self)}.")
            )
        try:
            checked = validate_args(spec, _parsed(spec.name, args))
        except ToolError as error:
            return ToolOutput.error(error)
        return spec.invoke(ws, checked, state, call_id)


def _parsed(name: str, args: Mapping[str, Any] | str | None) -> Any:
    if not isinstance(args, str):
        return args
    if len(args) > MAX_ARGUMENT_CHARS:
        raise ToolError("bad_argument", f"the arguments of {name} are {len(args)} characters of JSON; too long.")
    if not args.strip():
        return {}
    try:
        return json.loads(args)
    except (json.JSONDecodeError, RecursionError) as error:
        where = f" ({error.msg} at column {error.colno})" if isinstance(error, json.JSONDecodeError) else ""
        raise ToolError("bad_argument", f"the arguments of {name} are not valid JSON{where}",
                        "Send the arguments as one JSON object.") from None


def default_registry() -> Registry:
    """A new registry holding the built-in tools, for a harness to add its own to."""
    return Registry(BUILTIN_TOOLS)


_BUILTIN = default_registry()
TOOLS: Mapping[str, ToolSpec] = _BUILTIN.mapping()
READ_TOOL_NAMES: frozenset[str] = _BUILTIN.read_tool_names()  # the built-in tools that read workspace files


def available(ws: Workspace | None = None, names: Sequence[str] | None = None) -> list[ToolSpec]:
    """The built-in specs `ws` allows (see `Registry.specs`)."""
    return _BUILTIN.specs(ws, names)


def schemas(
    format: SchemaFormat = "openai", *, ws: Workspace | None = None, names: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The built-in tools' definitions in a provider's format: `openai` (Chat Completions function
    tools), `openai-responses`, `anthropic`, or `jsonschema` (one JSON Schema document per tool)."""
    return _BUILTIN.schemas(format, ws=ws, names=names)


def run_tool(
    name: str,
    args: Mapping[str, Any] | str | None,
    ws: Workspace,
    state: ReadState | None = None,
    call_id: str | None = None,
    *,
    registry: Registry | None = None,
) -> ToolOutput:
    """Runs a tool of `registry` (default: the built-in tools) by name; see `Registry.run`."""
    return (registry or _BUILTIN).run(name, args, ws, state, call_id)
