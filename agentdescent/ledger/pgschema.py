"""The PostgreSQL ledger's tables: making them in their schema, reading the schema's version, checking the history.

`PgSchemaKeeper` is a mixin of `agentdescent.ledger.postgres.PostgresLedger`: it runs when the
ledger opens (``_open``), with the ledger's connection, translation and write helpers
(``_conn``, ``_translate``, ``_write``, ``_where``, ``_schema``, ``_read_only``, ``_psycopg``).
A schema that is not a sound ledger is refused before anything in it is changed: another
application's tables (`LedgerError`), a newer ledger schema (`LedgerTooNew`), a broken history
(`LedgerCorrupted`, every problem listed). Two drivers making the tables at once are
serialised by the ledger's writer lock. It must not read or write versions for a run.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

from ..errors import LedgerError, LedgerTooNew
from .base import SCHEMA, SCHEMA_VERSION
from .integrity import HistoryCheck, Pointer, history_error
from .lease import _CREATE as _CREATE_LEASES
from .lease import _CREATE_TAKEOVERS
from .schema import _CREATE_SCHEMA, _MARKER

__all__ = ["TABLES", "PgSchemaKeeper"]

logger = logging.getLogger("agentdescent.ledger")



def _postgres_types(statement: str) -> str:
    """A SQLite table's DDL in PostgreSQL's types: times and radii as double precision (REAL is 4
    bytes there: a heartbeat would lose its seconds), integers (versions, pids) as bigint."""
    return re.sub(r"\bINTEGER\b", "BIGINT", re.sub(r"\bREAL\b", "DOUBLE PRECISION", statement))


#: The same tables as a SQLite file's (`agentdescent.ledger.schema`, `agentdescent.ledger.lease`),
#: written from the same statements, so the two ledgers can never hold different shapes.
TABLES = tuple(_postgres_types(statement) for statement in (*_CREATE_SCHEMA, _CREATE_LEASES, _CREATE_TAKEOVERS))
_OURS = {"meta", "artifacts", "versions", "run_state", "run_rounds", "leases", "lease_takeovers"}


class PgSchemaKeeper:
    """Opening a database ledger: refuse what is not a sound ledger, make a new one whole."""

    _where: str
    _schema: str
    _read_only: bool
    _psycopg: Any
    _conn: Any
    _translate: Any
    _write: Any

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
                    for statement in TABLES:
                        conn.execute(statement)
                    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", ("schema", SCHEMA))
                    logger.info("created ledger %s (schema %s, %s)", self._where, self._schema, SCHEMA)
            return
        if check_history:
            with self._translate("checking the ledger history"):
                self._check_history(conn)

    def _schema_of(self, conn: Any) -> int | None:
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

    def _check_history(self, conn: Any) -> None:
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
            raise history_error(self._where, problems, schema=self._schema)
        logger.debug("ledger %s: history checked, %d versions of %d artifacts", self._where, check.rows_seen,
                     len(check.registered))
