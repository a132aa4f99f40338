"""Hostile and unlucky session files (issue 17, items 1-7), one regression test per item, and fuzzing of
every transcript reader: only typed ctxwin errors escape, and every call ends quickly."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ctxwin.cli.main import app
from ctxwin.errors import CtxwinError, FileTooLargeError, InputError, JSONTooDeepError, NotARegularFileError
from ctxwin.files import FileLimits
from ctxwin.transcripts import FORMATS, DamagedInputWarning, detect_format, load_transcript

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
EXAMPLE = SRC / "ctxwin" / "examples" / "claude-code-session.jsonl"
FIXTURES = ROOT / "tests" / "fixtures"
DEEP = 5_000
runner = CliRunner()


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result.exit_code, result.stdout, result.stderr


def cli_subprocess(*args: str, timeout: float = 30,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command in its own process, so a hang fails by timeout instead of hanging the suite."""
    full_env = {**os.environ, "PYTHONPATH": str(SRC), **(env or {})}
    return subprocess.run([sys.executable, "-m", "ctxwin.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def no_traceback(stderr: str) -> None:
    assert "Traceback" not in stderr and "Error:" not in stderr.replace("error:", ""), stderr


def deep_line(depth: int = DEEP) -> str:
    return '{"type": "user", "message": ' + '{"a": ' * depth + "1" + "}" * depth + "}"


# --- item 1: deep JSON -------------------------------------------------------------------------------


def test_item_01_deep_json_line_is_one_clear_warning(tmp_path: Path) -> None:
    lines = EXAMPLE.read_text().splitlines()
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join([*lines[:5], deep_line(), *lines[5:]]) + "\n")
    for args in (["inspect", str(path), "--json"], ["inspect", str(path), "--json", "--format", "claude-code"]):
        code, out, err = cli(*args)
        assert code == 3, err
        assert f"warning: line 6: JSON nested {DEEP + 1:,} levels deep, over the limit of 200; skipped" in err
        assert json.loads(out)["read"]["damaged"] == 1
        no_traceback(err)
    assert detect_format(path) == "claude-code"  # the sniffer skips the deep line too


def test_item_01_a_file_that_is_only_deep_json_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * DEEP + "]" * DEEP)
    for args in (["inspect", str(path)], ["inspect", str(path), "--format", "claude-code"], ["health", str(path)]):
        code, _, err = cli(*args)
        assert code == 2
        assert err.splitlines()[0].startswith(f"error: {path}: JSON nested {DEEP:,} levels deep")
        no_traceback(err)
    with pytest.raises(JSONTooDeepError):
        detect_format(path)


def test_item_01_deep_first_line_or_deep_pretty_document(tmp_path: Path) -> None:
    lines = EXAMPLE.read_text().splitlines()
    jsonl = tmp_path / "deep-first.jsonl"
    jsonl.write_text("\n".join([deep_line(), *lines]) + "\n")
    transcript = _load_quietly(jsonl)
    assert transcript.damaged == {"too_deep": 1} and transcript.warnings[0].startswith("line 1: JSON nested")
    document = tmp_path / "deep.traj"
    document.write_text(json.dumps({"history": [{"role": "user", "content": "x"}]}, indent=2)[:-1]
                        + ', "x": ' + "[" * DEEP + "]" * DEEP + "\n}")
    with pytest.raises(JSONTooDeepError, match=r"deep\.traj: JSON nested"):
        load_transcript(document)


def _load_quietly(path: Path, format: str | None = None) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedInputWarning)
        return load_transcript(path, format)


def test_item_01_replay_latest_reads_through_the_same_guard(tmp_path: Path) -> None:
    folder = tmp_path / ".claude" / "projects" / "p"
    folder.mkdir(parents=True)
    (folder / "s.jsonl").write_text(deep_line() + "\n")
    code, _, err = cli("replay", "--latest", "claude-code", "-q", env={"HOME": str(tmp_path)})
    assert code == 2 and "nested" in err
    no_traceback(err)


# --- item 2: FIFOs -------------------------------------------------------------------------------------


def test_item_02_fifo_as_session_file_or_policy_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)
    policy_fifo = tmp_path / "policy.toml"
    os.mkfifo(policy_fifo)
    for args in (["inspect", str(fifo)], ["replay", str(fifo), "-q"], ["import", str(fifo), "--into", str(tmp_path)],
                 ["replay", str(EXAMPLE), "-q", "--policy", str(policy_fifo)]):
        done = cli_subprocess(*args, timeout=30)  # a hang guard: opening a FIFO with no writer never returns
        assert done.returncode == 2, done.stderr
        assert "is a FIFO (named pipe), not a regular file" in done.stderr
        no_traceback(done.stderr)


