"""Memory input a model or a user can hand the index (issue 28): a query that is one long word is
matched in linear time on every path (ctxwin search, memory_search, conversation_search, MCP); hard
links are refused by the memory tools and the index as the workspace tools refuse them; a binary
MEMORY.md is refused by the index and by the bootstrap, each with a message; `memory index` reports
the chunks it holds."""

from __future__ import annotations

import os
import time
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxwin.cli.main import app
from ctxwin.files import BINARY_REFUSAL
from ctxwin.memory import HashEmbedder, MemoryIndex, MemoryTools, bootstrap_files, chunks, dates, hops
from ctxwin.memory.backend import identifiers
from ctxwin.messages import user
from ctxwin.policies.model import BootstrapPolicy
from ctxwin.store.in_memory import MemorySessionLog


def _workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text("# Ports\nThe staging proxy listens on port 8443.\n")
    return root


def test_a_long_word_query_takes_linear_time(tmp_path: Path) -> None:
    # Python's `re` took 8.8 s on 16,000 characters here: IDENTIFIER backtracked at every position of
    # a long word, quadratic, so 256,000 would take about 2,000 s. The patterns that read a query run
    # on RE2, linear by construction whatever the text holds.
    for pattern in (chunks.IDENTIFIER, dates._RELATIVE, dates._MONTH_YEAR, hops._FIELD, hops._NAME):
        assert type(pattern).__module__ == "re2", pattern
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.index_workspace(_workspace(tmp_path))
        started = time.process_time()
        for hop_count in (1, 3):
            index.search("x" * 256_000 + "-", k=5, mode="bm25", hops=hop_count)
        # A bound on work, not a timing test: CPU time (other processes' load does not count), linear
        # work is about 0.05 s, the quadratic pattern thousands of seconds: 10 s is far from both.
        assert time.process_time() - started < 10
        assert identifiers("y" * 200_000 + "-z") == ["y" * 200_000 + " z"]


def test_every_search_path_takes_a_100k_word(tmp_path: Path) -> None:
    word = "frobnicate" * 10_000
    root = _workspace(tmp_path)
    log = MemorySessionLog(session_id="s1")
    log.append("message", user("the staging proxy listens on port 8443").to_dict())
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        index.add_entries(log, "s1")
        tools = MemoryTools(root, index, session="s1")
        for name in ("memory_search", "conversation_search", "semantic_search_files"):
            started = time.process_time()
            out = tools.run(name, {"query": word})
            assert not out.is_error, out.text
            assert time.process_time() - started < 20  # a bound on work, far above linear, far below 60 s
    runner = CliRunner()
    session = tmp_path / "t.jsonl"
    session.write_text('{"role": "user", "content": "hello there"}\n')
    result = runner.invoke(app, ["search", str(session), word[:100_000], "--json"])
    assert result.exit_code == 0, result.output


def test_hard_links_are_refused_by_the_memory_tools_and_the_index(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("the root password is hunter2\n")
    os.link(secret, root / "memory" / "2026-01-01.md")
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        report = index.index_workspace(root)
        assert any("hard links" in p and "2026-01-01.md" in p for p in report.problems)
        assert not [h for h in index.search("root password hunter2", k=5) if "hunter2" in h.text]
        tools = MemoryTools(root, index)
        got = tools.run("memory_get", {"path": "memory/2026-01-01.md"})
        assert got.is_error and "hard links" in got.text and "hunter2" not in got.text
        view = tools.run("memory", {"command": "view", "path": "/memories/2026-01-01.md"})
        assert view.is_error and "hunter2" not in view.text


def test_a_binary_memory_file_is_refused_by_the_index_and_the_bootstrap(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    (root / "MEMORY.md").write_bytes(b"\x7fELF\x00\x01\x02 staging proxy")
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        report = index.index_workspace(root)
    assert report.problems == [f"MEMORY.md: {BINARY_REFUSAL}"]
    files = dict(bootstrap_files(root, date(2026, 1, 2), BootstrapPolicy(enabled=True, files=[])))
    assert files["MEMORY.md"] == f"[MEMORY.md was not loaded: {BINARY_REFUSAL}.]"
    result = CliRunner().invoke(app, ["memory", "index", "--workspace", str(root), "--embedder", "hash"])
    assert result.exit_code == 0 and "binary" in result.output


def test_memory_index_reports_the_chunks_it_holds(tmp_path: Path) -> None:
    root = _workspace(tmp_path)
    (root / "MEMORY.md").write_text("a" * 2_500_000 + "\n")  # one line: 3,125 identical pieces, held once
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        report = index.index_workspace(root)
        assert report.chunks_added == index.stats()["chunks"] == 1
    result = CliRunner().invoke(app, ["memory", "index", "--workspace", str(root), "--embedder", "hash", "--rebuild"])
    assert result.exit_code == 0 and "1 chunk(s) added" in result.output and "1 chunks" in result.output


@pytest.mark.parametrize("ref", ["memory/2026-01-01.md:2-3", "memory/2026-01-01.md:2"])
def test_memory_get_reads_a_hits_ref(tmp_path: Path, ref: str) -> None:
    root = _workspace(tmp_path)
    (root / "memory" / "2026-01-01.md").write_text("one\ntwo\nthree\nfour\n")
    with MemoryIndex.open(tmp_path / "i.sqlite", HashEmbedder()) as index:
        out = MemoryTools(root, index).run("memory_get", {"path": ref})
    assert out.text == ("two\nthree" if ref.endswith("-3") else "two")
