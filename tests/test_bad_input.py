"""Bad input at every public entry point gets a `CtxwinError`, never a built-in exception (issue 22.4).

The README promises that every error ctxwin raises derives from `CtxwinError`, so a harness can catch
one class; STYLE.md 8 says no `ValueError` or `KeyError` leaks from the public API. Hypothesis feeds
each entry point values that are wrong in every way a caller can get them wrong (wrong types, JSON of
the wrong shape, near-miss provider messages with fields of the wrong type, out-of-range numbers,
paths that are no paths) and lets any exception that is not a `CtxwinError` fail the test. Accepting
a value is fine: the property is about how a refusal is raised, not whether it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwin import ContextEngine, Message, Session, Text, policies
from ctxwin.errors import ArgumentError, CtxwinError, InputError, MessageFormatError
from ctxwin.messages import message_from_dict
from ctxwin.messages import providers as convert
from ctxwin.messages.pairing import repair, validate

EXAMPLES = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# -- values ---------------------------------------------------------------------------------------

SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
JUNK = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
NOT_TEXT = SCALARS.filter(lambda v: not isinstance(v, str)) | st.lists(SCALARS, max_size=2) \
    | st.dictionaries(st.text(max_size=4), SCALARS, max_size=2)

ROLES = ("user", "assistant", "system", "tool", "developer", "robot", "")
TYPES = ("text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "image_url", "input_text",
         "output_text", "input_image", "function_call", "function_call_output", "message", "reasoning", "refusal",
         "document", "custom_tool_call", "custom", "function", "file", "input_audio")
FIELDS = ("text", "id", "name", "input", "content", "tool_use_id", "call_id", "arguments", "source", "image_url",
          "output", "thinking", "signature", "data", "role", "tool_calls", "tool_call_id", "function", "summary",
          "is_error", "cache_control", "url", "media_type", "detail", "status", "encrypted_content", "type")


def _with_fields(required: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """A dict with `required` and any of the known field names, each a plausible or a junk value."""
    value = st.text(max_size=12) | JUNK
    return st.fixed_dictionaries(required, optional={name: value for name in FIELDS if name not in required})


BLOCK = _with_fields({"type": st.sampled_from(TYPES) | JUNK})
CALL = _with_fields({"type": st.sampled_from(("function", "custom")) | JUNK,
                     "function": _with_fields({"name": st.text(max_size=8) | JUNK}) | JUNK})
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(ROLES) | JUNK},
    optional={"content": st.text(max_size=12) | st.lists(BLOCK | JUNK, max_size=3) | JUNK,
              "tool_calls": st.lists(CALL | JUNK, max_size=2) | JUNK,
              "tool_call_id": st.text(max_size=8) | JUNK, "name": st.text(max_size=8) | JUNK})
ITEM = BLOCK | MESSAGE  # a Responses input item is a typed dict; a message item has a role too
CONVERSATION = st.lists(ITEM | JUNK, max_size=4) | JUNK
NEAR_VALID = st.lists(st.fixed_dictionaries(  # conversations that mostly read, so the code after the reading runs
    {"role": st.sampled_from(("user", "assistant")), "content": st.text(min_size=1, max_size=20)
     | st.lists(BLOCK, max_size=2)},
    optional={"tool_calls": st.lists(CALL, max_size=1), "call_id": st.text(max_size=4), "name": st.text(max_size=4),
              "type": st.sampled_from(("message", "function_call", "function_call_output", "reasoning")),
              "arguments": st.text(max_size=6), "output": st.text(max_size=6)}), min_size=1, max_size=4)
PATHISH = JUNK | st.text(max_size=12) | st.builds(lambda b: b, st.binary(max_size=6))

MODEL = "claude-sonnet-4-5"
GOOD_MESSAGE = Message("user", (Text("hello"),))
GOOD = [GOOD_MESSAGE]


def only_ctxwin_errors(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call(...)`'s result, None when it refused with a `CtxwinError`; anything else propagates
    (and fails the test, with the value hypothesis found)."""
    try:
        return call(*args, **kwargs)
    except CtxwinError as error:
        assert str(error), f"{type(error).__name__} without a message"
        return None


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative paths a test feeds resolve under its own folder, never the checkout."""
    monkeypatch.chdir(tmp_path)


# -- the converters -------------------------------------------------------------------------------


@EXAMPLES
@given(CONVERSATION, st.none() | st.text(max_size=8) | st.lists(BLOCK | JUNK, max_size=2) | JUNK)
def test_from_anthropic_refuses_bad_payloads_with_ctxwin_errors(messages: Any, system: Any) -> None:
    only_ctxwin_errors(convert.from_anthropic, messages, system=system)


@EXAMPLES
@given(CONVERSATION)
def test_from_openai_chat_refuses_bad_payloads_with_ctxwin_errors(messages: Any) -> None:
    only_ctxwin_errors(convert.from_openai_chat, messages)


@EXAMPLES
@given(CONVERSATION)
def test_from_openai_responses_refuses_bad_payloads_with_ctxwin_errors(items: Any) -> None:
    only_ctxwin_errors(convert.from_openai_responses, items)


@EXAMPLES
@given(ITEM | JUNK)
def test_a_provider_dict_of_unknown_shape_is_a_message_format_error(item: Any) -> None:
    only_ctxwin_errors(convert.from_provider_dict, item)


@EXAMPLES
@given(st.fixed_dictionaries({"role": st.sampled_from(ROLES) | JUNK},
                             optional={"blocks": st.lists(BLOCK | JUNK, max_size=3) | JUNK, "id": JUNK,
                                       "meta": JUNK}) | JUNK)
def test_a_stored_message_dict_of_the_wrong_shape_is_refused(data: Any) -> None:
    only_ctxwin_errors(message_from_dict, data)


@EXAMPLES
@given(st.lists(JUNK | st.just(GOOD_MESSAGE), max_size=3) | JUNK,
       st.sampled_from(("to_anthropic", "to_openai_chat", "to_openai_responses")))
def test_the_writers_refuse_what_is_not_a_list_of_messages(messages: Any, writer: str) -> None:
    only_ctxwin_errors(getattr(convert, writer), messages)


@EXAMPLES
@given(st.sampled_from(("anthropic", "openai", "openai-responses")) | JUNK, JUNK | st.just("http://127.0.0.1:9"),
       JUNK, st.lists(JUNK, max_size=2) | JUNK)
def test_model_clients_refuse_bad_arguments_before_anything_is_sent(api: Any, base_url: Any, model: Any,
                                                                    messages: Any) -> None:
    """(Nothing listens on port 9: a request that got as far as the network would fail there, and
    that is not what this is about; `build_request` is everything a call does before it.)"""
    from ctxwin.providers import client_for

    client = only_ctxwin_errors(client_for, api, base_url, model, api_key="k")
    if client is None:
        return
    with client:
        only_ctxwin_errors(client.build_request, messages)


def test_the_refusals_say_what_to_pass_and_stay_value_errors() -> None:
    """The leaves name the right thing and keep the built-in, so `except ValueError` code still works."""
    with pytest.raises(MessageFormatError, match="content must be a string or a list"):
        convert.from_anthropic([{"role": "user", "content": 5}])
    with pytest.raises(MessageFormatError, match="list of messages"):
        convert.from_openai_chat(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown role 'robot'"):
        convert.from_openai_chat([{"role": "robot", "content": "x"}])
    with pytest.raises(ArgumentError, match="expected one of"):
        validate([], "gemini")  # type: ignore[arg-type]
    assert issubclass(MessageFormatError, InputError) and issubclass(ArgumentError, ValueError)


# -- the engine -----------------------------------------------------------------------------------



@EXAMPLES
@given(MESSAGE | st.lists(MESSAGE | JUNK, max_size=3) | JUNK)
def test_append_and_sync_refuse_bad_messages_with_ctxwin_errors(value: Any) -> None:
    engine = ContextEngine(model=MODEL)
    only_ctxwin_errors(engine.append, value)
    only_ctxwin_errors(engine.sync, value)
    engine.prepare()  # nothing half-appended breaks the next request


def test_append_of_a_number_as_content_says_what_to_send() -> None:
    """The example in the issue: a bare ValueError before."""
    engine = ContextEngine(model=MODEL)
    with pytest.raises(MessageFormatError) as refused:
        engine.append({"role": "user", "content": 5})
    assert "content" in str(refused.value) and "string" in str(refused.value)
    assert engine.session.path() == []  # nothing lost, nothing half-written


CONSTRUCTOR_ARGUMENTS = ("model", "policy", "window", "max_output", "system", "tools", "workspace",
                         "overhead_tokens", "counter", "clock", "summarizer", "memory_flush", "session")


@EXAMPLES
@given(st.sampled_from(CONSTRUCTOR_ARGUMENTS), JUNK)
def test_engine_arguments_are_refused_with_ctxwin_errors(name: str, value: Any) -> None:
    engine = only_ctxwin_errors(ContextEngine, **{"model": MODEL, name: value})
    if engine is not None:  # accepted: then it must work, not fail later with a stray TypeError
        engine.append(GOOD)
        only_ctxwin_errors(engine.prepare)  # a window of 1 token fits nothing: a ContextBudgetError


@EXAMPLES
@given(JUNK, JUNK, JUNK)
def test_engine_calls_refuse_bad_arguments_with_ctxwin_errors(first: Any, second: Any, third: Any) -> None:
    engine = ContextEngine(model=MODEL)
    engine.append(GOOD)
    only_ctxwin_errors(engine.prepare, max_output=first)
    only_ctxwin_errors(engine.compact, first, max_output=second)
    only_ctxwin_errors(engine.recover, first, max_output=second)
    only_ctxwin_errors(engine.recall, first, second, third)
    only_ctxwin_errors(engine.mark, first)
    only_ctxwin_errors(engine.rewind, first)
    only_ctxwin_errors(engine.pin, first)
    only_ctxwin_errors(engine.record_usage, first)
    only_ctxwin_errors(engine.is_overflow_error, first)
    engine.prepare()


# -- stores, policies, transcripts ----------------------------------------------------------------


@EXAMPLES
@given(PATHISH)
def test_session_open_refuses_what_is_not_a_session_folder(value: Any) -> None:
    log = only_ctxwin_errors(Session.open, value)
    if log is not None:
        log.close()


@settings(max_examples=40, deadline=None)
@given(JUNK | st.just("postgresql://127.0.0.1:9/ctxwin"), JUNK)
def test_session_postgres_refuses_bad_dsns_and_ids_with_ctxwin_errors(dsn: Any, session_id: Any) -> None:
    """(Port 9 has no server: a DSN that parses gets as far as the connection, which is refused.)"""
    pytest.importorskip("psycopg")
    only_ctxwin_errors(Session.postgres, dsn, session_id)


def test_an_empty_path_is_no_session_folder(tmp_path: Path) -> None:
    """"" would be the current folder: a session log and its lock written wherever the process runs."""
    with pytest.raises(InputError, match="empty"):
        Session.open("")
    assert list(tmp_path.iterdir()) == []


@EXAMPLES
@given(JUNK | st.sampled_from(("pi:", ":aggressive", "nope.toml", "a/b", "pi:nope", "ctxwin:light:")))
def test_policies_get_refuses_unknown_policies_with_ctxwin_errors(value: Any) -> None:
    only_ctxwin_errors(policies.get, value)


@EXAMPLES
@given(st.dictionaries(st.sampled_from(("base", "mask", "spill", "compaction", "fit", "bootstrap", "prune",
                                        "dedup", "result_budget", "name", "batch", "strategy")), JUNK, max_size=3))
def test_a_policy_of_bad_values_is_refused_with_ctxwin_errors(data: dict[str, Any]) -> None:
    only_ctxwin_errors(policies.from_dict, data)


@EXAMPLES
@given(PATHISH)
def test_load_transcript_refuses_what_is_not_a_transcript_path(value: Any) -> None:
    from ctxwin.transcripts import load_transcript

    only_ctxwin_errors(load_transcript, value)


@EXAMPLES
@given(st.lists(JUNK | MESSAGE, max_size=4), st.sampled_from(("x.jsonl", "x.json")))
def test_load_transcript_refuses_files_of_junk_with_ctxwin_errors(records: list[Any], name: str) -> None:
    import json
    import uuid

    from ctxwin.transcripts import load_transcript

    def dumps(value: Any) -> str:
        return json.dumps(value, allow_nan=True)

    path = Path(f"{uuid.uuid4().hex}-{name}")
    path.write_text("\n".join(map(dumps, records)) if name.endswith("l") else dumps(records), "utf-8")
    only_ctxwin_errors(load_transcript, path)


def test_finite_numbers_only_is_what_the_hint_says() -> None:
    """A NaN window is a number of tokens no more than a string is."""
    with pytest.raises(InputError, match="positive"):
        ContextEngine(model=MODEL, window=math.nan)  # type: ignore[arg-type]


def test_repair_takes_a_known_provider() -> None:
    with pytest.raises(ArgumentError, match="anthropic"):
        repair([], "gemini")  # type: ignore[arg-type]


# -- the tools, the memory tools, MCP -------------------------------------------------------------

TOOL_ARGUMENTS = ("path", "pattern", "offset", "limit", "glob", "context", "command", "timeout", "query", "ref",
                  "max_results", "min_score", "hops", "max_chars", "from", "lines", "roles", "start_date",
                  "end_date", "all_sessions", "file_text", "old_str", "new_str", "insert_line", "insert_text",
                  "view_range", "old_path", "new_path", "names", "ignore_case", "column", "pages")
ARGUMENTS = st.dictionaries(st.sampled_from(TOOL_ARGUMENTS), st.text(max_size=10) | JUNK, max_size=4) | JUNK


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A workspace with a file, a session with one message and blobs, a memory folder, and the MCP
    toolset serving all of them (the memory index over the hash embedder: no model download)."""
    from ctxwin.mcp import McpConfig, Toolset

    base = tmp_path_factory.mktemp("served")
    (base / "repo").mkdir()
    (base / "repo" / "a.txt").write_text("hello\nworld\n")
    (base / "mem" / "memory").mkdir(parents=True)
    (base / "mem" / "MEMORY.md").write_text("# Memory\nThe staging proxy listens on port 8443.\n")
    (base / "mem" / "memory" / "2026-01-01.md").write_text("Deployed version 1.2.3.\n")
    with Session.open(base / "sessions" / "s1") as log:
        log.append("message", GOOD[0].to_dict())
    toolset = Toolset(McpConfig(roots=(base / "repo",), session=base / "sessions" / "s1", memory=base / "mem",
                                embedder="hash"))
    yield toolset
    toolset.close()


