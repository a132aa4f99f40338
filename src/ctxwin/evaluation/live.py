"""A transcript as live traffic: at every model call the real agent made, the request its harness
sends, the whole history so far in Anthropic Messages format, for driving the proxy the way an agent
drives it.

The calls are the replay's (`replay.model_calls`: before each assistant message) and each history is
the replay's too (every message before that call), so a proxy in front of a provider forwards what
`replay` prepares at the same calls. The harness's own compactions are not re-enacted (the replay
does not re-enact them either): the proxy's policy manages the window instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ctxwin.evaluation.replay import call_model, model_calls
from ctxwin.messages.providers.anthropic import to_anthropic
from ctxwin.transcripts.model import Transcript

LIVE_MAX_TOKENS = 8_192
"""The `max_tokens` each request asks for: Claude Code's default for its main loop's answers, and
under every preset's output reserve, so a request that fits the engine's budget fits the window."""
SESSION_HEADER = "x-ctxwin-session"


@dataclass(frozen=True, slots=True)
class LiveCall:
    """One request of the replayed agent: message `index` is what the real call produced."""

    index: int
    body: dict[str, Any]
    headers: dict[str, str]


def live_calls(transcript: Transcript, *, model: str | None = None, session: str | None = None,
               max_tokens: int = LIVE_MAX_TOKENS) -> Iterator[LiveCall]:
    """Every model call of `transcript` as the Anthropic request its harness sent (the whole history
    before the call). `session` names the conversation for the proxy (default: the transcript's id)."""
    name = session or transcript.session_id or "live-replay"
    for index in model_calls(transcript):
        history = to_anthropic(transcript.messages[:index])
        if not history["messages"]:
            continue  # an answer with nothing before it: no request a harness could have sent
        body: dict[str, Any] = {"model": model or call_model(transcript, index) or "claude-sonnet-4-5",
                                "max_tokens": max_tokens, **history}
        yield LiveCall(index, body, {SESSION_HEADER: name})
