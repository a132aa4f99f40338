"""Probe retention at compaction points: what would the model still know after each policy compacts?

At each real compaction point of a transcript (and, for a transcript without one, at synthetic points
at 50 % and 80 % of its model calls), for each policy:

1. replay the prefix `messages[:point]` through an engine with that policy, so the policy has acted
   as it would have all along (masking, spills, earlier compactions);
2. force a compaction with `engine.compact()` when the policy compacts at all, as the real harness
   did at that point;
3. take the view the model would get next (`engine.prepare()`), render it as plain text
   (`request_text`: the system prompt, then each block's text) and score the probes of
   `ctxwin.evaluation.probes` in that text: the headline recall, what the model reads without asking.
   A second number, "recoverable by ref", adds for every `entry:` ref and `blob:` handle the view
   shows the content it resolves to, counted only when it is byte-identical to the transcript's
   original: what the model could get back by calling `recall()`.

`--views DIR` writes each rendered request to `DIR/<file stem>.<policy>.p<N>.txt` (N: the point,
0-based, in transcript order), so any other checker can score exactly the same text, and
`DIR/<file stem>.points.json`, where each point is in the file (`write_points`).

The real harness is scored the same way (`recorded`): its recorded summary plus what it kept verbatim
(Pi: the messages from its first kept entry; Claude Code: the summary alone). Every view's size is in
model tokens with the fixed overhead included (`compare.replay_setup`), next to the harness's own first
call after the compaction, from its usage record.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxwin import policies
from ctxwin.engine import ContextEngine
from ctxwin.engine.prepared import Prepared
from ctxwin.errors import CtxwinError, InputError
from ctxwin.evaluation.compare import (
    RECORDED,
    Progress,
    ReplaySetup,
    as_transcript,
    blob_store,
    check_policies,
    replay_setup,
)
from ctxwin.evaluation.probes import PROBE_TYPES, ProbeSet, Score, extract, haystack, message_text, score
from ctxwin.evaluation.replay import iter_replay, model_calls
from ctxwin.messages import Message, Text
from ctxwin.tokens import counter_for
from ctxwin.transcripts.model import Transcript

SYNTHETIC_SHARES = (0.5, 0.8)
"""Where synthetic points fall in a transcript without a real compaction (share of its model calls)."""
DEFAULT_POLICIES = ("ctxwin", "claude-code", "pi", "openclaw", "letta", "masking", "truncate", "raw", RECORDED)
MISSING_SHOWN = 10  # missing probes listed per type in the JSON, for diagnosis
NEWEST_ROUND_SHARE = 0.5  # a "why" names the newest round when it is at least this share of what was kept

_ENTRY_REF = re.compile(r"entry:([A-Za-z0-9_-]+)(?:#([\w.:-]*\w))?")
_BLOB_REF = re.compile(r"blob:([0-9a-f]{12,64})")


@dataclass(frozen=True, slots=True)
class Point:
    """A compaction point: `index` is where the next model call starts (messages before it are the
    history), `first_kept` the first message kept verbatim; `kind` is real or synthetic."""

    index: int
    first_kept: int
    kind: str
    summary: str | None = None
    tokens_before: int | None = None
    next_call_tokens: int | None = None
    """The recorded context of the harness's first call after the compaction (usage)."""

    def label(self) -> str:
        return f"{self.kind} @ message {self.index}"


def points(transcript: Transcript) -> list[Point]:
    """The real compaction points, or synthetic ones when the transcript has none."""
    usage = sorted(transcript.usage, key=lambda u: u.message_index)
    out = []
    for record in transcript.compactions:
        after = next((u for u in usage if u.message_index >= record.index), None)
        first_kept = record.first_kept_index if record.first_kept_index is not None else record.index
        out.append(Point(record.index, min(first_kept, record.index), "real", record.summary, record.tokens_before,
                         after.context_tokens if after else None))
    if out:
        return out
    calls = model_calls(transcript)
    if not calls:
        return []
    chosen = sorted({calls[min(len(calls) - 1, int(len(calls) * share))] for share in SYNTHETIC_SHARES})
    return [Point(index, index, "synthetic") for index in chosen if index > 0]


# --------------------------------------------------------------------------------------------------
# Resolving what a view points at


