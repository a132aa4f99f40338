"""Each pipeline stage on its own: what it changes, what it reports, what it leaves alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin.messages import Message, Text, ToolCall, ToolResult, assistant, tool_result, user
from ctxwin.pipeline import bootstrap, budget, dedup, fit, mask, prune, spill
from ctxwin.pipeline.cut import has_important_tail, head_tail
from ctxwin.pipeline.view import Item, StageContext, total_tokens
from ctxwin.policies.model import (
    BootstrapPolicy,
    DedupPolicy,
    FitPolicy,
    MaskPolicy,
    PrunePolicy,
    ResultBudgetPolicy,
    SpillPolicy,
)
from ctxwin.store.blobs import FileBlobStore
from ctxwin.tokens import CachedCounter, counter_for


@pytest.fixture
def counter() -> CachedCounter:
    return CachedCounter(counter_for("gpt-4o"))


def ctx_for(counter, window=200_000, budget=None, calls=None, blobs=None, system_tokens=0, now=None, last=None):
    return StageContext(counter=counter, window=window, budget=budget if budget is not None else window,
                        system_tokens=system_tokens, calls=calls or {}, blobs=blobs, now=now, last_call_at=last)


def item(counter, entry_id: str, message: Message) -> Item:
    return Item(entry_id, message, counter.count_message(message))


def session(counter, outputs: list[str], name: str = "bash") -> tuple[list[Item], dict[str, ToolCall]]:
    """user, then one assistant call + result per output."""
    items = [item(counter, "u0", user("please check the build"))]
    calls = {}
    for n, text in enumerate(outputs):
        call = ToolCall(f"c{n}", name, {"command": f"step {n}"})
        calls[call.id] = call
        items.append(item(counter, f"a{n}", assistant(f"running step {n}", call)))
        items.append(item(counter, f"t{n}", tool_result(call.id, text, name=name)))
    return items, calls


# --------------------------------------------------------------------------------------------------
# cut


def test_head_tail_snaps_to_lines_and_never_exceeds_budget() -> None:
    text = "".join(f"line {i:04d}\n" for i in range(1000))
    cut = head_tail(text, 500, 300)
    assert cut.head.endswith("\n") and cut.tail.startswith("line")
    assert len(cut.head) + len(cut.tail) <= 800
    assert text.startswith(cut.head) and text.endswith(cut.tail)
    assert cut.omitted == len(text) - len(cut.head) - len(cut.tail)
    assert not head_tail("short", 10, 10).changed


def test_important_tail() -> None:
    assert has_important_tail("x" * 5000 + "\nTraceback (most recent call last):\nValueError: boom")
    assert has_important_tail('{"a": [1, 2, 3]}')
    assert has_important_tail("...\n12 passed, 0 failed in 3.2s")
    assert not has_important_tail("just some\nordinary lines\nof text")


# --------------------------------------------------------------------------------------------------
# result budget


def test_result_budget_caps_and_keeps_important_tail(counter) -> None:
    long = "compiling module\n" * 3000 + "error[E0308]: mismatched types at src/main.rs:42\n"
    items, calls = session(counter, [long, "ok"])
    policy = ResultBudgetPolicy(enabled=True, max_chars=16_000)
    result = budget.stage(items, policy, ctx_for(counter, calls=calls))
    capped = result.items[2].message.tool_results[0].text
    assert len(capped) <= 16_000
    assert "error[E0308]: mismatched types at src/main.rs:42" in capped
    assert "entry:t0#c0" in capped  # where the full output is
    assert result.items[4] is items[4]  # small results untouched
    assert [d.entry_id for d in result.decisions] == ["t0"]
    assert result.events[0].tokens_after < result.events[0].tokens_before


def test_result_budget_cap_follows_window(counter) -> None:
    policy = ResultBudgetPolicy(enabled=True, max_chars=16_000, window_share=0.3, min_chars=2_000)
    assert budget.result_cap(policy, 200_000) == 16_000
    assert budget.result_cap(policy, 8_000) == 9_600
    assert budget.result_cap(policy, 1_000) == 2_000


# --------------------------------------------------------------------------------------------------
# spill


def test_spill_keeps_preview_and_handle_that_returns_bytes(counter, tmp_path) -> None:
    blobs = FileBlobStore(tmp_path / "blobs")
    big = "".join(f"row {i}: value={i * 7}\n" for i in range(5000))
    items, calls = session(counter, [big, "small"])
    result = spill.stage(items, SpillPolicy(enabled=True, per_result_chars=20_000, preview_chars=2_000),
                         ctx_for(counter, calls=calls, blobs=blobs))
    text = result.items[2].message.tool_results[0].text
    handle = next(word for word in text.split() if word.startswith("blob:"))
    assert blobs.get(handle).decode() == big
    assert "row 0: value=0" in text and len(text) < 2_500
    assert result.items[4] is items[4]


def test_spill_per_turn_cap_spills_largest_first(counter, tmp_path) -> None:
    blobs = FileBlobStore(tmp_path / "blobs")
    calls = {f"c{i}": ToolCall(f"c{i}", "read", {"path": f"f{i}"}) for i in range(3)}
    turn = Message("tool", tuple(ToolResult(f"c{i}", (Text(str(i) * size),), name="read")
                                 for i, size in enumerate((15_000, 9_000, 14_000))))
    items = [item(counter, "u", user("read them")),
             item(counter, "a", Message("assistant", tuple(calls.values()))),
             item(counter, "t", turn)]
    result = spill.stage(items, SpillPolicy(enabled=True, per_result_chars=20_000, per_message_chars=20_000),
                         ctx_for(counter, calls=calls, blobs=blobs))
    texts = [r.text for r in result.items[2].message.tool_results]
    assert texts[0].startswith("[Output too large") and texts[2].startswith("[Output too large")
    assert texts[1] == "1" * 9_000


# --------------------------------------------------------------------------------------------------
# dedup


def test_dedup_stubs_identical_rerun_only(counter) -> None:
    content = "def main():\n    return 42\n" * 40
    items, calls = session(counter, [content, content, content + "# changed\n"], name="read")
    for n in range(3):
        calls[f"c{n}"] = ToolCall(f"c{n}", "read", {"path": "app.py"})
    state = dedup.DedupState()
    originals = {i.entry_id: i.message for i in items}
    result = dedup.stage(items, DedupPolicy(enabled=True), ctx_for(counter, calls=calls), state, originals, {})
    first, second, third = (result.items[i].message.tool_results[0].text for i in (2, 4, 6))
    assert first == content
    assert second.startswith("[Unchanged:") and "entry:t0#c0" in second
    assert third == content + "# changed\n"


# --------------------------------------------------------------------------------------------------
# mask


def test_mask_waits_for_batch_then_masks_all_due(counter) -> None:
    items, calls = session(counter, [f"output {n}\n" * 50 for n in range(12)])
    policy = MaskPolicy(enabled=True, keep_last=4, batch=8, min_tokens=0)
    ctx = ctx_for(counter, calls=calls)
    assert not mask.stage(items[:-4], policy, ctx).decisions  # 10 results: 6 due, batch not reached
    result = mask.stage(items, policy, ctx)
    masked = [d.entry_id for d in result.decisions]
    assert masked == [f"t{n}" for n in range(8)]
    assert result.events[0].breaks_prefix
    placeholder = result.items[2].message.tool_results[0].text
    assert 'recall("entry:t0#c0")' in placeholder
    assert all(result.items[i] is items[i] for i in range(len(items) - 8, len(items)))


def test_mask_keeps_error_line(counter) -> None:
    items, calls = session(counter, ["step\n" * 100 + "FAILED tests/test_x.py::test_y - AssertionError\n", "x", "y"])
    items[2] = Item("t0", tool_result("c0", items[2].message.tool_results[0].text, name="bash", is_error=True),
                    items[2].tokens)
    policy = MaskPolicy(enabled=True, keep_last=1, batch=1, min_tokens=0)
    result = mask.stage(items, policy, ctx_for(counter, calls=calls))
    assert "FAILED tests/test_x.py::test_y - AssertionError" in result.items[2].message.tool_results[0].text


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["small", "big", "masked", "long_input", "text", "pinned"]),
                                st.booleans()), min_size=1, max_size=60),
       keep_last=st.integers(0, 5), call_inputs=st.sampled_from([0, 50]))
def test_a_mask_scan_memo_finds_what_a_fresh_scan_finds(steps, keep_last: int, call_inputs: int) -> None:
    """Carried while the view only grows (and started again when it does not), the memo gives the
    candidates a scan from scratch gives, call after call."""
    counter = CachedCounter(counter_for("gpt-4o"))
    policy = MaskPolicy(enabled=True, keep_last=keep_last, batch=1, min_tokens=30, call_inputs_chars=call_inputs)
    items = [item(counter, "u0", user("start"))]
    pins = frozenset({"pinned-result"})
    scan = mask.MaskScan()
    for n, (kind, rebuild) in enumerate(steps):
        if kind == "text":
            items.append(item(counter, f"a{n}", assistant("thinking about it")))
        else:
            argument = "x" * 80 if kind == "long_input" else "ls"
            call = ToolCall(f"c{n}", "bash", {"command": argument})
            items.append(item(counter, f"a{n}", Message("assistant", (call,))))
            body = "output line\n" * (60 if kind != "small" else 2)
            result = Item("pinned-result" if kind == "pinned" else f"t{n}", tool_result(f"c{n}", body, name="bash"),
                          counter.count_message(tool_result(f"c{n}", body, name="bash")),
                          rendered_by="mask" if kind == "masked" else "")
            items.append(result)
        if rebuild:  # the view changed before its end (a decision, a compaction): the memo starts again
            scan = mask.MaskScan()
        assert mask.candidates(items, policy, pins, scan) == mask.candidates(items, policy, pins)


def test_mask_trigger_ratio(counter) -> None:
    items, calls = session(counter, ["x " * 100] * 5)
    policy = MaskPolicy(enabled=True, keep_last=1, batch=1, trigger_ratio=0.5, min_tokens=0)
    assert not mask.stage(items, policy, ctx_for(counter, budget=10 * total_tokens(items), calls=calls)).decisions
    assert mask.stage(items, policy, ctx_for(counter, budget=total_tokens(items), calls=calls)).decisions


# --------------------------------------------------------------------------------------------------
# prune


def test_prune_soft_trims_old_results_protecting_recent(counter) -> None:
    items, calls = session(counter, ["A" * 30_000 + "\n"] * 8)
    policy = PrunePolicy(enabled=True, mode="always", keep_last_assistants=3)
    result = prune.stage(items, policy, ctx_for(counter, window=60_000, calls=calls))
    texts = [i.message.tool_results[0].text for i in result.items if i.message.role == "tool"]
    assert texts[-3:] == ["A" * 30_000 + "\n"] * 3  # after the 3rd-last assistant: protected
    assert all("[Tool result trimmed: kept first" in t and len(t) < 3_500 for t in texts[:-3])
    assert [e.action for e in result.events] == ["soft_trim"]  # back under the hard-clear ratio


def test_prune_hard_clears_oldest_first_until_under_ratio(counter) -> None:
    items, calls = session(counter, ["B" * 3_500] * 40)
    policy = PrunePolicy(enabled=True, mode="always", keep_last_assistants=3)
    result = prune.stage(items, policy, ctx_for(counter, window=50_000, calls=calls))
    texts = [i.message.tool_results[0].text for i in result.items if i.message.role == "tool"]
    cleared = [t.startswith("[Old tool result content cleared]") for t in texts]
    assert cleared[0] and not cleared[-1]
    assert cleared == sorted(cleared, reverse=True)  # oldest first, a prefix of the results
    chars = sum(len(t) for t in texts)
    assert chars < 0.5 * 50_000 * 4 + 3_600
    assert {e.action for e in result.events} == {"hard_clear"} and all(e.breaks_prefix for e in result.events)


def test_prune_cache_ttl_waits_for_expiry(counter) -> None:
    items, calls = session(counter, ["A" * 30_000] * 8)
    policy = PrunePolicy(enabled=True, mode="cache-ttl", ttl_seconds=300)
    warm = ctx_for(counter, window=60_000, calls=calls, now=1000.0, last=900.0)
    cold = ctx_for(counter, window=60_000, calls=calls, now=1000.0, last=600.0)
    assert not prune.stage(items, policy, warm).decisions
    assert prune.stage(items, policy, cold).decisions


# --------------------------------------------------------------------------------------------------
# fit


def test_fit_drops_oldest_rounds_and_marks_it(counter) -> None:
    items, calls = session(counter, ["line\n" * 400] * 10)
    limit = total_tokens(items) // 3
    result = fit.stage(items, FitPolicy(), ctx_for(counter, budget=limit, calls=calls))
    assert total_tokens(result.items) <= limit
    assert result.items[0].entry_id == fit.MARKER_ID and result.items[0].message.role == "user"
    assert result.items[-1] is items[-1]
    dropped = {d.entry_id for d in result.decisions if d.message is None}
    assert "u0" in dropped and result.events[0].action == "drop_rounds"


def test_fit_truncates_a_single_huge_message(counter) -> None:
    huge = user("word " * 50_000)
    items = [item(counter, "u", huge)]
    result = fit.stage(items, FitPolicy(), ctx_for(counter, budget=5_000))
    assert total_tokens(result.items) <= 5_000
    assert "entry:u" in result.items[0].message.text
    assert result.events[-1].action == "middle_truncate"


def test_fit_raises_when_system_prompt_alone_is_too_big(counter) -> None:
    items = [item(counter, "u", user("hi"))]
    with pytest.raises(fit.ContextBudgetError, match="system prompt"):
        fit.stage(items, FitPolicy(), ctx_for(counter, budget=1_000, system_tokens=2_000))


# --------------------------------------------------------------------------------------------------
# bootstrap


def test_bootstrap_caps_per_file_and_total() -> None:
    files = [("AGENTS.md", "# Rules\n" + "rule\n" * 10_000 + "## Red Lines\nnever push to main\n"),
             ("SOUL.md", "be kind\n"), ("MEMORY.md", "m" * 100_000)]
    result = bootstrap.render(files, BootstrapPolicy(enabled=True, per_file_max_chars=2_000, total_max_chars=3_000))
    assert "[...truncated, read AGENTS.md for full content...]" in result.text
    assert "never push to main" in result.text  # the tail of AGENTS.md survives
    assert "be kind" in result.text
    assert result.files[0].truncated and not result.files[1].truncated
    assert result.files[2].injected_chars <= 3_000 - result.files[0].injected_chars - result.files[1].injected_chars
    assert bootstrap.TRUNCATION_NOTICE in result.text
