"""The SQLite ledger's connections: one per thread, fresh ones after ``fork()``, errors translated, the write transaction.

`ConnectionKeeper` is a mixin of `agentdescent.ledger.sqlite.SqliteLedger`: it owns how a
thread gets its connection to the ledger file (``_conn``: opened on first use, configured
for WAL and ``busy_timeout``, the connections of ended threads closed, those inherited
through ``fork()`` parked, never used), how a ``sqlite3`` error becomes a `LedgerError`
naming the file and the operation (``_translate``; a damaged file is `LedgerCorrupted`),
and the write transaction (``_write``: one ``BEGIN IMMEDIATE``, or a savepoint inside the
ledger's ``atomic`` block, whose depth it reads from ``_local.atomic``). The ledger's
``__init__`` sets the state it uses (``_path``, ``_timeout``, ``_local``, ``_conns_lock``,
``_conns``, ``_inherited``, ``_pid``, ``_closed``); its ``close`` closes the connections.

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
from .integrity import damaged_file_error

__all__ = ["ConnectionKeeper"]


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

    def _fail(self, what: str, exc: BaseException) -> LedgerError:
        text = str(exc)
        if isinstance(exc, sqlite3.DatabaseError) and ("malformed" in text or "not a database" in text):
            damaged = damaged_file_error(str(self._path), what, exc)
            if damaged is not None:
                return damaged
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
            with self._translate("opening the file"):
                conn = sqlite3.connect(
                    str(self._path),
                    timeout=self._timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            alive.append((threading.current_thread(), conn))
            self._conns = alive
        try:
            with self._translate("configuring the connection"):
                conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
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
        """
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
