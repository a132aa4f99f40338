"""Sessions from traffic: which conversation a request belongs to, sub-agents apart, branches when a
history stops extending the stored one, the incremental conversion that must equal converting the
whole history, and the store's per-session lease."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin.messages.pairing import repair, validate
from ctxwin.messages.providers import to_anthropic, to_openai_chat, to_openai_responses
from ctxwin.proxy.apis import APIS, Conversion, Rendered, anthropic_turns, openai_items, strip_cache_control
from ctxwin.proxy.body import Body
from ctxwin.proxy.sessions import EngineSpec, MemorySessionStore, agent_session, safe_id, session_key
from ctxwin.testing import FakeProvider
from proxy_server import proxy_for

MODEL = "claude-sonnet-4-5"


def key(headers: dict[str, str] | None = None, body: dict[str, Any] | None = None, system: str = "sys",
        first: str = "hello") -> Any:
    return session_key(headers or {}, body or {}, system, first)


def test_the_first_matching_source_wins() -> None:
    everything = {"x-ctxwin-session": "mine", "x-claude-code-session-id": "cc", "session-id": "codex",
                  "session_id": "pi"}
    body = {"metadata": {"user_id": "user_abc_account_x_session_1234-abcd"}, "session_id": "pi-body",
            "prompt_cache_key": "pck"}
    assert agent_session(everything, body) == ("ctxwin", "mine")
    without_ours = {k: v for k, v in everything.items() if k != "x-ctxwin-session"}
    assert agent_session(without_ours, body) == ("claude-code", "cc")
    assert agent_session({"session-id": "codex"}, body) == ("claude-code", "1234-abcd")  # metadata.user_id
    assert agent_session({"session-id": "codex"}, {"session_id": "pi"}) == ("codex", "codex")
    assert agent_session({}, {"session_id": "pi", "prompt_cache_key": "pck"}) == ("pi", "pi")
    assert agent_session({"session_id": "pi-header"}, {}) == ("pi", "pi-header")
    assert agent_session({}, {"prompt_cache_key": "pck"}) == ("prompt-cache-key", "pck")
    assert agent_session({}, {"metadata": {"user_id": "no session here"}}) is None


def test_a_session_is_the_agents_id_and_the_conversation() -> None:
    main = key({"x-claude-code-session-id": "abc"})
    assert main.source == "claude-code" and main.agent_id == "abc" and main.id.startswith("abc-")
    assert key({"x-claude-code-session-id": "abc"}) == main  # stable
    sub_agent = key({"x-claude-code-session-id": "abc"}, system="You are a search agent.", first="Find X")
    side = key({"x-claude-code-session-id": "abc"}, first="Write a title for this conversation")
    assert len({main.id, sub_agent.id, side.id}) == 3 and all(k.id.startswith("abc-") for k in (sub_agent, side))
    anonymous = key()
    assert anonymous.source == "conversation" and anonymous.id.startswith("c-") and anonymous.agent_id is None


def test_ids_are_safe_folder_names_and_never_collide() -> None:
    assert safe_id("0b9c-11ef") == "0b9c-11ef"
    odd = [safe_id(v) for v in ("../../etc", "a/b", "a_b", "a b", ".hidden", "x" * 500)]
    assert all("/" not in v and not v.startswith(".") and len(v) < 100 for v in odd)
    assert len(set(odd)) == len(odd) and safe_id("a/b") != safe_id("a_b")


def anthropic_body(texts: list[str], system: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 50, "messages": [
        {"role": "user" if n % 2 == 0 else "assistant", "content": t} for n, t in enumerate(texts)]}
    if system:
        body["system"] = system
    return body


def post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/messages", json=body, headers={"x-api-key": "k", "anthropic-version": "2023-06-01",
                                                                 **headers}, timeout=30)


def test_sub_agents_sharing_the_header_are_separate_sessions() -> None:
    header = {"x-claude-code-session-id": "0b9c-11ef"}
    with FakeProvider() as fake, proxy_for(fake) as served:
        assert post(served.url, anthropic_body(["fix the bug"], "main prompt"), **header).status_code == 200
        assert post(served.url, anthropic_body(["find the file"], "explore prompt"), **header).status_code == 200
        assert post(served.url, anthropic_body(["find the file", "found", "read it"], "explore prompt"),
                    **header).status_code == 200
        engines = served.engines()
    assert len(engines) == 2 and all(k.startswith("0b9c-11ef-") for k in engines)
    assert sorted(len(e.messages) for e in engines.values()) == [1, 3]


def test_a_history_that_stops_extending_the_stored_one_is_a_branch() -> None:
    with FakeProvider() as fake, proxy_for(fake) as served:
        assert post(served.url, anthropic_body(["plan", "step one", "go on", "step two", "more"])).status_code == 200
        # The agent rewound to its first answer and edited it: same conversation, a new branch.
        assert post(served.url, anthropic_body(["plan", "a different step one", "go on"])).status_code == 200
        [engine] = served.engines().values()
        texts = [m.text for m in engine.messages]
        everything = [e.payload for e in engine.session if e.kind == "message"]
    assert texts == ["plan", "a different step one", "go on"]
    stored = json.dumps(everything)
    assert "step two" in stored and "a different step one" in stored  # nothing stored is lost
    forwarded = fake.requests_to("/v1/messages")[-1].body["messages"]
    assert [m["content"] for m in forwarded] == ["plan", "a different step one", "go on"]


def test_two_conversations_that_share_a_session_each_go_on_on_their_own_branch() -> None:
    """The same task run twice without a session header: one session, whose two branches each
    continue where they were, so no request logs a message twice (before: every alternation branched
    again and re-logged the diverging tail, the log growing with the square of the turns)."""
    with FakeProvider() as fake, proxy_for(fake) as served:
        histories: dict[str, list[str]] = {"a": ["the same task"], "b": ["the same task"]}
        for turn in range(6):
            for name, texts in histories.items():
                response = post(served.url, anthropic_body(texts))
                assert response.status_code == 200
                texts += [response.json()["content"][0]["text"], f"{name} turn {turn}"]
            if turn == 0:
                histories["b"][-1] = "b goes its own way"
        [engine] = served.engines().values()
        messages = [e for e in engine.session if e.kind == "message"]
        current = [m.text for m in engine.messages]
    forwarded = [r.body["messages"] for r in fake.requests_to("/v1/messages")]
    assert [m["content"] for m in forwarded[-1]] == histories["b"][:-2]  # the last request: b's history
    distinct = {json.dumps(e.payload, sort_keys=True) for e in messages}
    assert len(messages) == len(distinct)  # each message logged once
    assert current == histories["b"][:-2]


def test_the_lease_is_exclusive_per_session() -> None:
    async def main() -> list[str]:
        store = MemorySessionStore()
        spec = EngineSpec(model=MODEL, policy="ctxwin")
        order: list[str] = []

        async def use(session: str, name: str) -> None:
            async with store.lease(session, spec) as engine:
                order.append(f"{name}+")
                await asyncio.sleep(0.02)
                engine.append({"role": "user", "content": name})
                order.append(f"{name}-")

        await asyncio.gather(use("a", "1"), use("a", "2"), use("b", "3"))
        async with store.lease("a", spec) as engine:
            assert [m.text for m in engine.messages] == ["1", "2"]
        assert sorted(store.session_ids()) == ["a", "b"]
        await store.aclose()
        return order

    order = asyncio.run(main())
    one, two = order.index("1+"), order.index("2+")
    assert order[one + 1] in ("1-", "3+", "3-") and order.index("1-") < two  # 2 waited for 1; b ran alongside


# ---------------------------------------------------------------------------------------------- conversion


def _history(api: str, turns: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """A history in the API's own shape: per turn, a user text or an assistant call (n results)."""
    out: list[dict[str, Any]] = []
    for index, (text, calls) in enumerate(turns):
        if not calls:
            out.append({"role": "user", "content": text})
            continue
        ids = [f"call_{index}_{n}" for n in range(calls)]
        if api == "anthropic":
            out.append({"role": "assistant", "content": [{"type": "text", "text": text}, *[
                {"type": "tool_use", "id": i, "name": "read", "input": {"path": text}} for i in ids]]})
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": f"{text} {i}",
                                                     **({"cache_control": {"type": "ephemeral"}} if n == 0 else {})}
                                                    for n, i in enumerate(ids)]})
        elif api == "openai-chat":
            out.append({"role": "assistant", "content": text, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "read", "arguments": json.dumps({"p": text})}}
                for i in ids]})
            out += [{"role": "tool", "tool_call_id": i, "content": f"{text} {i}"} for i in ids]
        else:
            out.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
            out += [{"type": "function_call", "call_id": i, "name": "read", "arguments": "{}"} for i in ids]
            out += [{"type": "function_call_output", "call_id": i, "output": f"{text} {i}"} for i in ids]
    return out


