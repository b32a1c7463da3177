"""A real, throwaway PostgreSQL server for integration tests.

Uses Debian's server binaries (``apt-get install postgresql``: ``/usr/lib/postgresql/<v>/bin``;
``CAPWATCH_PG_BINDIR`` overrides). ``initdb`` writes a fresh cluster into a temporary directory,
``pg_ctl`` starts it on a free 127.0.0.1 port with its unix socket in that directory, a database
is created, and ``pg_ctl stop -m fast`` stops it. PostgreSQL refuses to run as root, so as root
every server command runs as the ``postgres`` system user (``runuser -u postgres --``) and the
temporary directory is handed to that user. Durability is switched off (fsync, full-page
writes, synchronous commit): this server only ever holds test data.

If ``CAPWATCH_TEST_POSTGRES_DSN`` is set, that server is used and nothing is started.

Command line: ``.venv/bin/python -m tests.support.postgres_server`` starts, prints, stops.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support._proc import ManagedServer, free_port, start_print_stop, tail, wait_until

DATABASE = "capwatch_test"
SERVICE_USER = "postgres"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


class PostgresServerError(RuntimeError):
    """The server could not be found, started or reached."""


def find_bindir() -> Path:
    """The directory holding initdb and pg_ctl: newest Debian version first.

    ``/usr/local/bin/pg_ctl`` on some images is only a symlink into ``/usr/lib/postgresql``;
    a ``pg_ctl`` on PATH is followed to its real directory, which must also hold ``initdb``.
    """
    env = os.environ.get("CAPWATCH_PG_BINDIR")
    candidates: list[Path] = [Path(env)] if env else []

    def version_key(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name)) or (0,)

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version_key, reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for d in candidates:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file():
            return d
    raise PostgresServerError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql"
    )


def wait_for_connection(dsn: str, timeout_s: float) -> None:
    import psycopg

    errors: list[psycopg.OperationalError] = []

    def connects() -> bool:
        try:
            with psycopg.connect(dsn, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError as e:
            errors.append(e)
            return False

    if not wait_until(connects, timeout_s):
        last = errors[-1]
        raise PostgresServerError(f"PostgreSQL at {dsn} not reachable: {last}") from last


@dataclass
class PostgresServer(ManagedServer):
    """A running server (or an external one when ``external`` is true)."""

    dsn: str
    external: bool = False
    workdir: Path | None = None
    bindir: Path | None = None
    port: int = 0
    start_seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def datadir(self) -> Path | None:
        return self.workdir / "data" if self.workdir else None

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The server and every one of its processes stopped (SIGSTOP) until the block
        ends: sockets stay open and the kernel keeps acknowledging, nothing answers."""
        if self.external or self.datadir is None:
            raise PostgresServerError("only a server started here can be frozen")
        postmaster = int((self.datadir / "postmaster.pid").read_text().split()[0])
        pids = [postmaster, *_children(postmaster)]
        stopped = []
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            yield
        finally:
            for pid in stopped:
                os.kill(pid, signal.SIGCONT)

    def stop(self, graceful: bool = True) -> None:
        """``graceful`` False: ``-m immediate`` (no shutdown checkpoint) for a throw-away
        server whose directory goes with it (the test session's)."""
        if self.external or self.workdir is None or self.bindir is None:
            return
        workdir, self.workdir = self.workdir, None
        data = workdir / "data"
        if (data / "postmaster.pid").exists():
            t0 = time.monotonic()
            _run_as_service_user(
                [str(self.bindir / "pg_ctl"), "stop", "-D", str(data), "-m",
                 "fast" if graceful else "immediate", "-w", "-t", str(STOP_TIMEOUT_S)],
                check=False,
            )  # fmt: skip
            self.timings["stop"] = time.monotonic() - t0
        if not os.environ.get("CAPWATCH_KEEP_POSTGRES_DIR"):
            shutil.rmtree(workdir, ignore_errors=True)


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # The command name in parentheses may hold spaces; the parent pid follows state.
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.append(int(entry))
    return found


