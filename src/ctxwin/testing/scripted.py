"""Scripted models for the fake provider: what the "model" answers is a script or a function of the
request, so an agent loop can be driven over real HTTP, deterministically, with tool calls, text and
faults (429 with retry-after, 500, overloaded, overflow) at chosen turns.

A model is any `ModelFn`: it gets the `ModelRequest` (the API, the model name, the conversation as
canonical messages, the offered tool names, the server's input count, the call number) and returns a
`Reply`, a `Fault`, or None (the fake's default deterministic reply). The server asks the model only
for requests it accepted: valid, authenticated and within the window (a real model never sees a
request that does not fit).

    fake = FakeProvider(model=Script([
        Reply(calls=(ToolCall("read", {"path": "README.md"}),)),
        rate_limited(retry_after=0.1),
        Reply("done"),
    ]))
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxwin.messages import Message, ToolCall, ToolResult

FaultKind = Literal["rate_limit", "server_error", "overloaded", "overflow", "status"]


@dataclass(frozen=True)
class Call:
    """A tool call the scripted model makes. `id` None: the server makes one in the API's own style.
    `arguments` as a string is sent verbatim as the raw arguments (so a test can send invalid JSON);
    Anthropic's `input` is always an object, so there a string that is not a JSON object arrives as
    `{"raw_arguments": ...}`, the way ctxwin's converters read such calls."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One assistant answer: text, tool calls, or both. `stop_reason` None: the API's own (end_turn /
    tool_use, stop / tool_calls, completed)."""

    text: str = ""
    calls: tuple[Call, ...] = ()
    stop_reason: str | None = None


@dataclass(frozen=True)
class Fault:
    """An error the model's server answers instead of a reply, with each API's real status and body.
    `retry_after` (seconds) and `retry_after_ms` set the headers of those names. `mid_stream`: for a
    streamed request, the stream starts normally and the error arrives as an event in it (Anthropic's
    `event: error`, OpenAI's `{"error": ...}` chunk / `response.failed`), as the real APIs do when a
    model overloads after the first bytes. `status` and `body` serve an arbitrary error (kind "status")."""

    kind: FaultKind
    retry_after: float | None = None
    retry_after_ms: int | None = None
    mid_stream: bool = False
    status: int | None = None
    body: Mapping[str, Any] | None = None


def rate_limited(retry_after: float | None = 1.0, *, retry_after_ms: int | None = None) -> Fault:
    return Fault("rate_limit", retry_after=retry_after, retry_after_ms=retry_after_ms)


def server_error(*, mid_stream: bool = False) -> Fault:
    return Fault("server_error", mid_stream=mid_stream)


def overloaded(*, retry_after: float | None = None, mid_stream: bool = False) -> Fault:
    return Fault("overloaded", retry_after=retry_after, mid_stream=mid_stream)


def overflow() -> Fault:
    """The API's own context-overflow error, as if the request were over the window."""
    return Fault("overflow")


@dataclass(frozen=True)
class ModelRequest:
    """What the scripted model sees of one accepted request."""

    api: Literal["anthropic", "chat", "responses"]
    model: str
    messages: tuple[Message, ...]  # the conversation, system prompt first when there is one
    tools: tuple[str, ...]  # names of the tools the request offers
    input_tokens: int  # the server's count
    call: int  # how many requests the model answered before this one (0 for the first)
    stream: bool
    body: Mapping[str, Any] = field(repr=False, default_factory=dict)

    @property
    def last_user_text(self) -> str:
        users = [m for m in self.messages if m.role == "user" and m.text.strip()]
        return users[-1].text if users else ""

    @property
    def last_results(self) -> tuple[ToolResult, ...]:
        """The tool results that answer the latest assistant message (empty when a user spoke last)."""
        out: list[ToolResult] = []
        for message in reversed(self.messages):
            if message.role != "tool":
                break
            out[:0] = message.tool_results
        return tuple(out)


ModelFn = Callable[[ModelRequest], "Reply | Fault | None"]


class Script:
    """Steps served in order, one per accepted request (a `str` is a text reply). When the steps run
    out, `then` answers (default: the fake's deterministic reply). Thread-safe; `served` counts steps."""

    def __init__(self, steps: Iterable[Reply | Fault | str], then: ModelFn | None = None) -> None:
        self._steps = [Reply(s) if isinstance(s, str) else s for s in steps]
        self._then = then
        self._lock = threading.Lock()
        self.served = 0

    def __call__(self, request: ModelRequest) -> Reply | Fault | None:
        with self._lock:
            if self.served < len(self._steps):
                self.served += 1
                return self._steps[self.served - 1]
        return self._then(request) if self._then is not None else None

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._steps) - self.served


