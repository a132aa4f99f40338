"""The guarded reader: regular files only, size and decompression caps, bounded JSON depth."""

from __future__ import annotations

import gzip
import json
import os
import socket
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwin import files
from ctxwin.errors import (
    FileTooLargeError,
    InputError,
    JSONTooDeepError,
    MalformedJSONError,
    NotARegularFileError,
)
from ctxwin.files import (
    FileLimits,
    iter_lines,
    json_depth,
    loads_json,
    may_hold_surrogates,
    open_regular,
    read_bytes,
    read_file,
    read_text,
    replace_surrogates,
)

SRC = Path(__file__).resolve().parents[1] / "src"


def run_python(code: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter, so a hang fails the test by timeout instead of hanging it."""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)


def test_regular_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"one\ntwo\n")
    assert read_bytes(path) == b"one\ntwo\n"
    assert read_text(path) == "one\ntwo\n"
    with open_regular(path) as handle:
        assert handle.read() == b"one\ntwo\n"


def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code = (
        "from ctxwin.files import read_bytes\nfrom ctxwin.errors import NotARegularFileError\n"
        f"try:\n    read_bytes({str(fifo)!r})\nexcept NotARegularFileError as e:\n    print('refused', e)\n"
    )
    result = run_python(code, timeout=20)  # a hang guard: an open() of a FIFO with no writer never returns
    assert result.returncode == 0, result.stderr
    assert "refused" in result.stdout and "FIFO" in result.stdout


@pytest.mark.parametrize("kind", ["device", "directory", "socket"])
def test_special_files_are_refused(tmp_path: Path, kind: str) -> None:
    if kind == "device":
        path = Path("/dev/zero")
    elif kind == "directory":
        path = tmp_path
    else:
        path = tmp_path / "sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    with pytest.raises(NotARegularFileError) as caught:
        read_bytes(path)
    assert str(path) in str(caught.value)


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_bytes(tmp_path / "nope")


def test_size_cap(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 1000)
    assert len(read_bytes(path, limits=FileLimits(max_bytes=1000))) == 1000
    with pytest.raises(FileTooLargeError, match=r"cap of 999 bytes \(1,000 bytes\).*max_bytes"):
        read_bytes(path, limits=FileLimits(max_bytes=999))


def test_gzip_is_decompressed_including_several_members(tmp_path: Path) -> None:
    path = tmp_path / "a.gz"
    path.write_bytes(gzip.compress(b"first\n") + gzip.compress(b"second\n"))
    assert read_bytes(path) == b"first\nsecond\n"
    assert list(iter_lines(path)) == [(1, b"first"), (2, b"second")]
    content = read_file(path)
    assert content.compressed and not content.truncated


def test_gzip_bomb_stops_at_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "bomb.gz"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * (1 << 20)
    path.write_bytes(b"".join(compressor.compress(block) for _ in range(64)) + compressor.flush())
    limits = FileLimits(max_decompressed_bytes=8 << 20)
    with pytest.raises(FileTooLargeError) as caught:
        read_bytes(path, limits=limits)
    assert "decompressed size cap of 8,388,608" in str(caught.value)
    assert "max_decompressed_bytes" in str(caught.value)
    with pytest.raises(FileTooLargeError):
        list(iter_lines(path, limits=limits))


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "cut.gz"
    whole = gzip.compress(b"".join(b'{"n": %d}\n' % i for i in range(5000)))
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError, match="truncated gzip"):
        read_bytes(path)
    content = read_file(path)
    assert content.truncated and content.data.startswith(b'{"n": 0}\n')
    with pytest.raises(InputError, match="truncated gzip"):
        list(iter_lines(path))


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "bad.gz"
    path.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(InputError, match="not a readable gzip"):
        read_bytes(path)


def test_read_text_strict_and_replace(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbfok\nbad \xff here\n")
    with pytest.raises(InputError, match="line 2"):
        read_text(path)
    assert read_text(path, errors="replace") == "ok\nbad \ufffd here\n"


def test_iter_lines_keeps_long_lines_whole(tmp_path: Path) -> None:
    path = tmp_path / "lines"
    long = b"y" * (3 << 20)  # longer than a read chunk
    path.write_bytes(b"a\n" + long + b"\n\nlast")
    assert list(iter_lines(path)) == [(1, b"a"), (2, long), (3, b""), (4, b"last")]


def test_deep_json_is_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused by the bracket count alone: the parser (and its recursion) never sees it. (How fast:
    benchmarks/files.py.)"""
    deep = "[" * 5000 + "]" * 5000
    parsed: list[object] = []
    monkeypatch.setattr(files.json, "loads", lambda text, **kw: parsed.append(text))
    with pytest.raises(JSONTooDeepError, match="5,000 levels"):
        loads_json(deep)
    with pytest.raises(JSONTooDeepError):
        loads_json(deep.encode())
    assert parsed == []


def test_depth_limit_is_exact() -> None:
    assert loads_json("[" * 200 + "]" * 200, max_depth=200) is not None
    with pytest.raises(JSONTooDeepError):
        loads_json("[" * 201 + "]" * 201, max_depth=200)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"s": "[" * 1000 + '\\"{' * 500})
    assert loads_json(text)["s"].startswith("[[[")