@dataclass
class Resolution:
    """Content reachable from a view through refs, verified against the transcript."""

    texts: list[str] = field(default_factory=list)
    resolved: int = 0
    rejected: int = 0
    """Refs whose content was not byte-identical to the original (or did not resolve)."""


def _originals(transcript_messages: Sequence[Message]) -> set[str]:
    """The text of every tool result of the transcript."""
    return {r.text for m in transcript_messages for r in m.tool_results}


def entry_messages(engine: ContextEngine, transcript_messages: Sequence[Message]) -> dict[str, Message]:
    """Entry id -> the transcript message it logs (the replay appends messages in order, one entry each)."""
    ids = [entry.id for entry in engine.session.path() if entry.kind == "message"]
    return dict(zip(ids, transcript_messages, strict=False))


def resolve_refs(view_text: str, engine: ContextEngine, transcript_messages: Sequence[Message]) -> Resolution:
    """Resolve every `entry:` ref and `blob:` handle in `view_text` through the engine, keeping the
    content only when it is byte-identical to the transcript's original."""
    out = Resolution()
    by_entry = entry_messages(engine, transcript_messages)
    originals = _originals(transcript_messages)
    seen: set[str] = set()
    for match in _ENTRY_REF.finditer(view_text):
        ref = match.group(0)
        if ref in seen:
            continue
        seen.add(ref)
        entry_id, call_id = match.group(1), match.group(2)
        try:
            text = engine.recall(ref)
        except CtxwinError:
            out.rejected += 1
            continue
        message = by_entry.get(entry_id)
        if call_id:
            expected = next((r.text for r in message.tool_results if r.call_id == call_id), None) if message else None
            if expected is None and message is not None:  # a cleared call input: the call's arguments
                expected = next((json.dumps(c.arguments, ensure_ascii=False) for c in message.tool_calls
                                 if c.id == call_id), None)
        else:
            expected = None if message is None else (
                message.text or "\n".join(r.text for r in message.tool_results) or None)
        if expected is not None and text == expected:
            out.texts.append(text)
            out.resolved += 1
        else:
            out.rejected += 1
    for match in _BLOB_REF.finditer(view_text):
        ref = match.group(0)
        if ref in seen:
            continue
        seen.add(ref)
        try:
            data = engine.session.blobs.get(ref) if engine.session.blobs is not None else None
        except CtxwinError:
            data = None
        if data is None or not hashlib.sha256(data).hexdigest().startswith(match.group(1)):
            out.rejected += 1
            continue
        text = data.decode("utf-8", "surrogatepass")
        if text in originals:  # byte-identical to one of the transcript's outputs (the store's metadata not trusted)
            out.texts.append(text)
            out.resolved += 1
        else:
            out.rejected += 1
    return out


# --------------------------------------------------------------------------------------------------
# Scoring views


