"""The proxy as an ASGI application: `create_app(config)`.

Per request to a managed endpoint: read the body (bounded while it arrives), check the ctxwin token,
parse it (msgspec, then orjson for what is read), find the session, lease its engine, and serve the
request's `Turn` (`proxy.turn`): sync the history the agent sent, prepare, forward the managed body
with the caller's own headers (`proxy.upstream`), recover from overflow and answer `ctxwin_recall`
calls, relay the answer (whole, or streamed event by event: `proxy.answers`), and keep a
`ProxyRequestEntry` in the session log.

Every field ctxwin does not manage goes through untouched: model, sampling, tools, metadata, the
system prompt, and the headers (`anthropic-version`, `anthropic-beta`, the caller's own key), less
the hop-by-hop ones and ctxwin's own. The caller's key is never logged or stored: headers are read
only to forward them and to find the session. Auth: `proxy.state`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ctxwin import telemetry
from ctxwin.errors import ContextBudgetError, InputError, ProxyError, ProxyRefusal

from .answers import TurnResponse, WholeAnswer, failure_response
from .apis import APIS, Api, Conversation
from .body import Body
from .config import ProxyConfig
from .errors import ANTHROPIC, OPENAI_CHAT, OPENAI_RESPONSES, api_of_path, error_response, refusal_response
from .exchange import Exchange, Memo, Outgoing
from .sessions import MemorySessionStore, SessionStore, draft_engine, engine_spec, session_key
from .state import Proxy, token_refusal
from .turn import Turn
from .upstream import Upstream, response_headers

# ---------------------------------------------------------------------------------------------- handlers


def shaped(api: str, endpoint: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """`endpoint` with what it refuses, and what goes wrong in ctxwin, answered in the API's error
    shape (`answers.failure_response`)."""

    async def guarded(request: Request) -> Response:
        try:
            response: Response = await endpoint(request)
            return response
        except Exception as error:  # answered in the API's shape, or raised again
            answer = failure_response(api, error)
            if answer is None:
                raise
            return answer

    return guarded


def managed(proxy: Proxy, api: Api) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        proxy.require_token(request)
        if request.method != "POST":
            raise ProxyRefusal(405, f"{request.url.path} takes POST, not {request.method}")
        body = Body(await proxy.read_body(request))
        try:
            conversation = api.split(body)
        except ProxyRefusal:
            raise  # already the caller's answer (a ProxyRefusal is an InputError too): not wrapped twice
        except InputError as error:  # a history the converters cannot read (a MessageFormatError)
            raise ProxyRefusal(400, error.message, "send the conversation as the API documents it") from None
        exchange = Exchange(api, str(body.get("model") or ""), started, streamed=body.get("stream") is True)
        response = await handle(proxy, request, body, conversation, exchange)
        if proxy.sleep is not None:
            proxy.sleep.activity()  # sleep-time consolidation's idle clock starts again, the request logged
        return response

    return shaped(api.name, endpoint)


def ask_stream_usage(body: Body, conversation: Conversation) -> None:
    """Usage is how ctxwin calibrates its counts: on a Chat stream it is asked for upstream, and not
    shown to the caller when the caller did not ask for it."""
    options = body.get("stream_options")
    if not (isinstance(options, Mapping) and options.get("include_usage")):
        conversation.changes["stream_options"] = orjson.dumps({**(options if isinstance(options, Mapping) else {}),
                                                               "include_usage": True})
        conversation.usage_hidden = True


async def handle(proxy: Proxy, request: Request, body: Body, conversation: Conversation,
                 exchange: Exchange) -> Response:
    """Finds and leases the session, prepares the request and serves the turn: a whole answer here,
    a stream by the `TurnResponse` returned, which then owns the lease (and writes the entry) until
    it ends."""
    api = exchange.api
    key = session_key(request.headers, body, conversation.system_text, api.first_user_text(conversation.history))
    if exchange.streamed and api.name == OPENAI_CHAT and not proxy.config.passthrough:
        ask_stream_usage(body, conversation)
    lease = contextlib.AsyncExitStack()  # closed when the request is over, however it ends
    try:
        # The span stays open (and current, so the engine's spans nest under it) until the lease closes.
        # The caller's W3C trace context (traceparent) makes it a child of the caller's span.
        exchange.span = lease.enter_context(telemetry.proxy_request_span(api=api.name, model=exchange.model,
                                                                         session_id=key.id, headers=request.headers))
        spec = engine_spec(body, proxy.config, proxy.current_policy())
        engine = await lease.enter_async_context(proxy.store.lease(key.id, spec))
    except BaseException:
        await lease.aclose()
        raise
    turn = Turn(proxy, api, request, engine, body, conversation, proxy.memo(key.id), exchange)
    handed = False
    try:
        outgoing = await proxy.run(prepared, turn)
        exchange.reuse = outgoing.reuse
        if exchange.streamed:
            handed = True
            return TurnResponse(turn, outgoing, lease)
        response: Response = await turn.send(WholeAnswer(turn), outgoing)
        return response
    except ProxyError as refusal:
        exchange.status = refusal.status
        raise
    finally:
        if not handed:
            try:
                await turn.conclude()
            finally:
                await lease.aclose()


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
        proxy.require_token(request)
        raw = await proxy.read_body(request)
        body = Body(raw)
        exchange = Exchange(api, str(body.get("model") or ""), started)
        content = raw
        if not proxy.config.passthrough:
            try:
                conversation = api.split(body)
            except ProxyRefusal:
                raise
            except InputError as error:
                raise ProxyRefusal(400, error.message, "send the conversation as the API documents it") from None
            if not conversation.untouched:
                key = session_key(request.headers, body, conversation.system_text,
                                  api.first_user_text(conversation.history))
                spec = engine_spec(body, proxy.config, proxy.current_policy())
                async with proxy.store.lease(key.id, spec) as engine:
                    draft = Turn(proxy, api, request, draft_engine(engine), body, conversation, Memo(), exchange)
                    conversation.changes["stream"] = None  # count_tokens takes no stream flag
                    content = (await proxy.run(prepared, draft)).body
        response = await proxy.upstream.send(request, content, exchange)
        data = await proxy.upstream.read(response, exchange)
        return Response(data, response.status_code, response_headers(response))

    return shaped(api.name, endpoint)


def prepared(turn: Turn) -> Outgoing:
    """`turn.prepare()`, with what the converters refuse in a history and a request that cannot fit
    refused as the caller's 400."""
    try:
        return turn.prepare()
    except ProxyRefusal:
        raise
    except InputError as error:  # what the converters and the engine refuse in a history
        raise ProxyRefusal(400, f"cannot read the conversation: {error}", "send it as the API documents it") from None
    except ContextBudgetError as error:
        raise ProxyRefusal(400, f"the request cannot be made to fit: {error}") from None