def test_wide_large_json_is_read_in_one_parse_and_one_depth_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many brackets but shallow: one depth scan (it has more brackets than the limit) and one parse,
    nothing per bracket. (How fast: benchmarks/files.py, `wide_json_seconds`.)"""
    text = json.dumps([{"a": [i, {"b": "x" * 50}]} for i in range(200_000)])  # ~ 13 MB, many brackets
    calls = {"depth": 0, "parse": 0}
    real_depth, real_loads = files.json_depth, files.json.loads

    def depth(value: str | bytes) -> int:
        calls["depth"] += 1
        return real_depth(value)

    def loads(value: str | bytes, **kw: object) -> object:
        calls["parse"] += 1
        return real_loads(value, **kw)

    monkeypatch.setattr(files, "json_depth", depth)
    monkeypatch.setattr(files.json, "loads", loads)
    assert len(loads_json(text)) == 200_000
    assert calls == {"depth": 1, "parse": 1}
    assert real_depth(text) == 4


def test_malformed_json_has_a_position() -> None:
    with pytest.raises(MalformedJSONError) as caught:
        loads_json('{"a": 1,\n "b": }')
    assert (caught.value.lineno, caught.value.colno) == (2, 7)
    assert "line 2, column 7" in str(caught.value)
    with pytest.raises(MalformedJSONError):
        loads_json(b"\xff\xfe{")


def test_surrogates_replaced_everywhere() -> None:
    text = '{"a": ["ok \\ud83d", {"\\udc00k": "\\ud83d\\ude00"}]}'
    assert may_hold_surrogates(text) and may_hold_surrogates(text.encode())
    assert not may_hold_surrogates('{"a": "\\u00e9"}')
    value, count = replace_surrogates(loads_json(text))
    assert count == 2
    assert value == {"a": ["ok \ufffd", {"\ufffdk": "\U0001f600"}]}
    json.dumps(value).encode("utf-8")


def test_replace_surrogates_handles_deep_values() -> None:
    value: Any = "\ud800"
    for _ in range(10_000):
        value = [value]
    _, count = replace_surrogates(value)
    assert count == 1


def _reference_depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_reference_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_reference_depth(v) for v in value.values()), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('ab[]{}"\\\n')),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=30,
)


@given(json_values)
@settings(max_examples=300, deadline=None)
def test_json_depth_matches_the_structure(value: Any) -> None:
    text = json.dumps(value)
    assert json_depth(text) == _reference_depth(value)
    assert json_depth(text.encode()) == _reference_depth(value)