def faults_at(model: ModelFn, faults: Mapping[int, Fault]) -> ModelFn:
    """`model`, except that the requests with these call numbers (0-based, counted by the server over
    every accepted request) get the fault instead; the model is not consulted for them."""

    def faulty(request: ModelRequest) -> Reply | Fault | None:
        fault = faults.get(request.call)
        return fault if fault is not None else model(request)

    return faulty


# --------------------------------------------------------------------------------------------------
# The built-in demo: a long tool-using task over a workspace


DEMO_CALL_ID = re.compile(r"call_demo_t(\d+)_s(\d+)_\d+")
DEMO_TURNS = 60  # model calls per task in `python -m ctxwin.testing --script demo`
DEMO_GREPS = ("def ", "class ", "TODO", "import ", "return ", "raise ", "test_", "self.")
SOURCE_SUFFIXES = (".py", ".md", ".toml", ".txt", ".json", ".js", ".ts", ".rs", ".go", ".sh", ".cfg", ".yaml")
LISTED_PATH = re.compile(r"^\s*(?:\d+\s+)?((?:[\w.-]+/)*[\w.-]+\.\w+)\s*$", re.MULTILINE)
NOTES_FILE = "NOTES.md"  # the file the demo model edits (created through the shell when absent)


def demo_model(turns: int = DEMO_TURNS) -> ModelFn:
    """A deterministic tool-using model for a long task: it lists the workspace, finds files, reads
    them in pages, greps for common patterns, runs shell commands, edits a notes file and checks the
    edit, for `turns` model calls per user message, then answers with a closing summary.

    It keeps no state of its own: the step comes from the call ids of its own latest tool call
    (`call_demo_t<task>_s<step>_<n>`) still in the request, so it continues correctly after a
    compaction, a resume or a server restart. A user message after its latest call starts a new task,
    except a service turn in the middle of a task (one asking for a summary, a checkpoint or a memory
    flush), which does not restart the count: a checkpoint request (the engine's, asking for
    `<checkpoint>...</checkpoint>`) gets that state summary and the next step's call in one answer,
    anything else a text answer (the fake's deterministic summary when one is asked for). A request
    that offers no tools (a summarizer's) gets the fake's default answer. Tools it uses: read, grep,
    find, ls and shell (edits are made through the shell: `printf >>` and `sed -i` on NOTES.md); a tool
    the request does not offer is replaced by the shell, then by text."""

    def model(request: ModelRequest) -> Reply | None:
        if not request.tools:
            return None  # not the agent loop: a summarizer or a plain chat request
        task, step, service = _demo_position(request.messages, turns)
        checkpoint = ""
        if service:
            if CHECKPOINT_TAG not in request.messages[-1].text:
                return None  # a memory flush or summary request: the fake's deterministic text
            files = _seen_files(request.messages)
            checkpoint = (f"<checkpoint>\nTask {task}: step {step} of {turns}. Files seen: "
                          f"{', '.join(files[:20]) or 'none'}. Notes so far in {NOTES_FILE}.\n</checkpoint>\n")
        if step >= turns:
            return Reply(f"Task {task} finished after {turns} model calls. Files seen: "
                         f"{', '.join(_seen_files(request.messages)[:8]) or 'none'}.")
        call = _demo_step(step, _seen_files(request.messages), request.tools)
        if call is None:
            return Reply(f"Step {step}: none of the tools I use is offered; thinking instead.")
        name, arguments = call
        return Reply(f"{checkpoint}Step {step} of {turns}.",
                     (Call(name, arguments, id=f"call_demo_t{task}_s{step}_0"),))

    return model


