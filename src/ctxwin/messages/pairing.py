"""Tool-call pairing: one validator that says what a provider's API would reject in the payload the
matching `to_*` converter writes, and one repair that fixes what a cut leaves behind.

`validate(messages, provider)` reports, as `Problem(kind, index, call_id, detail)`:
- `empty_text`: a text block (or text part of a tool result) that is empty or only whitespace;
  `empty_block`: an image with neither data nor URL;
  `empty_message`: a message with no block the provider's writer sends (thinking that the provider does
  not take back does not count: see `providers._common.thinking_written`).
- `misplaced_block`: a tool call or thinking outside an assistant message, a tool result outside a tool
  message, or anything but tool results in a tool message (the writers refuse these).
- `duplicate_call_id`: a tool call id used by an earlier call; `invalid_call_id`: an empty id, or for
  Anthropic one that does not match `^[a-zA-Z0-9_-]+$`.
- `orphan_result`: a result with no call of that id before it; `duplicate_result`: a second result for
  a call; `missing_result`: a call that is never answered.
- `result_out_of_place`: a result outside its call's answer zone. The answer zone of a call is the run
  of tool messages directly after the assistant turn that made it, before any other role. For OpenAI
  Chat the turn is the assistant message itself; for Anthropic it is the run of consecutive assistant
  messages (the writer merges them into one), so the zone is the user message right after it, and tool
  results come first in it. OpenAI Responses only needs each output somewhere after its call.
- Anthropic only: `system_not_at_start` (a system message after the first non-system message) and
  `first_not_user` (the first non-system message is an assistant message). Strict alternation holds
  after the writer's merging once these two and the pairing rules hold.
- Responses only: `dangling_reasoning`, a reasoning item whose next non-reasoning item is not an
  assistant message or call (the API rejects "reasoning without its required following item").
- With `request=True` (the messages are the request for the model's next answer, as `prepare()` and a
  replay's model calls build them), also `ends_with_assistant`: the last message is an assistant message
  without tool calls (with calls, it is `missing_result`). The model would not answer: Anthropic takes
  it as a prefill to continue (which models with thinking refuse), OpenAI gets a request with nothing to
  answer. In a replayed session it is what two assistant messages in a row give. A history, as stored or
  shown, may well end with an answer, so this is not checked without `request`.
It is one O(n) pass over messages and blocks that builds only id tables (about 1 ms for 2,000 messages
with 800 calls; `benchmarks/pairing.py`). An empty conversation is not reported: the caller adds the
user's turn. Not checked: ids longer than a provider allows, images in assistant or system messages,
and Anthropic's rules that depend on request options (thinking enabled).

`repair(messages, provider)` returns the input list's contents unchanged (same objects, no changes)
when `validate` finds nothing. Otherwise it applies, in order, recording every change as a
`RepairChange(kind, call_id, index, detail)` whose `index` is the position in the input list (messages
it does not change stay the same objects):
1. `split_misplaced`: tool results in a non-tool message move to a tool message just before the rest of
   it; text and images in a tool message move to a user message just after it;
   `drop_misplaced_block`: tool calls and thinking outside assistant messages are dropped.
2. `drop_empty_text` / `drop_empty_block`: empty text blocks, empty text parts of tool results and empty
   images are dropped; `drop_empty_message`: a message left with nothing the writer sends is dropped.
3. Anthropic: `system_to_user`: a system message after the conversation started becomes a user message
   with the same blocks (its text is kept, not moved into the system prompt).
4. `rename_call_id`: the first call with an id keeps it; each later call reusing it becomes `<id>_dup2`,
   `<id>_dup3`, ... (skipping ids already in use). An empty id becomes `call`; for Anthropic an invalid
   id has every character outside `[a-zA-Z0-9_-]` replaced by `_`; both are suffixed the same way on a
   clash. Results are renamed with their call.
5. Results are matched to calls by their original id: a result answers the first unanswered call of that
   id in the turn whose zone it sits in, else the earliest unanswered call of that id before it.
   `drop_orphan_result`: no unanswered call of its id before it and none ever seen;
   `drop_duplicate_result`: every call of its id before it is answered (the first result is kept);
   `move_result`: a result outside its call's zone moves into it; `synthetic_result`: an unanswered
   call gets `ToolResult(call_id, SYNTHETIC_RESULT_TEXT, is_error=True, name=<the call's tool>)`. Moved
   and synthetic results go, in call order, into one new tool message at the end of the call's zone
   (directly after the assistant turn when it has no zone yet). Results already in place are not
   touched, and a tool message left empty is dropped (`drop_empty_message`).
6. Responses: `drop_dangling_reasoning` drops reasoning that is not followed by an assistant message or
   call (and then an assistant message left empty).
7. Anthropic: `insert_user`: when the first non-system message is an assistant message, a user message
   with the text `LEADING_USER_TEXT` is inserted before it.
8. With `request=True`, `append_user`: when the conversation ends with an assistant message without
   calls, a user message with the text `TRAILING_USER_TEXT` is appended (the assistant's text is kept).
No user or assistant text is ever dropped: only empty text, thinking, misplaced calls, and orphan or
duplicate results are. The result validates for the same provider, so repairing twice changes nothing.

(Long on purpose: one validator and one repair for three providers' rules, kept together so the
repair fixes exactly what the validator reports.)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, cast, get_args

from ctxwin.errors import ArgumentError
from ctxwin.messages.model import Block, Image, Message, Text, Thinking, ToolCall, ToolResult, stable_id
from ctxwin.messages.providers._common import OPENAI_RESPONSES, thinking_written

Provider = Literal["anthropic", "openai_chat", "openai_responses"]
PROVIDERS: tuple[Provider, ...] = get_args(Provider)

SYNTHETIC_RESULT_TEXT = (
    "[ctxwin] The result of this tool call is missing from the conversation history (it was lost or cut "
    "away); this error result was inserted in its place. Run the tool again if you still need its output."
)  # the text of the error result repair gives an unanswered call
# opens (for Anthropic) a history whose first message is an assistant message
LEADING_USER_TEXT = "[ctxwin] The earlier part of this conversation is omitted."
# closes a history that ends with an assistant message, so the model answers instead of continuing it
TRAILING_USER_TEXT = "[ctxwin] Continue."
DUPLICATE_SUFFIX = "_dup"  # a reused call id becomes <id>_dup2, <id>_dup3, ...

_ANTHROPIC_ID = re.compile(r"[a-zA-Z0-9_-]+")
_ANTHROPIC_ID_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True)
class Problem:
    kind: str
    index: int  # position of the message in the list given to validate
    call_id: str | None
    detail: str


@dataclass(frozen=True)
class RepairChange:
    kind: str
    call_id: str | None
    index: int  # position in the list given to repair of the message concerned (for an insertion: the anchor)
    detail: str


@dataclass(frozen=True)
class RepairResult:
    messages: list[Message]
    changes: list[RepairChange] = field(default_factory=list)


def _check(provider: str) -> None:
    if provider not in PROVIDERS:
        raise ArgumentError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")


def _empty_text(text: str) -> bool:
    return not text or text.isspace()


def _empty_image(image: Image) -> bool:
    return not image.data and not image.url


def _invalid_id(call_id: str, anthropic: bool) -> bool:
    return not call_id or (anthropic and _ANTHROPIC_ID.fullmatch(call_id) is None)


# -- validate ---------------------------------------------------------------------------------------


def validate(messages: Sequence[Message], provider: Provider = "anthropic", *, request: bool = False) -> list[Problem]:
    """The problems the provider would reject; [] means valid. `request`: the messages are a request for
    the next answer (then one ending with an answer is a problem too)."""
    _check(provider)
    problems: list[Problem] = []
    add = problems.append
    anthropic = provider == "anthropic"
    zoned = provider != OPENAI_RESPONSES
    call_turn: dict[str, int] = {}  # call id -> its turn (the latest call, when ids repeat)
    call_index: dict[str, int] = {}
    answered: set[str] = set()
    started = False  # a non-system message was seen
    turn = -1
    zone = -1  # the turn whose answer zone we are in, or -1
    previous = ""
    for index, message in enumerate(messages):
        role = message.role
        written = 0
        if role == "tool":
            started = True
            if previous == "assistant":
                zone = turn
            elif previous != "tool":
                zone = -1
            for block in message.blocks:
                if type(block) is not ToolResult:
                    add(Problem("misplaced_block", index, None, f"a {block.type} block in a tool message"))
                    continue
                written += 1
                for part in block.content:
                    if type(part) is Text:
                        if _empty_text(part.text):
                            add(Problem("empty_text", index, block.call_id, "an empty text part in a tool result"))
                    elif _empty_image(part):
                        add(Problem("empty_block", index, block.call_id, "an image without data or URL"))
                call_id = block.call_id
                owner = call_turn.get(call_id)
                if owner is None:
                    add(Problem("orphan_result", index, call_id, "a result with no call of this id before it"))
                elif call_id in answered:
                    add(Problem("duplicate_result", index, call_id, "a second result for this call"))
                else:
                    answered.add(call_id)
                    if zoned and owner != zone:
                        add(Problem("result_out_of_place", index, call_id,
                                    "the result is not in the tool messages right after its call"))
        else:
            zone = -1
            if role == "assistant" and (previous != "assistant" or not anthropic):
                turn = index
            if role == "system":
                if anthropic and started:
                    add(Problem("system_not_at_start", index, None, "Anthropic takes system text only up front"))
            else:
                if anthropic and not started and role == "assistant":
                    add(Problem("first_not_user", index, None, "the first message must be a user message"))
                started = True
            for block in message.blocks:
                if type(block) is Text:
                    if _empty_text(block.text):
                        add(Problem("empty_text", index, None, "an empty text block"))
                    else:
                        written += 1
                elif type(block) is Image:
                    if _empty_image(block):
                        add(Problem("empty_block", index, None, "an image without data or URL"))
                    else:
                        written += 1
                elif type(block) is ToolCall and role == "assistant":
                    written += 1
                    call_id = block.id
                    if call_id in call_turn:
                        add(Problem("duplicate_call_id", index, call_id, "an earlier call has the same id"))
                        answered.discard(call_id)  # results after this call answer it, as in repair
                    elif _invalid_id(call_id, anthropic):
                        add(Problem("invalid_call_id", index, call_id, "the provider rejects this call id"))
                    call_turn[call_id] = turn
                    call_index[call_id] = index
                elif type(block) is Thinking and role == "assistant":
                    if thinking_written(block, provider):
                        written += 1
                else:
                    add(Problem("misplaced_block", index, None, f"a {block.type} block in a {role} message"))
        if not written:
            add(Problem("empty_message", index, None, f"a {role} message with nothing the provider takes"))
        previous = role
    if len(answered) != len(call_turn):
        for call_id, index in call_index.items():
            if call_id not in answered:
                add(Problem("missing_result", index, call_id, "a tool call with no result"))
    if provider == OPENAI_RESPONSES:
        for index, _ in _dangling_reasoning(messages):
            add(Problem("dangling_reasoning", index, None, "a reasoning item not followed by its output item"))
    if request and messages and _ends_with_answer(messages[-1]):
        add(Problem("ends_with_assistant", len(messages) - 1, None,
                    "the request ends with an assistant message, so the model would continue it, not answer"))
    return problems


def _ends_with_answer(message: Message) -> bool:
    """An assistant message that closes the conversation (one with calls waits for their results)."""
    return message.role == "assistant" and not any(type(b) is ToolCall for b in message.blocks)


def _dangling_reasoning(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """(message index, block index) of each Responses reasoning block whose next non-reasoning item in
    the written item list is not an assistant message or call."""
    out: list[tuple[int, int]] = []
    followed = False  # the next non-reasoning item is an assistant output item
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant":
            if not message.blocks:
                followed = True  # written as an (empty) assistant message item
            for position in range(len(message.blocks) - 1, -1, -1):
                block = message.blocks[position]
                if type(block) is Thinking:
                    if thinking_written(block, OPENAI_RESPONSES) and not followed:
                        out.append((index, position))
                else:
                    followed = True
        elif message.role != "tool" or message.blocks:
            followed = False
    out.reverse()
    return out


# -- repair -----------------------------------------------------------------------------------------


def repair(messages: Sequence[Message], provider: Provider = "anthropic", *, request: bool = False) -> RepairResult:
    """The messages with pairing and role problems fixed, and what was changed (see the module doc)."""
    if not validate(messages, provider, request=request):
        return RepairResult(list(messages), [])
    changes: list[RepairChange] = []
    note = changes.append
    staged = _clean(messages, provider, note)
    staged = _pair(staged, provider, note)
    if provider == OPENAI_RESPONSES:
        staged = _drop_dangling_reasoning(staged, note)
    if provider == "anthropic":
        staged = _lead_with_user(staged, note)
    if request:
        staged = _close_with_user(staged, note)
    return RepairResult([message for _, message in staged], changes)


Note = Callable[[RepairChange], None]
Staged = list[tuple[int, Message]]  # (index in the input, message)


def _writes(message: Message, provider: Provider) -> bool:
    """Whether the writer sends anything for this (already cleaned) message."""
    role = message.role
    for block in message.blocks:
        if type(block) is Thinking:
            if role == "assistant" and thinking_written(block, provider):
                return True
        elif type(block) is ToolCall:
            if role == "assistant":
                return True
        elif type(block) is ToolResult:
            if role == "tool":
                return True
        elif role != "tool":
            return True
    return False


def _clean(messages: Sequence[Message], provider: Provider, note: Note) -> Staged:
    """Steps 1-3: misplaced blocks, empty blocks and messages, and (Anthropic) late system messages."""
    out: Staged = []
    started = False
    for index, message in enumerate(messages):
        dirty = _needs_cleaning(message, provider)
        pieces = [message]
        if dirty:
            pieces = [_drop_empty_blocks(index, p, note) for p in _split_misplaced(index, message, note)]
        for piece in pieces:
            if dirty and not _writes(piece, provider):
                note(RepairChange("drop_empty_message", None, index, f"a {piece.role} message with nothing to send"))
                continue
            if piece.role == "system":
                if provider == "anthropic" and started:
                    piece = piece.replace(role="user")
                    note(RepairChange("system_to_user", None, index,
                                      "a system message after the start became a user message"))
            else:
                started = True
            out.append((index, piece))
    return out


def _needs_cleaning(message: Message, provider: Provider) -> bool:
    """Whether steps 1-2 have anything to do for this message (one pass; most messages need nothing)."""
    role = message.role
    written = False
    for block in message.blocks:
        if type(block) is ToolResult:
            if role != "tool" or any(_empty_part(p) for p in block.content):
                return True
            written = True
        elif role == "tool":
            return True
        elif type(block) is Text:
            text = block.text
            if not text or text.isspace():
                return True
            written = True
        elif type(block) is Image:
            if _empty_image(block):
                return True
            written = True
        elif role != "assistant":
            return True  # a call or thinking outside an assistant message
        elif type(block) is ToolCall or thinking_written(block, provider):
            written = True
    return not written


def _split_misplaced(index: int, message: Message, note: Note) -> list[Message]:
    role = message.role
    blocks = message.blocks
    if role == "tool":
        if all(type(b) is ToolResult for b in blocks):
            return [message]
        results = tuple(b for b in blocks if type(b) is ToolResult)
        rest: list[Block] = []
        for block in blocks:
            if type(block) in (Text, Image):
                rest.append(block)
            elif type(block) is not ToolResult:
                note(RepairChange("drop_misplaced_block", None, index, f"a {block.type} block in a tool message"))
        out = [message.replace(blocks=results)]
        if rest:
            note(RepairChange("split_misplaced", None, index, "text in a tool message moved to a user message"))
            out.append(Message("user", tuple(rest), id=f"{message.id}-text" if message.id else ""))
        return out
    bad = False
    for block in blocks:
        kind = type(block)
        if kind is ToolResult or (role != "assistant" and kind in (ToolCall, Thinking)):
            bad = True
            break
    if not bad:
        return [message]
    moved: list[ToolResult] = []
    kept: list[Block] = []
    for block in blocks:
        if type(block) is ToolResult:
            moved.append(block)
        elif role != "assistant" and type(block) in (ToolCall, Thinking):
            note(RepairChange("drop_misplaced_block", getattr(block, "id", None), index,
                              f"a {block.type} block in a {role} message"))
        else:
            kept.append(block)
    out = []
    if moved:
        note(RepairChange("split_misplaced", None, index, f"tool results in a {role} message moved to a tool message"))
        out.append(Message("tool", tuple(moved), id=f"{message.id}-results" if message.id else ""))
    if kept:
        out.append(message.replace(blocks=tuple(kept)))
    return out


def _drop_empty_blocks(index: int, message: Message, note: Note) -> Message:
    for block in message.blocks:
        if (type(block) is Text and _empty_text(block.text)) or (type(block) is Image and _empty_image(block)):
            break
        if type(block) is ToolResult and any(_empty_part(p) for p in block.content):
            break
    else:
        return message
    blocks: list[Block] = []
    for block in message.blocks:
        if type(block) is Text and _empty_text(block.text):
            note(RepairChange("drop_empty_text", None, index, "an empty text block"))
        elif type(block) is Image and _empty_image(block):
            note(RepairChange("drop_empty_block", None, index, "an image without data or URL"))
        elif type(block) is ToolResult and any(_empty_part(p) for p in block.content):
            parts = tuple(p for p in block.content if not _empty_part(p))
            note(RepairChange("drop_empty_text", block.call_id, index,
                              f"{len(block.content) - len(parts)} empty part(s) of a tool result"))
            blocks.append(ToolResult(block.call_id, parts, block.is_error, block.name, block.extra))
        else:
            blocks.append(block)
    return message.replace(blocks=tuple(blocks))


def _empty_part(part: Text | Image) -> bool:
    return _empty_text(part.text) if type(part) is Text else _empty_image(part)


@dataclass(slots=True)
class _Call:
    original: str
    id: str
    name: str
    turn: int
    index: int
    answered: bool = False
    moved: ToolResult | None = None


def _pair(staged: Staged, provider: Provider, note: Note) -> Staged:
    """Steps 4-5: call ids, then every result in its call's zone exactly once."""
    anthropic = provider == "anthropic"
    zoned = provider != OPENAI_RESPONSES
    taken: set[str] = set()  # every call id in the history, filled when a rename first needs it
    used: set[str] = set()
    pending: dict[str, list[_Call]] = {}  # original id -> unanswered calls, in order
    seen: set[str] = set()  # original ids of the calls so far
    calls_of: dict[int, list[_Call]] = {}  # turn -> its calls
    zone_end: dict[int, int] = {}  # turn -> staged position of its last message or last zone message
    replaced: dict[int, Message | None] = {}  # staged position -> new message (None: dropped)
    turn = zone = -1
    previous = ""
    for position, (index, message) in enumerate(staged):
        role = message.role
        if role == "assistant":
            if previous != "assistant" or not anthropic:
                turn = position
            zone = -1
            zone_end[turn] = position
            blocks: list[Block] | None = None  # a copy, made when a call is renamed
            for k, block in enumerate(message.blocks):
                if type(block) is not ToolCall:
                    continue
                call_id = block.id
                if call_id in used or _invalid_id(call_id, anthropic):
                    if not taken:
                        taken.update(b.id for _, m in staged if m.role == "assistant"
                                     for b in m.blocks if type(b) is ToolCall)
                    new_id = _new_id(call_id, anthropic, used, taken)
                else:
                    used.add(call_id)
                    new_id = call_id
                call = _Call(call_id, new_id, block.name, turn, index)
                pending.setdefault(call_id, []).append(call)
                seen.add(call_id)
                calls_of.setdefault(turn, []).append(call)
                if new_id != call_id:
                    if blocks is None:
                        blocks = list(message.blocks)
                    blocks[k] = ToolCall(new_id, call.name, block.arguments, block.extra)
                    note(RepairChange("rename_call_id", call_id, index, f"renamed to {new_id!r}"))
            if blocks is not None:
                replaced[position] = message.replace(blocks=tuple(blocks))
        elif role == "tool":
            if previous == "assistant":
                zone = turn
            elif previous != "tool":
                zone = -1
            if zone != -1:
                zone_end[zone] = position
            kept: list[Block] = []
            changed = False
            for block in message.blocks:
                result = cast(ToolResult, block)  # _clean left nothing but results in a tool message
                owner = _match(pending.get(result.call_id), zone)
                if owner is None:
                    changed = True
                    if result.call_id in seen:
                        note(RepairChange("drop_duplicate_result", result.call_id, index,
                                          "the call already has a result"))
                    else:
                        note(RepairChange("drop_orphan_result", result.call_id, index, "no call of this id before it"))
                    continue
                owner.answered = True
                if owner.id != result.call_id:
                    result = ToolResult(owner.id, result.content, result.is_error, result.name, result.extra)
                if zoned and owner.turn != zone:
                    owner.moved = result
                    changed = True
                    note(RepairChange("move_result", owner.id, index, "moved to directly after its call"))
                    continue
                changed = changed or result is not block
                kept.append(result)
            if changed:
                replaced[position] = message.replace(blocks=tuple(kept)) if kept else None
                if not kept:
                    note(RepairChange("drop_empty_message", None, index, "a tool message left without results"))
        else:
            zone = -1
        previous = role

    inserted: dict[int, tuple[int, Message]] = {}  # staged position -> tool message to put after it
    for turn_id, calls in calls_of.items():
        results = []
        for call in calls:
            if call.moved is not None:
                results.append(call.moved)
            elif not call.answered:
                results.append(ToolResult(call.id, (Text(SYNTHETIC_RESULT_TEXT),), True, call.name))
                note(RepairChange("synthetic_result", call.id, call.index, "an unanswered call got an error result"))
        if results:
            message = Message("tool", tuple(results), id=stable_id("repair-", [r.call_id for r in results]))
            inserted[zone_end[turn_id]] = (calls[0].index, message)
    if not replaced and not inserted:
        return staged
    out: Staged = []
    for position, (index, message) in enumerate(staged):
        new = replaced.get(position, message)
        if new is not None:
            out.append((index, new))
        if position in inserted:
            out.append(inserted[position])
    return out


