"""`PostgresLedger`: the ledger in a PostgreSQL database, for drivers on several machines.

This module owns a database ledger's seam: registering, reading and committing versions
(never rewritten; each artifact's head pointer and the digest chain of
`agentdescent.ledger.integrity`), and a run's saved progress with its digests. Its other
members are mixed in: its tables and the open-time checks (`agentdescent.ledger.pgschema`),
the connection pool, bounded reconnection and the write transaction
(`agentdescent.ledger.pgconnection`), the driver lease (`agentdescent.ledger.lease`, the same
rules as a SQLite file's), the rows read back, checked (`agentdescent.ledger.rows`).

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

import json
import logging
import os
import random
import re
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from contextlib import suppress
from typing import Any

from ..errors import CASConflict, InvalidArgument, InvalidArgumentType, RunStateDamaged
from ..validation import check_seconds
from .base import (
    Ledger,
    LedgerEntry,
    _check_artifact_id,
    _unknown,
    _warn_blast_radius_mismatch,
)
from .dsn import dsn_has_password, is_dsn, redact_dsn
from .integrity import (
    ROOT_DIGEST,
    commit_row,
    registration_row,
    round_digest,
    row_error,
    run_state_digest,
    saved_progress,
    version_digest,
)
from .lease import DEFAULT_EXPIRY, LeaseHolder
from .pgconnection import PgConnectionKeeper, import_psycopg
from .pgschema import PgSchemaKeeper
from .rows import RowReader

__all__ = ["DEFAULT_SCHEMA", "PostgresLedger", "dsn_has_password", "is_dsn", "redact_dsn"]

logger = logging.getLogger("agentdescent.ledger")

#: The default schema of the ledger's tables in the database.
DEFAULT_SCHEMA = "agentdescent"

_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")


# --------------------------------------------------------------------------- the ledger


class PostgresLedger(PgSchemaKeeper, PgConnectionKeeper, LeaseHolder, RowReader, Ledger):
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
        self._psycopg = import_psycopg()
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

    # ----------------------------------------------------------------- the seam

    def register(self, artifact_id: str, state: Mapping[str, str], blast_radius: float) -> None:
        """Create ``artifact_id`` at version 1 with ``state``; a no-op if it already exists.

        Raises:
            ContractError: a bad id, state or blast radius (as `SqliteLedger.register`).
            LedgerError: the database cannot be written.
        """
        copy, radius, state_json, digest = registration_row(artifact_id, state, blast_radius)

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
        # a leased driver signs its commits (a resume adopts its own)
        copy, base, state_json, meta_json = commit_row(artifact_id, new_state, base_version,
                                                       self.sign(artifact_id, meta))
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

        return self._entries(artifact_id, self._retry(f"history({artifact_id!r})", attempt))

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
        problems = []  # every row here has its digest: an empty one was written outside agentdescent
        if stored is not None and not stored[1]:
            problems.append("its saved state has no digest (it was written outside agentdescent)")
        bare = [str(idx) for idx, _, mark in saved if not mark]
        if bare:
            problems.append(f"saved round(s) {', '.join(bare)} have no digest (written outside agentdescent)")
        row = None if stored is None else (stored[0], stored[1])
        return saved_progress(run_id, row, [(idx, text, mark) for idx, text, mark in saved],
                              self._run_state_damaged, problems)

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


