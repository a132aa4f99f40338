"""Shared pieces of every summarizer: a span serialized to plain text (Pi's format), summary sections
(parse, merge, render), and `fit_sections`, which renders sections within a token budget by trimming
the least important items first.

Sections are plain data: a heading and a list of item strings. An item renders as one markdown bullet;
its later lines are indented by two spaces, so text inside an item (a user message with its own
headings or bullets) never reads as structure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ctxwin.messages import Image, Message, Text, Thinking, ToolCall
from ctxwin.pipeline.cut import CLIP_MARK, clip
from ctxwin.tokens.base import TokenCounter

TOOL_RESULT_CHARS = 2_000  # a tool result is cut to this in the serialized conversation (Pi)
MAX_FIT_ATTEMPTS = 6  # re-fits with a smaller budget when joined text counts more than its parts

_WS = re.compile(r"\s+")


# --------------------------------------------------------------------------------------------------
# Serialization: the conversation as a document to summarize, not a chat to continue.


def serialize_call(call: ToolCall) -> str:
    """`name(key=<json>, ...)`, Pi's form of a tool call."""
    args = call.arguments
    if isinstance(args, dict):
        inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    else:
        inner = json.dumps(args, ensure_ascii=False) if not isinstance(args, str) else args
    return f"{call.name}({inner})"


