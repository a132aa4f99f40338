"""Needles: unique values injected into real tool outputs, looked for after a policy has done its work.

Each needle is a line `The verification code for <key> is <UUID>.` put at the start, the middle (at a
line boundary) or the end of one real tool output, at a controlled age: the number of model calls
that have included the output, counting the next call after the session's end, where it is looked
for (age 1: the output arrived just before that call). The injected session is replayed under each
policy and the next view classifies every needle as

- `in_view`: the UUID is in the view's text;
- `recoverable`: not in the text, but an `entry:` ref or `blob:` handle the view shows resolves to
  content that holds it and is byte-identical to the injected output (verified);
- `lost`: neither. The session log still holds it (`in_log`, reported as a check of the "nothing is
  lost" invariant), but nothing in the view leads the model to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ctxwin.engine import ContextEngine
from ctxwin.errors import CtxwinError, InputError
from ctxwin.evaluation.compare import Progress, ReplaySetup, as_transcript, blob_store, check_policies, replay_setup
from ctxwin.evaluation.probes import message_text
from ctxwin.evaluation.replay import iter_replay, model_calls
from ctxwin.evaluation.retention import entry_messages, resolve_refs
from ctxwin.messages import Message, Text, ToolResult
from ctxwin.transcripts.model import Transcript

DEPTHS: tuple[str, ...] = ("start", "middle", "end")
AGES: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 200)
"""Target ages in model calls; an age the session is too short for is skipped."""
DEFAULT_POLICIES = ("ctxwin", "claude-code", "pi", "openclaw", "letta", "masking", "truncate", "raw")
STATES: tuple[str, ...] = ("in_view", "recoverable", "lost")
MIN_OUTPUT_CHARS = 200  # outputs shorter than this have no distinct start, middle and end
NAMESPACE = uuid.UUID("6f1d3c5e-8a47-4a4b-9d7e-2c0b5e1f9a33")  # needle UUIDs are uuid5 in this namespace


@dataclass(frozen=True, slots=True)
class Needle:
    key: str
    value: str
    age: int
    target_age: int
    depth: str
    message_index: int
    call_id: str

    @property
    def line(self) -> str:
        return f"The verification code for {self.key} is {self.value}."


def insert(text: str, line: str, depth: str) -> str:
    """`text` with `line` added at its start, end, or the line boundary nearest its middle."""
    if depth == "start":
        return f"{line}\n{text}"
    if depth == "end":
        return f"{text}\n{line}"
    middle = len(text) // 2
    before, after = text.rfind("\n", 0, middle), text.find("\n", middle)
    candidates = [p for p in (before, after) if p > 0]
    cut = min(candidates, key=lambda p: abs(p - middle)) + 1 if candidates else middle
    return f"{text[:cut]}{line}\n{text[cut:]}"


def _slots(transcript: Transcript) -> list[tuple[int, int]]:
    """(start, end) message ranges of the outputs each call reads first, newest first: the outputs
    in slot k (0-based from the end) have age k + 1."""
    bounds = [-1, *model_calls(transcript), len(transcript.messages)]
    return [(bounds[i] + 1, bounds[i + 1]) for i in range(len(bounds) - 2, -1, -1)]


def _candidate(messages: Sequence[Message], start: int, end: int) -> tuple[int, int] | None:
    """(message index, block index) of the largest plain-text tool output in messages[start:end]."""
    best: tuple[int, int, int] | None = None
    for index in range(start, end):
        for block_index, block in enumerate(messages[index].blocks):
            if isinstance(block, ToolResult) and len(block.content) == 1 and isinstance(block.content[0], Text):
                size = len(block.text)
                if size >= MIN_OUTPUT_CHARS and (best is None or size > best[0]):
                    best = (size, index, block_index)
    return None if best is None else (best[1], best[2])


def inject(transcript: Transcript, ages: Sequence[int] = AGES, depths: Sequence[str] = DEPTHS,
           label: str = "") -> tuple[Transcript, list[Needle]]:
    """A copy of `transcript` with needles at each age (the nearest older output when a call read
    none) and depth, and the needles. Deterministic: the same transcript gives the same needles."""
    for depth in depths:
        if depth not in DEPTHS:
            raise InputError(f"unknown needle depth {depth!r}", f"use {', '.join(DEPTHS)}")
    messages = list(transcript.messages)
    slots = _slots(transcript)
    used: set[int] = set()
    needles: list[Needle] = []
    for target in sorted(set(ages)):
        for slot in range(target - 1, len(slots)):
            if slot in used:
                continue
            found = _candidate(messages, *slots[slot])
            if found is None:
                continue
            used.add(slot)
            index, block_index = found
            block = messages[index].blocks[block_index]
            assert isinstance(block, ToolResult)
            text = block.text
            for depth in depths:
                key = f"needle-{label}-age{target}-{depth}"
                value = str(uuid.uuid5(NAMESPACE, f"{label}/{transcript.source}/{index}/{depth}"))
                needle = Needle(key, value, slot + 1, target, depth, index, block.call_id)
                text = insert(text, needle.line, depth)
                needles.append(needle)
            blocks = list(messages[index].blocks)
            blocks[block_index] = replace(block, content=(Text(text),))
            messages[index] = messages[index].replace(blocks=tuple(blocks))
            break
    injected = Transcript(transcript.format, messages, list(transcript.compactions), list(transcript.usage),
                          transcript.model, transcript.cwd, transcript.session_id, source=transcript.source)
    return injected, needles


@dataclass(frozen=True, slots=True)
class Outcome:
    file: str | None
    policy: str
    needle: Needle
    state: str
    in_log: bool


def find(needles: Sequence[Needle], engine: ContextEngine, messages: Sequence[Message], view_text: str,
         file: str | None, policy: str) -> list[Outcome]:
    """Where each needle is after a replay: in the view, behind a verified ref, or lost."""
    resolution = resolve_refs(view_text, engine, messages)
    behind = "\x00".join(resolution.texts)
    ids = list(entry_messages(engine, messages))  # entry id of each message, in order
    out = []
    for needle in needles:
        state = "in_view" if needle.value in view_text else "recoverable" if needle.value in behind else "lost"
        try:
            logged = needle.value in engine.recall(f"entry:{ids[needle.message_index]}#{needle.call_id}")
        except (CtxwinError, IndexError):
            logged = False
        out.append(Outcome(file, policy, needle, state, logged))
    return out


def run_needles(transcript: Transcript, needles: Sequence[Needle], policy: str, setup: ReplaySetup,
                file: str | None = None) -> list[Outcome]:
    """Replay an injected transcript under one policy and find its needles in the next view."""
    made: list[ContextEngine] = []

    def factory(*args: Any, **kwargs: Any) -> ContextEngine:
        made.append(ContextEngine(*args, **kwargs))
        return made[-1]

    with blob_store() as blobs:
        for _ in iter_replay(transcript, policy, blobs=blobs, engine_factory=factory, **setup.replay_options()):
            pass
        engine = made[0]
        prepared = engine.prepare()
        view = "\n".join([prepared.system, *(message_text(m) for m in prepared.messages)])
        return find(needles, engine, transcript.messages, view, file or transcript.source, policy)


def age_bucket(age: int, edges: Sequence[int] = AGES) -> str:
    """The grid row of an age: "5-9" for 5 <= age < 10 with the default edges, "200+" past the last."""
    ordered = sorted(set(edges))
    lower = max((e for e in ordered if e <= age), default=ordered[0])
    upper = next((e for e in ordered if e > lower), None)
    if upper is None:
        return f"{lower}+"
    return str(lower) if upper - lower == 1 else f"{lower}-{upper - 1}"


def _shares(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    n = len(outcomes)
    row: dict[str, Any] = {state: round(sum(1 for o in outcomes if o.state == state) / n, 4) if n else None
                           for state in STATES}
    row["n"] = n
    row["in_log"] = round(sum(1 for o in outcomes if o.in_log) / n, 4) if n else None
    return row


@dataclass
class NeedleResult:
    outcomes: list[Outcome]
    policies: list[str]
    needles: dict[str, list[Needle]] = field(default_factory=dict)
    ages: tuple[int, ...] = AGES

    def grid(self) -> dict[str, dict[str, Any]]:
        """Per policy: shares in view / recoverable / lost by age bucket (the needles' actual ages, in
        calls, binned at the requested ages), by depth, and overall."""
        out: dict[str, dict[str, Any]] = {}
        for policy in self.policies:
            rows = [o for o in self.outcomes if o.policy == policy]
            buckets = sorted({age_bucket(o.needle.age, self.ages) for o in rows},
                             key=lambda b: int(b.split("-")[0].rstrip("+")))
            out[policy] = {
                "by_age": {b: _shares([o for o in rows if age_bucket(o.needle.age, self.ages) == b])
                           for b in buckets},
                "by_depth": {depth: _shares([o for o in rows if o.needle.depth == depth]) for depth in DEPTHS
                             if any(o.needle.depth == depth for o in rows)},
                "overall": _shares(rows),
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "policies": self.grid(),
            "states": list(STATES),
            "age_buckets": sorted({age_bucket(n.age, self.ages) for items in self.needles.values() for n in items},
                                  key=lambda b: int(b.split("-")[0].rstrip("+"))),
            "needles": [{"file": file, "key": n.key, "value": n.value, "age": n.age, "target_age": n.target_age,
                         "depth": n.depth, "message_index": n.message_index,
                         "states": {o.policy: o.state for o in self.outcomes
                                    if o.file == file and o.needle.value == n.value}}
                        for file, items in self.needles.items() for n in items],
        }


def needles(
    transcripts: Transcript | str | Path | Sequence[Transcript | str | Path],
    policies: Sequence[str] = DEFAULT_POLICIES,
    *,
    ages: Sequence[int] = AGES,
    depths: Sequence[str] = DEPTHS,
    model: str | None = None,
    window: int | None = None,
    progress: Progress | None = None,
) -> NeedleResult:
    """Inject needles into each transcript, replay it under each policy, and classify every needle."""
    sources = [transcripts] if isinstance(transcripts, Transcript | str | Path) else list(transcripts)
    if not sources:
        raise InputError("no session file given", "name one or more session files")
    names = check_policies(policies, recorded=False)
    loaded = [as_transcript(s) for s in sources]
    total = len(loaded) * len(names)
    outcomes: list[Outcome] = []
    placed: dict[str, list[Needle]] = {}
    done = 0
    for number, transcript in enumerate(loaded):
        setup = replay_setup(transcript, model=model, window=window)
        injected, items = inject(transcript, ages, depths, label=str(number))
        file = transcript.source or f"transcript {number}"
        placed[file] = items
        for name in names:
            outcomes.extend(run_needles(injected, items, name, setup, file))
            done += 1
            if progress is not None:
                progress("needles", done, total)
    return NeedleResult(outcomes, names, placed, tuple(sorted(set(ages))))
