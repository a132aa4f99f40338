"""The workspace sandbox: every refusal is a clear message, none a hang (each call runs under a
watchdog thread), on real files, FIFOs, sockets, devices and sparse files."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from ctxwin.tools import DEFAULT_DENY, Limits, ToolError, Workspace, find, find_rg, grep, ls, read
from ctxwin.tools.workspace import deny_match
from guards import within

WATCHDOG_S = 10.0  # a refusal that takes longer than this counts as a hang
ENGINES = ("rg", "python") if find_rg() else ("python",)  # grep engines to check


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("hello\nworld\n")
    (root / "sub").mkdir()
    (root / "sub" / "inner.txt").write_text("inner\n")
    (tmp_path / "outside.txt").write_text("secret outside\n")
    return root


def refused(output: Any, reason: str, *words: str) -> str:
    assert output.is_error, output.text
    assert output.details["error"] == reason, (output.details, output.text)
    for word in words:
        assert word in output.text, (word, output.text)
    return str(output.text)


def test_dotdot_escape_is_refused_naming_the_roots(tree: Path) -> None:
    ws = Workspace([tree])
    text = refused(within(WATCHDOG_S, read, ws, "../outside.txt"), "outside_roots", "outside the workspace roots")
    assert str(tree) in text
    assert "secret outside" not in text
    refused(within(WATCHDOG_S, read, ws, "sub/../../outside.txt"), "outside_roots")


def test_absolute_path_outside_is_refused(tree: Path) -> None:
    ws = Workspace([tree])
    refused(within(WATCHDOG_S, read, ws, str(tree.parent / "outside.txt")), "outside_roots")
    refused(within(WATCHDOG_S, read, ws, "/etc/passwd"), "outside_roots", "/etc/passwd")
    # An absolute path inside the root is fine.
    assert "hello" in within(WATCHDOG_S, read, ws, str(tree / "notes.txt")).text


def test_symlink_pointing_out_is_refused(tree: Path) -> None:
    (tree / "link.txt").symlink_to(tree.parent / "outside.txt")
    (tree / "linkdir").symlink_to(tree.parent)
    ws = Workspace([tree])
    refused(within(WATCHDOG_S, read, ws, "link.txt"), "outside_roots", "outside.txt")
    refused(within(WATCHDOG_S, read, ws, "linkdir/outside.txt"), "outside_roots")
    refused(within(WATCHDOG_S, ls, ws, "linkdir"), "outside_roots")
    # A symlink that stays inside is followed.
    (tree / "inside-link").symlink_to(tree / "notes.txt")
    assert "hello" in within(WATCHDOG_S, read, ws, "inside-link").text


def test_tilde_expands_to_home(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tree))
    ws = Workspace([tree])
    assert "hello" in read(ws, "~/notes.txt").text
    monkeypatch.setenv("HOME", str(tree.parent))
    refused(read(ws, "~/outside.txt"), "outside_roots")


def test_dev_zero_is_refused(tree: Path) -> None:
    refused(within(WATCHDOG_S, read, Workspace([tree]), "/dev/zero"), "outside_roots")
    # Even with /dev as a root, a device is refused from stat, before anything is opened.
    text = refused(within(WATCHDOG_S, read, Workspace(["/dev"]), "/dev/zero", offset=1, limit=5), "device")
    assert "character device" in text
    refused(within(WATCHDOG_S, grep, Workspace(["/dev"]), "x", "/dev/zero"), "device")


def test_fifo_is_refused_without_blocking(tree: Path) -> None:
    fifo = tree / "pipe"
    os.mkfifo(fifo)
    ws = Workspace([tree])
    text = refused(within(WATCHDOG_S, read, ws, "pipe"), "fifo", "FIFO")
    assert "block" in text
    refused(within(WATCHDOG_S, read, ws, "pipe", offset=1, limit=1), "fifo")
    refused(within(WATCHDOG_S, grep, ws, "x", "pipe"), "fifo")
    # Walking a tree that holds a FIFO skips it in every tool (and both grep engines).
    for engine in ENGINES:
        assert "hello" in within(WATCHDOG_S, grep, ws, "hello", engine=engine).text
    assert "pipe" not in within(WATCHDOG_S, find, ws, "*").text
    assert "pipe" in within(WATCHDOG_S, ls, ws).text  # listed by name, never opened


def test_socket_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "r"  # AF_UNIX paths are short: keep it near the top of tmp
    root.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(root / "s.sock"))
        refused(within(WATCHDOG_S, read, Workspace([root]), "s.sock"), "socket")
    finally:
        server.close()


def test_one_gigabyte_sparse_file_is_refused_from_stat(tree: Path) -> None:
    sparse = tree / "sparse.log"
    with open(sparse, "wb") as handle:
        handle.truncate(1024**3)
    ws = Workspace([tree])
    text = refused(within(WATCHDOG_S, read, ws, "sparse.log"), "too_large", "1024.0MB", "offset", "grep")
    assert "256.0KB" in text
    # Paging it reads only the first 8 KB: all NUL bytes, so it is described as binary.
    refused(within(WATCHDOG_S, read, ws, "sparse.log", offset=1, limit=10), "binary", "1024.0MB")
    for engine in ENGINES:
        assert within(WATCHDOG_S, grep, ws, "hello", engine=engine).details["matches"] == 1


def test_large_text_file_pages_without_reading_it_whole(tree: Path) -> None:
    """Text at the start of a 1 GB sparse file: paging stops counting at the cap instead of reading 1 GB."""
    big = tree / "big.txt"
    with open(big, "wb") as handle:
        handle.write(b"".join(b"line %d\n" % n for n in range(1, 50_001)))
        handle.truncate(1024**3)
    ws = Workspace([tree], limits=Limits(count_lines_max_bytes=1024 * 1024))
    out = within(WATCHDOG_S, read, ws, "big.txt", offset=100, limit=3)
    assert not out.is_error, out.text
    assert out.text.startswith("   100\tline 100\n   101\tline 101\n   102\tline 102")
    assert "More lines in file. Use offset=103 to continue." in out.text
    assert out.details["total_lines"] is None


def test_binary_file_is_described_not_dumped(tree: Path) -> None:
    blob = tree / "tool.bin"
    blob.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 40)
    ws = Workspace([tree])
    text = refused(within(WATCHDOG_S, read, ws, "tool.bin"), "binary", "ELF", "10.0KB")
    assert "\x00" not in text
    gz = tree / "data.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00" + bytes([200, 201, 202, 255]) * 100)
    refused(read(ws, "data.gz"), "binary", "gzip")
    latin = tree / "latin1.dat"
    latin.write_bytes(bytes(range(128, 256)) * 10)
    refused(read(ws, "latin1.dat"), "binary", "not UTF-8")


def test_deny_listed_files_are_refused(tree: Path) -> None:
    (tree / ".env").write_text("API_KEY=sk-live-123\n")
    (tree / ".env.local").write_text("TOKEN=abc\n")
    (tree / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (tree / "server.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tree / ".aws").mkdir()
    (tree / ".aws" / "credentials").write_text("[default]\naws_secret_access_key=zzz\n")
    (tree / "innocent.txt").symlink_to(tree / ".env")
    ws = Workspace([tree])
    for name in (".env", ".env.local", "id_rsa", "server.pem", ".aws/credentials", "innocent.txt", "sub/../.env"):
        text = refused(within(WATCHDOG_S, read, ws, name), "denied", "deny pattern")
        assert "sk-live" not in text and "aws_secret" not in text
    # Search never shows their content, with either engine.
    for engine in ENGINES:
        out = within(WATCHDOG_S, grep, ws, "sk-live|aws_secret|TOKEN", engine=engine)
        assert out.text == "No matches found", (engine, out.text)
    assert ".env" not in find(ws, "*env*").text
    # A custom deny list replaces the default one.
    assert "sk-live" in read(Workspace([tree], deny=()), ".env").text


def test_deny_match_rules() -> None:
    assert deny_match(".env", DEFAULT_DENY) == ".env*"
    assert deny_match("config/.ENV.production", DEFAULT_DENY) == ".env*"
    assert deny_match("home/.aws/credentials", DEFAULT_DENY) in ("credentials*", ".aws/credentials")
    assert deny_match("keys/id_ed25519.pub", DEFAULT_DENY) == "id_ed25519*"
    assert deny_match(".docker/config.json", DEFAULT_DENY) == ".docker/config.json"
    assert deny_match("docker/config.json", DEFAULT_DENY) is None
    assert deny_match("src/environment.py", DEFAULT_DENY) is None
    assert deny_match("README.md", DEFAULT_DENY) is None


def test_directory_and_missing_paths(tree: Path) -> None:
    ws = Workspace([tree])
    refused(read(ws, "sub"), "is_directory", "ls")
    refused(read(ws, "nope.txt"), "not_found", "ls or find")
    refused(ls(ws, "notes.txt"), "not_directory")
    refused(find(ws, "*", "notes.txt"), "not_directory")


def test_several_roots(tree: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.txt").write_text("beta\n")
    ws = Workspace([tree, other])
    assert "beta" in read(ws, str(other / "b.txt")).text
    assert "hello" in read(ws, "notes.txt").text  # relative paths resolve against the first root
    text = refused(read(ws, str(tmp_path / "outside.txt")), "outside_roots")
    assert str(tree) in text and str(other) in text
    out = grep(ws, "beta", str(other))
    assert out.text == f"{other}/b.txt:1:beta"


def test_bad_roots_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="not a folder"):
        Workspace([tmp_path / "missing"])
    with pytest.raises(ToolError, match="at least one root"):
        Workspace([])