def truncate_result(text: str, limit: int = TOOL_RESULT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n\n[... {len(text) - limit} more characters truncated]"


def serialize_message(message: Message, *, tool_result_chars: int = TOOL_RESULT_CHARS) -> list[str]:
    """The parts of one message: `[User]:`, `[Assistant thinking]:`, `[Assistant]:`,
    `[Assistant tool calls]:`, `[Tool result]:` (cut to `tool_result_chars`), `[System]:`."""
    parts: list[str] = []
    if message.role == "assistant":
        thinking = [b.thinking for b in message.blocks if isinstance(b, Thinking) and not b.redacted]
        text = [b.text for b in message.blocks if isinstance(b, Text) and b.text.strip()]
        calls = [serialize_call(b) for b in message.blocks if isinstance(b, ToolCall)]
        if thinking:
            parts.append("[Assistant thinking]: " + "\n".join(thinking))
        if text:
            parts.append("[Assistant]: " + "\n".join(text))
        if calls:
            parts.append("[Assistant tool calls]: " + "; ".join(calls))
    elif message.role == "tool":
        for result in message.tool_results:
            body = result.text
            images = sum(isinstance(p, Image) for p in result.content)
            if images:
                body = (body + "\n" if body else "") + f"[{images} image(s)]"
            parts.append("[Tool result]: " + truncate_result(body, tool_result_chars))
    else:
        label = "[User]: " if message.role == "user" else "[System]: "
        said = "\n".join(b.text for b in message.blocks if isinstance(b, Text))
        pictures = sum(isinstance(b, Image) for b in message.blocks)
        if pictures:
            said = (said + "\n" if said else "") + f"[{pictures} image(s)]"
        results = [truncate_result(r.text, tool_result_chars) for r in message.tool_results]
        if said.strip():
            parts.append(label + said)
        parts.extend("[Tool result]: " + r for r in results)
    return parts


def serialize_span(messages: Iterable[Message], *, tool_result_chars: int = TOOL_RESULT_CHARS) -> str:
    """The span as plain text, parts joined by blank lines (Pi's serializeConversation)."""
    parts: list[str] = []
    for message in messages:
        parts.extend(serialize_message(message, tool_result_chars=tool_result_chars))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------------
# Items and sections


def item_key(item: str) -> str:
    """What makes two items the same: case and whitespace ignored, a clip mark ignored."""
    if item.endswith(CLIP_MARK):
        item = item[: -len(CLIP_MARK)]
    return _WS.sub(" ", item).strip().casefold()


def render_item(item: str) -> str:
    lines = item.strip("\n").split("\n")
    rest = "".join("\n  " + line if line.strip() else "\n" for line in lines[1:])
    return f"- {lines[0]}{rest}"


def render_sections(sections: Mapping[str, Sequence[str]], labels: Mapping[str, str] | None = None,
                    paragraphs: Iterable[str] = ()) -> str:
    """Markdown: `## heading` (or its label) then one bullet per item (a section in `paragraphs`: its
    items as plain paragraphs); empty sections left out."""
    plain = set(paragraphs)
    blocks = []
    for heading, items in sections.items():
        if items:
            title = (labels or {}).get(heading, heading)
            body = "\n\n".join(items) if heading in plain else "\n".join(render_item(i) for i in items)
            blocks.append(f"## {title}\n{body}" if title else body)
    return "\n\n".join(blocks)


_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_NUMBERED_HEADING = re.compile(r"^\d{1,2}\.\s+([A-Z][^:\n]{2,80}):\s*(.*)$")
_BULLET = re.compile(r"^(?:[-*+•]|\d{1,3}[.)])\s+")


def parse_sections(text: str, *, numbered_headings: bool = False) -> dict[str, list[str]]:
    """Sections of a markdown summary. Headings are `#` lines (and, with `numbered_headings`, lines
    like `3. Files and Code Sections:`, Claude Code's layout). Items are top-level bullets with the
    lines under them, or paragraphs when a section has no bullets. Text before the first heading goes
    under the heading ""."""
    sections: dict[str, list[str]] = {}
    current = ""
    item: list[str] | None = None
    paragraph_break = False

    def close() -> None:
        nonlocal item
        if item is not None:
            joined = "\n".join(item).strip("\n")
            if joined.strip():
                sections.setdefault(current, []).append(joined)
        item = None

    for raw in text.split("\n"):
        line = raw.rstrip()
        heading = _HEADING.match(line)
        numbered = _NUMBERED_HEADING.match(line) if numbered_headings else None
        title = heading.group(2) if heading else numbered.group(1) if numbered else None
        if title is not None:
            close()
            current = title.strip()
            sections.setdefault(current, [])
            rest = numbered.group(2).strip() if numbered else ""
            if rest:
                item = [rest]
            paragraph_break = False
            continue
        if not line.strip():
            paragraph_break = True
            if item is not None:
                item.append("")
            continue
        # Claude Code indents its items under numbered headings; our own items nest by two spaces.
        bullet = _BULLET.match(line.lstrip(" ") if numbered_headings and len(line) - len(line.lstrip(" ")) <= 3
                               else line)
        if bullet:
            close()
            item = [line.lstrip(" ")[bullet.end():] if numbered_headings else line[bullet.end():]]
        elif item is None or (paragraph_break and not line.startswith((" ", "\t"))):
            close()
            item = [line]
        else:
            item.append(line[2:] if line.startswith("  ") else line.lstrip())
        paragraph_break = False
    close()
    return {k: v for k, v in sections.items() if v or k}


def merge_items(previous: Sequence[str], new: Sequence[str], *, to_front: bool = False) -> list[str]:
    """Union without duplicates (by `item_key`). The new items keep their order and go to the end
    (or the front with `to_front`); previous items they repeat are dropped from their old place.
    Idempotent: merging the result with `new` again changes nothing."""
    new_keys = {item_key(i) for i in new}
    seen: set[str] = set()
    fresh = []
    for item in new:
        key = item_key(item)
        if key not in seen:
            seen.add(key)
            fresh.append(item)
    old = []
    for item in previous:
        key = item_key(item)
        if key not in new_keys and key not in seen:
            seen.add(key)
            old.append(item)
    return fresh + old if to_front else old + fresh


def merge_sections(previous: Mapping[str, Sequence[str]], new: Mapping[str, Sequence[str]],
                   rules: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """Section-by-section merge. A rule per heading: "union" (default: `merge_items`), "front"
    (union, new first), "keep" (the previous items win when there are any) or "replace" (the new
    items win when there are any). Headings keep the previous order, new ones are added after."""
    rules = rules or {}
    out: dict[str, list[str]] = {}
    for heading in [*previous, *(h for h in new if h not in previous)]:
        old, fresh = list(previous.get(heading, ())), list(new.get(heading, ()))
        rule = rules.get(heading, "union")
        if rule == "keep":
            out[heading] = old or fresh
        elif rule == "replace":
            out[heading] = fresh or old
        else:
            out[heading] = merge_items(old, fresh, to_front=rule == "front")
    return out


# --------------------------------------------------------------------------------------------------
# Fitting sections into a token budget


@dataclass(frozen=True)
class SectionItem:
    """One item to fit. `variants` are renderings from longest to shortest (the fitter uses the
    longest that fits); `rank` orders what is kept when space runs out, lower first."""

    variants: tuple[str, ...]
    rank: float = 0.0


ITEMS = "items"
"""A section's form: each item one bullet (the default)."""
MARKDOWN = "markdown"
"""A section whose variants are already bullets (one or more), shown as they are (a whole section that
shrinks as one, such as grouped errors)."""
PARAGRAPH = "paragraph"
"""A section whose items are plain paragraphs, not bullets."""


@dataclass(frozen=True)
class Section:
    key: str
    items: tuple[SectionItem, ...]
    weight: float = 1.0  # share of the budget when sections compete for it
    title: str | None = None  # the heading shown, when it differs from `key`
    form: str = ITEMS
    level_wise: bool = False
    """Items grow one form at a time, all of them (most important first) before any grows again: every
    item is shortened before any is left short of what the others have (errors: every message shown
    before any gets its line numbers back)."""

    def rendered(self, variant: str) -> str:
        """How one item's variant reads in the summary."""
        return render_item(variant) if self.form == ITEMS else variant

    @cached_property
    def pieces(self) -> tuple[tuple[str, ...], ...]:
        """Each item's variants as they read in the summary (`rendered`), made once: a fit weighs
        them many times."""
        return tuple(tuple(self.rendered(v) for v in item.variants) for item in self.items)


def markdown_items(text: str) -> list[str]:
    """The bullets of pre-rendered markdown as items (`render_item` of each gives the text back)."""
    return parse_sections("## x\n" + text).get("x", [])


@dataclass(frozen=True)
class Fitted:
    text: str
    sections: dict[str, list[str]]
    tokens: int
    omitted: dict[str, int] = field(default_factory=dict)  # items left out, per section
    shortened: dict[str, int] = field(default_factory=dict)  # items shown in a shorter variant


class _Costs:
    """Token costs of rendered pieces, each counted once."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.cache: dict[str, int] = {}

    def __call__(self, piece: str) -> int:
        cost = self.cache.get(piece)
        if cost is None:
            cost = self.counter.count_text(piece) + 1  # +1 for the joining newline
            self.cache[piece] = cost
        return cost


def fit_sections(sections: Sequence[Section], budget_tokens: int, counter: TokenCounter) -> Fitted:
    """Render `sections` in at most `budget_tokens` (by `counter`).

    Every section with content first gets its heading and its most important item (in section
    order, while that fits); then every item in its shortest form, the budget shared by weight,
    water-filling style (a section that needs less than its share gives the rest back), the most
    important items first; then, with what is left, shared the same way, items grow to longer forms.
    So everything is compressed before anything is dropped. The
    result never exceeds the budget: when the joined text counts more than its parts, it is fitted
    again with less, and as a last resort items are dropped until it fits.
    """
    costs = _Costs(counter)
    limit = max(0, budget_tokens)
    fitted = _fit_once(sections, limit, costs)
    attempts = 0
    while fitted.tokens > budget_tokens and attempts < MAX_FIT_ATTEMPTS:
        limit = max(0, limit - (fitted.tokens - budget_tokens) - 2 * (attempts + 1))
        fitted = _fit_once(sections, limit, costs)
        attempts += 1
    while fitted.tokens > budget_tokens:
        fitted = _drop_last(fitted, counter, sections)
    return fitted


def _fit_once(sections: Sequence[Section], budget: int, costs: _Costs) -> Fitted:
    live = [s for s in sections if s.items]
    heads = {s.key: costs(f"## {s.title or s.key}") + 1 for s in live}  # +1: the blank line between sections
    chosen: dict[str, dict[int, int]] = {s.key: {} for s in live}  # item index -> variant index
    orders = {s.key: _order(s) for s in live}

    def item_cost(section: Section, index: int, variant: int) -> int:
        return costs(section.pieces[index][variant])

    def add_min(section: Section, allowance: int) -> int:
        used = 0
        for index in orders[section.key]:
            if index in chosen[section.key]:
                continue
            variant = len(section.items[index].variants) - 1
            cost = item_cost(section, index, variant) + (0 if chosen[section.key] else heads[section.key])
            if used + cost <= allowance:
                chosen[section.key][index] = variant
                used += cost
        return used

    def grow(section: Section, allowance: int) -> int:
        if section.level_wise:
            return grow_level_wise(section, allowance)
        used = 0
        for index in orders[section.key]:
            variant = chosen[section.key].get(index)
            if variant is None or variant == 0:
                continue
            current = item_cost(section, index, variant)
            for better in range(variant):
                extra = item_cost(section, index, better) - current
                if used + extra <= allowance:
                    chosen[section.key][index] = better
                    used += extra
                    break
        return used

    def grow_level_wise(section: Section, allowance: int) -> int:
        """One form longer for the least grown items (the most important first); an item that cannot
        afford it stops the growth of everything ahead of it."""
        used = 0
        while True:
            picks = chosen[section.key]
            behind = max((v for v in picks.values() if v), default=0)
            if not behind:
                return used
            grown = False
            for index in orders[section.key]:
                if picks.get(index) != behind:
                    continue
                extra = item_cost(section, index, behind - 1) - item_cost(section, index, behind)
                if used + extra > allowance:
                    return used
                picks[index] = behind - 1
                used += extra
                grown = True
            if not grown:
                return used

    remaining = budget
    # 1. Every section with content gets its heading and its first item, in section order.
    for section in live:
        first = orders[section.key][0]
        variant = len(section.items[first].variants) - 1
        cost = heads[section.key] + item_cost(section, first, variant)
        if cost <= remaining:
            chosen[section.key][first] = variant
            remaining -= cost

    # 2. The shortest form of every item, the budget shared by weight (a section needing less than
    # its share gives the rest back): every section is compressed before any item is dropped.
    def shortest_need(s: Section) -> int:
        return sum(item_cost(s, i, len(s.items[i].variants) - 1) for i in range(len(s.items))
                   if i not in chosen[s.key]) + (0 if chosen[s.key] else heads[s.key])

    quota = water_fill({s.key: shortest_need(s) for s in live}, {s.key: s.weight for s in live}, remaining)
    for section in live:
        remaining -= add_min(section, quota.get(section.key, 0))
    for section in live:  # what rounding and granularity left over, in section order
        if remaining <= 0:
            break
        remaining -= add_min(section, remaining)

    # 3. Then longer forms, shared by weight the same way, the most important items first.
    def growth_need(s: Section) -> int:
        return sum(item_cost(s, i, 0) - item_cost(s, i, v) for i, v in chosen[s.key].items())

    quota = water_fill({s.key: growth_need(s) for s in live}, {s.key: s.weight for s in live}, remaining)
    for section in live:
        remaining -= grow(section, quota.get(section.key, 0))
    for section in live:
        if remaining <= 0:
            break
        remaining -= grow(section, remaining)

    return _render(live, chosen, costs.counter)


def _order(section: Section) -> list[int]:
    """The section's item indices, most important (lowest rank) first."""
    return sorted(range(len(section.items)), key=lambda i: (section.items[i].rank, i))


def water_fill(need: Mapping[str, int], weight: Mapping[str, float], pool: int) -> dict[str, int]:
    """Shares of `pool` by weight, where a key needing less than its share takes only its need and
    the rest is shared again among the others."""
    quota: dict[str, int] = {}
    active = [k for k, n in need.items() if n > 0]
    while active and pool > 0:
        total = sum(weight[k] for k in active) or 1.0
        satisfied = [k for k in active if need[k] <= pool * weight[k] / total]
        if not satisfied:
            for k in active:
                quota[k] = int(pool * weight[k] / total)
            break
        for k in satisfied:
            quota[k] = need[k]
            pool -= need[k]
        active = [k for k in active if k not in satisfied]
    return quota


def _render(live: Sequence[Section], chosen: Mapping[str, Mapping[int, int]], counter: TokenCounter) -> Fitted:
    out: dict[str, list[str]] = {}
    titles: dict[str, str] = {}
    omitted: dict[str, int] = {}
    shortened: dict[str, int] = {}
    for section in live:
        picks = chosen.get(section.key, {})
        items = [section.items[i].variants[picks[i]] for i in sorted(picks)]
        if section.form == MARKDOWN:
            items = [item for text in items for item in markdown_items(text)]
        if items:
            out[section.key] = items
            titles[section.key] = section.title or section.key
        if len(picks) < len(section.items):
            omitted[section.key] = len(section.items) - len(picks)
        short = sum(1 for v in picks.values() if v > 0)
        if short:
            shortened[section.key] = short
    text = render_sections(out, titles, paragraphs_of(live))
    return Fitted(text=text, sections=out, tokens=counter.count_text(text) if text else 0,
                  omitted=omitted, shortened=shortened)


def paragraphs_of(sections: Sequence[Section]) -> frozenset[str]:
    return frozenset(s.key for s in sections if s.form == PARAGRAPH)


def _drop_last(fitted: Fitted, counter: TokenCounter, sections: Sequence[Section]) -> Fitted:
    """`fitted` without its last item (the final guarantee; rarely reached)."""
    out = {k: list(v) for k, v in fitted.sections.items()}
    for key in reversed(list(out)):
        if out[key]:
            out[key].pop()
            if not out[key]:
                del out[key]
            break
    titles = {s.key: s.title or s.key for s in sections}
    text = render_sections(out, titles, paragraphs_of(sections))
    omitted = dict(fitted.omitted)
    return Fitted(text=text, sections=out, tokens=counter.count_text(text) if text else 0,
                  omitted=omitted, shortened=dict(fitted.shortened))


def sections_as_items(sections: Mapping[str, Sequence[str]], *, weight: Callable[[str], float] = lambda _: 1.0,
                      min_chars: int = 160) -> list[Section]:
    """Plain sections as fittable ones: items keep their order of importance (earlier first), and
    long items may shrink to `min_chars`."""
    out = []
    for key, items in sections.items():
        fit_items = tuple(
            SectionItem(variants=(item,) if len(item) <= min_chars else (item, clip(item, min_chars)), rank=index)
            for index, item in enumerate(items)
        )
        if fit_items:
            out.append(Section(key=key, items=fit_items, weight=weight(key)))
    return out
