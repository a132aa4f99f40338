"""The Typer application every command module registers on, and the helpers they share.

Each command is a thin wrapper over a library call of the same name: it parses arguments, calls the
library, and prints either rich output or, with `--json`, the library's result as one JSON object.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import sys
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar, cast

import typer

from ctxwin.errors import CtxwinError

if TYPE_CHECKING:
    from rich.console import Console

HELP = "Manage, inspect and replay the context window of LLM agents."

# The registry every command module adds its commands to (`ctxwin.cli.main` builds the root from it,
# one command at a time). Help is plain text: rich's help panels showed `<bool>` after every flag.
app = typer.Typer(name="ctxwin", help=HELP, no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, rich_markup_mode=None)

class _OnFirstUse:
    """A rich `Console` made on first use: importing rich costs a tenth of a second, which `ctxwin --help`
    and a command's `--json` output need not pay."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def made(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.made(), name)


def real_console(console: Console) -> Console:
    """The rich Console behind `console`, for code that uses it as more than a bag of methods (rich's
    `Live` enters it with `with`, which Python looks up on the type, past `__getattr__`)."""
    return console.made() if isinstance(console, _OnFirstUse) else console


console = cast("Console", _OnFirstUse())
err_console = cast("Console", _OnFirstUse(stderr=True))

F = TypeVar("F", bound=Callable[..., Any])


def print_json(data: Any) -> None:
    """One JSON object on stdout, nothing else (machine-readable output)."""
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")


# Control characters (C0, DEL, C1) and the bidirectional overrides: in a name read from a session they
# would move the cursor, recolour or retitle the terminal, or reorder what is shown.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """Text from a session or a user (a restore point's name, a file name) as rich markup that prints
    it literally: each control character shown as its escape (`\\x1b`), markup brackets escaped."""
    from rich.markup import escape

    return escape(_UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text))


def print_table(table: Any, target: Console | None = None) -> None:
    """Prints a rich table whole, never with a cell cut to `…` (rich cuts cells rather than exceed the
    width). A table wider than the console goes to a pipe or a file at its full width, one line a row;
    in a terminal it is printed in parts that fit, each repeating the first column."""
    out = target or console
    if _natural_width(out, table) <= out.width:
        out.print(table)
    elif not out.is_terminal:  # a console never prints wider than its own width: a wider twin on the same file
        from rich.console import Console

        Console(file=out.file, width=_natural_width(out, table), no_color=out.no_color,
                color_system=out.color_system,  # type: ignore[arg-type]  # the name Console() takes, as str
                ).print(table)
    else:
        for part in _column_parts(out, table):
            out.print(part)


def _natural_width(out: Console, table: Any) -> int:
    from rich.measure import Measurement

    return Measurement.get(out, out.options.update_width(UNBOUNDED_WIDTH), table).maximum


def _column_parts(out: Console, table: Any) -> list[Any]:
    """`table` as tables of consecutive columns that each fit the console, the first column in each
    (a single column wider than the console is a part of its own)."""
    from dataclasses import replace

    from rich import box

    def part(columns: list[Any], first: bool) -> Any:
        piece = copy.copy(table)
        piece.columns = [replace(column, _index=i) for i, column in enumerate(columns)]
        piece.box, piece.padding, piece.pad_edge = box.SIMPLE_HEAD, (0, 1), False
        if not first:
            piece.title = None
        return piece

    key, *rest = table.columns
    parts: list[Any] = []
    current = [key]
    for column in rest:
        if len(current) > 1 and _natural_width(out, part([*current, column], not parts)) > out.width:
            parts.append(part(current, not parts))
            current = [key]
        current.append(column)
    parts.append(part(current, not parts))
    return parts


def fail(message: str, hint: str | None = None, code: int = 2) -> None:
    # soft_wrap: one line per message whatever the terminal's width, so it can be grepped
    err_console.print(f"[bold red]error:[/] {visible(message)}", highlight=False, soft_wrap=True)
    if hint:
        err_console.print(f"  {visible(hint)}", highlight=False, soft_wrap=True)
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
        except BrokenPipeError:
            quiet_stdout()  # the reader went away (`| head`): nothing left to say, and nowhere to say it
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except OSError as error:  # disk full, I/O error, too many symlinks, a name too long ...
            hint = OS_ERROR_HINTS.get(error.errno or 0, "check the path and the device")
            fail(f"{os_error_line(error)}; {hint}", code=1)  # one line: scripts read the last line of stderr
        except UnicodeDecodeError as error:  # a binary file where text was expected (a policy TOML, a session file)
            fail(f"a file is not UTF-8 text ({error.reason} at byte {error.start}); give a text file: policies "
                 "are TOML, sessions JSON lines")
        except KeyboardInterrupt:
            fail("interrupted", code=130)

    return wrapper  # type: ignore[return-value]  # functools.wraps keeps the signature typer reads


UNBOUNDED_WIDTH = 100_000  # columns to measure a table's natural width in
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader went away
OS_ERROR_HINTS = {
    errno.ENOSPC: "free some disk space, or write somewhere else",
    errno.EIO: "the device reported an I/O error: check the disk or the mount",
    errno.EROFS: "the file system is read-only: write somewhere else",
    errno.ELOOP: "a symbolic link points to itself: fix or remove it",
    errno.ENAMETOOLONG: "use a shorter path",
}


def os_error_line(error: OSError) -> str:
    """An OS error as one line: what the OS said, its errno name, and the file when it is known."""
    name = errno.errorcode.get(error.errno or 0, "")
    what = error.strerror or str(error) or type(error).__name__
    where = f": {error.filename}" if error.filename else ""
    return f"{what}{f' ({name})' if name else ''}{where}"


def quiet_stdout() -> None:
    """Points stdout at /dev/null, so the interpreter's last flush of unwritable output raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def flush_stdout_or_fail(*, report: bool = True) -> int | None:
    """Flushes stdout; an output that cannot be written (disk full, closed pipe) is one line on stderr
    (unless `report` is false: the command already said what went wrong) and an exit code (None: all
    written)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as error:
        quiet_stdout()
        if report:
            err_console.print(f"[bold red]error:[/] cannot write the output: {os_error_line(error)}", highlight=False,
                              soft_wrap=True)
        return 1
    return None
