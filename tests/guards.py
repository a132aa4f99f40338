"""Hang guards for tests of behaviour that must not wait (a cancel, a timeout, a killed process).

Not speed tests (speed lives in `benchmarks/`): the guard's limit is far above what the call takes even on
a loaded machine, and far below how long it would take if the behaviour under test were broken (the test
sets that up: a server that would answer in minutes, a sleep of an hour), so a failure means the behaviour
is broken, never that the machine was busy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

HANG_GUARD_S = 60.0  # what every guarded call gets unless a test says otherwise


def within(seconds: float, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`call(*args, **kwargs)` in a thread; its value (or its exception) once it returns, or a failure
    naming it when it is still running after `seconds`."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call(*args, **kwargs)
        except BaseException as error:  # handed back to the test thread
            box["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{getattr(call, '__name__', call)} hung for more than {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]
