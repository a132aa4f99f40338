"""Building a `Transcript` while reading a file: messages are drafted (an assistant turn written over
several records grows in place), then finished in one pass that drops what came out empty and keeps
every index (usage, compactions) pointing at the right message."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ctxwin.messages import Block, Message, Role
from ctxwin.transcripts.model import CompactionRecord, UsageRecord
from ctxwin.transcripts.source import ImportLog


@dataclass
class Draft:
    role: Role
    blocks: list[Block]
    id: str
    meta: dict[str, Any]


@dataclass
class Conversation:
    """Messages, usage and compactions as a reader finds them. Indices are draft indices until
    `finish` maps them to message indices."""

    drafts: list[Draft] = field(default_factory=list)
    usage: dict[int, UsageRecord] = field(default_factory=dict)
    compactions: list[CompactionRecord] = field(default_factory=list)

    def add(self, role: Role, blocks: list[Block], id: str, meta: dict[str, Any]) -> int:
        self.drafts.append(Draft(role, blocks, id, meta))
        return len(self.drafts) - 1

    def __len__(self) -> int:
        return len(self.drafts)

    def finish(self, log: ImportLog) -> tuple[list[Message], list[UsageRecord], list[CompactionRecord]]:
        """Drops drafts that ended with no blocks (counted as `empty_<role>`), makes ids unique, and
        maps usage and compaction indices onto the kept messages."""
        kept_before = [0] * (len(self.drafts) + 1)  # kept_before[i]: kept drafts among drafts[:i]
        messages: list[Message] = []
        seen_ids: dict[str, int] = {}
        for index, draft in enumerate(self.drafts):
            kept_before[index] = len(messages)
            if not draft.blocks:
                log.skip(f"empty_{draft.role}")
                continue
            message_id = draft.id
            if message_id in seen_ids:
                seen_ids[message_id] += 1
                message_id = f"{message_id}#{seen_ids[message_id]}"
            seen_ids.setdefault(message_id, 1)
            messages.append(Message(draft.role, tuple(draft.blocks), message_id, draft.meta))
        kept_before[len(self.drafts)] = len(messages)

        usage = []
        for index, record in sorted(self.usage.items()):
            if self.drafts[index].blocks:
                usage.append(replace(record, message_index=kept_before[index]))
            else:
                log.skip("usage_of_empty_message")
        compactions = [
            replace(
                c,
                index=kept_before[min(c.index, len(self.drafts))],
                first_kept_index=None if c.first_kept_index is None
                else kept_before[min(c.first_kept_index, len(self.drafts))],
            )
            for c in self.compactions
        ]
        return messages, usage, compactions
