"""The driver lease: one live driver per (ledger file, artifact), or several that said they share it.

This module owns the ``leases`` and ``lease_takeovers`` tables of a ledger file and their
rules: who a driver is (`holder_id`: ``host:pid:start time``), when a lease row's holder is
gone (`holder_gone`: the same host and its process is dead, or its heartbeat is older than
the expiry), how a lease is taken (`acquire`: refused with `LedgerBusy` while a live holder
conflicts, taken over when the holder is gone, with a note of the takeover for the holder
displaced), renewed (`renew`: refused with `LedgerBusy` once the lease is no longer this
process's, whether another holder has its row or the row is gone; a lost lease is never
taken back) and released (`release`), and the timer that renews a driver's leases
(`Heartbeat`). A row keyed by run id ``""`` is an unshared driver's and conflicts with
every other holder; a row with a run id is a sharing driver's and conflicts only with an
unshared holder or another holder of the same run id.

The tables are made on first use (``CREATE TABLE IF NOT EXISTS``), so the file's schema
number does not change and an older agentdescent still opens the file (it ignores the
tables, and so the lease). It must not read the clock except to stamp and age heartbeats,
and must not touch the artifacts' versions or the saved progress.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import LedgerBusy
from ..processes import process_alive
from .integrity import place

__all__ = ["DEFAULT_EXPIRY", "Heartbeat", "LeaseRow", "acquire", "holder_gone", "holder_id", "holders",
           "release", "renew"]

logger = logging.getLogger("agentdescent.ledger")

#: Seconds after its last heartbeat a lease counts as abandoned (its holder on another
#: host, or a pid that was reused). A driver renews its lease at every progress save and
#: every third of this.
DEFAULT_EXPIRY = 30.0

_HOST = socket.gethostname()
_STARTED = time.time()  # this process's start, as far as the package can tell (its import)

_CREATE = (
    "CREATE TABLE IF NOT EXISTS leases ("
    " artifact_id TEXT NOT NULL,"
    " run_id TEXT NOT NULL,"
    " holder TEXT NOT NULL,"
    " host TEXT NOT NULL,"
    " pid INTEGER NOT NULL,"
    " acquired_at REAL NOT NULL,"
    " heartbeat REAL NOT NULL,"
    " PRIMARY KEY (artifact_id, run_id))"
)
# One note per displaced holder: who took its row over, so its next renewal can name the taker.
_CREATE_TAKEOVERS = (
    "CREATE TABLE IF NOT EXISTS lease_takeovers ("
    " artifact_id TEXT NOT NULL,"
    " run_id TEXT NOT NULL,"
    " holder TEXT NOT NULL,"
    " taken_by TEXT NOT NULL,"
    " host TEXT NOT NULL,"
    " pid INTEGER NOT NULL,"
    " taken_at REAL NOT NULL,"
    " why TEXT NOT NULL,"
    " PRIMARY KEY (artifact_id, run_id, holder))"
)


def holder_id() -> str:
    """This process's holder id, ``host:pid:start time`` (the same for every ledger object in it)."""
    return f"{_HOST}:{os.getpid()}:{_STARTED:.6f}"


@dataclass(frozen=True)
class LeaseRow:
    """One lease as the file holds it.

    Args:
        artifact_id: the leased artifact.
        run_id: the driver's run id, ``""`` for an unshared driver.
        holder: ``host:pid:start time``.
        host: the holder's host.
        pid: the holder's process id.
        acquired_at: when it took the lease (seconds since the epoch).
        heartbeat: when it last renewed it.
    """

    artifact_id: str
    run_id: str
    holder: str
    host: str
    pid: int
    acquired_at: float
    heartbeat: float

    def describe(self, now: float) -> str:
        """The holder in words: its id, pid, run id and heartbeat age."""
        who = "an unshared driver" if not self.run_id else f"run id {self.run_id!r}"
        return (f"holder {self.holder} (pid {self.pid} on {self.host}, {who}, heartbeat "
                f"{max(0.0, now - self.heartbeat):.1f} s ago)")


