"""The command line, driven as a user would: the real console script in subprocesses.

A loopback OpenAI-compatible server (agentdescent/testing/llmserver.py) plays the model: it answers in a
sentence until the playbook tells it to give the bare answer, and proposes exactly that
rule. The run directory's files are real; a ``kill -9`` mid-run is real. The server
records every request, so a test can read what the proposer was told (the reward's
feedback) and which server a call went to.
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
from agentdescent.cli.main import ARTIFACT_ID
from agentdescent.engine.progress import read_progress
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

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


def _is_proposal(body: Any) -> bool:
    return "ONE general rule" in body["messages"][-1]["content"]


def _solution(user: str) -> str:
    """The right answer to a task prompt of these tests ("?" for a prompt it cannot do)."""
    n = re.search(r"What is (\d+) \+ \1\?", user)
    if n:
        return str(2 * int(n.group(1)))
    n = re.search(r"Is (\d+) even or odd\?", user)
    if n:
        return "odd" if int(n.group(1)) % 2 else "even"
    return "?"


def responder(delay: float = 0.0, first: Any = None, solves: bool = True, proposes: bool = True):
    """The stand-in model: proposes `RULE`; answers bare under it, else ``first(answer)`` (a sentence).

    ``solves=False`` / ``proposes=False``: a server that refuses that kind of call with a
    500 (so a call sent to the wrong server fails the run).
    """
    def respond(path: str, body: Any) -> Reply:
        messages = body["messages"]
        user = messages[-1]["content"]
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        if _is_proposal(body):
            if not proposes:
                return Reply(500, {"error": {"message": "this server does not propose"}})
            return Reply(200, openai_body(RULE), delay=delay)
        if not solves:
            return Reply(500, {"error": {"message": "this server does not solve"}})
        answer = _solution(user)
        if "bare number" in system:
            text = answer
        else:
            text = first(answer) if first else f"I think the answer is {answer}."
        return Reply(200, openai_body(text), delay=delay)

    return respond


def write_tasks(path: Path, n: int = 16, *, start: int = 0, prefix: str = "q", answers: bool = True) -> Path:
    rows = [{"id": f"{prefix}{i:02d}", "prompt": f"What is {i} + {i}?", **({"answer": str(2 * i)} if answers else {})}
            for i in range(start, start + n)]
    return write_rows(path, rows)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def init(tmp_path: Path, server: LLMServer, *extra: str, reward: str = "exact", tasks: Path | None = None,
         name: str = "run") -> Path:
    run_dir = tmp_path / name
    tasks = tasks or write_tasks(tmp_path / "tasks.jsonl")
    proc = cli("init", str(run_dir), "--tasks", str(tasks), "--model", "test-model",
               "--base-url", server.openai_base_url, "--api-key-env", "CLI_TEST_KEY", "--reward", reward, *extra)
    assert proc.returncode == 0, proc.stderr
    return run_dir


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run directory and its bytes (to show a command wrote nothing there)."""
    return {str(f.relative_to(run_dir)): f.read_bytes() for f in sorted(run_dir.rglob("*")) if f.is_file()}


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


def started_run(run_dir: Path, *, rounds: int, output: int = subprocess.PIPE, after: int = 2) -> subprocess.Popen:
    """Start ``agentdescent run`` on ``run_dir`` (2 workers) and return it once ``after`` rounds are in rounds.jsonl."""
    env = {**os.environ, "CLI_TEST_KEY": KEY, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*_script(), "run", str(run_dir), "--rounds", str(rounds), "--workers", "2"],
                            stdout=output, stderr=output, text=True, env=env)
    rounds_file = run_dir / "rounds.jsonl"
    deadline = time.monotonic() + 60
    while not (rounds_file.exists() and len(rounds_file.read_text().splitlines()) >= after):
        assert proc.poll() is None, "the run ended before it could be stopped"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


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
        proc = started_run(run_dir, rounds=40, output=subprocess.DEVNULL)
        rounds_file = run_dir / "rounds.jsonl"
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
    for command in ("demo", "init", "plan", "run", "status", "show", "resume", "eval", "export", "report"):
        proc = cli(command, "--help")
        assert proc.returncode == 0 and "usage" in proc.stdout.lower(), command


