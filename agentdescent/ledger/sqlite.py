"""`SqliteLedger`: the embedded, persisted ledger (one SQLite file, WAL, any number of threads and processes).

This module owns the on-disk format of a persisted run: artifact versions (a version row,
once written, is never rewritten: ``commit`` appends ``base_version + 1`` only if the head
is still ``base_version``, so two writers can never both win the same version), and a
run's saved progress beside them. It must not read the clock for anything but audit
timestamps, or serialise anything with ``pickle``: the file holds JSON text only,
written through parameterised SQL.
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

from ..errors import CASConflict, InvalidArgument, InvalidArgumentType, LedgerError
from ..validation import check_seconds
from .base import (
    _MAX_LISTED_PROBLEMS,
    SCHEMA,
    Ledger,
    LedgerEntry,
    _check_artifact_id,
    _check_base_version,
    _check_blast_radius,
    _check_state,
    _meta_json,
    _parse_meta,
    _parse_state,
    _unknown,
    _warn_blast_radius_mismatch,
)

__all__ = ["SqliteLedger"]

logger = logging.getLogger("agentdescent.ledger")


_CREATE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS artifacts ("
    " artifact_id TEXT PRIMARY KEY,"
    " blast_radius REAL NOT NULL,"
    " created_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS versions ("
    " artifact_id TEXT NOT NULL REFERENCES artifacts(artifact_id),"
    " version INTEGER NOT NULL,"
    " state_json TEXT NOT NULL,"
    " meta_json TEXT NOT NULL,"
    " created_at REAL NOT NULL,"
    " PRIMARY KEY (artifact_id, version))",
    "CREATE TABLE IF NOT EXISTS run_state ("
    " run_id TEXT PRIMARY KEY,"
    " state_json TEXT NOT NULL,"
    " updated_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS run_rounds ("
    " run_id TEXT NOT NULL,"
    " idx INTEGER NOT NULL,"
    " round_json TEXT NOT NULL,"
    " PRIMARY KEY (run_id, idx))",
)


class SqliteLedger(Ledger):
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

    Opening an existing file checks its whole history before anything else touches it:
    every artifact's versions run from 1 to its head without a gap, and every stored
    state (and audit record) parses. A file damaged outside agentdescent, say a deleted
    row or a hand-edited state, is refused at once, naming the artifact and the
    version, instead of failing mid-run when a resumed run first reads that version.
    The check is read-only and reads each table once (one pass over the rows), so a
    long history still opens quickly.

    Args:
        path: the ledger file (``str`` or ``os.PathLike``). A missing file, or an empty
            one, becomes a new ledger; missing parent folders are created.
        timeout: seconds a statement waits for another writer's lock before failing
            with `LedgerError`.
        check_history: check the history of an existing file on open (the default).
            ``False`` skips the check, to salvage the intact artifacts of a damaged
            file; reading a damaged version still raises `LedgerError`. Do not resume a
            run on a file that fails the check.

    Raises:
        LedgerError: ``path`` is not a SQLite database, is another application's
            database, cannot be opened, or fails the history check (the message lists
            each missing or unreadable version; the file is left unchanged).
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
        self._path = Path(raw)
        self._timeout = float(timeout)
        self._check_history_on_open = check_history
        self._local = threading.local()
        self._conns_lock = threading.Lock()
        self._conns: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._inherited: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._closed = False
        try:
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
        state = ", closed" if self._closed else ""
        return f"SqliteLedger({str(self._path)!r}{state})"

    def __enter__(self) -> SqliteLedger:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection this object opened; later calls raise `LedgerError`.

        Closing is idempotent. Other ``SqliteLedger`` objects (and other processes)
        on the same file are unaffected.
        """
        with self._conns_lock:
            self._closed = True
            conns, self._conns = self._conns, []
        for _, conn in conns:
            conn.close()

    def _fail(self, what: str, exc: BaseException) -> LedgerError:
        if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
            return LedgerError(
                f"ledger file {str(self._path)!r} is not a SQLite database ({exc}); expected an "
                f"agentdescent ledger ({SCHEMA}) or an empty/new file; point the ledger at "
                "another path"
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
        """Run the body in one ``BEGIN IMMEDIATE`` transaction: all of it or none of it."""
        conn = self._conn()
        with self._translate(what):
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _init_schema(self) -> None:
        conn = self._conn()
        # Look before touching anything: another application's database must not
        # be switched to WAL or given our tables.
        with self._translate("reading the file"):
            ours = self._check_tables(conn)
        if ours and self._check_history_on_open:
            # Before the WAL switch below, so a refused file is left exactly as it was.
            with self._translate("checking the ledger history"):
                self._check_history(conn)
        with self._translate("switching to WAL journaling"):
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            logger.warning(
                "ledger file %s: SQLite refused WAL journaling (mode %r); readers will wait "
                "for writers",
                self._path,
                mode,
            )
        if ours:
            return
        with self._write("creating the ledger tables") as conn:
            # Another process may have created the ledger since we looked.
            if self._check_tables(conn):
                return
            for statement in _CREATE_SCHEMA:
                conn.execute(statement)
            conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("schema", SCHEMA))
        logger.info("created ledger %s (%s)", self._path, SCHEMA)

    def _check_tables(self, conn: sqlite3.Connection) -> bool:
        """Return True for a ledger file, False for an empty one; raise for anything else."""
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        if not tables:
            return False
        marker = None
        if "meta" in tables:
            try:
                row = conn.execute("SELECT value FROM meta WHERE key = ?", ("schema",)).fetchone()
            except sqlite3.OperationalError:
                row = None  # a 'meta' table of another shape: not ours
            marker = row[0] if row else None
        if marker != SCHEMA or not {"artifacts", "versions"} <= tables:
            found = f"schema marker {marker!r}" if marker else "no agentdescent schema marker"
            raise LedgerError(
                f"ledger file {str(self._path)!r} is a SQLite database but not an agentdescent "
                f"ledger: expected schema {SCHEMA!r}, found {found} with tables {sorted(tables)}; "
                "point the ledger at a new or empty file"
            )
        return True

    def _check_history(self, conn: sqlite3.Connection) -> None:
        """Raise `LedgerError` listing every gap and unreadable row; read-only.

        One read transaction, so a writer in another handle or process cannot make a
        sound file look torn between the two queries; one pass over each table, with
        the versions streamed in primary-key order so gaps show up as breaks between
        runs of consecutive versions (memory grows with the gaps, not the history).
        """
        # artifact id -> runs of consecutive stored versions, [[first, last], ...]
        runs: dict[str, list[list[int]]] = {}
        # artifact id -> problems of single rows, in version order
        row_problems: dict[str, list[str]] = {}
        rows_seen = 0
        conn.execute("BEGIN")
        try:
            registered = {row[0] for row in conn.execute("SELECT artifact_id FROM artifacts")}
            cursor = conn.execute(
                "SELECT artifact_id, version, state_json, meta_json FROM versions"
                " ORDER BY artifact_id, version"
            )
            for artifact_id, version, state_json, meta_json in cursor:
                rows_seen += 1
                found = row_problems.setdefault(artifact_id, [])
                if isinstance(version, bool) or not isinstance(version, int) or version < 1:
                    found.append(f"a row has version {version!r}; versions are integers from 1")
                    continue
                spans = runs.setdefault(artifact_id, [])
                if spans and spans[-1][1] + 1 == version:
                    spans[-1][1] = version
                else:
                    spans.append([version, version])
                try:
                    _parse_state(state_json)
                except (TypeError, ValueError) as exc:
                    found.append(
                        f"version {version} holds unreadable state ({exc}); expected a JSON "
                        "object of str -> str"
                    )
                try:
                    _parse_meta(meta_json)
                except (TypeError, ValueError) as exc:
                    found.append(
                        f"version {version} holds an unreadable audit record ({exc}); "
                        "expected a JSON object"
                    )
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # a read transaction: nothing to keep

        problems: list[str] = []
        for artifact_id in sorted(registered | set(row_problems), key=str):
            # Structural problems first: they explain the row problems, not the reverse.
            found = []
            spans = runs.get(artifact_id, [])
            stored = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
            if artifact_id not in registered:
                what = f"versions {stored} are" if spans else "rows are"
                found.append(
                    f"{what} stored but the artifact is not registered (its row in the "
                    "artifacts table is missing)"
                )
            elif not spans:
                found.append("no version is stored (version 1 is missing)")
            if spans and spans != [[1, spans[-1][1]]]:
                gaps, count, previous = [], 0, 0
                for first, last in spans:
                    if first > previous + 1:
                        lo, hi = previous + 1, first - 1
                        gaps.append(str(lo) if lo == hi else f"{lo}-{hi}")
                        count += hi - lo + 1
                    previous = last
                many = "versions" if count > 1 else "version"
                found.append(
                    f"{many} {', '.join(gaps)} missing from its history (stored: {stored}; "
                    f"every version from 1 to the head {spans[-1][1]} must exist)"
                )
            found += row_problems.get(artifact_id, [])
            problems += [f"artifact {artifact_id!r}: {problem}" for problem in found]
        if problems:
            raise self._history_error(problems)
        logger.debug(
            "ledger %s: history checked, %d versions of %d artifacts",
            self._path,
            rows_seen,
            len(runs),
        )

    def _history_error(self, problems: list[str]) -> LedgerError:
        path = str(self._path)
        shown = problems[:_MAX_LISTED_PROBLEMS]
        lines = "".join(f"\n  - {p}" for p in shown)
        if len(problems) > len(shown):
            lines += f"\n  - ... ({len(problems) - len(shown)} more)"
        count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
        return LedgerError(
            f"ledger file {path!r} failed its history check on open ({count}):{lines}\n"
            "The file was edited or damaged outside agentdescent; the ledger was not "
            "modified. Restore the file from a backup, or open a new path to start a fresh "
            f"run. To read the intact artifacts, open SqliteLedger({path!r}, "
            "check_history=False); do not resume a run on it."
        )

    def _known_ids(self, conn: sqlite3.Connection) -> list[str]:
        return [row[0] for row in conn.execute("SELECT artifact_id FROM artifacts")]

    def _load_state(self, artifact_id: str, version: int, text: str) -> dict[str, str]:
        try:
            return _parse_state(text)
        except (TypeError, ValueError) as exc:
            raise LedgerError(
                f"ledger file {str(self._path)!r}: version {version} of artifact {artifact_id!r} "
                f"holds corrupt state ({exc}); expected a JSON object of str -> str. The file "
                "was edited or damaged outside agentdescent; restore it from a backup"
            ) from exc

    def _load_meta(self, artifact_id: str, version: int, text: str) -> dict[str, Any]:
        try:
            return _parse_meta(text)
        except (TypeError, ValueError) as exc:
            raise LedgerError(
                f"ledger file {str(self._path)!r}: version {version} of artifact {artifact_id!r} "
                f"holds a corrupt audit record ({exc}); expected a JSON object. The file was "
                "edited or damaged outside agentdescent; restore it from a backup"
            ) from exc

    # ----------------------------------------------------------------- the seam

    def register(self, artifact_id: str, state: Mapping[str, str], blast_radius: float) -> None:
        """Create ``artifact_id`` at version 1 with ``state``; a no-op if it already exists.

        A no-op on a known id is what makes reopening a file resume a run: the
        engines register their artifacts on start either way.

        Args:
            artifact_id: a non-empty id.
            state: the initial flat ``str -> str`` state.
            blast_radius: in [0, 1]; governance classifies the artifact by it.

        Raises:
            ContractError: an empty id or a blast radius outside [0, 1] (a ``ValueError``).
            TypeError: a state key or value that is not a str.
            LedgerError: the file cannot be written.
        """
        _check_artifact_id(artifact_id)
        copy = _check_state(artifact_id, state)
        radius = _check_blast_radius(artifact_id, blast_radius)
        state_json = json.dumps(copy, sort_keys=True)
        now = time.time()
        with self._write(f"register({artifact_id!r})") as conn:
            row = conn.execute(
                "SELECT blast_radius FROM artifacts WHERE artifact_id = ?", (artifact_id,)
            ).fetchone()
            if row is not None:
                _warn_blast_radius_mismatch(artifact_id, float(row[0]), radius)
                return
            conn.execute(
                "INSERT INTO artifacts (artifact_id, blast_radius, created_at) VALUES (?, ?, ?)",
                (artifact_id, radius, now),
            )
            conn.execute(
                "INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at)"
                " VALUES (?, 1, ?, '{}', ?)",
                (artifact_id, state_json, now),
            )
        logger.debug("register %r at version 1 (%d keys)", artifact_id, len(copy))

    def head(self, artifact_id: str) -> tuple[int, dict[str, str]]:
        """Return ``(version, state)`` of the head; the state is a fresh dict.

        One SELECT reads both, so the pair always belongs to the same version.

        Raises:
            LedgerError: ``artifact_id`` was never registered, or its row is corrupt.
        """
        _check_artifact_id(artifact_id)
        conn = self._conn()
        with self._translate(f"head({artifact_id!r})"):
            row = conn.execute(
                "SELECT version, state_json FROM versions WHERE artifact_id = ?"
                " ORDER BY version DESC LIMIT 1",
                (artifact_id,),
            ).fetchone()
            if row is None:
                raise _unknown(artifact_id, self._known_ids(conn))
        return int(row[0]), self._load_state(artifact_id, int(row[0]), row[1])

    def versions(self) -> dict[str, int]:
        """Return artifact id -> head version for every registered artifact."""
        conn = self._conn()
        with self._translate("versions()"):
            rows = conn.execute(
                "SELECT artifact_id, MAX(version) FROM versions GROUP BY artifact_id"
            ).fetchall()
        return {aid: int(v) for aid, v in rows}

    def commit(
        self,
        artifact_id: str,
        new_state: Mapping[str, str],
        base_version: int,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Append ``new_state`` as ``base_version + 1`` if the head is still ``base_version``.

        The head check and the insert run in one ``BEGIN IMMEDIATE`` transaction, so
        the rule holds against other threads and other processes on the same file.

        Args:
            artifact_id: a registered artifact.
            new_state: the full new state (not a diff).
            base_version: the head version the new state was built on.
            meta: a small JSON audit record stored with the version.

        Returns:
            The new head version, ``base_version + 1``.

        Raises:
            CASConflict: the head is not ``base_version``; nothing was written.
            LedgerError: ``artifact_id`` was never registered, or the file cannot be written.
            TypeError: a bad state, base version or meta.
        """
        _check_artifact_id(artifact_id)
        copy = _check_state(artifact_id, new_state, "new_state")
        base = _check_base_version(artifact_id, base_version)
        meta_json = _meta_json(artifact_id, meta)
        state_json = json.dumps(copy, sort_keys=True)
        with self._write(f"commit({artifact_id!r})") as conn:
            head = conn.execute(
                "SELECT MAX(version) FROM versions WHERE artifact_id = ?", (artifact_id,)
            ).fetchone()[0]
            if head is None:
                raise _unknown(artifact_id, self._known_ids(conn))
            if head != base:
                raise CASConflict(artifact_id, base, int(head))
            try:
                conn.execute(
                    "INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (artifact_id, base + 1, state_json, meta_json, time.time()),
                )
            except sqlite3.IntegrityError as exc:
                # BEGIN IMMEDIATE makes this unreachable; the primary key is the backstop
                # should another writer ever bypass the transaction.
                raise CASConflict(artifact_id, base, base + 1) from exc
        logger.debug(
            "commit %r: version %d -> %d (%d keys)", artifact_id, base, base + 1, len(copy)
        )
        return base + 1

    def history(self, artifact_id: str) -> list[LedgerEntry]:
        """Return every version of the artifact, oldest first.

        Raises:
            LedgerError: ``artifact_id`` was never registered, or a row is corrupt.
        """
        _check_artifact_id(artifact_id)
        conn = self._conn()
        with self._translate(f"history({artifact_id!r})"):
            rows = conn.execute(
                "SELECT version, state_json, meta_json FROM versions WHERE artifact_id = ?"
                " ORDER BY version",
                (artifact_id,),
            ).fetchall()
            if not rows:
                raise _unknown(artifact_id, self._known_ids(conn))
        return [
            LedgerEntry(
                artifact_id,
                int(version),
                self._load_state(artifact_id, int(version), state_json),
                self._load_meta(artifact_id, int(version), meta_json),
            )
            for version, state_json, meta_json in rows
        ]

    def save_run_state(self, run_id: str, state: Mapping[str, Any],
                       rounds: Sequence[Mapping[str, Any]] = ()) -> None:
        """Replace the run's saved progress and store ``rounds``, in one transaction (JSON, never pickle).

        Raises:
            LedgerError: the file cannot be written.
        """
        text = json.dumps(dict(state), sort_keys=True)
        rows = [(run_id, int(r["index"]), json.dumps(dict(r), sort_keys=True)) for r in rounds]
        with self._write(f"saving the run state of {run_id!r}") as conn:
            conn.execute(
                "INSERT INTO run_state (run_id, state_json, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT(run_id) DO UPDATE SET state_json = excluded.state_json, "
                "updated_at = excluded.updated_at",
                (run_id, text, time.time()),
            )
            conn.executemany(
                "INSERT INTO run_rounds (run_id, idx, round_json) VALUES (?, ?, ?) "
                "ON CONFLICT(run_id, idx) DO UPDATE SET round_json = excluded.round_json",
                rows,
            )

    def load_run_state(self, run_id: str) -> dict[str, Any] | None:
        """The run's saved progress, or None if it never saved any.

        Raises:
            LedgerError: the saved progress is not a JSON object (names the file and the fix).
        """
        conn = self._conn()
        with self._translate(f"reading the run state of {run_id!r}"):
            row = conn.execute("SELECT state_json FROM run_state WHERE run_id = ?", (run_id,)).fetchone()
            rounds = conn.execute(
                "SELECT idx, round_json FROM run_rounds WHERE run_id = ? ORDER BY idx", (run_id,)
            ).fetchall()
        if row is None:
            return None
        try:
            state = json.loads(row[0])
        except ValueError as exc:
            state = exc
        if not isinstance(state, dict):
            raise LedgerError(
                f"ledger file {str(self._path)!r}: the saved progress of run {run_id!r} is not a "
                f"JSON object ({state}); the artifact's versions are intact: open the file with a "
                "new artifact_id, or delete the run_state row to start the run's counters over"
            )
        try:
            state["history"] = [json.loads(text) for _, text in rounds]
        except ValueError as exc:
            raise LedgerError(
                f"ledger file {str(self._path)!r}: a saved round of run {run_id!r} is not JSON "
                f"({exc}); the artifact's versions are intact: open the file with a new artifact_id"
            ) from None
        return state

    def blast_radius(self, artifact_id: str) -> float:
        """Return the blast radius given to ``register``.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
        """
        _check_artifact_id(artifact_id)
        conn = self._conn()
        with self._translate(f"blast_radius({artifact_id!r})"):
            row = conn.execute(
                "SELECT blast_radius FROM artifacts WHERE artifact_id = ?", (artifact_id,)
            ).fetchone()
            if row is None:
                raise _unknown(artifact_id, self._known_ids(conn))
        return float(row[0])

