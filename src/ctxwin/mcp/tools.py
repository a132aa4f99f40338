"""The tools `ctxwin mcp` serves, and running one: the library's own specs and implementations (the
tool registry, the memory tools, `recall`), so the names, schemas, caps and notices are the library's.
Nothing here imports the MCP SDK; `server.py` puts this on the wire.

- Workspace tools: what `default_registry().specs(workspace)` offers for the roots (`shell` only with
  `allow_shell`, `read_spilled` / `grep_spilled` only with a blob store).
- `recall`, with a session or a blob store to look refs up in.
- Memory tools (with a memory folder): memory_search, memory_get, memory; semantic_search_files over
  the first root's files, under the workspace's deny list (what grep and read refuse is never indexed,
  so never found); and conversation_search with a session (its index is the memory folder's, or one
  kept in memory for the server's life).
- Not served: Letta's open_files / close_files (their working set is shown inside the agent's
  context, which a server cannot write to).

Calls never raise for what a client sent: unknown tools, bad arguments and refusals are error outputs
carrying the library's message and hint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxwin.errors import ArgumentError, CtxwinError, InputError
from ctxwin.files import as_path
from ctxwin.tools.base import ToolError, ToolOutput
from ctxwin.tools.registry import default_registry
from ctxwin.tools.spec import ToolSpec, validate_args
from ctxwin.tools.workspace import Workspace

from .recall import RecallSource, recall

# Memory tools a server does not offer (see the module docstring).
UNSERVED_MEMORY_TOOLS = frozenset({"open_files", "close_files"})
# Sentences of library descriptions that are false for a server: it keeps no read state across calls
# (a client compacts its context without telling the server, so a "still current" stub could point at
# content its model no longer has).
STATELESS_DROPS: Mapping[str, str] = {
    "read": "- Reading the same range of an unchanged file again returns a short note pointing at your earlier "
            "result instead of the content.",
}
LOG = logging.getLogger("ctxwin.mcp")
READ_ONLY_TOOLS = frozenset({
    "read", "grep", "find", "ls", "read_spilled", "grep_spilled", "query_json", "recall", "memory_search",
    "memory_get", "conversation_search", "semantic_search_files",
})


@dataclass(frozen=True, slots=True)
class McpConfig:
    """What a server serves. `roots` are the workspace roots (the first is where relative paths
    resolve); `blobs` a blob store folder (shell spill, spilled-output tools, blob refs), defaulting to
    the session's; `session` a stored session's folder (entry refs for recall, conversation_search);
    `sessions_root` the store holding it and its siblings (conversation_search over all sessions);
    `memory` the folder holding MEMORY.md and memory/ (the memory tools); `embedder` the memory
    index's embedder (`ctxwin.memory.embedder_from_spec`); `model` picks read's token counter."""

    roots: tuple[Path, ...]
    blobs: Path | None = None
    allow_shell: bool = False
    session: Path | None = None
    sessions_root: Path | None = None
    memory: Path | None = None
    embedder: str = "default"
    model: str | None = None

    def __post_init__(self) -> None:
        for name in ("blobs", "session", "sessions_root", "memory"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, as_path(value, f"McpConfig.{name}"))
        for name in ("embedder", "model"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ArgumentError(f"McpConfig.{name} is text, not {type(value).__name__}",
                                    "pass a name (see `ctxwin mcp --help`)")


@dataclass(frozen=True, slots=True)
class ServedTool:
    """One tool as a client lists it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    read_only: bool


def _description(spec: ToolSpec) -> str:
    drop = STATELESS_DROPS.get(spec.name)
    if drop is None:
        return spec.description
    return "\n".join(line for line in spec.description.split("\n") if line != drop)


