"""Which conversation a request belongs to, and the engines that manage them.

Identity, first match wins: `x-ctxwin-session`, Claude Code's `x-claude-code-session-id` or the
`_session_<uuid>` in `metadata.user_id`, Codex's `session-id` header, Pi's `session_id` (header or
body), OpenAI's `prompt_cache_key`. An agent sends the same header on its side requests (titles,
summaries) and on its sub-agents' conversations, so the header alone would merge them: the session is
the header id plus a discriminator of the conversation (the hash of the system prompt and the first
user message, as text, so a moved `cache_control` marker or a re-encoded block does not change it).
Without any header the discriminator alone names the session. An agent's own compaction that rewrites
the first user message therefore continues in a new session (under the same header id, so the two
are found together); an edit or rewind after the first message is a branch of the same session
(`engine.sync`).

Engines live behind `SessionStore`: `lease(session_id, spec)` is an async context manager that gives
the caller the session's engine alone for the duration (a per-session `asyncio.Lock` here; the
PostgreSQL store of `proxy.shared` takes a cross-process advisory lock and reopens the engine when
another worker advanced the log). `MemorySessionStore` keeps the engines of one process, over an
in-memory log or a JSONL folder per session.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import re
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctxwin import policies, telemetry
from ctxwin.engine import ContextEngine
from ctxwin.policies.model import Policy
from ctxwin.store.base import Entry, EntryKind, SessionLog, StoreProblem
from ctxwin.store.blobs import FileBlobStore
from ctxwin.store.in_memory import MemorySessionLog
from ctxwin.store.session import Session

from .config import ProxyConfig
from .limits import budget_for

MAX_OPEN_ENGINES = 512
"""Engines one process keeps open; the least recently used beyond this is closed (its log stays)."""
MAX_ID_CHARS = 80  # of the header part of a session id (what a folder name can take comfortably)
DISCRIMINATOR_CHARS = 16  # hex digits of the conversation hash in a session id
CLAUDE_CODE_USER_SESSION = re.compile(r"_session_([0-9A-Za-z-]+)")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

HEADER_SOURCES = (  # (header, what it is), in the order they win
    ("x-ctxwin-session", "ctxwin"),
    ("x-claude-code-session-id", "claude-code"),
    ("session-id", "codex"),
    ("session_id", "pi"),
)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """`id`: the store's name for the session (safe as a folder name). `source`: which rule found it
    (`ctxwin`, `claude-code`, `codex`, `pi`, `prompt-cache-key`, or `conversation` for the hash
    alone). `agent_id`: the header's id as sent (None for the hash alone)."""

    id: str
    source: str
    agent_id: str | None = None