def _match(calls: list[_Call] | None, zone: int) -> _Call | None:
    """Takes the call a result answers: the first unanswered one of the zone's turn, else the earliest."""
    if not calls:
        return None
    first = len(calls)
    while first > 0 and calls[first - 1].turn == zone:
        first -= 1
    return calls.pop(first if first < len(calls) else 0)


def _new_id(call_id: str, anthropic: bool, used: set[str], taken: set[str]) -> str:
    if _invalid_id(call_id, anthropic):
        base = _ANTHROPIC_ID_INVALID.sub("_", call_id) or "call"
    else:
        base = call_id
    candidate = base
    n = 1
    while candidate in used or (candidate != call_id and candidate in taken):
        n += 1
        candidate = f"{base}{DUPLICATE_SUFFIX}{n}"
    used.add(candidate)
    return candidate


def _drop_dangling_reasoning(staged: Staged, note: Note) -> Staged:
    dangling = _dangling_reasoning([m for _, m in staged])
    if not dangling:
        return staged
    drop: dict[int, set[int]] = {}
    for position, block in dangling:
        drop.setdefault(position, set()).add(block)
    out: Staged = []
    for position, (index, message) in enumerate(staged):
        if position in drop:
            note(RepairChange("drop_dangling_reasoning", None, index,
                              f"{len(drop[position])} reasoning item(s) with no output item after them"))
            message = message.replace(blocks=tuple(b for k, b in enumerate(message.blocks) if k not in drop[position]))
            if not _writes(message, OPENAI_RESPONSES):
                note(RepairChange("drop_empty_message", None, index, "an assistant message left with nothing to send"))
                continue
        out.append((index, message))
    return out


def _close_with_user(staged: Staged, note: Note) -> Staged:
    if not staged or not _ends_with_answer(staged[-1][1]):
        return staged
    index = staged[-1][0]
    note(RepairChange("append_user", None, index, "a user message now follows the final assistant message"))
    return [*staged, (index, Message("user", (Text(TRAILING_USER_TEXT),), id="repair-trailing-user"))]


def _lead_with_user(staged: Staged, note: Note) -> Staged:
    for position, (index, message) in enumerate(staged):
        if message.role == "system":
            continue
        if message.role == "assistant":
            note(RepairChange("insert_user", None, index, "a user message now opens the conversation"))
            opener = Message("user", (Text(LEADING_USER_TEXT),), id="repair-leading-user")
            return [*staged[:position], (index, opener), *staged[position:]]
        break
    return staged
