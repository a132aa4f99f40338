"""`ctxwin mcp` through the official SDK's client, over both transports: a real server process per
transport (stdio: spawned by the client; HTTP: on a free 127.0.0.1 port, behind a bearer token), one
per module, on a real workspace, a real stored session with its blob store, and real memory files.

Every tool is listed and called; outputs are compared with the library's own tools run in this
process (same caps, same notices, same text); refusals come back as `isError` results, never as
protocol errors."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("mcp", reason="the mcp extra is not installed")

import anyio.from_thread
import httpx
import httpx2
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from ctxwin.errors import InputError
from ctxwin.mcp import McpConfig, Toolset, check_exposure, is_loopback, parse_address
from ctxwin.mcp.recall import _cut, recall
from ctxwin.mcp.server import DETAILS_META
from ctxwin.mcp.tools import STATELESS_DROPS
from ctxwin.memory.tools import SPECS as MEMORY_SPECS
from ctxwin.messages import Message, Text, ToolCall, ToolResult
from ctxwin.store import FileBlobStore, Session
from ctxwin.tools import TOOLS, Workspace, run_tool

SRC = Path(__file__).resolve().parents[1] / "src"
TOKEN = "test-token-4f1c"
WORKSPACE_TOOLS = ["read", "grep", "find", "ls", "shell", "read_spilled", "grep_spilled", "query_json"]
MEMORY_TOOLS = ["memory_search", "memory_get", "memory", "conversation_search", "semantic_search_files"]
# Secrets in the root that the deny list names (suffixless, so only the list keeps them out of the
# file index), each with a token only it holds.
SECRETS = {"id_rsa": "SECRET-idrsa-6124", "credentials": "SECRET-credentials-8830",
           "src/credentials.json": "SECRET-credjson-2207", "server.pem": "SECRET-pem-3391"}
EXPECTED_TOOLS = [*WORKSPACE_TOOLS, "recall", *MEMORY_TOOLS]


@dataclass(frozen=True)
class World:
    """The files every server serves."""

    root: Path
    store: Path
    session: Path
    memory: Path
    blob: str  # handle of a spilled text output
    json_blob: str  # handle of a spilled JSON output
    blob_text: str
    result_ref: str  # entry:<id>#<call> of a long tool result in the session
    result_text: str
    user_ref: str

    def args(self) -> list[str]:
        return ["mcp", "--root", str(self.root), "--store", str(self.store), "--session", self.session.name,
                "--memory", str(self.memory), "--embedder", "hash", "--allow-shell"]

    def workspace(self) -> Workspace:
        """The library's own workspace over the same files, to compare outputs with."""
        return Workspace(roots=[self.root], blobs=FileBlobStore(self.session / "blobs"), allow_shell=True)