@dataclass
class ViewScore:
    """One policy's view at one point, scored."""

    policy: str
    tokens: int
    scores: dict[str, Score]
    """The headline: probes found in the view's own text."""
    with_refs: dict[str, Score]
    """The same probes found in the view's text or in what its refs return byte for byte."""
    compacted: bool = False
    refs_resolved: int = 0
    refs_rejected: int = 0
    messages: int = 0
    summary_only: dict[str, Score] | None = None
    """`recorded` only: the harness's summary alone, as measured-baselines.md scores it."""
    composition: dict[str, int] = field(default_factory=dict)
    """What the view's tokens are made of (model tokens): `summary` (what a compaction put in: the
    summary, restored files), `kept` (history verbatim), `newest_round` (of `kept`: the last assistant
    call and its results), `fixed` (system prompt, tool schemas, the file's fixed overhead)."""

    def size_check(self, next_request: int | None) -> dict[str, Any]:
        """Whether the view is no larger than the harness's own next request, and, when it is larger,
        why: what it holds, part by part."""
        if next_request is None:
            return {}
        out: dict[str, Any] = {"within_harness_next_request": self.tokens <= next_request}
        if self.tokens > next_request and self.composition:
            parts = self.composition
            why = (f"{self.tokens:,} tokens > the harness's {next_request:,}: fixed {parts['fixed']:,} (system "
                   f"prompt, tools), summary {parts['summary']:,}, kept verbatim {parts['kept']:,}")
            if parts["kept"] and parts["newest_round"] >= parts["kept"] * NEWEST_ROUND_SHARE:
                why += f", of which the newest round, kept whole inside a tool loop, {parts['newest_round']:,}"
            out["larger_than_harness"] = {"by": self.tokens - next_request, **parts, "why": why}
        return out

    def to_dict(self, history_tokens: int) -> dict[str, Any]:
        return {
            "view_tokens": self.tokens,
            "compression_ratio": round(history_tokens / self.tokens, 2) if self.tokens else None,
            "reduction": round(1 - self.tokens / history_tokens, 4) if history_tokens else None,
            "compacted": self.compacted,
            "messages": self.messages,
            "refs_resolved": self.refs_resolved,
            "refs_rejected": self.refs_rejected,
            "recall": {k: _round(s.recall) for k, s in self.scores.items()},
            "found": {k: [s.found, s.total] for k, s in self.scores.items()},
            "recall_recoverable_by_ref": {k: _round(s.recall) for k, s in self.with_refs.items()},
            "found_recoverable_by_ref": {k: [s.found, s.total] for k, s in self.with_refs.items()},
            "missing": {k: list(s.missing[:MISSING_SHOWN]) for k, s in self.scores.items() if s.missing},
            **({"recall_summary_only": {k: _round(s.recall) for k, s in self.summary_only.items()}}
               if self.summary_only is not None else {}),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def request_text(system: str, messages: Sequence[Message]) -> str:
    """A request as plain text: the system prompt, then each message's blocks (`message_text`), one
    message per paragraph. This is what the headline recall is scored on, and what `--views` writes."""
    return "\n\n".join([system, *(message_text(m) for m in messages)])


def score_view(name: str, prepared: Prepared, engine: ContextEngine, probes: ProbeSet,
               history: Sequence[Message], compacted: bool, factor: float = 1.0) -> tuple[ViewScore, str]:
    view = request_text(prepared.system, prepared.messages)
    resolution = resolve_refs(view, engine, history)
    direct = haystack([view])
    full = direct + "\x00" + haystack(resolution.texts) if resolution.texts else direct
    return ViewScore(name, prepared.tokens, score(probes, direct), score(probes, full), compacted,
                     resolution.resolved, resolution.rejected, len(prepared.items),
                     composition=composition(prepared, factor)), view


def composition(prepared: Prepared, factor: float) -> dict[str, int]:
    """`ViewScore.composition` of a prepared request (counter units brought to model tokens by `factor`)."""
    summary = round(sum(i.tokens for i in prepared.items if i.synthetic) * factor)
    kept_items = [i for i in prepared.items if not i.synthetic]
    start = next((n for n in range(len(kept_items) - 1, -1, -1) if kept_items[n].message.role == "assistant"
                  and kept_items[n].message.tool_calls), len(kept_items))
    round_items = kept_items[start:] if kept_items and kept_items[-1].message.role == "tool" else []
    kept = round(sum(i.tokens for i in kept_items) * factor)
    return {"fixed": max(0, prepared.tokens - summary - kept), "summary": summary, "kept": kept,
            "newest_round": round(sum(i.tokens for i in round_items) * factor)}


def policy_view(transcript: Transcript, point: Point, name: str, setup: ReplaySetup,
                probes: ProbeSet) -> tuple[ViewScore, str]:
    """Replay `messages[:point.index]` under a policy, compact where it compacts, score the next view."""
    history = transcript.messages[:point.index]
    prefix = Transcript(transcript.format, list(history), model=transcript.model, source=transcript.source,
                        usage=[u for u in transcript.usage if u.message_index < point.index])
    made: list[ContextEngine] = []

    def factory(*args: Any, **kwargs: Any) -> ContextEngine:
        made.append(ContextEngine(*args, **kwargs))
        return made[-1]

    policy = policies.get(name)
    with blob_store() as blobs:
        for _ in iter_replay(prefix, name, blobs=blobs, engine_factory=factory, **setup.replay_options()):
            pass
        engine = made[0]
        if policy.compaction.enabled:
            prepared = engine.compact()
            compacted = any(e.is_compaction for e in prepared.events)
        else:
            prepared = engine.prepare()
            compacted = False
        return score_view(name, prepared, engine, probes, history, compacted, setup.factor)


RECORDED_PREAMBLE = "The conversation history before this point was compacted into the following summary:"


def recorded_message(summary: str) -> Message:
    """The harness's recorded summary as the user message that carries it into the next request
    (written here, not taken from the summarizer's code: the scorer imports nothing it scores)."""
    return Message("user", (Text(f"{RECORDED_PREAMBLE}\n\n<summary>\n{summary}\n</summary>"),))


def recorded_view(transcript: Transcript, point: Point, setup: ReplaySetup,
                  probes: ProbeSet) -> tuple[ViewScore, str] | None:
    """The harness's own view after its compaction: the recorded summary plus what it kept verbatim
    (its system prompt is not in the file, so the text starts with the summary)."""
    if point.summary is None:
        return None
    kept = transcript.messages[point.first_kept:point.index]
    summary = recorded_message(point.summary)
    counter = counter_for(setup.model)
    counted = counter.count_message(summary) + sum(counter.count_message(m) for m in kept)
    tokens = setup.overhead_tokens + round(counted * setup.factor)
    view = request_text("", [summary, *kept]).lstrip("\n")
    scores = score(probes, haystack([view]))
    return ViewScore(RECORDED, tokens, scores, scores, True, 0, 0, 1 + len(kept),
                     summary_only=score(probes, haystack([point.summary]))), view


# --------------------------------------------------------------------------------------------------
# Results


@dataclass
class PointResult:
    file: str | None
    point: Point
    probes: ProbeSet
    history_tokens: int
    views: dict[str, ViewScore]

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "point": self.point.label(),
            "kind": self.point.kind,
            "index": self.point.index,
            "first_kept_index": self.point.first_kept,
            "recorded_tokens_before": self.point.tokens_before,
            "recorded_next_call_tokens": self.point.next_call_tokens,
            "history_tokens": self.history_tokens,
            "evicted_messages": self.probes.evicted_messages,
            "probes": self.probes.counts(),
            "policies": {name: {**view.to_dict(self.history_tokens), **view.size_check(self.point.next_call_tokens)}
                         for name, view in self.views.items()},
        }


