"""`engine.sync(history)`: callers that resend their whole history append only what is new; a history
that stops extending the stored one continues on a branch, and nothing stored is lost."""

from __future__ import annotations

import json

from ctxwin import ContextEngine, Session
from ctxwin.messages import Message, Text


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


def test_resending_the_whole_history_appends_only_what_is_new() -> None:
    engine = ContextEngine(model="gpt-4o")
    history = [user("fix the build"), assistant("on it")]
    first = engine.sync(history)
    assert len(first) == 2
    history += [user("also the tests")]
    assert len(engine.sync(history)) == 1
    assert engine.sync(history) == []  # the same history again: nothing new
    assert [m.text for m in engine.messages] == ["fix the build", "on it", "also the tests"]


def test_ids_and_provider_formatting_do_not_count_as_new() -> None:
    engine = ContextEngine(model="gpt-4o")
    engine.sync([Message("user", (Text("hello"),), id="u1")])
    assert engine.sync([{"role": "user", "content": [{"type": "text", "text": "hello"}]}]) == []


def test_a_rewritten_history_continues_on_a_branch_and_loses_nothing(tmp_path) -> None:
    session = Session.open(tmp_path / "s")
    engine = ContextEngine(session, model="gpt-4o")
    engine.sync([user("a"), assistant("b"), user("c"), assistant("d")])
    # The caller compacted its own history: the first two messages are still shared.
    new = engine.sync([user("a"), assistant("b"), user("summary of c and d"), assistant("e")])
    assert len(new) == 2
    assert [m.text for m in engine.messages] == ["a", "b", "summary of c and d", "e"]
    texts = [Message.from_dict(e.payload).text for e in session if e.kind == "message"]
    assert texts == ["a", "b", "c", "d", "summary of c and d", "e"]  # the old branch is still in the log
    assert json.dumps(engine.prepare().to_anthropic())  # and the new branch is a valid request
    session.close()


def test_a_history_that_shares_nothing_starts_a_new_root() -> None:
    engine = ContextEngine(model="gpt-4o")
    engine.sync([user("first conversation")])
    engine.sync([user("something else entirely")])
    assert [m.text for m in engine.messages] == ["something else entirely"]
    assert len(engine.session.path()) == 1


def spilled_history() -> list[dict]:
    big = "line of a very long build log\n" * 4_000  # spilled by the ctxwin policy
    return [user("build it"),
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash",
                                               "input": {"command": "make"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": big}]},
            assistant("it built"), user("now test it")]


def fresh_bytes(history: list[dict], tmp_path) -> str:
    engine = ContextEngine(Session.open(tmp_path / "fresh"), model="gpt-4o")
    engine.sync(history)
    out = json.dumps(engine.prepare().to_anthropic(), sort_keys=True)
    engine.session.close()
    return out


def test_a_branch_keeps_what_was_decided_about_the_shared_history(tmp_path) -> None:
    """Decisions are logged after the messages they concern (a spill at the next request): a branch at
    the shared message alone would lose them, and the 100 KB output would come back into the view."""
    session = Session.open(tmp_path / "s")
    engine = ContextEngine(session, model="gpt-4o")
    history = spilled_history()
    engine.sync(history)
    before = engine.prepare()
    assert before.tokens < 3_000  # spilled
    rewritten = [*history[:-2], assistant("it built, with warnings"), user("now test it")]
    engine.sync(rewritten)
    after = engine.prepare()
    assert after.tokens < 3_000, after.tokens
    assert any(e.stage == "session" and e.action == "branched" for e in after.events)
    assert json.dumps(after.to_anthropic(), sort_keys=True) == fresh_bytes(rewritten, tmp_path)
    session.close()


def test_a_rewind_keeps_what_was_decided_about_the_kept_history(tmp_path) -> None:
    session = Session.open(tmp_path / "s")
    engine = ContextEngine(session, model="gpt-4o")
    engine.sync(spilled_history()[:3])
    engine.mark("x")
    spilled = engine.prepare()
    engine.append(assistant("it built"))
    rewound = engine.rewind("x")
    assert rewound.tokens == spilled.tokens
    assert any(e.action == "rewound" for e in rewound.events)
    session.close()


def test_a_checkpoint_request_ctxwin_wrote_does_not_fork_a_resent_history() -> None:
    """The checkpoint strategy logs its own request for a summary; the caller's history never has it."""
    from ctxwin.compaction.checkpoint import META
    from ctxwin.messages import Text
    from ctxwin.store.entries import MessageEntry

    engine = ContextEngine(model="gpt-4o", policy="checkpoint")
    history = [user("a"), assistant("b")]
    engine.sync(history)
    engine._pipeline.record(MessageEntry(Message("user", (Text("[ctxwin] write your checkpoint"),),
                                                 meta={"ctxwin": META})))
    assert engine.sync([*history, assistant("c")]) != []
    assert [m.text for m in engine.messages] == ["a", "b", "[ctxwin] write your checkpoint", "c"]
