"""The PostgreSQL ledger's connections: the pool, errors translated, bounded reconnection, the write transaction.

`PgConnectionKeeper` is a mixin of `agentdescent.ledger.postgres.PostgresLedger`: it owns how a
thread gets its connection (``_conn``: taken from a pool of at most ``max_connections`` on
first use and kept while the thread lives, given back when it ends, replaced when the server
dropped it, never used across ``fork()``), how a psycopg error becomes the ledger's
(``_translate``: a lost connection is `LedgerUnavailable`, the rest `LedgerError`), the bounded
reconnection (``_retry``: one bound per outage, shared by every call and thread), and the
write transaction (``_write``, ``atomic``: ``BEGIN`` at ``READ COMMITTED`` and the ledger's
advisory writer lock; savepoints inside a block). `Statements` lets the shared readers and
lease rules speak ``sqlite3``'s ``?`` placeholders on a psycopg connection. The ledger's
``__init__`` sets the state it uses (``_dsn``, ``_where``, ``_schema``, ``_lock_key``,
``_timeout``, ``_retry_seconds``, ``_max``, ``_read_only``, ``_local``, ``_pool_lock``,
``_idle``, ``_owned``, ``_inherited``, ``_pid``, ``_closed``, ``_rng``, ``_outage``,
``_psycopg``).

It must not read or write any table: what a statement does is its caller's.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from ..errors import LedgerError, LedgerUnavailable
from .dsn import clean_error as _clean

__all__ = ["PgConnectionKeeper", "Statements", "import_psycopg"]

logger = logging.getLogger("agentdescent.ledger")

T = TypeVar("T")

# SQLSTATEs of a connection that is gone or going (class 08, the server shutting down or
# starting, too many connections): the operation may be tried again on a new connection.
_RECONNECT_STATES = ("57P01", "57P02", "57P03", "53300")


@functools.lru_cache(maxsize=512)
def _pg(sql: str) -> str:
    """The ledger modules' SQL (``?`` placeholders) in psycopg's (``%s``, a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class Statements:
    """A psycopg connection with the ``execute``/``executemany`` of a ``sqlite3`` one (``?`` placeholders),
    so the shared readers (`RowReader`) and lease rules (`agentdescent.ledger.lease`) run on it unchanged."""

    __slots__ = ("raw",)

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(_pg(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        rows = list(rows)
        if rows:
            with self.raw.cursor() as cursor:
                cursor.executemany(_pg(sql), rows)

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus
        return self.raw.info.transaction_status != TransactionStatus.IDLE


def import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(
            "PostgresLedger needs psycopg 3, which is not installed: pip install 'agentdescent[postgres]' "
            f"({exc})") from exc
    return psycopg


class PgConnectionKeeper:
    """The connection members of `agentdescent.ledger.postgres.PostgresLedger` (mixed in)."""

    _dsn: str
    _where: str
    _schema: str
    _lock_key: int
    _timeout: float
    _retry_seconds: float
    _max: int
    _read_only: bool
    _local: Any
    _pool_lock: threading.Condition
    _idle: list[Any]
    _owned: list[tuple[threading.Thread, Any]]
    _inherited: list[Any]
    _pid: int
    _closed: bool
    _rng: Any
    _outage: float | None
    _psycopg: Any

    def _connect(self) -> Any:
        psycopg = self._psycopg
        conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=max(1, int(round(self._timeout))))
        try:
            conn.execute(f'SET search_path TO "{self._schema}"')
            conn.execute(f"SET lock_timeout = {int(self._timeout * 1000)}")
            if self._read_only:
                conn.execute("SET default_transaction_read_only = on")
        except BaseException:
            conn.close()
            raise
        return conn

    def _conn(self) -> Statements:
        """This thread's connection (taken from the pool on first use, replaced when broken)."""
        if os.getpid() != self._pid:
            self._after_fork()
        held = getattr(self._local, "conn", None)
        if held is not None and not held.raw.closed and not self._closed:
            return held
        if held is not None:
            self._drop(held.raw)
        with self._pool_lock:
            deadline = time.monotonic() + self._timeout
            while True:
                if self._closed:
                    raise LedgerError(f"ledger database {self._where!r}: this PostgresLedger was closed; open "
                                      "a new PostgresLedger(dsn) to keep using it")
                self._reap()
                if self._idle:
                    raw = self._idle.pop()
                    break
                if len(self._owned) < self._max:
                    raw = None
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LedgerError(
                        f"ledger database {self._where!r}: all {self._max} pooled connections are in use by live "
                        f"threads (waited {self._timeout:g} s); raise PostgresLedger(max_connections=...)")
                self._pool_lock.wait(min(left, 0.05))
            slot = (threading.current_thread(), raw)
            self._owned.append(slot)
        if raw is None or raw.closed:
            try:
                raw = self._connect()
            except BaseException:
                with self._pool_lock:
                    self._owned.remove(slot)
                raise
            with self._pool_lock:
                self._owned[self._owned.index(slot)] = (slot[0], raw)
        self._local.conn = Statements(raw)
        return self._local.conn

    def _reap(self) -> None:
        """Give the connections of ended threads back to the pool (the pool lock is held)."""
        alive = []
        for thread, raw in self._owned:
            if thread.is_alive():
                alive.append((thread, raw))
            elif raw is not None and not raw.closed:
                self._idle.append(raw)
        self._owned = alive

    def _drop(self, raw: Any) -> None:
        """Close this thread's connection and free its slot (it is broken or was cut)."""
        self._local.conn = None
        with self._pool_lock:
            self._owned = [(t, c) for t, c in self._owned if c is not raw]
            self._pool_lock.notify_all()
        with suppress(Exception):
            raw.close()

    def _after_fork(self) -> None:
        # A connection must never be used across fork(): the child opens its own. The
        # inherited ones are kept (never closed here, which would end the parent's sessions).
        with self._pool_lock:
            if os.getpid() == self._pid:
                return
            self._inherited.extend(c for _, c in self._owned if c is not None)
            self._inherited.extend(self._idle)
            self._owned, self._idle = [], []
            self._local = threading.local()
            self._pid = os.getpid()

    # ----------------------------------------------------------------- errors and retries

    def _lost_connection(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the connection is gone (the server went away), not a refused statement."""
        if not isinstance(exc, self._psycopg.OperationalError):
            return False
        held = getattr(self._local, "conn", None)
        state = getattr(exc, "sqlstate", None) or ""
        return (held is None or held.raw.closed or held.raw.broken or state.startswith("08")
                or state in _RECONNECT_STATES)

    def _fail(self, what: str, exc: BaseException) -> LedgerError:
        state = getattr(exc, "sqlstate", None) or ""
        if state == "55P03":
            return LedgerError(
                f"ledger database {self._where!r}: {what} waited {self._timeout:g} s for another writer's lock "
                f"({exc}); raise PostgresLedger(timeout=...) or find the session holding it")
        if state == "25006":
            return LedgerError(f"ledger database {self._where!r}: {what} writes, and this PostgresLedger was "
                               "opened read-only (read_only=True)")
        return LedgerError(f"ledger database {self._where!r}: {what} failed: {_clean(exc, self._dsn)}")

    def _refused_login(self, exc: BaseException) -> LedgerError | None:
        """The error of a connection the server refused for good (a login, a database, a role), or None
        when trying again may help (the server is down, starting or unreachable)."""
        text = _clean(exc, self._dsn)
        if any(p in text for p in ("authentication failed", "no password supplied", "pg_hba.conf")):
            return LedgerError(
                f"ledger database {self._where!r}: the server refused the login ({text}); give the password in "
                "PGPASSWORD or a PGPASSFILE (~/.pgpass), never in a stored DSN")
        if "does not exist" in text:
            return LedgerError(f"ledger database {self._where!r}: {text}; create it first (createdb NAME, "
                               "createuser NAME) or point the DSN at an existing one")
        if "invalid" in text and ("dsn" in text.lower() or "connection option" in text or "URI" in text):
            return LedgerError(f"ledger database {self._where!r}: the DSN is not valid ({text}); give "
                               "'postgresql://user@host:5432/dbname' or 'host=... dbname=...'")
        return None

    @contextmanager
    def _translate(self, what: str) -> Iterator[None]:
        """Turn psycopg errors into the ledger's: a lost connection is dropped and reported as
        `LedgerUnavailable` (which `_retry` tries again), anything else as `LedgerError`."""
        try:
            yield
        except self._psycopg.Error as exc:
            if self._lost_connection(exc):
                held = getattr(self._local, "conn", None)
                if held is not None:
                    self._drop(held.raw)
                if getattr(self._local, "block_open", False):
                    self._local.block_broken = True  # the block's writes went with the connection
                raise LedgerUnavailable(
                    f"ledger database {self._where!r}: {what}: the connection to the server was lost "
                    f"({_clean(exc, self._dsn)})", where=self._where, attempts=1) from exc
            raise self._fail(what, exc) from exc

    def _retry(self, what: str, attempt: Callable[[], T]) -> T:
        """Run ``attempt`` (which calls ``_conn``), reconnecting with a backoff while the server is
        unreachable, for up to ``retry_seconds`` from the first failure of the outage (one bound
        for every call and thread of this object; a call that succeeds ends the outage).

        Not retried: a lost connection once a block (``atomic``) has begun writing (its writes
        are gone with it), and a block's commit cut off midway (`LedgerUnavailable` with
        ``outcome_unknown``). Everything else the ledger does outside a block is safe to try
        again: reads, ``register`` (a no-op once it landed), saves and lease writes (they write
        the same rows again), and ``commit``, which looks whether it landed first.
        """
        tries = 0
        while True:
            tries += 1
            try:
                value = attempt()
            except LedgerUnavailable as exc:
                error: BaseException = exc
                if getattr(self._local, "block_open", False) or exc.seconds > 0:
                    raise  # a block's writes are gone; or an inner retry already spent the bound
            except self._psycopg.OperationalError as exc:  # connecting failed
                refused = self._refused_login(exc)
                if refused is not None:
                    raise refused from None
                error = exc
            else:
                if self._outage is not None:
                    self._outage = None
                    logger.warning("ledger database %s: reached the server again", self._where)
                return value
            # One bound per outage, shared by every thread: once it is spent, each call fails at its
            # first failed attempt, so a driver stops within the bound, not a bound per call.
            with self._pool_lock:
                if self._outage is None:
                    self._outage = time.monotonic()
                elapsed = time.monotonic() - self._outage
            if elapsed >= self._retry_seconds:
                raise LedgerUnavailable(
                    f"ledger database {self._where!r}: {what}: the server could not be reached for "
                    f"{elapsed:.1f} s ({tries} attempt(s) by this call; retry_seconds={self._retry_seconds:g}): "
                    f"{_clean(error, self._dsn)}. Start the server or check the network, then resume the run "
                    "(evolve(..., ledger=dsn) resumes its saved progress); raise "
                    "PostgresLedger(retry_seconds=...) to wait longer",
                    where=self._where, attempts=tries, seconds=max(elapsed, 1e-9)) from error
            pause = min(2.0, 0.05 * 2 ** min(tries, 6)) * (0.5 + self._rng.random())
            logger.warning("ledger database %s: %s: reconnecting (attempt %d, %.1f s into the outage): %s",
                           self._where, what, tries, elapsed, _clean(error, self._dsn))
            time.sleep(min(pause, max(0.0, self._retry_seconds - elapsed) + 0.01))

    @contextmanager
    def _write(self, what: str, *, lock: bool = True) -> Iterator[Statements]:
        """Run the body in one transaction holding the ledger's writer lock: all of it or none of it.

        Inside `atomic`, the body is a savepoint of the block's transaction, begun (and the
        lock taken) by the block's first write. A connection found lost when a transaction
        begins is replaced (bounded, `_retry`); one lost inside it raises `LedgerUnavailable`.
        psycopg errors of the body are translated (`_translate`).

        Raises:
            LedgerError: the ledger was opened read-only (nothing is written).
        """
        if self._read_only:
            raise LedgerError(
                f"ledger database {self._where!r}: {what} writes, and this PostgresLedger was opened read-only "
                "(read_only=True); open it without read_only to write")
        if not getattr(self._local, "atomic", 0):
            conn = self._begin(what, lock)
            try:
                with self._translate(what):
                    yield conn
            except BaseException:
                self._rollback(conn)
                raise
            self._commit(conn, what)
            return
        if getattr(self._local, "block_broken", False):
            raise LedgerUnavailable(
                f"ledger database {self._where!r}: {what}: an earlier write of this block lost its connection, "
                "and the block's writes with it; none of the block landed. Leave the block and start again",
                where=self._where, attempts=1)
        if not getattr(self._local, "block_open", False):
            conn = self._begin(what, lock)  # nothing of the block is written yet: a lost connection is retried
            self._local.block_open = True
        else:
            conn = self._conn()
        with self._translate(what):
            conn.execute("SAVEPOINT agentdescent_write")
            try:
                yield conn
            except BaseException:
                if not conn.raw.closed:
                    conn.execute("ROLLBACK TO SAVEPOINT agentdescent_write")
                    conn.execute("RELEASE SAVEPOINT agentdescent_write")
                raise
            conn.execute("RELEASE SAVEPOINT agentdescent_write")

    def _begin(self, what: str, lock: bool) -> Statements:
        def begin() -> Statements:
            conn = self._conn()
            with self._translate(what):
                conn.execute("BEGIN")
                if lock:
                    conn.execute("SELECT pg_advisory_xact_lock(?)", (self._lock_key,))
            return conn
        return self._retry(what, begin)

    def _rollback(self, conn: Statements) -> None:
        try:
            if not conn.raw.closed and conn.in_transaction:
                conn.raw.execute("ROLLBACK")
        except self._psycopg.Error:
            self._drop(conn.raw)

    def _commit(self, conn: Statements, what: str) -> None:
        try:
            with self._translate(what):
                tag = conn.raw.execute("COMMIT").statusmessage
        except LedgerUnavailable as exc:
            raise LedgerUnavailable(
                f"{exc}, while committing: the transaction may or may not have landed", where=self._where,
                attempts=1, outcome_unknown=True) from exc
        if tag != "COMMIT":  # the server rolled back a transaction a failed statement had aborted
            raise LedgerError(f"ledger database {self._where!r}: {what}: the server rolled the transaction back "
                              f"(it answered {tag!r}); nothing of it landed")

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """A block whose writes from this thread land in one transaction, or not at all.

        The first write inside the block begins the transaction and takes the ledger's writer
        lock, held until the block ends, when everything written commits together: a driver
        killed inside the block leaves the ledger as it was before it. Each write inside is a
        savepoint: a write that raises (a `CASConflict`, say) leaves the ones before it, which
        land when the block ends, whether it ends normally or by an exception (as in
        `SqliteLedger`). Blocks nest; the outermost commits. Other sessions read what was
        committed before the block until it ends.

        Raises:
            LedgerUnavailable: the connection was lost inside the block (none of it landed), or
                while it committed (``outcome_unknown``: the message says so).
            LedgerError: the block cannot be committed.
        """
        depth = getattr(self._local, "atomic", 0)
        self._local.atomic = depth + 1
        try:
            yield
        finally:
            self._local.atomic = depth
            if depth == 0:
                opened = getattr(self._local, "block_open", False)
                broken = getattr(self._local, "block_broken", False)
                self._local.block_open = self._local.block_broken = False
                held = getattr(self._local, "conn", None)
                if opened and not broken and held is not None and not self._closed and not held.raw.closed:
                    self._commit(held, "committing a block of writes")
                elif opened and broken and sys.exc_info()[0] is None:
                    raise LedgerUnavailable(
                        f"ledger database {self._where!r}: a block of writes lost its connection to the server; "
                        "none of it landed", where=self._where, attempts=1)
