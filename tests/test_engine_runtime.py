"""What the engine keeps between calls stays true to what it describes: the running token total of the
view is the sum of the request's items, call after call, whatever the stages did (masking batches,
compactions, fits, repairs)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin.engine import ContextEngine
from ctxwin.messages import Message
from ctxwin.pipeline.view import total_tokens
from test_engine import PRESETS, sessions


@pytest.mark.slow
@pytest.mark.parametrize("policy", PRESETS)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=sessions(), window=st.sampled_from([6_000, 16_000, 60_000]))
def test_a_request_counts_what_it_holds(policy: str, messages: list[Message], window: int) -> None:
    engine = ContextEngine(model="gpt-4o", policy=policy, window=window, max_output=1_000)
    for message in messages:
        if message.role == "assistant":
            prepared = engine.prepare()
            assert prepared.raw_tokens == prepared.system_tokens + total_tokens(prepared.items)
        engine.append(message)
    prepared = engine.prepare()
    assert prepared.raw_tokens == prepared.system_tokens + total_tokens(prepared.items)
