"""Hostile and unlucky inputs to the tools: items 8-17 of issue 17, one regression test each, named
after the item, plus property-based fuzzing of every tool's arguments through `run_tool`.

Where a regression would hang (or abort the interpreter), the call runs in a child Python process
with a timeout, so it fails instead of hanging CI.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO
from ctxwin.store.blobs import FileBlobStore
from ctxwin.tools import (
    TOOLS,
    Limits,
    ToolOutput,
    Workspace,
    find,
    find_rg,
    grep,
    ls,
    query_json,
    read,
    run_tool,
    shell,
)
from guards import within

ENGINES = ("rg", "python") if find_rg() else ("python",)
SRC = str(REPO / "src")


def in_child(code: str, timeout: float = 60.0) -> Any:
    """Runs `code` (which prints one JSON value last) in a fresh interpreter; fails on a hang."""
    env = {**os.environ, "PYTHONPATH": SRC}
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, timeout=timeout, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the call did not finish within {timeout} s (a hang)")
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])




def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# --------------------------------------------------------------------------------------------------
# Item 8: the sandbox escape by race


SWAPPER = """
import os, sys, time
ws, outside, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
real, hold = os.path.join(ws, "real"), os.path.join(ws, ".hold")
end = time.monotonic() + seconds
swaps = 0
while time.monotonic() < end:
    os.rename(real, hold)          # the folder goes away ...
    os.symlink(outside, real)      # ... a symlink to outside takes its name ...
    os.unlink(real)
    os.rename(hold, real)          # ... and the folder comes back
    swaps += 1
