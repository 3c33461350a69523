"""Where a run directory's ledger lives, and the one place the command line opens it.

A run's ledger is the file ``RUN_DIR/ledger.sqlite`` (the default), or, with ``agentdescent
init --ledger DSN``, a schema of a PostgreSQL database (`agentdescent.ledger.PostgresLedger`),
named by the spec's ``ledger`` entry: ``{"dsn": DSN without a password, "schema": NAME,
"run_id": ID or null}``. A ``run_id`` makes the run directory a sharing driver: several run
directories, on several hosts, evolve one artifact in one schema, each keeping its own
progress (saved under ``ARTIFACT@RUN_ID``, `agentdescent.engine.progress.progress_key`).

This module owns that entry (`ledger_flags` makes it from ``init``'s flags, `check_reachable`
opens it once at ``init``, `database` reads it back), opening the ledger for the driver
(`open_ledger`: ``run``, ``resume``) or read-only (``status``, ``show``, ``eval``,
``export``, ``report``), reading the run's saved progress (`read_saved`), whether the run
has a ledger yet (`has_ledger`), what is wrong with it (`ledger_problem`, `no_ledger`), the
name messages give it (`ledger_name`) and why ``run --restart`` leaves a database alone
(`restart_refused`). It must not write a run directory's file, print, or store or show a
password: libpq reads it from ``PGPASSWORD`` or a ``PGPASSFILE`` (``~/.pgpass``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..engine.progress import SavedProgress, progress_key, read_progress
from ..errors import InvalidArgument, LedgerCorrupted, LedgerError, LedgerUnavailable, UsageError
from ..ledger import Ledger, PostgresLedger, SqliteLedger
from ..ledger.dsn import dsn_has_password, is_dsn, redact_dsn
from ..ledger.postgres import DEFAULT_SCHEMA
from .rundir import RunDir

__all__ = ["ARTIFACT_ID", "CHECK_SECONDS", "DEFAULT_SCHEMA", "check_reachable", "database", "has_ledger",
           "ledger_flags", "ledger_name", "ledger_problem", "no_ledger", "open_ledger", "read_saved",
           "restart_refused"]

#: The id of the one artifact a run directory evolves (in its ledger file, or in its database schema).
ARTIFACT_ID = "artifact"
#: Seconds ``init`` and the read-only commands keep reconnecting to a database that is down
#: before they give up (``run`` and ``resume`` wait the ledger's own default, riding out a restart).
CHECK_SECONDS = 5.0
_FIX_PASSWORD = ("put the password in PGPASSWORD (export PGPASSWORD=...) or a PGPASSFILE (~/.pgpass, mode 0600) "
                 "and give the DSN without it: a run directory never stores a password")


def ledger_flags(args: argparse.Namespace) -> dict[str, Any] | None:
    """The spec's ``ledger`` entry from ``init --ledger DSN [--ledger-schema NAME] [--run-id ID]``, or None
    (no ``--ledger``: the run's ledger is ``RUN_DIR/ledger.sqlite``).

    Nothing is opened here (`check_reachable` does that).

    Raises:
        UsageError: ``--ledger-schema`` or ``--run-id`` without ``--ledger``; a ``--ledger`` that is
            not a ``postgresql://`` or ``postgres://`` DSN; a DSN holding a password (never echoed:
            the message says where the password goes); an empty ``--run-id``.
    """
    dsn, schema, run_id = args.ledger, args.ledger_schema, args.run_id
    if dsn is None:
        given = [flag for flag, value in (("--ledger-schema", schema), ("--run-id", run_id)) if value is not None]
        if given:
            raise UsageError(f"{given[0]} needs --ledger DSN (a PostgreSQL database to keep the ledger in); without "
                             "--ledger the run's ledger is RUN_DIR/ledger.sqlite, which one run directory drives")
        return None
    if not is_dsn(dsn):
        raise UsageError(f"--ledger {redact_dsn(dsn)[:120]!r}: not a PostgreSQL DSN; give "
                         "postgresql://USER@HOST:PORT/DBNAME (or postgres://...), or leave --ledger out to keep "
                         "the ledger in RUN_DIR/ledger.sqlite")
    if dsn_has_password(dsn):
        raise UsageError(f"--ledger {redact_dsn(dsn)!r}: the DSN holds a password (not shown); {_FIX_PASSWORD}")
    if run_id is not None and not run_id.strip():
        raise UsageError(f"--run-id {run_id!r}: give a non-empty name for this run directory's driver (e.g. "
                         "host-a), the same one each time it runs and another one on each other host")
    return {"dsn": dsn.strip(), "schema": DEFAULT_SCHEMA if schema is None else schema, "run_id": run_id}


def check_reachable(entry: dict[str, Any]) -> None:
    """Open the ledger ``entry`` names once and close it (``init``): a wrong host, database, login or
    schema fails now, with the ledger's own message, not at the first ``run``.

    The schema's tables are made if it has none (as the first run would make them).

    Raises:
        UsageError: a schema name (or run id) the ledger refuses, naming the flag.
        LedgerError: the database cannot be reached (`LedgerUnavailable`, after `CHECK_SECONDS`),
            the login or the database is refused, or the schema holds something else.
    """
    try:
        PostgresLedger(entry["dsn"], schema=entry["schema"], run_id=entry["run_id"],
                       retry_seconds=CHECK_SECONDS).close()
    except InvalidArgument as exc:
        text = str(exc)
        flag, value = ("--ledger-schema", entry["schema"]) if "(schema=" in text else ("--run-id", entry["run_id"])
        raise UsageError(f"{flag} {value!r}: {text.split('): ', 1)[-1]}") from None


def database(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The spec's ``ledger`` entry (``dsn``, ``schema``, ``run_id``; checked when the spec was opened),
    or None: the run's ledger is ``RUN_DIR/ledger.sqlite``."""
    entry = spec.get("ledger")
    return entry if isinstance(entry, dict) else None


