"""Damage real ledger files every way the issue found, and print what agentdescent does about each.

Each case builds a real SQLite ledger (``SqliteLedger`` commits, or an offline ``evolve``
run on the router domain), damages it outside agentdescent (``sqlite3`` statements, or
cutting the file's bytes), then opens it, commits on it or resumes a run on it. Every
claim in the "what happens" column is checked as the case runs (the file's bytes left as
they were, no call made before the refusal, the versions kept), so a row that no longer
holds fails here instead of being printed. The table is the "Damage" table of
docs/failures.md, and tests/test_ledger_damage.py checks that page against this output.

    python bench/ledger_damage.py            # the markdown table
    python bench/ledger_damage.py --json     # the rows as JSON
    python bench/ledger_damage.py --cost 100000   # what the check and the upgrade cost
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent import SqliteLedger, evolve  # noqa: E402
from agentdescent.domains.router import RouterDomain  # noqa: E402
from agentdescent.errors import AgentDescentError  # noqa: E402
from agentdescent.ledger.integrity import version_digest  # noqa: E402

#: The tables as a schema-1 ledger (before the chain) wrote them.
SCHEMA_1 = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE artifacts (artifact_id TEXT PRIMARY KEY, blast_radius REAL NOT NULL,"
    " created_at REAL NOT NULL)",
    "CREATE TABLE versions (artifact_id TEXT NOT NULL REFERENCES artifacts(artifact_id),"
    " version INTEGER NOT NULL, state_json TEXT NOT NULL, meta_json TEXT NOT NULL,"
    " created_at REAL NOT NULL, PRIMARY KEY (artifact_id, version))",
    "CREATE TABLE run_state (run_id TEXT PRIMARY KEY, state_json TEXT NOT NULL, updated_at REAL NOT NULL)",
    "CREATE TABLE run_rounds (run_id TEXT NOT NULL, idx INTEGER NOT NULL, round_json TEXT NOT NULL,"
    " PRIMARY KEY (run_id, idx))",
)


class ClaimFailed(AssertionError):
    """A case's "what happens" did not hold."""


def claim(ok: bool, what: str) -> None:
    """Stop the probe when a claim of the table does not hold."""
    if not ok:
        raise ClaimFailed(what)


# --------------------------------------------------------------------------- building files


def ledger_file(path: Path, head: int = 4) -> Path:
    """Artifact 'a' with versions 1..head (state n=version), closed."""
    with SqliteLedger(path) as led:
        led.register("a", {"n": "1"}, 0.2)
        for base in range(1, head):
            led.commit("a", {"n": str(base + 1)}, base, meta={"diff_id": f"d{base}"})
    return path


def sql(path: Path, *statements: str | tuple[str, tuple]) -> bytes:
    """Run statements on a closed file behind agentdescent's back; return its bytes afterwards."""
    raw = sqlite3.connect(path)
    try:
        for statement in statements:
            text, params = (statement, ()) if isinstance(statement, str) else statement
            raw.execute(text, params)
        raw.commit()
    finally:
        raw.close()
    return path.read_bytes()


def schema_1_file(path: Path, head: int = 4) -> Path:
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA journal_mode = WAL")
    for statement in SCHEMA_1:
        raw.execute(statement)
    raw.execute("INSERT INTO meta VALUES ('schema', 'agentdescent-ledger/1')")
    raw.execute("INSERT INTO artifacts VALUES ('a', 0.2, 0)")
    for version in range(1, head + 1):
        raw.execute("INSERT INTO versions VALUES ('a', ?, ?, '{}', 0)", (version, json.dumps({"n": str(version)})))
    raw.commit()
    raw.close()
    return path


def run_file(path: Path) -> tuple[Path, int]:
    """A ledger an offline 4-round run saved its progress in; returns it and the head version."""
    result = evolve(**RouterDomain(seed=0, noise=0.25).evolve_kwargs(), rounds=4, ledger=path,
                    artifact_id="router", shuffle=False)
    claim(result.committed > 0 and len(result.history) == 4, "the run commits over 4 rounds")
    return path, result.version


def resume(path: Path, **kwargs: Any) -> tuple[Any, list[str]]:
    """Resume the run on ``path``; return its result (or the error) and the rollout calls made."""
    domain = RouterDomain(seed=0, noise=0.25)
    calls: list[str] = []

    def run(rendered: str, task: Any) -> str:
        calls.append(task.id)
        return domain.run(rendered, task)

    try:
        outcome: Any = evolve(**{**domain.evolve_kwargs(), "run": run}, rounds=2, ledger=path,
                              artifact_id="router", shuffle=False, **kwargs)
    except AgentDescentError as exc:
        outcome = exc
    return outcome, calls


