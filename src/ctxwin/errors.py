"""Every error ctxwin raises on purpose, in one tree. Each says what went wrong and what to do about it
(`hint`); the CLI prints them without a traceback and exits with the class's `exit_code`.

    CtxwinError
    ├── InputError                 a file, argument or message ctxwin cannot use as given (exit 2)
    │   ├── ArgumentError          an argument of an unusable value: an unknown name, a number out of range
    │   ├── MessageFormatError     a message or provider payload not in the shape its format documents
    │   ├── MissingExtraError      an optional extra that is not installed (the hint: what to pip install)
    │   ├── EntryFormatError       a stored log entry without the shape its kind promises
    │   ├── BlobNotFoundError      a handle that names no blob
    │   ├── BlobCorruptedError     stored bytes that no longer match their hash (never served)
    │   ├── SessionFormatError     a session file or database that is not a session log
    │   ├── NotARegularFileError   a FIFO, device, socket or folder where a file was needed
    │   ├── FileTooLargeError      a file, or what it decompresses to, over the cap
    │   ├── JSONTooDeepError       JSON nested deeper than the limit
    │   ├── MalformedJSONError     text that does not parse as JSON (with the position)
    │   ├── ToolError              a tool refusing a call (a reason code, a hint)
    │   ├── SubagentError          a sub-agent request that cannot run as asked
    │   ├── AgentDefinitionError   agent definition files that cannot be used (each file named)
    │   ├── MemoryPathError        a memory path outside the memory folder
    │   ├── MemoryEditError        a memory edit that cannot apply (no match, several)
    │   ├── TelemetryError         telemetry asked for but not available as configured
    │   ├── ProxyRefusal           a request the proxy refuses (bad JSON, too large, bad token): a ProxyError
    │   └── BlobNotTextError       a blob recalled as text that is not UTF-8 (its bytes are intact)
    ├── ContextBudgetError         no request can be made to fit (the system prompt alone is too large)
    ├── ContextOverflowError       the provider keeps rejecting the request as too long after recovery
    ├── CompactionFailed           a compaction that did not happen; history is untouched
    ├── SummaryFailed              a model summary failed with no fallback
    ├── SessionLockedError         another writer holds the session
    ├── EncodingError              a vendored tokenizer file is missing or corrupt
    ├── ProviderError              a provider's HTTP error, error event or malformed answer
    ├── ProxyError                 an answer the proxy gives itself (`status`): ProxyRefusal, UpstreamError
    │   └── UpstreamError          the proxy's upstream unreachable, too slow or unrelayable (502, 504)
    ├── ModelCallCancelled         a model call stopped by its cancel event
    ├── Interrupted                the user stopped the agent's current step (Ctrl-C)
    ├── ToolDefinitionError        a function that cannot be registered as a tool
    ├── MemoryIndexError           the memory index cannot be used as asked
    └── EmbedderError              an embedder that cannot load or embed

Catch `CtxwinError` for everything, or the one leaf you care about. Every package's errors live here,
so one import finds any; the packages re-export their own (`ctxwin.store.SessionLockedError` is this
one). `tests/test_architecture.py` checks that no module outside this one defines a public error.
"""

from __future__ import annotations

from typing import Any


