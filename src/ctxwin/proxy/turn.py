"""One request to a managed endpoint, from the synced history to the caller's answer: a `Turn`.

`prepare()` syncs what the agent sent into the session's engine and prepares the request to forward
(the hot path). `send(answer)` is the one loop both kinds of answer go through: send upstream; on an
overflow error, recover (`engine.recover`) and send again; on an answer that calls only
`ctxwin_recall`, answer the calls from the session and send again; else hand the answer to the
caller. What differs between a whole answer and a streamed one is only how an upstream answer
reaches the caller, which `answer` does (`proxy.answers`): whole, or event by event through the
stream editor. A passthrough request (`--passthrough`, or a Responses request continuing a stored
response) is never recovered and never has recall rounds: the upstream's answer is relayed as it came.

The request's entry (`ProxyRequestEntry`) is written once (`conclude`), just before the caller's
last bytes go out: a caller that has its answer has its entry, even if the worker dies the moment
after.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import orjson
from starlette.requests import Request

from ctxwin.engine import ContextEngine, Prepared
from ctxwin.errors import ContextBudgetError, ContextOverflowError, ProviderError, ProxyError
from ctxwin.messages import Message, ToolCall
from ctxwin.providers.base import Completion
from ctxwin.tokens.base import TokenCounter

from . import recall as recall_tool
from .apis import Api, Conversation, overhead_key
from .body import Body
from .exchange import Exchange, Memo, Outgoing, compactions
from .sessions import output_limit
from .state import Proxy
from .upstream import forward_headers

MAX_RECOVERIES = 3
"""Overflow recoveries per request before the upstream's error goes to the caller (the engine bounds
its own attempts too)."""


class Answer(Protocol):
    """How upstream answers reach the caller (whole, or streamed); each method that ends the caller's
    answer concludes the turn before its last bytes go out."""

    streamed: bool

    def accepts(self, response: httpx.Response) -> bool:
        """Whether this upstream answer is one to relay (else it is read whole: an error to recover
        from, or to give the caller as it came)."""
        ...

    async def relay(self, response: httpx.Response) -> Completion | None:
        """Relays the answer's content; the completion it adds up to (None: not an answer of the API)."""
        ...

    async def as_it_came(self, response: httpx.Response, raw: bytes) -> Any:
        """Gives the caller an upstream answer it was not relayed (an error, a stream that is not one)."""
        ...

    async def finish(self, completion: Completion | None, recall_dropped: bool) -> Any:
        """Ends the caller's answer (`recall_dropped`: its recall calls go unanswered)."""
        ...

    async def fail(self, refusal: ProxyError) -> Any:
        """Ends the caller's answer with the proxy's own error."""
        ...

    def next_round(self) -> None:
        """The next upstream answer continues the same answer for the caller (a recall round)."""
        ...


def overhead_tokens(conversation: Conversation, counter: TokenCounter) -> int:
    """The raw token count of what goes with every request besides the history: the system prompt and
    the tools, as the agent sent them."""
    text = conversation.overhead.decode("utf-8", "surrogatepass")
    return int(counter.count_text(text)) if text else 0


def recall_overhead(api: Api, counter: TokenCounter) -> int:
    return int(counter.count_text(api.recall_bytes.decode()))


def parse_answer(api: Api, raw: bytes) -> Completion | None:
    """A whole answer parsed by the provider client's parser (None when it is not a JSON answer of the API)."""
    try:
        return api.parse(orjson.loads(raw))
    except (orjson.JSONDecodeError, ProviderError, TypeError, ValueError):
        return None


