"""The command line, driven as a user would: the real console script in subprocesses.

A loopback OpenAI-compatible server (tests/llm_server.py) plays the model: it answers in a
sentence until the playbook tells it to give the bare answer, and proposes exactly that
rule. The run directory's files are real; a ``kill -9`` mid-run is real.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentdescent import SqliteLedger
from agentdescent.cli import ARTIFACT_ID
from agentdescent.progress import read_progress

from ..llm_server import LLMServer, Reply, openai_body

pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-cli-test-key-0123456789"
RULE = "Answer with the bare number only, no sentence."


def _script() -> list[str]:
    found = shutil.which("agentdescent", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "agentdescent"]


def cli(*args: str, env_extra: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "CLI_TEST_KEY": KEY, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run([*_script(), *args], capture_output=True, text=True, timeout=timeout, env=env)


def responder(delay: float = 0.0):
    def respond(path: str, body: Any) -> Reply:
        messages = body["messages"]
        user = messages[-1]["content"]
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        if "ONE general rule" in user:
            return Reply(200, openai_body(RULE), delay=delay)
        n = re.search(r"What is (\d+) \+ \1", user)
        answer = str(2 * int(n.group(1))) if n else "?"
        text = answer if "bare number" in system else f"I think the answer is {answer}."
        return Reply(200, openai_body(text), delay=delay)

    return respond


def write_tasks(path: Path, n: int = 16) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i:02d}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)})
                            + "\n" for i in range(n)), encoding="utf-8")
    return path


def init(tmp_path: Path, server: LLMServer, *extra: str) -> Path:
    run_dir = tmp_path / "run"
    proc = cli("init", str(run_dir), "--tasks", str(write_tasks(tmp_path / "tasks.jsonl")), "--model", "test-model",
               "--base-url", server.openai_base_url, "--api-key-env", "CLI_TEST_KEY", "--reward", "exact", *extra)
    assert proc.returncode == 0, proc.stderr
    return run_dir


def test_init_plan_run_status_show_export_report(tmp_path):
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server)
        spec = json.loads((run_dir / "spec.json").read_text())
        assert spec["api_key_env"] == "CLI_TEST_KEY"

        plan = cli("plan", str(run_dir), "--rounds", "3", "--workers", "2")
        assert plan.returncode == 0 and "calls" in plan.stdout and "tokens" in plan.stdout

        run = cli("run", str(run_dir), "--rounds", "3", "--workers", "2")
        assert run.returncode == 0, run.stderr
        assert "finished" in run.stdout

    status = cli("status", str(run_dir))
    assert status.returncode == 0 and "state: finished" in status.stdout
    rounds = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["version"] >= 2 and result["final_reward"] == pytest.approx(1.0)

    diff = cli("show", str(run_dir), "--diff", "1", "2")
    assert diff.returncode == 0 and "+- " + RULE in diff.stdout and "held-out" in diff.stdout
    show = cli("show", str(run_dir))
    assert RULE in show.stdout

    out = tmp_path / "skill.md"
    assert cli("export", str(run_dir), "-o", str(out)).returncode == 0
    assert RULE in out.read_text()

    report = cli("report", str(run_dir))
    assert report.returncode == 0
    page = (run_dir / "report.html").read_text()
    assert "<svg" in page and RULE in page and "Diff from the start" in page

    # the key never reaches any file of the run directory
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f


def test_kill_9_mid_run_then_resume_continues_the_numbering_and_the_spend(tmp_path):
    """A run killed with SIGKILL resumes from what its ledger saved: numbering and spend go on.

    ``rounds.jsonl`` is a view the run appends to as each round ends, just before the
    round's progress is saved in the ledger, so a kill can land between the two: the
    killed run's last line may be a round the ledger never saved. The resumed run then
    rewrites the view from the ledger (the one store of the rounds) and goes on from the
    last saved round, so the expectations are taken from the ledger, not from that line.
    """
    with LLMServer(responder=responder(delay=0.02)) as server:
        run_dir = init(tmp_path, server)
        env = {**os.environ, "CLI_TEST_KEY": KEY, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([*_script(), "run", str(run_dir), "--rounds", "40", "--workers", "2"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        rounds_file = run_dir / "rounds.jsonl"
        deadline = time.monotonic() + 60
        while not (rounds_file.exists() and len(rounds_file.read_text().splitlines()) >= 2):
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

        status = cli("status", str(run_dir))
        assert "state: interrupted" in status.stdout
        last = [json.loads(line) for line in rounds_file.read_text().splitlines()][-1]
        with SqliteLedger(run_dir / "ledger.sqlite") as ledger:
            saved = read_progress(ledger, ARTIFACT_ID)
        assert saved is not None and last["round"] - 1 <= len(saved.rounds) <= last["round"]

        resumed = cli("resume", str(run_dir), "--rounds", "2")
        assert resumed.returncode == 0, resumed.stderr
    after = [json.loads(line) for line in rounds_file.read_text().splitlines()]
    numbers = [r["round"] for r in after]
    assert numbers == list(range(1, len(after) + 1))  # continued, no gap, no restart at 1
    assert numbers[-1] == len(saved.rounds) + 2
    assert after[-1]["tokens_total"] > saved.tokens  # the spend was not reset
    result = json.loads((run_dir / "result.json").read_text())
    assert result["history"][-1]["index"] == numbers[-1]
    assert "state: finished" in cli("status", str(run_dir)).stdout


@pytest.mark.parametrize("args, words", [
    (["run"], ["RUN_DIR"]),
    (["plan", "nowhere", "--rounds", "0"], ["--rounds", ">= 1"]),
    (["frobnicate"], ["invalid choice"]),
    (["status", "no/such/dir"], ["spec.json"]),
])
def test_bad_flags_exit_2_with_a_message(args, words):
    proc = cli(*args)
    assert proc.returncode == 2
    for word in words:
        assert word in proc.stderr


@pytest.mark.parametrize("content, words", [
    ('{"prompt": "a"}\nnot json\n', ["line 2", "not JSON"]),
    ('{"id": "x"}\n', ["line 1", '"prompt"']),
    ('{"prompt": "a", "id": "1"}\n{"prompt": "b", "id": "1"}\n', ["line 2", "duplicate id"]),
])
def test_bad_task_files_exit_2_naming_the_line(tmp_path, content, words):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(content)
    proc = cli("init", str(tmp_path / "run"), "--tasks", str(tasks), "--model", "m")
    assert proc.returncode == 2
    for word in words:
        assert word in proc.stderr


def test_a_key_given_as_the_variable_name_is_refused(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    proc = cli("init", str(tmp_path / "run"), "--tasks", str(tasks), "--model", "m", "--api-key-env", "sk-abc/def")
    assert proc.returncode == 2 and "NAME of an environment variable" in proc.stderr


def test_every_command_has_help():
    for command in ("demo", "init", "plan", "run", "status", "show", "resume", "export", "report"):
        proc = cli(command, "--help")
        assert proc.returncode == 0 and "usage" in proc.stdout.lower(), command


def test_demo_runs_outside_a_checkout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([*_script(), "demo", "--rounds", "2"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Merging workers" in proc.stdout
