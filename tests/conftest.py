"""Shared test fixtures, and how the suite is run.

Tests that read the real transcripts in `../shared/transcripts` use the `shared_dir` fixture: it skips
with a reason when the folder is absent (a fresh clone), and fails instead when
`CTXWIN_REQUIRE_SHARED=1` (as CI sets), so a broken CI setup cannot pass by skipping.

Tests marked `slow` (more than a few seconds each: whole demo runs, long races, every shared session
under every preset) are deselected unless `--run-slow` is given (or `CTXWIN_RUN_SLOW=1`); `.ci/run`
gives it. With pytest-xdist (`-n auto`, `--dist loadgroup` is the default here), the tests that share
one PostgreSQL server, the browser tests and the tmux tests each run in one worker (`xdist_group`), so
each server starts once per run and the terminal tests do not fight over the CPU.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest

from pg import postgres_dsn  # noqa: F401  (session-scoped PostgreSQL server for the store tests)

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CTXWIN_SHARED_DIR", REPO.parent / "shared")).resolve()
TRANSCRIPTS = SHARED / "transcripts"


def shared_path(*parts: str) -> Path:
    """A path under ../shared/transcripts, or skip/fail when it is missing."""
    path = TRANSCRIPTS.joinpath(*parts)
    if not path.exists():
        reason = f"{path} is absent (the shared transcripts live next to the checkout, in ../shared)"
        if os.environ.get("CTXWIN_REQUIRE_SHARED") == "1":
            pytest.fail(f"CTXWIN_REQUIRE_SHARED=1 but {reason}")
        pytest.skip(reason)
    return path


@pytest.fixture
def transcripts_dir() -> Path:
    return shared_path()


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """No test may reach the network: connections to anything but loopback and Unix sockets fail.
    Tests that serve on 127.0.0.1 (fake providers, PostgreSQL) still work."""
    real_connect = socket.socket.connect

    def guarded_connect(self: socket.socket, address: object) -> object:
        if self.family == socket.AF_UNIX:
            return real_connect(self, address)
        host = address[0] if isinstance(address, tuple) else address
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"network access is disabled in tests (tried {address!r})")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)


SLOW_ENV = "CTXWIN_RUN_SLOW"
GROUPS = {"test_browser.py": "browser", "test_chat_tmux.py": "tmux"}  # modules that share one heavy resource
# Parameters marked slow here rather than in their modules: the heavy end of a parametrized family (the
# 465-call Pi session under every preset but ctxwin, hypothesis properties over every preset but ctxwin,
# the streamed variants of a loop the plain ones already cover) and a few single tests of 8-18 s, by the
# suite's own --durations on a loaded 2-core machine. The rest of each family stays in the default run.
SLOW_TESTS = re.compile("|".join((
    r"test_engine_shared\.py::test_every_call_of_every_session_under_every_preset\[(?!ctxwin-)[a-z-]+-pi/",
    r"test_engine_shared\.py::test_every_call_of_every_session_under_every_preset\[masking-claude-code/258c7280",
    r"test_compaction\.py::test_strategies_at_real_compaction_points\[(?!ctxwin-)[a-z-]+-pi-before-compaction",
    r"test_engine\.py::test_invariants_on_random_sessions\[(pi|masking|letta|openclaw|claude-code)\]",
    r"test_knobs\.py::test_turn_knobs_keep_every_invariant\[max-turns-drop\]",
    r"test_agent_run\.py::test_run_prints_json_events_and_the_totals_last\[openai-True\]",
    r"test_agent_loop\.py::test_a_300_step_task_fits_compacts_inside_tool_loops_and_recovers\[[a-z]+-streamed\]",
    r"test_adversarial_tools\.py::test_item_11_query_json_is_bounded",
    r"test_proxy_workers\.py::test_one_session_alternating_between_two_workers_is_served_as_by_one",
    r"test_adversarial_store\.py::test_store_files_are_read_by_their_size_not_by_the_cap",
    r"test_adversarial_store\.py::test_what_the_cheap_append_check_lets_through_the_full_check_on_open_accepts",
    r"test_store_crash\.py::test_sigkill_on_postgres_loses_nothing_acknowledged",
)))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False,
                     help=f"also run the tests marked slow (as CI does; or set {SLOW_ENV}=1)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the slow tests unless asked for, and put the tests that share a server in one xdist group."""
    run_slow = config.getoption("--run-slow") or os.environ.get(SLOW_ENV) == "1"
    kept, slow = [], []
    for item in items:
        if SLOW_TESTS.search(item.nodeid):
            item.add_marker(pytest.mark.slow)
        (kept if run_slow or item.get_closest_marker("slow") is None else slow).append(item)
        group = "postgres" if item.get_closest_marker("postgres") or "postgres_dsn" in getattr(
            item, "fixturenames", ()) else GROUPS.get(item.path.name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = kept