def test_demo_runs_outside_a_checkout(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([*_script(), "demo", "--rounds", "2"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Merging workers" in proc.stdout


# --------------------------------------------------------------------------- rewards with feedback

PROPOSER_KEY = "sk-cli-proposer-key-9876543210"
PARITY = [{"id": f"p{i:02d}", "prompt": f"Is {i} even or odd?", "answer": "odd" if i % 2 else "even"}
          for i in range(16)]


def _off_by_one(answer: str) -> str:
    return f"I think the answer is {int(answer) + 1}."


def _hedge(answer: str) -> str:
    return "It is even or odd."


def _feedback_shown(proposals: list[str]) -> list[str | None]:
    """The ``Feedback on the answer:`` line of each proposal request (None where there is none)."""
    found = [re.search(r"Feedback on the answer: (.*)", text) for text in proposals]
    return [m.group(1) if m else None for m in found]


def _tasks_file(tmp_path: Path, kind: Any) -> Path:
    if kind is None:
        return write_tasks(tmp_path / "tasks.jsonl")
    if kind == "no answers":
        return write_tasks(tmp_path / "tasks.jsonl", answers=False)
    return write_rows(tmp_path / "tasks.jsonl", kind)


REWARD_CASES = [
    # --reward, the tasks (None: arithmetic with answers), the reply before the rule, the feedback the proposer sees
    ("exact", None, None, r"expected exactly '(\d+)'; the reply was 'I think the answer is \1\.'"),
    ("normalized", None, None,
     r"expected '(\d+)' \(case and punctuation ignored\); the reply was 'I think the answer is \1\.'"),
    ("contains", None, _off_by_one, r"expected the reply to contain '\d+'; it was 'I think the answer is \d+\.'"),
    ("choice:even,odd", PARITY, _hedge, r"expected exactly one choice, '(even|odd)'; the reply named 2: even, odd"),
    ("number:0.5", None, _off_by_one, r"expected (\d+) \(within 0\.5\); the reply's number was \d+"),
    ("number:1%", None, _off_by_one, r"expected (\d+) \(within [\d.e-]+\); the reply's number was \d+"),
    ("regex:^{answer}$", None, None, r"expected the reply to match '\^\d+\$'; it was 'I think the answer is \d+\.'"),
    # no {answer}: one pattern for every task, so the tasks need no answer
    ("regex:^\\d+$", "no answers", None,
     re.escape("expected the reply to match '^\\\\d+$'; it was 'I think the answer is ") + r"\d+\.'"),
]


@pytest.mark.parametrize("reward, tasks, first, feedback", REWARD_CASES, ids=[c[0] for c in REWARD_CASES])
def test_each_reward_name_runs_end_to_end_and_its_feedback_reaches_the_proposer(tmp_path, reward, tasks, first,
                                                                                feedback):
    with LLMServer(responder=responder(first=first)) as server:
        run_dir = init(tmp_path, server, reward=reward, tasks=_tasks_file(tmp_path, tasks))
        run = cli("run", str(run_dir), "--rounds", "2", "--workers", "2")
        assert run.returncode == 0, run.stderr
        proposals = [r.body["messages"][-1]["content"] for r in server.requests if _is_proposal(r.body)]
    assert json.loads((run_dir / "spec.json").read_text())["reward"] == reward
    assert proposals, "no proposal was asked for"
    shown = _feedback_shown(proposals)
    assert all(line is not None and re.fullmatch(feedback, line) for line in shown), shown
    result = json.loads((run_dir / "result.json").read_text())
    assert result["initial_reward"] == 0.0 and result["final_reward"] == pytest.approx(1.0)
    assert result["version"] == 2 and RULE in result["rendered"]


MY_REWARDS = '''
from agentdescent import Score


def strict(task, output):
    return 1.0 if output.strip() == task.meta["answer"] else 0.0


def explained(task, output):
    ok = output.strip() == task.meta["answer"]
    return Score(1.0 if ok else 0.0, "custom words: give " + task.meta["answer"] + " and nothing else")
'''


@pytest.mark.parametrize("func, feedback", [("strict", None), ("explained", r"custom words: give \d+ and nothing else")])
def test_a_module_function_reward_still_works_with_or_without_feedback(tmp_path, func, feedback):
    (tmp_path / "my_rewards.py").write_text(MY_REWARDS)
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    with LLMServer(responder=responder()) as server:
        run_dir = tmp_path / "run"
        proc = cli("init", str(run_dir), "--tasks", str(write_tasks(tmp_path / "tasks.jsonl")), "--model", "m",
                   "--base-url", server.openai_base_url, "--api-key-env", "CLI_TEST_KEY",
                   "--reward", f"my_rewards:{func}", env_extra=env)
        assert proc.returncode == 0, proc.stderr
        run = cli("run", str(run_dir), "--rounds", "2", "--workers", "2", env_extra=env)
        assert run.returncode == 0, run.stderr
        proposals = [r.body["messages"][-1]["content"] for r in server.requests if _is_proposal(r.body)]
    shown = _feedback_shown(proposals)
    assert shown
    if feedback is None:  # a float reward: the proposal prompt is the one it always was
        assert shown == [None] * len(shown)
    else:
        assert all(line is not None and re.fullmatch(feedback, line) for line in shown), shown
    assert json.loads((run_dir / "result.json").read_text())["final_reward"] == pytest.approx(1.0)


def test_regex_without_answer_is_one_pattern_searched_as_written(tmp_path):
    """``regex:PATTERN`` without ``{answer}`` keeps its old meaning: the same pattern for every task, case counts.

    Scored with ``eval`` before any run, so the artifact is the starting one (v1).
    """
    tasks = write_tasks(tmp_path / "tasks.jsonl", answers=False)
    probe = write_tasks(tmp_path / "probe.jsonl", 3, start=40, prefix="h", answers=False)
    with LLMServer(responder=responder()) as server:
        upper = init(tmp_path, server, reward="regex:^I think", tasks=tasks, name="upper")
        lower = init(tmp_path, server, reward="regex:^i think", tasks=tasks, name="lower")
        a = cli("eval", str(upper), "--tasks", str(probe))
        b = cli("eval", str(lower), "--tasks", str(probe))
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout.startswith("v1 (the starting artifact; the run has not started) on 3 tasks")
    assert "mean 1.000" in a.stdout and "mean 0.000" in b.stdout
    assert "expected the reply to match '^i think'; it was 'I think the answer is 80.'" in b.stdout
    assert not (upper / "ledger.sqlite").exists()


# --------------------------------------------------------------------------- a second model for proposals


def test_proposer_flags_send_proposals_to_a_second_server_and_solves_to_the_first(tmp_path):
    env = {"CLI_PROPOSER_KEY": PROPOSER_KEY}
    with LLMServer(responder=responder(proposes=False)) as solver, \
            LLMServer(responder=responder(solves=False)) as proposer:
        run_dir = init(tmp_path, solver, "--proposer-model", "proposer-model",
                       "--proposer-base-url", proposer.openai_base_url, "--proposer-api-key-env", "CLI_PROPOSER_KEY")
        spec = json.loads((run_dir / "spec.json").read_text())
        assert spec["proposer"] == {"model": "proposer-model", "provider": "openai",
                                    "base_url": proposer.openai_base_url, "api_key_env": "CLI_PROPOSER_KEY"}
        unset = cli("run", str(run_dir), "--rounds", "2", "--workers", "2")
        assert unset.returncode == 2 and "CLI_PROPOSER_KEY is not set" in unset.stderr
        assert not solver.requests and not proposer.requests  # refused before any call
        run = cli("run", str(run_dir), "--rounds", "2", "--workers", "2", env_extra=env)
        assert run.returncode == 0, run.stderr

        # only --proposer-model: the same server and key variable as the run's model
        same = init(tmp_path, solver, "--proposer-model", "other", name="same")
        assert json.loads((same / "spec.json").read_text())["proposer"] == {
            "model": "other", "provider": "openai", "base_url": solver.openai_base_url, "api_key_env": "CLI_TEST_KEY"}
    assert solver.requests and proposer.requests
    assert not any(_is_proposal(r.body) for r in solver.requests)
    assert all(_is_proposal(r.body) for r in proposer.requests)
    assert {r.body["model"] for r in solver.requests} == {"test-model"}
    assert {r.body["model"] for r in proposer.requests} == {"proposer-model"}
    assert {r.headers["authorization"] for r in solver.requests} == {f"Bearer {KEY}"}
    assert {r.headers["authorization"] for r in proposer.requests} == {f"Bearer {PROPOSER_KEY}"}
    result = json.loads((run_dir / "result.json").read_text())
    assert result["version"] == 2 and result["final_reward"] == pytest.approx(1.0)
    assert RULE in cli("show", str(run_dir)).stdout  # the proposer's rule committed
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes() and PROPOSER_KEY.encode() not in f.read_bytes(), f


# --------------------------------------------------------------------------- a test set

TEST_SET = [{"id": f"t{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(20, 26)] + [
    {"id": f"u{i}", "prompt": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)} for i in range(4)]  # never solved
TEST_LINE = re.compile(r"test set: (\d\.\d{3}) -> (\d\.\d{3}) \(difference ([+-]\d\.\d{3}), "
                       r"95% interval \[([+-]\d\.\d{2}), ([+-]\d\.\d{2})\]\)")


def test_init_test_tasks_then_run_shows_the_test_set_in_status_and_result(tmp_path):
    test_file = write_rows(tmp_path / "test.jsonl", TEST_SET)
    prompts = {row["prompt"] for row in TEST_SET}
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server, "--test-tasks", str(test_file))
        assert (run_dir / "test_tasks.jsonl").read_text() == test_file.read_text()
        assert json.loads((run_dir / "spec.json").read_text())["test_tasks"] == "test_tasks.jsonl"
        plan = cli("plan", str(run_dir), "--rounds", "2", "--workers", "2")
        assert "plus 20 test-set calls (10 tasks, at the start and the end)" in plan.stdout
        run = cli("run", str(run_dir), "--rounds", "2", "--workers", "2")
        assert run.returncode == 0, run.stderr
        test_calls = [r for r in server.requests if r.body["messages"][-1]["content"] in prompts]
        assert not any(p in r.body["messages"][-1]["content"] for r in server.requests if _is_proposal(r.body)
                       for p in prompts)  # never a decision's task
        assert len(test_calls) == 20  # each test task at the start and at the end
        status = cli("status", str(run_dir))

        result = json.loads((run_dir / "result.json").read_text())
        test = result["test"]
        assert result["test_initial"] == 0.0 and result["test_final"] == pytest.approx(0.6)
        assert result["counters"]["test_calls"] == 20
        last = json.loads((run_dir / "rounds.jsonl").read_text().splitlines()[-1])
        assert last["tokens_total"] == result["usage"]["total_tokens"] > 0  # the final test calls are counted
        assert test["initial"]["mean"] == 0.0 and test["final"]["mean"] == pytest.approx(0.6)
        assert sorted(test["final"]["tasks"]) == sorted(row["id"] for row in TEST_SET)
        assert test["final"]["feedback"]["u0"] == "expected exactly '1'; the reply was '?'"
        diff = test["difference"]
        assert diff["mean"] == pytest.approx(0.6) and diff["separated"] and 0 < diff["low"] <= 0.6 <= diff["high"]
        expected = (f"test set: 0.000 -> 0.600 (difference +0.600, 95% interval "
                    f"[{diff['low']:+.2f}, {diff['high']:+.2f}])")
        assert expected in status.stdout and expected in run.stdout
        assert TEST_LINE.search(status.stdout)

        # a resumed run keeps the starting score: only the new final head is scored
        resumed = cli("resume", str(run_dir), "--rounds", "1")
        assert resumed.returncode == 0, resumed.stderr
        assert len([r for r in server.requests if r.body["messages"][-1]["content"] in prompts]) == 30
    assert "test set: 0.000 -> 0.600" in cli("status", str(run_dir)).stdout


# --------------------------------------------------------------------------- eval

HOLDOUT = [{"id": f"h{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in (40, 41, 42)] + [
    {"id": "h-odd", "prompt": "What is 3 + 4?", "answer": "7"}]


def test_eval_prints_the_mean_interval_and_each_task_and_writes_nothing_into_the_run_dir(tmp_path):
    holdout = write_rows(tmp_path / "holdout.jsonl", HOLDOUT)
    out = tmp_path / "out" / "v1.json"
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server)
        assert cli("run", str(run_dir), "--rounds", "2", "--workers", "2").returncode == 0
        before = snapshot(run_dir)
        calls_before = len(server.requests)
        head = cli("eval", str(run_dir), "--tasks", str(holdout))
        v1 = cli("eval", str(run_dir), "--tasks", str(holdout), "--version", "1", "--json", str(out))
        twice = cli("eval", str(run_dir), "--tasks", str(holdout), "--repeats", "2")
        seen = cli("eval", str(run_dir), "--tasks", str(write_tasks(tmp_path / "seen.jsonl", 1, start=3)))
        calls = len(server.requests) - calls_before
    assert head.returncode == 0 and v1.returncode == 0 and twice.returncode == 0, head.stderr + v1.stderr
    lines = head.stdout.splitlines()
    m = re.fullmatch(rf"v2 of 2 on 4 tasks of {re.escape(str(holdout))} \(1 draw each\), reward exact: "
                     r"mean 0\.750, 95% interval \[(\d\.\d{3}), (\d\.\d{3})\]", lines[0])
    assert m and float(m.group(1)) < 0.75 <= float(m.group(2)), lines[0]
    assert lines[1:5] == ["  h40    1.000  correct: the reply is exactly '80'",
                          "  h41    1.000  correct: the reply is exactly '82'",
                          "  h42    1.000  correct: the reply is exactly '84'",
                          "  h-odd  0.000  expected exactly '7'; the reply was '?'"]
    assert lines[5].startswith("4 model calls, ")
    assert "v1 of 2 on 4 tasks" in v1.stdout and "mean 0.000, 95% interval [0.000, 0.000]" in v1.stdout
    assert "expected exactly '80'; the reply was 'I think the answer is 80.'" in v1.stdout
    saved = json.loads(out.read_text())
    assert saved["version"] == 1 and saved["mean"] == 0.0 and saved["draws"]["h40"] == [0.0]
    assert "(2 draws each)" in twice.stdout and "mean 0.750" in twice.stdout
    assert seen.returncode == 0 and "mean 1.000" in seen.stdout
    assert "note: 1 of these tasks share an id with the run's tasks (first 'q03')" in seen.stderr
    assert calls == 4 + 4 + 8 + 1  # one solve per task and draw, nothing else
    assert snapshot(run_dir) == before  # eval wrote nothing into the run directory


def test_eval_bad_input_exits_2_and_an_unreachable_model_exits_1_in_one_line(tmp_path):
    holdout = write_rows(tmp_path / "holdout.jsonl", HOLDOUT)
    no_answer = write_rows(tmp_path / "no_answer.jsonl", [{"id": "x", "prompt": "What is 1 + 1?"}])
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server)
        assert cli("run", str(run_dir), "--rounds", "1", "--workers", "2").returncode == 0
        before = snapshot(run_dir)
        cases = [
            (["--tasks", str(tmp_path / "missing.jsonl")], ["--tasks", "missing.jsonl", "no such file"]),
            (["--tasks", str(holdout), "--version", "9"], ["--version 9", "no such version", "1..2"]),
            (["--tasks", str(holdout), "--json", str(run_dir / "e.json")], ["--json", "inside the run directory"]),
            (["--tasks", str(no_answer)], ["--reward exact", '"answer"', "'x'"]),
        ]
        for extra, words in cases:
            proc = cli("eval", str(run_dir), *extra)
            assert proc.returncode == 2, (extra, proc.stderr)
            assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            for word in words:
                assert word in proc.stderr, (word, proc.stderr)
        no_key = cli("eval", str(run_dir), "--tasks", str(holdout), env_extra={"CLI_TEST_KEY": ""})
        assert no_key.returncode == 2 and "CLI_TEST_KEY is not set" in no_key.stderr
    assert snapshot(run_dir) == before
    gone = cli("eval", str(run_dir), "--tasks", str(holdout))  # the server is closed now
    assert gone.returncode == 1 and gone.stdout == ""
    assert len(gone.stderr.strip().splitlines()) == 1 and "Traceback" not in gone.stderr
    assert gone.stderr.startswith("agentdescent eval: the model call failed: ") and "could not be reached" in gone.stderr


# --------------------------------------------------------------------------- bad init inputs


def _rows_with(answer: str) -> list[dict[str, Any]]:
    rows = [dict(row) for row in PARITY]
    rows[3]["answer"] = answer
    return rows


@pytest.mark.parametrize("extra, tasks, words", [
    (["--reward", "frobnicate"], None, ["'frobnicate'", "exact, normalized, contains"]),
    (["--reward", "no_such_module_xyz:f"], None, ["cannot import f from no_such_module_xyz"]),
    (["--reward", "number:abc"], None, ["'number:abc'", "number:0.01"]),
    (["--reward", "choice:even"], PARITY, ["'choice:even'", "two distinct"]),
    (["--reward", "regex:("], None, ["'regex:('", "not a regular expression"]),
    (["--reward", "normalized"], "no answers", ['"answer"', "'q00'"]),
    (["--reward", "regex:^{answer}$"], "no answers", ['"answer"', "'q00'"]),
    (["--reward", "choice:even,odd"], _rows_with("maybe"), ["'p03'", "'maybe' is not one of the choices"]),
    (["--reward", "number:0.1"], _rows_with("many"), ["'p00'", "is not a number"]),
    (["--proposer-base-url", "http://127.0.0.1:1/v1"], None, ["--proposer-base-url needs --proposer-model"]),
    (["--proposer-model", "m2", "--proposer-api-key-env", "sk-abc/def"], None,
     ["--proposer-api-key-env", "NAME of an environment variable"]),
    (["--test-tasks", "{tmp}/missing.jsonl"], None, ["--test-tasks", "missing.jsonl", "no such file"]),
    (["--test-tasks", "{tmp}/clash.jsonl"], None, ["--test-tasks", "'q03'", "also in --tasks"]),
    (["--test-tasks", "{tmp}/no_answer.jsonl"], None, ["--test-tasks", '"answer"', "'z1'"]),
])
def test_bad_init_input_exits_2_in_one_line_naming_the_problem(tmp_path, extra, tasks, words):
    write_rows(tmp_path / "clash.jsonl", [{"id": "q03", "prompt": "What is 9 + 9?", "answer": "18"}])
    write_rows(tmp_path / "no_answer.jsonl", [{"id": "z1", "prompt": "What is 9 + 9?"}])
    extra = [e.replace("{tmp}", str(tmp_path)) for e in extra]
    proc = cli("init", str(tmp_path / "run"), "--tasks", str(_tasks_file(tmp_path, tasks)), "--model", "m",
               "--api-key-env", "CLI_TEST_KEY", *extra)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for word in words:
        assert word in proc.stderr, (word, proc.stderr)
    assert not (tmp_path / "run").exists()  # nothing written


def _option_help(command: str) -> dict[str, str]:
    """Each option of ``agentdescent COMMAND --help`` and its help text (wrapped lines joined)."""
    text = cli(command, "--help").stdout
    options = text[text.index("options:"):].splitlines()[1:]
    found: dict[str, str] = {}
    current = None
    for line in options:
        if line.startswith("  -"):
            current = line.split()[0].rstrip(",")
            if current == "-h":
                current = "--help"
            found[current] = line
        elif current:
            found[current] += " " + line.strip()
    return {flag: " ".join(text.split()) for flag, text in found.items()}


def test_each_new_flag_says_its_default():
    init_help, eval_help = _option_help("init"), _option_help("eval")
    for flag in ("--reward", "--test-tasks", "--proposer-model", "--proposer-provider", "--proposer-base-url",
                 "--proposer-api-key-env"):
        assert "(default" in init_help[flag], (flag, init_help[flag])
    for flag in ("--version", "--repeats", "--workers", "--json"):
        assert "(default" in eval_help[flag], (flag, eval_help[flag])
    assert "number:1% relative" in init_help["--reward"] and "{answer}" in init_help["--reward"]


# --------------------------------------------------------------------------- demonstrations

def _few_shot_responder(path: str, body: Any) -> Reply:
    """A model that answers bare once it is shown a worked example (an assistant turn), else in a sentence."""
    messages = body["messages"]
    if _is_proposal(body):
        return Reply(200, openai_body("The assistant should try harder."))  # not a rule a weak model can write
    answer = _solution(messages[-1]["content"])
    shown = any(m["role"] == "assistant" for m in messages[:-1])
    return Reply(200, openai_body(answer if shown else f"I think the answer is {answer}."))


def test_init_demos_makes_train_tasks_examples_the_report_names_and_calls_are_cached(tmp_path):
    with LLMServer(responder=_few_shot_responder) as server:
        run_dir = init(tmp_path, server, "--demos", "2", "--temperature", "0")
        assert json.loads((run_dir / "spec.json").read_text())["demos"] == 2
        run = cli("run", str(run_dir), "--rounds", "3", "--workers", "2")
        assert run.returncode == 0, run.stderr
        result = json.loads((run_dir / "result.json").read_text())
        demos = {k: json.loads(v) for k, v in result["state"].items() if k.startswith("demo:")}
        assert demos and all(d["kind"] == "labeled" and d["source"].startswith("q") for d in demos.values())
        assert result["final_reward"] == 1.0
        # every request after the first commit carries the examples as chat turns
        assert any(m["role"] == "assistant" for r in server.requests for m in r.body["messages"])
        report = cli("report", str(run_dir), "-o", str(tmp_path / "report.html"))
        assert report.returncode == 0, report.stderr
        html = (tmp_path / "report.html").read_text()
        assert "demonstration 1:" in html or "demonstration 2:" in html
        assert "fixed" in html
        cached = list((run_dir / "call-cache").glob("*.json"))
        assert cached, "temperature-0 calls are kept in RUN_DIR/call-cache"
        assert not any(KEY in f.read_text() for f in cached)
        bad = cli("init", str(tmp_path / "bad"), "--tasks", str(tmp_path / "tasks.jsonl"), "--model", "m",
                  "--base-url", server.openai_base_url, "--api-key-env", "CLI_TEST_KEY", "--demos", "0")
        assert bad.returncode == 2 and "demos" in bad.stderr