@EXAMPLES
@given(st.sampled_from(("read", "grep", "find", "ls", "read_spilled", "grep_spilled", "query_json")),
       JUNK, JUNK, JUNK)
def test_the_tool_functions_refuse_bad_arguments_with_ctxwin_errors(served: Any, name: str, first: Any,
                                                                    second: Any, third: Any) -> None:
    """Called directly, as a harness may (the registry's `run` answers every refusal as an output)."""
    import ctxwin.tools

    only_ctxwin_errors(getattr(ctxwin.tools, name), served.workspace, first, second, third)


@EXAMPLES
@given(JUNK | st.lists(JUNK, max_size=2), JUNK)
def test_a_workspace_of_bad_roots_is_refused_with_a_tool_error(roots: Any, deny: Any) -> None:
    from ctxwin.tools import Workspace

    only_ctxwin_errors(Workspace, roots=roots, deny=deny)


@EXAMPLES
@given(st.sampled_from(("memory_search", "memory_get", "memory", "conversation_search", "recall", "read", "grep",
                        "find", "ls", "nope")), ARGUMENTS)
def test_mcp_and_memory_tools_answer_bad_arguments_as_refusals(served: Any, name: str, arguments: Any) -> None:
    """A client's call never raises, and a refusal is a refusal: an error of ctxwin itself (any
    exception that is not a CtxwinError) would come back as the `internal` error, which fails here."""
    out = served.call(name, arguments)
    assert out.details.get("error") != "internal", out.text


