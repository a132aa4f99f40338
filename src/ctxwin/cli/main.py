"""Entry point of the `ctxwin` command. Each command lives in its own module of this package and
registers itself on the shared app when imported."""

from __future__ import annotations

from ctxwin.cli import app as _app
from ctxwin.cli import inspect as _inspect  # noqa: F401  (registers `inspect`)

app = _app.app


def main() -> None:
    app()


if __name__ == "__main__":
    main()
