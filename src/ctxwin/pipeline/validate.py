"""Validation per request, in time proportional to what changed.

`pairing.validate` is one linear pass; on a 10,000-message session that is tens of milliseconds on
every call. But a request almost always extends the previous one, which was valid: then only the
part from the last turn boundary before the new messages needs checking, plus one look-up per new
tool call for ids the unchanged prefix already used. Everything else (a prefix that changed, a first
call, a view with problems) gets the full pass. The answer is the same as the full pass: the
property tests check it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxwin.messages import Message, Text
from ctxwin.messages.pairing import Problem, Provider, validate

_OPENER = Message("user", (Text("(earlier conversation)"),))
"""Stands in for the validated prefix when only the tail is checked (the tail may start with an
assistant turn, which a provider accepts only after a user message)."""


@dataclass
class IncrementalValidator:
    provider: Provider = "anthropic"
    keys: list[str] = field(default_factory=list)  # content keys of the last view found valid
    call_index: dict[str, int] = field(default_factory=dict)  # its tool call ids -> message index

    def check(self, messages: Sequence[Message], keys: list[str]) -> list[Problem]:
        previous = len(self.keys)
        if previous and len(keys) >= previous and keys[:previous] == self.keys:
            boundary = _turn_start(messages, previous)
            if boundary > 0:
                problems = self._check_tail(messages, boundary)
                if not problems:
                    self._remember(messages, keys, boundary)
                return problems
        problems = validate(messages, self.provider)
        if problems:
            self.keys = []
            self.call_index = {}
        else:
            self.call_index = {}
            self._remember(messages, keys, 0)
        return problems

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

    def _remember(self, messages: Sequence[Message], keys: list[str], start: int) -> None:
        self.keys = list(keys)
        for index in range(start, len(messages)):
            for call in messages[index].tool_calls:
                self.call_index.setdefault(call.id, index)


def _turn_start(messages: Sequence[Message], limit: int) -> int:
    """The last index before `limit` where an assistant turn starts (every earlier call is answered
    there in a valid view); 0 when there is none."""
    for index in range(min(limit, len(messages)) - 1, 0, -1):
        if messages[index].role == "assistant" and messages[index - 1].role != "assistant":
            return index
    return 0