@pytest.fixture(scope="module")
def memory_tools(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from ctxwin.memory import MemoryIndex
    from ctxwin.memory.embed import HashEmbedder
    from ctxwin.memory.tools import MemoryTools
    from ctxwin.store.in_memory import MemorySessionLog

    root = tmp_path_factory.mktemp("memory")
    (root / "memory").mkdir()
    (root / "MEMORY.md").write_text("# Memory\nThe staging proxy listens on port 8443.\n")
    log = MemorySessionLog(session_id="s1")
    log.append("message", GOOD[0].to_dict())
    with MemoryIndex.open(root / "index.sqlite", HashEmbedder()) as index:
        index.add_entries(log, "s1")
        yield MemoryTools(root, index, session="s1", window=8_000)


@EXAMPLES
@given(st.sampled_from(("memory_search", "memory_get", "memory", "conversation_search", "open_files",
                        "close_files", "semantic_search_files", "nope")), ARGUMENTS)
def test_the_memory_tools_never_raise_for_what_a_model_sends(memory_tools: Any, name: str, arguments: Any) -> None:
    """Their promise is stronger: a model's call never raises at all, refusals are error outputs."""
    out = memory_tools.run(name, arguments)
    assert out.text and (not out.is_error or "internal" not in str(out.details.get("error", "")))


@EXAMPLES
@given(st.sampled_from(("roots", "blobs", "session", "sessions_root", "memory", "embedder", "model")), PATHISH)
def test_an_mcp_config_of_bad_values_is_refused_with_ctxwin_errors(tmp_path: Path, name: str, value: Any) -> None:
    from ctxwin.mcp import McpConfig, Toolset

    toolset = only_ctxwin_errors(lambda: Toolset(McpConfig(**{"roots": (tmp_path,), name: value})))
    if toolset is not None:
        toolset.close()


# -- the adapters ---------------------------------------------------------------------------------

ADAPTER_CALLS = ("langchain.to_ctxwin", "langchain.CtxwinMiddleware", "openai_agents.items_to_messages",
                 "openai_agents.plain_item", "openai_agents.CtxwinSession", "openai_agents.CtxwinInputFilter",
                 "openai_agents.add_items", "openai_agents.get_items", "pydantic_ai.to_messages",
                 "pydantic_ai.CtxwinHistory", "pydantic_ai.process")


def _adapter_call(name: str, value: Any) -> Any:
    import asyncio
    import importlib

    module, _, function = name.partition(".")
    adapter = importlib.import_module(f"ctxwin.adapters.{module}")
    if function in ("add_items", "get_items"):
        session = adapter.CtxwinSession(ContextEngine(model=MODEL))
        return asyncio.run(getattr(session, function)(value))
    if function == "process":
        return adapter.CtxwinHistory(ContextEngine(model=MODEL))(value)
    return getattr(adapter, function)(value)


@EXAMPLES
@given(st.sampled_from(ADAPTER_CALLS), CONVERSATION | JUNK)
def test_the_adapters_refuse_what_is_not_their_framework_s_input(name: str, value: Any) -> None:
    pytest.importorskip({"langchain": "langchain", "openai_agents": "agents",
                         "pydantic_ai": "pydantic_ai"}[name.partition(".")[0]])
    only_ctxwin_errors(_adapter_call, name, value)


@pytest.mark.parametrize(("adapter", "framework"), [("langchain", "langchain"), ("openai_agents", "agents"),
                                                    ("pydantic_ai", "pydantic_ai")])
def test_an_adapter_without_its_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch, adapter: str,
                                                          framework: str) -> None:
    """A missing extra is a MissingExtraError, which is an ImportError too (what importing a module
    of a missing package raises anywhere else)."""
    import importlib
    import sys

    from ctxwin.errors import MissingExtraError

    for name in [n for n in sys.modules if n == framework or n.startswith(f"{framework}.")] or [framework]:
        monkeypatch.setitem(sys.modules, name, None)  # how Python marks a module as not importable
    monkeypatch.delitem(sys.modules, f"ctxwin.adapters.{adapter}", raising=False)
    with pytest.raises(MissingExtraError, match=r"pip install 'ctxwin\[") as refused:
        importlib.import_module(f"ctxwin.adapters.{adapter}")
    assert isinstance(refused.value, ImportError)


