"""The ecosystem baselines in `compare`: Anthropic's `clear_tool_uses_20250919` (a pure function, its
documented defaults) and LangChain's own middleware, counted exactly like the presets."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin.errors import InputError
from ctxwin.evaluation import compare
from ctxwin.evaluation.baselines import (
    ANTHROPIC_EDITS,
    CLEARED_PLACEHOLDER,
    KEEP_TOOL_USES,
    LANGCHAIN,
    TRIGGER_INPUT_TOKENS,
    AnthropicEdits,
    LangChainStep,
    clear_tool_uses,
)
from ctxwin.evaluation.compare import check_policies
from ctxwin.evaluation.replay import iter_replay
from ctxwin.messages import Message, ToolCall, assistant, tool_result, user, validate
from ctxwin.tokens import counter_for
from ctxwin.transcripts.model import Transcript

MODEL = "claude-sonnet-4-5"
COUNTER = counter_for(MODEL)


def count(message: Message) -> int:
    return COUNTER.count_message(message)


def output(n: int, chars: int) -> str:
    rng = random.Random(n)
    return f"OUT-{n} " + " ".join(f"w{rng.randint(0, 10**6)}" for _ in range(chars // 8))[:chars]


def loop(steps: int, chars: int, tools: tuple[str, ...] = ("read",)) -> list[Message]:
    messages = [user("Do the task.")]
    for n in range(steps):
        name = tools[n % len(tools)]
        messages.append(assistant(f"step {n}", ToolCall(f"c{n}", name, {"path": f"f{n}.txt"})))
        messages.append(tool_result(f"c{n}", output(n, chars), name=name))
    messages.append(assistant("done"))
    return messages


def transcript(steps: int, chars: int) -> Transcript:
    return Transcript(format="openai", messages=loop(steps, chars), model=MODEL, source="synthetic")


# --------------------------------------------------------------------------------------------------
# clear_tool_uses_20250919


def results_of(messages: list[Message]) -> list[str]:
    return [r.text for m in messages for r in m.tool_results]


def test_nothing_is_cleared_up_to_the_trigger() -> None:
    messages = loop(10, 500)
    cleared = clear_tool_uses(messages, TRIGGER_INPUT_TOKENS, count)
    assert cleared.messages == messages and cleared.cleared_tool_uses == 0


def test_over_the_trigger_all_but_the_last_three_tool_results_are_cleared() -> None:
    messages = loop(10, 500)
    cleared = clear_tool_uses(messages, TRIGGER_INPUT_TOKENS + 1, count)
    texts = results_of(cleared.messages)
    assert texts[:-KEEP_TOOL_USES] == [CLEARED_PLACEHOLDER] * (10 - KEEP_TOOL_USES)
    assert texts[-KEEP_TOOL_USES:] == results_of(messages)[-KEEP_TOOL_USES:]
    assert cleared.cleared_tool_uses == 7 and cleared.cleared_ids == tuple(f"c{n}" for n in range(7))
    assert cleared.cleared_input_tokens == sum(count(a) - count(b) for a, b in zip(messages, cleared.messages,
                                                                                     strict=True))
    assert [c.arguments for m in cleared.messages for c in m.tool_calls] == [
        {"path": f"f{n}.txt"} for n in range(10)]  # clear_tool_inputs defaults to false
    assert validate(cleared.messages, "anthropic") == []


def test_excluded_tools_inputs_and_clear_at_least() -> None:
    messages = loop(8, 500, tools=("read", "web_search"))
    cleared = clear_tool_uses(messages, 10**6, count, AnthropicEdits(exclude_tools=("web_search",),
                                                                     clear_tool_inputs=("read",)))
    names = [r.name for m in messages for r in m.tool_results]
    texts = results_of(cleared.messages)
    assert all(t != CLEARED_PLACEHOLDER for t, n in zip(texts, names, strict=True) if n == "web_search")
    assert texts[:5:2] == [CLEARED_PLACEHOLDER] * 3  # the reads among the oldest five
    calls = [c for m in cleared.messages for c in m.tool_calls]
    assert [c.arguments == {} for c in calls[:5]] == [True, False, True, False, True]
    huge = AnthropicEdits(clear_at_least=10**9)
    assert clear_tool_uses(messages, 10**6, count, huge).messages == messages  # "will not be applied"


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 12), st.integers(0, 5), st.integers(0, 300_000))
def test_clearing_keeps_the_request_valid_and_the_recent_results(steps: int, keep: int, tokens: int) -> None:
    messages = loop(steps, 50)
    cleared = clear_tool_uses(messages, tokens, count, AnthropicEdits(keep_tool_uses=keep))
    assert len(cleared.messages) == len(messages)
    assert validate(cleared.messages, "anthropic") == validate(messages, "anthropic") == []
    texts, before = results_of(cleared.messages), results_of(messages)
    kept = before if tokens <= TRIGGER_INPUT_TOKENS else before[len(before) - min(keep, len(before)):]
    assert texts[len(texts) - len(kept):] == kept
    assert cleared.cleared_tool_uses == len(before) - len(kept)


# --------------------------------------------------------------------------------------------------
# In the comparison


def test_both_baselines_are_counted_like_every_policy() -> None:
    source = transcript(40, 12_000)  # ~160K tokens by the end: Anthropic's 100K trigger fires
    data = compare(source, ["raw", "truncate", ANTHROPIC_EDITS, LANGCHAIN]).to_dict()
    rows = data["policies"]
    calls = len([m for m in source.messages if m.role == "assistant"])
    raw = rows["raw"]
    for name in (ANTHROPIC_EDITS, LANGCHAIN):
        row = rows[name]
        assert row["calls"] == calls and row["valid"] and row["over_budget_calls"] == 0, name
        assert row["budget"] == rows["truncate"]["budget"] and row["window"] == rows["truncate"]["window"]
        # Before anything is edited a baseline sends exactly what raw sends, to the token.
        assert row["timeline"][0]["tokens"] == raw["timeline"][0]["tokens"]
        assert row["cumulative_input_tokens"] < raw["cumulative_input_tokens"], name
    edits = rows[ANTHROPIC_EDITS]
    first = next(i for i, c in enumerate(raw["timeline"]) if c["tokens"] > TRIGGER_INPUT_TOKENS)
    assert [c["tokens"] for c in edits["timeline"][:first]] == [c["tokens"] for c in raw["timeline"][:first]]
    assert edits["timeline"][first]["tokens"] < raw["timeline"][first]["tokens"]
    assert edits["events"] == {"context_editing": len(raw["timeline"]) - first}  # one more result cleared a call
    assert rows[LANGCHAIN]["events"].get("context_editing", 0) >= 1  # ClearToolUsesEdit's own 100K trigger


def test_over_window_requests_are_counted_not_hidden() -> None:
    # A 40K window: Anthropic's edit waits for 100K input tokens, so requests go over the window.
    data = compare(transcript(30, 8_000), ["truncate", ANTHROPIC_EDITS, LANGCHAIN], window=40_000).to_dict()
    rows = data["policies"]
    assert rows["truncate"]["over_budget_calls"] == 0
    edits = rows[ANTHROPIC_EDITS]
    assert edits["over_budget_calls"] == sum(1 for c in edits["timeline"] if c["tokens"] > edits["budget"]) > 0
    chain = rows[LANGCHAIN]
    assert chain["compactions"] >= 1  # SummarizationMiddleware at 80 % of the 40K window


def test_the_langchain_baseline_is_langchains_own_middleware() -> None:
    # What it sends carries LangChain's own summary wording: the real SummarizationMiddleware ran.
    from ctxwin.evaluation.baselines import iter_baseline

    texts = []
    for _index, prepared, _engine in iter_baseline(transcript(30, 8_000), LANGCHAIN, window=40_000):
        texts.append("\n".join(m.text for m in prepared.messages))
        assert prepared.valid
    assert any(t.startswith("Here is a summary of the conversation to date:") for t in texts)
    summary = next(i for i, t in enumerate(texts) if t.startswith("Here is a summary"))
    assert summary > 0 and not texts[0].startswith("Here is a summary")


def test_baselines_follow_the_raw_replay_call_for_call() -> None:
    from ctxwin.evaluation.baselines import iter_baseline

    source = transcript(5, 300)
    raw = [(i, p.tokens) for i, p, _ in iter_replay(source, "raw")]
    ours = [(i, p.tokens) for i, p, _ in iter_baseline(source, ANTHROPIC_EDITS)]
    assert ours == raw  # under the trigger the edit changes nothing: same calls, same counts


def test_a_missing_langchain_gets_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "langchain.agents.middleware", None)
    with pytest.raises(InputError, match="pip install 'ctxwin\\[langchain\\]'"):
        compare(transcript(3, 100), ["raw", LANGCHAIN])  # refused before raw is replayed
    with pytest.raises(InputError, match="pip install 'ctxwin\\[langchain\\]'"):
        LangChainStep(10_000)


def test_baselines_only_where_they_can_run() -> None:
    assert check_policies([LANGCHAIN, ANTHROPIC_EDITS], ecosystem=True) == [LANGCHAIN, ANTHROPIC_EDITS]
    with pytest.raises(InputError, match="cannot be scored here"):
        check_policies([LANGCHAIN])


def test_replay_compare_on_the_command_line(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from ctxwin.cli.main import app
    from ctxwin.messages import to_openai_chat

    path = tmp_path / "session.json"
    path.write_text(json.dumps(to_openai_chat(loop(12, 2_000))), "utf-8")
    result = CliRunner().invoke(app, ["replay", str(path), "--policy", "raw", "--compare",
                                      f"{LANGCHAIN},{ANTHROPIC_EDITS}", "--json", "--quiet"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["policies"]
    assert set(rows) == {"raw", LANGCHAIN, ANTHROPIC_EDITS}
    assert rows[LANGCHAIN]["calls"] == rows[ANTHROPIC_EDITS]["calls"] == rows["raw"]["calls"] == 13
