"""The fake's prompt cache: which prefix of a request an earlier request of the same API and model
already wrote, counted the way each provider reports it (Anthropic's explicit `cache_control`
breakpoints with their 20-block lookback, OpenAI's automatic prefix caching in 128-token steps past
1,024)."""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Mapping
from typing import Any

from ctxwin.messages import Message, Text
from ctxwin.messages import providers as convert
from ctxwin.tokens.base import TokenCounter

MIN_CACHEABLE_TOKENS = 1_024  # a prompt prefix shorter than this is never cached (Anthropic and OpenAI)
OPENAI_CACHE_STEP = 128  # OpenAI caches in 128-token increments past the first 1,024
ANTHROPIC_LOOKBACK = 20  # a breakpoint reads a cache entry written up to 20 blocks before it (Anthropic's rule)


class PromptCache:
    """The prompt prefixes seen so far, per API and model (as digests), safe to share between the
    server's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[str, set[str]] = {}  # per API and model: digests of prompt prefixes seen

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()

    def hits(self, api: str, model: str, body: Mapping[str, Any], counter: TokenCounter, input_tokens: int, *,
             auto_breakpoints: bool = False) -> tuple[int, int]:
        """(cache read, cache write) tokens for this request, from the prompt prefixes seen before: the
        longest prefix of whole items (tool definitions, system prompt, messages) that an earlier request
        of the same API and model wrote, at most the request's counted input. `auto_breakpoints` treats
        every Anthropic item boundary as a breakpoint (prefix reuse shows without `cache_control`)."""
        items = _prompt_items(api, body)
        texts = [json.dumps(_cache_key_form(item), sort_keys=True) for _, item, _ in items]
        # each item counted on its own, so a shared prefix has the same size in every request that has it
        tokens_at = [min(input_tokens, size) for size in
                     itertools.accumulate(_item_tokens(api, kind, item, counter) for kind, item, _ in items)]
        digests, running = [], hashlib.blake2b(digest_size=16)
        for text in texts:  # the cache is keyed by content: where the breakpoints sit is not part of it
            running.update(text.encode())
            digests.append(running.copy().hexdigest())
        with self._lock:
            seen = self._seen.setdefault(f"{api}:{model}", set())
            if api == "anthropic":  # explicit breakpoints: read the longest cached one, write up to the last
                marked_at = {i for i, (_, _, marked) in enumerate(items) if marked}
                if auto_breakpoints and items:
                    marked_at |= set(range(len(items)))  # every item boundary is a breakpoint
                marks = [i for i in sorted(marked_at) if tokens_at[i] >= MIN_CACHEABLE_TOKENS]
                if not marks:
                    return 0, 0
                # each breakpoint also finds entries written up to ANTHROPIC_LOOKBACK items before it
                candidates = {j for m in marks for j in range(max(0, m - ANTHROPIC_LOOKBACK + 1), m + 1)}
                hit = max((i for i in candidates if digests[i] in seen), default=None)
                read = tokens_at[hit] if hit is not None else 0
                seen.update(digests[i] for i in marks)
                return read, tokens_at[marks[-1]] - read
            hit = max((i for i, digest in enumerate(digests) if digest in seen), default=None)
            seen.update(digests)
        prefix = tokens_at[hit] if hit is not None else 0
        if prefix < MIN_CACHEABLE_TOKENS:
            return 0, 0
        return MIN_CACHEABLE_TOKENS + (prefix - MIN_CACHEABLE_TOKENS) // OPENAI_CACHE_STEP * OPENAI_CACHE_STEP, 0


def _prompt_items(api: str, body: Mapping[str, Any]) -> list[tuple[str, Any, bool]]:
    """The prompt as a sequence of cacheable items in the order the API caches them: (kind: "tools",
    "system" or "message", the item, whether it carries a cache breakpoint)."""
    items: list[tuple[str, Any, bool]] = []
    if body.get("tools"):
        items.append(("tools", body["tools"], api == "anthropic" and _has_cache_control(body["tools"])))
    if api == "anthropic":
        if body.get("system"):
            items.append(("system", body["system"], _has_cache_control(body["system"])))
        return items + [("message", m, _has_cache_control(m)) for m in body.get("messages") or []]
    if api == "chat":
        return items + [("message", m, False) for m in body.get("messages") or []]
    listed = body.get("input")
    listed = [{"role": "user", "content": listed}] if isinstance(listed, str) else list(listed or [])
    if body.get("instructions"):
        items.append(("system", body["instructions"], False))
    return items + [("message", m, False) for m in listed]


def _item_tokens(api: str, kind: str, item: Any, counter: TokenCounter) -> int:
    """Tokens of one prompt item, counted like the request's input (tool definitions as their JSON, a
    system prompt or message through the canonical converter)."""
    if kind == "tools":
        return counter.count_text(json.dumps(item, sort_keys=True))
    try:
        if kind == "system":  # a string, or Anthropic's text blocks
            text = item if isinstance(item, str) else "\n".join(
                str(b.get("text", "")) for b in item if isinstance(b, Mapping))
            return counter.count_message(Message("system", (Text(text),)))
        if api == "anthropic":
            messages = convert.from_anthropic([item])
        elif api == "chat":
            messages = convert.from_openai_chat([item])
        else:
            messages = convert.from_openai_responses([item])
        return sum(counter.count_message(m) for m in messages)
    except (ValueError, TypeError, KeyError, AttributeError):
        return counter.count_text(json.dumps(item, sort_keys=True))


def _cache_key_form(value: Any) -> Any:
    """What a prompt cache keys on: the content, not where the breakpoints sit nor how it is spelled
    (Anthropic's string content is the same prompt as one text block)."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]  # a system prompt given as a string
    if isinstance(value, Mapping):
        out = {k: v for k, v in value.items() if k != "cache_control"}
        if isinstance(out.get("content"), str):
            out["content"] = [{"type": "text", "text": out["content"]}]
        return {k: _cache_key_form(v) if isinstance(v, Mapping | list) else v for k, v in out.items()}
    if isinstance(value, list):
        return [_cache_key_form(v) if isinstance(v, Mapping | list) else v for v in value]
    return value


def _has_cache_control(value: Any) -> bool:
    if isinstance(value, Mapping):
        return "cache_control" in value or any(_has_cache_control(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_cache_control(v) for v in value)
    return False

