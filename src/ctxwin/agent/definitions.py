"""Agent definitions: what kind of sub-agent `task(agent=...)` starts (`AgentDefinition`), and reading
them from the files Claude Code users already write (`load_definitions`): a folder of Markdown files,
each with YAML front matter (`name`, `description`, `tools`, `disallowedTools`, `model`,
`permissionMode`, `maxTurns`, `skills`, `memory`, `background`) and the agent's system prompt as the
body. ctxwin adds `persistent: true` (a Letta-style stateful agent: its own session, resumed on every
call, and its own memory folder).

Claude Code's tool names map to ctxwin's (Read -> read, Grep -> grep, Glob -> find, LS -> ls, Bash ->
shell, Task/Agent -> task); its tools ctxwin does not have (Edit, Write, WebFetch ...) are left out
with a note, so the files people have load; a name neither knows is an error. Every bad file is
reported, each with what is wrong and where, in one `AgentDefinitionError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from ctxwin import files
from ctxwin.errors import AgentDefinitionError, InputError
from ctxwin.tools import TOOLS

MAX_DEFINITION_BYTES = 1 << 20  # one agent file: a system prompt, not a data set
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")  # Claude Code: lowercase letters and hyphens
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)(?:\r?\n)?^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
CLAUDE_TOOLS = {"Read": "read", "Grep": "grep", "Glob": "find", "LS": "ls", "Bash": "shell", "Task": "task",
                "Agent": "task"}
"""Claude Code's tool names with a ctxwin counterpart."""
CLAUDE_ONLY_TOOLS = frozenset({
    "Edit", "MultiEdit", "Write", "NotebookEdit", "NotebookRead", "WebFetch", "WebSearch", "TodoWrite", "TodoRead",
    "BashOutput", "KillShell", "KillBash", "SlashCommand", "Skill", "ExitPlanMode", "ListMcpResourcesTool",
    "ReadMcpResourceTool", "AskUserQuestion", "LSP",
})
"""Claude Code tools ctxwin does not have: left out of the allowlist, with a note."""
SUBAGENT_TOOLS = ("task", "task_status", "task_wait", "task_cancel")
CTXWIN_TOOLS = frozenset(TOOLS) | frozenset(SUBAGENT_TOOLS)
IGNORED_FIELDS = frozenset({"color", "hooks", "mcpServers", "isolation", "effort"})
"""Claude Code fields ctxwin does not act on: noted, not refused."""
MODEL_ALIASES = {"sonnet": "claude-sonnet-4-6", "opus": "claude-opus-4-7", "haiku": "claude-haiku-4-5"}
"""Claude Code's model aliases; a parent already on that family keeps its own model (see `resolve_model`)."""
READ_ONLY_MODES = frozenset({"plan", "read-only"})  # Claude Code's plan mode does not edit


class AgentDefinition(BaseModel):
    """A kind of sub-agent (Claude Code's `.claude/agents/*.md` front matter, the fields that matter here)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "default"
    """What `task(agent=...)` names; a fork must name its parent's definition."""
    description: str = ""
    """When to use it: shown to the model in the task tool's description."""
    system: str = ("You are a sub-agent. Do the task you are given with the tools you have, then answer with the "
                   "result in text: it is all the requester will see.")
    """The child's own system prompt (isolated children)."""
    tools: list[str] | None = None
    """Tool allowlist (None: every registry tool the workspace and the permission mode allow)."""
    permission_mode: Literal["default", "read-only"] = "default"
    """`read-only`: no shell, whatever the parent may do."""
    workspace_files: list[str] = Field(default_factory=lambda: ["AGENTS.md", "TOOLS.md"])
    """Workspace files put in the child's system prompt (OpenClaw gives children AGENTS.md and TOOLS.md)."""
    skills: list[str] = Field(default_factory=list)
    """Skill files preloaded in full as user messages before the task: a workspace path, an absolute
    path, or a Claude Code skill name (`.claude/skills/<name>/SKILL.md` in the workspace)."""
    max_steps: int = Field(50, ge=1)
    """Model calls the child may make."""
    model: str | None = None
    """The child's model (None: the parent's; `sonnet`, `opus`, `haiku`: Claude Code's aliases)."""
    background: bool = False
    """Always run in the background (`task` returns a handle at once), as Claude Code's `background`."""
    persistent: bool = False
    """A stateful agent (Letta's): one session under the sub-agents' state root, resumed on every call, and
    a memory folder (MEMORY.md and memory/*.md, with the memory tools) that it keeps what it learned in."""
    source: str | None = None
    """The file it was read from."""
    notes: list[str] = Field(default_factory=list)
    """What loading left out (tools ctxwin does not have, fields it does not act on)."""


