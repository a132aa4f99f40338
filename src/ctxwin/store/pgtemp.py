"""A throwaway local PostgreSQL server, for the tests and benchmarks of the PostgreSQL backend.

It uses the server binaries installed on the machine (Debian's `/usr/lib/postgresql/<v>/bin`, or
`initdb` on PATH). PostgreSQL refuses to run as root, so under root the data folder is given to the
`postgres` user and the binaries run as that user (`runuser`). The server listens on 127.0.0.1 on a
free port with `fsync=off` (it is thrown away; `start(fsync=True)` for measuring what a commit that
waits for the disk costs), and `stop()` removes everything it created.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 30  # how long pg_ctl may take to bring the server up
SERVICE_USER = "postgres"  # who runs the server when we are root


@dataclass
class TempPostgres:
    """A running server: `dsn` connects to its `postgres` database as the `postgres` superuser."""

    bindir: Path
    datadir: Path
    port: int
    run_as: str | None

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    def stop(self) -> None:
        _run(self.run_as, [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop"],
             check=False)
        shutil.rmtree(self.datadir.parent, ignore_errors=True)


def find_bindir() -> Path | None:
    """The newest installed PostgreSQL server's bin folder, or None."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name)
                        if Path(p).parent.parent.name.isdigit() else 0)
    if candidates:
        return Path(candidates[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def unavailable_reason(bindir: Path | None = None) -> str | None:
    """Why a server cannot be started here (from `bindir`, default the newest installed one), or None
    when it can."""
    bindir = bindir or find_bindir()
    if bindir is None:
        return "no PostgreSQL server binaries (initdb) found; install Debian's `postgresql` package"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(SERVICE_USER)
        except KeyError:
            return f"running as root and there is no `{SERVICE_USER}` user to run the server as"
        if shutil.which("runuser") is None:
            return "running as root and `runuser` is missing"
        # The server runs as that user: binaries under a folder private to root (a 0700 home or temporary
        # folder holding a venv's server wheel) cannot be run by it.
        probe = subprocess.run(["runuser", "-u", SERVICE_USER, "--", "test", "-x", str(bindir / "initdb")],
                               capture_output=True, timeout=30, check=False)
        if probe.returncode:
            return (f"the `{SERVICE_USER}` user cannot run {bindir / 'initdb'} (a folder above it is private to "
                    "root); keep the checkout in a folder others may enter, or chmod o+x the folders above it")
    return None


def start(bindir: Path | None = None, *, fsync: bool = False) -> TempPostgres:
    """Initializes and starts a fresh server (from `bindir`, default the newest installed one); raises
    RuntimeError with the server's log on failure."""
    bindir = bindir or find_bindir()
    if bindir is None:
        raise RuntimeError(unavailable_reason() or "no PostgreSQL")
    run_as = SERVICE_USER if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="ctxwin-pg-"))
    datadir, sockdir, log = root / "data", root / "sock", root / "server.log"
    sockdir.mkdir()
    if run_as:
        user = pwd.getpwnam(run_as)
        os.chmod(root, 0o755)
        for path in (root, sockdir):
            os.chown(path, user.pw_uid, user.pw_gid)
    try:
        _run(run_as, [str(bindir / "initdb"), "--no-sync", "-D", str(datadir), "-A", "trust", "-U", "postgres",
                      "-E", "UTF8"])
        port = _free_port()
        durable = "-c fsync=on" if fsync else "-c fsync=off -c full_page_writes=off"
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockdir} {durable}"
        _run(run_as, [str(bindir / "pg_ctl"), "-D", str(datadir), "-l", str(log), "-w", "-t", str(START_TIMEOUT_S),
                      "-o", options, "start"])
    except (subprocess.CalledProcessError, OSError) as error:
        detail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {error}\n{detail}") from error
    return TempPostgres(bindir=bindir, datadir=datadir, port=port, run_as=run_as)


def _run(run_as: str | None, argv: list[str], check: bool = True) -> None:
    if run_as:
        argv = ["runuser", "-u", run_as, "--", *argv]
    subprocess.run(argv, check=check, capture_output=True, cwd="/", timeout=START_TIMEOUT_S + 30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(dsn: str, timeout: float = 10.0) -> None:
    """Blocks until the server accepts connections (pg_ctl -w usually suffices; this is belt and braces)."""
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
