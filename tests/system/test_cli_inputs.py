"""What a run is made from, checked as strictly on every open as at ``init``: through the console script, real files.

A value a hand edited into ``spec.json`` is refused by every command that opens the run
directory, in one line naming the file, the key, the value and the fix (exit 2), with
the check the flag that set it has; ``init`` refuses every value ``run`` would; a tasks
file changed since ``init`` (a line lost, an id or an answer changed) is refused by
``resume`` naming the change, unless ``--accept-changed-tasks``, which records it; a run
directory made before checksums were kept records them on its first ``resume``; task
lines are read strictly; argparse's errors are one line. One run against a loopback
model server is made once and copied for each case.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentdescent.testing.llmserver import LLMServer

from .test_cli import cli, init, responder, write_rows, write_tasks

pytest.importorskip("openai")

DELETE = object()
FIX = "set it right in spec.json"


def _one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The command exited 2 with one line on stderr, no traceback, holding each of ``words``."""
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
    return err


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LLMServer, Path]]:
    """A run directory that ran one round (of the one round it was given), and the server it ran against."""
    tmp = tmp_path_factory.mktemp("ran")
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp, server)
        proc = cli("run", str(run_dir), "--rounds", "1", "--workers", "2")
        assert proc.returncode == 0, proc.stderr
        yield server, run_dir


def _copy(ran_dir: Path, tmp_path: Path, *, fresh: bool = False) -> Path:
    """A copy of the ran directory (``fresh``: only its spec and tasks, as ``init`` left them)."""
    run_dir = tmp_path / "copy"
    if fresh:
        run_dir.mkdir()
        for name in ("spec.json", "tasks.jsonl"):
            shutil.copy(ran_dir / name, run_dir / name)
    else:
        shutil.copytree(ran_dir, run_dir)
    return run_dir


def _edit_spec(run_dir: Path, **changes: Any) -> None:
    spec = json.loads((run_dir / "spec.json").read_text())
    for key, value in changes.items():
        if value is DELETE:
            del spec[key]
        else:
            spec[key] = value
    (run_dir / "spec.json").write_text(json.dumps(spec, indent=2))