def png_1x1() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) \
        + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("mcp")
    root = base / "repo"
    (root / "src").mkdir(parents=True)
    # 6,000 lines, 350 KB: over read's 256 KB whole-file cap and its 2,000-line page.
    (root / "big.log").write_text("".join(f"line {n} lorem ipsum dolor sit amet consectetur adipiscing\n"
                                          for n in range(1, 6001)))
    (root / "src" / "app.py").write_text("def handler(event):\n    return respond(event)\n\n"
                                         "def respond(event):\n    raise ValueError('E4711 bad event')\n")
    (root / "src" / "util.py").write_text("def helper():\n    return 42\n")
    (root / "data.json").write_text(json.dumps({"items": [{"id": i, "status": "error" if i % 7 == 0 else "ok"}
                                                         for i in range(50)]}))
    (root / "logo.bin").write_bytes(bytes(range(256)) * 8)
    (root / "dot.png").write_bytes(png_1x1())
    (root / ".env").write_text("API_KEY=do-not-serve\n")
    for name, token in SECRETS.items():
        (root / name).write_text(f"-----BEGIN KEY----- respond event handler {token}\n")
    store = base / "sessions"
    session = store / "s1"
    result_text = "".join(f"build step {n}: compiled module_{n}.o in {n % 13} ms\n" for n in range(1, 3001))
    with Session.open(session) as log:
        user = log.append("message", Message("user", (Text("Deploy the parser fix to staging on port 8443"),))
                          .to_dict())
        log.append("message", Message("assistant", (ToolCall("call_1", "shell", {"command": "make"}),)).to_dict())
        result = log.append("message", Message("tool", (ToolResult("call_1", (Text(result_text),), name="shell"),))
                            .to_dict())
    blobs = FileBlobStore(session / "blobs")
    blob_text = "".join(f"pytest row {n}: test_case_{n} PASSED\n" for n in range(1, 4001)) + "FAILED test_zeta\n"
    blob = blobs.put(blob_text.encode()).handle
    json_blob = blobs.put(json.dumps({"rows": [{"k": n, "v": n * n} for n in range(100)]}).encode()).handle
    memory = base / "mem"
    (memory / "memory").mkdir(parents=True)
    (memory / "MEMORY.md").write_text("# Memory\n\nThe staging database listens on port 5433.\n"
                                      "The user prefers tabs over spaces.\n")
    (memory / "memory" / "2026-01-05.md").write_text("Decided to pin numpy below 3 for the release.\n")
    return World(root, store, session, memory, blob, json_blob, blob_text, f"entry:{result.id}#call_1",
                 result_text, f"entry:{user.id}")


# --------------------------------------------------------------------------------------------------
# Clients: the SDK's async client, driven from the tests through a blocking portal (one event loop
# in a thread for the whole module, so one server per transport serves every test).


@dataclass
class Connected:
    portal: anyio.from_thread.BlockingPortal
    client: Client
    transport: str

    def list_tools(self) -> list[Any]:
        return self.portal.call(self.client.list_tools).tools

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> CallToolResult:
        return self.portal.call(self.client.call_tool, name, arguments or {})


def text_of(result: CallToolResult) -> str:
    return "".join(part.text for part in result.content if part.type == "text")


@contextlib.contextmanager
def connected(make: Callable[[], Client], transport: str) -> Iterator[Connected]:
    with anyio.from_thread.start_blocking_portal() as portal:
        async def build() -> Client:
            return make()

        with portal.wrap_async_context_manager(portal.call(build)) as client:
            yield Connected(portal, client, transport)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC)}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "ctxwin.cli.main", *args], env=env(), capture_output=True,
                          text=True, timeout=30)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture(scope="module")
def http_server(world: World) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "ctxwin.cli.main", *world.args(), "--http",
                                f"127.0.0.1:{port}", "--auth-token", TOKEN], env=env(), stderr=subprocess.PIPE,
                               text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ctxwin mcp --http did not start: {process.stderr.read() if process.stderr else ''}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture(scope="module", params=["stdio", "http"])
def client(request: pytest.FixtureRequest, world: World) -> Iterator[Connected]:
    if request.param == "stdio":
        params = StdioServerParameters(command=sys.executable, args=["-m", "ctxwin.cli.main", *world.args()],
                                       env={"PYTHONPATH": str(SRC)})
        with connected(lambda: Client(params), "stdio") as c:
            yield c
    else:
        url = request.getfixturevalue("http_server")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with connected(lambda: Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers))),
                       "http") as c:
            yield c


# --------------------------------------------------------------------------------------------------
# Listing