# --- item 3: no size cap -------------------------------------------------------------------------------


def test_item_03_dev_zero_is_refused() -> None:
    done = cli_subprocess("inspect", "/dev/zero", timeout=30)
    assert done.returncode == 2 and "/dev/zero is a character device, not a regular file" in done.stderr


def test_item_03_gzip_bomb_is_refused_at_the_cap_in_one_line(tmp_path: Path) -> None:
    member = gzip.compress(b"\0" * (16 << 20), compresslevel=9)  # 16 MiB of zeros in ~16 KB
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(member * 512)  # 8 GiB once expanded, 8 MB on disk
    cap = 32 << 20
    done = cli_subprocess("inspect", str(bomb), timeout=60, env={"CTXWIN_MAX_DECOMPRESSED_BYTES": str(cap)})
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert lines[0] == f"error: {bomb} is over the decompressed size cap of {cap:,} bytes"
    assert "CTXWIN_MAX_DECOMPRESSED_BYTES" in lines[1] and len(lines) == 2
    with pytest.raises(FileTooLargeError):
        load_transcript(bomb, limits=FileLimits(max_decompressed_bytes=cap))


def test_item_03_file_size_cap_from_the_environment(tmp_path: Path) -> None:
    code, _, err = cli("inspect", str(EXAMPLE), env={"CTXWIN_MAX_FILE_BYTES": "1000"})
    assert code == 2 and "over the file size cap of 1,000 bytes" in err


# --- item 4: mixed formats ----------------------------------------------------------------------------


def _mixed(tmp_path: Path) -> Path:
    claude = (FIXTURES / "claude_code_edge.jsonl").read_text().splitlines()[:6]
    pi = (FIXTURES / "pi_v3_tree.jsonl").read_text().splitlines()[:6]
    codex = (FIXTURES / "codex_rollout.jsonl").read_text().splitlines()[:6]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join([*claude, *pi, *codex]) + "\n")
    return path


def test_item_04_mixed_formats_are_detected_and_named_with_their_lines(tmp_path: Path) -> None:
    path = _mixed(tmp_path)
    code, _, err = cli("inspect", str(path))
    assert code == 2
    first = err.splitlines()[0]
    assert "mixes records of several session formats" in first
    assert "claude-code (" in first and "pi (" in first and "codex (" in first
    assert "lines 7-12" in first  # the Pi records
    no_traceback(err)


def test_item_04_a_forced_format_skips_the_other_formats_records(tmp_path: Path) -> None:
    path = _mixed(tmp_path)
    code, out, err = cli("inspect", str(path), "--format", "pi", "--json")
    assert code == 3
    report = json.loads(out)
    assert report["format"] == "pi" and report["skipped"]["other_format"] >= 6
    assert "a claude-code record in a file read as pi; skipped" in err
    assert "omitted" not in out  # nothing misread as another format's placeholder


# --- item 5: every command reports damage the same way ------------------------------------------------

COMMANDS: dict[str, list[str]] = {
    "inspect": ["inspect", "{f}", "--json"],
    "replay": ["replay", "{f}", "--json", "-q"],
    "health": ["health", "{f}", "--json"],
    "compact": ["compact", "{f}", "--json"],
    "eval retention": ["eval", "retention", "{f}", "--json", "-q"],
    "eval needles": ["eval", "needles", "{f}", "--json", "-q"],
    "report": ["report", "{f}", "-o", "{tmp}/report.html", "--json", "-q", "--no-retention"],
    "import": ["import", "{f}", "--into", "{tmp}/store", "--json"],
}


def _args(command: str, path: Path, tmp: Path) -> list[str]:
    return [a.format(f=path, tmp=tmp) for a in COMMANDS[command]]


def _cut(tmp_path: Path) -> Path:
    text = EXAMPLE.read_text()
    path = tmp_path / "cut.jsonl"
    path.write_text(text[:-300])
    return path


@pytest.mark.parametrize("command", list(COMMANDS))
def test_item_05_every_command_warns_and_exits_3_on_a_damaged_file(tmp_path: Path, command: str) -> None:
    path = _cut(tmp_path)
    code, out, err = cli(*_args(command, path, tmp_path))
    assert code == 3, err
    line = path.read_text().count("\n") + 1
    assert f"warning: line {line}: not valid JSON (the file seems cut off mid-line)" in err
    read = json.loads(out)["read"]
    assert read["damaged_files"] == 1 and read["damaged"] == 1 and read["files"][0]["damaged"] == {"malformed_json": 1}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_item_05_every_command_exits_2_when_nothing_can_be_read(tmp_path: Path, command: str) -> None:
    path = tmp_path / "junk.jsonl"
    path.write_text("this is not\na session\n")
    code, _, err = cli(*_args(command, path, tmp_path))
    assert code == 2 and err.startswith("error: ")
    no_traceback(err)


