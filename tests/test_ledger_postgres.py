"""`PostgresLedger` against a real PostgreSQL server (the session's throwaway cluster, never a mock).

The contract suites run on it unchanged (`LedgerConformance`, `RunStateConformance`); then
what a database adds to a file: damage and a newer schema refused on open, another
application's schema refused, leases across processes, a server restart survived and a
server that stays down ending in `LedgerUnavailable` within the bound, a block of writes cut
off midway landing not at all, a commit whose reply was lost not landing twice, passwords
from the environment and never echoed, the pool's bound, and a forked child.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentdescent.errors import (
    LedgerBusy,
    LedgerCorrupted,
    LedgerError,
    LedgerTooNew,
    LedgerUnavailable,
)
from agentdescent.ledger import PostgresLedger
from agentdescent.ledger.postgres import dsn_has_password, redact_dsn
from agentdescent.testing import LedgerConformance, RunStateConformance

_names = itertools.count()


def _schema() -> str:
    return f"t{os.getpid()}_{next(_names)}"


def _drop(server: Any, schema: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _sql(server: Any, schema: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run ``statement`` behind the ledger's back (damage, inspection)."""
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def schema(postgres_server: Any) -> Any:
    name = _schema()
    yield name
    _drop(postgres_server, name)


class TestPostgresLedgerConformance(LedgerConformance):
    @pytest.fixture(autouse=True)
    def _server(self, postgres_server: Any) -> None:
        self.server = postgres_server
        self.opened: list[tuple[PostgresLedger, str]] = []

    def make_ledger(self, tmp_path: Path) -> PostgresLedger:
        name = _schema()
        ledger = PostgresLedger(self.server.dsn(), schema=name)
        self.opened.append((ledger, name))
        return ledger

    def close_ledger(self, ledger: Any) -> None:
        ledger.close()
        for opened, name in self.opened:
            if opened is ledger:
                _drop(self.server, name)


class TestPostgresRunState(RunStateConformance):
    @pytest.fixture(autouse=True)
    def _server(self, postgres_server: Any) -> None:
        self.server = postgres_server
        self.name = _schema()

    def make_ledger(self, tmp_path: Path) -> PostgresLedger:
        return PostgresLedger(self.server.dsn(), schema=self.name)

    def reopen(self, ledger: Any, tmp_path: Path) -> PostgresLedger:
        ledger.close()
        return PostgresLedger(self.server.dsn(), schema=self.name)

    def damage_saved(self, ledger: Any, tmp_path: Path, run_id: str, index: int | None) -> bool:
        if index is None:
            _sql(self.server, self.name, "UPDATE run_state SET state_json = replace(state_json, 'account', 'accounu')"
                 " WHERE run_id = %s", (run_id,))
        else:
            _sql(self.server, self.name, "UPDATE run_rounds SET round_json = replace(round_json, 'account', "
                 "'accounu') WHERE run_id = %s AND idx = %s", (run_id, index))
        return True


# --------------------------------------------------------------------------- what a database adds


def test_damage_is_refused_on_open_and_on_read(postgres_server: Any, schema: str) -> None:
    with PostgresLedger(postgres_server.dsn(), schema=schema) as ledger:
        ledger.register("a", {"k": "v1"}, 0.2)
        for v in range(1, 4):
            ledger.commit("a", {"k": f"v{v + 1}"}, v)
    _sql(postgres_server, schema, "UPDATE versions SET state_json = %s WHERE artifact_id = 'a' AND version = 2",
         ('{"k": "forged"}',))
    with pytest.raises(LedgerCorrupted) as caught:
        PostgresLedger(postgres_server.dsn(), schema=schema)
    assert "version 2 does not match its digest" in str(caught.value)
    assert any("artifact 'a'" in p for p in caught.value.problems)
    with PostgresLedger(postgres_server.dsn(), schema=schema, check_history=False) as salvage:
        assert salvage.head("a") == (4, {"k": "v4"})  # the head itself is intact
        with pytest.raises(LedgerCorrupted, match="version 2 does not match its digest"):
            salvage.history("a")
    _sql(postgres_server, schema, "DELETE FROM versions WHERE artifact_id = 'a' AND version = 4")
    with PostgresLedger(postgres_server.dsn(), schema=schema, check_history=False) as salvage:
        with pytest.raises(LedgerCorrupted, match="head"):
            salvage.commit("a", {"k": "v5"}, 4)  # never builds on a deleted head
        assert salvage.versions() == {"a": 4}


