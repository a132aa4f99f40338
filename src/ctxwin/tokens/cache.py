"""A token cache keyed by content, so the same content is never counted twice."""

from __future__ import annotations

from collections import OrderedDict

from ctxwin.messages import Message
from ctxwin.tokens.base import TokenCounter

MAX_MESSAGES = 200_000  # message counts remembered (about 30 MB); the least recently used go first
MAX_TEXTS = 4_096  # text counts remembered (system prompts, tool schemas, summaries ...)
MAX_TEXT_CHARS = 32_000_000  # ... holding at most this many characters of text alive in all


class CachedCounter:
    """Wraps a counter: `count_message` is computed once per distinct content (`Message.content_key`,
    whatever the message's id) and `count_text` once per distinct text. `hits` and `misses` say how
    often the inner counter was spared or used (messages and texts together).

    Texts are keyed by the string itself: Python caches a string's hash on the object, so asking
    again with the same object (the engine's system prompt, every turn) costs one dict lookup, and
    an equal copy costs one hash of its bytes, far less than counting it. Keys are exact, so two
    texts never share a count.

    Put calibration outside the cache (`CalibratedCounter(CachedCounter(c), calibrator)`): the
    cache stores raw counts, which do not go stale when the factor moves."""

    def __init__(self, counter: TokenCounter, max_entries: int = MAX_MESSAGES, max_texts: int = MAX_TEXTS,
                 max_text_chars: int = MAX_TEXT_CHARS) -> None:
        self.inner = counter
        self.name = counter.name
        self.exact = counter.exact
        self.max_entries = max_entries
        self.max_texts = max_texts
        self.max_text_chars = max_text_chars
        self.hits = 0
        self.misses = 0
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._texts: OrderedDict[str, int] = OrderedDict()
        self._text_chars = 0

    def count_text(self, text: str) -> int:
        count = self._texts.get(text)
        if count is not None:
            self.hits += 1
            self._texts.move_to_end(text)
            return count
        self.misses += 1
        count = self.inner.count_text(text)
        if len(text) <= self.max_text_chars:
            self._texts[text] = count
            self._text_chars += len(text)
            while len(self._texts) > self.max_texts or self._text_chars > self.max_text_chars:
                evicted, _ = self._texts.popitem(last=False)
                self._text_chars -= len(evicted)
        return count

    def count_message(self, message: Message) -> int:
        key = message.content_key
        count = self._counts.get(key)
        if count is not None:
            self.hits += 1
            self._counts.move_to_end(key)
            return count
        self.misses += 1
        count = self._counts[key] = self.inner.count_message(message)
        if len(self._counts) > self.max_entries:
            self._counts.popitem(last=False)
        return count

    def __len__(self) -> int:
        """Counts held (messages and texts)."""
        return len(self._counts) + len(self._texts)