turns_strategy = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 2)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(api=st.sampled_from(list(APIS)), requests=st.lists(turns_strategy, min_size=1, max_size=4),
       keep=st.lists(st.integers(0, 8), min_size=4, max_size=4))
def test_incremental_conversion_equals_converting_everything(api: str, requests: list[list[tuple[str, int]]],
                                                             keep: list[int]) -> None:
    """However one request's history relates to the previous one (extends it, edits it, rewinds it),
    converting incrementally from the previous request gives what converting all of it at once gives
    (the agent's cache markers aside, which the proxy strips)."""
    adapter = APIS[api]
    memo = Conversion()
    previous: list[tuple[str, int]] = []
    for turns, kept in zip(requests, keep, strict=False):
        turns = previous[:kept] + turns  # some of the last request, then something new
        history = _history(api, turns)
        raw = Body(json.dumps({adapter.history_key: history}).encode()).raw_list(adapter.history_key)
        assert raw is not None
        memo = adapter.canonical(raw, memo, lambda m: len(m.text))
        whole = adapter.canonical(raw, Conversion(), lambda m: len(m.text))
        direct = adapter.convert([strip_cache_control(m) for m in history])  # one converter call, all of it
        assert [m.content_key for m in memo.messages] == [m.content_key for m in whole.messages] \
            == [m.content_key for m in direct]
        assert memo.tokens == whole.tokens
        previous = turns