@dataclass
class RetentionResult:
    sessions: list[PointResult]
    policies: list[str]
    setups: dict[str, ReplaySetup] = field(default_factory=dict)

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per policy: recall of each probe type pooled over every point (found / total), the mean view
        tokens, and the number of points scored."""
        out: dict[str, dict[str, Any]] = {}
        for name in self.policies:
            views = [s.views[name] for s in self.sessions if name in s.views]
            if not views:
                continue
            row: dict[str, Any] = {}
            for kind in PROBE_TYPES:
                found = sum(v.scores[kind].found for v in views)
                total = sum(v.scores[kind].total for v in views)
                row[kind] = round(found / total, 4) if total else None
            by_ref: dict[str, float | None] = {}
            for kind in PROBE_TYPES:
                found = sum(v.with_refs[kind].found for v in views)
                total = sum(v.with_refs[kind].total for v in views)
                by_ref[kind] = round(found / total, 4) if total else None
            row["recoverable_by_ref"] = by_ref
            row["view_tokens"] = round(sum(v.tokens for v in views) / len(views))
            row["points"] = len(views)
            out[name] = row
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"summary": self.summary(), "sessions": [s.to_dict() for s in self.sessions],
                "calibration": {file: setup.to_dict() for file, setup in self.setups.items()},
                "probe_types": list(PROBE_TYPES)}


def retention(
    transcripts: Transcript | str | Path | Sequence[Transcript | str | Path],
    policies: Sequence[str] = DEFAULT_POLICIES,
    *,
    model: str | None = None,
    window: int | None = None,
    progress: Progress | None = None,
    views: str | Path | None = None,
) -> RetentionResult:
    """Score every policy's view at every compaction point of the transcripts (see the module
    docstring). With `views`, each scored request is also written there as plain text."""
    sources = [transcripts] if isinstance(transcripts, Transcript | str | Path) else list(transcripts)
    if not sources:
        raise InputError("no session file given", "name one or more session files")
    names = check_policies(policies)
    loaded = [as_transcript(s) for s in sources]
    work = [(t, p) for t in loaded for p in points(t)]
    total = len(work) * len(names)
    done = 0
    results = []
    setups: dict[str, ReplaySetup] = {}
    for transcript in loaded:
        setup = replay_setup(transcript, model=model, window=window)
        setups[transcript.source or f"transcript {len(setups)}"] = setup
        folder = _views_folder(views)
        if folder is not None:
            write_points(folder, transcript, points(transcript))
        for number, point in enumerate(points(transcript)):
            probes = extract(transcript.messages, point.first_kept, point.index, cwds=environment(transcript),
                             queued=queued_prompts(transcript, point.first_kept))
            counter = counter_for(setup.model)
            history = setup.overhead_tokens + round(
                sum(counter.count_message(m) for m in transcript.messages[:point.index]) * setup.factor)
            scores: dict[str, ViewScore] = {}
            for name in names:
                scored = recorded_view(transcript, point, setup, probes) if name == RECORDED else \
                    policy_view(transcript, point, name, setup, probes)
                if scored is not None:
                    scores[name], text = scored
                    if folder is not None:
                        write_view(folder, transcript, name, number, text)
                done += 1
                if progress is not None:
                    progress("retention", done, total)
            results.append(PointResult(transcript.source, point, probes, history, scores))
    return RetentionResult(results, names, setups)



def environment(transcript: Transcript) -> list[str]:
    """The session's working directories (what its probes must not be made of)."""
    cwds = transcript.metadata.get("cwds")
    return [*([transcript.cwd] if transcript.cwd else []), *(c for c in cwds or () if isinstance(c, str))]