def test_a_newer_schema_and_another_applications_tables_are_refused(postgres_server: Any, schema: str) -> None:
    PostgresLedger(postgres_server.dsn(), schema=schema).close()
    _sql(postgres_server, schema, "UPDATE meta SET value = 'agentdescent-ledger/99' WHERE key = 'schema'")
    with pytest.raises(LedgerTooNew) as caught:
        PostgresLedger(postgres_server.dsn(), schema=schema)
    assert caught.value.found == 99
    other = _schema()
    try:
        _sql(postgres_server, "public", f'CREATE SCHEMA "{other}"')
        _sql(postgres_server, other, "CREATE TABLE invoices (id int)")
        with pytest.raises(LedgerError, match="not an agentdescent ledger"):
            PostgresLedger(postgres_server.dsn(), schema=other)
        assert _sql(postgres_server, other, "SELECT count(*) FROM information_schema.tables WHERE "
                    "table_schema = %s", (other,)) == [(1,)]  # nothing was added to it
    finally:
        _drop(postgres_server, other)


def test_read_only_reads_and_refuses_writes(postgres_server: Any, schema: str) -> None:
    with pytest.raises(LedgerError, match="no ledger in schema"):
        PostgresLedger(postgres_server.dsn(), schema=schema, read_only=True)
    with PostgresLedger(postgres_server.dsn(), schema=schema) as ledger:
        ledger.register("a", {"k": "v"}, 0.5)
    with PostgresLedger(postgres_server.dsn(), schema=schema, read_only=True) as reader:
        assert reader.head("a") == (1, {"k": "v"})
        with pytest.raises(LedgerError, match="read-only"):
            reader.commit("a", {"k": "w"}, 1)
    assert "read-only" in repr(reader)


_HOLDER = textwrap.dedent("""
    import sys, time
    from agentdescent.ledger import PostgresLedger
    ledger = PostgresLedger(sys.argv[1], schema=sys.argv[2], lease_seconds=float(sys.argv[3]))
    ledger.register("a", {"k": "v"}, 0.2)
    ledger.acquire_lease("a")
    print("held", flush=True)
    time.sleep(120)
""")


def _holder(server: Any, schema: str, lease_seconds: float = 30.0) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, server.dsn(), schema, str(lease_seconds)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_lease_held_by_a_live_driver_refuses_another_and_is_taken_over_when_it_dies(
        postgres_server: Any, schema: str) -> None:
    holder = _holder(postgres_server, schema)
    try:
        with PostgresLedger(postgres_server.dsn(), schema=schema) as ledger:
            with pytest.raises(LedgerBusy) as caught:
                ledger.acquire_lease("a")
            assert caught.value.pid == holder.pid
            assert "ledger database" in str(caught.value)
            with PostgresLedger(postgres_server.dsn(), schema=schema, run_id="driver-2") as sharing, \
                    pytest.raises(LedgerBusy, match="an unshared driver is running it"):
                sharing.acquire_lease("a")
            holder.kill()
            holder.wait()
            ledger.acquire_lease("a")  # its process is dead: taken over
            assert [row.pid for row in ledger.lease_holders("a")] == [os.getpid()]
            assert ledger.commit("a", {"k": "w"}, 1) == 2
            assert ledger.history("a")[-1].meta["holder"] == ledger.holder
    finally:
        holder.kill()
        holder.wait()


def test_a_driver_whose_lease_was_taken_over_never_commits(postgres_server: Any, schema: str) -> None:
    with PostgresLedger(postgres_server.dsn(), schema=schema, run_id="d1", lease_seconds=30) as ledger:
        ledger.register("a", {"k": "v"}, 0.2)
        ledger.acquire_lease("a")
        # Another host's driver with the same run id took it over after this one's heartbeat expired.
        _sql(postgres_server, schema, "UPDATE leases SET holder = 'elsewhere:1:1', host = 'elsewhere', pid = 1")
        with pytest.raises(LedgerBusy, match="taken over by holder elsewhere:1:1"):
            ledger.commit("a", {"k": "w"}, 1)
        assert ledger.head("a")[0] == 1
        with pytest.raises(LedgerBusy):
            ledger.renew_lease("a")  # lost for good: a save (which renews first) stops too


def test_sharing_drivers_each_keep_their_progress(postgres_server: Any, schema: str) -> None:
    with PostgresLedger(postgres_server.dsn(), schema=schema, run_id="d1") as one, \
            PostgresLedger(postgres_server.dsn(), schema=schema, run_id="d2") as two:
        one.register("a", {"k": "v"}, 0.2)
        one.acquire_lease("a")
        two.acquire_lease("a")
        one.save_run_state("a@d1", {"rounds": 1})
        two.save_run_state("a@d2", {"rounds": 7})
        assert one.commit("a", {"k": "1"}, 1) == 2
        assert two.commit("a", {"k": "2"}, 2) == 3
        assert [e.meta.get("driver") for e in one.history("a")] == [None, "d1", "d2"]
        assert two.load_run_state("a@d1")["rounds"] == 1
        assert one.saved_runs() == ["a@d1", "a@d2"]