def ledger_name(run: RunDir, spec: dict[str, Any], *, short: bool = False) -> str:
    """How a message names the run's ledger: its file (``short``: ``ledger.sqlite``), or
    ``ledger database 'postgresql://...' (schema '...', run id '...')``, never with a password."""
    entry = database(spec)
    if entry is None:
        return "ledger.sqlite" if short else str(run.ledger_file)
    shared = f", run id {entry['run_id']!r}" if entry.get("run_id") else ""
    return f"ledger database {redact_dsn(entry['dsn'])!r} (schema {entry['schema']!r}{shared})"


def open_ledger(run: RunDir, spec: dict[str, Any], *, read_only: bool = False) -> Ledger:
    """The run's ledger: ``SqliteLedger(RUN_DIR/ledger.sqlite)``, or the spec's `PostgresLedger`
    (its schema, and its run id for a driver; read-only opens give up after `CHECK_SECONDS`).

    ``read_only`` checks the history and writes nothing (a missing file or schema is not made).

    Raises:
        LedgerError: as `SqliteLedger` or `PostgresLedger` (damage, a newer schema, a database
            that cannot be reached, no ledger to read).
    """
    entry = database(spec)
    if entry is None:
        return SqliteLedger(run.ledger_file, read_only=True) if read_only else SqliteLedger(run.ledger_file)
    if read_only:
        return PostgresLedger(entry["dsn"], schema=entry["schema"], read_only=True, retry_seconds=CHECK_SECONDS)
    return PostgresLedger(entry["dsn"], schema=entry["schema"], run_id=entry["run_id"])


def read_saved(ledger: Ledger, spec: dict[str, Any]) -> SavedProgress | None:
    """The progress the run saved in ``ledger`` (a sharing driver's under its run id), or None."""
    entry = database(spec)
    return read_progress(ledger, ARTIFACT_ID, driver=entry["run_id"] if entry else None)


