"""The command line on a ledger in PostgreSQL (``init --ledger DSN``), driven as a user would.

A throwaway server (the session's ``postgres_server``: trusted over its Unix socket, a
password over TCP) holds the ledger; a loopback OpenAI-compatible server plays the model
(agentdescent/testing/llmserver.py, the stand-in of tests/system/test_cli.py). Each command runs through
the console script's ``main`` in this process, with its own stdout, stderr and exit code,
so a run of several commands stays quick; the password is given as a user gives it, in
``PGPASSWORD``, and must appear in no file of the run directory and in nothing printed.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest

from agentdescent.cli.main import ARTIFACT_ID, main
from agentdescent.engine.progress import read_progress
from agentdescent.ledger import PostgresLedger
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

from .test_cli import KEY, RULE, _is_proposal, _solution, responder, write_rows, write_tasks

pytest.importorskip("psycopg")

SUM_RULE = "Answer each sum with the bare number only."
PARITY_RULE = "Answer each parity question with one bare word only."


class Console:
    """The command line in this process: each call's exit code, stdout and stderr, and all it ever printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.printed: list[str] = []

    def __call__(self, *args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out = self.capsys.readouterr()
        self.printed += [out.out, out.err]
        return code, out.out, out.err


@pytest.fixture
def console(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Console:
    monkeypatch.setenv("CLI_TEST_KEY", KEY)
    return Console(capsys)


@pytest.fixture
def database(postgres_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A fresh database: its TCP DSN (no password in it: ``PGPASSWORD`` is set) and its trusted socket DSN."""
    name = f"cli_{secrets.token_hex(5)}"
    socket = postgres_server.create_database(name)
    monkeypatch.setenv("PGPASSWORD", postgres_server.password)
    return {"tcp": postgres_server.dsn(name, tcp=True), "socket": socket, "password": postgres_server.password}


def _init(console: Console, run_dir: Path, server: LLMServer, tasks: Path, *extra: str) -> tuple[int, str, str]:
    return console("init", str(run_dir), "--tasks", str(tasks), "--model", "test-model", "--base-url",
                   server.openai_base_url, "--api-key-env", "CLI_TEST_KEY", "--reward", "exact", *extra)


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]


def test_a_run_on_a_database_ledger_works_end_to_end_and_never_keeps_or_prints_the_password(tmp_path, console,
                                                                                          database):
    dsn, password = database["tcp"], database["password"]
    run_dir = tmp_path / "run"
    with LLMServer(responder=responder()) as server:
        code, out, err = _init(console, run_dir, server, write_tasks(tmp_path / "tasks.jsonl"), "--ledger", dsn)
        assert code == 0, err
        assert f"ledger database '{dsn}' (schema 'agentdescent')" in out and "PGPASSWORD" in out
        spec = json.loads((run_dir / "spec.json").read_text())
        assert spec["ledger"] == {"dsn": dsn, "schema": "agentdescent", "run_id": None}

        code, out, err = console("run", str(run_dir), "--rounds", "2", "--workers", "2")
        assert code == 0, err
        assert "finished" in out
        assert not (run_dir / "ledger.sqlite").exists()  # the ledger is in the database

        code, out, err = console("status", str(run_dir))
        assert code == 0 and "state: finished" in out and f"ledger: the ledger database '{dsn}'" in out, out + err
        code, out, err = console("show", str(run_dir))
        assert code == 0 and RULE in out, err
        code, out, err = console("show", str(run_dir), "--diff", "1", "2")
        assert code == 0 and "+- " + RULE in out, err
        code, out, err = console("export", str(run_dir), "-o", str(tmp_path / "skill.md"))
        assert code == 0 and RULE in (tmp_path / "skill.md").read_text(), err
        code, out, err = console("eval", str(run_dir), "--tasks", str(write_tasks(tmp_path / "more.jsonl", 3,
                                                                                   start=40, prefix="m")))
        assert code == 0 and "v2 of 2" in out and "mean 1.000" in out, out + err
        code, out, err = console("report", str(run_dir))
        assert code == 0, err
        page = (run_dir / "report.html").read_text()
        assert RULE in page and f"PostgreSQL <code>{dsn}</code>, schema <code>agentdescent</code>" in page

        code, out, err = console("resume", str(run_dir), "--rounds", "1")
        assert code == 0, err
        assert [r["round"] for r in _rows(run_dir)] == [1, 2, 3]

        code, out, err = console("run", str(run_dir))
        assert code == 2 and "has already run" in err and "resume" in err
        before = (run_dir / "rounds.jsonl").read_bytes()
        code, out, err = console("run", str(run_dir), "--restart")
        assert code == 2 and "DROP SCHEMA agentdescent CASCADE" in err and "--ledger-schema" in err, err
    assert (run_dir / "rounds.jsonl").read_bytes() == before  # nothing deleted, here or in the database
    with PostgresLedger(database["socket"], read_only=True) as ledger:
        history = ledger.history(ARTIFACT_ID)
        saved = read_progress(ledger, ARTIFACT_ID)
    assert len(history) == 2 and RULE in json.dumps(history[-1].state)
    assert saved is not None and len(saved.rounds) == 3

    files = {f: f.read_bytes() for f in run_dir.rglob("*") if f.is_file()}
    assert {"spec.json", "status.json", "result.json", "rounds.jsonl", "report.html"} <= {f.name for f in files}
    for f, data in files.items():
        assert password.encode() not in data and KEY.encode() not in data, f
    assert not any(password in text for text in console.printed)


def test_without_the_password_the_commands_say_where_it_goes(tmp_path, console, database, monkeypatch,
                                                             postgres_server):
    run_dir = tmp_path / "run"
    with LLMServer(responder=responder()) as server:
        assert _init(console, run_dir, server, write_tasks(tmp_path / "tasks.jsonl"), "--ledger",
                     database["tcp"])[0] == 0
        assert console("run", str(run_dir), "--rounds", "1", "--workers", "2")[0] == 0
    monkeypatch.setenv("PGPASSWORD", "not-the-password")
    code, out, err = console("show", str(run_dir))
    assert code == 2 and "refused the login" in err and "PGPASSWORD" in err, err
    code, out, err = console("status", str(run_dir))  # status still reads the run directory
    assert code == 0 and "state: finished, but the ledger database" in out and "is unreadable" in out, out
    assert "refused the login" in out
    spec_file = run_dir / "spec.json"
    spec = json.loads(spec_file.read_text())
    spec["ledger"]["dsn"] = postgres_server.dsn(spec["ledger"]["dsn"].rsplit("/", 1)[1], tcp=True, with_password=True)
    spec_file.write_text(json.dumps(spec))  # a password pasted into spec.json by hand
    code, out, err = console("status", str(run_dir))
    assert code == 2 and '"ledger": its DSN holds a password (not shown)' in err and "PGPASSWORD" in err, err
    assert not any("not-the-password" in text or database["password"] in text for text in console.printed)


def test_init_refuses_a_bad_ledger_flag_in_one_line_without_echoing_a_password(tmp_path, console, database,
                                                                               postgres_server):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    inline = postgres_server.dsn(database["tcp"].rsplit("/", 1)[1], tcp=True, with_password=True)
    password = database["password"]
    run_dir = tmp_path / "run"
    with LLMServer(responder=responder()) as server:
        cases = [
            (["--ledger", inline], ["holds a password (not shown)", "PGPASSWORD", "PGPASSFILE", database["tcp"]]),
            (["--ledger", f"{database['tcp']}?password={password}"], ["holds a password", "PGPASSWORD"]),
            (["--ledger", "runs/ledger.db"], ["--ledger 'runs/ledger.db'", "postgresql://"]),
            (["--ledger-schema", "mine"], ["--ledger-schema needs --ledger DSN"]),
            (["--run-id", "host-a"], ["--run-id needs --ledger DSN"]),
            (["--ledger", database["tcp"], "--ledger-schema", "Not-A-Name"], ["--ledger-schema 'Not-A-Name'",
                                                                             "lower-case identifier"]),
        ]
        for extra, words in cases:
            code, out, err = _init(console, run_dir, server, tasks, *extra)
            assert code == 2 and len(err.strip().splitlines()) == 1, (extra, err)
            for word in words:
                assert word in err, (extra, word, err)
            assert not run_dir.exists(), extra  # nothing written
        with pytest.MonkeyPatch.context() as env:
            env.setenv("PGPASSWORD", "a-wrong-password")
            code, out, err = _init(console, run_dir, server, tasks, "--ledger", database["tcp"])
        assert code == 2 and "refused the login" in err and not run_dir.exists(), err
    assert not any(password in text or "a-wrong-password" in text for text in console.printed)


def _two_rules(path: str, body: Any) -> Reply:
    """A model needing one rule for sums and another for parity questions, and proposing the one a task needs."""
    messages = body["messages"]
    user = messages[-1]["content"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    rule = PARITY_RULE if "even or odd?" in user else SUM_RULE
    if _is_proposal(body):
        return Reply(200, openai_body(rule))
    answer = _solution(user)
    return Reply(200, openai_body(answer if rule in system else f"I think the answer is {answer}."))


def test_two_run_directories_with_their_own_run_ids_evolve_one_artifact_in_one_schema(tmp_path, console, database):
    sums = write_tasks(tmp_path / "sums.jsonl")
    parity = write_rows(tmp_path / "parity.jsonl", [
        {"id": f"p{n:02d}", "prompt": f"Is {n} even or odd?", "answer": "odd" if n % 2 else "even"}
        for n in range(16)])
    hosts = {"host-a": (tmp_path / "a", sums), "host-b": (tmp_path / "b", parity)}
    with LLMServer(responder=_two_rules) as server:
        for run_id, (run_dir, tasks) in hosts.items():
            code, out, err = _init(console, run_dir, server, tasks, "--ledger", database["tcp"], "--ledger-schema",
                                   "shared", "--run-id", run_id)
            assert code == 0, err
            assert json.loads((run_dir / "spec.json").read_text())["ledger"]["run_id"] == run_id
        for run_id, (run_dir, _) in hosts.items():  # one after the other: b starts on the head a made
            code, out, err = console("run", str(run_dir), "--rounds", "2", "--workers", "2")
            assert code == 0, err
            code, out, err = console("status", str(run_dir))
            assert "state: finished" in out and f"run id '{run_id}'" in out, out
    with PostgresLedger(database["socket"], schema="shared", read_only=True) as ledger:
        history = ledger.history(ARTIFACT_ID)
        progress = {run_id: read_progress(ledger, ARTIFACT_ID, driver=run_id) for run_id in hosts}
    drivers = {entry.meta.get("driver") for entry in history}
    assert {"host-a", "host-b"} <= drivers, [entry.meta for entry in history]
    head = json.dumps(history[-1].state)
    assert SUM_RULE in head and PARITY_RULE in head
    for run_id, (run_dir, _) in hosts.items():
        saved = progress[run_id]
        assert saved is not None and len(saved.rounds) == 2 == len(_rows(run_dir)), run_id
        assert saved.commits == sum(1 for e in history if e.meta.get("driver") == run_id)
    code, out, err = console("show", str(hosts["host-b"][0]))
    assert code == 0 and SUM_RULE in out and PARITY_RULE in out
    code, out, err = console("run", str(hosts["host-a"][0]), "--restart")
    assert code == 2 and "a new --run-id" in err and "DROP SCHEMA shared CASCADE" in err, err
