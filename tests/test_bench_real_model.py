"""bench/real_model.py end to end, offline: its audit against a scripted loopback server."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import real_model  # noqa: E402

ROWS = [json.loads(line) for line in (ROOT / "bench" / "data" / "qa_small.jsonl").read_text().splitlines()]
BY_QUESTION = {r["question"]: r for r in ROWS}


def _model(path: str, body: dict[str, Any]) -> Reply:
    """Answers a question right only when the skill has a rule for its category.

    Proposals come in three shapes, by category: a rule with the playbook heading
    copied after it (cleaned), a rule cut off by the per-call limit (refused), and a
    restatement of the task (refused).
    """
    messages = body["messages"]
    user = messages[-1]["content"]
    system = messages[0]["content"] if messages[0]["role"] == "system" else ""
    if "Current playbook" in user:
        row = next(r for q, r in BY_QUESTION.items() if q in user)
        cat = row["category"]
        if cat == "color":
            return Reply(200, openai_body("When asked about a colour, name the", finish_reason="length",
                                          prompt_tokens=90, completion_tokens=8), {}, 0.0)
        if cat == "year":
            return Reply(200, openai_body(row["question"], prompt_tokens=90, completion_tokens=9), {}, 0.0)
        return Reply(200, openai_body(f"For {cat} questions, give the answer itself.\n\n# Playbook",
                                      prompt_tokens=90, completion_tokens=11), {}, 0.0)
    row = BY_QUESTION[user]
    text = row["answer"] if f"For {row['category']} questions" in system else "I am not sure."
    return Reply(200, openai_body(text, prompt_tokens=20 + len(system) // 4, completion_tokens=3), {}, 0.0)


def test_real_model_bench_audits_calls_tokens_refusals_and_commits(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "real.json"
    with LLMServer(responder=_model) as server:
        code = real_model.main(["--base-url", server.openai_base_url, "--model", "test-model",
                                "--rounds", "6", "--seeds", "0", "--json", str(out)])
        n_requests = len(server.requests)
    assert code == 0
    text = capsys.readouterr().out
    [row] = json.loads(out.read_text())
    assert row["error"] is None
    # the library's meter and the server's own usage agree, call for call
    assert row["calls"] == row["server_calls"] == n_requests
    assert row["tokens"] == row["server_tokens"] > 0
    assert (row["prompt_tokens"], row["completion_tokens"]) == (row["server_prompt_tokens"],
                                                                row["server_completion_tokens"])
    assert f"{row['calls']} / {row['server_calls']}" in text
    # refusals by kind
    agent = row["agent"]
    assert agent["truncated"] > 0 and agent["echoed"] > 0 and agent["cleaned"] > 0
    assert agent["proposals"] == agent["rules"] + agent["declined"] + agent["refused"]
    assert "| truncated | empty | restated | echoed | too_long | not_a_rule |" in text
    # commits with the paired test's reason, and the head's scores before and after on the
    # tasks both versions were scored on (the head is no longer scored on every held-out task)
    assert row["commits"], text
    for c in row["commits"]:
        assert re.search(r"E=\S+ vs 20\b", c["reason"]), c["reason"]
        assert 0 < c["tasks_compared"] <= row["held_out"]
        assert c["after_mean"] > c["before_mean"] and c["better"] > 0 and c["worse"] == 0
        assert all(rule.endswith("give the answer itself.") for rule in c["rule"].split(" | "))
        assert "# Playbook" not in c["rule"]
    assert "Commits (the paired test's reason; the head's held-out mean before → after" in text
    assert "Refusals (measured candidates the test did not accept):" in text
    # the scripted model answers the same every time, and the noise monitor finds that out
    assert row["noise"]["state"] == "deterministic" and row["noise"]["disagreements"] == 0
    assert "deterministic (0.00 of" in text
    assert row["final"] > row["initial"]
