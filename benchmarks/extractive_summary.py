"""How long the extractive summarizer takes on a large span, and what the identifier guard adds.

The span is the three long real Claude Code sessions and the Pi session, concatenated (ids made unique)
until it holds at least TARGET_TOKENS tokens of content by cl100k. Prints one JSON object on its last
line: span size, and the best of REPEATS timings of summarize() (without, and with the per-message facts
a caller can compute as messages arrive: `facts_seconds` is that work, once) and guard(), in seconds.

    /work/venv/bin/python benchmarks/extractive_summary.py
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ctxwin.compaction.extractive import ExtractiveSummarizer, message_facts
from ctxwin.compaction.identifiers import guard
from ctxwin.compaction.summary import serialize_span
from ctxwin.messages import Message
from ctxwin.tokens.encodings import get_encoding
from ctxwin.transcripts import load_transcript

TARGET_TOKENS = 150_000  # the span size the summarizer must handle "in well under a second"
BUDGET_TOKENS = 4_000  # a Claude-Code-sized summary
REPEATS = 3
SHARED = Path(os.environ.get("CTXWIN_SHARED_DIR", Path(__file__).resolve().parents[1].parent / "shared")) \
    / "transcripts"
SESSIONS = [
    "claude-code/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "claude-code/4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
    "claude-code/8463c716-a2ea-4c14-9efa-87158ebd9f20.jsonl",
    "pi/before-compaction.jsonl",
]


class Cl100k:
    name = "tiktoken:cl100k_base"
    exact = True

    def __init__(self) -> None:
        self.encoding = get_encoding("cl100k_base")

    def count_text(self, text: str) -> int:
        return len(self.encoding.encode(text, disallowed_special=()))

    def count_message(self, message: Message) -> int:
        return 4 + self.count_text(serialize_span([message]))


def build_span(counter: Cl100k) -> tuple[list[Message], int]:
    span: list[Message] = []
    tokens = 0
    round_ = 0
    while tokens < TARGET_TOKENS:
        for name in SESSIONS:
            transcript = load_transcript(SHARED / name)
            for message in transcript.messages:
                span.append(message.replace(id=f"{round_}-{message.id}"))
                tokens += counter.count_message(message)
                if tokens >= TARGET_TOKENS:
                    return span, tokens
        round_ += 1
    return span, tokens


def main() -> None:
    if not SHARED.exists():
        sys.exit(f"{SHARED} is absent: the shared transcripts are needed")
    counter = Cl100k()
    span, tokens = build_span(counter)
    summarizer = ExtractiveSummarizer()
    start = time.perf_counter()
    facts = {m.id: message_facts(m) for m in span}  # what a caller computes as messages arrive
    facts_seconds = time.perf_counter() - start
    timings, facts_timings, guard_timings = [], [], []
    for _ in range(REPEATS):
        start = time.perf_counter()
        summary = summarizer.summarize(span, budget_tokens=BUDGET_TOKENS, counter=counter)
        timings.append(time.perf_counter() - start)
        start = time.perf_counter()
        summarizer.summarize(span, budget_tokens=BUDGET_TOKENS, counter=counter, facts=facts)
        facts_timings.append(time.perf_counter() - start)
        start = time.perf_counter()
        guarded = guard(summary, span, counter, BUDGET_TOKENS)
        guard_timings.append(time.perf_counter() - start)
    print(json.dumps({
        "benchmark": "extractive_summary",
        "span_messages": len(span),
        "span_tokens": tokens,
        "budget_tokens": BUDGET_TOKENS,
        "summary_tokens": summary.tokens,
        "summarize_seconds": round(min(timings), 3),
        "summarize_with_facts_seconds": round(min(facts_timings), 3),
        "facts_seconds": round(facts_seconds, 3),
        "guard_seconds": round(min(guard_timings), 3),
        "guard_appended": len(guarded.details["identifier_guard"]["appended"]),
        "counter": counter.name,
    }))


if __name__ == "__main__":
    main()
