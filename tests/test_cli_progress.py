"""Progress bars: once shown, a bar stops cleanly (rich's Live enters its console with `with`, which
the CLI's lazily made console must allow)."""

from __future__ import annotations

import pytest

from ctxwin.cli import progress


def test_a_shown_progress_bar_starts_and_stops(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "SHOW_AFTER_SECONDS", -1.0)  # shown at the first update
    with progress.progress_bars(True) as update:
        update("work", 0, 2)
        update("work", 2, 2)
    capsys.readouterr()  # rendered to stderr; the test is that start and stop raise nothing


def test_a_disabled_progress_bar_never_shows(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "SHOW_AFTER_SECONDS", -1.0)
    with progress.progress_bars(False) as update:
        update("work", 1, 2)
    assert capsys.readouterr().err == ""