def test_a_server_restart_between_operations_is_survived(postgres_server: Any, schema: str) -> None:
    with PostgresLedger(postgres_server.dsn(), schema=schema, retry_seconds=30) as ledger:
        ledger.register("a", {"k": "v"}, 0.2)
        ledger.acquire_lease("a")
        postgres_server.restart()
        assert ledger.head("a") == (1, {"k": "v"})  # a read reconnects
        postgres_server.restart()
        assert ledger.commit("a", {"k": "w"}, 1) == 2  # so does a write
        postgres_server.restart()
        with ledger.atomic():  # and a block whose first write finds the connection gone
            ledger.commit("a", {"k": "x"}, 2)
            ledger.save_run_state("a", {"round": 2})
        assert ledger.head("a")[0] == 3 and ledger.load_run_state("a")["round"] == 2
        assert len(ledger.history("a")) == 3


def test_a_server_that_stays_down_ends_in_the_typed_error_within_the_bound(
        postgres_server: Any, schema: str) -> None:
    ledger = PostgresLedger(postgres_server.dsn(), schema=schema, retry_seconds=1.5)
    ledger.register("a", {"k": "v"}, 0.2)
    postgres_server.stop()
    try:
        started = time.monotonic()
        with pytest.raises(LedgerUnavailable) as caught:
            ledger.commit("a", {"k": "w"}, 1)
        took = time.monotonic() - started
        assert caught.value.attempts >= 2 and caught.value.seconds >= 1.5
        assert took < 30  # bounded: the retry bound plus one connection attempt, far below any hang
        assert "retry_seconds=1.5" in str(caught.value) and caught.value.where == ledger.dsn
    finally:
        postgres_server.start()
    assert ledger.head("a") == (1, {"k": "v"})  # nothing landed, and the ledger works again
    ledger.close()


def _terminate_others(server: Any, schema: str) -> None:
    """Cut every session of the ledger's database except this helper's own."""
    _sql(server, schema, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
         " AND backend_type = 'client backend'")


def test_a_block_cut_off_midway_lands_not_at_all(postgres_server: Any, schema: str) -> None:
    with PostgresLedger(postgres_server.dsn(), schema=schema) as ledger:
        ledger.register("a", {"k": "v"}, 0.2)
        with pytest.raises(LedgerUnavailable, match="lost"), ledger.atomic():
            ledger.commit("a", {"k": "w"}, 1)
            _terminate_others(postgres_server, schema)
            ledger.save_run_state("a", {"round": 1})  # never lands on a new connection without the commit
        assert ledger.head("a") == (1, {"k": "v"})
        assert ledger.load_run_state("a") is None
        assert ledger.commit("a", {"k": "w"}, 1) == 2  # and the ledger goes on


class _ReplyLost(PostgresLedger):
    """A ledger whose first plain commit lands on the server but whose reply is lost (the
    connection is cut right after the server committed)."""

    cut = 0

    def _commit(self, conn: Any, what: str) -> None:
        super()._commit(conn, what)
        if what.startswith("commit(") and not self.cut:
            self.cut += 1
            self._drop(conn.raw)
            raise LedgerUnavailable(f"{what}: the connection was lost while committing", where=self.dsn,
                                    attempts=1, outcome_unknown=True)


def test_a_commit_whose_reply_was_lost_lands_once(postgres_server: Any, schema: str) -> None:
    with _ReplyLost(postgres_server.dsn(), schema=schema) as ledger:
        ledger.register("a", {"k": "v"}, 0.2)
        assert ledger.commit("a", {"k": "w"}, 1) == 2  # tried again: found landed, not a CASConflict
        assert ledger.cut == 1
        assert [e.state for e in ledger.history("a")] == [{"k": "v"}, {"k": "w"}]


