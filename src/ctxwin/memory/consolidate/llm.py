"""The model extractor: a model reads the statements and names the durable facts in them, as JSON.

Used when a model is configured (`ModelExtractor(client)`, any `ctxwin.providers` `ModelClient`);
what it returns becomes the same `Observation`s the rules give, so the merge, MEMORY.md and the wiki
are the same either way. Every fact the model names must cite the number of a statement it was given:
that statement's ref is the fact's source (a fact citing nothing it was given is dropped, so nothing
unsourced gets in). Relative dates are made absolute by `dates.resolve` after the model, as for the
rules.

Statements go in batches of about `batch_chars`; a batch whose call fails (a provider error, a
timeout, an answer that is not the JSON asked for) is read by the rules instead, the reason kept in
`problems`; after `max_failures` failures in a row the model is not called again in this run (the
compaction summarizer's circuit breaker).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ctxwin.memory.consolidate.dates import resolve
from ctxwin.memory.consolidate.extract import (
    CHANGE,
    KINDS,
    Kind,
    Observation,
    Unit,
    classify,
    clip,
    content_weight,
    displaced_values,
    stem,
    tokens,
)
from ctxwin.messages import Message, Text

if TYPE_CHECKING:  # the client module loads httpx: only a caller that has a model pays for it
    from ctxwin.providers.base import ModelClient

BATCH_CHARS = 12_000
"""Statement text per model call."""
MAX_OUTPUT_TOKENS = 4_096
TIMEOUT_S = 120.0
"""Seconds per call."""
MAX_CONSECUTIVE_FAILURES = 3

SYSTEM = (
    "You maintain an agent's long-term memory. From numbered statements taken from its daily notes and "
    "conversations, extract the durable facts worth remembering across sessions: user preferences and "
    "constraints, decisions and their reasons, project facts (commands, paths, versions, ports, owners), "
    "people, dates and events, and tasks (open or done). Skip chatter, greetings and questions. "
    "Answer with one JSON array and nothing else."
)
INSTRUCTIONS = """Statements (number, day, where, text):

{statements}

Return a JSON array. One object per durable fact:
{{"n": <the number of the statement it comes from>, "kind": one of {kinds},
  "text": "<the fact in one self-contained sentence, in the statement's words where possible>",
  "key": "<a short name of what the fact is about, e.g. 'staging port', or null>",
  "replaces": ["<a value this statement says is no longer true, e.g. 'npm'>"],
  "done": <true if it says a task is finished>}}
Return [] when no statement holds a durable fact."""


class ModelExtractor:
    """Observations from a model (see the module docstring). `problems` lists the batches the rules
    read instead in the last run (`observe`), and why; `calls` counts the model calls of all runs."""

    def __init__(self, client: ModelClient, *, batch_chars: int = BATCH_CHARS, timeout: float = TIMEOUT_S,
                 max_output_tokens: int = MAX_OUTPUT_TOKENS, max_failures: int = MAX_CONSECUTIVE_FAILURES) -> None:
        self.client = client
        self.batch_chars = batch_chars
        self.timeout = timeout
        self.max_output_tokens = max_output_tokens
        self.max_failures = max_failures
        self.name = f"model:{getattr(client, 'model', 'unknown')}"
        self.problems: list[str] = []
        self.calls = 0
        self._failures = 0

    def observe(self, units: Sequence[Unit]) -> list[Observation]:
        # One call is one run: its breaker and problems start afresh (a SleepTime keeps one extractor
        # for all its runs; an outage in one must not keep the model out of the next).
        self.problems = []
        self._failures = 0
        out: list[Observation] = []
        for number, batch in enumerate(batches(units, self.batch_chars), start=1):
            if self._failures >= self.max_failures:
                self.problems.append(f"batch {number}: the model failed {self._failures} times in a row; rules used")
                out.extend(o for o in (classify(u) for u in batch) if o is not None)
                continue
            try:
                found = self._ask(batch)
            except Exception as error:  # any failure of the model path: the rules read this batch
                self._failures += 1
                self.problems.append(f"batch {number}: {type(error).__name__}: {str(error)[:200]}; rules used")
                out.extend(o for o in (classify(u) for u in batch) if o is not None)
                continue
            self._failures = 0
            out.extend(found)
        return out

    def _ask(self, batch: Sequence[Unit]) -> list[Observation]:
        prompt = INSTRUCTIONS.format(statements="\n".join(_line(n, u) for n, u in enumerate(batch, start=1)),
                                     kinds=", ".join(KINDS))
        self.calls += 1
        completion = self.client.complete([Message("user", (Text(prompt),))], system=SYSTEM,
                                          max_tokens=self.max_output_tokens, timeout=self.timeout)
        return parse_answer(completion.text, batch)


def batches(units: Sequence[Unit], limit: int) -> list[list[Unit]]:
    out: list[list[Unit]] = []
    size = 0
    for unit in units:
        if out and size + len(unit.text) <= limit:
            out[-1].append(unit)
            size += len(unit.text)
        else:
            out.append([unit])
            size = len(unit.text)
    return out


def _line(number: int, unit: Unit) -> str:
    where = unit.speaker or unit.section or "note"
    return f"[{number}] {unit.day.isoformat()} ({where}) {unit.text}"


_ARRAY = re.compile(r"\[.*\]", re.DOTALL)


def parse_answer(text: str, batch: Sequence[Unit]) -> list[Observation]:
    """The observations of a model's answer for `batch`; ValueError when it is not the JSON asked for."""
    match = _ARRAY.search(text)
    if match is None:
        raise ValueError("the answer holds no JSON array")
    items = json.loads(match.group(0))
    if not isinstance(items, list):
        raise ValueError("the answer is not a JSON array")
    out: list[Observation] = []
    per_unit: dict[int, int] = {}
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"an item is not an object: {str(item)[:80]}")
        n, kind, fact = item.get("n"), item.get("kind"), item.get("text")
        if not isinstance(n, int) or not 1 <= n <= len(batch) or kind not in KINDS or not isinstance(fact, str):
            continue  # cites no statement it was given, or names no kind: unsourced, dropped
        unit = batch[n - 1]
        k = per_unit.get(n, 0)
        per_unit[n] = k + 1
        out.append(_observation(unit, kind, fact, item, k))
    return out


def _observation(unit: Unit, kind: Kind, fact: str, item: dict[str, Any], k: int) -> Observation:
    text = clip(resolve(re.sub(r"\s+", " ", fact).strip(), unit.day).text)
    key = item.get("key")
    key = " ".join(stem(w) for w in key.lower().split()) if isinstance(key, str) and key.strip() else None
    given = item.get("replaces")
    named: list[Any] = given if isinstance(given, list) else []
    replaced = tuple(t for t in (tokens(v) for v in named if isinstance(v, str)) if t)
    speaker = unit.speaker if unit.speaker not in (None, "user", "assistant") else None
    if speaker and text.startswith(f"{speaker}: "):
        text = text[len(speaker) + 2:]
    return Observation(
        kind=kind, text=text, day=unit.day, ref=unit.ref, tokens=tokens(text), key=key,
        displaces=replaced + displaced_values(text), change=bool(CHANGE.search(text)),
        done=kind == "task" and item.get("done") is True, subject=speaker, weight=content_weight(text),
        order=(unit.order[0], unit.order[1], unit.order[2] * 100 + k))
