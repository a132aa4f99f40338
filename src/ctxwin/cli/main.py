"""Entry point of the `ctxwin` command. Each command lives in its own module of this package and
registers itself on the shared app when imported."""

from __future__ import annotations

import sys

from ctxwin.cli import app as _app
from ctxwin.cli import chat as _chat  # noqa: F401  (registers `chat`)
from ctxwin.cli import compact as _compact  # noqa: F401  (registers `compact`)
from ctxwin.cli import demo as _demo  # noqa: F401  (registers `demo`)
from ctxwin.cli import evaluate as _evaluate  # noqa: F401  (registers `eval retention` and `eval needles`)
from ctxwin.cli import health as _health  # noqa: F401  (registers `health`)
from ctxwin.cli import inspect as _inspect  # noqa: F401  (registers `inspect`)
from ctxwin.cli import mcp as _mcp  # noqa: F401  (registers `mcp`)
from ctxwin.cli import memory as _memory  # noqa: F401  (registers `memory index|show|search` and `search`)
from ctxwin.cli import policies as _policies  # noqa: F401
from ctxwin.cli import proxy as _proxy  # noqa: F401  (registers `proxy`)
from ctxwin.cli import replay as _replay  # noqa: F401  (registers `replay`)
from ctxwin.cli import report as _report  # noqa: F401  (registers `report`)
from ctxwin.cli import run as _run  # noqa: F401  (registers `run`)
from ctxwin.cli import session as _session  # noqa: F401  (registers `session mark|marks|rewind`)
from ctxwin.cli import store as _store  # noqa: F401  (registers `import` and `sessions`)
from ctxwin.cli import tool as _tool  # noqa: F401  (registers `tool`)

app = _app.app


def main() -> None:
    """Runs the app; output that could not be written when it is flushed at the end (stdout on a full
    disk) is one line and a non-zero exit, not the interpreter's "Exception ignored" traceback."""
    code: int | str | None = 0
    try:
        app()
    except SystemExit as exit_:
        code = exit_.code
    failed = _app.flush_stdout_or_fail(report=not code)
    sys.exit(failed if failed is not None and not code else code)


if __name__ == "__main__":
    main()
