"""The memory tools, their schemas (OpenAI, OpenAI Responses, Anthropic, JSON Schema, like the other
tools) and one runner. A model's call never raises: refusals and bad arguments come back as error
outputs that say what to do.

- `memory_search {query, max_results, min_score, hops, max_chars}`: hybrid search of MEMORY.md and
  memory/*.md; each hit's matching text within `max_chars` for all hits, with path, line range, date and
  a ref (OpenClaw's, plus Letta's search agent for chained questions: `hops`).
- `memory_get {path, from, lines}`: read lines of a memory file (a hit's ref, `memory/x.md:3-5`, is a
  path too); a missing file is empty text.
- `memory {command, ...}`: Anthropic's `memory_20250818` commands (view, create, str_replace, insert,
  delete, rename) inside the memory folder (`/memories/...` names it), confined like every tool.
- `conversation_search {query, roles, limit, start_date, end_date, all_sessions, hops, max_chars}`:
  every message of the session log, evicted and masked ones included; each hit carries the `recall` ref.
- `open_files` / `close_files`: Letta's working set, limited by the window.
- `semantic_search_files {query, limit}`: hybrid search of the workspace's files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import re2

from ctxwin.errors import InputError, MemoryEditError, MemoryPathError
from ctxwin.memory.files import MEMORY_DIR, MEMORY_FILE, FileScope
from ctxwin.memory.hops import MAX_HOPS
from ctxwin.memory.index import MemoryIndex, SearchResult
from ctxwin.memory.recall import DEFAULT_LIMIT, ROLES, conversation_search, index_sessions
from ctxwin.memory.sandbox import ROOT_ALIAS, Confined, parts_of
from ctxwin.memory.snippets import CHARS_PER_RESULT, MIN_RESULT_CHARS
from ctxwin.memory.working_set import WorkingSet
from ctxwin.messages.tools import SchemaFormat, to_format
from ctxwin.paths import re2_options

MAX_RESULTS = 6
"""memory_search's default number of results (OpenClaw's)."""
MIN_SCORE = 0.2
"""memory_search's default floor on the fused score (OpenClaw's 0.35 was tuned to its embeddings;
wordllama's cosines run lower, and a keyword-only hit at 0.3 must not fall under the floor)."""
GET_MAX_LINES = 200
"""Lines memory_get returns when `lines` is not given."""
VIEW_MAX_LINES = 2_000
"""Lines `memory view` shows of a file without view_range."""
MEMORY_COMMANDS = ("view", "create", "str_replace", "insert", "delete", "rename")