def passthrough_endpoint(proxy: Proxy) -> Callable[[Request], Any]:
    """`/v1/models` and the like: forwarded as they came (auth still checked)."""

    async def endpoint(request: Request) -> Response:
        api = api_of_path(request.url.path, request.headers)

        async def forward(request: Request) -> Response:
            proxy.require_token(request)
            content = await proxy.read_body(request)
            exchange = Exchange(APIS[api], "", time.perf_counter())
            response = await proxy.upstream.send(request, content, exchange)
            data = await proxy.upstream.read(response, exchange)
            return Response(data, response.status_code, response_headers(response))

        answer: Response = await shaped(api, forward)(request)
        return answer

    return endpoint


def not_found(proxy: Proxy) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        api = api_of_path(request.url.path, request.headers)
        if not proxy.check_token(request, query=request.url.path.startswith("/ctxwin")):
            return refusal_response(api, token_refusal())
        return error_response(api, 404, f"ctxwin proxy: no endpoint {request.method} {request.url.path} "
                                        "(it serves /v1/messages, /v1/messages/count_tokens, /v1/chat/completions, "
                                        "/v1/responses and /v1/models)")

    return endpoint


def dashboard_routes(proxy: Proxy) -> list[BaseRoute]:
    """The live page's routes (`/ctxwin`, `/ctxwin/sessions.json`, ...) from `ctxwin.proxy.dashboard`
    when it is installed, over the store this proxy uses (its own engines when sessions live in
    memory), each behind the ctxwin token (header, bearer or `?token=`): the mount point."""
    try:
        from . import dashboard
    except ImportError:
        return []
    live = getattr(proxy.store, "live_engines", None)
    source = dashboard.source_for(proxy.config, sessions=live() if live is not None else None)
    routes = dashboard.dashboard_routes(source, notices=lambda: [n.to_dict() for n in proxy.notices])
    return [Route(route.path, _guarded(proxy, route.endpoint), methods=sorted(route.methods or ("GET",)))
            for route in routes if isinstance(route, Route)]


def _guarded(proxy: Proxy, endpoint: Callable[[Request], Any]) -> Callable[[Request], Any]:
    async def guarded(request: Request) -> Response:
        if not proxy.check_token(request, query=True):
            return refusal_response(OPENAI_CHAT, token_refusal(query=True))
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
    proxy = Proxy(config, store if store is not None else MemorySessionStore.for_config(config),
                  Upstream(config, transport))
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
