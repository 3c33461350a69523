"""`PostgresLedger`: the ledger in a PostgreSQL database, for drivers on several machines.

This module owns a database ledger: its tables in one schema of the database (artifact
versions that are never rewritten, each artifact's head pointer and the digest chain of
`agentdescent.ledger.integrity`, a run's saved progress with its digests, the driver leases
of `agentdescent.ledger.lease`), the write transaction and its lock, the connection pool,
and reconnection with bounded retries (`agentdescent.errors.LedgerUnavailable` after the
bound). The rows are checked by the same readers as a SQLite file's
(`agentdescent.ledger.rows`), the leases kept by the same rules (`LeaseHolder`).

**Isolation.** Every write transaction runs at ``READ COMMITTED`` and first takes one
transaction-scoped advisory lock per ledger schema (``pg_advisory_xact_lock``): one writer at
a time per ledger, exactly the rule SQLite's ``BEGIN IMMEDIATE`` gives a file. Under that
lock each statement's snapshot holds every write committed before it, so a commit's read of
the head and its insert of ``head + 1`` cannot interleave with another commit's, and the
lease rules (read the holders, then take or renew) hold across drivers. ``SERIALIZABLE``
would give the same safety by aborting one of two colliding transactions, but an abort of a
block of writes (a round's commit and its saved progress) cannot be replayed by the ledger,
and the engines' writes are short and rare, so waiting for the lock costs less than retrying.
Reads are single statements (a head and its state in one ``SELECT``), or run in one
``REPEATABLE READ`` snapshot where they read two tables (the history check, a run's saved
progress), so nothing reads a torn pair. Readers never wait for the writer.

It must not serialise anything with ``pickle`` (the tables hold JSON text, written through
parameterised SQL), log or store a password, or import ``psycopg`` before a ledger is made
(the package imports without the ``postgres`` extra).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import random
import re
import sys
import threading
import time
import urllib.parse
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

from ..errors import (
    CASConflict,
    InvalidArgument,
    InvalidArgumentType,
    LedgerCorrupted,
    LedgerError,
    LedgerTooNew,
    LedgerUnavailable,
    RunStateDamaged,
)
from ..validation import check_seconds
from .base import (
    SCHEMA,
    SCHEMA_VERSION,
    Ledger,
    LedgerEntry,
    _check_artifact_id,
    _check_base_version,
    _check_blast_radius,
    _check_state,
    _meta_json,
    _unknown,
    _warn_blast_radius_mismatch,
)
from .integrity import (
    ROOT_DIGEST,
    HistoryCheck,
    Pointer,
    is_dsn,
    round_digest,
    row_error,
    run_state_digest,
    run_state_problems,
    version_digest,
)
from .lease import DEFAULT_EXPIRY, LeaseHolder
from .rows import RowReader

__all__ = ["PostgresLedger", "is_dsn", "redact_dsn"]

logger = logging.getLogger("agentdescent.ledger")

T = TypeVar("T")

#: The default schema of the ledger's tables in the database.
DEFAULT_SCHEMA = "agentdescent"

_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# The same tables as a SQLite file's, in PostgreSQL's types: times and radii as double
# precision (REAL is 4 bytes there: a heartbeat would lose its seconds), versions as bigint.
_TABLES = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS artifacts ("
    " artifact_id TEXT PRIMARY KEY,"
    " blast_radius DOUBLE PRECISION NOT NULL,"
    " created_at DOUBLE PRECISION NOT NULL,"
    " head_version BIGINT NOT NULL,"
    " head_digest TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS versions ("
    " artifact_id TEXT NOT NULL REFERENCES artifacts(artifact_id),"
    " version BIGINT NOT NULL,"
    " state_json TEXT NOT NULL,"
    " meta_json TEXT NOT NULL,"
    " created_at DOUBLE PRECISION NOT NULL,"
    " parent_digest TEXT NOT NULL,"
    " digest TEXT NOT NULL,"
    " PRIMARY KEY (artifact_id, version))",
    "CREATE TABLE IF NOT EXISTS run_state ("
    " run_id TEXT PRIMARY KEY,"
    " state_json TEXT NOT NULL,"
    " updated_at DOUBLE PRECISION NOT NULL,"
    " digest TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS run_rounds ("
    " run_id TEXT NOT NULL,"
    " idx BIGINT NOT NULL,"
    " round_json TEXT NOT NULL,"
    " digest TEXT NOT NULL,"
    " PRIMARY KEY (run_id, idx))",
    "CREATE TABLE IF NOT EXISTS leases ("
    " artifact_id TEXT NOT NULL,"
    " run_id TEXT NOT NULL,"
    " holder TEXT NOT NULL,"
    " host TEXT NOT NULL,"
    " pid BIGINT NOT NULL,"
    " acquired_at DOUBLE PRECISION NOT NULL,"
    " heartbeat DOUBLE PRECISION NOT NULL,"
    " PRIMARY KEY (artifact_id, run_id))",
    "CREATE TABLE IF NOT EXISTS lease_takeovers ("
    " artifact_id TEXT NOT NULL,"
    " run_id TEXT NOT NULL,"
    " holder TEXT NOT NULL,"
    " taken_by TEXT NOT NULL,"
    " host TEXT NOT NULL,"
    " pid BIGINT NOT NULL,"
    " taken_at DOUBLE PRECISION NOT NULL,"
    " why TEXT NOT NULL,"
    " PRIMARY KEY (artifact_id, run_id, holder))",
)
_OURS = {"meta", "artifacts", "versions", "run_state", "run_rounds", "leases", "lease_takeovers"}
_MARKER = re.compile(r"agentdescent-ledger/(\d+)")

# SQLSTATEs of a connection that is gone or going (class 08, the server shutting down or
# starting, too many connections): the operation may be tried again on a new connection.
_RECONNECT_STATES = ("57P01", "57P02", "57P03", "53300")


# --------------------------------------------------------------------------- DSNs


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password, for messages, ``repr`` and a run's ``spec.json``.

    Both forms are handled: a URI (``postgresql://user:secret@host/db?password=...``) loses
    the password in its user part and its ``password`` parameter; a key/value string
    (``host=h password=secret dbname=d``) loses its ``password`` pair.

    Examples:
        >>> redact_dsn("postgresql://ada:s3cret@db.example:5432/runs")
        'postgresql://ada@db.example:5432/runs'
        >>> redact_dsn("host=db.example password=s3cret dbname=runs")
        'host=db.example dbname=runs'
    """
    if is_dsn(dsn):
        parts = urllib.parse.urlsplit(dsn.strip())
        netloc = parts.netloc
        if "@" in netloc:
            user, host = netloc.rsplit("@", 1)
            netloc = f"{user.split(':', 1)[0]}@{host}"
        query = urllib.parse.urlencode(
            [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k != "password"],
            safe="/")
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    return re.sub(r"\s*\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S*)", "", dsn).strip()