def queued_prompts(transcript: Transcript, first_kept: int) -> list[str]:
    """Prompts the user queued while the agent was busy, before message `first_kept` (by file line)."""
    queued = transcript.metadata.get("queued_prompts") or []
    messages = transcript.messages
    limit = messages[first_kept].meta.get("line") if first_kept < len(messages) else None
    return [q["text"] for q in queued if isinstance(q, dict) and isinstance(q.get("text"), str)
            and (limit is None or not isinstance(q.get("line"), int) or q["line"] < limit)]


def _views_folder(views: str | Path | None) -> Path | None:
    if views is None:
        return None
    folder = Path(views)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"cannot write views to {folder}: {error.strerror or error}",
                         "give --views a folder you can write to") from None
    return folder


def view_path(folder: Path, transcript: Transcript, policy: str, number: int) -> Path:
    """`<file stem>.<policy>.p<N>.txt`; a policy given as a TOML file is named by its stem."""
    stem = Path(transcript.source).stem if transcript.source else "transcript"
    name = Path(policy).stem if policy.endswith(".toml") else policy
    return folder / f"{stem}.{name}.p{number}.txt"


def origin(message: Message) -> Any:
    """Where a message came from in its file: the line (JSONL) or the history entry (`.traj`), as read."""
    return message.meta.get("line", message.meta.get("source"))


def write_points(folder: Path, transcript: Transcript, found: Sequence[Point]) -> None:
    """`<file stem>.points.json`: where each scored point is in the file, for a checker that reads the
    file itself: the origins (`line`, or `history[i]`) of the first kept message and of the first after
    the point, and of every message it evicts and every one after it.
    A real point is the harness's and a checker finds it on its own; a synthetic one is ctxwin's choice."""
    stem = Path(transcript.source).stem if transcript.source else "transcript"
    messages = transcript.messages
    records = [{"point": n, "kind": p.kind, "index": p.index, "first_kept": p.first_kept,
                "first_kept_origin": origin(messages[p.first_kept]) if p.first_kept < len(messages) else None,
                "index_origin": origin(messages[p.index]) if p.index < len(messages) else None,
                "evicted": [origin(m) for m in messages[:p.first_kept]],
                "after": [origin(m) for m in messages[p.index:]]} for n, p in enumerate(found)]
    path = folder / f"{stem}.points.json"
    try:
        path.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot write {path}: {error.strerror or error}",
                         "give --views a folder you can write to") from None


def write_view(folder: Path, transcript: Transcript, policy: str, number: int, text: str) -> None:
    path = view_path(folder, transcript, policy, number)
    try:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    except OSError as error:
        raise InputError(f"cannot write {path}: {error.strerror or error}",
                         "give --views a folder you can write to") from None