def _as_root() -> bool:
    return os.geteuid() == 0


def _run_as_service_user(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    if _as_root():
        runuser = shutil.which("runuser") or "/usr/sbin/runuser"
        cmd = [runuser, "-u", SERVICE_USER, "--", *cmd]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=START_TIMEOUT_S + 30, check=False,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise PostgresServerError(
            f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return proc


def start_postgres_server(database: str = DATABASE) -> PostgresServer:
    """Start a fresh server (or use ``CAPWATCH_TEST_POSTGRES_DSN``) and return its DSN."""
    t0 = time.monotonic()
    external = os.environ.get("CAPWATCH_TEST_POSTGRES_DSN")
    if external:
        wait_for_connection(external, START_TIMEOUT_S)
        return PostgresServer(dsn=external, external=True, start_seconds=time.monotonic() - t0)

    bindir = find_bindir()
    workdir = Path(tempfile.mkdtemp(prefix="capwatch-pg-", dir=_workdir_parent()))
    server = PostgresServer(dsn="", workdir=workdir, bindir=bindir)
    try:
        if _as_root():
            try:
                pw = pwd.getpwnam(SERVICE_USER)
            except KeyError as e:
                raise PostgresServerError(
                    f"running as root needs the '{SERVICE_USER}' system user "
                    "(created by apt-get install postgresql)"
                ) from e
            os.chown(workdir, pw.pw_uid, pw.pw_gid)
        user = pwd.getpwuid(os.geteuid()).pw_name if not _as_root() else SERVICE_USER
        data = workdir / "data"

        t1 = time.monotonic()
        _run_as_service_user([
            str(bindir / "initdb"), "-D", str(data), "-U", user, "--auth=trust",
            "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions",
        ])  # fmt: skip
        server.timings["initdb"] = time.monotonic() - t1

        t2 = time.monotonic()
        port = _pg_ctl_start(bindir, workdir)
        server.timings["pg_ctl_start"] = time.monotonic() - t2
        server.port = port

        import psycopg

        admin_dsn = f"postgresql://{user}@127.0.0.1:{port}/postgres"
        wait_for_connection(admin_dsn, START_TIMEOUT_S)
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')  # name is ours, not user input
        server.dsn = f"postgresql://{user}@127.0.0.1:{port}/{database}"
        server.start_seconds = time.monotonic() - t0
        return server
    except BaseException:
        server.stop()
        raise


def _pg_ctl_start(bindir: Path, workdir: Path) -> int:
    """Start the server on a free port (retried if another process takes it first)."""
    output = ""
    for _attempt in range(3):
        port = free_port()
        opts = (
            f"-c port={port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={workdir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50"
        )
        proc = _run_as_service_user(
            [str(bindir / "pg_ctl"), "start", "-D", str(workdir / "data"), "-w",
             "-t", str(START_TIMEOUT_S), "-l", str(workdir / "postgres.log"), "-o", opts],
            check=False,
        )  # fmt: skip
        if proc.returncode == 0:
            return port
        output = proc.stdout + proc.stderr + tail(workdir / "postgres.log", 30)
        if "already in use" not in output:
            break
    raise PostgresServerError(f"pg_ctl start failed:\n{output}")


def _workdir_parent() -> str:
    """The system temp dir, unless the server user could not reach it or the socket path
    (limited to ~107 bytes) would be too long there; then /tmp."""
    base = tempfile.gettempdir()
    if len(base) > 40:
        return "/tmp"
    if _as_root():
        p = Path(base).resolve()
        for d in (p, *p.parents):
            if not os.stat(d).st_mode & 0o001:  # not searchable by others
                return "/tmp"
    return base


def main() -> int:
    return start_print_stop(
        start_postgres_server,
        lambda s: f"PostgreSQL ready at {s.dsn} in {s.start_seconds:.1f}s {s.timings}",
        PostgresServerError,
    )


if __name__ == "__main__":
    sys.exit(main())
