"""Cancellation of a model call: a set `threading.Event` stops the call before it is sent, while it
waits for the answer's first byte, and while the body or stream is read."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx

from ctxwin.errors import ModelCallCancelled
from ctxwin.providers.interface import SSE

CANCEL_POLL_SECONDS = 0.05  # how often a blocked read checks its cancel event


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise ModelCallCancelled("the model call was cancelled")


def cancellable(source: Iterator[SSE], cancel: threading.Event | None) -> Iterator[SSE]:
    for item in source:
        check_cancel(cancel)
        yield item


def send_cancellable(http: httpx.Client, request: httpx.Request, cancel: threading.Event) -> httpx.Response:
    """`http.send(request, stream=True)`, given up on as soon as `cancel` is set. A server that answers
    a plain request only when the whole answer is ready sends no byte before then, so there is no body
    read to abort yet: the send runs in a helper thread, and a cancelled call returns at once while the
    helper closes whatever answer still arrives (it ends by the request's own timeout at the latest)."""
    outcome: dict[str, Any] = {}
    lock = threading.Lock()
    finished = threading.Event()

    def run() -> None:
        try:
            response = http.send(request, stream=True)
        except BaseException as error:  # handed to the caller, or dropped with the abandoned call
            with lock:
                outcome["error"] = error
        else:
            with lock:
                if outcome.get("abandoned"):
                    response.close()
                else:
                    outcome["response"] = response
        finally:
            finished.set()

    threading.Thread(target=run, name="ctxwin-send", daemon=True).start()
    while not finished.wait(CANCEL_POLL_SECONDS):
        if cancel.is_set():
            with lock:
                outcome["abandoned"] = True
                late = outcome.pop("response", None)
            if late is not None:
                late.close()
            raise ModelCallCancelled("the model call was cancelled")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["response"]


@contextlib.contextmanager
def abort_on(cancel: threading.Event | None, response: httpx.Response) -> Iterator[None]:
    """While the body is read, a set cancel event shuts the socket down, so a read blocked waiting for
    the server returns at once (closing a socket does not wake a thread blocked on it; shutdown does)."""
    if cancel is None:
        yield
        return
    finished = threading.Event()
    lock = threading.Lock()  # no shutdown once the call is over: the connection may be back in the pool

    def watch() -> None:
        while not finished.is_set():
            if cancel.wait(CANCEL_POLL_SECONDS):
                with lock:
                    if finished.is_set():
                        return
                    stream = response.extensions.get("network_stream")
                    sock = stream.get_extra_info("socket") if stream is not None else None
                    if isinstance(sock, socket.socket):
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                return

    # Not joined: the watcher ends by itself within CANCEL_POLL_SECONDS, and the call does not wait for it.
    threading.Thread(target=watch, name="ctxwin-cancel", daemon=True).start()
    try:
        yield
    except (httpx.ReadError, httpx.RemoteProtocolError, httpx.StreamError):
        if cancel.is_set():
            raise ModelCallCancelled("the model call was cancelled") from None
        raise
    finally:
        with lock:
            finished.set()