class Toolset:
    """The tools of one server, opened from `config` (the workspace, the blob store, the session
    and the memory index are opened once). `close()` releases the memory index."""

    def __init__(self, config: McpConfig) -> None:
        from ctxwin.store.blobs import FileBlobStore

        self.config = config
        session = _checked_session(config.session)
        blobs_dir = config.blobs if config.blobs is not None else (session / "blobs" if session else None)
        blobs = FileBlobStore(blobs_dir) if blobs_dir is not None else None
        try:
            self.workspace = Workspace(roots=config.roots, blobs=blobs, allow_shell=config.allow_shell,
                                       model=config.model)
        except ToolError as error:  # a root that is not a folder
            raise InputError(error.message, error.hint) from None
        self._specs: dict[str, tuple[ToolSpec, Any]] = {
            spec.name: (spec, self.workspace) for spec in default_registry().specs(self.workspace)
        }
        if session is not None or blobs is not None:
            source = RecallSource(session, blobs, self.workspace.limits)
            self._specs[recall.spec.name] = (recall.spec, source)
        self._memory: Any = None
        self._memory_lock = threading.Lock()  # the index and its SQLite connection serve one call at a time
        self._session = session
        if config.memory is not None or session is not None:
            self._memory = _memory_tools(config, session, self.workspace)
        self._tools = self._list()

    def _list(self) -> list[ServedTool]:
        out = [ServedTool(name, _description(spec), spec.parameters, name in READ_ONLY_TOOLS)
               for name, (spec, _) in self._specs.items()]
        if self._memory is not None:
            from ctxwin.memory.tools import SPECS

            searchable = self._session is not None or self.config.sessions_root is not None
            out.extend(ServedTool(s.name, s.description, s.parameters, s.name in READ_ONLY_TOOLS)
                       for s in SPECS.values()
                       if s.name not in UNSERVED_MEMORY_TOOLS
                       and (searchable if s.name == "conversation_search" else self.config.memory is not None))
        return out

    def tools(self) -> list[ServedTool]:
        return list(self._tools)

    def names(self) -> list[str]:
        return [t.name for t in self._tools]

    def call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolOutput:
        """Runs one tool with a client's arguments; an error output for anything it cannot do (a
        failure of ctxwin itself included: it is logged here, and the client gets one line)."""
        try:
            return self._call(name, arguments)
        except CtxwinError as error:  # e.g. a memory index that cannot be written
            if not isinstance(error, InputError):  # the server's trouble, not the client's: the operator is told
                LOG.warning("tool %s failed: %s: %s", name, type(error).__name__, error.message)
            return ToolOutput.error(ToolError("failed", error.message, error.hint))
        except Exception as error:
            LOG.exception("tool %s failed", name)
            return ToolOutput.error(ToolError("internal", f"{name} failed inside ctxwin: {type(error).__name__}.",
                                              "The server's log has the details; try another way meanwhile."))

    def _call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolOutput:
        served = self._specs.get(name)
        if served is not None:
            spec, target = served
            try:
                checked = validate_args(spec, arguments)
            except ToolError as error:
                return ToolOutput.error(error)
            return spec.invoke(target, checked)
        if self._memory is not None and name in self.names():
            return self._memory_call(name, arguments)
        return ToolOutput.error(ToolError("unknown_tool", f"Unknown tool {str(name)[:100]!r}.",
                                          f"Tools: {', '.join(self.names())}."))

    def _memory_call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolOutput:
        with self._memory_lock:
            if name == "conversation_search" and self._session is not None:
                from ctxwin.memory.recall import index_stored_session

                index_stored_session(self._memory.index, self._session)  # what the agent logged since the last call
            result = self._memory.run(name, arguments)
        return ToolOutput(result.text, is_error=result.is_error, details=dict(result.details))

    def close(self) -> None:
        if self._memory is not None:
            self._memory.index.close()


def _checked_session(path: Path | None) -> Path | None:
    if path is None:
        return None
    from ctxwin.store.session import is_session_dir

    if not is_session_dir(path):
        raise InputError(f"no stored session at {path}", "give --store DIR and a --session ID that "
                         "`ctxwin sessions --root DIR` lists")
    return path


def _memory_tools(config: McpConfig, session: Path | None, roots: Workspace) -> Any:
    """The library's MemoryTools over the memory folder's index; with a session but no memory folder,
    over an index in memory of the sessions alone (only conversation_search is then served).
    semantic_search_files indexes the first root (where relative paths resolve, so the paths it
    returns are the ones read takes) under the roots' own deny list and hard-link rule."""
    from ctxwin.memory import MemoryIndex, embedder_from_spec, open_workspace_index
    from ctxwin.memory.files import FileScope
    from ctxwin.memory.tools import MemoryTools
    from ctxwin.store.session import Session

    session_id = None
    if session is not None:
        with Session.open(session, readonly=True) as log:
            session_id = log.session_id
    embedder = embedder_from_spec(config.embedder)
    if config.memory is not None:
        index, _report = open_workspace_index(config.memory, embedder)
        workspace = config.memory
    else:
        assert session is not None
        index, workspace = MemoryIndex.open(":memory:", embedder), session  # the workspace is never read
    files = FileScope(Path(roots.roots[0]), roots.deny, roots.allow_hard_links)
    return MemoryTools(workspace, index, session=session_id, sessions_root=config.sessions_root, files=files)