@dataclass(frozen=True, slots=True)
class MemoryToolOutput:
    """What the model sees (`text`) and the facts (`details`, plain JSON), like tools' ToolOutput."""

    text: str
    is_error: bool = False
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "is_error": self.is_error, "details": dict(self.details)}


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _int(description: str, minimum: int = 0, default: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer", "minimum": minimum, "description": description}
    if default is not None:
        out["default"] = default
    return out


def _hops() -> dict[str, Any]:
    return {"type": "integer", "minimum": 1, "maximum": MAX_HOPS, "default": 1, "description": (
        "Look-ups chained for you: 1 for a plain search; 2-4 for a question that goes through one thing to "
        "another (the owner of X, then where that owner lives, ...): each hop follows the ids and the values of "
        "the fields your question names that the hits hold (else their names, dates, files) to every note that "
        "holds them; when that leads to several people or things, the ones whose notes match your question "
        "best come first.")}


def _max_chars() -> dict[str, Any]:
    return {"type": "integer", "minimum": MIN_RESULT_CHARS, "description": (
        f"Characters of text for all hits together (default {CHARS_PER_RESULT} per hit asked for): each hit "
        "shows its matching lines first.")}


def _object(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


@dataclass(frozen=True, slots=True)
class MemoryToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]


SPECS: dict[str, MemoryToolSpec] = {s.name: s for s in (
    MemoryToolSpec("memory_search", (
        "Mandatory recall step: search MEMORY.md and memory/*.md (by meaning and by words) before answering "
        "questions about prior work, decisions, dates, people, preferences or todos. Returns the top snippets "
        "with path and line range; read more with memory_get."), _object({
            "query": _str("What to look for, in a few words or a question."),
            "max_results": _int("Most snippets to return.", 1, MAX_RESULTS),
            "min_score": {"type": "number", "minimum": 0, "maximum": 1, "default": MIN_SCORE,
                          "description": "Drop hits scoring below this (0-1)."},
            "hops": _hops(),
            "max_chars": _max_chars(),
        }, ["query"])),
    MemoryToolSpec("memory_get", (
        "Read lines of a memory file (MEMORY.md or memory/...), after memory_search found it. A missing file "
        "returns empty text."), _object({
            "path": _str("MEMORY.md or memory/YYYY-MM-DD.md (as memory_search names it), or a ref from a hit, "
                         "MEMORY.md or memory/wiki/ (memory/2026-01-02.md:4-9: those lines; entry:<id>@<session>: "
                         "that message of a stored session)."),
            "from": _int("First line, 1-based.", 1, 1),
            "lines": _int(f"Number of lines (default {GET_MAX_LINES}).", 1),
        }, ["path"])),
    MemoryToolSpec("memory", (
        "Your memory folder (/memories), kept across sessions. Commands: view {path, view_range?} lists a "
        "folder or shows a file with line numbers; create {path, file_text} makes a new file; str_replace "
        "{path, old_str, new_str} replaces text that occurs exactly once; insert {path, insert_line, "
        "insert_text} inserts after that line (0 = top); delete {path}; rename {old_path, new_path}. Paths "
        "stay inside /memories."), _object({
            "command": {"type": "string", "enum": list(MEMORY_COMMANDS)},
            "path": _str("A path under /memories."),
            "view_range": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2,
                           "description": "[first, last] line to view, 1-based; last -1 for the end."},
            "file_text": _str("Content of the new file (create)."),
            "old_str": _str("Text to replace; must occur exactly once (str_replace)."),
            "new_str": _str("Replacement text (str_replace)."),
            "insert_line": _int("Insert after this line; 0 inserts at the top (insert)."),
            "insert_text": _str("Text to insert (insert)."),
            "old_path": _str("Path to rename (rename)."),
            "new_path": _str("New path (rename)."),
        }, ["command"])),
    MemoryToolSpec("conversation_search", (
        "Search every message of this conversation, including those no longer in your context (summarized, "
        "masked or evicted). Each hit has a ref (entry:<id> or entry:<id>#<call id>): recall it to get the "
        "original text exactly."), _object({
            "query": _str("Words or a question to look for."),
            "roles": {"type": "array", "items": {"type": "string", "enum": list(ROLES)},
                      "description": "Only messages of these roles."},
            "limit": _int("Most hits to return.", 1, DEFAULT_LIMIT),
            "start_date": _str("Only messages on or after this ISO date/time."),
            "end_date": _str("Only messages on or before this ISO date/time (a date covers the whole day)."),
            "all_sessions": {"type": "boolean", "default": False,
                             "description": "Also search the workspace's other sessions."},
            "hops": _hops(),
            "max_chars": _max_chars(),
        }, ["query"])),
    MemoryToolSpec("open_files", (
        "Open files into your working set (shown at the end of your context until closed). The number of open "
        "files and the characters shown per file are limited by your context window; opening more closes the "
        "least recently used."), _object({
            "files": {"type": "array", "minItems": 1, "items": _object({
                "file_name": _str("Path relative to the workspace."),
                "offset": _int("First line to show, 0-based."),
                "length": _int("Number of lines to show.", 1),
            }, ["file_name"])},
            "close_all_others": {"type": "boolean", "default": False},
        }, ["files"])),
    MemoryToolSpec("close_files", "Close files of your working set.", _object({
        "file_names": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    }, ["file_names"])),
    MemoryToolSpec("semantic_search_files", (
        "Search the workspace's files by meaning and by words; returns snippets with path and line range."),
        _object({
            "query": _str("What to look for."),
            "limit": _int("Most snippets to return.", 1, 5),
        }, ["query"])),
)}