class CtxwinError(Exception):
    """Base class. `hint` is the one sentence telling the user what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class InputError(CtxwinError):
    """A file or argument ctxwin cannot use as given (malformed, binary, empty, wrong format)."""

    exit_code = 2


class ArgumentError(InputError, ValueError):
    """An argument whose value ctxwin cannot use: an unknown name (a tokenizer, a pricing scheme, a
    summary style), a number out of range, a value of the wrong type. Also a `ValueError`, which is
    what these raised before this leaf existed, so code written against the built-in still catches it."""


class MissingExtraError(InputError, ImportError):
    """An optional extra (a framework adapter, the proxy's server, PostgreSQL) that is not installed;
    the hint names the `pip install 'ctxwin[...]'` that brings it. Also an `ImportError`, which is what
    importing a module of a missing extra raises anywhere else."""


class MessageFormatError(InputError, ValueError):
    """A message, a block or a provider payload that is not in the shape its format documents: not a
    JSON object where one is needed, an unknown role or block type, a field of the wrong type, a block
    its role cannot hold. Also a `ValueError`, as the converters raised before this leaf existed."""


# --- the engine and its stages


class ContextBudgetError(CtxwinError):
    """The request cannot be made to fit: the message says which part is too large."""

    def __init__(self, message: str, *, tokens: int, budget: int, hint: str | None = None) -> None:
        super().__init__(message, hint or "use a model with a larger window, or shorten the system prompt and tools")
        self.tokens = tokens
        self.budget = budget


class ContextOverflowError(CtxwinError):
    """The provider keeps rejecting the request as too long after every recovery step."""


class CompactionFailed(CtxwinError):
    """A compaction that did not happen (nothing to summarize, the summarizer failed, too little gain).
    History is kept as it was; `tokens_before` is the view's size when it was tried."""

    def __init__(self, message: str, tokens_before: int) -> None:
        super().__init__(message, "history is kept as it was; the fit stage still guarantees the request fits")
        self.tokens_before = tokens_before


# --- tokens


class EncodingError(CtxwinError):
    """A vendored encoding is missing or corrupt (the package install is broken)."""


# --- compaction


class SummaryFailed(CtxwinError):
    """The model summary failed and there was no fallback. History is unchanged."""


# --- the store


class EntryFormatError(InputError):
    """A stored log entry whose payload does not have the shape its kind promises."""


class BlobNotFoundError(InputError):
    """A handle that names no blob in this store (or is not a handle at all)."""


class BlobCorruptedError(InputError):
    """Stored bytes that no longer match their sha256, or a blob file that is not a regular file of
    its recorded size: refused, never served. An InputError (a stored file ctxwin cannot use as it
    is), so tools answer it as a refusal rather than raising."""


class SessionLockedError(CtxwinError):
    """Another writer holds the session (or another worker is compacting it)."""


class SessionFormatError(InputError):
    """A session file or database ctxwin cannot read as a session log."""


# --- files: the guarded reader (ctxwin.files)


class NotARegularFileError(InputError):
    """A path that is a FIFO, a device, a socket or a directory where a regular file was needed."""


class FileTooLargeError(InputError):
    """A file, or what a compressed file expands to, over the configured cap."""


class JSONTooDeepError(InputError):
    """JSON nested deeper than the configured limit."""


class MalformedJSONError(InputError):
    """Text that does not parse as JSON; `msg`, `pos`, `lineno` and `colno` say where, as in
    `json.JSONDecodeError`."""

    def __init__(self, msg: str, pos: int, lineno: int, colno: int) -> None:
        super().__init__(f"not valid JSON: {msg} (line {lineno}, column {colno})", "check the file is JSON")
        self.msg = msg
        self.pos = pos
        self.lineno = lineno
        self.colno = colno


# --- providers: model clients and their streams

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})  # 529: Anthropic's "overloaded"