def load_definitions(folder: str | Path) -> list[AgentDefinition]:
    """The agent definitions in `folder` (its `*.md` files, in name order), validated. Raises
    `AgentDefinitionError` naming every bad file and what is wrong with it."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"agent definitions folder {root} is not a folder",
                         "give --agents a folder of Markdown agent files (like .claude/agents)")
    found: list[AgentDefinition] = []
    problems: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for path in sorted(root.glob("*.md")):
        try:
            text = files.read_text(path, limits=files.FileLimits(max_bytes=MAX_DEFINITION_BYTES))
            definition = parse_definition(text, source=str(path))
        except InputError as error:
            problems.append((str(path), str(error) if not isinstance(error, AgentDefinitionError) else
                             "; ".join(message for _, message in error.problems)))
            continue
        if definition.name in seen:
            problems.append((str(path), f"the name {definition.name!r} is also the name of {seen[definition.name]}"))
            continue
        seen[definition.name] = str(path)
        found.append(_with_skill_files(definition, root))
    if problems:
        raise AgentDefinitionError(problems)
    return found


def _with_skill_files(definition: AgentDefinition, folder: Path) -> AgentDefinition:
    """Skill names found beside the definitions folder (`<folder>/../skills/<name>/SKILL.md`, Claude
    Code's `.claude/skills` next to `.claude/agents`) as the paths of those files; other names are
    looked up in the workspace when the agent starts."""
    def found(name: str) -> str:
        path = folder.parent / "skills" / name / "SKILL.md"
        return str(path.resolve()) if "/" not in name and path.is_file() else name
    return definition.model_copy(update={"skills": [found(s) for s in definition.skills]})


def parse_definition(text: str, *, source: str = "<text>") -> AgentDefinition:
    """One agent file's text as a definition; `AgentDefinitionError` says what is wrong."""
    match = FRONT_MATTER.match(text)
    if match is None:
        raise AgentDefinitionError([(source, "no front matter: the file must start with a '---' line, the YAML "
                                             "fields (name, description, ...), and a closing '---' line")])
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 2})" if mark is not None else ""
        raise AgentDefinitionError([(source, f"the front matter is not valid YAML{where}: "
                                             f"{getattr(error, 'problem', None) or error}")]) from None
    if not isinstance(meta, Mapping):
        raise AgentDefinitionError([(source, "the front matter must be YAML fields (name: ..., description: ...)")])
    problems: list[str] = []
    fields, notes = _fields(dict(meta), text[match.end():].strip(), problems)
    if problems:
        raise AgentDefinitionError([(source, "; ".join(problems))])
    return AgentDefinition(**fields, source=source, notes=notes)