def test_lists_every_tool_with_the_library_schemas(client: Connected) -> None:
    tools = {t.name: t for t in client.list_tools()}
    assert list(tools) == EXPECTED_TOOLS  # not served: see UNSERVED_MEMORY_TOOLS
    for name in WORKSPACE_TOOLS:
        spec = TOOLS[name]
        assert tools[name].input_schema == dict(spec.parameters)
        expected = spec.description.replace("\n" + STATELESS_DROPS[name], "") if name in STATELESS_DROPS \
            else spec.description
        assert tools[name].description == expected
    assert tools["recall"].input_schema == dict(recall.spec.parameters)
    for name in MEMORY_TOOLS:
        assert tools[name].input_schema == dict(MEMORY_SPECS[name].parameters)
        assert tools[name].description == MEMORY_SPECS[name].description
    # Written for a model: read's description states its caps and how to continue, in paragraphs.
    assert "2000 lines or 50.0KB" in tools["read"].description and "offset=2001" in tools["read"].description
    assert "unchanged" not in tools["read"].description  # the server keeps no read state (see STATELESS_DROPS)
    assert tools["read"].annotations.read_only_hint and not tools["shell"].annotations.read_only_hint


def test_the_stateless_drop_matches_the_library_description() -> None:
    """If read's docstring changes, the sentence the server drops must be updated with it."""
    for name, sentence in STATELESS_DROPS.items():
        assert sentence in TOOLS[name].description.split("\n")


# --------------------------------------------------------------------------------------------------
# Workspace tools: the library's output, byte for byte


@pytest.mark.parametrize(("name", "arguments"), [
    ("read", {"path": "big.log", "offset": 1}),
    ("read", {"path": "big.log", "offset": 5995}),
    ("read", {"path": "src/app.py"}),
    ("grep", {"pattern": "def \\w+", "path": "src"}),
    ("grep", {"pattern": "lorem", "limit": 3}),
    ("find", {"pattern": "*.py"}),
    ("ls", {"path": "."}),
    ("query_json", {"handle": "data.json", "expr": '[.items[] | select(.status == "error") | .id]'}),
])
def test_workspace_tools_answer_as_the_library_does(client: Connected, world: World, name: str,
                                                    arguments: dict[str, Any]) -> None:
    result = client.call(name, arguments)
    library = run_tool(name, arguments, world.workspace())
    assert not result.is_error and not library.is_error
    assert text_of(result) == library.text
    assert result.meta is not None and result.meta[DETAILS_META] == json.loads(json.dumps(dict(library.details)))


def test_read_pages_a_big_file_with_the_caps_and_notices(client: Connected) -> None:
    whole = client.call("read", {"path": "big.log"})
    assert whole.is_error and "over the 256.0KB limit" in text_of(whole)
    seen: list[int] = []
    offset = 1
    for _ in range(20):  # follow the notices to the end, as a model would
        result = client.call("read", {"path": "big.log", "offset": offset})
        text = text_of(result)
        details = result.meta[DETAILS_META] if result.meta else {}
        assert not result.is_error and len(text.encode()) <= 50 * 1024 + 200  # the cap, plus the notice
        seen.extend(range(details["start"], details["end"] + 1))
        if details["next_offset"] is None:
            assert "continue" not in text and "line 6000 lorem" in text
            break
        assert text.endswith(f"(50.0KB limit). Use offset={details['next_offset']} to continue.]")
        offset = details["next_offset"]
    assert seen == list(range(1, 6001))
    page = text_of(client.call("read", {"path": "big.log", "offset": 10, "limit": 2}))
    assert page.startswith("    10\tline 10 lorem") and "Use offset=12 to continue." in page


def test_read_attaches_an_image_as_image_content(client: Connected) -> None:
    result = client.call("read", {"path": "dot.png"})
    assert not result.is_error
    text, image = result.content
    assert text.type == "text" and "dot.png: 1x1" in text.text
    assert image.type == "image" and image.mime_type == "image/png" and base64.b64decode(image.data) == png_1x1()


def test_a_slow_call_does_not_hold_up_the_others(client: Connected) -> None:
    """Tools run in worker threads: a read answers while a shell command is still running."""
    started = time.monotonic()
    slow = client.portal.start_task_soon(client.client.call_tool, "shell", {"command": "sleep 1.5; echo slept"})
    quick = client.call("ls", {"path": "src"})
    assert not quick.is_error and time.monotonic() - started < 1.2
    assert "slept" in text_of(slow.result(timeout=30))