def test_passwords_come_from_the_environment_and_are_never_echoed(
        postgres_server: Any, schema: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = postgres_server.dsn(tcp=True)  # needs a password (scram-sha-256 over TCP)
    with pytest.raises(LedgerError, match="refused the login") as caught:
        PostgresLedger(bare, schema=schema, retry_seconds=30)  # refused at once, not retried for 30 s
    assert "PGPASSWORD" in str(caught.value)
    monkeypatch.setenv("PGPASSWORD", postgres_server.password)
    with PostgresLedger(bare, schema=schema) as ledger:
        ledger.register("a", {"k": "v"}, 0.2)
    monkeypatch.delenv("PGPASSWORD")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{postgres_server.port}:*:{postgres_server.user}:{postgres_server.password}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    with PostgresLedger(bare, schema=schema) as ledger:
        assert ledger.head("a") == (1, {"k": "v"})
    monkeypatch.delenv("PGPASSFILE")
    secret = postgres_server.password
    inline = postgres_server.dsn(tcp=True, with_password=True)
    assert dsn_has_password(inline) and not dsn_has_password(bare)
    assert secret not in redact_dsn(inline)
    with PostgresLedger(inline, schema=schema) as ledger:
        assert secret not in repr(ledger) and secret not in ledger.dsn
        with pytest.raises(LedgerError) as unknown:
            ledger.head("nope")
        assert secret not in str(unknown.value)
    wrong = inline.replace(secret, "not-" + secret)
    with pytest.raises(LedgerError) as refused:
        PostgresLedger(wrong, schema=schema)
    assert secret not in str(refused.value)


def test_redact_dsn_handles_both_forms() -> None:
    assert redact_dsn("postgresql://u:p%40ss@h:5/db?password=x&sslmode=require") == \
        "postgresql://u@h:5/db?sslmode=require"
    assert redact_dsn("host=h password='a b' dbname=d") == "host=h dbname=d"
    assert redact_dsn("postgresql://u@/db?host=/tmp/s&port=5") == "postgresql://u@/db?host=/tmp/s&port=5"


def test_the_pool_is_bounded_and_reuses_the_connections_of_ended_threads(
        postgres_server: Any, schema: str) -> None:
    with PostgresLedger(postgres_server.dsn(), schema=schema, max_connections=2, timeout=1) as ledger:
        ledger.register("a", {"k": "v"}, 0.2)  # this thread: one connection
        for _ in range(5):  # five threads in turn share the second
            t = threading.Thread(target=ledger.head, args=("a",))
            t.start()
            t.join()
        release = threading.Event()
        errors: list[BaseException] = []

        def hold() -> None:
            ledger.head("a")
            release.wait(10)

        def third() -> None:
            try:
                ledger.head("a")
            except LedgerError as exc:
                errors.append(exc)

        holder = threading.Thread(target=hold)
        holder.start()
        time.sleep(0.2)
        late = threading.Thread(target=third)
        late.start()
        late.join()
        release.set()
        holder.join()
        assert len(errors) == 1 and "max_connections" in str(errors[0])
        sessions = _sql(postgres_server, schema, "SELECT count(*) FROM pg_stat_activity WHERE pid <> "
                        "pg_backend_pid() AND backend_type = 'client backend'")
        assert sessions[0][0] <= 2


def test_a_forked_child_opens_its_own_connections(postgres_server: Any, schema: str) -> None:
    ledger = PostgresLedger(postgres_server.dsn(), schema=schema)
    ledger.register("a", {"k": "v"}, 0.2)
    pid = os.fork()
    if pid == 0:  # the child: commit through its own connection, leave without touching the parent's
        try:
            ledger.commit("a", {"k": "child"}, 1)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ledger.head("a") == (2, {"k": "child"})  # the parent's connection still works
    ledger.close()


def test_cas_rejects_stale_bases_across_processes(postgres_server: Any, schema: str) -> None:
    """Processes racing on one artifact: every commit kept once, none lost (the issue's 8 x 100)."""
    with PostgresLedger(postgres_server.dsn(), schema=schema) as ledger:
        ledger.register("a", {"n": ""}, 0.2)
    racer = textwrap.dedent("""
        import sys
        from agentdescent.errors import CASConflict
        from agentdescent.ledger import PostgresLedger
        me, count = sys.argv[3], int(sys.argv[4])
        with PostgresLedger(sys.argv[1], schema=sys.argv[2]) as ledger:
            done = lost = 0
            while done < count:
                version, state = ledger.head("a")
                try:
                    ledger.commit("a", {"n": f"{me}-{done}"}, version, meta={"by": me, "i": done})
                    done += 1
                except CASConflict:
                    lost += 1
            print(lost)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", racer, postgres_server.dsn(), schema, str(i), "100"],
                              stdout=subprocess.PIPE, text=True) for i in range(8)]
    conflicts = [int(p.communicate(timeout=240)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    with PostgresLedger(postgres_server.dsn(), schema=schema) as ledger:
        history = ledger.history("a")
    assert [e.version for e in history] == list(range(1, 802))
    made = sorted((e.meta["by"], e.meta["i"]) for e in history[1:])
    assert made == sorted((str(i), n) for i in range(8) for n in range(100))  # each exactly once
    assert sum(conflicts) > 0  # they did race
