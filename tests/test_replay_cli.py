"""The `replay` and `eval` commands through typer's runner: JSON shapes, human output, errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from conftest import shared_path
from ctxwin.cli.main import app

runner = CliRunner()
SMALL = ("claude-code", "tool_heavy.jsonl")


def run(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env)


def test_replay_json_compare() -> None:
    result = run("replay", str(shared_path(*SMALL)), "--compare", "raw,masking,recorded", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data["policies"]) == ["ctxwin", "raw", "masking", "recorded"]
    for row in data["policies"].values():
        assert {"calls", "cumulative_input_tokens", "peak_tokens", "compactions", "prefix_kept_fraction",
                "cost_cached_usd", "cost_uncached_usd", "events", "valid", "over_budget_calls"} <= set(row)
        assert row["over_budget_calls"] == 0 and row["valid"]
    assert data["pricing"]["scheme"] == "anthropic"


def test_replay_human_output_has_the_call_table_and_summary() -> None:
    result = run("replay", str(shared_path(*SMALL)), "--policy", "masking", "--compare", "raw", "--quiet",
                 "--pricing", "openai", "--cache-ttl", "1h")
    assert result.exit_code == 0, result.output
    assert "masking: every model call" in result.stdout
    assert "summary" in result.stdout and "Lowest cost with prompt caching" in result.stdout
    assert "Pricing: openai" in result.stdout


def test_replay_errors_are_messages_not_tracebacks(tmp_path) -> None:
    result = run("replay")
    assert result.exit_code == 2 and "no session file given" in result.output
    result = run("replay", str(shared_path(*SMALL)), "--policy", "nope")
    assert result.exit_code == 2 and "unknown policy 'nope'" in result.output
    result = run("replay", "--latest", "pi", env={"HOME": str(tmp_path)})
    assert result.exit_code == 2 and "no pi session found" in result.output
    assert "Traceback" not in result.output


def test_replay_latest_finds_the_newest_session(tmp_path) -> None:
    folder = tmp_path / ".claude" / "projects" / "p"
    folder.mkdir(parents=True)
    (folder / "s.jsonl").write_bytes(shared_path(*SMALL).read_bytes())
    result = run("replay", "--latest", "claude-code", "--policy", "raw", "--json", env={"HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["file"].endswith("s.jsonl")


def test_eval_retention_json_on_a_session_without_compaction() -> None:
    result = run("eval", "retention", str(shared_path(*SMALL)), "--policy", "ctxwin,raw,recorded", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data["summary"]) == {"ctxwin", "raw"}  # no real compaction: nothing recorded to score
    assert [s["kind"] for s in data["sessions"]] == ["synthetic", "synthetic"]
    assert all("view_tokens" in row for row in data["summary"].values())


def test_eval_retention_table_on_a_real_compaction() -> None:
    path = shared_path("claude-code", "4d5611e5-241a-462a-8d15-5122611a9569.jsonl")
    result = run("eval", "retention", str(path), "--policy", "recorded,raw", "--quiet")
    assert result.exit_code == 0, result.output
    assert "real @ message 132" in result.stdout and "harness's next call" in result.stdout
    assert "recall pooled over every point" in result.stdout


def test_eval_needles() -> None:
    result = run("eval", "needles", str(shared_path(*SMALL)), "--policy", "raw,masking", "--ages", "1,5", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data["policies"]) == {"raw", "masking"}
    assert data["policies"]["raw"]["overall"]["in_view"] == 1.0
    human = run("eval", "needles", str(shared_path(*SMALL)), "--policy", "raw", "--ages", "1", "--quiet")
    assert human.exit_code == 0 and "needles still in the" in human.stdout and "lost" in human.stdout
    bad = run("eval", "needles", str(shared_path(*SMALL)), "--ages", "x")
    assert bad.exit_code == 2 and "--ages" in bad.output


def test_eval_retention_writes_the_scored_views(tmp_path) -> None:
    path = shared_path("pi", "before-compaction.jsonl")
    result = run("eval", "retention", str(path), "--policy", "masking,recorded", "--views", str(tmp_path / "v"),
                 "--json")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == [
        "before-compaction.masking.p0.txt", "before-compaction.masking.p1.txt", "before-compaction.points.json",
        "before-compaction.recorded.p0.txt", "before-compaction.recorded.p1.txt"]
    data = json.loads(result.stdout)
    view = data["sessions"][1]["policies"]["masking"]
    assert set(view["recall"]) == set(view["recall_recoverable_by_ref"])
    assert all((view["recall_recoverable_by_ref"][k] or 0) >= (v or 0) for k, v in view["recall"].items())
    human = run("eval", "retention", str(path), "--policy", "masking", "--quiet")
    assert "recoverable by ref" in human.stdout
    blocked = tmp_path / "file"
    blocked.write_text("")
    bad = run("eval", "retention", str(path), "--policy", "masking", "--views", str(blocked / "sub"), "--quiet")
    assert bad.exit_code == 2 and "give --views a folder you can write to" in bad.output
    assert "Traceback" not in bad.output
