"""The model summarizer: one of the anchors' prompts over any `ModelClient`, made safe to fail.

The span is serialized to plain text (Pi's format). When it does not fit the summarizer's own window it
is cut into chunks by token share, never between a tool call and its result, and the chunks are
summarized in order, each merged into the running summary (OpenClaw's `openclaw` style instead
summarizes each chunk and merges the partial summaries in a last call), so every evicted message is
read. The whole summary has one deadline.

Any failure (an exception, the deadline, empty or malformed output, a failed quality check) falls back
to the extractive summarizer, with the reason in `details["fallback"]`; with no fallback it raises
`SummaryFailed`. Nothing here deletes history, and nothing retries without bound: a circuit breaker
stops calling the model after `max_failures` consecutive failures (until `reset()`).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ctxwin.compaction.base import Summarizer, Summary, summary_counter
from ctxwin.compaction.extractive import ExtractiveSummarizer
from ctxwin.compaction.identifiers import extract_file_ops, extract_identifiers, normalize, survives, user_text
from ctxwin.compaction.prompts import (
    EXPECTED_SECTIONS,
    STYLES,
    Prompt,
    build_merge_prompt,
    build_prompt,
    missing_sections,
    strip_analysis,
)
from ctxwin.compaction.summary import fit_sections, merge_items, parse_sections, sections_as_items, serialize_message
from ctxwin.errors import ArgumentError, SummaryFailed
from ctxwin.messages import Message, Text
from ctxwin.tokens.base import TokenCounter

DEFAULT_BUDGET_TOKENS = 4_000  # summary size when the caller gives none
DEFAULT_TIMEOUT = 180.0  # seconds for the whole summary, all calls together (OpenClaw's default)
MAX_CONSECUTIVE_FAILURES = 3  # Claude Code's circuit breaker
SAFETY_MARGIN = 1.2  # token estimates may be this far off (OpenClaw's SAFETY_MARGIN)
PROMPT_MARGIN_TOKENS = 512  # kept free in the summarizer's window besides prompt, summary and output
MIN_CHUNK_TOKENS = 1_024  # below this much room for conversation per call, the window is too small
MIN_OUTPUT_TOKENS = 256  # never ask for less output than this
OUTPUT_SLACK = 1.5  # max_tokens = budget x this (models overshoot; the text is trimmed to the budget after)
ANALYSIS_FACTOR = 3  # claude-code: room for the <analysis> scratchpad on top of the summary
QUALITY_RETRIES = 1  # openclaw: regenerations after a failed quality check (OpenClaw's default)
QUALITY_RECENT_MESSAGES = 10  # openclaw: identifiers are checked from this many last messages
QUALITY_MAX_IDENTIFIERS = 12
QUALITY_MAX_KEYWORDS = 12
FILE_TAGS_SHARE = 0.25  # at most this share of the budget goes to the <read-files>/<modified-files> lists
FILE_TAG_STYLES = ("pi", "openclaw")  # styles whose summaries carry Pi's file lists
MIN_SECTION_SHARE = 0.5  # output with fewer of the expected sections than this is malformed

_KEYWORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{2,}")
_STOPWORDS = frozenset({
    "the", "and", "for", "that", "this", "with", "you", "your", "are", "was", "can", "could", "would", "should",
    "have", "has", "had", "not", "but", "from", "they", "them", "then", "than", "what", "when", "where", "which",
    "who", "why", "how", "all", "any", "some", "just", "also", "into", "about", "please", "let", "lets", "now",
    "make", "sure", "will", "want", "need", "like", "there", "here", "its", "it's", "i'm", "don't", "yes", "okay",
})

T = TypeVar("T")


class _SummaryRejected(Exception):
    """The model answered, but not with a usable summary (empty, malformed, failed quality check)."""


class LLMSummarizer:
    """Summarizes with a model. `style` picks the anchor's prompt; `window_tokens` is the summarizer
    model's context window (spans larger than it are chunked); `timeout` bounds the whole summary in
    seconds; after `max_failures` consecutive failures the model is no longer called (`reset()`
    re-arms it); `fallback` summarizes instead whenever the model fails (None: raise);
    `max_output_tokens` caps `max_tokens` per call (the model's output limit, when it is lower than
    what the summary asks for)."""

    def __init__(
        self,
        client: Any,
        *,
        style: str = "pi",
        window_tokens: int,
        timeout: float = DEFAULT_TIMEOUT,
        max_failures: int = MAX_CONSECUTIVE_FAILURES,
        fallback: Summarizer | None = ExtractiveSummarizer(),  # frozen and stateless: safe to share
        max_output_tokens: int | None = None,
    ) -> None:
        if style not in STYLES:
            raise ArgumentError(f"unknown summary style {style!r}; expected one of {', '.join(STYLES)}")
        if window_tokens <= 0:
            raise ArgumentError("window_tokens must be positive (the summarizer model's context window)")
        self.client = client
        self.style = style
        self.window_tokens = window_tokens
        self.timeout = timeout
        self.max_failures = max_failures
        self.fallback = fallback
        self.max_output_tokens = max_output_tokens
        self.name = f"llm:{style}"
        self.consecutive_failures = 0

    @property
    def breaker_open(self) -> bool:
        return self.consecutive_failures >= self.max_failures

    def reset(self) -> None:
        """Close the circuit breaker: the next summary calls the model again."""
        self.consecutive_failures = 0

    def summarize(self, span: Sequence[Message], *, previous: Summary | None = None, focus: str | None = None,
                  budget_tokens: int = DEFAULT_BUDGET_TOKENS, counter: TokenCounter | None = None) -> Summary:
        counter = summary_counter(counter, getattr(self.client, "model", None))
        if self.breaker_open:
            reason = f"circuit breaker open after {self.consecutive_failures} consecutive failures; model not called"
            return self._fall_back(span, previous, focus, budget_tokens, counter, reason, _Run())
        run = _Run(deadline=time.monotonic() + self.timeout)
        try:
            summary = self._summarize(span, previous, focus, budget_tokens, counter, run)
        except Exception as exc:  # any failure of the model path: fall back, keep history
            self.consecutive_failures += 1
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return self._fall_back(span, previous, focus, budget_tokens, counter, reason, run)
        self.consecutive_failures = 0
        return summary

    # ------------------------------------------------------------------------------------------------

    def _summarize(self, span: Sequence[Message], previous: Summary | None, focus: str | None, budget: int,
                   counter: TokenCounter, run: _Run) -> Summary:
        read, modified = _file_lists(span, previous)
        tags = file_tags(read, modified, int(budget * FILE_TAGS_SHARE), counter) \
            if self.style in FILE_TAG_STYLES else ""
        text_budget = budget - (counter.count_text(tags) if tags else 0)
        previous_text = previous.text if previous is not None and previous.text.strip() else None
        max_output = self._max_output(text_budget)
        chunks = self.chunk(span, previous_text, focus, text_budget, max_output, counter)
        run.chunks = len(chunks)

        # Everything before the last call is done once; a quality retry repeats only the last call.
        if self.style == "openclaw" and len(chunks) > 1:
            partials = [self._call(build_prompt(self.style, c, focus=focus, budget_tokens=text_budget), max_output,
                                   run) for c in chunks]

            def final(feedback: str | None) -> str:
                merge = build_merge_prompt(partials, previous=previous_text, focus=focus, budget_tokens=text_budget,
                                           feedback=feedback)
                return self._call(merge, max_output, run)
        else:
            running = previous_text
            for chunk in chunks[:-1]:
                running = self._call(build_prompt(self.style, chunk, previous=running, focus=focus,
                                                  budget_tokens=text_budget), max_output, run)

            def final(feedback: str | None) -> str:
                prompt = build_prompt(self.style, chunks[-1], previous=running, focus=focus,
                                      budget_tokens=text_budget, feedback=feedback)
                return self._call(prompt, max_output, run)

        text = final(None)
        problems = self._problems(text, span)
        while problems and self.style == "openclaw" and run.quality_retries < QUALITY_RETRIES:
            run.quality_retries += 1
            text = final("; ".join(problems))
            problems = self._problems(text, span)
        if problems:
            raise _SummaryRejected("; ".join(problems))

        trimmed = False
        full = text + tags
        limit = text_budget
        # Over the budget (the model overshot, or joining the file lists counts a token more): keep
        # the most important items of each section, with less room each time.
        while counter.count_text(full) > budget and limit > 0:
            limit -= max(1, counter.count_text(full) - budget) if trimmed else 0
            numbered = self.style == "claude-code"
            fitted = fit_sections(sections_as_items(parse_sections(text, numbered_headings=numbered)),
                                  limit, counter)
            full, trimmed = fitted.text + tags, True
        text = full[: len(full) - len(tags)] if tags else full
        details: dict[str, Any] = {
            "style": self.style,
            "model": getattr(self.client, "model", None),
            "calls": run.calls,
            "chunks": run.chunks,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "trimmed_to_budget": trimmed,
        }
        if run.quality_retries:
            details["quality_retries"] = run.quality_retries
        if focus:
            details["focus"] = focus
        return Summary(
            text=full,
            sections=parse_sections(text, numbered_headings=self.style == "claude-code"),
            read_files=tuple(read),
            modified_files=tuple(modified),
            covered_ids=tuple(m.id for m in span if m.id),
            tokens=counter.count_text(full),
            summarizer=self.name,
            details=details,
        )

    def _max_output(self, budget: int) -> int:
        factor = ANALYSIS_FACTOR if self.style == "claude-code" else OUTPUT_SLACK
        wanted = max(MIN_OUTPUT_TOKENS, min(self.window_tokens // 2, int(budget * factor)))
        return min(wanted, self.max_output_tokens) if self.max_output_tokens else wanted

    def _problems(self, text: str, span: Sequence[Message]) -> list[str]:
        """Why `text` is not a usable summary of this style (empty list: it is)."""
        if not text.strip():
            return ["empty output"]
        missing = missing_sections(self.style, text)
        expected = EXPECTED_SECTIONS[self.style]
        if self.style == "openclaw":
            return quality_problems(text, span)
        if len(expected) - len(missing) < math.ceil(len(expected) * MIN_SECTION_SHARE):
            return [f"malformed output: missing sections {', '.join(missing)}"]
        return []

    def _call(self, prompt: Prompt, max_output: int, run: _Run) -> str:
        remaining = run.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"summary not finished within {self.timeout:g} s")
        run.calls += 1
        completion = _within(
            lambda: self.client.complete([Message("user", (Text(prompt.user),))], system=prompt.system,
                                         max_tokens=max_output, timeout=remaining),
            remaining,
        )
        usage = getattr(completion, "usage", None)
        if usage is not None:
            run.input_tokens += getattr(usage, "input_tokens", 0) or 0
            run.output_tokens += getattr(usage, "output_tokens", 0) or 0
        text = completion.text.strip()
        if self.style == "claude-code":
            text = strip_analysis(text)
        if not text:
            raise _SummaryRejected("empty output")
        return text

    def chunk(self, span: Sequence[Message], previous_text: str | None, focus: str | None, budget: int,
              max_output: int, counter: TokenCounter) -> list[str]:
        """The span serialized in chunks that each fit one call of the summarizer's window (with the
        prompt, the running summary and the output), split by token share at boundaries that never
        separate a tool call from its result."""
        frame = build_prompt(self.style, "", previous=previous_text, focus=focus, budget_tokens=budget)
        summary_room = max(budget, counter.count_text(previous_text) if previous_text else 0)
        overhead = counter.count_text(frame.system) + counter.count_text(frame.user) + summary_room + max_output
        room = int((self.window_tokens - overhead - PROMPT_MARGIN_TOKENS) / SAFETY_MARGIN)
        if room < MIN_CHUNK_TOKENS:
            raise _SummaryRejected(
                f"the summarizer's window ({self.window_tokens} tokens) leaves {max(room, 0)} tokens for the "
                f"conversation after the prompt, summary and output; at least {MIN_CHUNK_TOKENS} are needed"
            )
        texts = ["\n\n".join(p for m in group for p in serialize_message(m)) for group in call_groups(span)]
        texts = [t for t in texts if t]
        costs = [counter.count_text(t) + 2 for t in texts]
        total = sum(costs)
        if total <= room:
            return ["\n\n".join(texts)] if texts else [""]
        target = total / math.ceil(total / room)
        chunks: list[list[str]] = [[]]
        size = 0
        for text, cost in zip(texts, costs, strict=True):
            if cost > room:
                text, cost = _shrink(text, cost, room), room
            if chunks[-1] and (size + cost > room or size >= target):
                chunks.append([])
                size = 0
            chunks[-1].append(text)
            size += cost
        return ["\n\n".join(c) for c in chunks]

    def _fall_back(self, span: Sequence[Message], previous: Summary | None, focus: str | None, budget: int,
                   counter: TokenCounter, reason: str, run: _Run) -> Summary:
        record = {"from": self.name, "reason": reason, "consecutive_failures": self.consecutive_failures,
                  "calls": run.calls}
        if self.fallback is None:
            raise SummaryFailed(f"the {self.name} summary failed: {reason}",
                                "history is unchanged; retry later, or give the summarizer a fallback")
        summary = self.fallback.summarize(span, previous=previous, focus=focus, budget_tokens=budget, counter=counter)
        details = dict(summary.details)
        details["fallback"] = record
        return Summary(text=summary.text, sections=summary.sections, read_files=summary.read_files,
                       modified_files=summary.modified_files, identifiers=summary.identifiers,
                       covered_ids=summary.covered_ids, tokens=summary.tokens, summarizer=summary.summarizer,
                       details=details)


class _Run:
    """What one summary did so far (calls, tokens, retries) and its deadline."""

    def __init__(self, deadline: float = 0.0) -> None:
        self.deadline = deadline
        self.calls = 0
        self.chunks = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.quality_retries = 0


def _within(call: Callable[[], T], seconds: float) -> T:
    """`call()`, or TimeoutError when it has not returned within `seconds` (even if the client ignores
    its own timeout; the call's thread is left to finish on its own)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="ctxwin-summary-call", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"the model did not answer within {seconds:.1f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def call_groups(span: Sequence[Message]) -> list[list[Message]]:
    """The span in atomic groups: a message with tool calls stays with the messages holding their
    results (a group closes once no call in it is unanswered)."""
    groups: list[list[Message]] = []
    pending: set[str] = set()
    for message in span:
        if groups and pending:
            groups[-1].append(message)
        else:
            groups.append([message])
        pending |= {c.id for c in message.tool_calls}
        pending -= {r.call_id for r in message.tool_results}
    return groups


def _shrink(text: str, cost: int, room: int) -> str:
    """A group too large for one call, cut in the middle to fit (with a note saying how much)."""
    keep = max(200, int(len(text) * room / cost * 0.9))
    head, tail = text[: keep // 2], text[len(text) - keep // 2:]
    return f"{head}\n\n[... {len(text) - keep} characters left out to fit the summarizer's window ...]\n\n{tail}"


def _file_lists(span: Sequence[Message], previous: Summary | None) -> tuple[list[str], list[str]]:
    """Read-only and modified files: the previous summary's carried forward, plus the span's."""
    read, modified = extract_file_ops(span)
    if previous is not None:
        modified = merge_items(list(previous.modified_files), modified)
        read = merge_items(list(previous.read_files), read)
    modified_set = set(modified)
    return [p for p in read if p not in modified_set], modified


def file_tags(read: Sequence[str], modified: Sequence[str], budget: int, counter: TokenCounter) -> str:
    """Pi's file lists, `<read-files>` and `<modified-files>` (sorted), with the most recently touched
    files kept when not all fit in `budget` tokens."""
    def render(r: Sequence[str], m: Sequence[str]) -> str:
        parts = []
        if r:
            parts.append("<read-files>\n" + "\n".join(sorted(r)) + "\n</read-files>")
        if m:
            parts.append("<modified-files>\n" + "\n".join(sorted(m)) + "\n</modified-files>")
        return "\n\n" + "\n\n".join(parts) if parts else ""

    r, m = list(read), list(modified)
    text = render(r, m)
    while text and counter.count_text(text) > budget:
        # Drop the oldest file of the longer list (both lists are oldest first).
        if len(r) >= len(m) and r:
            r.pop(0)
        elif m:
            m.pop(0)
        text = render(r, m)
    return text


def quality_problems(text: str, span: Sequence[Message]) -> list[str]:
    """OpenClaw's quality guard: the five required sections are present; the identifiers of the last
    messages survive; the latest user ask is reflected (2 of its keywords when it has 3 or more)."""
    problems = []
    missing = missing_sections("openclaw", text)
    if missing:
        problems.append("missing sections: " + ", ".join(missing))
    normalized = normalize(text)
    identifiers = extract_identifiers(span[-QUALITY_RECENT_MESSAGES:])[:QUALITY_MAX_IDENTIFIERS]
    lost = [i for i in identifiers if not survives(i, normalized)]
    if lost:
        problems.append("missing identifiers: " + ", ".join(lost))
    ask = next((t for t in (user_text(m) for m in reversed(span)) if t), "")
    keywords = list(dict.fromkeys(
        w.casefold() for w in _KEYWORD.findall(ask) if w.casefold() not in _STOPWORDS))[:QUALITY_MAX_KEYWORDS]
    if keywords:
        need = 2 if len(keywords) >= 3 else 1
        if sum(k in normalized for k in keywords) < need:
            problems.append("the latest user request is not reflected")
    return problems
