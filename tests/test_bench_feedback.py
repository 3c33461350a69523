"""bench/feedback.py end to end, offline: both arms against a scripted loopback server, and the refusal."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import feedback  # noqa: E402

ROWS = [json.loads(line) for line in (ROOT / "bench" / "data" / "ab_qa.jsonl").read_text().splitlines()]
BY_QUESTION = {r["question"]: r for r in ROWS}
FEEDBACK = "Feedback on the answer:"


def _row_in(text: str) -> dict[str, Any]:
    return next(r for q, r in BY_QUESTION.items() if f"\n{q}\n" in f"\n{text}\n")


def _model(path: str, body: dict[str, Any]) -> Reply:
    """Answers a question right only when the skill has a rule for its category.

    Asked for a rule, it writes the category's rule only when the request carries the
    reward's feedback; without it, a rule that changes nothing (the self-verify gate
    refuses it).
    """
    messages = body["messages"]
    user = messages[-1]["content"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    if "Current playbook" in user:
        row = _row_in(user.split("Task:\n", 1)[1].split("\n\nThe assistant's answer:", 1)[0])
        text = f"For {row['category']} questions, give the answer itself." if FEEDBACK in user else "Be helpful."
        return Reply(200, openai_body(text, prompt_tokens=90, completion_tokens=10), {}, 0.0)
    row = BY_QUESTION[user]
    text = row["answer"] if f"For {row['category']} questions" in system else "I am not sure."
    return Reply(200, openai_body(text, prompt_tokens=20 + len(system) // 4, completion_tokens=3), {}, 0.0)


def test_feedback_bench_records_both_arms_consistently(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "feedback.json"
    with LLMServer(responder=_model) as server:
        code = feedback.main(["--base-url", server.openai_base_url, "--model", "test-model", "--rounds", "4",
                              "--seeds", "0", "--test-size", "12", "--test-repeats", "2", "--json", str(out)])
        requests = [r.body["messages"] for r in server.requests]
    assert code == 0
    text = capsys.readouterr().out
    report = json.loads(out.read_text())
    config, runs = report["config"], report["runs"]
    assert [(r["seed"], r["arm"]) for r in runs] == [(0, "float"), (0, "feedback")]
    assert config["run_tasks"] + config["test_tasks"] == len(ROWS) and config["test_tasks"] == len(config["test_ids"]) == 12
    test_questions = {r["question"] for r in ROWS if r["id"] in set(config["test_ids"])}
    assert len(test_questions) == 12

    # every request the server saw is counted on some run's provider meter
    assert sum(r["sent_calls"] for r in runs) == len(requests)
    # the test set is never rolled out for a proposal, proposed from or merged on: only solved, and
    # exactly as often as the two test evaluations of each run say
    proposals = [m for m in requests if "Current playbook" in m[-1]["content"]]
    assert not any(q in m[-1]["content"] for m in proposals for q in test_questions)
    test_solves = sum(1 for m in requests if m[-1]["content"] in test_questions)
    assert test_solves == sum(r["test_draws"]["initial"] + r["test_draws"]["final"] for r in runs)
    # the feedback reached the proposal requests of the feedback arm only
    assert sum(FEEDBACK in m[-1]["content"] for m in proposals) == runs[1]["proposals_with_feedback"] > 0
    assert runs[0]["proposals_with_feedback"] == 0
    for r in runs:
        assert r["error"] is None
        assert r["test_draws"] == {"initial": 12 * 2, "final": 12 * 2}
        d = r["difference"]
        assert d["mean"] == pytest.approx(r["test_final"] - r["test_initial"]) and d["tasks"] == 12
        assert d["low"] <= d["mean"] <= d["high"]
        for key, mean in (("test_initial_interval", r["test_initial"]), ("test_final_interval", r["test_final"])):
            low, high = r[key]
            assert low <= mean <= high
        # the run's meter holds every call of the run, the final test scoring included
        assert (r["calls"], r["tokens"]) == (r["sent_calls"], r["sent_tokens"]) and r["calls"] > 0
        assert r["phases"]["test"] > 0
        a = r["agent"]
        assert a["proposals"] == a["rules"] + a["declined"] + a["refused"] == len(r["proposal_log"])
        assert r["rules_naming_answer"] == sum(p["names_answer"] for p in r["proposal_log"])
    # with this scripted model only the feedback arm learns, and the test set shows it
    assert runs[0]["commits"] == [] and runs[0]["test_final"] == runs[0]["test_initial"] == 0.0
    assert runs[1]["commits"] and runs[1]["test_final"] > 0 and runs[1]["difference"]["separated"]
    assert all(c["feedback"] for c in runs[1]["commits"])
    assert "| seed | reward | test start [95 % CI] | test end [95 % CI] | end − start [95 % CI] |" in text
    assert "| 0 | feedback |" in text and "| 0 | float |" in text


def test_feedback_bench_refuses_without_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        code = feedback.main(["--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"bench/feedback.py: no server reachable at http://127.0.0.1:{port}/v1")