def _pid_dead(pid: int) -> bool:
    """Whether process ``pid`` on this host is gone (a zombie counts as gone: it runs nothing)."""
    return not process_alive(pid)


def holder_gone(row: LeaseRow, now: float, expiry: float) -> str | None:
    """Why ``row``'s holder no longer holds it (its process died, its heartbeat expired), or None."""
    if row.holder == holder_id():
        return None
    if row.host == _HOST and _pid_dead(row.pid):
        return f"its process {row.pid} on this host is dead"
    if now - row.heartbeat > expiry:
        return f"its heartbeat is {now - row.heartbeat:.1f} s old (expiry {expiry:g} s)"
    return None


def _ensure(conn: Any) -> None:
    # A SQLite file gets the tables on first use (its schema number stays); a database
    # ledger (`agentdescent.ledger.postgres`) makes them with its schema, so they are there.
    if isinstance(conn, sqlite3.Connection):
        conn.execute(_CREATE)
        conn.execute(_CREATE_TAKEOVERS)


def holders(conn: Any, artifact_id: str) -> list[LeaseRow]:
    """Every lease row of ``artifact_id`` (live or not), by run id.

    ``conn`` is a ``sqlite3`` connection or a database ledger's statement runner (the same
    ``execute`` with ``?`` placeholders; its lease tables always exist).
    """
    if isinstance(conn, sqlite3.Connection):
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'leases'").fetchone()
        if exists is None:
            return []
    return [LeaseRow(*row) for row in conn.execute(
        "SELECT artifact_id, run_id, holder, host, pid, acquired_at, heartbeat FROM leases"
        " WHERE artifact_id = ? ORDER BY run_id", (artifact_id,))]


def _conflicts(row: LeaseRow, run_id: str) -> bool:
    return not run_id or not row.run_id or row.run_id == run_id


def acquire(conn: Any, path: str, artifact_id: str, run_id: str, expiry: float) -> list[str]:
    """Take the lease on ``artifact_id`` for ``run_id`` (``""``: unshared) inside the caller's write transaction.

    Rows whose holder is gone are taken over (deleted, leaving a note in ``lease_takeovers``
    for the displaced holder's next renewal); the names of those taken over are returned,
    for the log. This process already holding the row is not a conflict.

    Raises:
        LedgerBusy: a live holder conflicts (an unshared driver conflicts with every
            holder; a sharing driver with an unshared one or the same run id).
    """
    _ensure(conn)
    now = time.time()
    me = holder_id()
    taken_over = []
    for row in holders(conn, artifact_id):
        if row.holder == me or not _conflicts(row, run_id):
            continue
        gone = holder_gone(row, now, expiry)
        if gone is None:
            raise _busy(path, artifact_id, run_id, row, now)
        conn.execute("DELETE FROM leases WHERE artifact_id = ? AND run_id = ?", (artifact_id, row.run_id))
        conn.execute(
            "INSERT INTO lease_takeovers (artifact_id, run_id, holder, taken_by, host, pid, taken_at, why)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(artifact_id, run_id, holder) DO UPDATE SET"
            " taken_by = excluded.taken_by, host = excluded.host, pid = excluded.pid,"
            " taken_at = excluded.taken_at, why = excluded.why",
            (artifact_id, row.run_id, row.holder, me, _HOST, os.getpid(), now, gone))
        taken_over.append(f"{row.describe(now)}: {gone}")
    # A fresh hold: a note about an earlier takeover of this process's row is history now.
    conn.execute("DELETE FROM lease_takeovers WHERE artifact_id = ? AND run_id = ? AND holder = ?",
                 (artifact_id, run_id, me))
    conn.execute(
        "INSERT INTO leases (artifact_id, run_id, holder, host, pid, acquired_at, heartbeat)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(artifact_id, run_id) DO UPDATE SET"
        " heartbeat = excluded.heartbeat",
        (artifact_id, run_id, me, _HOST, os.getpid(), now, now),
    )
    return taken_over