def conversation_hash(system_text: str, first_user_text: str) -> str:
    """The discriminator: system prompt and first user message, as text."""
    digest = hashlib.blake2b(digest_size=DISCRIMINATOR_CHARS // 2)
    digest.update(system_text.encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(first_user_text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def agent_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> tuple[str, str] | None:
    """(source, id) of the agent's own session id, first match wins; None when it sent none."""
    for header, source in HEADER_SOURCES[:2]:
        value = headers.get(header)
        if value:
            return source, value
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, Mapping) else None
    if isinstance(user_id, str):
        found = CLAUDE_CODE_USER_SESSION.search(user_id)
        if found:
            return "claude-code", found.group(1)
    for header, source in HEADER_SOURCES[2:]:
        value = headers.get(header)
        if value:
            return source, value
    pi = body.get("session_id")
    if isinstance(pi, str) and pi:
        return "pi", pi
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and key:
        return "prompt-cache-key", key
    return None


def session_key(headers: Mapping[str, str], body: Mapping[str, Any], system_text: str,
                first_user_text: str) -> SessionKey:
    """The session of one request (headers lower-cased, as Starlette gives them)."""
    discriminator = conversation_hash(system_text, first_user_text)
    found = agent_session(headers, body)
    if found is None:
        return SessionKey(f"c-{discriminator}", "conversation")
    source, agent_id = found
    return SessionKey(f"{safe_id(agent_id)}-{discriminator}", source, agent_id)


def safe_id(value: str) -> str:
    """A header's id as a folder-safe name: kept when it already is one, else cleaned and suffixed
    with a hash of the original, so two ids never collide after cleaning."""
    cleaned = _UNSAFE.sub("_", value)[:MAX_ID_CHARS].lstrip(".") or "_"
    if cleaned == value:
        return value
    return f"{cleaned}~{hashlib.blake2b(value.encode('utf-8', 'surrogatepass'), digest_size=4).hexdigest()}"


# --------------------------------------------------------------------------------------------------
# Engines


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """How to build a session's engine, from the first request that opens it. `max_output` is the
    output limit that request asked for (`max_tokens`), which the reserve is sized on; None takes
    the model registry's. `policy`: a preset's name or a file (the engine follows it), or the policy
    itself (the proxy's, which follows its file for every session)."""

    model: str | None
    policy: str | Policy
    window: int | None = None
    max_output: int | None = None
    reread_hint: bool = False  # placeholders say how to re-read a file (no recall tool offered)


def session_policy(policy: Policy, *, reread_hint: bool) -> Policy:
    """The policy a proxy session runs: with `reread_hint`, placeholders say how to re-read a file
    (no recall tool is offered to get it back)."""
    if not reread_hint or policy.mask.reread_hint:
        return policy
    return policy.model_copy(update={"mask": policy.mask.model_copy(update={"reread_hint": True})})


def build_engine(log: SessionLog, spec: EngineSpec) -> ContextEngine:
    """The engine every store builds for a session log (one recipe, so workers agree)."""
    policy: str | Policy = spec.policy
    if spec.reread_hint:
        policy = session_policy(policies.get(spec.policy), reread_hint=True)
    engine = ContextEngine(log, model=spec.model, policy=policy, window=spec.window, max_output=spec.max_output)
    telemetry.instrument(engine)  # spans for its prepare/compact/recover when telemetry is configured
    return engine


class DraftLog:
    """A session log that reads a real one and keeps its own appends in memory, so an engine over it
    can sync and prepare a request that is only being looked at (count_tokens counts a draft) while
    the real log never sees it. Blobs are the real log's (content-addressed: a draft's large result
    may leave its bytes there, never an entry)."""

    def __init__(self, base: SessionLog) -> None:
        self.session_id = base.session_id
        self.blobs = base.blobs
        self._base = base
        self._own: dict[str, Entry] = {}
        self._leaf = base.leaf_id

    @property
    def leaf_id(self) -> str | None:
        return self._leaf

    @property
    def problems(self) -> list[StoreProblem]:
        return []  # the real log's were reported by its own engine

    def append(self, kind: EntryKind, payload: dict[str, Any], *, parent_id: str | None = None) -> Entry:
        entry = Entry(f"draft{len(self._own) + 1:06d}", parent_id if parent_id is not None else self._leaf, kind,
                      datetime.datetime.now(datetime.UTC).isoformat(), payload)
        self._own[entry.id] = entry
        self._leaf = entry.id
        return entry

    def branch(self, entry_id: str | None) -> None:
        if entry_id is not None:
            self.get(entry_id)  # KeyError for an unknown entry, as the real logs do
        self._leaf = entry_id

    def path(self, leaf_id: str | None = None) -> list[Entry]:
        own: list[Entry] = []
        current = leaf_id if leaf_id is not None else self._leaf
        while current is not None and current in self._own:
            own.append(self._own[current])
            current = self._own[current].parent_id
        base = self._base.path(current) if current is not None else []
        return [*base, *reversed(own)]

    def get(self, entry_id: str) -> Entry:
        own = self._own.get(entry_id)
        return own if own is not None else self._base.get(entry_id)

    def __iter__(self) -> Iterator[Entry]:
        return iter([*self._base, *self._own.values()])

    def __len__(self) -> int:
        return len(self._base) + len(self._own)

    def close(self) -> None:
        pass


def draft_engine(engine: ContextEngine) -> ContextEngine:
    """An engine like `engine`, over a `DraftLog` of its session: what it appends stays in memory."""
    return ContextEngine(DraftLog(engine.session), model=engine.model, policy=engine.policy, counter=engine.counter,
                         window=engine.window, max_output=engine.max_output)


OUTPUT_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def output_limit(body: Mapping[str, Any]) -> int | None:
    """The output a request asks room for (`max_tokens`, `max_completion_tokens`, `max_output_tokens`);
    None when it names none."""
    return next((body[k] for k in OUTPUT_LIMIT_FIELDS if isinstance(body.get(k), int) and not isinstance(body[k], bool)
                 and body[k] > 0), None)


def engine_spec(body: Mapping[str, Any], config: ProxyConfig, policy: Policy | None = None) -> EngineSpec:
    """The spec of the engine for a request's session (used only when the session is opened; each
    request's own output limit is its reserve, `Turn.prepare`); `policy`: the proxy's current one
    (else `config.policy`)."""
    model = body.get("model")
    return EngineSpec(model=model if isinstance(model, str) and model else None,
                      policy=policy if policy is not None else config.policy, window=config.window,
                      max_output=output_limit(body), reread_hint=not config.recall_tool)


class SessionStore(Protocol):
    """Where a proxy's sessions live. `lease` gives exclusive use of a session's engine, up to date
    with its log, until the context exits; opening a session that does not exist creates it."""

    def lease(self, session_id: str, spec: EngineSpec) -> AbstractAsyncContextManager[ContextEngine]: ...

    def session_ids(self) -> list[str]:
        """The sessions this store knows of (for the dashboard)."""
        ...

    def settle(self, engine: ContextEngine) -> None:
        """Makes what the leased `engine` wrote durable now (a store that batches a request's writes
        commits them; called just before the caller has its answer)."""
        ...

    async def aclose(self) -> None: ...


@dataclass
class _Slot:
    engine: ContextEngine | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # requests holding or waiting for `lock`


class MemorySessionStore:
    """Engines of one process: an in-memory log per session (blobs in a temporary folder removed at
    close), or a JSONL session folder under `store_dir`. One `asyncio.Lock` per session."""

    def __init__(self, store_dir: Path | None = None, *, max_open: int = MAX_OPEN_ENGINES) -> None:
        self.store_dir = store_dir
        self.max_open = max_open
        self._slots: OrderedDict[str, _Slot] = OrderedDict()
        self._known: dict[str, None] = {}
        self._scratch: Path | None = None
        self._logs: dict[str, SessionLog] = {}  # in memory: the logs, which outlive their engines

    @classmethod
    def for_config(cls, config: ProxyConfig) -> MemorySessionStore:
        """The store of `config`; JSONL sessions kept open up to what the file limit allows beside
        the connections (`limits.budget_for`)."""
        if config.store_dir is None:
            return cls(None)
        return cls(config.store_dir, max_open=min(MAX_OPEN_ENGINES, budget_for(config).sessions))

    def _open_log(self, session_id: str) -> SessionLog:
        if self.store_dir is not None:
            return Session.open(self.store_dir / session_id, lock_timeout=10)
        log = self._logs.get(session_id)
        if log is None:
            if self._scratch is None:
                self._scratch = Path(tempfile.mkdtemp(prefix="ctxwin-proxy-blobs-"))
            log = self._logs[session_id] = MemorySessionLog(session_id, blobs=FileBlobStore(self._scratch / session_id))
        return log

    @asynccontextmanager
    async def lease(self, session_id: str, spec: EngineSpec) -> AsyncIterator[ContextEngine]:
        slot = self._slots.get(session_id)
        if slot is None:
            slot = self._slots[session_id] = _Slot()
        self._slots.move_to_end(session_id)
        slot.users += 1
        try:
            async with slot.lock:
                if slot.engine is None:
                    # Opening takes the session's lock and replays its log from disk: off the event loop,
                    # so other sessions go on meanwhile; an idle session is closed first when the cache is
                    # full, so the descriptors the new one needs are free before it asks for them.
                    closing = self._evict(room=1)
                    slot.engine = await asyncio.to_thread(self._open, session_id, spec, closing)
                    self._known[session_id] = None
                yield slot.engine
        finally:
            slot.users -= 1
        closing = self._evict()
        if closing:
            await asyncio.to_thread(_close_logs, closing)

    def _open(self, session_id: str, spec: EngineSpec, closing: list[SessionLog]) -> ContextEngine:
        _close_logs(closing)
        return build_engine(self._open_log(session_id), spec)

    def _evict(self, room: int = 0) -> list[SessionLog]:
        """Takes the least recently used idle sessions out of the cache until at most `max_open -
        room` are open, and returns their logs to close (a JSONL session's files; in memory, the log
        object is kept, and the next request of the session opens an engine over it again)."""
        excess = sum(slot.engine is not None for slot in self._slots.values()) - (self.max_open - room)
        closing: list[SessionLog] = []
        for session_id, slot in list(self._slots.items()):
            if excess <= 0:
                break
            if slot.users or slot.lock.locked():
                continue  # in use, or wanted: never closed under a request
            del self._slots[session_id]
            if slot.engine is not None:
                excess -= 1
                if self.store_dir is not None:
                    closing.append(slot.engine.session)
        return closing

    def session_ids(self) -> list[str]:
        return list(self._known)

    def settle(self, engine: ContextEngine) -> None:
        pass  # every append was durable when it returned (JSONL fsyncs it; in memory there is no disk)

    def busy(self) -> bool:
        """Whether a request holds a session now (its bookkeeping may still be on its way to the log)."""
        return any(slot.lock.locked() for slot in list(self._slots.values()))

    def engines(self) -> dict[str, ContextEngine]:
        """The open engines by session id, now."""
        return {k: s.engine for k, s in self._slots.items() if s.engine is not None}

    def live_engines(self) -> Mapping[str, ContextEngine]:
        """A live view of the open engines by session id (what the dashboard of a proxy whose sessions
        live in memory reads)."""
        return _LiveEngines(self._slots)

    async def aclose(self) -> None:
        for slot in self._slots.values():
            if slot.engine is not None:
                slot.engine.session.close()
        self._slots.clear()
        self._logs.clear()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None


def _close_logs(logs: list[SessionLog]) -> None:
    for log in logs:
        log.close()


class _LiveEngines(Mapping[str, ContextEngine]):
    def __init__(self, slots: Mapping[str, _Slot]) -> None:
        self._slots = slots

    def __getitem__(self, key: str) -> ContextEngine:
        engine = self._slots[key].engine
        if engine is None:
            raise KeyError(key)
        return engine

    def __iter__(self) -> Iterator[str]:
        return iter([k for k, s in list(self._slots.items()) if s.engine is not None])

    def __len__(self) -> int:
        return sum(s.engine is not None for s in list(self._slots.values()))