def _edit_tasks(run_dir: Path, edit: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    path = run_dir / "tasks.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    write_rows(path, edit(rows))


# --------------------------------------------------------------------------- a hand-edited spec.json


@pytest.mark.parametrize("command, changes, words", [
    ("resume", {"run_rounds": "ten"}, ['"run_rounds": "ten"', "use an integer >= 1", FIX, "run --rounds"]),
    ("run", {"seed": "x"}, ['"seed": "x"', "use an integer", FIX, "init --seed"]),
    ("status", {"model": DELETE}, ['no "model"', "add it", "init --model"]),
    ("run", {"provider": "cohere"}, ['"provider": "cohere"', "not a known provider", "openai, anthropic", FIX]),
], ids=["rounds-ten", "seed-x", "no-model", "cohere"])
def test_a_hand_edited_spec_is_refused_in_one_line_naming_the_file_the_key_the_value_and_the_fix(
        ran, tmp_path, command, changes, words):
    server, ran_dir = ran
    run_dir = _copy(ran_dir, tmp_path, fresh=command == "run")
    _edit_spec(run_dir, **changes)
    calls = len(server.requests)
    _one_line_error(cli(command, str(run_dir)), f"{run_dir / 'spec.json'}: ", *words)
    assert len(server.requests) == calls  # refused before any call


# --------------------------------------------------------------------------- a tasks file changed since init


@pytest.mark.parametrize("edit, words", [
    (lambda rows: rows[:3] + rows[4:], ["1 task lost (first 'q03', line 4 at init)"]),
    (lambda rows: [{**r, "id": "x02"} if r["id"] == "q02" else r for r in rows], ["1 id changed (first 'q02', now 'x02')"]),
    (lambda rows: [{**r, "answer": "11"} if r["id"] == "q05" else r for r in rows], ["1 answer changed (task 'q05')"]),
], ids=["line-lost", "id-changed", "answer-changed"])
def test_resume_refuses_a_tasks_file_changed_since_init_naming_what_changed(ran, tmp_path, edit, words):
    server, ran_dir = ran
    run_dir = _copy(ran_dir, tmp_path)
    _edit_tasks(run_dir, edit)
    before = (run_dir / "spec.json").read_bytes()
    calls = len(server.requests)
    _one_line_error(cli("resume", str(run_dir), "--rounds", "1"), f"{run_dir / 'tasks.jsonl'}: changed since init: ",
                    *words, "pass --accept-changed-tasks")
    assert len(server.requests) == calls
    assert (run_dir / "spec.json").read_bytes() == before  # nothing recorded


def test_accept_changed_tasks_goes_on_with_the_new_file_and_records_the_change_with_both_checksums(ran, tmp_path):
    _, ran_dir = ran
    run_dir = _copy(ran_dir, tmp_path)
    old = json.loads((run_dir / "spec.json").read_text())["inputs"]["tasks.jsonl"]["sha256"]
    _edit_tasks(run_dir, lambda rows: [{**r, "answer": "11"} if r["id"] == "q05" else r for r in rows])
    proc = cli("resume", str(run_dir), "--rounds", "1", "--accept-changed-tasks")
    assert proc.returncode == 0, proc.stderr
    assert "changed since init: 1 answer changed (task 'q05'); going on with it as it is" in proc.stderr
    spec = json.loads((run_dir / "spec.json").read_text())
    (change,) = spec["input_changes"]
    new = spec["inputs"]["tasks.jsonl"]["sha256"]
    assert change["input"] == "tasks.jsonl" and change["old_sha256"] == old and change["new_sha256"] == new != old
    assert change["change"] == "1 answer changed (task 'q05')" and "--accept-changed-tasks" in change["command"]
    assert [json.loads(line)["round"] for line in (run_dir / "rounds.jsonl").read_text().splitlines()] == [1, 2]


def test_a_run_directory_made_before_checksums_records_them_on_its_first_resume(ran, tmp_path):
    _, ran_dir = ran
    run_dir = _copy(ran_dir, tmp_path)
    _edit_spec(run_dir, inputs=DELETE)
    first = cli("resume", str(run_dir))
    assert first.returncode == 0 and "nothing left to run" in first.stdout, first.stderr
    assert "held no checksums of the run's inputs" in first.stderr and "recorded them" in first.stderr
    recorded = json.loads((run_dir / "spec.json").read_text())["inputs"]
    assert recorded == json.loads((ran_dir / "spec.json").read_text())["inputs"]  # what init would have recorded
    _edit_tasks(run_dir, lambda rows: rows[1:])
    _one_line_error(cli("resume", str(run_dir)), "1 task lost (first 'q00', line 1 at init)")


# --------------------------------------------------------------------------- init checks what run checks


@pytest.mark.parametrize("extra, words", [
    (["--held-out-frac", "1.5"], ["--held-out-frac 1.5: use a number in (0, 1)"]),
    (["--held-out-frac", "0"], ["--held-out-frac 0.0: use a number in (0, 1)"]),
    (["--held-out-frac", "nan"], ["--held-out-frac NaN: use a number in (0, 1)"]),
    (["--temperature", "-1"], ["--temperature -1.0: use a number >= 0"]),
    (["--temperature", "nan"], ["--temperature NaN: use a number >= 0"]),
    (["--model", ""], ['--model "": use a non-empty str']),
    (["--base-url", "http://127.0.0.1:8090/v1#token=abc123"], ["--base-url: the URL has a #fragment (not shown)"]),
], ids=["frac-1.5", "frac-0", "frac-nan", "temperature-negative", "temperature-nan", "model-empty", "url-fragment"])
def test_init_refuses_every_value_run_refuses_naming_the_flag_and_writes_nothing(tmp_path, extra, words):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    proc = cli("init", str(tmp_path / "run"), "--tasks", str(tasks), "--model", "m", *extra)
    err = _one_line_error(proc, *words)
    assert "abc123" not in err
    assert not (tmp_path / "run").exists()


def _deep(levels: int) -> str:
    return '{"prompt": "What is 1 + 1?", "deep": ' + "[" * levels + "]" * levels + "}"


@pytest.mark.parametrize("line, words", [
    ('{"prompt": "What is 1 + 1?", "id": null}', ['"id" is null', "a non-empty string or an integer"]),
    ('{"prompt": "What is 1 + 1?", "answer": {"value": 2}}', ['"answer" is an object', "an answer is a string"]),
    ('{"prompt": "What is 1 + 1?", "answer": NaN}', ["NaN is not a JSON number"]),
    ('{"prompt": "What is 1 + 1?", "answer": Infinity}', ["Infinity is not a JSON number"]),
    (_deep(100_000), ["nested more than 64 levels deep"]),
], ids=["id-null", "answer-object", "answer-nan", "answer-infinity", "deep-nesting"])
def test_task_lines_are_read_strictly_naming_the_line(tmp_path, line, words):
    tasks = write_tasks(tmp_path / "tasks.jsonl", 4)
    tasks.write_text(tasks.read_text() + line + "\n")
    _one_line_error(cli("init", str(tmp_path / "run"), "--tasks", str(tasks), "--model", "m"),
                    f"{tasks}, line 5: ", *words)
    assert not (tmp_path / "run").exists()


def test_an_existing_file_as_run_dir_is_a_one_line_usage_error(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    taken = tmp_path / "notes.txt"
    taken.write_text("mine\n")
    _one_line_error(cli("init", str(taken), "--tasks", str(tasks), "--model", "m"),
                    f"RUN_DIR {taken}: exists and is not a folder")
    assert taken.read_text() == "mine\n"


# --------------------------------------------------------------------------- argparse's errors


@pytest.mark.parametrize("args, line", [
    (["run", "somewhere", "--rounds", "x"],
     "agentdescent run: error: argument --rounds: 'x' is not a whole number (see agentdescent run --help)"),
    (["init", "somewhere", "--seed", "x", "--model", "m"],
     "agentdescent init: error: argument --seed: invalid int value: 'x' (see agentdescent init --help)"),
    (["resume", "somewhere", "--bogus"],
     "agentdescent resume: error: unrecognized arguments: --bogus (see agentdescent resume --help)"),
], ids=["run-rounds", "init-seed", "unknown-flag"])
def test_argparse_errors_are_one_line_with_where_the_usage_is(args, line):
    proc = cli(*args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == line + "\n"
