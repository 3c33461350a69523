"""The SQLite ledger's file layer: its tables, making a new file whole, reading the schema, checking the history, upgrading.

`SchemaKeeper` is a mixin of `agentdescent.ledger.sqlite.SqliteLedger`: it runs when a
ledger file is opened (``_init_schema``) and uses the ledger's connection and write
helpers (``_conn``, ``_translate``, ``_write``, ``_path``, ``_check_history_on_open``).
A file that is not a sound ledger is refused before anything in it is changed: another
application's database, a newer schema (`LedgerTooNew`), an empty or damaged file, a
broken history (`LedgerCorrupted`). A schema-1 file that passes its check is upgraded in
one transaction. A read-only open (``_read_only``) runs the same checks and changes nothing:
no new file, no WAL switch, no tables, no upgrade. The run-state tables of a file made
before run state had digests get their ``digest`` columns at the first save, not on open
(``_run_digests``), and a save records the digests of its run's rows that have none yet
(``_cover_run``). It must not read or write versions for a run: `SqliteLedger` does.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from contextlib import suppress
from typing import Any

from ..errors import LedgerError, LedgerTooNew
from .base import SCHEMA, SCHEMA_VERSION
from .connection import read_only_mode
from .integrity import (
    UNCOVERED,
    HistoryCheck,
    Pointer,
    chain,
    empty_file_error,
    history_error,
    round_digest,
    stored_text,
)

__all__ = ["SchemaKeeper"]

logger = logging.getLogger("agentdescent.ledger")


# Schema 2. The head pointer and the digests carry defaults only so that a schema-1 file
# upgraded with ALTER TABLE has exactly the shape of a new one; every write sets them.
_CREATE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS artifacts ("
    " artifact_id TEXT PRIMARY KEY,"
    " blast_radius REAL NOT NULL,"
    " created_at REAL NOT NULL,"
    " head_version INTEGER NOT NULL DEFAULT 0,"
    " head_digest TEXT NOT NULL DEFAULT '')",
    "CREATE TABLE IF NOT EXISTS versions ("
    " artifact_id TEXT NOT NULL REFERENCES artifacts(artifact_id),"
    " version INTEGER NOT NULL,"
    " state_json TEXT NOT NULL,"
    " meta_json TEXT NOT NULL,"
    " created_at REAL NOT NULL,"
    " parent_digest TEXT NOT NULL DEFAULT '',"
    " digest TEXT NOT NULL DEFAULT '',"
    " PRIMARY KEY (artifact_id, version))",
    "CREATE TABLE IF NOT EXISTS run_state ("
    " run_id TEXT PRIMARY KEY,"
    " state_json TEXT NOT NULL,"
    " updated_at REAL NOT NULL,"
    " digest TEXT NOT NULL DEFAULT '')",
    "CREATE TABLE IF NOT EXISTS run_rounds ("
    " run_id TEXT NOT NULL,"
    " idx INTEGER NOT NULL,"
    " round_json TEXT NOT NULL,"
    " digest TEXT NOT NULL DEFAULT '',"
    " PRIMARY KEY (run_id, idx))",
)

# The digests of a run's saved progress (`integrity.run_state_digest`, `integrity.round_digest`),
# added to the run-state tables of an older file at its first save. The schema stays 2: an
# older agentdescent writes these tables without them (its rows read as not yet covered).
_RUN_DIGEST_COLUMNS = (
    ("run_state", "ALTER TABLE run_state ADD COLUMN digest TEXT NOT NULL DEFAULT ''"),
    ("run_rounds", "ALTER TABLE run_rounds ADD COLUMN digest TEXT NOT NULL DEFAULT ''"),
)

# Schema 1 -> 2: the head pointer and the chain's columns (filled in by _upgrade).
_UPGRADE_FROM_1 = (
    "ALTER TABLE artifacts ADD COLUMN head_version INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE artifacts ADD COLUMN head_digest TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE versions ADD COLUMN parent_digest TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE versions ADD COLUMN digest TEXT NOT NULL DEFAULT ''",
)

_MARKER = re.compile(r"agentdescent-ledger/(\d+)")

# The head row, read through the artifact's head pointer, in one SELECT.


class SchemaKeeper:
    """Opening a ledger file: refuse what is not a sound ledger, make a new one whole, upgrade schema 1."""

    _path: Any
    _check_history_on_open: bool
    _read_only: bool
    _ro_mode: str | None
    #: The run-state tables are known to have their digest columns (they are never dropped).
    _run_digests_ready: bool = False

    def _init_schema(self) -> None:
        self._runs_covered: set[str] = set()  # runs whose saved rounds this object gave digests
        if self._read_only:
            self._open_read_only()
            return
        if not os.path.lexists(self._path):
            self._create_new()
        self._check_not_empty()
        conn = self._conn()
        # Look before touching anything: another application's database (or a newer
        # ledger) must not be switched to WAL, given our tables or upgraded.
        with self._translate("reading the file"):
            schema = self._schema_of(conn)
        if schema is not None and self._check_history_on_open:
            # Before the WAL switch below, so a refused file is left exactly as it was.
            with self._translate("checking the ledger history"):
                self._check_history(conn, chained=schema >= 2)
        with self._translate("switching to WAL journaling"):
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            logger.warning(
                "ledger file %s: SQLite refused WAL journaling (mode %r); readers will wait "
                "for writers",
                self._path,
                mode,
            )
        if schema == SCHEMA_VERSION:
            return
        if schema is None:
            # A SQLite database with no tables at all (made by hand): it becomes a ledger.
            with self._write("creating the ledger tables") as conn:
                if self._schema_of(conn) is None:  # another process may have done it since
                    self._create_tables(conn)
                    logger.info("created ledger %s (%s)", self._path, SCHEMA)
            return
        self._upgrade()

    def _open_read_only(self) -> None:
        """Check an existing file as `_init_schema` does, writing nothing; refuse what only a write could open."""
        path = str(self._path)
        if not os.path.lexists(self._path):
            raise LedgerError(f"ledger file {path!r}: no such file; a read-only open (read_only=True) never "
                              "creates one; give the path of an existing ledger")
        self._check_not_empty()
        self._ro_mode = read_only_mode(self._path)
        conn = self._conn()
        with self._translate("reading the file"):
            schema = self._schema_of(conn)
        if schema is None:
            raise LedgerError(f"ledger file {path!r}: a SQLite database with no tables, not a ledger yet; a "
                              "read-only open (read_only=True) does not make it one")
        if schema < SCHEMA_VERSION:
            raise LedgerError(
                f"ledger file {path!r} is of schema {schema} (written before the digest chain), which is "
                f"upgraded to schema {SCHEMA_VERSION} in place on its first open for writing; a read-only "
                "open never upgrades it. Open it once for writing (python -c \"import agentdescent; "
                f"agentdescent.SqliteLedger({path!r}).close()\"), then read it. The file was not changed")
        if self._check_history_on_open:
            with self._translate("checking the ledger history"):
                self._check_history(conn, chained=True)
        logger.debug("ledger %s opened read-only (%s)", self._path, self._ro_mode)

    @staticmethod
    def _create_tables(conn: sqlite3.Connection) -> None:
        for statement in _CREATE_SCHEMA:
            conn.execute(statement)
        conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("schema", SCHEMA))
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _create_new(self) -> None:
        """Make a new ledger at the path: built whole under a temporary name, then linked in.

        Another process never sees a half-made ledger (an empty file is refused as damage),
        and of two processes creating the same path at once, one file wins, whole.
        """
        temp = self._path.with_name(f".{self._path.name}.{os.getpid()}.{threading.get_ident()}.new")
        try:
            with self._translate("creating a new ledger"):
                raw = sqlite3.connect(str(temp), isolation_level=None)
                try:
                    raw.execute("BEGIN IMMEDIATE")
                    self._create_tables(raw)
                    raw.execute("COMMIT")
                finally:
                    raw.close()
            try:
                os.link(temp, self._path)
            except FileExistsError:
                return  # another process created it first: open theirs
            except OSError:
                # No hard links on this filesystem: a rename, which can only lose a race
                # with another creator in the instant between the check and the move.
                if not os.path.lexists(self._path):
                    os.replace(temp, self._path)
            logger.info("created ledger %s (%s)", self._path, SCHEMA)
        except OSError as exc:
            raise LedgerError(
                f"ledger file {str(self._path)!r}: cannot create it ({exc}); pick a writable path"
            ) from exc
        finally:
            for leftover in (temp, temp.with_name(temp.name + "-journal")):
                with suppress(OSError):
                    leftover.unlink()

    def _check_not_empty(self) -> None:
        try:
            size = os.path.getsize(self._path)
        except OSError:
            return  # not a file, or gone: SQLite says so when it opens it
        if size == 0:
            raise empty_file_error(str(self._path))

    def _schema_of(self, conn: sqlite3.Connection) -> int | None:
        """The file's schema version, None for a database without tables; raise for anything else."""
        tables = {
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        if not tables:
            return None
        marker = None
        if "meta" in tables:
            try:
                row = conn.execute("SELECT value FROM meta WHERE key = ?", ("schema",)).fetchone()
            except sqlite3.OperationalError:
                row = None  # a 'meta' table of another shape: not ours
            marker = row[0] if row else None
        match = _MARKER.fullmatch(marker) if isinstance(marker, str) else None
        stamped = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if match is not None and {"artifacts", "versions"} <= tables:
            found = max(int(match.group(1)), stamped)
            if found > SCHEMA_VERSION:
                raise LedgerTooNew(
                    f"ledger file {str(self._path)!r} was written by a newer agentdescent (schema "
                    f"{found}, this one reads up to {SCHEMA_VERSION}; its marker is {marker!r}); "
                    "upgrade agentdescent (pip install --upgrade agentdescent) to open it. The file "
                    "was not changed",
                    path=str(self._path), found=found, supported=SCHEMA_VERSION,
                )
            if found >= 1:
                return found
        described = f"schema marker {marker!r}" if marker else "no agentdescent schema marker"
        raise LedgerError(
            f"ledger file {str(self._path)!r} is a SQLite database but not an agentdescent "
            f"ledger: expected schema {SCHEMA!r}, found {described} with tables {sorted(tables)}; "
            "point the ledger at a new or empty file"
        )

    def _check_history(self, conn: sqlite3.Connection, *, chained: bool) -> None:
        """Raise `LedgerCorrupted` listing every gap, broken link and unreadable row; read-only.

        One read transaction, so a writer in another handle or process cannot make a
        sound file look torn between the queries; one pass over each table, with the
        versions streamed in primary-key order (`HistoryCheck` keeps one row per artifact).
        """
        pointer = "head_version, head_digest" if chained else "NULL, NULL"
        digests = "parent_digest, digest" if chained else "NULL, NULL"
        conn.execute("BEGIN")
        try:
            check = HistoryCheck(
                {aid: Pointer(radius, head, head_digest) for aid, radius, head, head_digest in conn.execute(
                    f"SELECT artifact_id, blast_radius, {pointer} FROM artifacts")},
                chained=chained,
            )
            for row in conn.execute(
                f"SELECT artifact_id, version, state_json, meta_json, {digests} FROM versions"
                " ORDER BY artifact_id, version"
            ):
                check.row(*row)
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # a read transaction: nothing to keep
        problems = check.problems()
        if problems:
            raise history_error(str(self._path), problems)
        logger.debug("ledger %s: history checked, %d versions of %d artifacts", self._path,
                     check.rows_seen, len(check.registered))

    def _run_digests(self, conn: sqlite3.Connection, *, add: bool) -> bool:
        """Whether the run-state tables have their ``digest`` columns; ``add`` (inside a write) adds them.

        Only a reading that finds them is remembered: columns added inside a write that is
        then rolled back are looked for again.
        """
        if self._run_digests_ready:
            return True
        missing = [(table, statement) for table, statement in _RUN_DIGEST_COLUMNS
                   if "digest" not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}]
        if not missing:
            self._run_digests_ready = True
            return True
        if add:
            for _, statement in missing:
                conn.execute(statement)
            logger.info("ledger %s: added the digest columns of the run-state tables", self._path)
        return add

    def _cover_run(self, conn: sqlite3.Connection, run_id: str) -> None:
        """Give the saved rounds of ``run_id`` that have no digest yet (saved before digests) theirs.

        Once per run per ledger object, inside the save's write (the state row is rewritten,
        with its digest, by every save). A round that is not UTF-8 text gets no digest: a
        load reports it.
        """
        if run_id in self._runs_covered:
            return
        rows = conn.execute("SELECT idx, CAST(round_json AS BLOB) FROM run_rounds WHERE run_id = ? AND digest = ?",
                            (run_id, UNCOVERED)).fetchall()
        updates = [(round_digest(run_id, idx, text), run_id, idx)
                   for idx, raw in rows if (text := stored_text(raw)) is not None]
        conn.executemany("UPDATE run_rounds SET digest = ? WHERE run_id = ? AND idx = ?", updates)
        if updates:
            logger.info("ledger %s: recorded the digests of %d saved round(s) of run %r", self._path,
                        len(updates), run_id)
        self._runs_covered.add(run_id)

    def _upgrade(self) -> None:
        """Schema 1 -> 2 in one transaction: the chain over every stored row, the head pointers, the marker."""
        started = time.perf_counter()
        rows = 0
        with self._write("upgrading the ledger to schema 2") as conn:
            if self._schema_of(conn) == SCHEMA_VERSION:
                return  # another process upgraded it since we looked
            for statement in (*_UPGRADE_FROM_1, *_CREATE_SCHEMA):
                conn.execute(statement)
            ids = [row[0] for row in conn.execute(
                "SELECT artifact_id FROM artifacts UNION SELECT artifact_id FROM versions")]
            for artifact_id in ids:
                # Streamed: only the digests are kept, never the states (the cursor is read to
                # its end before the updates run).
                updates, (head, head_digest) = chain(artifact_id, conn.execute(
                    "SELECT version, state_json, meta_json FROM versions WHERE artifact_id = ?"
                    " ORDER BY version", (artifact_id,)))
                conn.executemany(
                    "UPDATE versions SET parent_digest = ?, digest = ? WHERE artifact_id = ? AND version = ?",
                    updates,
                )
                rows += len(updates)
                if updates:
                    conn.execute("UPDATE artifacts SET head_version = ?, head_digest = ? WHERE artifact_id = ?",
                                 (head, head_digest, artifact_id))
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (SCHEMA,))
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        logger.info("ledger %s upgraded from schema 1 to %d: %d versions chained in %.2f s",
                    self._path, SCHEMA_VERSION, rows, time.perf_counter() - started)
