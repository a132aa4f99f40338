"""Validation per request, in time proportional to what changed.

`pairing.validate` is one linear pass; on a 10,000-message session that is tens of milliseconds on
every call. But a request shares most of its messages with the previous one, which was valid: only
the part from the last turn boundary before the first changed (or new) message needs checking, plus
one look-up per tool call there for ids the unchanged prefix already used. A first call, or a change
before the first turn boundary, gets the full pass. The answer is the same as the full pass: the
property tests check it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxwin.messages import Message, Text
from ctxwin.messages.pairing import Problem, Provider, validate

_OPENER = Message("user", (Text("(earlier conversation)"),))
"""Stands in for the validated prefix when only the tail is checked (the tail may start with an
assistant turn, which a provider accepts only after a user message)."""


@dataclass
class IncrementalValidator:
    provider: Provider = "anthropic"
    keys: list[Any] = field(default_factory=list)  # shapes (or content keys) of the last view found valid
    call_index: dict[str, int] = field(default_factory=dict)  # its tool call ids -> message index
    calls: list[tuple[int, str]] = field(default_factory=list)  # the same, in message order

    def check(self, messages: Sequence[Message], keys: list[Any]) -> list[Problem]:
        """The problems of `messages` (whose shapes, or content keys, are `keys`: anything equal for
        messages that validate alike), as `validate` would report them. Only the part from the last
        turn boundary before the first message that differs from the last valid view is checked
        (with one look-up per call id for ids used before it)."""
        if self.keys:
            common = common_prefix(keys, self.keys)
            boundary = _turn_start(messages, common)
            if boundary > 0:
                problems = self._check_tail(messages, boundary)
                if not problems:
                    self._forget_from(boundary)
                    self._remember(messages, keys, boundary)
                return problems
        problems = validate(messages, self.provider)
        self.call_index = {}
        self.calls = []
        if problems:
            self.keys = []
        else:
            self._remember(messages, keys, 0)
        return problems

    def _forget_from(self, boundary: int) -> None:
        """Drop the calls at or after `boundary` (they are checked and remembered again)."""
        calls = self.calls
        while calls and calls[-1][0] >= boundary:
            index, call_id = calls.pop()
            if self.call_index.get(call_id) == index:
                del self.call_index[call_id]

    def _check_tail(self, messages: Sequence[Message], boundary: int) -> list[Problem]:
        tail = [_OPENER, *messages[boundary:]]
        problems = [Problem(p.kind, p.index - 1 + boundary, p.call_id, p.detail)
                    for p in validate(tail, self.provider) if p.index > 0]
        for offset, message in enumerate(messages[boundary:]):
            for call in message.tool_calls:
                earlier = self.call_index.get(call.id)
                if earlier is not None and earlier < boundary:
                    problems.append(Problem("duplicate_call_id", boundary + offset, call.id,
                                            "an earlier call has the same id"))
        return problems

    def _remember(self, messages: Sequence[Message], keys: list[Any], start: int) -> None:
        self.keys = keys
        for index in range(start, len(messages)):
            for call in messages[index].tool_calls:
                if call.id not in self.call_index:
                    self.call_index[call.id] = index
                    self.calls.append((index, call.id))


def common_prefix(a: list[Any], b: list[Any]) -> int:
    """Length of the longest common prefix of two key lists. Usually `b` is a prefix of `a` (the
    request grew): one slice comparison in C; otherwise a binary search over slice comparisons."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low


def _turn_start(messages: Sequence[Message], limit: int) -> int:
    """The last index before `limit` where an assistant turn starts (every earlier call is answered
    there in a valid view); 0 when there is none."""
    for index in range(min(limit, len(messages)) - 1, 0, -1):
        if messages[index].role == "assistant" and messages[index - 1].role != "assistant":
            return index
    return 0