def _holds_run(ledger: Ledger, spec: dict[str, Any]) -> bool:
    """Whether an open database ledger holds this run: its artifact, or, for a sharing driver, its own progress."""
    entry = database(spec) or {}
    if entry.get("run_id"):
        listing = getattr(ledger, "saved_runs", None)
        return callable(listing) and progress_key(ARTIFACT_ID, entry["run_id"]) in listing()
    return ARTIFACT_ID in ledger.versions()


def _no_ledger_in_schema(exc: LedgerError) -> bool:
    """Whether a read-only open failed only because the schema holds no ledger yet (`PostgresLedger`'s message)."""
    return type(exc) is LedgerError and "no ledger in schema" in str(exc)


def has_ledger(run: RunDir, spec: dict[str, Any]) -> bool:
    """Whether the run has a ledger yet: its file exists; for a database, the schema holds the run's
    artifact (a sharing driver: its own saved progress).

    Raises:
        LedgerError: the database cannot be reached or read (never for a schema with no ledger yet).
    """
    entry = database(spec)
    if entry is None:
        return run.ledger_file.exists()
    try:
        ledger = PostgresLedger(entry["dsn"], schema=entry["schema"], read_only=True, check_history=False,
                                retry_seconds=CHECK_SECONDS)
    except LedgerError as exc:
        if _no_ledger_in_schema(exc):
            return False
        raise
    with ledger:
        return _holds_run(ledger, spec)


def no_ledger(run: RunDir, spec: dict[str, Any] | None = None) -> UsageError:
    """The error for a run without its ledger: not run yet, or its ledger is gone (the file deleted, the
    database's schema or rows dropped)."""
    if not any(f.exists() for f in (run.status_file, run.rounds_file, run.result_file)):
        return UsageError(f"{run.path} has no ledger yet; `agentdescent run {run.path}` first")
    if spec is None or database(spec) is None:
        return UsageError(f"{run.ledger_file}: missing, though {run.path} has run (it was deleted or moved); "
                          f"restore it, or start over with `agentdescent run {run.path} --restart`")
    return UsageError(f"{ledger_name(run, spec)}: holds no ledger of this run, though {run.path} has run (the schema "
                      "or its rows were dropped, or spec.json names another database); restore the database, or "
                      f"start over with `agentdescent run {run.path} --restart` (it drops nothing in the database)")


def restart_refused(run: RunDir, spec: dict[str, Any]) -> UsageError:
    """Why ``run --restart`` does not start over on a database ledger that holds the run: it drops nothing
    there (other runs may share the database), and the two ways to start over."""
    entry = database(spec) or {}
    other = " or a new --run-id" if entry.get("run_id") else ""
    return UsageError(
        f"--restart: {run.path}'s ledger is the {ledger_name(run, spec)}, and the command line drops nothing in a "
        f"database others may share; start over in a new run directory (`agentdescent init NEW_DIR ... --ledger "
        f"DSN --ledger-schema NEW_SCHEMA`{other}), or drop the schema yourself (psql: DROP SCHEMA "
        f"{entry.get('schema')} CASCADE, which deletes every run in it) and run `agentdescent run {run.path} "
        "--restart` again")


def ledger_problem(run: RunDir, spec: dict[str, Any] | None = None) -> tuple[str, str] | None:
    """What is wrong with the run's ledger, ``("missing", "")``, ``("damaged", the error in one line)``,
    ``("unreachable", the error)`` (a database that cannot be reached) or ``("unreadable", the error)``
    (not damage: a newer or older schema, another application's file or tables, a refused login), or None.

    Opening read-only checks the whole history and writes nothing; a missing file is not created.
    """
    spec = run.spec() if spec is None else spec
    if database(spec) is None and not os.path.lexists(run.ledger_file):
        return "missing", ""
    try:
        with open_ledger(run, spec, read_only=True) as ledger:
            if database(spec) is not None and not _holds_run(ledger, spec):
                return "missing", ""
    except LedgerError as exc:
        if _no_ledger_in_schema(exc):
            return "missing", ""
        kind = ("damaged" if isinstance(exc, LedgerCorrupted) else
                "unreachable" if isinstance(exc, LedgerUnavailable) else "unreadable")
        return kind, " ".join(str(exc).split())
    return None