print(swaps)
"""


@pytest.mark.slow
def test_item_08_swap_race_reads_nothing_outside(tmp_path: Path) -> None:
    ws_dir, outside = tmp_path / "ws", tmp_path / "outside"
    (ws_dir / "real").mkdir(parents=True)
    outside.mkdir()
    (ws_dir / "real" / "f.txt").write_text("inside\n")
    (outside / "f.txt").write_text("OUTSIDE-SECRET\n")
    ws = Workspace([ws_dir])
    seconds = 10.0
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(ws_dir), str(outside), str(seconds)],
                               stdout=subprocess.PIPE)
    counts = {"inside": 0, "outside": 0, "refused": 0}
    reasons: set[str] = set()
    end = time.monotonic() + seconds
    calls = 0
    while time.monotonic() < end:
        # Mostly read (the item), now and then the Python grep and ls, which walk the same way.
        calls += 1
        if calls % 10 == 0:
            out = grep(ws, "SECRET|inside", "real", engine="python")
        elif calls % 10 == 5:
            out = ls(ws, "real")
        else:
            out = read(ws, "real/f.txt")
        if "OUTSIDE-SECRET" in out.text:
            counts["outside"] += 1
        elif out.is_error:
            counts["refused"] += 1
            reasons.add(out.details["error"])
        else:
            counts["inside"] += 1
    swaps = int(swapper.communicate(timeout=30)[0])
    assert counts["outside"] == 0, counts
    assert swaps > 100 and counts["inside"] > 0, (swaps, counts)  # the race really ran, and reads still work
    assert reasons <= {"outside_roots", "not_found", "changed", "not_directory", "unreadable"}, reasons


# --------------------------------------------------------------------------------------------------
# Item 9: catastrophic regexes


def test_item_09_backtracking_regex_finishes_quickly(tmp_path: Path) -> None:
    (tmp_path / "line.txt").write_text("a" * 40 + "!\n")
    result = in_child(f"""
        import json, time
        from ctxwin.store.blobs import FileBlobStore
        from ctxwin.tools import Workspace, grep, grep_spilled
        ws = Workspace([{str(tmp_path)!r}], blobs=FileBlobStore({str(tmp_path / "blobs")!r}))
        out = {{}}
        for engine in {list(ENGINES)!r}:
            out[engine] = grep(ws, "(a+)+$", engine=engine).text
        handle = ws.blobs.put(b"a" * 40 + b"!\\n").handle
        out["spilled"] = grep_spilled(ws, handle, "(a+)+$").text
        print(json.dumps(out))
    """, timeout=60)  # a hang guard: backtracking on this line takes about 2**40 steps, hours
    for name, text in result.items():
        assert text == "No matches found", (name, text)


# --------------------------------------------------------------------------------------------------
# Item 10: globs and .gitignore lines that would backtrack


def test_item_10_pathological_globs_and_gitignore_lines(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / ("a" * 80)).write_text("needle\n")
    (root / "sub").mkdir()
    (root / "sub" / ("a" * 70 + "y")).write_text("needle\n")
    (root / ".gitignore").write_text("*" * 35 + "x\n" + "*a" * 30 + "x\n[\n")
    result = in_child(f"""
        import json, time
        from ctxwin.tools import Workspace, find, grep, ls
        ws = Workspace([{str(root)!r}])
        out = {{}}
        for name, call in (
            ("find", lambda: find(ws, "{'*' * 35}x")),
            ("find_star_a", lambda: find(ws, "{'*a' * 30}x")),
            ("ls", lambda: ls(ws)),
            ("find_all", lambda: find(ws, "*")),
            ("grep_glob", lambda: grep(ws, "needle", glob="{'*' * 35}x", engine="python")),
        ):
            out[name] = call().text
        print(json.dumps(out))
    """, timeout=60)  # a hang guard: a backtracking glob matcher takes hours on these names
    assert result["find"].startswith("No files found")
    assert "a" * 80 in result["ls"] and "sub/" in result["ls"]
    assert "sub/" + "a" * 70 + "y" in result["find_all"]


# --------------------------------------------------------------------------------------------------
# Item 11: jq and JMESPath without limits


def test_item_11_query_json_is_bounded(tmp_path: Path) -> None:
    result = in_child(f"""
        import json, time
        from ctxwin.store.blobs import FileBlobStore
        from ctxwin.tools import Limits, Workspace, query_json
        limits = Limits(query_timeout_s=4, query_max_memory_bytes=256 * 1024 * 1024)
        ws = Workspace([{str(tmp_path)!r}], blobs=FileBlobStore({str(tmp_path / "blobs")!r}), limits=limits)
        handle = ws.blobs.put(b'{{"a": [1, 2, 3]}}').handle
        out = {{}}
        for expr in ("repeat(1)", "range(1e7)", "def f: f; f", "[range(1e9)]"):
            found = query_json(ws, handle, expr)
            out[expr] = [found.is_error, found.details.get("error"), found.text]
        deep = "(" * 3000 + "a" + ")" * 3000
        found = query_json(ws, handle, deep, language="jmespath")
        out["jmespath"] = [found.is_error, found.details.get("error"), found.text]
        out["ok"] = [False, None, query_json(ws, handle, ".a | length").text]
        print(json.dumps(out))
    """, timeout=120)
    assert result.pop("ok")[2] == "3"
    assert result["repeat(1)"][1] == result["range(1e7)"][1] == "too_many_results"
    assert result["def f: f; f"][1] == "timeout"  # stopped by the 4 s limit, whatever the machine's load
    assert result["[range(1e9)]"][1] in ("out_of_memory", "timeout")
    for expr, (is_error, reason, text) in result.items():
        assert is_error and reason, (expr, text)


# --------------------------------------------------------------------------------------------------
# Item 12: malformed notebooks


@pytest.mark.parametrize("body", [
    '{"cells":[1,2]}', "[" * 100_000 + "]" * 100_000, '{"cells": {"a": 1}}', '{"cells":[{"outputs":"x"}]}',
    '{"cells":[{"outputs":[{"data": 5}]}]}', '{"cells":[{"outputs":[7]}]}',
])
def test_item_12_malformed_notebooks_are_refused(tmp_path: Path, body: str) -> None:
    (tmp_path / "nb.ipynb").write_text(body)
    out = read(Workspace([tmp_path]), "nb.ipynb")
    assert out.is_error and out.details["error"] == "bad_notebook", out.text
    assert "not a valid notebook" in out.text


# --------------------------------------------------------------------------------------------------
# Item 13: file names with newlines


def test_item_13_newline_file_names(tmp_path: Path) -> None:
    (tmp_path / "a\nb.txt").write_text("needle here\n")
    (tmp_path / "plain.txt").write_text("needle too\n")
    ws = Workspace([tmp_path])
    texts = {engine: grep(ws, "needle", engine=engine).text for engine in ENGINES}
    assert len(set(texts.values())) == 1, texts  # the engines agree
    lines = texts["python"].splitlines()
    assert lines == ['"a\\nb.txt":1:needle here', "plain.txt:1:needle too"]
    assert json.loads(lines[0].rsplit(":1:", 1)[0]) == "a\nb.txt"  # the quoted name is the real one
    listing = ls(ws).text.splitlines()
    assert listing == ['"a\\nb.txt"', "plain.txt"]
    assert find(ws, "*.txt").text.splitlines() == ['"a\\nb.txt"', "plain.txt"]
    assert (tmp_path / json.loads(listing[0])).exists()


# --------------------------------------------------------------------------------------------------
# Item 14: very deep trees


def test_item_14_thousand_folders_deep(tmp_path: Path) -> None:
    root = tmp_path / "root"
    deep = str(root)
    os.mkdir(deep)
    for _ in range(1000):  # pathlib's and os.makedirs' own recursion would hit the limit here
        deep += "/d"
        os.mkdir(deep)
    Path(deep, "bottom.txt").write_text("needle at the bottom\n")
    # After the 1,000 levels, the walk comes back up to d/ (whose descriptor it closed on the way
    # down, keeping at most WALK_OPEN_DIRS open) and must re-open it to reach z.txt.
    (root / "d" / "z.txt").write_text("needle near the top\n")
    try:
        ws = Workspace([root])
        found = within(60, find, ws, "*.txt")
        assert found.text == "/".join(["d"] * 1000) + "/bottom.txt\nd/z.txt", found.text[:200]
        for engine in ENGINES:
            out = within(60, grep, ws, "needle", engine=engine)
            assert out.text.endswith("bottom.txt:1:needle at the bottom\nd/z.txt:1:needle near the top"), engine
        everything = within(60, find, ws, "*", limit=2000)  # all 1,001 paths walked (the text is cut at 50 KB)
        assert everything.details["limit_reached"] is False and everything.text.endswith("[50.0KB limit reached]")
    finally:
        os.unlink(os.path.join(deep, "bottom.txt"))
        os.unlink(root / "d" / "z.txt")
        while deep != str(root):  # shutil.rmtree (pytest's clean-up) recurses too
            os.rmdir(deep)
            deep = os.path.dirname(deep)


# --------------------------------------------------------------------------------------------------
# Item 15: grep's memory


def test_item_15_grep_memory_stays_small_on_huge_one_line_files(tmp_path: Path) -> None:
    line = b"x" * (16 * 1024 * 1024 - 8) + b" needle\n"
    for n in range(6):
        (tmp_path / f"big{n}.txt").write_bytes(line)
    result = in_child(f"""
        import json
        from ctxwin.tools import Workspace, grep

        def peak_kb():  # VmHWM: this address space's peak (ru_maxrss would carry pytest's across exec)
            with open("/proc/self/status") as status:
                return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])

        ws = Workspace([{str(tmp_path)!r}])
        before = peak_kb()
        out = {{engine: grep(ws, "needle", engine=engine).text for engine in {list(ENGINES)!r}}}
        print(json.dumps({{"before_kb": before, "after_kb": peak_kb(), "out": out}}))
    """, timeout=120)
    for text in result["out"].values():
        assert len(text) < 8000 and text.count("\n") < 12, text[:300]
        assert "[Some lines truncated to 500 chars" in text
    # 96 MB of one-line files: the search may hold one file (16 MB) at a time, never all of them.
    assert result["after_kb"] - result["before_kb"] < 48 * 1024, result


# --------------------------------------------------------------------------------------------------
# Item 16: the shell tool


ESCAPES = (
    "setsid sleep 300 & echo $! > {d}/p1; "
    "nohup sleep 300 >/dev/null 2>&1 & echo $! > {d}/p2; "
    "(sleep 300 & echo $! > {d}/p3); "  # double fork: the subshell exits, its child is orphaned
    "(setsid bash -c 'sleep 300 & echo $! > {d}/p4; wait' &); "
    "while [ ! -s {d}/p4 ]; do sleep 0.05; done; echo started"
)


@pytest.mark.parametrize("timeout", [None, 2.0])
def test_item_16_shell_leaves_nothing_running(tmp_path: Path, timeout: float | None) -> None:
    root = tmp_path / "root"
    root.mkdir()
    ws = Workspace([root], allow_shell=True)
    command = ESCAPES.format(d=tmp_path) + ("; sleep 100" if timeout else "")
    out = within(60, shell, ws, command, timeout=timeout)
    assert out.text.startswith("started"), out.text
    assert bool(out.details["timed_out"]) == bool(timeout)
    pids = [int((tmp_path / f"p{n}").read_text()) for n in range(1, 5)]
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if alive(pid)], "processes outlived the shell call"


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, 1e400, -1, 0, 10**400, "nan", "inf"])
def test_item_16_bad_timeouts_are_clear_errors(tmp_path: Path, timeout: object) -> None:
    ws = Workspace([tmp_path], allow_shell=True)
    out = run_tool("shell", {"command": "echo hi", "timeout": timeout}, ws)
    assert out.is_error and out.details["error"] == "bad_argument", out.text
    if isinstance(timeout, float | int):
        direct = shell(ws, "echo hi", timeout=timeout)  # type: ignore[arg-type]
        assert direct.is_error and direct.details["error"] == "bad_argument"


def test_item_16_nul_bytes_are_tool_errors(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("x\n")
    ws = Workspace([tmp_path], allow_shell=True, blobs=FileBlobStore(tmp_path / "b"))
    handle = FileBlobStore(tmp_path / "b").put(b"x\n").handle
    calls = [
        ("shell", {"command": "echo a\x00b"}), ("grep", {"pattern": "a\x00b"}),
        ("grep", {"pattern": "x", "glob": "*\x00"}), ("find", {"pattern": "*\x00"}), ("read", {"path": "f\x00.txt"}),
        ("ls", {"path": "\x00"}), ("grep_spilled", {"handle": handle, "pattern": "\x00"}),
        ("query_json", {"handle": handle, "expr": ".\x00"}),
    ]
    for name, args in calls:
        out = run_tool(name, args, ws)
        assert out.is_error and out.details["error"] in ("bad_argument", "bad_path"), (name, out.text)
        direct = TOOLS[name].run(ws, **args)  # the functions themselves refuse it too
        assert direct.is_error, (name, direct.text)


# --------------------------------------------------------------------------------------------------
# Item 17: hard links


def test_item_17_hard_links_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / ".env").write_text("API_KEY=sk-live-secret\n")
    os.link(root / ".env", root / "notes.txt")
    (tmp_path / "secret").write_text("outside secret\n")
    os.link(tmp_path / "secret", root / "inside.txt")
    (root / "plain.txt").write_text("plain secret-free\n")
    ws = Workspace([root])
    for name in ("notes.txt", "inside.txt"):
        out = read(ws, name)
        assert out.is_error and out.details["error"] == "hard_link", out.text
        assert "sk-live" not in out.text and "outside secret" not in out.text
    for engine in ENGINES:
        found = grep(ws, "secret", engine=engine)
        assert found.text == "plain.txt:1:plain secret-free", (engine, found.text)
    assert query_json(ws, "notes.txt", ".").details["error"] == "hard_link"
    allowed = Workspace([root], allow_hard_links=True)
    assert "outside secret" in read(allowed, "inside.txt").text  # the harness can opt in


# --------------------------------------------------------------------------------------------------
# Fuzzing: nothing but tool-error results, each call within a time limit

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.sampled_from(["", ".", "..", "/", "~", "../../etc/passwd", "a\x00b", "\udc80", "*" * 40 + "x", "(a+)+$",
                     "[", "**/", "blob:0123456789abcdef", ".env", "f.txt", "data.json", "sub", "-1", "1e400", "nan"]),
)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)
KNOWN_ERRORS = {
    "bad_argument", "bad_path", "bad_pattern", "outside_roots", "denied", "not_found", "not_directory",
    "is_directory", "binary", "too_large", "offset_beyond", "column_beyond", "unknown_tool", "no_blob_store",
    "input", "not_json", "bad_expression", "too_deep", "too_many_results", "timeout", "out_of_memory",
    "missing_extra", "bad_notebook", "hard_link", "fifo", "device", "socket", "special", "too_many_tokens",
    "pdf_needs_pages", "bad_pdf", "changed", "symlink_loop", "os_error", "unreadable", "shell_disabled",
}


@pytest.fixture(scope="module")
def fuzz_ws(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("fuzz")
    (root / "f.txt").write_text("alpha\nbeta\n")
    (root / "data.json").write_text('{"a": [1, 2, 3]}')
    (root / "sub").mkdir()
    (root / "sub" / "g.py").write_text("def g():\n    return 1\n")
    (root / ".env").write_text("SECRET=1\n")
    store = FileBlobStore(root / ".blobs")
    store.put(b'{"k": "v"}\n')
    return Workspace([root], blobs=store, limits=Limits(query_timeout_s=5, shell_timeout_s=5))


def check_output(out: object) -> None:
    assert isinstance(out, ToolOutput)
    json.dumps(out.to_dict())  # plain JSON, no lone surrogates
    out.text.encode("utf-8")
    if out.is_error and "error" in out.details:
        assert out.details["error"] in KNOWN_ERRORS, out.details


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_every_tool_with_random_and_mutated_arguments(fuzz_ws: Workspace, data: st.DataObject) -> None:
    name = data.draw(st.sampled_from([n for n in TOOLS if n != "shell"] + ["nope", ""]))
    properties = list(TOOLS[name].parameters["properties"]) if name in TOOLS else ["x"]
    keys = st.one_of(st.sampled_from(properties), st.text(max_size=6))
    args = data.draw(st.one_of(
        st.dictionaries(keys, JSON_VALUES, max_size=5),
        st.text(max_size=60),  # a model's raw JSON text, valid or not
        JSON_VALUES,
    ))
    out = within(30, run_tool, name, args, fuzz_ws)
    check_output(out)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(timeout=JSON_VALUES, extra=st.dictionaries(st.text(max_size=5), JSON_SCALARS, max_size=2))
def test_fuzz_shell_arguments(fuzz_ws: Workspace, timeout: Any, extra: dict[str, Any]) -> None:
    ws = Workspace(fuzz_ws.roots, allow_shell=True, limits=Limits(shell_timeout_s=5, shell_max_timeout_s=5))
    out = within(30, run_tool, "shell", {"command": "true", "timeout": timeout, **extra}, ws)
    check_output(out)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from([*TOOLS, "nope"]), tokens=st.lists(st.one_of(
    st.text(max_size=12), st.sampled_from(["--offset", "--limit=3", "--glob", "--ignore-case", "--", "--x", "-"]),
), max_size=6))
def test_fuzz_the_command_line_argument_parser(name: str, tokens: list[str]) -> None:
    from ctxwin.cli.tool import parse_tool_args
    from ctxwin.errors import InputError

    try:
        args = parse_tool_args(name, tokens)
    except InputError:
        return
    assert isinstance(args, dict) and set(args) <= set(TOOLS[name].parameters["properties"])


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("*?[]!/\\#ab. \n\r-^")), max_size=60),
       path=st.text(alphabet=st.sampled_from(list("ab/.*[]\n")), min_size=1, max_size=30), is_dir=st.booleans())
def test_fuzz_gitignore_lines_never_raise_or_hang(text: str, path: str, is_dir: bool) -> None:
    """Item 10: any .gitignore text is read (bad lines skipped, as git does) and matched in linear time."""
    from ctxwin.tools.ignore import ignored, parse_rules

    rules = within(30, parse_rules, text, "")  # a hang guard: a backtracking matcher takes hours on some lines
    assert within(30, ignored, rules, path, is_dir) in (True, False)