@settings(max_examples=60, deadline=None)
@given(api=st.sampled_from(list(APIS)), requests=st.lists(turns_strategy, min_size=1, max_size=4),
       keep=st.lists(st.integers(0, 8), min_size=4, max_size=4))
def test_incremental_writing_equals_writing_everything(api: str, requests: list[list[tuple[str, int]]],
                                                       keep: list[int]) -> None:
    """What goes upstream, written group by group from the previous request's groups, is byte for
    byte what the provider writer gives for the whole list."""
    adapter = APIS[api]
    rendered = Rendered()
    previous: list[tuple[str, int]] = []
    for turns, kept in zip(requests, keep, strict=False):
        turns = previous[:kept] + turns
        history = _history(api, turns)
        messages = adapter.convert([strip_cache_control(m) for m in history])
        if api == "anthropic":
            rendered = anthropic_turns(messages, rendered)
            expected = to_anthropic(messages)["messages"]
        else:
            fmt = "openai_chat" if api == "openai-chat" else "openai_responses"
            rendered = openai_items(messages, fmt, rendered)
            fixed = repair(messages, fmt).messages if validate(messages, fmt) else messages
            expected = (to_openai_chat if api == "openai-chat" else to_openai_responses)(fixed)
        got = orjson.loads(b"[" + b",".join(data for data in rendered.encoded if data) + b"]")
        assert got == json.loads(json.dumps(expected))
        previous = turns


def test_the_in_memory_store_keeps_at_most_max_open_engines_and_reopens_an_evicted_session() -> None:
    """The default store: engines past `max_open` are closed, least recently used first; the log
    stays, so an evicted session's next request continues it on its one branch."""
    from ctxwin.proxy.app import create_app
    from ctxwin.proxy.config import ProxyConfig
    from proxy_server import serve

    store = MemorySessionStore(max_open=3)
    with FakeProvider() as fake, serve(create_app(ProxyConfig(upstream=fake.base_url), store=store)) as port:
        def send(messages: list[dict[str, Any]]) -> dict[str, Any]:
            response = httpx.post(f"http://127.0.0.1:{port}/v1/messages", json={
                "model": MODEL, "max_tokens": 100, "messages": messages},
                headers={"x-api-key": "k", "anthropic-version": "2023-06-01"}, timeout=30)
            assert response.status_code == 200, response.text
            return response.json()

        first = [{"role": "user", "content": "conversation 0"}]
        reply = send(first)["content"]
        for n in range(1, 9):
            send([{"role": "user", "content": f"conversation {n}"}])
            assert len(store.engines()) <= 3
        assert len(store.session_ids()) == 9
        send([*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "and then?"}])
        [engine] = [e for e in store.engines().values() if e.messages[0].text == "conversation 0"]
        entries = list(engine.session)
    assert [m.text for m in engine.messages][::2] == ["conversation 0", "and then?"]
    assert all(e.parent_id == (entries[n - 1].id if n else None) for n, e in enumerate(entries))


def test_sync_goes_on_on_another_branch_only_when_asked() -> None:
    """The engine side of the above: a history that extends another branch's whole history continues
    there with `other_branches` (nothing re-logged), and branches again without it (the default,
    for adapters whose own records on a branch change what it holds)."""
    from ctxwin.engine import ContextEngine

    a = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "a1"}]
    b = [{"role": "user", "content": "task"}, {"role": "assistant", "content": "b1"}]
    for asked, logged in ((True, 3), (False, 4)):
        engine = ContextEngine(model=MODEL)
        engine.sync(a)
        engine.sync(b)
        new = engine.sync([*a, {"role": "user", "content": "a2"}], other_branches=asked)
        assert [m.text for m in engine.messages] == ["task", "a1", "a2"]
        assert len(new) == (1 if asked else 2)
        assert len([e for e in engine.session if e.kind == "message"]) == logged + 1
