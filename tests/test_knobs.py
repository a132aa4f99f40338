"""Issue 18: the knobs users of OpenClaw, Claude Code and Letta look for. Turn triggers, keep-by-turns
and `max_turns` (with and without `summary_after`) keep every invariant, on random sessions and on
real ones; strategy levels sit on top of any preset; OpenClaw configs import with every unmapped
key named; restore points mark, rewind and resume on both store backends; a policy file edited
under a running engine takes effect at the next request, and a bad edit is refused."""

from __future__ import annotations

import json
import os
import time
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import shared_path
from ctxwin import ContextEngine, policies
from ctxwin.errors import InputError
from ctxwin.evaluation.replay import iter_replay
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.messages.pairing import validate
from ctxwin.policies.model import compaction_for
from ctxwin.transcripts import load_transcript
from store_backends import LOG_BACKENDS, unique_id
from test_engine import check_call, check_recoverable, run_session, sessions


def with_compaction(name: str, **update: object) -> policies.Policy:
    base = policies.get(name)
    return base.model_copy(update={"name": f"{name}+turns",
                                   "compaction": compaction_for(base.compaction.strategy, base.compaction,
                                                                enabled=True, **update)})


TURN_POLICIES = {
    "turn-trigger": with_compaction("ctxwin", trigger_turns=2, keep_recent_turns=1, keep_recent_tokens=0),
    "keep-turns": with_compaction("pi", keep_recent_turns=2),
    "max-turns-drop": with_compaction("pi", max_turns=2),
    "max-turns-summary": with_compaction("openclaw", max_turns=2, summary_after=1),
    "aggressive": policies.get("ctxwin:aggressive"),
    "conservative": policies.get("pi:conservative"),
}


def turns_in(messages: list[Message]) -> int:
    """Turns the model sees: user messages, not the summary or the marker where history was dropped."""
    synthetic = ("The conversation history", "[")
    return sum(1 for m in messages if m.role == "user" and not m.text.startswith(synthetic))