def _fields(meta: dict[str, Any], body: str, problems: list[str]) -> tuple[dict[str, Any], list[str]]:
    notes: list[str] = []
    out: dict[str, Any] = {}
    name = meta.pop("name", None)
    if not isinstance(name, str) or not NAME.match(name):
        problems.append("`name` is required: lowercase letters, digits, '-' and '_' (e.g. code-reviewer)"
                        if name is None else f"`name` {name!r} is not lowercase letters, digits, '-' and '_'")
    else:
        out["name"] = name
    description = meta.pop("description", None)
    if not isinstance(description, str) or not description.strip():
        problems.append("`description` is required: when the agent should be used")
    else:
        out["description"] = description.strip()
    if body:
        out["system"] = body
    tools = _tool_list(meta.pop("tools", None), "tools", problems, notes)
    denied = _tool_list(meta.pop("disallowedTools", None), "disallowedTools", problems, notes) or []
    if tools is not None or denied:
        allowed = tools if tools is not None else sorted(CTXWIN_TOOLS)
        out["tools"] = [t for t in allowed if t not in denied]
    mode = meta.pop("permissionMode", None)
    if mode is not None:
        if not isinstance(mode, str):
            problems.append(f"`permissionMode` must be a string, not {mode!r}")
        else:
            out["permission_mode"] = "read-only" if mode in READ_ONLY_MODES else "default"
    for key, field in (("maxTurns", "max_steps"),):
        value = meta.pop(key, None)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(f"`{key}` must be a whole number of at least 1, not {value!r}")
            else:
                out[field] = value
    model = meta.pop("model", None)
    if model is not None:
        if not isinstance(model, str) or not model.strip():
            problems.append(f"`model` must be a model name, an alias (sonnet, opus, haiku) or inherit, not {model!r}")
        elif model.strip() != "inherit":
            out["model"] = model.strip()
    skills = meta.pop("skills", None)
    if skills is not None:
        listed = _names(skills)
        if listed is None:
            problems.append("`skills` must be a list of skill names or paths (or one comma-separated string)")
        else:
            out["skills"] = listed
    for key in ("background", "persistent"):
        value = meta.pop(key, None)
        if value is not None:
            if not isinstance(value, bool):
                problems.append(f"`{key}` must be true or false, not {value!r}")
            else:
                out[key] = value
    memory = meta.pop("memory", None)
    if memory is not None:
        if memory not in ("user", "project", "local"):
            problems.append(f"`memory` must be user, project or local, not {memory!r}")
        else:
            out["persistent"] = True  # its own memory folder, kept between calls: ctxwin's persistent agent
            notes.append(f"memory: {memory} runs as a persistent agent (its memory folder is under the sub-agents' "
                         "state root, not Claude Code's agent-memory folder)")
    for key in sorted(meta):
        if key in IGNORED_FIELDS:
            notes.append(f"`{key}` is not used by ctxwin")
        else:
            problems.append(f"unknown field `{key}` (fields: name, description, tools, disallowedTools, model, "
                            "permissionMode, maxTurns, skills, memory, background, persistent)")
    return out, notes


def _names(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    return None


def _tool_list(value: Any, key: str, problems: list[str], notes: list[str]) -> list[str] | None:
    """ctxwin tool names for a Claude Code tool list (None: the field is absent)."""
    if value is None:
        return None
    names = _names(value)
    if names is None:
        problems.append(f"`{key}` must be a list of tool names (or one comma-separated string), not {value!r}")
        return None
    out: list[str] = []
    for name in names:
        if "(" in name:
            problems.append(f"`{key}`: {name!r} is a permission rule; ctxwin cannot limit a tool to some uses "
                            f"(list {name.split('(', 1)[0]} for the whole tool, or leave it out)")
        elif name in CLAUDE_TOOLS or name in CTXWIN_TOOLS:
            mapped = CLAUDE_TOOLS.get(name, name)
            if mapped not in out:
                out.append(mapped)
        elif name in CLAUDE_ONLY_TOOLS or name.startswith("mcp__"):
            notes.append(f"`{key}`: {name} has no ctxwin counterpart and is left out")
        else:
            problems.append(f"`{key}`: unknown tool {name!r} (Claude Code's Read, Grep, Glob, LS, Bash, Task, or "
                            f"ctxwin's {', '.join(sorted(CTXWIN_TOOLS))})")
    return out


def resolve_model(name: str | None, parent_model: str) -> str | None:
    """The model a definition asks for: None (the parent's), an alias (a parent on that family keeps
    its model; otherwise the family's newest in the registry), or a model name as written."""
    if name is None or name == parent_model:
        return None
    alias = MODEL_ALIASES.get(name.lower())
    if alias is None:
        return name
    return None if name.lower() in parent_model.lower() else alias