@dataclass
class Turn:
    """One request being served: where it came from and what ctxwin keeps of its session."""

    proxy: Proxy
    api: Api
    request: Request
    engine: ContextEngine
    body: Body
    conversation: Conversation
    memo: Memo
    exchange: Exchange
    noted: bool = False

    @property
    def recall_offered(self) -> bool:
        return self.proxy.config.recall_tool and self.body.present("tools")

    @property
    def max_output(self) -> int | None:
        """This request's own output limit: the reserve its prepare budgets for (None: the engine's)."""
        return output_limit(self.body)

    # ------------------------------------------------------------------------------------------ preparing

    def prepare(self) -> Outgoing:
        """Sync what the agent sent, prepare, and build the body to forward (the hot path)."""
        engine, memo, conversation = self.engine, self.memo, self.conversation
        counter = engine.counter
        previous = memo.conversion
        conversion = self.api.canonical(conversation.history, previous, counter.count_message)
        memo.conversion, memo.retired = conversion, previous
        key = overhead_key(conversation)
        if memo.overhead[0] != key:
            memo.overhead = (key, overhead_tokens(conversation, counter))
        overhead_raw = memo.overhead[1]
        factor = engine.calibrator.factor or 1.0
        self.exchange.tokens_received = round((conversion.tokens + overhead_raw) * factor)
        if self.proxy.config.passthrough or conversation.untouched:
            return self.passthrough(overhead_raw, key, factor)
        if engine.policy is not self.proxy.policy:  # the live policy file was edited since this engine's last request
            self.proxy.adopt_policy(engine)
        self.sync(previous.messages)
        if self.recall_offered:
            overhead_raw += recall_overhead(self.api, counter)
        engine.overhead_tokens = round(overhead_raw * factor)
        return self.outgoing(engine.prepare(max_output=self.max_output), self.recall_offered)

    def sync(self, old: list[Message]) -> None:
        """The history into the engine: what is new appended when it only extends `old` (the previous
        request's messages) in the engine that saw them (no need to match it all), else `engine.sync`."""
        engine, memo = self.engine, self.memo
        held = len(engine.messages)
        new = memo.conversion.messages
        extends = bool(old) and len(new) >= len(old) and all(
            a is b or a.content_key == b.content_key for a, b in zip(old, new, strict=False))
        if extends and memo.synced == (id(engine), held, len(old)):
            held += len(engine.append(new[len(old):]))
        else:
            engine.sync(new, other_branches=True)  # conversations sharing a session each keep their branch
            held = len(engine.messages)
        memo.synced = (id(engine), held, len(new))

    def outgoing(self, prepared: Prepared, recall: bool) -> Outgoing:
        """The body to forward for `prepared` (with the recall tool when `recall`), and what it reuses
        of the previous one."""
        memo = self.memo
        content, memo.rendered = self.api.forward(self.body, self.conversation, prepared, recall, memo.rendered)
        key = overhead_key(self.conversation)
        same_overhead = memo.forwarded_overhead == key
        memo.forwarded_overhead = key
        reuse = prepared.stable_prefix_tokens / prepared.raw_tokens if same_overhead and prepared.raw_tokens else 0.0
        return Outgoing(content, prepared, prepared.tokens, reuse)

    def passthrough(self, overhead_raw: int, key: str, factor: float) -> Outgoing:
        """Untouched, but measured like a managed request (the prefix shared with the previous one)."""
        memo, messages = self.memo, self.memo.conversion.messages
        keys = [m.content_key for m in messages]
        shared = 0
        limit = min(len(keys), len(memo.forwarded_keys))
        while shared < limit and keys[shared] == memo.forwarded_keys[shared]:
            shared += 1
        same_overhead = memo.forwarded_overhead == key
        memo.forwarded_keys, memo.forwarded_overhead = keys, key
        total = overhead_raw + memo.conversion.tokens
        count = self.engine.counter.count_message
        prefix = (overhead_raw + sum(count(m) for m in messages[:shared])) if same_overhead else 0
        return Outgoing(self.body.raw, None, round(total * factor), prefix / total if total else 0.0)

    def recall_round(self, completion: Completion, calls: list[ToolCall], last: bool) -> Outgoing:
        """The next request after answering the model's recall calls; the `last` round's goes without the
        recall tool, so a model that keeps asking answers with what it has (`recall.MAX_ROUNDS`)."""
        self.engine.append(recall_tool.exchange(self.engine, completion, calls))
        return self.outgoing(self.engine.prepare(max_output=self.max_output), not last)

    async def recover(self, response: httpx.Response, raw: bytes) -> Outgoing | None:
        """The smaller request to retry with after an overflow error, or None to give the caller the error."""
        error: Any
        try:
            error = orjson.loads(raw)
        except orjson.JSONDecodeError:
            error = raw.decode("utf-8", "replace")
        evidence = {"status": response.status_code, "body": error} if isinstance(error, dict) else error
        engine, exchange = self.engine, self.exchange
        if not engine.is_overflow_error(evidence) and not engine.is_overflow_error(error):
            exchange.invalid = response.status_code == 400
            return None
        if exchange.recoveries >= MAX_RECOVERIES:
            return None
        exchange.recoveries += 1
        try:
            prepared = await self.proxy.run(engine.recover, error)
        except (ContextOverflowError, ContextBudgetError):
            return None
        return self.outgoing(prepared, self.recall_offered)

    # ------------------------------------------------------------------------------------------ sending

    async def send(self, answer: Answer, outgoing: Outgoing) -> Any:
        """Sends `outgoing` upstream and gives the caller the answer (see the module docstring);
        returns what `answer` ends with (the whole answer's `Response`; None for a stream)."""
        exchange = self.exchange
        rounds = 0
        while True:
            exchange.tokens_forwarded += outgoing.tokens
            if outgoing.prepared is not None:
                exchange.compactions += compactions(outgoing.prepared)
            try:
                response = await self.upstream_call(outgoing.body, answer.streamed)
                exchange.status = response.status_code
                if not answer.accepts(response):
                    raw = await self.proxy.upstream.read(response, exchange)
                    retry = None
                    if response.status_code >= 400 and outgoing.prepared is not None:
                        retry = await self.recover(response, raw)
                    if retry is None:
                        return await answer.as_it_came(response, raw)
                    outgoing = retry
                    continue
                completion = await answer.relay(response)
            except ProxyError as refusal:
                exchange.status = refusal.status
                return await answer.fail(refusal)
            ours: list[ToolCall] = []
            theirs: list[ToolCall] = []
            if completion is not None:
                exchange.span.response(completion.raw)  # gen_ai.response.id, .model, .finish_reasons
            if completion is not None and completion.usage is not None:
                exchange.usage = completion.usage
            if outgoing.prepared is not None and completion is not None:  # managed: calibrate, answer recalls
                exchange.pending_usage = completion.usage
                ours, theirs = self.api.recall_calls(completion)
            if not ours or theirs or rounds >= recall_tool.MAX_ROUNDS:
                # A mixed answer: the agent's own calls win, and the recall calls are dropped unanswered
                # (the tool says so in its description); the model can ask again on its own next turn.
                # (Past MAX_ROUNDS the tool was not offered: a model calling it anyway is dropped too.)
                return await answer.finish(completion, bool(ours))
            rounds += 1
            exchange.recall_calls += len(ours)
            outgoing = await self.proxy.run(self.next_request, completion, ours, rounds >= recall_tool.MAX_ROUNDS)
            answer.next_round()

    async def upstream_call(self, content: bytes, stream: bool) -> httpx.Response:
        memo = self.memo
        if memo.retired is not None:  # freed while the upstream works
            asyncio.get_running_loop().call_soon(setattr, memo, "retired", None)
        headers = forward_headers(self.request.headers, self.proxy.config.auth_token)
        self.exchange.span.inject(headers)  # the trace goes on upstream, under this request's span
        return await self.proxy.upstream.send(self.request, content, self.exchange, stream=stream, headers=headers)

    def next_request(self, completion: Completion, calls: list[ToolCall], last: bool) -> Outgoing:
        """After a recall answer: calibrate on it, then the request that carries the recall results."""
        if self.exchange.pending_usage is not None:
            self.engine.record_usage(self.exchange.pending_usage)
            self.exchange.pending_usage = None
        return self.recall_round(completion, calls, last)

    async def conclude(self) -> None:
        """Writes the request's entry (once), with the calibration from the final answer's usage."""
        if self.noted:
            return
        self.noted = True
        await self.proxy.run(self._bookkeeping)

    def _bookkeeping(self) -> None:
        if self.exchange.pending_usage is not None:
            self.engine.record_usage(self.exchange.pending_usage)
        self.exchange.note(self.engine)
        self.proxy.store.settle(self.engine)


__all__ = ["MAX_RECOVERIES", "Answer", "Turn", "overhead_tokens", "parse_answer", "recall_overhead"]