@pytest.mark.parametrize("damage", ["invalid_utf8", "truncated_gzip"])
@pytest.mark.parametrize("command", ["replay", "import"])
def test_item_05_invalid_utf8_and_truncated_gzip(tmp_path: Path, damage: str, command: str) -> None:
    raw = EXAMPLE.read_bytes()
    if damage == "invalid_utf8":
        path = tmp_path / "bad.jsonl"
        middle = raw.index(b"\n", len(raw) // 2) + 1
        path.write_bytes(raw[:middle + 40] + b"\xff\xfe" + raw[middle + 40:])
    else:
        path = tmp_path / "cut.jsonl.gz"
        whole = gzip.compress(raw)
        path.write_bytes(whole[: len(whole) * 2 // 3])
    code, out, err = cli(*_args(command, path, tmp_path))
    assert code == 3, err
    assert json.loads(out)["read"]["files"][0]["damaged"].get(damage) == 1
    assert "warning: " in err


def test_item_05_clean_file_exits_0_with_zero_counts(tmp_path: Path) -> None:
    code, out, _ = cli("replay", str(EXAMPLE), "--json", "-q")
    assert code == 0 and json.loads(out)["read"] == {"damaged_files": 0, "damaged": 0, "repaired": 0, "warnings": 0,
                                                     "files": []}


# --- item 6: lone surrogates --------------------------------------------------------------------------


def test_item_06_lone_surrogate_is_replaced_and_reported(tmp_path: Path) -> None:
    from ctxwin import ContextEngine
    from ctxwin.messages import Message, Text

    lines = EXAMPLE.read_text().splitlines()
    broken = json.dumps({"type": "user", "uuid": "u-broken", "sessionId": "s",
                         "message": {"role": "user", "content": "half an emoji: \\ud83d!"}}).replace("\\\\", "\\")
    assert "\\ud83d" in broken
    path = tmp_path / "surrogate.jsonl"
    path.write_text("\n".join([*lines, broken]) + "\n")
    with pytest.warns(DamagedInputWarning):
        transcript = load_transcript(path)
    assert transcript.damaged["lone_surrogate"] == 1
    text = transcript.messages[-1].text
    assert text == "half an emoji: \ufffd!"
    engine = ContextEngine(model="claude-sonnet-4-5")
    engine.append([*transcript.messages, Message("assistant", (Text("ok"),)), Message("user", (Text("go on"),))])
    payload = engine.prepare().to_anthropic()
    json.dumps(payload, ensure_ascii=False).encode("utf-8")  # what the HTTP client sends: no UnicodeEncodeError
    code, _, err = cli("inspect", str(path))
    assert code == 3 and "lone UTF-16 surrogate" in err


# --- item 7: memory -----------------------------------------------------------------------------------

# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over from the parent (pytest, large by now)
# across fork and exec, while VmHWM belongs to the new process image alone.
MEMORY_PROBE = """
import json, sys
def status(field):
    with open('/proc/self/status') as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field + ':'))
from ctxwin.transcripts import load_transcript
from ctxwin.transcripts.inspect import inspect_transcript
from ctxwin.tokens import counter_for
counter_for(None).count_text("x")  # the counters load numpy on first use: loaded before the baseline
before = status('VmRSS')
report = inspect_transcript(load_transcript(sys.argv[1]))
print(json.dumps({"before": before, "peak": status('VmHWM'), "messages": report["messages"]}))
"""


def test_item_07_single_line_transcript_memory_is_a_small_multiple_of_the_file(tmp_path: Path) -> None:
    size = 20 << 20
    path = tmp_path / "one-line.jsonl"
    with path.open("w") as out:
        out.write('{"type": "user", "uuid": "u1", "sessionId": "s", "message": {"role": "user", "content": "')
        block = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 1000
        for _ in range(size // len(block)):
            out.write(block)
        out.write('"}}\n')
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    numbers = json.loads(done.stdout)
    growth = (numbers["peak"] - numbers["before"]) / path.stat().st_size
    assert numbers["messages"] == 1
    # the text once as read, once parsed, once UTF-8 encoded for counting, plus a fixed 16 MB of counting
    # buffers; before the guarded reader and the sliced estimator it was ~18x
    assert growth < 3.5, f"reading and inspecting grew RSS by {growth:.1f}x the file"


# --- glued records (issue 12) are repaired, not damage -----------------------------------------------


def test_glued_records_are_split_and_counted(tmp_path: Path) -> None:
    lines = (FIXTURES / "pi_v3_tree.jsonl").read_text().splitlines()
    glued = [lines[0], lines[1] + lines[2], *lines[3:]]
    path = tmp_path / "glued.jsonl"
    path.write_text("\n".join(glued) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedInputWarning)
        clean = load_transcript(FIXTURES / "pi_v3_tree.jsonl")
        repaired = load_transcript(path)
    assert [m.text for m in repaired.messages] == [m.text for m in clean.messages]
    assert repaired.repaired == {"glued_json_lines": 1, "glued_json_records": 2} and not repaired.warnings
    code, out, err = cli("inspect", str(path), "--json")
    # One glued line is one repair, whatever it held (issue 23: the count was 3, lines plus records).
    assert code == 0 and json.loads(out)["read"]["repaired"] == 1
    assert json.loads(out)["read"]["files"][0]["repairs"] == 1
    assert "note: 1 line(s) held 2 JSON records glued together; each was read" in err


# --- fuzzing ------------------------------------------------------------------------------------------

SEED_FILES = [EXAMPLE, *sorted(FIXTURES.glob("*.jsonl"))]
SEED_LINES_BY_FILE = [[line for line in path.read_text().splitlines() if line.strip()] for path in SEED_FILES]
SEED_LINES = [line for lines in SEED_LINES_BY_FILE for line in lines]


def _mutate(line: str, rng: random.Random) -> str:
    kind = rng.randrange(8)
    position = rng.randrange(len(line) + 1)
    if kind == 0:
        return line[:position]  # cut
    if kind == 1:
        return line[:position] + chr(rng.randrange(0x20, 0x2FFF)) + line[position + 1:]  # replace a character
    if kind == 2:
        return line[:position] + line[position + rng.randrange(1, 20):]  # delete a run
    if kind == 3:
        return line + rng.choice(SEED_LINES)  # glue another record on
    if kind == 4:
        return line[:position] + "[" * rng.randrange(150, 400) + line[position:]  # deep
    if kind == 5:
        return line[:position] + "\\ud83d" + line[position:]  # a surrogate escape (inside a string or not)
    if kind == 6:
        return line.replace('"', "'", 1)
    return line[:position] + '{"type": ' + line[position:]


def _read_safely(data: bytes, format: str | None, name: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DamagedInputWarning)
                transcript = load_transcript(path, format)
        except CtxwinError as error:
            assert isinstance(error, InputError) and str(error)
        else:
            assert transcript.messages
            for message in transcript.messages:  # every text the providers would get encodes
                json.dumps(message.to_dict(), ensure_ascii=False).encode("utf-8")


formats = st.sampled_from([None, *FORMATS])
names = st.sampled_from(["s.jsonl", "run.traj", "rollout-x.jsonl", "s.json"])


@given(data=st.binary(max_size=2_000), format=formats, name=names)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_random_bytes(data: bytes, format: str | None, name: str) -> None:
    _read_safely(data, format, name)


@given(seed=st.integers(0, 2**32), count=st.integers(1, 12), mutations=st.integers(0, 4), format=formats,
       gz=st.booleans())
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_mutated_real_lines(seed: int, count: int, mutations: int, format: str | None, gz: bool) -> None:
    rng = random.Random(seed)
    own = rng.choice(SEED_LINES_BY_FILE)  # mostly one file's lines, in order, now and then a stranger's
    start = rng.randrange(len(own))
    lines = [own[(start + i) % len(own)] if rng.random() > 0.05 else rng.choice(SEED_LINES) for i in range(count)]
    for _ in range(mutations):
        index = rng.randrange(len(lines))
        lines[index] = _mutate(lines[index], rng)
    data = ("\n".join(lines) + rng.choice(["\n", "", "\n\n"])).encode("utf-8", "surrogatepass")
    if gz:
        data = gzip.compress(data)
        data = data[: rng.randrange(len(data) // 2, len(data) + 1)]
    _read_safely(data, format, "session.jsonl.gz" if gz else "session.jsonl")


@given(seed=st.integers(0, 2**32), format=formats)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzz_mutated_json_documents(seed: int, format: str | None) -> None:
    rng = random.Random(seed)
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    messages: list[Any] = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None,
                                                                "tool_calls": [call]},
                           {"role": "tool", "tool_call_id": "c1", "content": "a b"}]
    document: Any = rng.choice([messages, {"messages": messages}, {"history": messages, "info": {}}])
    text = json.dumps(document, indent=rng.choice([None, 2]))
    for _ in range(rng.randrange(4)):
        text = _mutate(text, rng)
    _read_safely(text.encode("utf-8", "surrogatepass"), format, rng.choice(["run.traj", "chat.json"]))


def test_special_files_are_typed_errors() -> None:
    with pytest.raises(NotARegularFileError):
        load_transcript("/dev/null")
