"""Typed log entries: every kind round-trips through its payload, malformed payloads are one typed
error, and sessions written by the release before the typed entries open and render byte for byte
as that release rendered them (tests/fixtures/sessions, made by make_sessions.py there)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ctxwin import ContextEngine, Session
from ctxwin.errors import EntryFormatError
from ctxwin.messages import Message, Text, ToolCall
from ctxwin.store.entries import (
    KINDS,
    CalibrationEntry,
    CompactionEntry,
    CustomEntry,
    DecisionEntry,
    LabelEntry,
    MessageEntry,
    ModelChangeEntry,
    PinEntry,
    RecoveryEntry,
    epoch,
    parse,
)

FIXTURES = Path(__file__).parent / "fixtures" / "sessions"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text("utf-8"))

ENTRIES = [
    MessageEntry(Message("assistant", (Text("hi"), ToolCall("c1", "read", {"path": "a.py"})))),
    DecisionEntry("mask", {"e1": Message("tool", (Text("[cleared]"),)), "e2": None}, [{"stage": "mask"}]),
    CompactionEntry("summary text", "e9", 1000, 200, "pi", covered_ids=("e1", "e2"), read_files=("a.py",),
                    sections={"Goal": ["x"]}, attachments=({"path": "a.py", "text": "..."},),
                    summarizer_state={"extractive": {"k": 1}}),
    PinEntry("e3"),
    LabelEntry("before-refactor", "e4"),
    ModelChangeEntry("claude-sonnet-4-5", "import"),
    CalibrationEntry({"factor": 1.2, "observations": 3}),
    RecoveryEntry(30_000, 4_000, 0.85, "anthropic", 31_000, 30_000),
    CustomEntry("custom", {"type": "my-app", "x": 1}),
]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: type(e).__name__)
def test_every_kind_round_trips_through_its_payload(entry: object) -> None:
    payload = json.loads(json.dumps(entry.to_payload()))  # as the log stores it
    assert parse(entry.kind, payload) == entry


def test_kinds_are_derived_from_the_types() -> None:
    assert {"message", "decision", "compaction", "pin", "label", "custom"} <= set(KINDS)


@pytest.mark.parametrize(("kind", "payload"), [
    ("decision", {"stage": "mask"}),
    ("compaction", {"first_kept_id": "x"}),
    ("pin", {}),
    ("message", {"role": "user", "blocks": "x"}),
    ("custom", {"type": "recovery", "window": "lots"}),
])
def test_a_malformed_payload_is_one_typed_error_naming_the_entry(kind: str, payload: dict) -> None:
    with pytest.raises(EntryFormatError, match="e7"):
        parse(kind, payload, entry_id="e7")


def test_an_unknown_kind_is_kept_as_it_is() -> None:
    assert parse("future_kind", {"model": "x"}) == CustomEntry("future_kind", {"model": "x"})


def test_epoch_reads_iso_text_and_milliseconds() -> None:
    assert epoch("2026-01-01T00:00:00Z") == 1_767_225_600.0
    assert epoch(1_767_225_600_000) == 1_767_225_600.0
    assert epoch("yesterday") is None and epoch(None) is None and epoch(True) is None


@pytest.mark.parametrize("policy", sorted(EXPECTED["reopened"]))
def test_sessions_of_the_previous_release_render_byte_identically(policy: str, tmp_path: Path) -> None:
    folder = tmp_path / policy
    shutil.copytree(FIXTURES / policy, folder)
    session = Session.open(folder)
    try:
        engine = ContextEngine(session, model="gpt-4o", policy=policy, window=20_000, max_output=4_000,
                               system="You are a test agent.", clock=lambda: 1_767_300_000.0)
        prepared = engine.prepare()
        want = EXPECTED["reopened"][policy]
        assert json.dumps(prepared.to_anthropic(), sort_keys=True) == want["anthropic"]
        assert json.dumps(prepared.to_openai_chat(), sort_keys=True) == want["openai"]
        assert engine.health() == want["health"]
    finally:
        session.close()