def _busy(path: str, artifact_id: str, run_id: str, row: LeaseRow, now: float) -> LedgerBusy:
    if not run_id and row.run_id:
        clash = "drivers sharing it are running"
    elif not run_id:
        clash = "another driver is running it"
    elif not row.run_id:
        clash = "an unshared driver is running it"
    else:
        clash = f"another driver runs it with the same run id {run_id!r}"
    return LedgerBusy(
        f"{place(path)}: artifact {artifact_id!r} is leased to another driver ({clash}): "
        f"{row.describe(now)}. Wait for it to finish (its lease is released when it returns, and "
        f"taken over once its process is dead or its heartbeat is old), or, to run several "
        f"drivers on one artifact, give each its own run id: "
        f"evolve(..., ledger=path, run_id='driver-1') (or SqliteLedger(path, run_id=...), PostgresLedger(dsn, run_id=...)), each saving its "
        f"own progress",
        path=path, artifact_id=artifact_id, holder=row.holder, pid=row.pid, host=row.host, run_id=row.run_id,
    )


def renew(conn: Any, path: str, artifact_id: str, run_id: str) -> None:
    """Stamp this process's heartbeat on its lease, inside the caller's write transaction.

    A lease that is no longer this process's is never taken back: not when another holder
    has it, and not when its row is gone (a driver took it over after this one's heartbeat
    expired, then finished and released it). Re-inserting the row would let this driver
    commit and save over the work of the driver that took over.

    Raises:
        LedgerBusy: the lease is no longer this process's (another holder has its row, or
            the row is gone); nothing was written. The message names the driver that took
            it over when the file has a note of the takeover.
    """
    _ensure(conn)
    now = time.time()
    me = holder_id()
    row = next((r for r in holders(conn, artifact_id) if r.run_id == run_id), None)
    if row is not None and row.holder == me:
        conn.execute("UPDATE leases SET heartbeat = ? WHERE artifact_id = ? AND run_id = ?",
                     (now, artifact_id, run_id))
        return
    raise _lost(conn, path, artifact_id, run_id, row, now)


def _lost(conn: Any, path: str, artifact_id: str, run_id: str, row: LeaseRow | None,
          now: float) -> LedgerBusy:
    """The `LedgerBusy` of a driver whose lease is not its own any more (``row``: the current holder's, or None)."""
    fix = ("this driver stops and writes nothing more, so the two never overwrite each other's commits or "
           "saved progress. To go on, start the run again once the other driver is done (evolve(..., "
           "ledger=path) resumes the saved progress, which is that driver's now); raise "
           "the ledger's lease_seconds=... if a driver pauses for long (a stopped or suspended process, an "
           "overloaded machine); or give each driver its own run id to run them side by side")
    if row is not None:
        return LedgerBusy(
            f"{place(path)}: the lease on artifact {artifact_id!r} was taken over by "
            f"{row.describe(now)} after this driver's heartbeat expired; {fix}",
            path=path, artifact_id=artifact_id, holder=row.holder, pid=row.pid, host=row.host,
            run_id=row.run_id,
        )
    note = conn.execute(
        "SELECT taken_by, host, pid, taken_at, why FROM lease_takeovers"
        " WHERE artifact_id = ? AND run_id = ? AND holder = ?", (artifact_id, run_id, holder_id())).fetchone()
    if note is None:
        return LedgerBusy(
            f"{place(path)}: this driver's lease on artifact {artifact_id!r} is gone: its row in the "
            "leases table was deleted with no note of a takeover (by hand, or by an older agentdescent "
            f"taking it over); {fix}",
            path=path, artifact_id=artifact_id, run_id=run_id,
        )
    taken_by, host, pid, taken_at, why = note
    return LedgerBusy(
        f"{place(path)}: the lease on artifact {artifact_id!r} was taken over by holder {taken_by} "
        f"(pid {pid} on {host}) {max(0.0, now - taken_at):.1f} s ago, which found this driver gone ({why}) "
        f"and has released the lease since; {fix}",
        path=path, artifact_id=artifact_id, holder=taken_by, pid=pid, host=host, run_id=run_id,
    )


