"""The proxy's own work per request at a 170K-token history, without HTTP: read the body, find the
session, sync, prepare, write the body to forward (what `benchmarks/proxy.py` measures end to end,
here alone so that it can be profiled and compared with the stdlib JSON round trip of the same body
in the same run, the issue's yardstick: 4.7 ms p50 on the machine it was written on).

    python benchmarks/proxy_hot_path.py [--tokens 170000] [--requests 60] [--policy ctxwin]

Each request is the previous one plus a tool round (an assistant call and its result), with Claude
Code's habit of moving the `cache_control` marker to the newest message. The last line is one JSON
object: `{"hot_path_p50_ms", "hot_path_p95_ms", "stdlib_json_p50_ms", "body_bytes", "tokens_received",
"tokens_forwarded", "cache_prefix_reuse", ...}`.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import sys
import time
from typing import Any

import orjson

from ctxwin.pipeline.events import Masked, MiddleTruncated, ResultsClamped, RoundsDropped, UnansweredCollapsed
from ctxwin.proxy.apis import APIS
from ctxwin.proxy.body import Body
from ctxwin.proxy.config import ProxyConfig
from ctxwin.proxy.exchange import Exchange, Memo
from ctxwin.proxy.serve import GC_THRESHOLDS
from ctxwin.proxy.sessions import MemorySessionStore, build_engine, engine_spec, session_key
from ctxwin.proxy.state import Proxy
from ctxwin.proxy.turn import Turn
from ctxwin.proxy.upstream import Upstream
from ctxwin.store.in_memory import MemorySessionLog

MODEL = "claude-sonnet-4-5"
WARMUP = 5  # requests not counted: the first one converts and prepares everything
DELIBERATE = (Masked, UnansweredCollapsed, RoundsDropped, ResultsClamped, MiddleTruncated)
"""Events of a request that did more than add the new messages (a masking batch, a fit step; and compactions)."""


def file_text(n: int) -> str:
    seed = hashlib.sha256(str(n).encode()).hexdigest()
    return "\n".join(f"    def handle_{seed[k % 40:k % 40 + 6]}(self, request, value={k}):\n"
                     f"        # keep the cache warm for the {k}th caller before answering\n"
                     f"        return self.cache.get(request.key, value) + {n * k}" for k in range(12))


def tool_round(n: int) -> list[dict[str, Any]]:
    call = f"toolu_{n:06d}"
    return [{"role": "assistant", "content": [{"type": "text", "text": f"Reading module {n} next."},
                                              {"type": "tool_use", "id": call, "name": "Read",
                                               "input": {"file_path": f"/repo/src/pkg/module_{n}.py"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": file_text(n)}]}]


def claude_code_body(tokens: int, requests: int = 0) -> tuple[dict[str, Any], int]:
    """A Claude Code-shaped request whose history is about `tokens` tokens (ctxwin's count) after
    half of `requests` more rounds (so the run's middle request is at `tokens`)."""
    from ctxwin.messages.providers import from_anthropic
    from ctxwin.tokens import counter_for

    counter = counter_for(MODEL)
    sample = [m for n in range(100, 140) for m in from_anthropic(tool_round(n))]
    per_round = sum(counter.count_message(m) for m in sample) / 40
    rounds = max(1, int(tokens / per_round) - requests // 2)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Work through the repository module by module."}]
    for n in range(rounds):
        messages += tool_round(n)
    body = {"model": MODEL, "max_tokens": 32_000, "stream": False,
            "system": [{"type": "text", "text": "You are Claude Code. " + "Follow the rules. " * 300,
                        "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": f"Tool{k}", "description": "Does one thing well. " * 60,
                       "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}} for k in range(20)],
            "metadata": {"user_id": "user_0123_account_4567_session_0b9c11ef-aaaa-bbbb-cccc-0123456789ab"},
            "messages": messages}
    return body, rounds


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=170_000)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--policy", default="ctxwin")
    args = parser.parse_args(argv)

    body, rounds = claude_code_body(args.tokens, WARMUP + args.requests)
    config = ProxyConfig(upstream="http://127.0.0.1:9", policy=args.policy)
    proxy = Proxy(config, MemorySessionStore(), Upstream(config))
    api = APIS["anthropic"]
    headers: dict[str, str] = {}
    engine = None
    memo = Memo()
    hot: list[float] = []
    stdlib: list[float] = []
    parse: list[float] = []
    received: list[int] = []
    steady: list[float] = []  # requests where only new messages were added to the view
    eventful: list[float] = []  # requests with a deliberate event: a compaction, a masking batch, a fit
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)  # as a served worker sets it
    try:
        for n in range(args.requests + WARMUP):
            if n:
                messages = body["messages"]
                messages[-1]["content"][-1].pop("cache_control", None)
                messages += tool_round(rounds + n)
                messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
            raw = orjson.dumps(body)
            started = time.perf_counter()
            request = Body(raw)
            conversation = api.split(request)
            key = session_key(headers, request, conversation.system_text, api.first_user_text(conversation.history))
            if engine is None:
                engine = build_engine(MemorySessionLog(key.id), engine_spec(request, config))
            exchange = Exchange(api, MODEL, started)
            # No HTTP request here: preparing never reads it (only sending does).
            turn = Turn(proxy, api, None, engine, request, conversation, memo, exchange)  # type: ignore[arg-type]
            outgoing = turn.prepare()
            elapsed = (time.perf_counter() - started) * 1000
            received.append(exchange.tokens_received)
            memo.retired = None  # freed while the upstream works, in the app
            if n >= WARMUP:
                hot.append(elapsed)
                events = outgoing.prepared.events if outgoing.prepared is not None else []
                deliberate = any(isinstance(e, DELIBERATE) or e.is_compaction for e in events)
                (eventful if deliberate else steady).append(elapsed)
                began = time.perf_counter()
                orjson.loads(raw)
                parse.append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                json.dumps(json.loads(raw))
                stdlib.append((time.perf_counter() - began) * 1000)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    result = {
        "policy": args.policy, "requests": len(hot), "body_bytes": len(raw), "messages": len(body["messages"]),
        "tokens_received_median": int(statistics.median(received[WARMUP:])),
        "tokens_received_range": [received[WARMUP], received[-1]], "tokens_forwarded_last": outgoing.tokens,
        "cache_prefix_reuse": round(outgoing.reuse, 4),
        "hot_path_p50_ms": round(statistics.median(hot), 3), "hot_path_p95_ms": round(percentile(hot, 0.95), 3),
        "hot_path_max_ms": round(max(hot), 3),
        "steady_p50_ms": round(statistics.median(steady), 3) if steady else None,
        "steady_p95_ms": round(percentile(steady, 0.95), 3) if steady else None,
        "eventful_requests": len(eventful), "eventful_max_ms": round(max(eventful), 3) if eventful else None,
        "orjson_full_parse_p50_ms": round(statistics.median(parse), 3),
        "stdlib_json_p50_ms": round(statistics.median(stdlib), 3),
    }
    return result


if __name__ == "__main__":
    outcome = main(sys.argv[1:])
    print(f"hot path p50 {outcome['hot_path_p50_ms']} ms, p95 {outcome['hot_path_p95_ms']} ms at "
          f"{outcome['tokens_received_median']:,} tokens (the last body {outcome['body_bytes']:,} bytes); stdlib json "
          f"round trip "
          f"{outcome['stdlib_json_p50_ms']} ms p50 in the same run")
    print(json.dumps(outcome))
