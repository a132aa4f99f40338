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