def test_shell_spills_into_the_blob_store_and_read_spilled_pages_it(client: Connected) -> None:
    result = client.call("shell", {"command": "seq 1 5000"})
    text = text_of(result)
    assert not result.is_error and "\n5000" in text and "\n10\n" not in text  # only the tail is shown
    handle = next(word.strip(".,;:()[]`'\"") for word in text.split() if word.strip("`'\"(").startswith("blob:"))
    page = client.call("read_spilled", {"handle": handle, "offset": 1, "limit": 3})
    assert not page.is_error and text_of(page).startswith("     1\t1\n     2\t2\n     3\t3")


def test_spilled_output_tools(client: Connected, world: World) -> None:
    ws = world.workspace()
    for name, arguments in (
        ("read_spilled", {"handle": world.blob, "offset": 3990}),
        ("read_spilled", {"handle": world.blob}),
        ("grep_spilled", {"handle": world.blob, "pattern": "FAILED"}),
        ("query_json", {"handle": world.json_blob, "expr": "[.rows[] | select(.k > 97) | .v]"}),
    ):
        result = client.call(name, arguments)
        assert not result.is_error
        assert text_of(result) == run_tool(name, arguments, ws).text
    assert text_of(client.call("read_spilled", {"handle": world.blob})).endswith(
        "[Showing lines 1-1161 of 4001 (50.0KB limit). Use offset=1162 to continue.]")
    assert "FAILED test_zeta" in text_of(client.call("grep_spilled", {"handle": world.blob, "pattern": "FAILED"}))
    assert "9604" in text_of(client.call("query_json", {"handle": world.json_blob, "expr": ".rows[98].v"}))


# --------------------------------------------------------------------------------------------------
# recall


def test_recall_returns_a_logged_result_exactly_page_by_page(client: Connected, world: World) -> None:
    pieces: list[str] = []
    offset = 0
    for _ in range(10):
        result = client.call("recall", {"ref": world.result_ref, "offset": offset})
        assert not result.is_error
        details = result.meta[DETAILS_META] if result.meta else {}
        end = details["end"]
        text = text_of(result)
        pieces.append(text[: end - offset])
        if not details["truncated"]:
            assert text == world.result_text[offset:]
            break
        assert len(text[: end - offset].encode()) <= 50 * 1024
        assert text.endswith(f"Use offset={end} to continue.]")
        offset = end
    assert len(pieces) > 1 and "".join(pieces) == world.result_text
    assert text_of(client.call("recall", {"ref": world.user_ref})) == "Deploy the parser fix to staging on port 8443"
    blob = client.call("recall", {"ref": world.blob, "offset": len(world.blob_text) - 17})
    assert text_of(blob) == "FAILED test_zeta\n"
    limited = client.call("recall", {"ref": world.user_ref, "offset": 11, "limit": 6})
    assert text_of(limited) == "parser\n\n[Characters 11-17 of 45 shown. Use offset=17 to continue.]"
    past = client.call("recall", {"ref": world.user_ref, "offset": 10_000})
    assert past.is_error and "past the end" in text_of(past)


@given(st.text(), st.integers(min_value=0, max_value=64))
def test_a_recall_page_is_the_longest_whole_character_prefix_within_the_cap(text: str, max_bytes: int) -> None:
    cut = _cut(text, max_bytes)
    assert text.startswith(cut) and len(cut.encode("utf-8", "surrogatepass")) <= max_bytes
    assert cut == text or len(text[: len(cut) + 1].encode("utf-8", "surrogatepass")) > max_bytes


# --------------------------------------------------------------------------------------------------
# Memory tools and conversation_search


