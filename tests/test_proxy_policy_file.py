"""A proxy serving a live policy file (`ctxwin proxy --policy FILE.toml`): an edit that is refused is
said once, on stderr and on the dashboard, however many sessions meet it (issue 26 item 4)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ctxwin.testing import FakeProvider
from proxy_server import Served, proxy_for

HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
BAD = "[mask\nkeep_last = "
OTHER_BAD = 'base = "no-such-preset"\n'


def write_policy(path: Path, text: str) -> None:
    path.write_text(text)
    stamp = time.time_ns() + 1_000_000_000 * (1 + len(text))  # a distinct mtime even on coarse file systems
    os.utime(path, ns=(stamp, stamp))


def good(keep_last: int) -> str:
    return f'base = "masking"\n[mask]\nkeep_last = {keep_last}\nbatch = 1\nmin_tokens = 0\n'


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Served, Path]]:
    path = tmp_path / "live.toml"
    write_policy(path, good(4))
    with FakeProvider() as fake, proxy_for(fake, policy=str(path)) as served:
        yield served, path


def ask(served: Served, session: str, n: int = 1) -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10,
            "messages": [{"role": "user", "content": f"{session} turn {n}"}]}
    answer = httpx.post(f"{served.url}/v1/messages", json=body, headers={**HEADERS, "x-ctxwin-session": session},
                        timeout=30)
    assert answer.status_code == 200, answer.text  # the last good policy stays in force


def notices(served: Served) -> list[str]:
    return [n["message"] for n in httpx.get(f"{served.url}/ctxwin/notices.json", timeout=30).json()]


def test_a_refused_policy_edit_is_said_once_on_stderr_and_on_the_dashboard(live: tuple[Served, Path],
                                                                            capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ctxwin.proxy.dashboard")
    served, path = live
    for session in ("a", "b", "c"):
        ask(served, session)
    assert notices(served) == []
    write_policy(path, BAD)
    for n, session in enumerate(("a", "b", "c", "a", "b"), start=2):  # every session meets the same edit
        ask(served, session, n)
    [refused] = notices(served)
    assert str(path) in refused and "not valid TOML" in refused
    said = [line for line in capfd.readouterr().err.splitlines() if "policy file" in line]
    assert len(said) == 1 and said[0].startswith("ctxwin proxy: ") and "not valid TOML" in said[0]

    write_policy(path, OTHER_BAD)  # another refused edit: news again
    ask(served, "a", 10)
    ask(served, "c", 10)
    write_policy(path, good(2))  # a good edit, then the first bad one once more: news again
    ask(served, "b", 11)
    write_policy(path, BAD)
    ask(served, "b", 12)
    ask(served, "a", 12)
    messages = notices(served)
    assert len(messages) == 3 and "not valid TOML" in messages[0] and "not valid TOML" in messages[2]
    assert "not valid TOML" not in messages[1]
    said = [line for line in capfd.readouterr().err.splitlines() if "policy file" in line]
    assert len(said) == 2


def test_the_dashboard_page_shows_the_notices(live: tuple[Served, Path]) -> None:
    pytest.importorskip("ctxwin.proxy.dashboard")
    served, _path = live
    page = httpx.get(f"{served.url}/ctxwin", timeout=30).text
    assert 'id="notices"' in page and "/notices.json" in page
