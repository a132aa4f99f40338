"""The Typer application every command module registers on, and the helpers they share.

Each command is a thin wrapper over a library call of the same name: it parses arguments, calls the
library, and prints either rich output or, with `--json`, the library's result as one JSON object.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from ctxwin.errors import CtxwinError

app = typer.Typer(
    name="ctxwin",
    help="Manage, inspect and replay the context window of LLM agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def print_json(data: Any) -> None:
    """One JSON object on stdout, nothing else (machine-readable output)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")


def fail(message: str, hint: str | None = None, code: int = 2) -> None:
    # soft_wrap: one line per message whatever the terminal's width, so it can be grepped
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    if hint:
        err_console.print(f"  {escape(hint)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def handle_errors(func: F) -> F:
    """Turns ctxwin's own errors, and the OS errors a user can cause (missing file, permission), into
    a message and a non-zero exit instead of a traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except CtxwinError as error:
            fail(error.message, error.hint, error.exit_code)
        except FileNotFoundError as error:
            fail(f"no such file: {error.filename}", "check the path")
        except IsADirectoryError as error:
            fail(f"is a directory: {error.filename}", "give a file")
        except PermissionError as error:
            fail(f"permission denied: {error.filename}")
        except KeyboardInterrupt:
            fail("interrupted", code=130)

    return wrapper  # type: ignore[return-value]
