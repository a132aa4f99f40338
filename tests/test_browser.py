"""The report in a real browser: Debian's headless Chromium opens the page built from real replays,
takes a screenshot (which must show the page, charts included, not a blank) and dumps the rendered
DOM (which must hold every policy's token figures). Skips without chromium; fails instead under
`CTXWIN_REQUIRE_SHARED=1`, as CI sets (CI installs chromium)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctxwin.evaluation.report import COLORS, report

EXAMPLE = Path(__file__).parents[1] / "src" / "ctxwin" / "examples" / "claude-code-session.jsonl"
BROWSER_TIMEOUT_S = 120  # the browser process (and its children) are killed after this
WINDOW = (1280, 1400)  # screenshot size in pixels
# Flags for headless Chromium on these machines (reference: .library/env/machines/python.md).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if found is None:
        reason = "chromium is not installed (Debian: apt-get install chromium)"
        if os.environ.get("CTXWIN_REQUIRE_SHARED") == "1":
            pytest.fail(f"CTXWIN_REQUIRE_SHARED=1 but {reason}")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The report of a real session, replayed under every preset (retention included)."""
    out = tmp_path_factory.mktemp("browser") / "report.html"
    result = report([EXAMPLE], out)
    return out, result.comparisons[0]


def run_browser(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    """Runs chromium with a fresh profile; on timeout the whole process group is killed."""
    command = [chromium, *FLAGS, f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            env={**os.environ, "HOME": str(profile)})
    try:
        stdout, stderr = proc.communicate(timeout=BROWSER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {BROWSER_TIMEOUT_S} s: {' '.join(command)}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # helpers it left behind
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


# --------------------------------------------------------------------------------------------------
# PNG decoding with the standard library (zlib, struct) and numpy


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def decode_png(data: bytes) -> np.ndarray:
    """An 8-bit RGB or RGBA, non-interlaced PNG as an array (height, width, channels)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, bytearray(), None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert header is not None
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    bpp = 3 if color == 2 else 4
    stride = width * bpp
    raw = zlib.decompress(bytes(idat))
    rows = np.zeros((height, stride), dtype=np.uint8)
    prior = np.zeros(stride, dtype=np.uint8)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1)
        if kind == 0:
            row = line.copy()
        elif kind == 1:  # Sub: a running sum per channel, modulo 256
            row = (np.cumsum(line.reshape(width, bpp), axis=0, dtype=np.uint32) % 256).astype(np.uint8).ravel()
        elif kind == 2:  # Up
            row = line + prior
        else:  # Average and Paeth depend on the byte just decoded: done byte by byte
            out = bytearray(stride)
            up = prior.tobytes()
            for i, value in enumerate(line.tobytes()):
                left = out[i - bpp] if i >= bpp else 0
                if kind == 3:
                    out[i] = (value + ((left + up[i]) >> 1)) & 0xFF
                else:
                    out[i] = (value + _paeth(left, up[i], up[i - bpp] if i >= bpp else 0)) & 0xFF
            row = np.frombuffer(bytes(out), np.uint8)
        rows[y] = row
        prior = row
    return rows.reshape(height, width, bpp)[:, :, :3]


def _rgb(hex_color: str) -> np.ndarray:
    return np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)


# --------------------------------------------------------------------------------------------------


def test_screenshot_shows_the_page_and_its_charts(chromium: str, page: tuple[Path, dict], tmp_path: Path) -> None:
    path, _ = page
    shot = tmp_path / "shot.png"
    done = run_browser(chromium, tmp_path / "profile", f"--screenshot={shot}",
                       f"--window-size={WINDOW[0]},{WINDOW[1]}", path.as_uri())
    assert shot.exists(), done.stderr.decode("utf-8", "replace")[-2000:]
    pixels = decode_png(shot.read_bytes())
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    flat = pixels.reshape(-1, 3)
    colors = Counter(map(bytes, flat[:: 7]))
    _, count = colors.most_common(1)[0]
    assert len(colors) > 100, f"only {len(colors)} colours: a blank page?"
    assert count / sum(colors.values()) < 0.9, "one colour covers 90 % of the page: a blank page?"
    # The stacked charts were painted: enough pixels in the layers' own colours (within blending).
    for key in ("tool_results", "messages"):
        near = np.abs(flat.astype(np.int16) - _rgb(COLORS[key])).max(axis=1) <= 24
        assert near.sum() > 2000, f"the {key} layer is not on the screenshot"


def test_rendered_dom_holds_the_numbers(chromium: str, page: tuple[Path, dict], tmp_path: Path) -> None:
    path, comparison = page
    done = run_browser(chromium, tmp_path / "profile", "--dump-dom", path.as_uri())
    dom = done.stdout.decode("utf-8")
    assert "</html>" in dom, done.stderr.decode("utf-8", "replace")[-2000:]
    rows = comparison["policies"]
    assert len(rows) >= 8
    for name, row in rows.items():
        assert f"{row['cumulative_input_tokens']:,}" in dom, name
        assert f"{row['peak_tokens']:,}" in dom, name
        assert f">{name}<" in dom, name
    assert dom.count('class="timeline"') == len(rows)
    assert "What the model still knows after compaction" in dom