def release(conn: Any, artifact_id: str, run_id: str) -> None:
    """Drop this process's lease on ``artifact_id`` for ``run_id`` (another holder's row is left alone),
    and any note of its having been taken over (this driver has stopped)."""
    _ensure(conn)
    for table in ("leases", "lease_takeovers"):
        conn.execute(f"DELETE FROM {table} WHERE artifact_id = ? AND run_id = ? AND holder = ?",
                     (artifact_id, run_id, holder_id()))


class Heartbeat:
    """A daemon thread that calls ``beat()`` every ``interval`` seconds until stopped.

    Args:
        beat: renews the leases (a failure is logged; the next beat tries again).
        interval: seconds between beats.
    """

    def __init__(self, beat: Callable[[], None], interval: float) -> None:
        self._beat = beat
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentdescent-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._beat()
            except Exception as exc:  # a failed beat must not kill the timer
                logger.warning("renewing the ledger lease failed: %s", exc)

    def stop(self) -> None:
        """Stop the timer (it makes no further beat)."""
        self._stop.set()


_HELD: dict[tuple[str, str, str], int] = {}  # (file, artifact, run id) -> holds in this process
_HELD_LOCK = threading.Lock()


class LeaseHolder:
    """The lease members of `agentdescent.ledger.SqliteLedger` (mixed in; the ledger gives
    ``_write``, ``_conn``, ``_translate`` and ``_path``).

    A driver (`agentdescent.engine.progress.ProgressStore`) calls `acquire_lease` when its run
    opens, `renew_lease` at every save, and `release_lease` when it closes; the ledger's
    ``close`` releases what it still holds. One process is one holder: a second hold from
    the same process (another ledger object, a second run after the first) is counted and
    the row is dropped with the last release.

    A lease found lost (by a save, a commit through `check_lease`, or the heartbeat) stays
    lost for this object until it is released: every later write on the artifact raises
    the same `LedgerBusy`, and the heartbeat stops renewing it.
    """

    _path: object
    _write: Callable[..., object]
    _conn: Callable[[], sqlite3.Connection]
    _translate: Callable[..., object]

    def _init_leases(self, run_id: str | None, lease_seconds: float) -> None:
        self._run_id = run_id
        self._lease_seconds = float(lease_seconds)
        self._leased: set[str] = set()
        self._lease_lock = threading.Lock()
        self._heartbeat: Heartbeat | None = None
        self._lost: dict[str, LedgerBusy] = {}  # artifact -> the LedgerBusy that found its lease lost

    @property
    def run_id(self) -> str | None:
        """This driver's run id when it shares the file's artifacts (``SqliteLedger(run_id=...)``), else None."""
        return self._run_id

    @property
    def holder(self) -> str:
        """This process's holder id, ``host:pid:start time``."""
        return holder_id()

    def sign(self, artifact_id: str, meta: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """``meta`` with this driver's signature when it holds the lease on ``artifact_id``: ``"holder"``
        (this process) and, for a sharing driver, ``"driver"`` (its run id); else ``meta`` as given."""
        if artifact_id not in self._leased:
            return meta
        signed = {**(meta or {}), "holder": holder_id()}
        if self._run_id is not None:
            signed["driver"] = self._run_id
        return signed

    def _key(self, artifact_id: str) -> tuple[str, str, str]:
        return (os.path.realpath(str(self._path)), artifact_id, self._run_id or "")

    def acquire_lease(self, artifact_id: str) -> None:
        """Take this driver's lease on ``artifact_id`` (renewed by a timer until released).

        Raises:
            LedgerBusy: another live driver holds it (see `acquire`).
            LedgerError: the file cannot be written.
        """
        with self._lease_lock:
            if artifact_id in self._leased:
                return
            with self._write(f"taking the lease on {artifact_id!r}") as conn:  # type: ignore[attr-defined]
                taken = acquire(conn, str(self._path), artifact_id, self._run_id or "", self._lease_seconds)
            for line in taken:
                logger.warning("ledger file %s: took over the lease on %r from %s", self._path, artifact_id, line)
            self._lost.pop(artifact_id, None)
            self._leased.add(artifact_id)
            with _HELD_LOCK:
                _HELD[self._key(artifact_id)] = _HELD.get(self._key(artifact_id), 0) + 1
            if self._heartbeat is None:
                self._heartbeat = Heartbeat(self._beat, self._lease_seconds / 3)

    def _beat(self) -> None:
        for artifact_id in sorted(self._leased):
            if artifact_id in self._lost:
                continue  # lost for good: the driver's next write raises; nothing to renew
            try:
                self.renew_lease(artifact_id)
            except LedgerBusy as exc:
                if artifact_id in self._leased:  # not released in the meantime
                    logger.warning("ledger file %s: lost the lease on %r; the driver stops at its next write: %s",
                                   self._path, artifact_id, exc)

    def check_lease(self, conn: Any, artifact_id: str) -> None:
        """Inside the caller's write transaction: renew this driver's lease on ``artifact_id``, or
        raise if it was lost (a no-op when this object holds no lease on it).

        The ledger's ``commit`` calls it in the commit's own transaction, so a driver that lost
        its lease never commits, however long ago its last save was.

        Raises:
            LedgerBusy: the lease is no longer this driver's (see `renew`); nothing was written.
        """
        if artifact_id not in self._leased:
            return
        lost = self._lost.get(artifact_id)
        if lost is not None:
            raise lost.with_traceback(None)
        try:
            renew(conn, str(self._path), artifact_id, self._run_id or "")
        except LedgerBusy as exc:
            if artifact_id in self._leased:
                self._lost[artifact_id] = exc
            raise

    def renew_lease(self, artifact_id: str) -> None:
        """Renew this driver's heartbeat on ``artifact_id`` (a no-op when it holds no lease on it).

        Raises:
            LedgerBusy: the lease was lost: another driver took it over (and may have released
                it since); a lost lease is never taken back.
        """
        if artifact_id not in self._leased:
            return
        with self._write(f"renewing the lease on {artifact_id!r}") as conn:  # type: ignore[attr-defined]
            self.check_lease(conn, artifact_id)

    def release_lease(self, artifact_id: str) -> None:
        """Release this driver's lease on ``artifact_id`` (kept while another hold of this process remains)."""
        with self._lease_lock:
            if artifact_id not in self._leased:
                return
            self._leased.discard(artifact_id)
            self._lost.pop(artifact_id, None)
            if not self._leased and self._heartbeat is not None:
                self._heartbeat.stop()
                self._heartbeat = None
            with _HELD_LOCK:
                left = _HELD.get(self._key(artifact_id), 1) - 1
                if left > 0:
                    _HELD[self._key(artifact_id)] = left
                else:
                    _HELD.pop(self._key(artifact_id), None)
            if left <= 0:
                with self._write(f"releasing the lease on {artifact_id!r}") as conn:  # type: ignore[attr-defined]
                    release(conn, artifact_id, self._run_id or "")

    def release_leases(self) -> None:
        """Release every lease this object holds (``close`` calls it); failures are logged."""
        for artifact_id in sorted(self._leased):
            try:
                self.release_lease(artifact_id)
            except Exception as exc:  # closing goes on; the pid check frees it later
                logger.warning("ledger file %s: releasing the lease on %r failed: %s", self._path, artifact_id, exc)

    def lease_holders(self, artifact_id: str) -> list[LeaseRow]:
        """Every lease row of ``artifact_id`` in the file (live or not), by run id."""
        conn = self._conn()
        with self._translate("reading the leases"):  # type: ignore[attr-defined]
            return holders(conn, artifact_id)

    def saved_runs(self) -> list[str]:
        """The run ids with saved progress in the file (``run_state`` rows), sorted."""
        conn = self._conn()
        with self._translate("listing the saved runs"):  # type: ignore[attr-defined]
            return [row[0] for row in conn.execute("SELECT run_id FROM run_state ORDER BY run_id")]