def opened(path: Path, **kwargs: Any) -> AgentDescentError | None:
    try:
        SqliteLedger(path, **kwargs).close()
    except AgentDescentError as exc:
        return exc
    return None


# --------------------------------------------------------------------------- the cases

Case = Callable[[Path], tuple[str, "AgentDescentError | None"]]


def refused_unchanged(path: Path, before: bytes) -> tuple[str, AgentDescentError | None]:
    error = opened(path)
    claim(error is not None, "the open is refused")
    claim(path.read_bytes() == before, "the file is left unchanged")
    return "`SqliteLedger(path)` refuses the file on open; the file is unchanged", error


def head_deleted(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    before = sql(path, "DELETE FROM versions WHERE artifact_id = 'a' AND version = 4")
    happens, error = refused_unchanged(path, before)
    with SqliteLedger(path, check_history=False) as led:
        claim([e.version for e in led.history("a")] == [1, 2, 3], "salvage reads the survivors")
        try:
            led.commit("a", {"n": "again"}, 3)
            claim(False, "a commit on the lost head is refused")
        except AgentDescentError:
            pass
    return happens + "; with `check_history=False` the surviving versions read, and no commit rebuilds version 4", error


def head_deleted_then_resumed(folder: Path) -> tuple[str, AgentDescentError | None]:
    path, head = run_file(folder / "run.sqlite")
    sql(path, ("DELETE FROM versions WHERE artifact_id = 'router' AND version = ?", (head,)))
    outcome, calls = resume(path)
    claim(isinstance(outcome, AgentDescentError) and calls == [], "the resumed run is refused before any call")
    return "`evolve(ledger=path)` raises before any call: the lost version number is never reused", outcome


def middle_deleted(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    return refused_unchanged(path, sql(path, "DELETE FROM versions WHERE artifact_id = 'a' AND version = 2"))


def state_edited(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    before = sql(path, "UPDATE versions SET state_json = '{\"n\": \"hand-edited\"}' WHERE version = 2")
    return refused_unchanged(path, before)


def head_state_edited(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    before = sql(path, "UPDATE versions SET state_json = '{\"n\": \"hand-edited\"}' WHERE version = 4")
    happens, error = refused_unchanged(path, before)
    with SqliteLedger(path, check_history=False) as led:
        try:
            led.commit("a", {"n": "5"}, 4)
            claim(False, "a commit on an edited head is refused")
        except AgentDescentError:
            pass
    return happens + "; with `check_history=False` a commit on it is refused too", error


def row_relinked(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    raw = sqlite3.connect(path)
    parent, meta = raw.execute("SELECT parent_digest, meta_json FROM versions WHERE version = 2").fetchone()
    raw.close()
    state = json.dumps({"n": "swapped"})
    before = sql(path, ("UPDATE versions SET state_json = ?, digest = ? WHERE version = 2",
                        (state, version_digest("a", 2, parent, state, meta))))
    return refused_unchanged(path, before)


def row_beyond_head(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    before = sql(path, "INSERT INTO versions (artifact_id, version, state_json, meta_json, created_at)"
                       " VALUES ('a', 5, '{}', '{}', 0)")
    return refused_unchanged(path, before)


def pointer_zeroed(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    return refused_unchanged(path, sql(path, "UPDATE artifacts SET head_version = 0"))


def artifact_row_deleted(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    return refused_unchanged(path, sql(path, "DELETE FROM artifacts"))


def radius_text(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    before = sql(path, "UPDATE artifacts SET blast_radius = 'wide'")
    happens, error = refused_unchanged(path, before)
    with SqliteLedger(path, check_history=False) as led:
        try:
            led.blast_radius("a")
            claim(False, "reading the bad blast radius raises")
        except AgentDescentError:
            pass
    return happens + "; with `check_history=False` reading it raises the same error, not a bare `ValueError`", error


def zero_bytes(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = folder / "l.sqlite"
    path.write_bytes(b"")
    happens, error = refused_unchanged(path, b"")
    return happens + " (never taken for a new ledger)", error


def truncated(keep: int | None) -> Case:
    def case(folder: Path) -> tuple[str, AgentDescentError | None]:
        real = ledger_file(folder / "real.sqlite", head=30)
        data = real.read_bytes()
        path = folder / "cut.sqlite"
        path.write_bytes(data[: keep if keep is not None else len(data) // 2])
        happens, error = refused_unchanged(path, path.read_bytes())
        return happens + " (never taken for a new ledger)", error
    return case


def newer_marker(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    return refused_unchanged(path, sql(path, "UPDATE meta SET value = 'agentdescent-ledger/3' WHERE key = 'schema'"))


def newer_user_version(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = ledger_file(folder / "l.sqlite")
    return refused_unchanged(path, sql(path, "PRAGMA user_version = 7"))


def schema_1(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = schema_1_file(folder / "old.sqlite")
    with SqliteLedger(path) as led:
        claim([e.state["n"] for e in led.history("a")] == ["1", "2", "3", "4"], "every version is kept")
        claim(led.commit("a", {"n": "5"}, 4) == 5, "it commits on")
    sql(path, "DELETE FROM versions WHERE version = 5")
    claim(opened(path) is not None, "its new chain catches a deleted head")
    return ("upgraded to schema 2 on open, in one transaction: every version kept, the chain and the "
            "head pointers computed; from then on it is checked like a new file"), None


def schema_1_gap(folder: Path) -> tuple[str, AgentDescentError | None]:
    path = schema_1_file(folder / "old.sqlite")
    before = sql(path, "DELETE FROM versions WHERE version = 2")
    happens, error = refused_unchanged(path, before)
    return happens + " (checked before the upgrade, so it stays a schema-1 file)", error


def round_deleted(index: int) -> Case:
    def case(folder: Path) -> tuple[str, AgentDescentError | None]:
        path, _ = run_file(folder / "run.sqlite")
        sql(path, ("DELETE FROM run_rounds WHERE idx = ?", (index,)))
        outcome, calls = resume(path)
        claim(isinstance(outcome, AgentDescentError) and calls == [], "the resume is refused before any call")
        again, _ = resume(path, resume=False)
        claim(not isinstance(again, Exception) and [h.index for h in again.history] == [1, 2],
              "resume=False starts over")
        return ("`evolve(ledger=path)` refuses to resume before any call; `resume=False` starts a new "
                "run on the same head"), outcome
    return case


def flip_bit(path: Path, table: str, column: str, where: str, find: bytes, offset: int, bit: int) -> None:
    """Flip one bit of a stored text, byte for byte, behind agentdescent's back (the first ``find``, ``offset`` in)."""
    raw = sqlite3.connect(path)
    try:
        (data,) = raw.execute(f"SELECT CAST({column} AS BLOB) FROM {table} WHERE {where}").fetchone()
        data = bytearray(data)
        data[data.index(find) + offset] ^= 1 << bit
        raw.execute(f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE {where}", (bytes(data),))
        raw.commit()
    finally:
        raw.close()


def progress_bit_flipped(table: str, column: str, where: str, find: bytes, offset: int, bit: int) -> Case:
    def case(folder: Path) -> tuple[str, AgentDescentError | None]:
        path, _ = run_file(folder / "run.sqlite")
        flip_bit(path, table, column, where, find, offset, bit)
        outcome, calls = resume(path)
        claim(isinstance(outcome, AgentDescentError) and calls == [], "the resume is refused before any call")
        again, _ = resume(path, resume=False)
        claim(not isinstance(again, Exception) and [h.index for h in again.history] == [1, 2],
              "resume=False starts over")
        return ("`evolve(ledger=path)` refuses to resume before any call (the saved progress is checked "
                "against its digests); `resume=False` starts a new run on the same head"), outcome
    return case


def state_row_deleted(folder: Path) -> tuple[str, AgentDescentError | None]:
    path, _ = run_file(folder / "run.sqlite")
    sql(path, "DELETE FROM run_state")
    outcome, calls = resume(path)
    claim(isinstance(outcome, AgentDescentError) and calls == [], "the resume is refused before any call")
    again, _ = resume(path, resume=False)
    claim(not isinstance(again, Exception) and [h.index for h in again.history] == [1, 2], "resume=False starts over")
    return ("`evolve(ledger=path)` refuses to resume before any call; `resume=False` starts a new run "
            "on the same head"), outcome


def all_progress_deleted(folder: Path) -> tuple[str, AgentDescentError | None]:
    path, head = run_file(folder / "run.sqlite")
    sql(path, "DELETE FROM run_state", "DELETE FROM run_rounds")
    outcome, _ = resume(path)
    claim(not isinstance(outcome, Exception), "the run goes on")
    claim([h.index for h in outcome.history] == [1, 2] and outcome.version >= head, "its counters start over")
    return ("not detectable: it reads as a ledger no run saved progress in, so the run starts its counters "
            "over on the same head (every version kept)"), None


CASES: list[tuple[str, Case]] = [
    ("the head version's row deleted", head_deleted),
    ("the head version's row deleted, then the run resumed", head_deleted_then_resumed),
    ("a version below the head deleted", middle_deleted),
    ("a state edited by hand", state_edited),
    ("the head's state edited by hand", head_state_edited),
    ("a state edited and its row's digest recomputed", row_relinked),
    ("a row inserted beyond the head", row_beyond_head),
    ("the head pointer zeroed", pointer_zeroed),
    ("the artifact's row deleted", artifact_row_deleted),
    ("the blast radius replaced by text", radius_text),
    ("the file emptied (0 bytes)", zero_bytes),
    ("the file cut to its first 100 bytes", truncated(100)),
    ("the file cut to its first page (4096 bytes)", truncated(4096)),
    ("the file cut in half", truncated(None)),
    ("a newer schema marker (`agentdescent-ledger/3`)", newer_marker),
    ("a newer `PRAGMA user_version` (7)", newer_user_version),
    ("a sound schema-1 file (before the chain)", schema_1),
    ("a schema-1 file with a version deleted", schema_1_gap),
    ("a saved round's row deleted (`run_rounds`, round 2 of 4)", round_deleted(2)),
    ("the last saved round's row deleted (round 4 of 4)", round_deleted(4)),
    ("the run's saved state deleted (`run_state`)", state_row_deleted),
    ("one bit flipped in the run's saved state (a saved rule `account` became `accouft`)",
     progress_bit_flipped("run_state", "state_json", "run_id = 'router'", b"account", 5, 3)),
    ("one bit flipped in a saved round (`run_rounds`, round 2 of 4)",
     progress_bit_flipped("run_rounds", "round_json", "run_id = 'router' AND idx = 2", b"{", 0, 1)),
    ("the run's state and every saved round deleted", all_progress_deleted),
]


def excerpt(error: AgentDescentError | None, folder: Path) -> str:
    """The part of the message that says what is wrong: the first problem listed, or the first sentence."""
    if error is None:
        return ""
    text = str(error).replace(str(folder) + "/", "")
    if "\n  - " in text:
        return text.split("\n  - ", 2)[1].split("\n", 1)[0]
    return text.split(". ", 1)[0]


def probe() -> list[dict[str, str]]:
    """Run every case; one row each (damage, what happens, error class, message excerpt)."""
    rows = []
    for damage, case in CASES:
        with tempfile.TemporaryDirectory(prefix="agentdescent-damage-") as folder:
            happens, error = case(Path(folder))
            rows.append({"damage": damage, "what happens": happens,
                         "error": type(error).__name__ if error is not None else "-",
                         "message": excerpt(error, Path(folder))})
    return rows


def table(rows: list[dict[str, str]]) -> str:
    """The rows as the markdown table docs/failures.md shows."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| damage | what happens | error | the message says |", "|---|---|---|---|"]
    for r in rows:
        message = f"{cell(r['message'])}" if r["message"] else "-"
        error = f"`{r['error']}`" if r["error"] != "-" else "-"
        lines.append(f"| {cell(r['damage'])} | {cell(r['what happens'])} | {error} | {message} |")
    return "\n".join(lines)


def cost(versions: int, state_bytes: int = 2000) -> dict[str, float]:
    """Seconds to open (check) a ledger of ``versions`` versions, and to upgrade its schema-1 twin."""
    with tempfile.TemporaryDirectory(prefix="agentdescent-cost-") as folder:
        path = schema_1_file(Path(folder) / "big.sqlite", head=1)
        raw = sqlite3.connect(path)
        raw.executemany("INSERT INTO versions VALUES ('a', ?, ?, '{}', 0)",
                        ((v, json.dumps({"n": str(v), "rules": "x" * state_bytes})) for v in range(2, versions + 1)))
        raw.commit()
        raw.close()
        started = time.perf_counter()
        SqliteLedger(path).close()  # the schema-1 check, then the upgrade
        upgrade = time.perf_counter() - started
        started = time.perf_counter()
        SqliteLedger(path).close()  # the full check of a schema-2 file
        check = time.perf_counter() - started
        with SqliteLedger(path) as led:
            started = time.perf_counter()
            for base in range(versions, versions + 100):
                led.commit("a", {"n": str(base + 1), "rules": "x" * state_bytes}, base)
            commit = (time.perf_counter() - started) / 100
        return {"versions": versions, "state_bytes": state_bytes, "open_seconds": round(check, 3),
                "upgrade_seconds": round(upgrade, 3), "commit_ms": round(commit * 1000, 3),
                "file_mb": round(path.stat().st_size / 1e6, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    parser.add_argument("--cost", type=int, metavar="N",
                        help="instead: time the open-time check, the schema-1 upgrade and a commit at N versions")
    args = parser.parse_args(argv)
    if args.cost:
        print(json.dumps(cost(args.cost), indent=2))
        return 0
    rows = probe()
    print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
