"""Token accounting. (Placeholder until the token-accounting work lands: a chars/4 counter.)"""

from __future__ import annotations

import json

from ctxwin.messages import Image, Message, Text, Thinking, ToolCall, ToolResult
from ctxwin.tokens.base import TokenCounter


class _Chars4:
    name = "estimate:chars4"
    exact = False

    def count_text(self, text: str) -> int:
        return (len(text) + 3) // 4

    def count_message(self, message: Message) -> int:
        total = 4
        for block in message.blocks:
            if isinstance(block, Text):
                total += self.count_text(block.text)
            elif isinstance(block, Thinking):
                total += self.count_text(block.thinking)
            elif isinstance(block, ToolCall):
                total += self.count_text(block.name + json.dumps(block.arguments))
            elif isinstance(block, ToolResult):
                total += sum(self.count_text(p.text) if isinstance(p, Text) else 1200 for p in block.content)
            elif isinstance(block, Image):
                total += 1200
        return total


def counter_for(model: str | None = None) -> TokenCounter:
    return _Chars4()


__all__ = ["TokenCounter", "counter_for"]
