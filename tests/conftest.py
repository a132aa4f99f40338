"""Shared test fixtures.

Tests that read the real transcripts in `../shared/transcripts` use the `shared_dir` fixture: it skips
with a reason when the folder is absent (a fresh clone), and fails instead when
`CTXWIN_REQUIRE_SHARED=1` (as CI sets), so a broken CI setup cannot pass by skipping.
"""

from __future__ import annotations

import os
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
