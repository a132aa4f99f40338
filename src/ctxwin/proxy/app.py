"""The proxy as an ASGI application: `create_app(config)`.

Per request to a managed endpoint: read the body (bounded while it arrives), check the ctxwin token,
parse it (orjson), find the session, `engine.sync` the history the agent sent, `engine.prepare`, put
the managed history into the caller's body, forward it with the caller's own headers, relay the
answer (streamed event by event, or whole), and keep a `ProxyRequestEntry` in the session log.
Upstream overflow errors are recovered (`engine.recover`) and retried; `ctxwin_recall` calls are
answered here and the upstream is called again (`recall`, `relay`).

Every field ctxwin does not manage goes through untouched: model, sampling, tools, metadata, the
system prompt, and the headers (`anthropic-version`, `anthropic-beta`, the caller's own key), less
the hop-by-hop ones and ctxwin's own. The caller's key is never logged or stored: headers are read
only to forward them and to find the session.

Auth (`config.auth_token`): every request carries the token in `x-ctxwin-token`. `Authorization:
Bearer <token>` is taken as ctxwin's token only when it equals it exactly, and then it is not
forwarded (the provider key then travels in `x-api-key`); any other bearer value is the caller's
provider key and goes upstream as it came. The dashboard's GET pages also take `?token=`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ctxwin import telemetry
from ctxwin.engine import ContextEngine, Prepared
from ctxwin.errors import ContextBudgetError, CtxwinError, ProviderError, ProxyRefusal
from ctxwin.memory.consolidate.schedule import SleepConfig, sleep_time
from ctxwin.messages import Message

from . import recall as recall_tool
from .apis import APIS, Api, Conversation, Conversion, overhead_key
from .body import Body
from .config import ProxyConfig
from .errors import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, api_of_path, error_response, refusal_response
from .exchange import (
    HOP_BY_HOP,
    TOKEN_HEADER,
    Exchange,
    Memo,
    Outgoing,
    compactions,
    recall_round,
    recover,
    response_headers,
)
from .relay import RelayResponse, relay
from .sessions import MemorySessionStore, SessionKey, SessionStore, draft_engine, engine_spec, session_key

MAX_MEMOS = 256
"""Sessions whose previous request a process remembers (each holds that request's body, ~4 bytes a
token: the memory bought for converting only what changed)."""


def overhead_tokens(conversation: Conversation, counter: Any) -> int:
    """The raw token count of what goes with every request besides the history: the system prompt and
    the tools, as the agent sent them."""
    text = conversation.overhead.decode("utf-8", "surrogatepass")
    return int(counter.count_text(text)) if text else 0


class Proxy:
    """The application's state: the config, the session store, the upstream client (one per app,
    opened by the lifespan) and the per-session memos."""

    def __init__(self, config: ProxyConfig, store: SessionStore, transport: httpx.AsyncBaseTransport | None) -> None:
        self.config = config
        self.store = store
        self.transport = transport
        self.client: httpx.AsyncClient | None = None
        self.memos: OrderedDict[str, Memo] = OrderedDict()
        # Engines on disk (JSONL with fsync, PostgreSQL) block on I/O: their work runs in a thread so
        # the event loop keeps relaying other sessions' streams meanwhile.
        self.offload = config.store_dir is not None or config.postgres is not None
        upstream = config.upstream.rstrip("/")
        self.upstream = upstream[:-3] if upstream.endswith("/v1") else upstream  # callers send /v1/...
        idle = config.consolidate_idle
        sleep = SleepConfig(idle_seconds=idle, after_session=False) if idle else None  # off unless configured
        self.sleep = sleep_time(config.memory_workspace, sleep, sessions=config.store_dir)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        timeout = httpx.Timeout(self.config.upstream_timeout, connect=min(10.0, self.config.upstream_timeout))
        async with httpx.AsyncClient(timeout=timeout, transport=self.transport, follow_redirects=False,
                                     limits=httpx.Limits(max_connections=None,
                                                         max_keepalive_connections=64)) as client:
            self.client = client
            try:
                yield
            finally:
                self.client = None
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

    # ------------------------------------------------------------------------------------------ the door

    def check_token(self, request: Request, *, query: bool = False) -> bool:
        """Whether the caller's ctxwin token is right (always, when none is configured). True also
        means: strip the bearer header, when that is where the token came."""
        token = self.config.auth_token
        if token is None:
            return True
        given = request.headers.get(TOKEN_HEADER)
        if given is None:
            bearer = request.headers.get("authorization", "")
            if bearer[:7].lower() == "bearer " and hmac.compare_digest(bearer[7:].strip().encode(), token.encode()):
                return True
            if query:
                given = request.query_params.get("token")
        return given is not None and hmac.compare_digest(given.encode(), token.encode())

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

    def forward_headers(self, request: Request) -> dict[str, str]:
        out = {k: v for k, v in request.headers.items() if k not in HOP_BY_HOP}
        token = self.config.auth_token
        bearer = out.get("authorization", "")
        if token is not None and bearer[:7].lower() == "bearer " and hmac.compare_digest(
                bearer[7:].strip().encode(), token.encode()):
            del out["authorization"]  # ctxwin's token, not the provider's key
        return out

    def url(self, request: Request) -> str:
        query = request.url.query
        return f"{self.upstream}{request.url.path}" + (f"?{query}" if query else "")

    # ------------------------------------------------------------------------------------------ managing

    def manage(self, engine: ContextEngine, api: Api, body: Body, conversation: Conversation,
               memo: Memo, exchange: Exchange) -> Outgoing:
        """Sync what the agent sent, prepare, and build the body to forward (the hot path)."""
        counter = engine.counter
        previous = memo.conversion
        conversion = api.canonical(conversation.history, previous, counter.count_message)
        memo.conversion, memo.retired = conversion, previous
        key = overhead_key(conversation)
        if memo.overhead[0] != key:
            memo.overhead = (key, overhead_tokens(conversation, counter))
        overhead_raw = memo.overhead[1]
        factor = engine.calibrator.factor or 1.0
        exchange.tokens_received = round((conversion.tokens + overhead_raw) * factor)
        if self.config.passthrough or conversation.untouched:
            return self.passthrough(body, conversion.messages, overhead_raw, key, memo, counter, factor)
        held = len(engine.messages)
        old, new = previous.messages, conversion.messages
        extends = bool(old) and len(new) >= len(old) and all(
            a is b or a.content_key == b.content_key for a, b in zip(old, new, strict=False))
        if extends and memo.synced == (id(engine), held, len(old)):
            held += len(engine.append(new[len(old):]))  # what sync would append, found without matching it all
        else:
            engine.sync(new, other_branches=True)  # conversations sharing a session each keep their branch
            held = len(engine.messages)
        memo.synced = (id(engine), held, len(new))
        recall = self.config.recall_tool and body.present("tools")
        if recall:
            overhead_raw += self.recall_overhead(api, counter)
        engine.overhead_tokens = round(overhead_raw * factor)
        prepared = engine.prepare()
        return self.outgoing(engine, api, body, conversation, prepared, memo, key, recall)

    def outgoing(self, engine: ContextEngine, api: Api, body: Body, conversation: Conversation,
                 prepared: Prepared, memo: Memo, key: str, recall: bool) -> Outgoing:
        content, memo.rendered = api.forward(body, conversation, prepared, recall, memo.rendered)
        same_overhead = memo.forwarded_overhead == key
        memo.forwarded_overhead = key
        reuse = prepared.stable_prefix_tokens / prepared.raw_tokens if same_overhead and prepared.raw_tokens else 0.0
        return Outgoing(content, prepared, prepared.tokens, reuse)

    def passthrough(self, body: Body, messages: list[Message], overhead_raw: int, key: str, memo: Memo,
                    counter: Any, factor: float) -> Outgoing:
        """Untouched, but measured like a managed request (the prefix shared with the previous one)."""
        keys = [m.content_key for m in messages]
        shared = 0
        limit = min(len(keys), len(memo.forwarded_keys))
        while shared < limit and keys[shared] == memo.forwarded_keys[shared]:
            shared += 1
        same_overhead = memo.forwarded_overhead == key
        memo.forwarded_keys, memo.forwarded_overhead = keys, key
        total = overhead_raw + memo.conversion.tokens
        prefix = (overhead_raw + sum(counter.count_message(m) for m in messages[:shared])) if same_overhead else 0
        return Outgoing(body.raw, None, round(total * factor), prefix / total if total else 0.0)

    def recall_overhead(self, api: Api, counter: Any) -> int:
        return int(counter.count_text(api.recall_bytes.decode()))

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.offload:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    # ------------------------------------------------------------------------------------------ upstream

    async def send(self, request: Request, content: bytes, exchange: Exchange, *, stream: bool = False,
                   path: str | None = None, memo: Memo | None = None) -> httpx.Response:
        """One upstream call; a connection failure is a 502 and a timeout a 504, in the caller's shape.
        With `memo`, the conversion it retired is freed while the upstream works."""
        if memo is not None and memo.retired is not None:
            asyncio.get_running_loop().call_soon(setattr, memo, "retired", None)
        assert self.client is not None, "the app's lifespan has not started (run it under an ASGI server)"
        url = self.url(request) if path is None else f"{self.upstream}{path}"
        outgoing = self.client.build_request(request.method, url, content=content,
                                             headers=self.forward_headers(request))
        started = time.perf_counter()
        try:
            response = await self.client.send(outgoing, stream=stream)
        except httpx.TimeoutException:
            raise ProxyRefusal(504, f"the upstream {self.upstream} did not answer within "
                                    f"{self.config.upstream_timeout:g} s",
                               "try again, or raise --upstream-timeout") from None
        except httpx.HTTPError as error:
            raise ProxyRefusal(502, f"the upstream {self.upstream} is unreachable: {type(error).__name__}",
                               "check --upstream and that the provider is up") from None
        finally:
            exchange.upstream_s += time.perf_counter() - started
        return response

    async def read(self, response: httpx.Response, exchange: Exchange) -> bytes:
        """The whole answer, refused with 502 past `max_body_bytes` (an upstream cannot make the proxy
        buffer without bound)."""
        started = time.perf_counter()
        limit = self.config.max_body_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    await response.aclose()
                    raise ProxyRefusal(502, f"the upstream's answer is over the proxy's limit of {limit:,} bytes",
                                       "raise --max-body-bytes if the provider really sends answers that large")
                chunks.append(chunk)
            return b"".join(chunks)
        except httpx.TimeoutException:
            raise ProxyRefusal(504, "the upstream stopped answering mid-response", "try again") from None
        except httpx.HTTPError as error:
            raise ProxyRefusal(502, f"the upstream broke off its answer: {type(error).__name__}", "try again") from None
        finally:
            exchange.upstream_s += time.perf_counter() - started


# ---------------------------------------------------------------------------------------------- handlers


def shaped(api: str, endpoint: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """`endpoint` with what it refuses, and what goes wrong in ctxwin, answered in the API's error
    shape (an SDK raises its own typed error), never as a plain-text 500."""

    async def guarded(request: Request) -> Response:
        try:
            response: Response = await endpoint(request)
            return response
        except ProxyRefusal as refusal:
            return refusal_response(api, refusal)
        except ClientDisconnect:
            return Response(status_code=499)
        except CtxwinError as error:  # a session that cannot be opened or managed as configured
            return error_response(api, 500, f"ctxwin proxy: {error}")

    return guarded


def managed(proxy: Proxy, api: Api) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        if not proxy.check_token(request):
            raise ProxyRefusal(401, "missing or wrong ctxwin token", f"send it in the {TOKEN_HEADER} header")
        if request.method != "POST":
            raise ProxyRefusal(405, f"{request.url.path} takes POST, not {request.method}")
        body = Body(await proxy.read_body(request))
        try:
            conversation = api.split(body)
        except ValueError as error:
            raise ProxyRefusal(400, str(error), "send the conversation as the API documents it") from None
        key = session_key(request.headers, body, conversation.system_text,
                          api.first_user_text(conversation.history))
        response = await handle(proxy, api, request, body, conversation, key, started)
        if proxy.sleep is not None:
            proxy.sleep.activity()  # sleep-time consolidation's idle clock starts again, the request logged
        return response

    return shaped(api.name, endpoint)


async def handle(proxy: Proxy, api: Api, request: Request, body: Body, conversation: Conversation,
                 key: SessionKey, started: float) -> Response:
    model = str(body.get("model") or "")
    exchange = Exchange(api, model, started, streamed=body.get("stream") is True)
    if exchange.streamed and api.name == OPENAI_CHAT and not proxy.config.passthrough:
        options = body.get("stream_options")
        if not (isinstance(options, Mapping) and options.get("include_usage")):
            # Usage is how ctxwin calibrates its counts: asked for upstream, and not shown to the caller.
            conversation.changes["stream_options"] = orjson.dumps({**(options if isinstance(options, Mapping)
                                                                      else {}), "include_usage": True})
            conversation.usage_hidden = True
    lease = contextlib.AsyncExitStack()  # closed when the request is over, however it ends
    try:
        # The span stays open (and current, so the engine's spans nest under it) until the lease closes.
        exchange.span = lease.enter_context(telemetry.proxy_request_span(api=api.name, model=model,
                                                                         session_id=key.id))
        engine = await lease.enter_async_context(proxy.store.lease(key.id, engine_spec(body, proxy.config)))
    except BaseException:
        await lease.aclose()
        raise
    handed = False  # a stream that started owns the lease (and writes the entry) until it ends
    try:
        memo = proxy.memo(key.id)
        try:
            outgoing = await proxy.run(proxy.manage, engine, api, body, conversation, memo, exchange)
        except ValueError as error:  # what the converters refuse in a history
            raise ProxyRefusal(400, f"cannot read the conversation: {error}",
                               "send it as the API documents it") from None
        except ContextBudgetError as error:
            raise ProxyRefusal(400, f"the request cannot be made to fit: {error}") from None
        exchange.reuse = outgoing.reuse
        if exchange.streamed:
            response = await relay(proxy, api, request, engine, body, conversation, memo, outgoing, exchange, lease)
            handed = isinstance(response, RelayResponse)
            return response
        response = await complete(proxy, api, request, engine, body, conversation, memo, outgoing, exchange)
        exchange.ended = time.perf_counter()
        # Before the caller has its answer: an answer that reached its caller has its entry (and the
        # calibration from its usage) committed, even if the worker dies the moment after.
        handed = True
        try:
            await proxy.run(_bookkeeping, engine, exchange)
        finally:
            await lease.aclose()
        return response
    except ProxyRefusal as refusal:
        exchange.status = refusal.status
        raise
    finally:
        if not handed:
            try:
                await proxy.run(exchange.note, engine)
            finally:
                await lease.aclose()


def _bookkeeping(engine: ContextEngine, exchange: Exchange) -> None:
    if exchange.pending_usage is not None:
        engine.record_usage(exchange.pending_usage)
    exchange.note(engine)


async def complete(proxy: Proxy, api: Api, request: Request, engine: ContextEngine, body: Body,
                   conversation: Conversation, memo: Memo, outgoing: Outgoing, exchange: Exchange) -> Response:
    """A whole (non-streamed) answer: recover from overflow, answer recall calls, relay the rest."""
    rounds = 0
    while True:
        exchange.tokens_forwarded += outgoing.tokens
        if outgoing.prepared is not None:
            exchange.compactions += compactions(outgoing.prepared)
        response = await proxy.send(request, outgoing.body, exchange, memo=memo)
        raw = await proxy.read(response, exchange)
        exchange.status = response.status_code
        if outgoing.prepared is None:  # passthrough: relayed as it came
            _note_usage(api, raw, exchange, None)
            return Response(raw, response.status_code, response_headers(response))
        if response.status_code >= 400:
            retry = await recover(proxy, api, engine, body, conversation, memo, response, raw, exchange)
            if retry is None:
                return Response(raw, response.status_code, response_headers(response))
            outgoing = retry
            continue
        completion = _note_usage(api, raw, exchange, None)
        exchange.pending_usage = completion.usage if completion is not None else None
        if completion is None:
            return Response(raw, response.status_code, response_headers(response))
        ours, theirs = api.recall_calls(completion)
        if not ours:
            return Response(raw, response.status_code, response_headers(response))
        if theirs or rounds >= recall_tool.MAX_ROUNDS:
            # A mixed answer: the agent's own calls win, and the recall calls are dropped unanswered
            # (the tool says so in its description); the model can ask again on its own next turn.
            # (Past MAX_ROUNDS the tool was not offered: a model calling it anyway is dropped too.)
            data = api.without_recall(orjson.loads(raw))
            return Response(orjson.dumps(data), response.status_code, response_headers(response))
        rounds += 1
        exchange.recall_calls += len(ours)
        if exchange.pending_usage is not None:  # calibrate on this answer before preparing the next request
            engine.record_usage(exchange.pending_usage)
            exchange.pending_usage = None
        outgoing = await proxy.run(recall_round, proxy, engine, api, body, conversation, memo, completion, ours,
                                   rounds >= recall_tool.MAX_ROUNDS)


def _note_usage(api: Api, raw: bytes, exchange: Exchange, engine: ContextEngine | None) -> Any:
    """The answer parsed (None when it is not a JSON answer of the API), its usage recorded."""
    try:
        completion = api.parse(orjson.loads(raw))
    except (orjson.JSONDecodeError, ProviderError, TypeError, ValueError):
        return None
    if completion.usage is not None:
        exchange.usage = completion.usage
        if engine is not None:
            engine.record_usage(completion.usage)
    return completion


def count_tokens(proxy: Proxy) -> Callable[[Request], Any]:
    """`/v1/messages/count_tokens`, answered with the count of the *managed* request: the body is
    managed as `/v1/messages` would manage it (its system and tools counted against the budget) and
    forwarded to the upstream's count_tokens, so the harness sees the size it will really send
    (Claude Code decides when to auto-compact from this count; the raw count would make it compact
    what ctxwin already keeps small). The draft is synced and prepared on a throwaway engine over
    the session's log (`draft_engine`): counting never writes to the session nor moves it onto a
    branch."""
    api = APIS[ANTHROPIC]

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        if not proxy.check_token(request):
            raise ProxyRefusal(401, "missing or wrong ctxwin token", f"send it in the {TOKEN_HEADER} header")
        raw = await proxy.read_body(request)
        body = Body(raw)
        exchange = Exchange(api, str(body.get("model") or ""), started)
        content = raw
        if not proxy.config.passthrough:
            try:
                conversation = api.split(body)
            except ValueError as error:
                raise ProxyRefusal(400, str(error), "send the conversation as the API documents it") from None
            if not conversation.untouched:
                key = session_key(request.headers, body, conversation.system_text,
                                  api.first_user_text(conversation.history))
                async with proxy.store.lease(key.id, engine_spec(body, proxy.config)) as engine:
                    content = await proxy.run(_managed_count_body, proxy, engine, api, body, conversation)
        response = await proxy.send(request, content, exchange)
        data = await proxy.read(response, exchange)
        return Response(data, response.status_code, response_headers(response))

    return shaped(api.name, endpoint)


def _managed_count_body(proxy: Proxy, engine: ContextEngine, api: Api, body: Body,
                        conversation: Conversation) -> bytes:
    draft = draft_engine(engine)
    try:
        conversion = api.canonical(conversation.history, Conversion(), draft.counter.count_message)
        draft.sync(conversion.messages)
        recall = proxy.config.recall_tool and body.present("tools")
        overhead_raw = overhead_tokens(conversation, draft.counter)
        if recall:
            overhead_raw += proxy.recall_overhead(api, draft.counter)
        draft.overhead_tokens = round(overhead_raw * (engine.calibrator.factor or 1.0))
        prepared = draft.prepare()
    except ValueError as error:
        raise ProxyRefusal(400, f"cannot read the conversation: {error}", "send it as the API documents it") from None
    except ContextBudgetError as error:
        raise ProxyRefusal(400, f"the request cannot be made to fit: {error}") from None
    conversation.changes["stream"] = None  # count_tokens takes no stream flag
    content, _ = api.forward(body, conversation, prepared, recall, None)
    return content


def passthrough_endpoint(proxy: Proxy) -> Callable[[Request], Any]:
    """`/v1/models` and the like: forwarded as they came (auth still checked)."""

    async def endpoint(request: Request) -> Response:
        api = api_of_path(request.url.path, request.headers)
        try:
            if not proxy.check_token(request):
                raise ProxyRefusal(401, "missing or wrong ctxwin token", f"send it in the {TOKEN_HEADER} header")
            content = await proxy.read_body(request)
            exchange = Exchange(APIS[api], "", time.perf_counter())
            response = await proxy.send(request, content, exchange)
            data = await proxy.read(response, exchange)
            return Response(data, response.status_code, response_headers(response))
        except ProxyRefusal as refusal:
            return refusal_response(api, refusal)

    return endpoint


def not_found(proxy: Proxy) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        api = api_of_path(request.url.path, request.headers)
        if not proxy.check_token(request, query=request.url.path.startswith("/ctxwin")):
            return error_response(api, 401, f"missing or wrong ctxwin token (send it in the {TOKEN_HEADER} header)")
        return error_response(api, 404, f"ctxwin proxy: no endpoint {request.method} {request.url.path} "
                                        "(it serves /v1/messages, /v1/messages/count_tokens, /v1/chat/completions, "
                                        "/v1/responses and /v1/models)")

    return endpoint


def dashboard_routes(proxy: Proxy) -> list[BaseRoute]:
    """The live page's routes (`/ctxwin`, `/ctxwin/sessions.json`, ...) from `ctxwin.proxy.dashboard`
    when it is installed, over the store this proxy uses (its own engines when sessions live in
    memory), each behind the ctxwin token (header, bearer or `?token=`): the mount point."""
    try:
        from . import dashboard  # type: ignore[attr-defined]
    except ImportError:
        return []
    live = getattr(proxy.store, "live_engines", None)
    source = dashboard.source_for(proxy.config, sessions=live() if live is not None else None)
    return [Route(route.path, _guarded(proxy, route.endpoint), methods=sorted(route.methods or ("GET",)))
            for route in dashboard.dashboard_routes(source) if isinstance(route, Route)]


def _guarded(proxy: Proxy, endpoint: Callable[[Request], Any]) -> Callable[[Request], Any]:
    async def guarded(request: Request) -> Response:
        if not proxy.check_token(request, query=True):
            return error_response(OPENAI_CHAT, 401, f"missing or wrong ctxwin token (send it in the {TOKEN_HEADER} "
                                                    "header, or as ?token= on a page)")
        response: Response = await endpoint(request)
        return response

    return guarded


ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def create_app(config: ProxyConfig, *, store: SessionStore | None = None,
               transport: httpx.AsyncBaseTransport | None = None) -> Starlette:
    """The proxy for `config`. `store`: where sessions live (default: this process, in memory or
    under `config.store_dir`); `transport`: the upstream transport (tests, or a custom one). The
    collector's tuning is a process setting, made by the process that serves (`serve.tune_gc`), never
    by an app, so two apps in one process do not fight over it."""
    proxy = Proxy(config, store if store is not None else MemorySessionStore.for_config(config), transport)
    routes: list[BaseRoute] = [
        Route("/v1/messages", managed(proxy, APIS[ANTHROPIC]), methods=ALL_METHODS),
        Route("/v1/messages/count_tokens", count_tokens(proxy), methods=["POST"]),
        Route("/v1/chat/completions", managed(proxy, APIS[OPENAI_CHAT]), methods=ALL_METHODS),
        Route("/v1/responses", managed(proxy, APIS[OPENAI_RESPONSES]), methods=ALL_METHODS),
        Route("/v1/models", passthrough_endpoint(proxy), methods=["GET"]),
        Route("/v1/models/{model:path}", passthrough_endpoint(proxy), methods=["GET"]),
        *dashboard_routes(proxy),
        Route("/{path:path}", not_found(proxy), methods=ALL_METHODS),
    ]
    app = Starlette(routes=routes, lifespan=proxy.lifespan)
    app.state.proxy = proxy
    return app


__all__ = ["Memo", "Proxy", "create_app"]