class ProviderError(CtxwinError):
    """A model call the provider answered with an HTTP error, an error event in its stream, or an answer
    that is not what its API documents (then `status_code` is the HTTP status it came with, usually 200).
    `body` is the parsed JSON body when it was JSON, else the raw text ("" when the response had no
    body); `message` the provider's own message when it gave one; `retry_after` the seconds the server
    asked to wait, when it said. `ctxwin.providers.overflow.is_overflow_error` reads all of it."""

    def __init__(self, status_code: int, body: Any, message: str, provider: str,
                 retry_after: float | None = None) -> None:
        super().__init__(f"{provider} API error {status_code}: {message}")
        self.status_code = status_code
        self.body = body
        self.message = message
        self.provider = provider
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.provider} API error {self.status_code}: {self.message}"

    @property
    def retryable(self) -> bool:
        """429, 5xx, 529 and any "overloaded" error: worth trying again after a wait."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        return self.status_code in RETRY_STATUSES or kind in ("overloaded_error", "rate_limit_error")




class ModelCallCancelled(CtxwinError):
    """A model call (or its stream, or the wait before a retry) stopped because its cancel event was set."""


# --- agent (the loop and sub-agents)


class Interrupted(CtxwinError):
    """The user stopped the current step (Ctrl-C): raised inside the agent loop, caught by `run`."""

    def __init__(self, message: str = "the step was stopped (Ctrl-C)", hint: str | None = None) -> None:
        super().__init__(message, hint)


class SubagentError(InputError):
    """A sub-agent request that cannot run as asked (a fork of a fork, another model for a fork, too
    deep, too many at once); the model gets it as a tool error."""


class AgentDefinitionError(InputError):
    """Agent definition files that cannot be used: `problems` holds (file, what is wrong) for each."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = list(problems)
        lines = "".join(f"\n  {source}: {message}" for source, message in self.problems)
        super().__init__(f"{len(self.problems)} agent definition file(s) cannot be used:{lines}",
                         "fix each file: YAML front matter between '---' lines (name, description, tools, model, "
                         "skills ...), then the system prompt")


# ---- tools


class ToolError(InputError):
    """A tool refusing a call: `reason` is a short code (`outside_roots`, `denied`, `fifo`, ...),
    the message says what happened and the hint what to do instead."""

    def __init__(self, reason: str, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.reason = reason




class ToolDefinitionError(CtxwinError):
    """A function registered as a tool cannot become one (no docstring line or type for a parameter,
    a type JSON Schema cannot state, a name providers refuse, a name already taken)."""


# memory (memory files, the hybrid index, memory tools)


class MemoryPathError(InputError):
    """A memory-tool path outside the memory folder (`..`, absolute, a symlink out) or of the wrong kind."""


class MemoryEditError(InputError):
    """A memory edit that cannot apply as asked: a `str_replace` matching zero or several times, an
    insert line out of range, a create over an existing file."""


class MemoryIndexError(CtxwinError):
    """The memory index cannot be opened, built or searched (after a rebuild was tried)."""


class EmbedderError(CtxwinError):
    """An embedder that cannot load or answer (missing package, endpoint down, wrong dimensions)."""


# --- telemetry (ctxwin.telemetry)


class TelemetryError(InputError):
    """Telemetry was asked for (`CTXWIN_OTEL=1`, an exporter named in `OTEL_TRACES_EXPORTER`) but cannot
    be set up as configured: the extra is not installed, or the exporter or protocol is unknown."""


# --- proxy (the proxy application: answers it gives itself)


class ProxyError(CtxwinError):
    """An answer the proxy gives itself instead of forwarding the request or relaying the upstream's:
    `status` is the HTTP status the caller gets, in its own API's error shape. The request's fault is
    a `ProxyRefusal` (4xx); the upstream's an `UpstreamError` (5xx). Catch this class for both."""

    def __init__(self, status: int, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.status = status


class ProxyRefusal(ProxyError, InputError):
    """A request the proxy refuses instead of forwarding (malformed JSON, a body over the size limit,
    a wrong or missing ctxwin token, an unknown endpoint, a conversation it cannot read or fit): the
    caller's input is at fault (an InputError), the status a 4xx."""


class UpstreamError(ProxyError):
    """The proxy's upstream failed this request: unreachable or broke off its answer (502), did not
    answer in time (504), or sent what cannot be relayed (an answer over the limit, a stream that is not
    the API's events: 502). The caller's request may be fine as it is: trying again is the remedy."""


# --- engine: recall


class BlobNotTextError(InputError):
    """A blob asked for as text (`ContextEngine.recall`) whose bytes are not UTF-8; they stay intact
    in the blob store."""
