"""`compare`: every preset and baseline replayed on one long shared session, the JSON keys the report
and the CLI rely on, and the invariants every policy must keep."""

from __future__ import annotations

import os

import pytest

from conftest import shared_path
from ctxwin import policies
from ctxwin.errors import InputError
from ctxwin.evaluation import RECORDED, compare, replay_setup
from ctxwin.evaluation.compare import DEFAULT_POLICIES, latest_session
from ctxwin.transcripts import load_transcript

SESSION = ("claude-code", "4d5611e5-241a-462a-8d15-5122611a9569.jsonl")
MEASURED_RECORDED_TOKENS = 12.10e6  # reference/measured-baselines.md: what the harness sent on this session
KEYS = {"calls", "cumulative_input_tokens", "peak_tokens", "compactions", "prefix_kept_fraction", "cost_cached_usd",
        "cost_uncached_usd", "events", "valid", "over_budget_calls", "timeline"}
TIMELINE_KEYS = {"call", "tokens", "categories", "cached_tokens", "events"}


@pytest.fixture(scope="module")
def comparison() -> dict:
    progress: list[tuple[str, int, int]] = []
    result = compare(str(shared_path(*SESSION)), DEFAULT_POLICIES, progress=lambda *a: progress.append(a))
    data = result.to_dict()
    data["_progress"] = progress
    return data


def test_every_preset_and_baseline_has_the_keys(comparison: dict) -> None:
    assert set(comparison["policies"]) == {*policies.names(), RECORDED}
    assert {"file", "model", "window", "overhead_tokens", "policies"} <= set(comparison)
    for name, row in comparison["policies"].items():
        assert set(row) >= KEYS, name
        assert len(row["timeline"]) == row["calls"]
        assert all(set(call) >= TIMELINE_KEYS for call in row["timeline"])
        assert sum(c["tokens"] for c in row["timeline"]) == row["cumulative_input_tokens"]
        assert max(c["tokens"] for c in row["timeline"]) == row["peak_tokens"]
        assert all(0 <= c["cached_tokens"] <= c["tokens"] for c in row["timeline"][1:])
        assert 0.1 * row["cost_uncached_usd"] <= row["cost_cached_usd"] <= 2.0 * row["cost_uncached_usd"]


def test_every_preset_is_valid_and_within_budget(comparison: dict) -> None:
    for name, row in comparison["policies"].items():
        assert row["valid"], name
        assert row["over_budget_calls"] == 0, name
        if name not in ("raw", RECORDED):
            assert row["peak_tokens"] <= row["budget"], name


def test_recorded_is_what_the_harness_sent(comparison: dict) -> None:
    transcript = load_transcript(shared_path(*SESSION))
    recorded = comparison["policies"][RECORDED]
    assert recorded["calls"] == len(transcript.usage)
    assert recorded["cumulative_input_tokens"] == sum(u.context_tokens for u in transcript.usage)
    assert recorded["cumulative_input_tokens"] == pytest.approx(MEASURED_RECORDED_TOKENS, rel=0.01)
    assert recorded["compactions"] == len(transcript.compactions) == 1


def test_overhead_and_calibration_put_every_policy_in_model_tokens(comparison: dict) -> None:
    transcript = load_transcript(shared_path(*SESSION))
    setup = replay_setup(transcript)
    first = min(transcript.usage, key=lambda u: u.message_index)
    assert setup.overhead_tokens == first.context_tokens - setup.first_call_counted
    assert 0.7 < setup.factor < 1.4 and setup.calibration_pairs >= 10
    raw, recorded = comparison["policies"]["raw"], comparison["policies"][RECORDED]
    # Before its compaction the harness sent everything, as raw does: the two agree call by call.
    compaction = transcript.compactions[0].index
    pairs = [(r["tokens"], c["tokens"]) for r, c in zip(raw["timeline"], recorded["timeline"], strict=True)
             if c["message_index"] < compaction]
    drift = sum(abs(a - b) for a, b in pairs) / sum(b for _, b in pairs)
    assert drift < 0.1
    assert raw["timeline"][0]["tokens"] == recorded["timeline"][0]["tokens"]


def test_nothing_managed_is_the_most_tokens_and_progress_is_reported(comparison: dict) -> None:
    rows = comparison["policies"]
    assert rows["raw"]["cumulative_input_tokens"] == max(r["cumulative_input_tokens"] for r in rows.values())
    assert rows["raw"]["compactions"] == 0 and rows["raw"]["events"] == {}
    assert rows["masking"]["events"]["mask"] > 0
    done = {task: (n, total) for task, n, total in comparison["_progress"]}
    assert all(n == total for n, total in done.values())
    assert set(done) == set(rows)


def test_unknown_policy_or_pricing_fails_before_any_work() -> None:
    path = str(shared_path("claude-code", "tool_heavy.jsonl"))
    with pytest.raises(InputError, match="unknown policy"):
        compare(path, ["ctxwin", "nope"])
    with pytest.raises(InputError, match="scheme"):
        compare(path, ["raw"], pricing="bedrock")


def test_latest_session_picks_the_newest_file(tmp_path) -> None:
    folder = tmp_path / ".pi" / "agent" / "sessions" / "project"
    folder.mkdir(parents=True)
    old, new = folder / "a.jsonl", folder / "b.jsonl"
    old.write_text("{}\n")
    new.write_text("{}\n")
    os.utime(old, (1, 1))
    assert latest_session("pi", home=tmp_path) == new
    with pytest.raises(InputError, match="no codex session"):
        latest_session("codex", home=tmp_path)
    with pytest.raises(InputError, match="unknown harness"):
        latest_session("cursor", home=tmp_path)


def test_a_replay_keeps_one_prompt_cache_per_model() -> None:
    from ctxwin.evaluation.replay import replay
    from ctxwin.messages import Message, Text, user
    from ctxwin.transcripts.model import Transcript

    def reply(text: str, model: str) -> Message:
        return Message("assistant", (Text(text),), meta={"model": model})

    opus, haiku = "claude-opus-4-6", "claude-haiku-4-5"
    messages = [user("first question " * 50), reply("answer one", opus), user("a quick one " * 20),
                reply("quick", haiku), user("another quick one " * 20), reply("quick again", haiku),
                user("back to the big one " * 20), reply("answer two", opus)]
    transcript = Transcript("test", messages, model=opus)
    calls = replay(transcript, "raw").calls
    assert [c.model for c in calls] == [opus, haiku, haiku, opus]
    assert calls[1].cached_tokens == 0  # Haiku has no cache yet, though Opus just sent this prefix
    assert 0 < calls[2].cached_tokens < calls[2].tokens  # Haiku's own previous request
    # Back on Opus: the prefix its own last request (call 0) shares with this one, not Haiku's.
    assert calls[3].cached_tokens == calls[0].tokens  # everything Opus sent before is a prefix of this
    run = compare(transcript, ["raw"]).to_dict()["policies"]["raw"]
    assert [c["model"] for c in run["timeline"]] == [opus, haiku, haiku, opus]
    single = compare(transcript, ["raw"], model=opus).to_dict()["policies"]["raw"]
    assert run["cost_cached_usd"] < single["cost_uncached_usd"]
    assert run["cost_uncached_usd"] < single["cost_uncached_usd"]  # Haiku's calls at Haiku's price