def test_memory_tools(client: Connected, world: World) -> None:
    found = client.call("memory_search", {"query": "staging database port"})
    assert not found.is_error and "MEMORY.md" in text_of(found) and "5433" in text_of(found)
    got = client.call("memory_get", {"path": "memory/2026-01-05.md"})
    assert text_of(got) == "Decided to pin numpy below 3 for the release.\n"
    name = f"/memories/{client.transport}-notes.md"
    assert not client.call("memory", {"command": "create", "path": name, "file_text": "release on friday\n"}).is_error
    assert not client.call("memory", {"command": "str_replace", "path": name, "old_str": "friday",
                                      "new_str": "monday"}).is_error
    view = client.call("memory", {"command": "view", "path": name})
    assert "release on monday" in text_of(view)
    assert (world.memory / "memory" / f"{client.transport}-notes.md").read_text() == "release on monday\n"


def test_conversation_search_sees_what_the_agent_logs_while_serving(client: Connected, world: World) -> None:
    hits = client.call("conversation_search", {"query": "staging port 8443"})
    assert not hits.is_error and world.user_ref in text_of(hits)
    marker = f"rollback-{client.transport}-token-Q7Z"
    with Session.open(world.session, lock_timeout=10) as log:  # the agent appends after the server started
        entry = log.append("message", Message("user", (Text(f"Remember the {marker} for the rollback"),)).to_dict())
    later = client.call("conversation_search", {"query": marker})
    assert f"entry:{entry.id}" in text_of(later)
    assert marker in text_of(client.call("recall", {"ref": f"entry:{entry.id}"}))


def test_semantic_search_files_finds_the_roots_files_never_a_denied_one(client: Connected) -> None:
    found = client.call("semantic_search_files", {"query": "respond event ValueError E4711"})
    assert not found.is_error and found.meta is not None
    assert found.meta[DETAILS_META]["results"][0]["path"] == "src/app.py" and "E4711" in text_of(found)
    for token in SECRETS.values():  # the secrets share the query's words: only the deny list keeps them out
        result = client.call("semantic_search_files", {"query": f"{token} respond event handler", "limit": 20})
        assert not result.is_error and token not in result.model_dump_json()
        paths = {r["path"] for r in result.meta[DETAILS_META]["results"]} if result.meta else set()
        assert paths and not paths & set(SECRETS), paths


# --------------------------------------------------------------------------------------------------
# Refusals: tool errors with the library's message, never protocol errors


@pytest.mark.parametrize(("name", "arguments", "says"), [
    ("read", {"path": "../outside.txt"}, "outside the workspace roots"),
    ("read", {"path": "/etc/passwd"}, "outside the workspace roots"),
    ("read", {"path": ".env"}, "deny pattern"),
    ("read", {"path": "logo.bin"}, "is a binary file"),
    ("read", {"path": "big.log"}, "over the 256.0KB limit"),
    ("read", {"path": "missing.txt"}, ""),
    ("read", {"path": "big.log", "offset": 0}, "must be at least 1"),
    ("read", {"path": 7}, "path must be a string"),
    ("read", {"path": "big.log", "bogus": True}, "read has no argument bogus"),
    ("read", {}, "read needs path"),
    ("grep", {"pattern": "(unclosed"}, ""),
    ("ls", {"path": "big.log"}, ""),
    ("read_spilled", {"handle": "blob:000000000000"}, "no blob"),
    ("read_spilled", {"handle": "blob:0"}, "not a blob handle"),
    ("query_json", {"handle": "data.json", "expr": ".items[] | ]["}, ""),
    ("recall", {"ref": "entry:nope"}, "no such entry"),
    ("recall", {"ref": "something"}, "not a recall reference"),
    ("memory", {"command": "view", "path": "/memories/../../etc"}, ""),
    ("memory_get", {"path": "../secret.md"}, ""),
    ("memory", {"command": "explode"}, "must be one of"),
    ("semantic_search_files", {"query": "  "}, "the search query is empty"),
    ("open_files", {"files": [{"file_name": "id_rsa"}]}, "Unknown tool 'open_files'"),
    ("no_such_tool", {}, "Unknown tool 'no_such_tool'"),
])
def test_refusals_are_tool_errors(client: Connected, world: World, name: str, arguments: dict[str, Any],
                                  says: str) -> None:
    result = client.call(name, arguments)  # an MCPError (protocol error) would raise here
    assert result.is_error, text_of(result)
    text = text_of(result)
    assert says in text and text.strip() and "Traceback" not in text
    if name in TOOLS:  # the library's own message, word for word
        assert text == run_tool(name, arguments, world.workspace()).text