def schemas(format: SchemaFormat = "openai", names: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The memory tools' definitions in a provider's format (the shapes `ctxwin.tools.schemas` uses)."""
    out: list[dict[str, Any]] = []
    for name in names or SPECS:
        if name not in SPECS:
            raise InputError(f"unknown memory tool {name!r}", f"memory tools: {', '.join(SPECS)}")
        out.append(to_format(SPECS[name], format))
    return out


def hit_text(result: SearchResult) -> str:
    """One hit as the model reads it: `path:lines · speaker · date (yesterday = ...)`, then its text."""
    head = [f"{result.path}:{result.start_line}" + (f"-{result.end_line}" if result.end_line != result.start_line
                                                     else "")]
    head.extend(x for x in (result.speaker, result.date) if x)
    dates = f" ({'; '.join(result.dates)})" if result.dates else ""
    return f"{' · '.join(head)}{dates} [score {result.score:.2f}]\n{result.text}"


_FILE_REF = re2.compile(r"^(.+):([0-9]{1,9})(?:-([0-9]{1,9}))?$", re2_options())


def parse_file_ref(path: str) -> tuple[str, int, int | None]:
    """(path, first line, line count or None) of `memory/x.md`, `memory/x.md:4` or `memory/x.md:4-9`."""
    match = _FILE_REF.match(path)
    if match is None:
        return path, 1, None
    start = max(int(match.group(2)), 1)
    last = match.group(3)
    return match.group(1), start, (max(int(last) - start + 1, 1) if last else 1)


def numbered(lines: Sequence[str], first: int) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, start=first))


def _check_args(spec: MemoryToolSpec, args: Mapping[str, Any] | None) -> dict[str, Any]:
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise InputError(f"arguments of {spec.name} must be an object, not {type(args).__name__}")
    properties = spec.parameters["properties"]
    unknown = sorted(set(args) - set(properties))
    if unknown:
        raise InputError(f"{spec.name} has no argument {', '.join(unknown)}",
                         f"its arguments: {', '.join(properties)}")
    missing = [n for n in spec.parameters["required"] if args.get(n) in (None, "")]
    if missing:
        raise InputError(f"{spec.name} needs {', '.join(missing)}")
    out: dict[str, Any] = {}
    for name, value in args.items():
        if value is None:
            continue
        kind = properties[name].get("type")
        if kind == "integer":
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                value = int(value)
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InputError(f"{name} must be a whole number, not {value!r}")
        elif kind == "number":
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise InputError(f"{name} must be a number, not {value!r}")
        elif kind == "string" and not isinstance(value, str):
            raise InputError(f"{name} must be a string, not {value!r}")
        elif kind == "boolean" and not isinstance(value, bool):
            raise InputError(f"{name} must be true or false, not {value!r}")
        elif kind == "array" and not isinstance(value, list):
            raise InputError(f"{name} must be a list, not {value!r}")
        if "enum" in properties[name] and value not in properties[name]["enum"]:
            raise InputError(f"{name} must be one of {', '.join(properties[name]['enum'])}, not {value!r}")
        out[name] = value
    return out


class MemoryTools:
    """The memory tools over one workspace. `index` serves the searches (kept up to date with the
    memory files before each search); `session` is the current session's id in the index (its
    entries are added by the engine's sink); `window` sizes the working set; `sessions_root` is the
    folder of the workspace's other sessions, indexed for `conversation_search(all_sessions=true)`;
    `files` is what `semantic_search_files` indexes and `open_files` opens (default: the workspace,
    under the default deny list; give a `Workspace`'s root and deny patterns when it has its own)."""

    def __init__(self, workspace: str | Path, index: MemoryIndex, *, session: str | None = None,
                 window: int | None = None, sessions_root: str | Path | None = None,
                 files: FileScope | None = None) -> None:
        self.workspace = Path(workspace)
        self.index = index
        self.session = session
        self.sessions_root = Path(sessions_root) if sessions_root is not None else None
        self.folder = Confined(self.workspace / MEMORY_DIR, ROOT_ALIAS)
        self.files = Confined(self.workspace, alias=None)
        self.file_scope = files if files is not None else FileScope(self.workspace)
        self.working_set = WorkingSet(Confined(self.file_scope.root, alias=None), window, deny=self.file_scope.deny)
        self._files_indexed = False
        self._runners: dict[str, Callable[[dict[str, Any]], MemoryToolOutput]] = {
            "memory_search": self.memory_search, "memory_get": self.memory_get, "memory": self.memory,
            "conversation_search": self.conversation_search, "open_files": self.open_files,
            "close_files": self.close_files, "semantic_search_files": self.semantic_search_files,
        }

    def schemas(self, format: SchemaFormat = "openai") -> list[dict[str, Any]]:
        return schemas(format, [n for n in SPECS if n != "conversation_search" or self.session])

    def run(self, name: str, args: Mapping[str, Any] | None) -> MemoryToolOutput:
        """Runs one memory tool with a model's arguments; never raises for what the model sent."""
        spec = SPECS.get(name)
        if spec is None:
            return MemoryToolOutput(f"Unknown memory tool {name!r}. Tools: {', '.join(SPECS)}.", True,
                                    {"error": "unknown_tool"})
        try:
            return self._runners[name](_check_args(spec, args))
        except MemoryPathError as error:
            return self._error("outside_memory", error)
        except MemoryEditError as error:
            return self._error("edit", error)
        except InputError as error:
            return self._error("bad_argument", error)
        except FileNotFoundError as error:
            return MemoryToolOutput(f"No such file or folder: {error.filename}", True, {"error": "missing"})
        except FileExistsError as error:
            return MemoryToolOutput(f"{error.filename} already exists; delete or rename it first, or edit it with "
                                    "str_replace / insert.", True, {"error": "exists"})

    @staticmethod
    def _error(reason: str, error: InputError) -> MemoryToolOutput:
        text = f"{error.message}\n{error.hint}" if error.hint else error.message
        return MemoryToolOutput(text, True, {"error": reason})

    # -- search and read

    def memory_search(self, args: dict[str, Any]) -> MemoryToolOutput:
        self.index.index_workspace(self.workspace)
        results = self.index.search(args["query"], k=args.get("max_results", MAX_RESULTS),
                                    min_score=args.get("min_score", MIN_SCORE), sources=["memory"],
                                    hops=args.get("hops", 1), max_chars=args.get("max_chars"))
        payload = {"results": [r.to_dict() for r in results], "provider": "ctxwin",
                   "model": self.index.embedder.name, "fallback": None}
        return MemoryToolOutput("\n\n".join(map(hit_text, results)) or "No matches in memory.", False, payload)

    def _memory_path(self, path: str) -> str:
        parts = parts_of(path, alias=None)
        if parts == [MEMORY_FILE] or (len(parts) > 1 and parts[0] == MEMORY_DIR):
            return "/".join(parts)
        raise MemoryPathError(f"{path!r} is not a memory file", "memory_get reads MEMORY.md and memory/...")

    def memory_get(self, args: dict[str, Any]) -> MemoryToolOutput:
        from ctxwin.memory.consolidate.refs import parse_entry, resolve_entry

        entry = parse_entry(args["path"])  # a consolidated memory's ref to an entry of a stored session
        if entry is not None:
            recalled = resolve_entry(self.sessions_root or self.workspace / ".ctxwin" / "sessions", entry)
            return MemoryToolOutput(recalled, False, {"text": recalled, "ref": args["path"]})
        path, first_ref, count_ref = parse_file_ref(args["path"])
        rel = self._memory_path(path)
        text = self.files.read(rel)
        if text is None:
            return MemoryToolOutput("", False, {"text": "", "path": rel})
        first = max(1, args.get("from", first_ref))
        count = args.get("lines", count_ref if count_ref is not None else GET_MAX_LINES)
        lines = text.split("\n")[first - 1: first - 1 + count]
        body = "\n".join(lines)
        return MemoryToolOutput(body, False, {"text": body, "path": rel, "from": first, "lines": len(lines)})

    def conversation_search(self, args: dict[str, Any]) -> MemoryToolOutput:
        if self.session is None and not args.get("all_sessions"):
            raise InputError("there is no current session to search", "pass all_sessions=true")
        sessions = None if args.get("all_sessions") else [self.session or ""]
        if args.get("all_sessions") and self.sessions_root is not None and self.sessions_root.is_dir():
            index_sessions(self.index, self.sessions_root)  # incremental: what is new since the last call
        hits = conversation_search(self.index, args["query"], sessions=sessions, roles=args.get("roles"),
                                   limit=args.get("limit", DEFAULT_LIMIT), start_date=args.get("start_date"),
                                   end_date=args.get("end_date"), hops=args.get("hops", 1),
                                   max_chars=args.get("max_chars"))
        text = "\n\n".join(f"[{h.ref}] {h.role} {h.timestamp or ''} (score {h.score:.2f})\n{h.snippet}" for h in hits)
        return MemoryToolOutput(text or "No matching messages.", False, {"results": [h.to_dict() for h in hits]})

    def semantic_search_files(self, args: dict[str, Any]) -> MemoryToolOutput:
        self.index.index_workspace(self.workspace, include_files=True, files=self.file_scope)
        results = self.index.search(args["query"], k=args.get("limit", 5), sources=["files"])
        return MemoryToolOutput("\n\n".join(map(hit_text, results)) or "No matching files.", False,
                                {"results": [r.to_dict() for r in results]})

    # -- working set

    def open_files(self, args: dict[str, Any]) -> MemoryToolOutput:
        result = self.working_set.open(args["files"], args.get("close_all_others", False))
        text = f"Opened: {', '.join(result['opened']) or 'nothing'}."
        if result["closed"]:
            text += f" Closed (least recently used, or close_all_others): {', '.join(result['closed'])}."
        if result["missing"]:
            text += f" Not found: {', '.join(result['missing'])}."
        if result["denied"]:
            text += (f" Refused (the workspace deny list names them: secrets and credentials are never opened): "
                     f"{', '.join(result['denied'])}.")
        refused = bool(result["missing"] or result["denied"])
        return MemoryToolOutput(text, not result["opened"] and refused, result)

    def close_files(self, args: dict[str, Any]) -> MemoryToolOutput:
        result = self.working_set.close(args["file_names"])
        return MemoryToolOutput(f"Closed: {', '.join(result['closed']) or 'nothing'}.", False, result)

    # -- the memory_20250818 commands

    def memory(self, args: dict[str, Any]) -> MemoryToolOutput:
        command = args["command"]
        needs = {"view": ("path",), "create": ("path", "file_text"), "str_replace": ("path", "old_str"),
                 "insert": ("path", "insert_line", "insert_text"), "delete": ("path",),
                 "rename": ("old_path", "new_path")}[command]
        missing = [n for n in needs if n not in args]
        if missing:
            raise InputError(f"memory {command} needs {', '.join(missing)}")
        output = getattr(self, f"_{command}")(args)
        if command != "view":
            self.index.index_workspace(self.workspace)  # the edit is searchable at once
        return output

    def _view(self, args: dict[str, Any]) -> MemoryToolOutput:
        path = args["path"]
        kind = self.folder.kind(path)
        if kind is None:
            if not parts_of(path):
                return MemoryToolOutput(f"{ROOT_ALIAS} is empty.", False, {"entries": []})
            raise FileNotFoundError(2, "missing", path)
        if kind == "dir":
            entries = []
            base = parts_of(path)
            for name, is_dir, size in self.folder.listing(path):
                entries.append(f"{size}\t{self.folder.display([*base, name])}{'/' if is_dir else ''}")
                if is_dir:
                    entries.extend(f"{s}\t{self.folder.display([*base, name, n])}{'/' if d else ''}"
                                   for n, d, s in self.folder.listing("/".join([*base, name])))
            head = f"Files and folders in {self.folder.display(base)} (2 levels, hidden items left out):\n"
            return MemoryToolOutput(head + "\n".join(entries), False, {"entries": entries})
        text = self.folder.read(path) or ""
        lines = text.split("\n")
        first, last = 1, min(len(lines), VIEW_MAX_LINES)
        if "view_range" in args:
            rng = args["view_range"]
            if len(rng) != 2 or not all(isinstance(n, int) for n in rng):
                raise InputError("view_range is [first, last]", "e.g. [1, 20], or [10, -1] for the rest")
            first, last = rng[0], len(lines) if rng[1] == -1 else rng[1]
            if first < 1 or first > max(len(lines), 1) or last < first:
                raise InputError(f"view_range {rng} is outside the file's 1-{len(lines)} lines")
            last = min(last, len(lines))
        body = numbered(lines[first - 1:last], first)
        more = f"\n[{len(lines) - last} more lines: view_range=[{last + 1}, -1]]" if last < len(lines) else ""
        return MemoryToolOutput(f"Content of {self.folder.display(parts_of(path))} with line numbers:\n{body}{more}",
                                False, {"lines": [first, last], "total_lines": len(lines)})

    def _create(self, args: dict[str, Any]) -> MemoryToolOutput:
        try:
            self.folder.write(args["path"], args["file_text"], exclusive=True)
        except FileExistsError:
            raise MemoryEditError(f"{args['path']} already exists: create does not overwrite",
                                  "edit it with str_replace or insert, or delete it first") from None
        return MemoryToolOutput(f"File created successfully at: {self.folder.display(parts_of(args['path']))}")

    def _existing(self, path: str) -> str:
        text = self.folder.read(path)
        if text is None:
            raise FileNotFoundError(2, "missing", path)
        return text

    def _str_replace(self, args: dict[str, Any]) -> MemoryToolOutput:
        path, old, new = args["path"], args["old_str"], args.get("new_str", "")
        text = self._existing(path)
        count = text.count(old)
        if count == 0:
            raise MemoryEditError(f"No replacement was performed: old_str does not occur in {path} (0 matches)",
                                  "view the file and copy the text exactly, whitespace included")
        if count > 1:
            starts, at = [], text.find(old)
            while at != -1:
                starts.append(text.count("\n", 0, at) + 1)
                at = text.find(old, at + 1)
            raise MemoryEditError(f"No replacement was performed: old_str occurs {count} times in {path} "
                                  f"(at lines {starts})", "include more surrounding text so it occurs once")
        self.folder.write(path, text.replace(old, new, 1))
        line = text.count("\n", 0, text.find(old)) + 1
        return MemoryToolOutput(f"The memory file {path} has been edited (line {line}).", False, {"line": line})

    def _insert(self, args: dict[str, Any]) -> MemoryToolOutput:
        path, at, insert = args["path"], args["insert_line"], args["insert_text"]
        text = self._existing(path)
        lines = text.split("\n")
        if at < 0 or at > len(lines):
            raise MemoryEditError(f"insert_line {at} is out of range for {path}: it has {len(lines)} lines",
                                  f"give 0 to {len(lines)}")
        lines[at:at] = insert.removesuffix("\n").split("\n")
        self.folder.write(path, "\n".join(lines))
        return MemoryToolOutput(f"Text inserted after line {at} of {path}.", False, {"line": at})

    def _delete(self, args: dict[str, Any]) -> MemoryToolOutput:
        self.folder.delete(args["path"])
        return MemoryToolOutput(f"Deleted {self.folder.display(parts_of(args['path']))}.")

    def _rename(self, args: dict[str, Any]) -> MemoryToolOutput:
        self.folder.rename(args["old_path"], args["new_path"])
        return MemoryToolOutput(f"Renamed {args['old_path']} to {args['new_path']}.")