SERVICE_TURN = re.compile(r"summar|checkpoint|memory|memories|state of (?:the|your) work", re.IGNORECASE)
CHECKPOINT_TAG = "<checkpoint>"  # the engine's checkpoint request asks for the summary inside this tag


def _demo_position(messages: Sequence[Message], turns: int) -> tuple[int, int, bool]:
    """(task, step, service) of the next answer: the step after the newest demo call; a new task when
    a user spoke since (unless that is a service turn in an unfinished task: then `service` is true
    when it is the last message, and the task goes on after it)."""
    for index in range(len(messages) - 1, -1, -1):
        for block in messages[index].blocks:
            found = DEMO_CALL_ID.fullmatch(block.id) if isinstance(block, ToolCall) else None
            if not found:
                continue
            task, step = int(found.group(1)), int(found.group(2))
            later = [m for m in messages[index + 1:] if m.role == "user" and m.text.strip()]
            unfinished = step + 1 < turns
            if any(not (unfinished and SERVICE_TURN.search(m.text)) for m in later):
                return task + 1, 0, False
            service = bool(later) and messages[-1].role == "user" and messages[-1] is later[-1]
            return task, step + 1, service
    return 0, 0, False


def _seen_files(messages: Sequence[Message]) -> list[str]:
    """Source files named in tool results (find/ls/grep output), in order of first appearance."""
    seen: dict[str, None] = {}
    for message in messages:
        for result in message.tool_results:
            for path in LISTED_PATH.findall(result.text):
                if path.endswith(SOURCE_SUFFIXES) and not path.startswith("blob"):
                    seen.setdefault(path, None)
    return list(seen)


def _demo_step(step: int, files: list[str], tools: Sequence[str]) -> tuple[str, dict[str, Any]] | None:
    """The call for this step: a fixed cycle of actions over the files found so far."""
    offered = set(tools)

    def pick(*options: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
        return next(((n, a) for n, a in options if n in offered), None)

    if step == 0:
        return pick(("ls", {}), ("shell", {"command": "ls"}))
    if step == 1 or not files:
        return pick(("find", {"pattern": "*.py"}), ("shell", {"command": "find . -name '*.py' | head -200"}))
    target = files[(step // 8) % len(files)]
    phase = step % 8
    if phase in (0, 1, 2):
        page = phase + (step // 64) * 3
        return pick(("read", {"path": target, "offset": 1 + page * 200, "limit": 200}),
                    ("shell", {"command": f"sed -n '{1 + page * 200},{(page + 1) * 200}p' {target}"}))
    if phase in (3, 4):
        pattern = DEMO_GREPS[(step // 4) % len(DEMO_GREPS)]
        return pick(("grep", {"pattern": pattern, "limit": 50}),
                    ("shell", {"command": f"grep -rn -m 50 {pattern!r} . | head -50"}))
    if phase == 5:
        return pick(("shell", {"command": f"wc -l {target} && head -c 400 {target}"}))
    if phase == 6:  # an edit: append a line, then rewrite the previous one in place
        line, earlier = f"- step {step}: looked at {target}", f"- step {step - 8}:"
        return pick(("shell", {"command": f"printf '%s\\n' {line!r} >> {NOTES_FILE} && sed -i "
                                          f"'s/^{earlier} looked/{earlier} checked/' {NOTES_FILE} && "
                                          f"tail -n 3 {NOTES_FILE}"}))
    return pick(("shell", {"command": f"grep -c step {NOTES_FILE} || true"}), ("read", {"path": NOTES_FILE}))


SCRIPTS: dict[str, Callable[[], ModelFn]] = {"demo": demo_model}

__all__ = [
    "DEMO_TURNS",
    "SCRIPTS",
    "Call",
    "Fault",
    "ModelFn",
    "ModelRequest",
    "Reply",
    "Script",
    "demo_model",
    "faults_at",
    "overflow",
    "overloaded",
    "rate_limited",
    "server_error",
]