# -- the command line -----------------------------------------------------------------------------

CLI_COMMANDS = ("inspect", "health", "policies", "sessions", "search", "replay", "compact", "tool", "import",
                "session", "memory", "eval", "report")  # not the servers and agents (run, chat, proxy, mcp, demo)
CLI_VALUES = (st.sampled_from(("t.jsonl", "bin.dat", "empty.txt", "dir", "missing.jsonl", "p.toml", "", "-",
                               "a\nb", "-1", "0", "nan", "1e999", "99999999999999999999", "pi", "nope", "entry:zz",
                               "blob:00", "::"))
              | st.text(max_size=8))


def _cli_options() -> dict[tuple[str, str | None], list[str]]:
    """Every (command, subcommand) of the safe commands with its option names, from the app itself."""
    import typer

    from ctxwin.cli.main import app

    group: Any = typer.main.get_command(app)
    out: dict[tuple[str, str | None], list[str]] = {}
    for name in CLI_COMMANDS:
        command = group.get_command(None, name)
        subcommands = getattr(command, "commands", None) or {None: command}
        for sub, each in subcommands.items():
            out[(name, sub)] = [o for p in each.params for o in p.opts if o.startswith("-") and o != "--help"]
    return out


@pytest.fixture(scope="module")
def cli_options() -> dict[tuple[str, str | None], list[str]]:
    return _cli_options()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_cli_answers_bad_arguments_with_an_error_line_and_exit_2(tmp_path: Path, data: st.DataObject,
                                                                     cli_options: Any) -> None:
    """Any arguments: an answer, or an exit code of 1 (ctxwin's trouble) or 2 (the input's) with an
    error line, never a traceback."""
    from typer.testing import CliRunner

    from ctxwin.cli.main import app

    (tmp_path / "t.jsonl").write_text('{"role": "user", "content": "hello there"}\n'
                                      '{"role": "assistant", "content": "hi"}\n')
    (tmp_path / "bin.dat").write_bytes(bytes(range(256)))
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "dir").mkdir(exist_ok=True)
    (tmp_path / "p.toml").write_text("base = 'pi'\n[mask]\nbatch = -3\n")
    command, sub = data.draw(st.sampled_from(sorted(cli_options, key=str)))
    tokens = data.draw(st.lists(st.sampled_from(cli_options[(command, sub)] or ["--x"]) | CLI_VALUES, max_size=5))
    result = CliRunner().invoke(app, [command, *([sub] if sub else []), *tokens])
    said = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in said
    assert result.exit_code in (0, 1, 2), said
    assert result.exit_code == 0 or "error" in said.lower(), said