# --------------------------------------------------------------------------------------------------
# HTTP: the token, loopback


def test_http_refuses_requests_without_the_token(http_server: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for extra in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        response = httpx.post(http_server, json=body, headers={**headers, **extra}, timeout=10)
        assert response.status_code == 401 and response.headers["www-authenticate"].startswith("Bearer")
    allowed = httpx.post(http_server, json=body, headers={**headers, "Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert allowed.status_code == 200 and "ctxwin" in allowed.text  # the server's initialize answer
    # On loopback the SDK's DNS-rebinding guard also stands: a page on another site cannot drive it.
    rebound = httpx.post(http_server, json=body, timeout=10, headers={
        **headers, "Authorization": f"Bearer {TOKEN}", "Origin": "http://evil.example"})
    assert rebound.status_code == 403


def test_a_non_loopback_address_needs_a_token(world: World) -> None:
    assert is_loopback("127.0.0.2") and is_loopback("localhost") and not is_loopback("10.0.0.1")
    check_exposure("127.0.0.1", None)
    check_exposure("::1", None)
    check_exposure("0.0.0.0", "t")
    for host in ("0.0.0.0", "192.168.1.4", "example.org", "::"):
        with pytest.raises(InputError, match="needs a token"):
            check_exposure(host, None)
    done = cli("mcp", "--root", str(world.root), "--http", "0.0.0.0:8765")
    assert done.returncode == 2 and "needs a token" in done.stderr and "CTXWIN_MCP_TOKEN" in done.stderr


@pytest.mark.parametrize(("text", "address"), [
    ("127.0.0.1:8765", ("127.0.0.1", 8765)), ("8765", ("127.0.0.1", 8765)), (":8765", ("127.0.0.1", 8765)),
    ("[::1]:9000", ("::1", 9000)), ("localhost:80", ("localhost", 80)),
])
def test_parse_address(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


@pytest.mark.parametrize("text", ["", "host", "1.2.3.4:0", "1.2.3.4:70000", "[::1]", "a:b:c"])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(InputError, match="HOST:PORT"):
        parse_address(text)


# --------------------------------------------------------------------------------------------------
# Configuration and layering


def test_bad_configuration_is_a_clear_error(world: World, tmp_path: Path) -> None:
    """InputErrors, which the CLI prints as one line and exit 2 (as the token refusal above shows)."""
    with pytest.raises(InputError, match="not a folder"):
        Toolset(McpConfig(roots=(tmp_path / "missing",)))
    with pytest.raises(InputError, match="no stored session"):
        Toolset(McpConfig(roots=(world.root,), session=tmp_path))


def test_without_a_blob_store_or_shell_those_tools_are_not_offered(world: World) -> None:
    served = Toolset(McpConfig(roots=(world.root,))).names()
    assert served == ["read", "grep", "find", "ls", "query_json"]


def test_a_session_alone_serves_recall_and_conversation_search(world: World) -> None:
    toolset = Toolset(McpConfig(roots=(world.root,), session=world.session, embedder="hash"))
    try:
        assert toolset.names() == ["read", "grep", "find", "ls", "read_spilled", "grep_spilled", "query_json",
                                   "recall", "conversation_search"]
        hits = toolset.call("conversation_search", {"query": "parser fix staging"})
        assert not hits.is_error and world.user_ref in hits.text
        assert hits.details["results"][0]["ref"] == world.user_ref
    finally:
        toolset.close()


def test_the_cli_does_not_import_the_sdk_until_mcp_runs() -> None:
    code = "import sys; import ctxwin.cli.main; assert 'mcp' not in sys.modules and 'ctxwin.mcp' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