@pytest.mark.parametrize("name", TURN_POLICIES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(messages=sessions(), window=st.sampled_from([6_000, 16_000, 60_000]))
def test_turn_knobs_keep_every_invariant(name: str, messages: list[Message], window: int, tmp_path) -> None:
    engine = run_session(messages, TURN_POLICIES[name], window, tmp_path)
    check_recoverable(engine)
    if name == "max-turns-drop":
        assert turns_in(engine.prepare().messages) <= 2


def conversation(turns: int) -> list[Message]:
    out: list[Message] = []
    for t in range(turns):
        out += [Message("user", (Text(f"turn {t}: please do step {t}"),)), Message("assistant", (Text(f"did {t}"),))]
    return out


def test_the_turn_trigger_fires_before_the_token_trigger() -> None:
    engine = ContextEngine(model="gpt-4o", policy=TURN_POLICIES["turn-trigger"])
    previous = None
    for message in conversation(6):
        if message.role == "assistant":
            previous = check_call(engine, previous)
        engine.append(message)
    compactions = [e for e in engine.session.path() if e.kind == "compaction"]
    assert compactions, "three turns passed trigger_turns = 2 without a compaction"
    assert all(e.payload["tokens_before"] < 1_000 for e in compactions)  # far below any token trigger


def test_max_turns_without_summary_drops_the_oldest_turns_and_keeps_them_in_the_log() -> None:
    engine = ContextEngine(model="gpt-4o", policy=TURN_POLICIES["max-turns-drop"])
    engine.append(conversation(5))
    prepared = engine.prepare()
    assert [m.text for m in prepared.messages if m.role == "user"][-2:] == ["turn 3: please do step 3",
                                                                            "turn 4: please do step 4"]
    assert turns_in(prepared.messages) == 2
    assert "dropped" in prepared.messages[0].text  # the marker says where the rest are
    assert any(e.action == "drop_turns" for e in prepared.events)
    assert len(engine.messages) == 10


def test_max_turns_with_summary_after_summarizes_in_batches() -> None:
    engine = ContextEngine(model="gpt-4o", policy=TURN_POLICIES["max-turns-summary"])
    counts = []
    for message in conversation(8):
        engine.append(message)
        if message.role == "user":
            prepared = engine.prepare()
            counts.append(sum(1 for e in prepared.events if e.stage == "compaction" and e.action != "failed"))
    # A compaction every time max_turns + summary_after (3) turns piled up, not on every turn.
    assert 0 < sum(counts) < len(counts) / 2


def test_identifier_policy_off_leaves_the_summary_as_written() -> None:
    strict = ContextEngine(model="gpt-4o", policy=with_compaction("pi", keep_recent_tokens=0))
    off = ContextEngine(model="gpt-4o", policy=with_compaction("pi", keep_recent_tokens=0, identifier_policy="off"))
    for engine in (strict, off):
        engine.append(conversation(3))
        engine.compact()
    guarded = [e.payload["details"]["identifier_guard"] for e in strict.session.path() if e.kind == "compaction"]
    unguarded = [e.payload["details"]["identifier_guard"] for e in off.session.path() if e.kind == "compaction"]
    assert guarded != [{}] and unguarded == [{}]


@pytest.mark.shared
@pytest.mark.parametrize("name", ["max-turns-summary", "turn-trigger"])
def test_turn_knobs_on_a_real_session(name: str) -> None:
    transcript = load_transcript(shared_path("pi", "before-compaction.jsonl"))  # 58 user turns
    compactions = 0
    engine = None
    for _, prepared, engine in iter_replay(transcript, TURN_POLICIES[name]):  # noqa: B007 (the last one is used)
        assert validate(prepared.messages, "anthropic") == [] and validate(prepared.messages, "openai_chat") == []
        assert prepared.tokens <= prepared.budget
        compactions += sum(1 for e in prepared.events if e.stage == "compaction" and e.action != "failed")
    assert compactions >= 1
    reopened = ContextEngine(engine.session, model=engine.model, policy=TURN_POLICIES[name], window=engine.window,
                             clock=engine.clock)
    assert json.dumps(reopened.prepare().to_anthropic()) == json.dumps(engine.prepare().to_anthropic())


# --------------------------------------------------------------------------------------------------
# Strategy levels


@pytest.mark.parametrize("preset", ["ctxwin", "pi", "openclaw", "claude-code", "letta"])
def test_levels_move_the_same_knobs_the_same_way(preset: str) -> None:
    aggressive, balanced, conservative = (policies.get(f"{preset}:{level}") for level in policies.LEVELS)
    assert balanced.compaction == policies.get(preset).compaction
    window = 200_000
    from ctxwin.compaction.compact import threshold

    assert (threshold(window, aggressive.compaction) < threshold(window, balanced.compaction)
            <= threshold(window, conservative.compaction))
    assert aggressive.mask.keep_last <= balanced.mask.keep_last <= conservative.mask.keep_last
    with pytest.raises(InputError):
        policies.get(f"{preset}:reckless")


# --------------------------------------------------------------------------------------------------
# OpenClaw configs


OPENCLAW = {
    "compaction": {"enabled": True, "mode": "safeguard", "keepRecentTokens": 12000, "identifierPolicy": "strict",
                   "qualityGuard": {"enabled": True}, "reserveTokensFloor": 20000},
    "context_window": 200000, "max_turns": 40, "summary_after": 10, "preserveRecent": 5,
    "session": {"compact": {"autoTrigger": {"tokenThreshold": 100000, "turnThreshold": 50}}},
    "strategy": "balanced", "theme": "dark",
}


def test_an_openclaw_config_imports_and_names_what_it_could_not_map(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json"
    path.write_text(json.dumps(OPENCLAW))
    imported = policies.openclaw_file(path)
    c = imported.policy.compaction
    assert (c.strategy, c.enabled, c.keep_recent_tokens, c.reserve_tokens) == ("openclaw", True, 12000, 20000)
    assert (c.trigger_tokens, c.trigger_turns, c.max_turns, c.summary_after, c.keep_recent_turns) == (
        100000, 50, 40, 10, 5)
    assert c.identifier_policy == "strict"
    assert set(imported.unmapped) == {"compaction.qualityGuard", "context_window", "theme"}
    # The water line: a 200K window with a 20K reserve triggers at 180K.
    from ctxwin.compaction.compact import threshold

    assert threshold(200_000, c) == 180_000
    # Round trip: the TOML it prints loads back to the same policy.
    toml = tmp_path / "imported.toml"
    toml.write_text(policies.to_toml(imported.policy))
    assert policies.load(toml) == imported.policy


def test_the_yaml_session_compact_form(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.yaml"
    path.write_text("session:\n  compact:\n    enabled: true\n    autoTrigger:\n      tokenThreshold: 100000\n"
                    "      turnThreshold: 50\n      idleMinutes: 5\n")
    imported = policies.openclaw_file(path)
    assert (imported.policy.compaction.trigger_tokens, imported.policy.compaction.trigger_turns) == (100000, 50)
    assert set(imported.unmapped) == {"session.compact.autoTrigger.idleMinutes"}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"compaction": {"keepRecentTokens": -5}}'])
def test_a_bad_openclaw_config_is_one_typed_error(text: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(InputError):
        policies.openclaw_file(path)


# --------------------------------------------------------------------------------------------------
# Restore points


def open_session(backend: str, tmp_path: Path, request: pytest.FixtureRequest, name: str = "s"):
    from ctxwin import Session

    if backend == "jsonl":
        return Session.open(tmp_path / name)
    return Session.postgres(request.getfixturevalue("postgres_dsn"), unique_id(name))


@pytest.mark.parametrize("backend", LOG_BACKENDS)
def test_mark_rewind_and_resume_lose_nothing(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    log = open_session(backend, tmp_path, request)
    request.addfinalizer(log.close)
    engine = ContextEngine(log, model="gpt-4o")
    ids = engine.append(conversation(2))
    assert engine.mark("before-refactor") == ids[-1]
    engine.append(conversation(3)[4:])  # turn 2
    assert engine.marks() == {"before-refactor": ids[-1]}
    engine.rewind("before-refactor")
    assert [m.text for m in engine.messages][-1] == "did 1"
    engine.append(Message("user", (Text("a different direction"),)))
    # Nothing lost: the abandoned turn is still in the log, on its own branch.
    everything = [Message.from_dict(e.payload).text for e in log if e.kind == "message"]
    assert "turn 2: please do step 2" in everything and "a different direction" in everything
    with pytest.raises(InputError, match="exists"):
        engine.mark("before-refactor")
    with pytest.raises(InputError, match="before-refactor"):
        engine.rewind("nowhere")


@pytest.mark.parametrize("backend", LOG_BACKENDS)
def test_a_rewound_stored_session_resumes_on_the_new_branch(backend: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    session = open_session(backend, tmp_path, request)
    engine = ContextEngine(session, model="gpt-4o")
    ids = engine.append(conversation(1))
    engine.mark("one")
    engine.append(conversation(2)[2:])
    engine.rewind("one")
    session_id = session.session_id
    session.close()
    from ctxwin import Session

    again = Session.open(tmp_path / "s") if backend == "jsonl" else Session.postgres(
        request.getfixturevalue("postgres_dsn"), session_id)
    request.addfinalizer(again.close)
    reopened = ContextEngine(again, model="gpt-4o")
    assert [m.text for m in reopened.messages] == ["turn 0: please do step 0", "did 0"]
    assert reopened.marks() == {"one": ids[-1]}


# --------------------------------------------------------------------------------------------------
# Live-tunable limits


def write_policy(path: Path, keep_last: int, *, text: str | None = None) -> None:
    path.write_text(text if text is not None else
                    f'base = "masking"\n[mask]\nkeep_last = {keep_last}\nbatch = 1\nmin_tokens = 0\n')
    stamp = time.time_ns() + 1_000_000_000  # a distinct mtime even on coarse file systems
    os.utime(path, ns=(stamp, stamp))


def test_a_policy_file_edited_under_a_running_engine(tmp_path: Path) -> None:
    path = tmp_path / "live.toml"
    write_policy(path, 4)
    engine = ContextEngine(model="gpt-4o", policy=str(path))
    for n in range(8):
        engine.append([Message("assistant", (ToolCall(f"c{n}", "bash", {"command": f"step {n}"}),)),
                       Message("tool", (ToolResult(f"c{n}", (Text(f"output {n} " * 50),), name="bash"),))])
    first = engine.prepare()
    masked_first = {i.entry_id: i.message for i in first.items if i.rendered_by == "mask"}
    assert engine.policy.mask.keep_last == 4 and len(masked_first) == 4  # 8 outputs, the last 4 kept
    write_policy(path, 2)
    second = engine.prepare()
    assert engine.policy.mask.keep_last == 2 and any(e.action == "reloaded" for e in second.events)
    masked_second = {i.entry_id: i.message for i in second.items if i.rendered_by == "mask"}
    assert len(masked_second) == 6  # the new limit applies to new decisions ...
    assert all(masked_second[k] == m for k, m in masked_first.items())  # ... the recorded ones keep their bytes
    decisions = [e for e in engine.session.path() if e.kind == "decision"]
    write_policy(path, 0, text="[mask\nkeep_last = ")  # an invalid edit
    third = engine.prepare()
    rejected = [e for e in third.events if e.action == "rejected"]
    assert rejected and "not valid TOML" in rejected[0].reason
    assert engine.policy.mask.keep_last == 2  # the last good policy stays
    assert [e for e in engine.session.path() if e.kind == "decision"] == decisions  # nothing re-decided
    assert not engine.prepare().events  # reported once, not on every request


def test_a_policy_file_can_switch_strategy_on_top_of_its_base(tmp_path: Path) -> None:
    path = tmp_path / "letta-on-ctxwin.toml"
    path.write_text('base = "ctxwin"\n[compaction]\nstrategy = "letta"\ntarget_ratio = 0.5\n')
    policy = policies.load(path)
    assert policy.compaction.strategy == "letta" and policy.compaction.trigger_ratio == 0.3  # shared knob kept


def test_an_openclaw_default_mode_reports_the_safeguard_knobs_it_cannot_take(tmp_path: Path) -> None:
    path = tmp_path / "oc.json"
    path.write_text(json.dumps({"compaction": {"mode": "default", "maxHistoryShare": 0.4, "keepRecentTokens": 9000}}))
    imported = policies.openclaw_file(path)
    assert imported.policy.compaction.strategy == "pi" and imported.policy.compaction.keep_recent_tokens == 9000
    assert "history_share" in imported.unmapped


@pytest.mark.parametrize("strategy", ["letta", "ctxwin", "pi"])
def test_a_turn_trigger_compacts_in_batches_whatever_the_strategy(strategy: str) -> None:
    """The kept tail holds at most half the turn trigger, so a compaction is not due again at once."""
    engine = ContextEngine(model="gpt-4o", policy=with_compaction(strategy, trigger_turns=4))
    compacted = []
    for t in range(12):
        engine.append(Message("user", (Text(f"turn {t}: do step {t}"),)))
        prepared = engine.prepare()
        compacted.append(any(e.stage == "compaction" and e.action != "failed" for e in prepared.events))
        engine.append(Message("assistant", (Text(f"did {t}"),)))
    assert any(compacted)
    assert not any(a and b for a, b in pairwise(compacted)), compacted
