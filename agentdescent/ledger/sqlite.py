"""`SqliteLedger`: the embedded, persisted ledger (one SQLite file, WAL, any number of threads and processes).

This module owns the on-disk format of a persisted run: artifact versions (a version row,
once written, is never rewritten: ``commit`` appends ``base_version + 1`` only if the head
is still ``base_version``, so two writers can never both win the same version), each
artifact's head pointer and the digest chain over its versions (`agentdescent.ledger.integrity`),
the upgrade of a file of an older schema, and a run's saved progress beside them (each
row with its digest, checked when it is read back). The
ledger's other members are mixed in: opening the file (`agentdescent.ledger.schema`), the
driver lease (`agentdescent.ledger.lease`), the connections and the write transaction
(`agentdescent.ledger.connection`), the rows read back, checked (`agentdescent.ledger.rows`).
It must not read the clock for anything but audit timestamps, or serialise anything with
``pickle``: the file holds JSON text only, written through parameterised SQL.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import (
    CASConflict,
    InvalidArgument,
    InvalidArgumentType,
    LedgerError,
    RunStateDamaged,
)
from ..validation import check_seconds
from .base import (
    Ledger,
    LedgerEntry,
    _check_artifact_id,
    _unknown,
    _warn_blast_radius_mismatch,
)
from .connection import ConnectionKeeper
from .integrity import (
    ROOT_DIGEST,
    commit_row,
    registration_row,
    round_digest,
    row_error,
    run_state_digest,
    saved_progress,
    stored_text,
    version_digest,
)
from .lease import DEFAULT_EXPIRY, LeaseHolder
from .rows import _HEAD_SQL as _HEAD_SQL
from .rows import RowReader
from .schema import SchemaKeeper

__all__ = ["SqliteLedger"]

logger = logging.getLogger("agentdescent.ledger")


class SqliteLedger(SchemaKeeper, LeaseHolder, ConnectionKeeper, RowReader, Ledger):
    """A `Ledger` in one SQLite file: the embedded default for persisted runs.

    SQLite gives the CAS rule for free across threads *and* processes: a commit runs
    inside ``BEGIN IMMEDIATE`` (one writer at a time per file), reads the head, and
    inserts ``base + 1`` only if the head is still ``base``; the ``(artifact_id,
    version)`` primary key backs that up. WAL journaling lets readers take snapshots
    while a commit is in flight, and a process killed mid-commit leaves only whole
    commits behind. Reopening the same path resumes the run. State and audit records
    are stored as JSON text, never pickled.

    Each thread gets its own connection, so a worker reading the head never waits on
    another thread's Python lock; SQLite's ``busy_timeout`` makes writers queue for
    the file lock instead of failing. An object inherited through ``fork()`` opens
    fresh connections in the child rather than sharing the parent's.

    The file knows its own history. Each artifact has a head pointer (its head version
    and that version's digest, written in the commit's transaction), and each version
    row stores its parent's digest and a digest of itself (`agentdescent.ledger.integrity`),
    so a version row that is deleted (the head included), edited or re-inserted breaks
    the chain. Opening an existing file checks its whole history before anything else
    touches it: every artifact's versions run from 1 to its head pointer without a gap,
    every row matches its digest and its parent's, and every stored state (and audit
    record) parses. A damaged file is refused at once with `LedgerCorrupted`, naming the
    artifact and the version, instead of a resumed run writing a new version over a lost
    one. The check is read-only and reads each table once (one pass; about 1.3 s per 100,000
    versions of 2 kB). A commit checks its head again, in O(1), before it builds on it.

    A file of schema 1 (before the chain) is upgraded in place on first open, in one
    transaction, after it passes the checks schema 1 allows; a file of a newer schema is
    refused with `LedgerTooNew`.

    Args:
        path: the ledger file (``str`` or ``os.PathLike``). A path that does not exist
            becomes a new ledger (created complete, under a temporary name, then linked
            into place, so no other process ever sees half a ledger); missing parent
            folders are created. An existing file that is empty (0 bytes) or truncated is
            refused, never taken for a new ledger.
        timeout: seconds a statement waits for another writer's lock before failing
            with `LedgerError`.
        check_history: check the history of an existing file on open (the default).
            ``False`` skips the check, to salvage the intact artifacts of a damaged
            file; reading a damaged version, or committing on a damaged head, still
            raises `LedgerCorrupted`. Do not resume a run on a file that fails the check.
        run_id: this driver's run id, to share the file's artifacts with other drivers
            (each with its own): its run keeps its own progress and its commits carry
            ``"driver": run_id``. None (the default): an unshared driver, which a run on an
            artifact another live driver holds refuses (`LedgerBusy`; see `LeaseHolder`).
        lease_seconds: a lease whose heartbeat is older than this is taken over (renewed
            every third of it, and at every save).
        read_only: open an existing file to read it only (the command line's ``status``,
            ``show``, ``eval``, ``export`` and ``report``): the history check runs as
            always, but nothing is ever written, in the file or beside it: no file or
            folder is created, no WAL switch, no schema upgrade (a schema-1 file is
            refused, unchanged), no lease; every write raises `LedgerError`. A file in a
            read-only folder (a read-only mount) opens too (see
            `agentdescent.ledger.connection.read_only_mode`).

    Raises:
        LedgerCorrupted: the file is empty, truncated or malformed, or fails the history
            check (the message lists each missing or altered version; the file is left
            unchanged).
        LedgerTooNew: the file was written by a newer agentdescent.
        LedgerError: ``path`` is not a SQLite database, is another application's
            database, or cannot be opened; with ``read_only``, it does not exist, or is of
            schema 1.
        ContractError: ``path`` is ``":memory:"`` or ``timeout`` is not positive.

    Examples:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "run.sqlite"
        >>> with SqliteLedger(path) as ledger:
        ...     ledger.register("prompt", {"system": "Be brief."}, 0.2)
        ...     ledger.commit("prompt", {"system": "Be brief and exact."}, 1)
        2
        >>> with SqliteLedger(path) as ledger:  # reopening resumes
        ...     ledger.head("prompt")
        (2, {'system': 'Be brief and exact.'})
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        check_history: bool = True,
        run_id: str | None = None,
        lease_seconds: float = DEFAULT_EXPIRY,
        read_only: bool = False,
    ) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise InvalidArgumentType(f"SqliteLedger(path={path!r}): give a file path (str or os.PathLike)")
        raw = os.fsdecode(os.fspath(path))
        if raw == ":memory:" or raw == "":
            raise InvalidArgument(
                f"SqliteLedger(path={raw!r}): an in-memory or empty path cannot be shared "
                "between threads or reopened; use MemoryLedger() for a throwaway run, or "
                "give a file path"
            )
        timeout = check_seconds(timeout, "timeout", positive=True, owner="SqliteLedger",
                                hint="how long a write waits for the file's lock")
        if not isinstance(check_history, bool):
            raise InvalidArgumentType(
                f"SqliteLedger(check_history={check_history!r}): expected True (check the "
                "history on open) or False (skip it to salvage a damaged file)"
            )
        if not isinstance(read_only, bool):
            raise InvalidArgumentType(f"SqliteLedger(read_only={read_only!r}): expected True (only read an "
                                      "existing file) or False (read and write)")
        if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):
            raise InvalidArgument(f"SqliteLedger(run_id={run_id!r}): give a non-empty str naming this "
                                  "driver (e.g. 'driver-1'), or None for an unshared driver")
        lease_seconds = check_seconds(lease_seconds, "lease_seconds", positive=True, owner="SqliteLedger",
                                      hint="after how long without a heartbeat a lease is taken over")
        self._init_leases(run_id, lease_seconds)
        self._path = Path(raw)
        self._timeout = float(timeout)
        self._check_history_on_open = check_history
        self._local = threading.local()
        self._conns_lock = threading.Lock()
        self._conns: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._inherited: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False
        self._read_only = read_only
        self._ro_mode: str | None = None  # how a read-only ledger connects, decided on open
        try:
            if not read_only:
                self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(
                f"ledger file {str(self._path)!r}: cannot create its folder ({exc}); "
                "pick a writable path"
            ) from exc
        try:
            self._init_schema()
        except BaseException:
            self.close()
            raise
        logger.debug("opened ledger %s", self._path)

    # ----------------------------------------------------------------- plumbing

    @property
    def path(self) -> Path:
        """The ledger file."""
        return self._path

    def __repr__(self) -> str:
        state = (", read-only" if self._read_only else "") + (", closed" if self._closed else "")
        return f"SqliteLedger({str(self._path)!r}{state})"

    def __enter__(self) -> SqliteLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection this object opened; later calls raise `LedgerError`.

        Closing is idempotent and releases this object's leases first. Other
        ``SqliteLedger`` objects (and other processes) on the same file are unaffected.
        """
        if not self._closed:
            self.release_leases()
        with self._conns_lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for _, conn in conns:
            conn.close()

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """A block whose writes from this thread land in one transaction, or not at all.

        The first write inside the block takes the file's write lock (``BEGIN
        IMMEDIATE``) and holds it until the block ends, when everything written commits
        together: a process killed inside the block leaves the file as it was before
        the block. The engines merge a round and save its progress in one block (see
        `agentdescent.ledger.Ledger.atomic`), so keep what runs between the first write
        and the end short: other writers to the file (other threads, other processes)
        wait for it, up to ``timeout``.

        Each write inside the block is whole or undone on its own (a savepoint): a
        write that raises (a `CASConflict`, say) leaves the ones before it, which land
        when the block ends, whether it ends normally or by an exception. Blocks nest;
        the outermost one commits. Other threads read what was committed before the
        block until it ends.

        Raises:
            LedgerError: the file cannot be written when the block ends.
        """
        depth = getattr(self._local, "atomic", 0)
        self._local.atomic = depth + 1
        try:
            yield
        finally:
            self._local.atomic = depth
            conn = getattr(self._local, "conn", None)
            if depth == 0 and conn is not None and conn.in_transaction and not self._closed:
                with self._translate("committing a block of writes"):
                    conn.execute("COMMIT")

    # ----------------------------------------------------------------- the seam

    def register(self, artifact_id: str, state: Mapping[str, str], blast_radius: float) -> None:
        """Create ``artifact_id`` at version 1 with ``state``; a no-op if it already exists.

        A no-op on a known id is what makes reopening a file resume a run: the
        engines register their artifacts on start either way.

        Args:
            artifact_id: a non-empty id that encodes as UTF-8.
            state: the initial flat ``str -> str`` state.
            blast_radius: in [0, 1]; governance classifies the artifact by it.

        Raises:
            ContractError: an empty id, an id holding a lone surrogate or a control
                character, a state key or value holding a lone surrogate, or a blast radius
                outside [0, 1] (a ``ValueError``).
            TypeError: a state key or value that is not a str.
            LedgerError: the file cannot be written.
        """
        copy, radius, state_json, digest = registration_row(artifact_id, state, blast_radius)
        now = time.time()
        with self._write(f"register({artifact_id!r})") as conn:
            row = conn.execute(
                "SELECT blast_radius FROM artifacts WHERE artifact_id = ?", (artifact_id,)
            ).fetchone()
            if row is not None:
                _warn_blast_radius_mismatch(artifact_id, self._radius(artifact_id, row[0]), radius)
                return
            conn.execute(
                "INSERT INTO artifacts (artifact_id, blast_radius, created_at, head_version, head_digest)"
                " VALUES (?, ?, ?, 1, ?)",
                (artifact_id, radius, now, digest),
            )
            conn.execute(
                "INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at,"
                " parent_digest, digest) VALUES (?, 1, ?, '{}', ?, ?, ?)",
                (artifact_id, state_json, now, ROOT_DIGEST, digest),
            )
        logger.debug("register %r at version 1 (%d keys)", artifact_id, len(copy))

    def head(self, artifact_id: str) -> tuple[int, dict[str, str]]:
        """Return ``(version, state)`` of the head; the state is a fresh dict.

        One SELECT reads both, through the artifact's head pointer, so the pair always
        belongs to the same version.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
            LedgerCorrupted: the head row is missing or unreadable.
        """
        _check_artifact_id(artifact_id)
        conn = self._conn()
        with self._translate(f"head({artifact_id!r})"):
            version, _, state_json = self._head_row(conn, artifact_id, verify=False)
        return version, self._load_state(artifact_id, version, state_json)

    def versions(self) -> dict[str, int]:
        """Return artifact id -> head version for every registered artifact (its head pointer)."""
        conn = self._conn()
        with self._translate("versions()"):
            rows = conn.execute("SELECT artifact_id, head_version FROM artifacts").fetchall()
        try:
            return {aid: int(v) for aid, v in rows}
        except (TypeError, ValueError):
            bad = next(aid for aid, v in rows if not isinstance(v, int))
            raise row_error(str(self._path), bad, "its head pointer is unreadable") from None

    def commit(
        self,
        artifact_id: str,
        new_state: Mapping[str, str],
        base_version: int,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Append ``new_state`` as ``base_version + 1`` if the head is still ``base_version``.

        The head check, the insert and the move of the head pointer run in one ``BEGIN
        IMMEDIATE`` transaction, so the rule holds against other threads and other
        processes on the same file. The head is checked against its digest first: a
        commit never builds on a head that was deleted or altered.

        Args:
            artifact_id: a registered artifact.
            new_state: the full new state (not a diff).
            base_version: the head version the new state was built on.
            meta: a small strict-JSON audit record stored with the version (no NaN or
                infinities).

        Returns:
            The new head version, ``base_version + 1``.

        Raises:
            CASConflict: the head is not ``base_version``; nothing was written.
            LedgerError: ``artifact_id`` was never registered, or the file cannot be written.
            LedgerCorrupted: the head is missing or altered; nothing was written.
            LedgerBusy: this object held the lease on ``artifact_id`` and lost it (another
                driver took it over); nothing was written (checked in the commit's transaction).
            InvalidArgument: ``meta`` holds NaN or an infinity, the id a control character,
                or a state key or value a lone surrogate.
            TypeError: a bad state, base version or meta.
        """
        # a leased driver signs its commits (a resume adopts its own)
        copy, base, state_json, meta_json = commit_row(artifact_id, new_state, base_version,
                                                       self.sign(artifact_id, meta))
        with self._write(f"commit({artifact_id!r})") as conn:
            self.check_lease(conn, artifact_id)  # a driver that lost its lease never commits
            head, head_digest, _ = self._head_row(conn, artifact_id, verify=True)
            if head != base:
                raise CASConflict(artifact_id, base, head)
            digest = version_digest(artifact_id, base + 1, head_digest, state_json, meta_json)
            try:
                conn.execute(
                    "INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at,"
                    " parent_digest, digest) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (artifact_id, base + 1, state_json, meta_json, time.time(), head_digest, digest),
                )
            except sqlite3.IntegrityError:
                # The head pointer says `base`, yet a row `base + 1` exists: written behind
                # agentdescent's back (its own writes move both in one transaction).
                raise row_error(
                    str(self._path), artifact_id,
                    f"version {base + 1} is already stored beyond its head (the head pointer says "
                    f"version {base})",
                ) from None
            conn.execute(
                "UPDATE artifacts SET head_version = ?, head_digest = ? WHERE artifact_id = ?",
                (base + 1, digest, artifact_id),
            )
        logger.debug(
            "commit %r: version %d -> %d (%d keys)", artifact_id, base, base + 1, len(copy)
        )
        return base + 1

    def history(self, artifact_id: str) -> list[LedgerEntry]:
        """Return every version of the artifact, oldest first.

        Each row is checked against its digest on the way out. A missing row is not an
        error here (the versions that survive are returned, to salvage them); opening
        the file with ``check_history=True`` reports it.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
            LedgerCorrupted: a row is unreadable or does not match its digest.
        """
        _check_artifact_id(artifact_id)
        conn = self._conn()
        with self._translate(f"history({artifact_id!r})"):
            rows = conn.execute(
                "SELECT version, state_json, meta_json, parent_digest, digest FROM versions"
                " WHERE artifact_id = ? ORDER BY version",
                (artifact_id,),
            ).fetchall()
            if not rows:
                raise _unknown(artifact_id, self._known_ids(conn))
        return self._entries(artifact_id, rows)

    def save_run_state(self, run_id: str, state: Mapping[str, Any],
                       rounds: Sequence[Mapping[str, Any]] = ()) -> None:
        """Replace the run's saved progress and store ``rounds``, in one transaction (JSON, never pickle).

        Each row is stored with its digest (`agentdescent.ledger.integrity.run_state_digest`,
        `agentdescent.ledger.integrity.round_digest`), which `load_run_state` checks. On a
        file saved before run state had digests, the first save adds the digest columns
        and records the digests of the run's earlier rounds.

        Raises:
            LedgerError: the file cannot be written.
        """
        text = json.dumps(dict(state), sort_keys=True)
        rows = [(run_id, int(r["index"]), json.dumps(dict(r), sort_keys=True)) for r in rounds]
        with self._write(f"saving the run state of {run_id!r}") as conn:
            self._run_digests(conn, add=True)
            self._cover_run(conn, run_id)
            conn.execute(
                "INSERT INTO run_state (run_id, state_json, updated_at, digest) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(run_id) DO UPDATE SET state_json = excluded.state_json, "
                "updated_at = excluded.updated_at, digest = excluded.digest",
                (run_id, text, time.time(), run_state_digest(run_id, text)),
            )
            conn.executemany(
                "INSERT INTO run_rounds (run_id, idx, round_json, digest) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(run_id, idx) DO UPDATE SET round_json = excluded.round_json, "
                "digest = excluded.digest",
                [(rid, idx, body, round_digest(rid, idx, body)) for rid, idx, body in rows],
            )

    def load_run_state(self, run_id: str) -> dict[str, Any] | None:
        """The run's saved progress, or None if it never saved any.

        Each row is checked against its digest first; a row saved before run state had
        digests (its digest is empty) is not yet covered, and is read as it is.

        Raises:
            RunStateDamaged: the saved state or a saved round does not match its digest (it
                was changed outside agentdescent: a flipped bit, a hand edit) or is not UTF-8
                text, the saved progress is not a JSON object, a saved round is not JSON, or
                rounds are stored without the state they belong to (its row was deleted); the
                message names the file, the run and the ways on.
        """
        conn = self._conn()
        with self._translate(f"reading the run state of {run_id!r}"):
            # Read as bytes, so a text (or a digest) no longer UTF-8 is a named damage.
            digest = "CAST(digest AS BLOB)" if self._run_digests(conn, add=False) else "''"
            stored = conn.execute(f"SELECT CAST(state_json AS BLOB), {digest} FROM run_state WHERE run_id = ?",
                                  (run_id,)).fetchone()
            saved = conn.execute(
                f"SELECT idx, CAST(round_json AS BLOB), {digest} FROM run_rounds WHERE run_id = ? ORDER BY idx",
                (run_id,),
            ).fetchall()
        row = None if stored is None else (stored_text(stored[0]), stored_text(stored[1]))
        rounds = [(idx, stored_text(raw), stored_text(mark)) for idx, raw, mark in saved]
        return saved_progress(run_id, row, rounds, self._run_state_damaged)

    def _run_state_damaged(self, run_id: str, what: str) -> RunStateDamaged:
        path = str(self._path)
        return RunStateDamaged(
            f"ledger file {path!r}: the saved progress of run {run_id!r} is damaged: {what}. The "
            "run cannot resume as is. The artifact's versions are intact: start over with "
            "resume=False (a new run on the same head, its counters from zero; it saves no "
            "progress of its own), or use a new ledger, or restore the file from a backup",
            path=path, problems=(f"run {run_id!r}: {what}",),
        )

    def blast_radius(self, artifact_id: str) -> float:
        """Return the blast radius given to ``register``.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
            LedgerCorrupted: the stored blast radius is not a number.
        """
        _check_artifact_id(artifact_id)
        conn = self._conn()
        with self._translate(f"blast_radius({artifact_id!r})"):
            row = conn.execute(
                "SELECT blast_radius FROM artifacts WHERE artifact_id = ?", (artifact_id,)
            ).fetchone()
            if row is None:
                raise _unknown(artifact_id, self._known_ids(conn))
        return self._radius(artifact_id, row[0])
