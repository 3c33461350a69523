"""Evolving code from the command line: ``init --tree``, ``run``, ``export``, ``eval``, ``plan`` on a real project.

The project is a copy of examples/code_project (``textstats.py`` with five bugs, twenty
tests) in the test's own folder; the console script runs in subprocesses and a loopback
OpenAI-compatible server plays the code model: every proposal it is asked for gets one
reply holding the five right search/replace edits of ``textstats.py``, and any other call
is answered with a 500 (a tree run's tests are run by the suite, never by the model).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agentdescent import SqliteLedger
from agentdescent.cli.main import ARTIFACT_ID
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

from .test_cli import ROOT, cli, snapshot

pytest.importorskip("openai")

PROJECT = ROOT / "examples" / "code_project"
CLAMP_FIX = "    return max(low, min(x, high))\n"


def _edit(search: str, replace: str) -> str:
    return f"textstats.py\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


#: The right fix of each of textstats.py's five bugs, as a code model would write them.
FIXES = "\n".join([
    _edit('    return len(text.split(" "))\n', "    return len(text.split())\n"),
    _edit("    return ordered[middle]\n", "    if len(ordered) % 2 == 0:\n"
          "        return (ordered[middle - 1] + ordered[middle]) / 2\n    return ordered[middle]\n"),
    _edit("    return max(low, min(x, low))\n", CLAMP_FIX),
    _edit('    return title.lower().replace(" ", "_")\n',
          '    words = ("".join(c for c in w if c.isalnum()) for w in title.lower().split())\n'
          '    return "-".join(w for w in words if w)\n'),
    _edit("    letters = [c for c in text if c.isalnum()]\n", "    letters = [c.lower() for c in text if c.isalnum()]\n"),
])


def code_model(path: str, body: Any) -> Reply:
    """Edits for a proposal (the edit template's request); a 500 for anything else."""
    if "You are fixing the code of a project" in body["messages"][-1]["content"]:
        return Reply(200, openai_body(FIXES, prompt_tokens=400, completion_tokens=120))
    return Reply(500, {"error": {"message": "a tree run must not ask the model to solve a task"}})


def _project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    shutil.copytree(PROJECT, folder, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return folder


def _init(run_dir: Path, project: Path, server: LLMServer | None, *extra: str) -> subprocess.CompletedProcess:
    url = server.openai_base_url if server is not None else "http://127.0.0.1:9/v1"
    return cli("init", str(run_dir), "--tree", str(project), "--model", "code-model", "--base-url", url,
               "--api-key-env", "CLI_TEST_KEY", "--suite-timeout", "30", "--pytest-plugins", "", *extra)


def _one_line_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    err = "\n".join(line for line in proc.stderr.strip().splitlines() if not line.startswith("evolve:")).strip()
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
    return err


def _head(run_dir: Path) -> dict[str, str]:
    with SqliteLedger(run_dir / "ledger.sqlite") as ledger:
        return ledger.head(ARTIFACT_ID)[1]


def test_init_run_export_eval_on_a_copy_of_the_project(tmp_path):
    project = _project(tmp_path)
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "junk.pyc").write_bytes(b"\0")
    before = snapshot(project)
    run_dir = tmp_path / "run"
    with LLMServer(responder=code_model) as server:
        init = _init(run_dir, project, server)
        assert init.returncode == 0, init.stderr
        assert "20 tests" in init.stdout and "1 file(s)" in init.stdout and "sandbox:" in init.stdout
        assert len(init.stdout.strip().splitlines()) == 1
        spec = json.loads((run_dir / "spec.json").read_text())
        assert (spec["strategy"], spec["reward"], spec["proposal"], spec["stratify"]) == ("tree", "tests", "edit", "group")
        assert spec["tree"]["test_cmd"] is None and spec["tree"]["timeout"] == 30.0
        assert spec["tree"]["include"] == ["*.py"] and "tests/**" in spec["tree"]["exclude"]
        tasks = [json.loads(line) for line in (run_dir / "tasks.jsonl").read_text().splitlines()]
        assert len(tasks) == 20 and all({"id", "prompt", "test", "file", "group"} <= set(t) for t in tasks)
        assert tasks[0]["id"].startswith("tests/test_textstats.py::TestWordCount::")
        copied = snapshot(run_dir / "tree")
        assert copied == {k: v for k, v in before.items() if "__pycache__" not in k}  # a copy, caches left out

        plan = cli("plan", str(run_dir), "--rounds", "2", "--workers", "2")
        assert plan.returncode == 0, plan.stderr
        assert "proposals" in plan.stdout and "no tokens" in plan.stdout

        run = cli("run", str(run_dir), "--rounds", "2", "--workers", "2")
        assert run.returncode == 0, run.stderr
        assert "commit(s)" in run.stdout and "suite runs:" in run.stdout
        assert not [r for r in server.requests if "fixing the code" not in r.body["messages"][-1]["content"]]

    head = _head(run_dir)
    assert CLAMP_FIX in head["textstats.py"] and set(head) == {"textstats.py"}
    result = json.loads((run_dir / "result.json").read_text())
    assert result["version"] >= 2 and result["final_reward"] > result["initial_reward"]
    assert "state: finished" in cli("status", str(run_dir)).stdout
    assert snapshot(project) == before  # the user's folder was never written
    assert snapshot(run_dir / "tree") == copied  # nor the run's copy: every suite run works on its own

    show = cli("show", str(run_dir))
    assert show.returncode == 0 and "## textstats.py" in show.stdout and CLAMP_FIX in show.stdout
    ev = cli("eval", str(run_dir))
    assert ev.returncode == 0, ev.stderr
    assert "20 of 20 tests pass" in ev.stdout and "(held out)" in ev.stdout
    first = cli("eval", str(run_dir), "--version", "1")
    assert "5 of 20 tests pass" in first.stdout and "failed" in first.stdout
    assert cli("resume", str(run_dir)).returncode == 0  # nothing left to run: says so
    _one_line_error(cli("eval", str(run_dir), "--tasks", "t.jsonl"), 2, "--tasks", "tree run")
    _one_line_error(cli("plan", str(run_dir), "--probe"), 2, "--probe", "tree run")

    out = tmp_path / "evolved"
    exported = cli("export", str(run_dir), "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    assert [p.name for p in out.iterdir()] == ["textstats.py"] and CLAMP_FIX in (out / "textstats.py").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".evolved.tmp")]  # no staging folder left

    inside = cli("export", str(run_dir), "-o", str(run_dir / "out"))
    _one_line_error(inside, 2, "inside the run directory")
    onto = cli("export", str(run_dir), "-o", str(project))
    _one_line_error(onto, 2, "--force")
    assert snapshot(project) == before
    forced = cli("export", str(run_dir), "-o", str(project), "--force", "--version", "1")
    assert forced.returncode == 0 and snapshot(project) == before  # v1 is the project as it was
    forced = cli("export", str(run_dir), "-o", str(project), "--force")
    assert forced.returncode == 0, forced.stderr
    after = snapshot(project)
    assert CLAMP_FIX in after["textstats.py"].decode() and after["tests/test_textstats.py"] == before[
        "tests/test_textstats.py"]  # the evolved file replaced, the others kept
    assert cli("report", str(run_dir)).returncode == 0


@pytest.mark.parametrize("extra, words", [
    (["--tasks", "tasks.jsonl"], ["--tasks", "tests are the tasks and the reward"]),
    (["--reward", "exact", "--strategy", "single"], ["--reward, --strategy", "tests are the tasks"]),
    (["--initial", "x.md"], ["--initial", "tests are the tasks"]),
    (["--proposal", "rule"], ["--proposal", "tests are the tasks"]),
    (["--test-tasks", "t.jsonl"], ["--test-tasks", "tests are the tasks"]),
    (["--test-cmd", "make test"], ["--pytest-plugins", "not with --test-cmd"]),
])
def test_init_tree_refuses_the_task_reward_and_strategy_flags(tmp_path, extra, words):
    proc = _init(tmp_path / "run", _project(tmp_path), None, *extra)
    _one_line_error(proc, 2, *words)
    assert not (tmp_path / "run").exists()


def test_init_tree_refuses_bad_folders_in_one_line(tmp_path):
    project = _project(tmp_path)
    _one_line_error(_init(project / "runs" / "r", project, None), 2, "inside it")  # RUN inside DIR
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copytree(PROJECT, run_dir / "proj", ignore=shutil.ignore_patterns("__pycache__"))
    _one_line_error(_init(run_dir, run_dir / "proj", None), 2, "inside the run directory")  # DIR inside RUN
    _one_line_error(_init(tmp_path / "r2", project / "textstats.py", None), 2, "not a folder")
    _one_line_error(_init(tmp_path / "r3", tmp_path / "nowhere", None), 2, "not a folder")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "lib.py").write_text("X = 1\n")
    _one_line_error(_init(tmp_path / "r4", bare, None), 2, "no test found")
    _one_line_error(_init(tmp_path / "r5", project, None, "--include", "*.rs"), 2, "no file of the folder matches")
    no_tree = cli("init", str(tmp_path / "r6"), "--tasks", "t.jsonl", "--model", "m", "--test-cmd", "make test")
    _one_line_error(no_tree, 2, "--test-cmd needs --tree")
    neither = cli("init", str(tmp_path / "r7"), "--model", "m")
    _one_line_error(neither, 2, "--tasks", "--tree")
    users = tmp_path / "r8"
    (users / "tree").mkdir(parents=True)
    _one_line_error(_init(users, project, None), 2, "not a tree run's directory")  # a folder of the user's kept
    assert not any((tmp_path / f"r{i}").exists() for i in range(2, 8)) and (users / "tree").is_dir()
    assert not (project / "runs").exists() and sorted(p.name for p in run_dir.iterdir()) == ["proj"]
