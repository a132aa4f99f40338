"""The state of one proxy app: its config, its session store, its upstream and what it remembers of
each session (`Memo`), with the door every request passes (the ctxwin token, the bounded body).

Auth (`config.auth_token`): every request carries the token in `x-ctxwin-token`. `Authorization:
Bearer <token>` is taken as ctxwin's token only when it equals it exactly, and then it is not
forwarded (the provider key then travels in `x-api-key`); any other bearer value is the caller's
provider key and goes upstream as it came. The dashboard's GET pages also take `?token=`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hmac
import sys
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request

from ctxwin import policies
from ctxwin.engine import ContextEngine
from ctxwin.engine.policy_file import PolicyFile
from ctxwin.errors import CtxwinError, ProxyRefusal
from ctxwin.memory.consolidate.schedule import SleepConfig, sleep_time
from ctxwin.policies.model import Policy

from .config import ProxyConfig
from .exchange import Memo
from .sessions import SessionStore, session_policy
from .upstream import TOKEN_HEADER, Upstream, is_bearer

MAX_MEMOS = 256
"""Sessions whose previous request a process remembers (each holds that request's body, ~4 bytes a
token: the memory bought for converting only what changed)."""
MAX_NOTICES = 20  # notices the dashboard shows (the newest)


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the operator of the proxy must know, shown on the dashboard (and said on stderr)."""

    time: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"time": self.time, "message": self.message}


def token_refusal(*, query: bool = False) -> ProxyRefusal:
    """The one answer to a missing or wrong ctxwin token (`query`: where a page may take `?token=`)."""
    where = f"send it in the {TOKEN_HEADER} header" + (", or as ?token= on a page" if query else "")
    return ProxyRefusal(401, "missing or wrong ctxwin token", where)


class Proxy:
    """The application's state: the config, the session store, the upstream (its client opened by the
    lifespan) and the per-session memos."""

    def __init__(self, config: ProxyConfig, store: SessionStore, upstream: Upstream) -> None:
        self.config = config
        self.store = store
        self.upstream = upstream
        self.memos: OrderedDict[str, Memo] = OrderedDict()
        self.notices: deque[Notice] = deque(maxlen=MAX_NOTICES)
        self._refused: str | None = None  # the last policy an engine could not take, as said
        # A live policy file is followed here, once for every session (each engine is handed the
        # policy object), not by each engine: a session opened while the file holds a refused edit
        # starts on the last good policy, and the refusal is said once, not once per session.
        self.policy_file = PolicyFile.watch(config.policy)
        base = self.policy_file.policy if self.policy_file is not None else policies.get(config.policy)
        self.policy = session_policy(base, reread_hint=not config.recall_tool)
        # Engines on disk (JSONL with fsync, PostgreSQL) block on I/O: their work runs in a thread so
        # the event loop keeps relaying other sessions' streams meanwhile.
        self.offload = config.store_dir is not None or config.postgres is not None
        idle = config.consolidate_idle
        sleep = SleepConfig(idle_seconds=idle, after_session=False) if idle else None  # off unless configured
        self.sleep = sleep_time(config.memory_workspace, sleep, sessions=config.store_dir)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        async with self.upstream.open():
            try:
                yield
            finally:
                self.upstream.client = None
                await self.store.aclose()
                if self.sleep is not None:
                    self.sleep.close()

    def memo(self, session_id: str) -> Memo:
        memo = self.memos.get(session_id)
        if memo is None:
            memo = self.memos[session_id] = Memo()
            while len(self.memos) > MAX_MEMOS:
                self.memos.popitem(last=False)
        self.memos.move_to_end(session_id)
        return memo

    def current_policy(self) -> Policy:
        """The policy sessions are served with now: the live policy file's, when it was edited since
        the last look (one `stat`; an edit that is refused is said once, and the last good policy
        stays in force). Called on the event loop only, so one look at a time."""
        watcher = self.policy_file
        change = watcher.check() if watcher is not None else None
        if watcher is not None and change is not None:
            if change.policy is None:
                self.notice(f"the edit of the policy file {watcher.path} was refused: {change.error}")
            else:
                watcher.policy = change.policy
                self.policy = session_policy(change.policy, reread_hint=not self.config.recall_tool)
        return self.policy

    def adopt_policy(self, engine: ContextEngine) -> None:
        """Gives a session's engine the current policy (for its new decisions; what it decided stays)."""
        try:
            engine.policy = self.policy
        except CtxwinError as error:  # valid, but no budget fits this session's model with it
            message = f"the edited policy {self.config.policy} does not fit model {engine.model}: {error}"
            if message != self._refused:
                self._refused = message
                self.notice(message)

    def notice(self, message: str) -> None:
        """One line on stderr, and the dashboard's notices."""
        self.notices.append(Notice(datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), message))
        print(f"ctxwin proxy: {message}", file=sys.stderr, flush=True)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, in a thread when the engines block on I/O."""
        if self.offload:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    # ------------------------------------------------------------------------------------------ the door

    def check_token(self, request: Request, *, query: bool = False) -> bool:
        """Whether the caller's ctxwin token is right (always, when none is configured)."""
        token = self.config.auth_token
        if token is None:
            return True
        given = request.headers.get(TOKEN_HEADER)
        if given is None:
            if is_bearer(request.headers.get("authorization", ""), token):
                return True
            if query:
                given = request.query_params.get("token")
        return given is not None and hmac.compare_digest(given.encode(), token.encode())

    def require_token(self, request: Request, *, query: bool = False) -> None:
        if not self.check_token(request, query=query):
            raise token_refusal(query=query)

    async def read_body(self, request: Request) -> bytes:
        """The body, refused with 413 as soon as it passes the limit (not after reading it all)."""
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise ProxyRefusal(413, f"request body of {int(declared):,} bytes is over the proxy's limit of "
                                    f"{limit:,} bytes", "raise --max-body-bytes or send a smaller request")
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ProxyRefusal(413, f"request body over the proxy's limit of {limit:,} bytes",
                                   "raise --max-body-bytes or send a smaller request")
            chunks.append(chunk)
        return b"".join(chunks)


__all__ = ["MAX_MEMOS", "Notice", "Proxy", "token_refusal"]
