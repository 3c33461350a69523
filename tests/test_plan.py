"""``agentdescent plan``: the maximum and the expected spend, and ``--probe``'s timed call.

The numbers are checked as functions (the maximum is never below the expected; the
expected grows with the rounds, the workers and the held-out set; a sampled model pays
for re-draws a deterministic one does not), and the command line is driven as a user
would, in subprocesses, against the loopback server of agentdescent/testing/llmserver.py: ``--probe``
sends exactly one request, a provider failure is one line and exit 1, and a real ``run``
spends no more than the maximum and within a factor of 2 of the expected.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentdescent.cli.plan import Probe, budget_line, plan_numbers
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body
from agentdescent.types import Task

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-plan-test-key-0123456789"
RULE = "Answer with the bare number only, no sentence."


def _spec(**extra: Any) -> dict[str, Any]:
    spec = {"strategy": "append", "held_out_frac": 0.4, "seed": 0, "call_tokens": None, "temperature": None,
            "initial_text": None}
    spec.update(extra)
    return spec


def _tasks(n: int = 16) -> list[Task]:
    return [Task(f"q{i:02d}", f"What is {i} + {i}?", {"answer": str(2 * i)}) for i in range(n)]


# --------------------------------------------------------------------------- the numbers


@pytest.mark.parametrize("rounds, workers", [(1, 1), (3, 2), (15, 4), (40, 8)])
@pytest.mark.parametrize("spec", [_spec(), _spec(temperature=0), _spec(call_tokens=64, temperature=0.7),
                                  _spec(strategy="single", initial_text="Answer briefly.")],
                         ids=["default", "t0", "limit", "single"])
@pytest.mark.parametrize("probe", [None, Probe(1.5, 90, 300, 12), Probe(0.1, 3, 2, 12)], ids=["none", "long", "short"])
def test_the_maximum_is_never_below_the_expected(rounds, workers, spec, probe):
    p = plan_numbers(spec, _tasks(), rounds, workers, probe=probe, test_tasks=_tasks(3))
    for key in ("calls", "tokens", "calls_per_round", "tokens_per_round", "test_tokens"):
        assert p["max"][key] >= p["expected"][key] > 0, key
    assert p["expected"]["calls"] >= rounds * workers  # every round rolls out once per worker


def test_the_expected_grows_with_rounds_workers_and_the_held_out_set():
    base = plan_numbers(_spec(), _tasks(), 4, 2)["expected"]
    for more in (plan_numbers(_spec(), _tasks(), 8, 2)["expected"],
                 plan_numbers(_spec(), _tasks(), 4, 4)["expected"],
                 plan_numbers(_spec(), _tasks(60), 4, 2)["expected"],
                 plan_numbers(_spec(held_out_frac=0.6), _tasks(), 4, 2)["expected"]):
        assert more["calls"] > base["calls"] and more["tokens"] > base["tokens"]


def test_a_sampled_model_pays_for_redraws_a_deterministic_one_does_not():
    tasks = _tasks(40)
    sampled = plan_numbers(_spec(temperature=0.7), tasks, 30, 4)
    default = plan_numbers(_spec(), tasks, 30, 4)  # the provider's default temperature samples
    deterministic = plan_numbers(_spec(temperature=0), tasks, 30, 4)
    assert sampled["sampled"] and default["sampled"] and not deterministic["sampled"]
    assert sampled["expected"]["calls"] == default["expected"]["calls"] > deterministic["expected"]["calls"]
    # at temperature 0 the only re-draws are the (at most 16) that teach the run it is deterministic
    short = plan_numbers(_spec(temperature=0), tasks, 60, 4)["expected"]["calls"] - deterministic["expected"]["calls"]
    assert short < plan_numbers(_spec(temperature=0.7), tasks, 60, 4)["expected"]["calls"] - sampled["expected"]["calls"]
    assert sampled["max"]["calls"] == deterministic["max"]["calls"]  # noise may still show: the bound keeps it


def test_the_maximum_counts_every_call_the_code_allows():
    p = plan_numbers(_spec(), _tasks(16), 3, 2)  # 10 train, 6 held out
    # per round: 2 rollouts, 2 proposals, 2 self-verify, 2 rebase calls for each of 2 + 2 pooled cards,
    # 12 * 6 held-out calls (2 fresh draws a task on both sides, each confirmed as a regression with
    # 2 more a side); once: the starting head on 6 tasks and the 16-draw noise probe
    assert p["held_out"] == 6 and p["max"]["calls_per_round"] == 2 + 2 + 2 + 8 + 72
    assert p["max"]["calls"] == 6 + 16 + 3 * 86


def test_a_stratified_split_scores_a_group_and_a_sample():
    tasks = [Task(f"q{i:02d}", f"What is {i} + {i}?", {"answer": str(2 * i), "kind": "ab"[i % 2]}) for i in range(60)]
    plain = plan_numbers(_spec(), tasks, 5, 2)
    grouped = plan_numbers(_spec(stratify="kind"), tasks, 5, 2)
    assert plain["held_out"] == grouped["held_out"] == 24
    assert plain["scored"] == 8 and grouped["scored"] == 12 + 8  # the card's group (12 held out) and 8 others
    assert grouped["expected"]["calls"] > plain["expected"]["calls"]


def test_the_test_set_is_counted_apart():
    plain = plan_numbers(_spec(), _tasks(), 3, 2)
    tested = plan_numbers(_spec(), _tasks(), 3, 2, test_tasks=_tasks(5))
    assert tested["expected"]["test_calls"] == tested["max"]["test_calls"] == 10
    assert tested["expected"]["calls"] == plain["expected"]["calls"] and tested["max"]["tokens"] == plain["max"]["tokens"]


def test_a_probe_sets_the_reply_length_and_the_wall_time():
    slow = plan_numbers(_spec(), _tasks(), 3, 2, probe=Probe(2.0, 40, 100, 12))
    fast = plan_numbers(_spec(), _tasks(), 3, 2, probe=Probe(0.5, 40, 10, 12))
    assert slow["reply"] == 100 and fast["reply"] == 10 and slow["framing"] == 28
    assert slow["expected"]["tokens"] > fast["expected"]["tokens"]
    assert slow["seconds_expected"] == pytest.approx(slow["expected"]["calls"] / 2 * 2.0)
    assert slow["seconds_max"] == pytest.approx(slow["max"]["calls"] / 2 * 2.0 * 512 / 100)  # replies at 512, not 100
    assert "seconds_expected" not in plan_numbers(_spec(), _tasks(), 3, 2)


# --------------------------------------------------------------------------- the command line


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PLAN_TEST_KEY": KEY, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "agentdescent", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _model(path: str, body: Any) -> Reply:
    """Answers in a sentence until the playbook asks for the bare number; proposes that rule.

    Usage is reported as ``ceil(characters / 4)`` each way, as a real server counts tokens.
    """
    messages = body["messages"]
    user = messages[-1]["content"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    if "ONE general rule" in user:
        text = RULE
    else:
        n = re.search(r"What is (\d+) \+ \1\?", user)
        answer = str(2 * int(n.group(1))) if n else "?"
        text = answer if "bare number" in system else f"I think the answer is {answer}."
    prompt = math.ceil(sum(len(m["content"] or "") for m in messages) / 4)
    return Reply(200, openai_body(text, prompt_tokens=prompt, completion_tokens=math.ceil(len(text) / 4)))


def _init(tmp_path: Path, server: LLMServer, *extra: str) -> Path:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": t.id, "prompt": t.prompt, **t.meta}) + "\n" for t in _tasks()))
    run_dir = tmp_path / "run"
    proc = cli("init", str(run_dir), "--tasks", str(tasks), "--model", "stand-in", "--base-url",
               server.openai_base_url, "--api-key-env", "PLAN_TEST_KEY", "--reward", "exact", *extra)
    assert proc.returncode == 0, proc.stderr
    return run_dir


def _row(out: str, label: str) -> tuple[int, int]:
    found = re.search(rf"^\s*{label}\s+([\d,]+)\s+([\d,]+)\s*$", out, re.M)
    assert found, out
    return int(found.group(1).replace(",", "")), int(found.group(2).replace(",", ""))


def test_plan_spends_nothing_and_says_the_time_is_unknown(tmp_path):
    with LLMServer(responder=_model) as server:
        run_dir = _init(tmp_path, server)
        before = sorted(p.name for p in run_dir.iterdir())
        proc = cli("plan", str(run_dir), "--rounds", "3", "--workers", "2")
        assert proc.returncode == 0, proc.stderr
        assert server.requests == [] and sorted(p.name for p in run_dir.iterdir()) == before
    assert [line for line in proc.stdout.splitlines() if line.startswith("time:")] == [
        "time: unknown until probed (--probe times one real call)"]
    assert _row(proc.stdout, "at most, the run") >= _row(proc.stdout, "expected, the run")
    assert "expected assumes" in proc.stdout and "no per-call limit" in proc.stdout


def test_probe_sends_one_request_and_prints_the_wall_time(tmp_path):
    with LLMServer(responder=_model) as server:
        run_dir = _init(tmp_path, server, "--call-tokens", "64", "--temperature", "0")
        proc = cli("plan", str(run_dir), "--rounds", "3", "--workers", "2", "--probe")
        assert proc.returncode == 0, proc.stderr
        assert len(server.requests) == 1
        sent = server.requests[0].body
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0 and sent["messages"][-1]["content"] == "What is 0 + 0?"
    assert re.search(r"^probe: one call took [\d.]+ m?s \(\d+ prompt \+ \d+ reply tokens\)$", proc.stdout, re.M)
    assert re.search(r"^time: about .+ expected, at most .+ \(calls / 2 workers x .+; assumes the server answers "
                     r"2 calls at once\)$", proc.stdout, re.M), proc.stdout
    assert "replies of 6 tokens" in proc.stdout  # "I think the answer is 0.", as the server counted it


def test_probe_failure_is_one_line_and_exit_1(tmp_path):
    def refuse(path: str, body: Any) -> Reply:
        return Reply(401, {"error": {"message": "invalid key"}})

    with LLMServer(responder=refuse) as server:
        run_dir = _init(tmp_path, server)
        proc = cli("plan", str(run_dir), "--probe")
        assert len(server.requests) == 1  # a rejected key is not retried
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentdescent plan: the probe call failed: ")
    assert "HTTP 401" in lines[0] and "$PLAN_TEST_KEY" in lines[0] and KEY not in proc.stderr


def test_a_run_spends_at_most_the_maximum_and_about_the_expected(tmp_path):
    """The run's calls and tokens (result.json) against plan's numbers: at most the maximum, within 2x the expected."""
    with LLMServer(responder=_model) as server:
        run_dir = _init(tmp_path, server)
        plan = cli("plan", str(run_dir), "--rounds", "3", "--workers", "2", "--probe")
        assert plan.returncode == 0, plan.stderr
        run = cli("run", str(run_dir), "--rounds", "3", "--workers", "2")
        assert run.returncode == 0, run.stderr
    usage = json.loads((run_dir / "result.json").read_text())["usage"]
    calls, tokens = usage["calls"], usage["total_tokens"]
    max_calls, max_tokens = _row(plan.stdout, "at most, the run")
    expected_calls, expected_tokens = _row(plan.stdout, "expected, the run")
    assert calls <= max_calls and tokens <= max_tokens
    assert expected_calls / 2 <= calls <= 2 * expected_calls, (calls, expected_calls)
    assert expected_tokens / 2 <= tokens <= 2 * expected_tokens, (tokens, expected_tokens)


def test_the_budget_line_says_what_a_budget_covers():
    p = plan_numbers(_spec(), _tasks(), 4, 2)
    start, e, m = p["start"], p["expected"], p["max"]
    assert 0 < start["tokens"] <= start["tokens_max"] and start["calls"] == min(p["held_out"], 16)
    assert budget_line(p, start["tokens"] - 1).startswith("warning: a budget of")
    assert "cannot cover the starting evaluation" in budget_line(p, start["tokens"] - 1)
    if start["tokens"] < start["tokens_max"]:
        assert "may not cover the starting evaluation" in budget_line(p, start["tokens"])
    assert "cover the run even at most" in budget_line(p, m["tokens"])
    budget = start["tokens_max"]  # covers the start even at most, and some rounds as expected
    covered = (budget - start["tokens"]) // e["tokens_per_round"]
    if covered < 4:
        assert f"cover about {covered} of the 4 rounds" in budget_line(p, budget)


def test_plan_warns_when_the_budget_cannot_cover_the_starting_evaluation_and_a_run_bears_it_out(tmp_path):
    with LLMServer(responder=_model) as server:
        run_dir = _init(tmp_path, server)
        plan = cli("plan", str(run_dir), "--rounds", "3", "--workers", "2", "--max-tokens", "40")
        assert plan.returncode == 0, plan.stderr
        assert "warning: a budget of 40 tokens cannot cover the starting evaluation" in plan.stdout
        assert server.requests == []  # plan spends nothing
        run = cli("run", str(run_dir), "--rounds", "3", "--workers", "2", "--max-tokens", "40")
        assert run.returncode == 0, run.stderr
        again = cli("plan", str(run_dir), "--rounds", "3", "--workers", "2")  # the last run's budget
    result = json.loads((run_dir / "result.json").read_text())
    assert result["stop_reason"] == "max_tokens" and result["history"] == []  # stopped before its first round
    assert "warning: a budget of 40 tokens cannot cover" in again.stdout
