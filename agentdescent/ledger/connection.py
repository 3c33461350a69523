"""The SQLite ledger's connections: one per thread, fresh ones after ``fork()``, errors translated, the write transaction.

`ConnectionKeeper` is a mixin of `agentdescent.ledger.sqlite.SqliteLedger`: it owns how a
thread gets its connection to the ledger file (``_conn``: opened on first use, configured
for WAL and ``busy_timeout``, the connections of ended threads closed, those inherited
through ``fork()`` parked, never used), how a ``sqlite3`` error becomes a `LedgerError`
naming the file and the operation (``_translate``; a damaged file is `LedgerCorrupted`),
and the write transaction (``_write``: one ``BEGIN IMMEDIATE``, or a savepoint inside the
ledger's ``atomic`` block, whose depth it reads from ``_local.atomic``). A read-only ledger
(``SqliteLedger(read_only=True)``) connects as `read_only_mode` decided when it opened, never
writes (``_write`` refuses), and says why a read-only folder cannot open a file. The ledger's
``__init__`` sets the state it uses (``_path``, ``_timeout``, ``_local``, ``_conns_lock``,
``_conns``, ``_inherited``, ``_pid``, ``_closed``, ``_read_only``, ``_ro_mode``); its ``close``
closes the connections.

It must not read or write any table: what a statement does is its caller's.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import LedgerError
from .base import SCHEMA
from .integrity import damaged_file_error, undecodable_text_error

__all__ = ["ConnectionKeeper", "read_only_mode"]

#: How a read-only ledger connects (`read_only_mode`): SQLite's ``mode=ro``; ``mode=ro`` with
#: ``immutable=1``; or a normal connection with ``PRAGMA query_only``.
RO, IMMUTABLE, QUERY_ONLY = "ro", "immutable", "query_only"


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK)  # False on a read-only mount, for root too (EROFS)


def read_only_mode(path: Path) -> str:
    """How to open the ledger file ``path`` read-only without writing anything, there or beside it.

    SQLite's ``mode=ro`` alone is not enough for a WAL file. Without the ``-wal`` and
    ``-shm`` files beside it, a reader must create them: in a read-only folder it cannot
    (``unable to open database file``), and in a writable one a read-only connection
    leaves them behind. So:

    - a ``-wal`` (or a rollback ``-journal``) is there: ``mode=ro``. It may hold commits
      not yet copied into the file, which only a reader of the log sees; a writer may be
      going on.
    - none, and the folder and the file are writable: a normal connection with ``PRAGMA
      query_only``, which no statement can write through. It makes the empty ``-wal`` and
      ``-shm`` files and, when it closes last, removes them again, so the folder is left as
      it was, and it takes part in SQLite's locking like any reader while another process
      writes. (Closing last after another process committed meanwhile, it copies those
      commits from the log into the file, as their writer would have: SQLite's checkpoint,
      no row of its own.)
    - none, and the folder (or the file) is not writable: ``mode=ro&immutable=1``: SQLite
      reads the file as it is, with no side file and no lock. Safe because no log holds
      anything beyond the file, and no writer can start here without making a ``-wal``
      in this folder, which it cannot.
    """
    side = [path.with_name(path.name + end) for end in ("-wal", "-journal")]
    if any(os.path.lexists(f) for f in side):
        return RO
    if _writable(path.parent) and _writable(path):
        return QUERY_ONLY
    return IMMUTABLE


class ConnectionKeeper:
    """The connection members of `agentdescent.ledger.SqliteLedger` (mixed in; the ledger's
    ``__init__`` sets their state, its ``atomic`` the depth ``_write`` reads)."""

    _path: Path
    _timeout: float
    _local: Any
    _conns_lock: Any
    _conns: list[tuple[threading.Thread, sqlite3.Connection]]
    _inherited: list[sqlite3.Connection]
    _pid: int
    _closed: bool
    _read_only: bool
    _ro_mode: str | None

    def _fail(self, what: str, exc: BaseException) -> LedgerError:
        text = str(exc)
        if self._read_only and isinstance(exc, sqlite3.OperationalError) and "unable to open" in text:
            return self._cannot_open_read_only(what, exc)
        if isinstance(exc, sqlite3.DatabaseError) and ("malformed" in text or "not a database" in text):
            damaged = damaged_file_error(str(self._path), what, exc)
            if damaged is not None:
                return damaged
        if isinstance(exc, sqlite3.OperationalError) and "Could not decode to UTF-8" in text:
            return undecodable_text_error(str(self._path), what, exc)
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in text:
            return LedgerError(
                f"ledger file {str(self._path)!r} is not a SQLite database ({exc}); expected an "
                f"agentdescent ledger ({SCHEMA}) or a path that does not exist yet; point the "
                "ledger at another path"
            )
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            return LedgerError(
                f"ledger file {str(self._path)!r}: {what} waited {self._timeout:g} s for another "
                f"writer's lock ({exc}); raise SqliteLedger(timeout=...) or find the process "
                "holding the file"
            )
        return LedgerError(f"ledger file {str(self._path)!r}: {what} failed: {exc}")

    def _cannot_open_read_only(self, what: str, exc: BaseException) -> LedgerError:
        path = str(self._path)
        wal, shm = Path(path + "-wal"), Path(path + "-shm")
        if wal.exists() and not shm.exists() and not _writable(self._path.parent):
            why = (f"its write-ahead log {str(wal)!r} holds writes not yet copied into the file, and reading "
                   f"them needs its index {str(shm)!r}, which is missing and cannot be made in the read-only "
                   "folder. Open it once where its folder is writable (any write, e.g. SqliteLedger(path) and "
                   "close), or copy the folder to a writable place and read the copy")
        else:
            why = "check that the file and its folder can be read"
        return LedgerError(f"ledger file {path!r}: {what} failed, opened read-only ({exc}): {why}")

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        """Turn sqlite3 errors into a LedgerError naming the file and the operation."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._fail(what, exc) from exc

    def _conn(self) -> sqlite3.Connection:
        if os.getpid() != self._pid:
            self._after_fork()
        conn = getattr(self._local, "conn", None)
        if conn is not None and not self._closed:
            return conn
        with self._conns_lock:
            if self._closed:
                raise LedgerError(
                    f"ledger file {str(self._path)!r}: this SqliteLedger was closed; open a new "
                    f"SqliteLedger({str(self._path)!r}) to keep using the file"
                )
            # Drop the connections of threads that have ended, so a long run that
            # churns threads does not keep one open file handle per dead thread.
            alive = []
            for thread, old in self._conns:
                if thread.is_alive():
                    alive.append((thread, old))
                else:
                    old.close()
            # check_same_thread=False only so close() may close it from another
            # thread; in use, each connection stays with the thread that opened it.
            target, uri = str(self._path), False
            if self._ro_mode in (RO, IMMUTABLE):
                query = "mode=ro&immutable=1" if self._ro_mode == IMMUTABLE else "mode=ro"
                target, uri = Path(os.path.abspath(self._path)).as_uri() + "?" + query, True
            with self._translate("opening the file"):
                conn = sqlite3.connect(
                    target,
                    timeout=self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                    uri=uri,
                )
            alive.append((threading.current_thread(), conn))
            self._conns = alive
        try:
            with self._translate("configuring the connection"):
                conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
                if self._read_only:
                    conn.execute("PRAGMA query_only = ON")  # no statement writes, whatever the mode
        except BaseException:
            conn.close()
            raise
        self._local.conn = conn
        return conn

    def _after_fork(self) -> None:
        # A SQLite connection must never be used across fork(): this process gets
        # connections of its own. The inherited ones are parked, not closed, so
        # their finalisers never touch the parent's file handles and locks.
        with self._conns_lock:
            if os.getpid() == self._pid:
                return
            self._inherited.extend(conn for _, conn in self._conns)
            self._conns = []
            self._local = threading.local()
            self._pid = os.getpid()

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        """Run the body in one ``BEGIN IMMEDIATE`` transaction: all of it or none of it.

        Inside `atomic`, the body is a savepoint of the block's transaction instead.

        Raises:
            LedgerError: the ledger was opened read-only (nothing is written).
        """
        if self._read_only:
            raise LedgerError(
                f"ledger file {str(self._path)!r}: {what} writes, and this SqliteLedger was opened "
                f"read-only (read_only=True); open SqliteLedger({str(self._path)!r}) without it to write"
            )
        conn = self._conn()
        if getattr(self._local, "atomic", 0):
            with self._translate(what):
                if not conn.in_transaction:
                    conn.execute("BEGIN IMMEDIATE")
                conn.execute("SAVEPOINT agentdescent_write")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK TO agentdescent_write")
                    conn.execute("RELEASE agentdescent_write")
                    raise
                conn.execute("RELEASE agentdescent_write")
            return
        with self._translate(what):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
