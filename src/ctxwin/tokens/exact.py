"""Exact counts with OpenAI's tokenizers (tiktoken), from the vendored encodings: no network."""

from __future__ import annotations

from ctxwin.errors import ArgumentError
from ctxwin.messages import Message
from ctxwin.tokens.encodings import ALIASES, SPECS, get_encoding
from ctxwin.tokens.framing import count_message_with


class TiktokenCounter:
    """Counts with a real OpenAI encoding ("o200k_base" or "cl100k_base"). The encoding is loaded
    (and its sha256 checked) on first use and shared by every counter in the process. Special-token
    text such as "<|endoftext|>" is counted as the plain text it is."""

    exact = True

    def __init__(self, encoding: str = "o200k_base") -> None:
        encoding = ALIASES.get(encoding, encoding)
        if encoding not in SPECS:
            raise ArgumentError(f"unknown encoding {encoding!r}; known: {', '.join(SPECS)}")
        self.encoding = encoding
        self.name = f"tiktoken:{encoding}"

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        # encode_ordinary: no special-token scan, and tiktoken itself replaces lone surrogates
        return len(get_encoding(self.encoding).encode_ordinary(text))

    def count_message(self, message: Message) -> int:
        return count_message_with(self.count_text, message, "openai")