# -- the proxy ------------------------------------------------------------------------------------

PROXY_PATHS = {"anthropic": "/v1/messages", "openai-chat": "/v1/chat/completions",
               "openai-responses": "/v1/responses", "anthropic-count": "/v1/messages/count_tokens"}


@pytest.fixture(scope="module")
def proxy() -> Any:
    """The real proxy (uvicorn on 127.0.0.1) in front of the fake provider."""
    from ctxwin.testing import FakeProvider
    from proxy_server import proxy_for

    with FakeProvider(context_window=50_000, max_output=2_000) as fake, proxy_for(fake) as served:
        yield served


def _proxy_body(api: str, conversation: Any, extra: dict[str, Any]) -> dict[str, Any]:
    key = "input" if api == "openai-responses" else "messages"
    model = "claude-sonnet-4-5" if api.startswith("anthropic") else "gpt-4o"
    return {"model": model, "max_tokens": 100, key: conversation, **extra}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(PROXY_PATHS)), CONVERSATION | NEAR_VALID,
       st.dictionaries(st.sampled_from(("model", "max_tokens", "max_output_tokens", "stream", "system", "tools",
                                        "instructions", "tool_choice", "stream_options", "metadata")),
                       JUNK | st.booleans(), max_size=3))
def test_the_proxy_answers_bad_requests_in_the_api_s_error_shape(proxy: Any, api: str, conversation: Any,
                                                                  extra: dict[str, Any]) -> None:
    """A request of any shape gets the upstream's answer, or an error in the caller's own API's shape
    that says what is wrong; never a 500 of ctxwin's own (what a stray built-in exception becomes)."""
    import json

    import httpx

    headers = {"content-type": "application/json"}
    headers.update({"x-api-key": "sk-test", "anthropic-version": "2023-06-01"} if api.startswith("anthropic")
                   else {"authorization": "Bearer sk-test"})
    body = json.dumps(_proxy_body(api, conversation, extra), allow_nan=True).encode()
    with httpx.stream("POST", f"{proxy.url}{PROXY_PATHS[api]}", content=body, headers=headers, timeout=60) as reply:
        data = reply.read()
    assert reply.status_code != 500, data[:300]
    if reply.status_code < 400:
        return
    error = json.loads(data)
    if api.startswith("anthropic"):
        assert error["type"] == "error" and set(error["error"]) >= {"type", "message"}, error
    else:
        assert set(error["error"]) >= {"message", "type"}, error
    assert error["error"]["message"]