def dsn_has_password(dsn: str) -> bool:
    """Whether ``dsn`` carries a password (which a run directory must never store)."""
    return redact_dsn(dsn) != dsn.strip()


@functools.lru_cache(maxsize=512)
def _pg(sql: str) -> str:
    """The ledger modules' SQL (``?`` placeholders) in psycopg's (``%s``, a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class _Statements:
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


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(
            "PostgresLedger needs psycopg 3, which is not installed: pip install 'agentdescent[postgres]' "
            f"({exc})") from exc
    return psycopg


# --------------------------------------------------------------------------- the ledger


class PostgresLedger(LeaseHolder, RowReader, Ledger):
    """A `Ledger` in a PostgreSQL database: one artifact history shared by drivers on several machines.

    The contract is `SqliteLedger`'s, kept by the same rules (`agentdescent.testing.LedgerConformance`
    runs on it unchanged): a commit appends ``base + 1`` only if the head is still ``base``
    (`CASConflict` otherwise); a version is never rewritten; each artifact's head pointer and
    the digest chain over its versions make a deleted, edited or re-inserted version visible
    (`LedgerCorrupted`, on open and when it is read or built on); a schema written by a newer
    agentdescent is refused (`LedgerTooNew`); ``atomic()`` is one transaction; a driver holds
    a lease on its artifact, renewed by a heartbeat and taken over once it is gone
    (`LedgerBusy` to the driver that lost it); sharing drivers each keep their progress under
    their ``run_id``. How transactions are isolated, and why, is in the module's docstring.

    Connections come from a pool of at most ``max_connections``: a thread takes one on its
    first call and keeps it while it lives (its connection goes back to the pool when the
    thread ends), so a worker reading the head never waits on another thread. A connection
    the server dropped (a restart, a network cut) is replaced: each operation is tried again
    on a new connection, with a backoff, for up to ``retry_seconds``, and then fails with
    `LedgerUnavailable`. A commit cut off while committing is tried again only after checking
    whether it landed, so it never lands twice. Inside ``atomic()`` a lost connection loses
    the block's writes, which cannot be replayed: `LedgerUnavailable` at once, nothing of the
    block landed (or, lost while committing, its outcome unknown; the message says which).
    An object inherited through ``fork()`` opens fresh connections in the child.

    The password is libpq's business: in the DSN given here (never logged, never in ``repr``,
    never in an error), or, better, in ``PGPASSWORD`` or a ``PGPASSFILE`` (``~/.pgpass``).

    Args:
        dsn: a libpq connection string: ``postgresql://user@host:5432/dbname`` or
            ``host=... dbname=...``.
        schema: the schema holding the ledger's tables (made on first use). Several ledgers
            share one database under different schemas; drivers sharing one ledger give the
            same one.
        timeout: seconds a write waits for another writer's lock (and a connection attempt
            for the server) before failing with `LedgerError`.
        retry_seconds: how long the ledger keeps reconnecting to a server that is down or
            restarting, counted from the outage's first failed call (one bound for every call
            and thread), before `LedgerUnavailable` (0: no retry).
        max_connections: the pool's bound (connections this object opens at once).
        check_history: check every artifact's history when the ledger opens (the default);
            ``False`` to salvage the intact artifacts of a damaged one.
        run_id: this driver's run id, to share the artifacts with other drivers (each with
            its own; see `SqliteLedger`); None for an unshared driver.
        lease_seconds: a lease whose heartbeat is older than this is taken over (renewed
            every third of it and at every save). Hosts' clocks are compared: keep them in
            sync (NTP), or raise it.
        read_only: only read an existing ledger (the command line's ``status``, ``show``...):
            no table is made, no lease taken, every write raises `LedgerError`.

    Raises:
        LedgerUnavailable: the server could not be reached within ``retry_seconds``.
        LedgerTooNew: the schema was written by a newer agentdescent.
        LedgerCorrupted: the history check found damage (each problem listed).
        LedgerError: the schema holds another application's tables, the DSN is refused
            (authentication, an unknown database), or ``read_only`` and there is no ledger.
        ContractError: a bad argument (the message names it and the fix).
        ImportError: psycopg is not installed (``pip install 'agentdescent[postgres]'``).

    Examples:
        >>> with PostgresLedger("postgresql://ada@db.example/runs") as ledger:  # doctest: +SKIP
        ...     ledger.register("prompt", {"system": "Be brief."}, 0.2)
        ...     ledger.commit("prompt", {"system": "Be brief and exact."}, 1)
        2
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        timeout: float = 30.0,
        retry_seconds: float = 30.0,
        max_connections: int = 16,
        check_history: bool = True,
        run_id: str | None = None,
        lease_seconds: float = DEFAULT_EXPIRY,
        read_only: bool = False,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise InvalidArgumentType(
                f"PostgresLedger(dsn={redact_dsn(dsn) if isinstance(dsn, str) else dsn!r}): give a libpq "
                "connection string, e.g. 'postgresql://user@host:5432/dbname'")
        if not isinstance(schema, str) or not _IDENT.fullmatch(schema):
            raise InvalidArgument(
                f"PostgresLedger(schema={schema!r}): give a lower-case identifier of letters, digits and "
                "underscores (at most 63, not starting with a digit), e.g. 'agentdescent' or 'team_runs'")
        timeout = check_seconds(timeout, "timeout", positive=True, owner="PostgresLedger",
                                hint="how long a write waits for another writer's lock")
        retry_seconds = check_seconds(retry_seconds, "retry_seconds", positive=False, owner="PostgresLedger",
                                      hint="how long to keep reconnecting to a server that is down")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise InvalidArgument(f"PostgresLedger(max_connections={max_connections!r}): give an int >= 1 "
                                  "(the pool's bound; one per thread that uses the ledger at once)")
        for name, flag in (("check_history", check_history), ("read_only", read_only)):
            if not isinstance(flag, bool):
                raise InvalidArgumentType(f"PostgresLedger({name}={flag!r}): expected True or False")
        if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):
            raise InvalidArgument(f"PostgresLedger(run_id={run_id!r}): give a non-empty str naming this "
                                  "driver (e.g. 'driver-1'), or None for an unshared driver")
        lease_seconds = check_seconds(lease_seconds, "lease_seconds", positive=True, owner="PostgresLedger",
                                      hint="after how long without a heartbeat a lease is taken over")
        self._psycopg = _import_psycopg()
        self._init_leases(run_id, lease_seconds)
        self._dsn = dsn.strip()
        self._where = redact_dsn(self._dsn)
        self._path = self._where  # how the shared readers and lease rules name this ledger
        self._schema = schema
        self._lock_key = zlib.crc32(f"agentdescent-ledger:{schema}".encode()) - 2**31  # a signed 32-bit key
        self._timeout = float(timeout)
        self._retry_seconds = float(retry_seconds)
        self._max = max_connections
        self._read_only = read_only
        self._local = threading.local()
        self._pool_lock = threading.Condition()
        self._idle: list[Any] = []
        self._owned: list[tuple[threading.Thread, Any]] = []
        self._inherited: list[Any] = []
        self._pid = os.getpid()
        self._closed = False
        self._rng = random.Random(os.getpid())  # backoff jitter only
        self._outage: float | None = None  # when the server first failed a call of the current outage
        try:
            self._retry("opening the ledger", lambda: self._open(check_history))
        except BaseException:
            self.close()
            raise
        logger.debug("opened ledger %s (schema %s)", self._where, schema)

    # ----------------------------------------------------------------- plumbing

    @property
    def dsn(self) -> str:
        """The database, as the DSN without its password."""
        return self._where

    @property
    def schema(self) -> str:
        """The schema holding the ledger's tables."""
        return self._schema

    def __repr__(self) -> str:
        state = (", read-only" if self._read_only else "") + (", closed" if self._closed else "")
        return f"PostgresLedger({self._where!r}, schema={self._schema!r}{state})"

    def __enter__(self) -> PostgresLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _key(self, artifact_id: str) -> tuple[str, str, str]:
        return (f"{self._where}#{self._schema}", artifact_id, self._run_id or "")

    def close(self) -> None:
        """Release this object's leases and close its connections; later calls raise `LedgerError`. Idempotent."""
        if not self._closed:
            self.release_leases()
        with self._pool_lock:
            self._closed = True
            conns = [c for _, c in self._owned] + self._idle
            self._owned, self._idle = [], []
            self._pool_lock.notify_all()
        if os.getpid() == self._pid:
            for conn in conns:
                with suppress(Exception):  # a broken connection closes as it can
                    conn.close()

    # ----------------------------------------------------------------- connections

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

    def _conn(self) -> _Statements:
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
        self._local.conn = _Statements(raw)
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

    # ----------------------------------------------------------------- opening

    def _open(self, check_history: bool) -> None:
        conn = self._conn()
        with self._translate("reading the schema"):
            schema = self._schema_of(conn)
        if schema is None:
            if self._read_only:
                raise LedgerError(
                    f"ledger database {self._where!r}: no ledger in schema {self._schema!r}; a read-only open "
                    "never makes one; give the DSN and schema of an existing ledger")
            with self._write("creating the ledger tables", lock=True) as conn:
                if self._schema_of(conn) is None:  # another driver may have made them since
                    conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
                    for statement in _TABLES:
                        conn.execute(statement)
                    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("schema", SCHEMA))
                    logger.info("created ledger %s (schema %s, %s)", self._where, self._schema, SCHEMA)
            return
        if check_history:
            with self._translate("checking the ledger history"):
                self._check_history(conn)

    def _schema_of(self, conn: _Statements) -> int | None:
        """The ledger schema's version, None when the schema holds no table; raise for anything else."""
        tables = {row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?", (self._schema,))}
        if not tables:
            return None
        marker = None
        if "meta" in tables:
            try:
                row = conn.execute("SELECT value FROM meta WHERE key = ?", ("schema",)).fetchone()
                marker = row[0] if row else None
            except self._psycopg.errors.UndefinedColumn:
                marker = None
        match = _MARKER.fullmatch(marker) if isinstance(marker, str) else None
        if match is not None and {"artifacts", "versions"} <= tables:
            found = int(match.group(1))
            if found > SCHEMA_VERSION:
                raise LedgerTooNew(
                    f"ledger database {self._where!r} (schema {self._schema!r}) was written by a newer "
                    f"agentdescent (ledger schema {found}, this one reads up to {SCHEMA_VERSION}; its marker is "
                    f"{marker!r}); upgrade agentdescent (pip install --upgrade agentdescent) to open it. Nothing "
                    "was changed", path=self._where, found=found, supported=SCHEMA_VERSION)
            if found == SCHEMA_VERSION and tables >= _OURS:
                return found
        described = f"schema marker {marker!r}" if marker else "no agentdescent schema marker"
        raise LedgerError(
            f"ledger database {self._where!r}: schema {self._schema!r} holds tables but is not an agentdescent "
            f"ledger: expected {SCHEMA!r} with tables {sorted(_OURS)}, found {described} with tables "
            f"{sorted(tables)}; give the ledger another schema (PostgresLedger(dsn, schema='...'))")

    def _check_history(self, conn: _Statements) -> None:
        """Raise `LedgerCorrupted` listing every gap, broken link and unreadable row (one snapshot; read-only)."""
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            check = HistoryCheck(
                {aid: Pointer(radius, head, digest) for aid, radius, head, digest in conn.execute(
                    "SELECT artifact_id, blast_radius, head_version, head_digest FROM artifacts")},
                chained=True)
            with conn.raw.cursor(name=f"agentdescent_history_{threading.get_ident()}") as cursor:
                cursor.itersize = 500
                cursor.execute("SELECT artifact_id, version, state_json, meta_json, parent_digest, digest"
                               " FROM versions ORDER BY artifact_id, version")
                for row in cursor:
                    check.row(*row)
        finally:
            conn.execute("ROLLBACK")
        problems = check.problems()
        if problems:
            shown = "".join(f"\n  - {p}" for p in problems[:20])
            if len(problems) > 20:
                shown += f"\n  - ... ({len(problems) - 20} more)"
            raise LedgerCorrupted(
                f"ledger database {self._where!r} (schema {self._schema!r}) failed its history check on open "
                f"({len(problems)} problem(s)):{shown}\nIts rows were edited outside agentdescent; the ledger was "
                "not modified. Restore the database from a backup, or give a new schema to start a fresh run. To "
                "read the intact artifacts, open PostgresLedger(dsn, check_history=False); do not resume a run "
                "on it.", path=self._where, problems=tuple(problems))
        logger.debug("ledger %s: history checked, %d versions of %d artifacts", self._where, check.rows_seen,
                     len(check.registered))

    # ----------------------------------------------------------------- transactions

    @contextmanager
    def _write(self, what: str, *, lock: bool = True) -> Iterator[_Statements]:
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

    def _begin(self, what: str, lock: bool) -> _Statements:
        def begin() -> _Statements:
            conn = self._conn()
            with self._translate(what):
                conn.execute("BEGIN")
                if lock:
                    conn.execute("SELECT pg_advisory_xact_lock(?)", (self._lock_key,))
            return conn
        return self._retry(what, begin)

    def _rollback(self, conn: _Statements) -> None:
        try:
            if not conn.raw.closed and conn.in_transaction:
                conn.raw.execute("ROLLBACK")
        except self._psycopg.Error:
            self._drop(conn.raw)

    def _commit(self, conn: _Statements, what: str) -> None:
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

    # ----------------------------------------------------------------- the seam

    def register(self, artifact_id: str, state: Mapping[str, str], blast_radius: float) -> None:
        """Create ``artifact_id`` at version 1 with ``state``; a no-op if it already exists.

        Raises:
            ContractError: a bad id, state or blast radius (as `SqliteLedger.register`).
            LedgerError: the database cannot be written.
        """
        _check_artifact_id(artifact_id, writing=True)
        copy = _check_state(artifact_id, state)
        radius = _check_blast_radius(artifact_id, blast_radius)
        state_json = json.dumps(copy, sort_keys=True)
        digest = version_digest(artifact_id, 1, ROOT_DIGEST, state_json, "{}")

        def attempt() -> float | None:
            now = time.time()
            with self._write(f"register({artifact_id!r})") as conn:
                row = conn.execute("SELECT blast_radius FROM artifacts WHERE artifact_id = ?",
                                   (artifact_id,)).fetchone()
                if row is not None:
                    return row[0]
                conn.execute(
                    "INSERT INTO artifacts (artifact_id, blast_radius, created_at, head_version, head_digest)"
                    " VALUES (?, ?, ?, 1, ?)", (artifact_id, radius, now, digest))
                conn.execute(
                    "INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at,"
                    " parent_digest, digest) VALUES (?, 1, ?, '{}', ?, ?, ?)",
                    (artifact_id, state_json, now, ROOT_DIGEST, digest))
            return None

        known = self._retry(f"register({artifact_id!r})", attempt)
        if known is not None:
            _warn_blast_radius_mismatch(artifact_id, self._radius(artifact_id, known), radius)
            return
        logger.debug("register %r at version 1 (%d keys)", artifact_id, len(copy))

    def head(self, artifact_id: str) -> tuple[int, dict[str, str]]:
        """Return ``(version, state)`` of the head (one SELECT, through the head pointer); the state is a copy.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
            LedgerCorrupted: the head row is missing or unreadable.
        """
        _check_artifact_id(artifact_id)

        def attempt() -> tuple[int, str]:
            conn = self._conn()
            with self._translate(f"head({artifact_id!r})"):
                version, _, state_json = self._head_row(conn, artifact_id, verify=False)
            return version, state_json

        version, state_json = self._retry(f"head({artifact_id!r})", attempt)
        return version, self._load_state(artifact_id, version, state_json)

    def versions(self) -> dict[str, int]:
        """Return artifact id -> head version for every registered artifact (its head pointer)."""
        def attempt() -> list[tuple[Any, Any]]:
            conn = self._conn()
            with self._translate("versions()"):
                return list(conn.execute("SELECT artifact_id, head_version FROM artifacts").fetchall())
        return {aid: int(v) for aid, v in self._retry("versions()", attempt)}

    def commit(
        self,
        artifact_id: str,
        new_state: Mapping[str, str],
        base_version: int,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Append ``new_state`` as ``base_version + 1`` if the head is still ``base_version``.

        The lease check, the head check (against its digest), the insert and the move of the
        head pointer run in one transaction under the ledger's writer lock. A commit whose
        connection was cut while it committed is tried again only after looking whether it
        landed (its version row with its digest), so it never lands twice.

        Returns:
            The new head version, ``base_version + 1``.

        Raises:
            CASConflict: the head is not ``base_version``; nothing was written.
            LedgerError: ``artifact_id`` was never registered, or the database cannot be written.
            LedgerCorrupted: the head is missing or altered; nothing was written.
            LedgerBusy: this object held the lease on ``artifact_id`` and lost it; nothing was written.
            LedgerUnavailable: the server stayed unreachable past ``retry_seconds``.
            InvalidArgument: a bad state or ``meta`` (as `SqliteLedger.commit`).
        """
        _check_artifact_id(artifact_id, writing=True)
        copy = _check_state(artifact_id, new_state, "new_state")
        base = _check_base_version(artifact_id, base_version)
        meta = self.sign(artifact_id, meta)
        meta_json = _meta_json(artifact_id, meta)
        state_json = json.dumps(copy, sort_keys=True)
        what = f"commit({artifact_id!r})"
        tries = 0

        def attempt() -> int:
            nonlocal tries
            tries += 1
            if tries > 1 and not getattr(self._local, "atomic", 0) and self._landed(
                    artifact_id, base + 1, state_json, meta_json):
                return base + 1  # the connection was cut as it committed, and the commit had landed
            with self._write(what) as conn:
                self.check_lease(conn, artifact_id)
                head, head_digest, _ = self._head_row(conn, artifact_id, verify=True)
                if head != base:
                    raise CASConflict(artifact_id, base, head)
                digest = version_digest(artifact_id, base + 1, head_digest, state_json, meta_json)
                conn.execute("SAVEPOINT agentdescent_insert")
                try:
                    conn.execute(
                        "INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at,"
                        " parent_digest, digest) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (artifact_id, base + 1, state_json, meta_json, time.time(), head_digest, digest))
                except self._psycopg.errors.UniqueViolation:
                    conn.execute("ROLLBACK TO SAVEPOINT agentdescent_insert")
                    raise row_error(self._where, artifact_id,
                                    f"version {base + 1} is already stored beyond its head (the head "
                                    f"pointer says version {base})") from None
                conn.execute("RELEASE SAVEPOINT agentdescent_insert")
                conn.execute("UPDATE artifacts SET head_version = ?, head_digest = ? WHERE artifact_id = ?",
                             (base + 1, digest, artifact_id))
            return base + 1

        version = self._retry(what, attempt)
        logger.debug("commit %r: version %d -> %d (%d keys)", artifact_id, base, version, len(copy))
        return version

    def _landed(self, artifact_id: str, version: int, state_json: str, meta_json: str) -> bool:
        """Whether a commit cut off while committing landed: ``version`` holds exactly its state and record."""
        conn = self._conn()
        with self._translate(f"checking whether commit({artifact_id!r}) landed"):
            row = conn.execute("SELECT state_json, meta_json FROM versions WHERE artifact_id = ? AND version = ?",
                               (artifact_id, version)).fetchone()
        return row is not None and row[0] == state_json and row[1] == meta_json

    def history(self, artifact_id: str) -> list[LedgerEntry]:
        """Return every version of the artifact, oldest first, each checked against its digest.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
            LedgerCorrupted: a row is unreadable or does not match its digest.
        """
        _check_artifact_id(artifact_id)

        def attempt() -> list[tuple[Any, ...]]:
            conn = self._conn()
            with self._translate(f"history({artifact_id!r})"):
                rows = list(conn.execute(
                    "SELECT version, state_json, meta_json, parent_digest, digest FROM versions"
                    " WHERE artifact_id = ? ORDER BY version", (artifact_id,)).fetchall())
                if not rows:
                    raise _unknown(artifact_id, self._known_ids(conn))
            return rows

        entries = []
        for version, state_json, meta_json, parent, digest in self._retry(f"history({artifact_id!r})", attempt):
            state = self._load_state(artifact_id, version, state_json)
            audit = self._load_meta(artifact_id, version, meta_json)
            if digest != version_digest(artifact_id, version, parent, state_json, meta_json):
                raise row_error(self._where, artifact_id,
                                f"version {version} does not match its digest: its state or audit "
                                "record was changed outside agentdescent")
            entries.append(LedgerEntry(artifact_id, int(version), state, audit))
        return entries

    def blast_radius(self, artifact_id: str) -> float:
        """Return the blast radius given to ``register``.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
        """
        _check_artifact_id(artifact_id)

        def attempt() -> Any:
            conn = self._conn()
            with self._translate(f"blast_radius({artifact_id!r})"):
                row = conn.execute("SELECT blast_radius FROM artifacts WHERE artifact_id = ?",
                                   (artifact_id,)).fetchone()
                if row is None:
                    raise _unknown(artifact_id, self._known_ids(conn))
            return row[0]

        return self._radius(artifact_id, self._retry(f"blast_radius({artifact_id!r})", attempt))

    # ----------------------------------------------------------------- a run's progress

    def save_run_state(self, run_id: str, state: Mapping[str, Any],
                       rounds: Sequence[Mapping[str, Any]] = ()) -> None:
        """Replace the run's saved progress and store ``rounds``, in one transaction (JSON, with digests).

        Raises:
            LedgerError: the database cannot be written.
        """
        text = json.dumps(dict(state), sort_keys=True)
        rows = [(run_id, int(r["index"]), json.dumps(dict(r), sort_keys=True)) for r in rounds]
        what = f"saving the run state of {run_id!r}"

        def attempt() -> None:
            with self._write(what) as conn:
                conn.execute(
                    "INSERT INTO run_state (run_id, state_json, updated_at, digest) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(run_id) DO UPDATE SET state_json = excluded.state_json, "
                    "updated_at = excluded.updated_at, digest = excluded.digest",
                    (run_id, text, time.time(), run_state_digest(run_id, text)))
                conn.executemany(
                    "INSERT INTO run_rounds (run_id, idx, round_json, digest) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(run_id, idx) DO UPDATE SET round_json = excluded.round_json, "
                    "digest = excluded.digest",
                    [(rid, idx, body, round_digest(rid, idx, body)) for rid, idx, body in rows])

        self._retry(what, attempt)

    def load_run_state(self, run_id: str) -> dict[str, Any] | None:
        """The run's saved progress (its state and its rounds read in one snapshot), or None.

        Raises:
            RunStateDamaged: the saved state or a round does not match its digest, or rounds are
                stored without their state.
        """
        what = f"reading the run state of {run_id!r}"

        def attempt() -> tuple[Any, list[Any]]:
            conn = self._conn()
            in_block = conn.in_transaction
            with self._translate(what):
                if not in_block:
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                try:
                    stored = conn.execute("SELECT state_json, digest FROM run_state WHERE run_id = ?",
                                          (run_id,)).fetchone()
                    saved = list(conn.execute("SELECT idx, round_json, digest FROM run_rounds WHERE run_id = ?"
                                              " ORDER BY idx", (run_id,)).fetchall())
                finally:
                    if not in_block and not conn.raw.closed:
                        conn.execute("ROLLBACK")
            return stored, saved

        stored, saved = self._retry(what, attempt)
        problems = []
        if stored is not None and not stored[1]:
            problems.append("its saved state has no digest (it was written outside agentdescent)")
        bare = [str(idx) for idx, _, mark in saved if not mark]
        if bare:
            problems.append(f"saved round(s) {', '.join(bare)} have no digest (written outside agentdescent)")
        row = None if stored is None else (stored[0], stored[1])
        problems += run_state_problems(run_id, row, [(idx, text, mark) for idx, text, mark in saved])
        if problems:
            raise self._run_state_damaged(run_id, "; ".join(problems))
        if row is None:
            if saved:
                raise self._run_state_damaged(
                    run_id, f"{len(saved)} saved round(s) are stored but the run's saved state (its row in the "
                    "run_state table) is missing, so its counters, spend and stop rules are lost")
            return None
        try:
            state = json.loads(row[0])
        except (TypeError, ValueError) as exc:
            state = exc
        if not isinstance(state, dict):
            raise self._run_state_damaged(run_id, f"its saved state is not a JSON object ({state})")
        try:
            state["history"] = [json.loads(text) for _, text, _ in saved]
        except (TypeError, ValueError) as exc:
            raise self._run_state_damaged(run_id, f"a saved round is not JSON ({exc})") from None
        return state

    def _run_state_damaged(self, run_id: str, what: str) -> RunStateDamaged:
        return RunStateDamaged(
            f"ledger database {self._where!r} (schema {self._schema!r}): the saved progress of run {run_id!r} is "
            f"damaged: {what}. The run cannot resume as is. The artifact's versions are intact: start over with "
            "resume=False (a new run on the same head, its counters from zero), or use a new schema, or restore "
            "the database from a backup", path=self._where, problems=(f"run {run_id!r}: {what}",))

    def saved_runs(self) -> list[str]:
        """The run ids with saved progress in the ledger, sorted."""
        def attempt() -> list[str]:
            conn = self._conn()
            with self._translate("listing the saved runs"):
                return [row[0] for row in conn.execute("SELECT run_id FROM run_state ORDER BY run_id")]
        return self._retry("listing the saved runs", attempt)


def _clean(exc: BaseException, dsn: str) -> str:
    """An error's text with the DSN's password (if any) taken out, on one line."""
    text = " ".join(str(exc).split())
    for secret in _passwords(dsn):
        text = text.replace(secret, "***")
    return text


def _passwords(dsn: str) -> list[str]:
    found = []
    if is_dsn(dsn):
        parts = urllib.parse.urlsplit(dsn.strip())
        if parts.password:
            found += [parts.password, urllib.parse.quote(parts.password)]
        found += [v for k, v in urllib.parse.parse_qsl(parts.query) if k == "password" and v]
    else:
        found += [m.strip("'") for m in re.findall(r"\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", dsn)]
    return [f for f in found if f]
