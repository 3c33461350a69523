"""A run that explains itself, driven through the console script against a loopback model server.

Each test is one thing a user meets: why nothing committed (in the run's last lines,
``status --verbose``, ``rounds.jsonl``), the numbers behind a commit (``show --round``),
Ctrl-C (one line, exit 130, then ``resume``), the async counter, ``--help`` defaults, a
``MODULE:FUNC`` reward found without ``PYTHONPATH``, the single strategy in rewrite mode,
and the knobs the Python API has (stratify, the false-accept rate, patience).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from agentdescent import EvolutionResult
from agentdescent.cli.rundir import RunDir
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

from .test_cli import (
    KEY,
    ROOT,
    RULE,
    _is_proposal,
    _option_help,
    _script,
    cli,
    init,
    responder,
    started_run,
)

pytest.importorskip("openai")

EXPLAINING = "The assistant's answer is wrong because it wraps the number in a sentence the grader rejects."


def explaining_proposer(path: str, body: dict) -> Reply:
    """Answers as `responder` does, but every proposal is an explanation, not a rule."""
    if _is_proposal(body):
        return Reply(200, openai_body(EXPLAINING))
    return responder()(path, body)


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]


def test_a_run_where_every_proposal_is_refused_says_so_and_how_to_fix_it(tmp_path):
    with LLMServer(responder=explaining_proposer) as server:
        run_dir = init(tmp_path, server)
        run = cli("run", str(run_dir), "--rounds", "3", "--workers", "2")
    assert run.returncode == 0, run.stderr
    last = run.stdout.strip().splitlines()
    assert "0 commit(s)" in last[0]
    assert last[1] == ("why: nothing committed in 3 round(s): 6 proposal(s): 0 rule(s), 0 NONE, 6 refused (6 not a "
                       "rule); none became a card. What to change: the model explains instead of writing a rule: use "
                       "a stronger proposer (init --proposer-model M)")
    assert f"agentdescent status {run_dir} --verbose" in last[2]

    rows = _rows(run_dir)
    assert [r["proposals"]["refused"] for r in rows] == [{"not_a_rule": 2}] * 3
    assert rows[0]["proposals"]["examples"] == {"not_a_rule": EXPLAINING}
    assert all(r["proposals"]["made"] == 2 and r["proposals"]["cards"] == 0 and r["decisions"] == [] for r in rows)
    assert all(isinstance(r["seconds"], float) and r["ended"].endswith("+00:00") for r in rows)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["why"] == last[1].removeprefix("why: ")

    verbose = cli("status", str(run_dir), "--verbose").stdout
    assert verbose.count("refused: 2 not a rule") == 3
    assert f"e.g. not a rule: {EXPLAINING!r}" in verbose
    assert "no merge decision (no card reached the aggregator)" in verbose
    assert verbose.rstrip().endswith(last[1])
    assert "why: nothing committed" in cli("status", str(run_dir)).stdout  # also without --verbose


def test_a_commit_shows_its_numbers_its_reason_and_its_diff(tmp_path):
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server)
        run = cli("run", str(run_dir), "--rounds", "2", "--workers", "2")
    assert run.returncode == 0, run.stderr
    assert "why:" not in run.stdout  # it committed: nothing to explain
    [decision] = _rows(run_dir)[0]["decisions"]
    assert decision["outcome"] == "committed" and decision["candidate"] == [RULE]
    evidence = decision["evidence"]
    assert evidence["gains"] > 0 and evidence["losses"] == 0 and evidence["threshold"] == 20.0
    assert evidence["scored"] <= evidence["held_out"] and decision["committed_version"] == 2

    shown = cli("show", str(run_dir), "--round", "1")
    assert shown.returncode == 0, shown.stderr
    assert f"committed: {RULE}" in shown.stdout
    assert f"{evidence['gains']} gained, 0 lost" in shown.stdout and "against 20" in shown.stdout
    assert "why: the full held-out mean is better for certain" in shown.stdout
    assert "v1 -> v2:" in shown.stdout and f"+- {RULE}" in shown.stdout
    missing = cli("show", str(run_dir), "--round", "9")
    assert missing.returncode == 2 and "rounds 1..2" in missing.stderr

    result = json.loads((run_dir / "result.json").read_text())
    report = result["history"][0]["reports"][0]
    assert "accepted" not in report and report["candidate"]["ops"]  # named for what it is
    samples = result["held_out_samples"]
    assert samples["initial"]["version"] == 1 and samples["final"]["version"] == 2
    first = next(iter(samples["initial"]["tasks"].values()))
    assert first["score"] == 0.0 and first["output"].startswith("I think the answer is")
    assert "expected exactly" in first["feedback"]


def _interrupted_after_two_rounds(run_dir: Path) -> tuple[subprocess.Popen, str, str]:
    """Start ``agentdescent run`` on ``run_dir``, send it Ctrl-C once two rounds are written; its output."""
    proc = started_run(run_dir, rounds=30)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc, out, err


def test_ctrl_c_ends_with_one_line_and_exit_130_then_resume_counts_the_whole_run(tmp_path):
    with LLMServer(responder=responder(delay=0.05)) as server:
        run_dir = init(tmp_path, server)
        proc, out, err = _interrupted_after_two_rounds(run_dir)
        assert proc.returncode == 130
        assert "Traceback" not in err
        [line] = [t for t in err.replace("\r", "\n").splitlines() if t.startswith("interrupted")]
        assert f"go on with `agentdescent resume {run_dir}`" in line and "finished round(s)" in line
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] == "interrupted"
        done = status["round"]
        assert f"interrupted after {done} finished round(s)" in line

        resumed = cli("resume", str(run_dir), "--rounds", "2")
    assert resumed.returncode == 0, resumed.stderr
    bar = resumed.stderr.replace("\r", "\n")
    assert f"{done}/{done + 2}" in bar and f"{done + 2}/{done + 2}" in bar  # the whole run, not 0/2


def test_an_async_run_counts_merges_and_rollouts_not_rounds(tmp_path):
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server)
        run = cli("run", str(run_dir), "--rounds", "3", "--workers", "2", "--async")
    assert run.returncode == 0, run.stderr
    assert "after merge" in run.stdout
    bar = [t for t in run.stderr.replace("\r", "\n").splitlines() if t.startswith("evolve")]
    assert bar and all("/6" in t and "rollout" in t for t in bar)  # a total from the first line on
    status = cli("status", str(run_dir)).stdout
    assert "merges: " in status and "(up to 6 rollouts)" in status and "round:" not in status


def test_every_option_of_every_command_says_its_default():
    for command in ("init", "plan", "run", "status", "show", "resume", "eval", "export", "report"):
        for flag, text in _option_help(command).items():
            if flag in ("--help", "--force", "--restart", "--async", "--verbose", "-v", "--probe") or \
                    "store_true" in text:
                continue
            if flag in ("--tasks", "--model") or (command == "export" and flag in ("-o", "--output")):
                continue  # required
            assert "(default" in text, (command, flag, text)


def test_a_module_reward_is_found_in_the_run_directory_and_the_current_directory(tmp_path):
    code = "def score(task, output):\n    return 1.0 if output.strip() == task.meta['answer'] else 0.0\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CLI_TEST_KEY"] = KEY
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)})
                             + "\n" for i in range(8)))
    here = tmp_path / "here"
    here.mkdir()
    (here / "cwd_reward.py").write_text(code)
    with LLMServer(responder=responder()) as server:
        def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
            return subprocess.run([*_script(), *args], capture_output=True, text=True, timeout=120, env=env, cwd=cwd)

        base = ["--tasks", str(tasks), "--model", "m", "--base-url", server.openai_base_url,
                "--api-key-env", "CLI_TEST_KEY"]
        made = run_cli("init", str(tmp_path / "a"), *base, "--reward", "cwd_reward:score", cwd=here)
        assert made.returncode == 0, made.stderr  # found in the current directory
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        missing = run_cli("init", str(tmp_path / "b"), *base, "--reward", "cwd_reward:score", cwd=elsewhere)
        assert missing.returncode == 2 and "cannot import score from cwd_reward" in missing.stderr
        assert str(elsewhere) in missing.stderr  # says where it looked

        (tmp_path / "b").mkdir()
        (tmp_path / "b" / "dir_reward.py").write_text(code)
        made = run_cli("init", str(tmp_path / "b"), *base, "--reward", "dir_reward:score", cwd=elsewhere)
        assert made.returncode == 0, made.stderr  # found in the run directory
        ran = run_cli("run", str(tmp_path / "b"), "--rounds", "1", "--workers", "2", cwd=elsewhere)
        assert ran.returncode == 0, ran.stderr  # and again at run time, from anywhere


def test_the_single_strategy_rewrites_the_starting_prompt_instead_of_replacing_it(tmp_path):
    start = "You answer arithmetic questions."

    def rewriting(path: str, body: dict) -> Reply:
        user = body["messages"][-1]["content"]
        if "Current playbook:" in user or "ONE general rule" in user or "rewrite" in user.lower():
            return Reply(200, openai_body(f"{start} Answer with the bare number only, no sentence."))
        return responder()(path, body)

    initial = tmp_path / "prompt.txt"
    initial.write_text(start + "\n")
    with LLMServer(responder=rewriting) as server:
        run_dir = init(tmp_path, server, "--strategy", "single", "--initial", str(initial))
        run = cli("run", str(run_dir), "--rounds", "2", "--workers", "2")
        asked = [r.body["messages"][-1]["content"] for r in server.requests
                 if "bare number" not in " ".join(m["content"] for m in r.body["messages"] if m["role"] == "system")
                 and "What is" not in r.body["messages"][-1]["content"][:8]]
    assert run.returncode == 0, run.stderr
    proposals = [a for a in asked if start in a]
    assert proposals and all("ONE general rule" not in a for a in proposals)  # the rewrite request, not a rule
    shown = cli("show", str(run_dir)).stdout
    assert shown.startswith(start)  # kept, not thrown away


def test_stratify_the_false_accept_rate_and_patience_reach_the_run(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i),
                                         "kind": "even" if i % 2 == 0 else "odd"}) + "\n" for i in range(16)))
    with LLMServer(responder=explaining_proposer) as server:
        run_dir = init(tmp_path, server, "--stratify", "kind", "--false-accept-rate", "0.01", tasks=tasks)
        spec = json.loads((run_dir / "spec.json").read_text())
        assert (spec["stratify"], spec["false_accept_rate"]) == ("kind", 0.01)
        assert spec["command"].startswith("agentdescent init ") and "--stratify kind" in spec["command"]
        run = cli("run", str(run_dir), "--rounds", "20", "--workers", "2", "--patience", "2")
        assert run.returncode == 0, run.stderr
        assert "finished: patience after round" in run.stdout and len(_rows(run_dir)) < 20
        bad = cli("init", str(tmp_path / "bad"), "--tasks", str(tasks), "--model", "m", "--stratify", "colour")
        assert bad.returncode == 2 and "--stratify colour" in bad.stderr and "'q0'" in bad.stderr
    spec = json.loads((run_dir / "spec.json").read_text())
    assert spec["run_command"].endswith("--patience 2") and spec["run_patience"] == 2


def test_the_demo_does_not_print_a_ledger_path_it_deletes(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([*_script(), "demo", "--rounds", "1", "--workers", "2"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("ledger: a temporary SQLite file, deleted at exit (--ledger FILE keeps it)")
    kept = subprocess.run([*_script(), "demo", "--rounds", "1", "--workers", "2", "--ledger", str(tmp_path / "d.db")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert kept.stdout.startswith(f"ledger: {tmp_path / 'd.db'}") and (tmp_path / "d.db").exists()


def test_the_docs_and_docstrings_point_only_inside_the_repository_and_name_no_future_version():
    texts = {p: p.read_text(encoding="utf-8") for p in [*ROOT.glob("docs/*.md"), ROOT / "README.md",
                                                        *ROOT.glob("agentdescent/**/*.py"), *ROOT.glob("bench/*.py")]}
    for path, text in texts.items():
        assert "../shared" not in text, path
        assert "since 0.2" not in text and "since v0.2" not in text, path
    table_rows = [line for line in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8").splitlines()
                  if line.startswith("| `")]
    assert table_rows and not any("\\|" in line for line in table_rows)  # no escaped bars shown literally


def test_resuming_a_finished_run_runs_nothing_unless_more_rounds_are_asked_for(tmp_path):
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server)
        assert cli("run", str(run_dir), "--rounds", "2", "--workers", "2").returncode == 0
        sent = len(server.requests)
        again = cli("resume", str(run_dir))
        assert again.returncode == 0, again.stderr
        assert "nothing left to run" in again.stdout and "--rounds N" in again.stdout
        assert len(server.requests) == sent  # not one call
        more = cli("resume", str(run_dir), "--rounds", "1")
        assert more.returncode == 0 and len(_rows(run_dir)) == 3

        async_dir = init(tmp_path, server, name="async-run")
        assert cli("run", str(async_dir), "--rounds", "2", "--workers", "2", "--async").returncode == 0
        sent = len(server.requests)
        again = cli("resume", str(async_dir))
        assert again.returncode == 0 and "nothing left to run" in again.stdout, again.stdout + again.stderr
        assert len(server.requests) == sent


@pytest.mark.parametrize("mode", [[], ["--async"]], ids=["sync", "async"])
def test_a_run_killed_after_its_last_save_gets_its_end_written_by_resume_with_no_call(tmp_path, mode):
    """The state a kill -9 leaves between a run's last saved round and its end (bench/kill_loops.py --end-probe):
    status.json still "running", no result.json. `resume` has nothing left to run and writes the end."""
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server)
        assert cli("run", str(run_dir), "--rounds", "2", "--workers", "2", *mode).returncode == 0
        finished = json.loads((run_dir / "status.json").read_text())
        (run_dir / "result.json").unlink()
        (run_dir / "status.json").write_text(json.dumps({**finished, "state": "running", "pid": 999999}))
        sent = len(server.requests)
        again = cli("resume", str(run_dir))
        assert again.returncode == 0 and "nothing left to run" in again.stdout, again.stdout + again.stderr
        assert len(server.requests) == sent  # not one call
        assert json.loads((run_dir / "status.json").read_text())["state"] == "finished"
        result = EvolutionResult.load(run_dir / "result.json")
        rounds = [line for line in (run_dir / "rounds.jsonl").read_text().splitlines() if line]
        assert len(result.history) == len(rounds) and result.error is None
        status = cli("status", str(run_dir))
        assert status.returncode == 0 and "finished" in status.stdout.splitlines()[0], status.stdout


def _totals(run_dir: Path) -> dict:
    """The run's totals as each view states them: rounds, tokens, commits (and the head)."""
    rows = _rows(run_dir)
    status = json.loads((run_dir / "status.json").read_text())
    out = {"rows": {"rounds": len(rows), "tokens": sum(r["tokens"] for r in rows), "calls": sum(r["calls"] for r in rows),
                    "commits": sum(r["committed"] for r in rows),
                    "tokens_total": rows[-1]["tokens_total"] if rows else 0},
           "status": {"rounds": status["round"], "tokens": status["tokens"], "calls": status["calls"],
                      "head": status["head_version"]}}
    if (run_dir / "result.json").exists():
        result = EvolutionResult.load(run_dir / "result.json")
        out["result"] = {"rounds": len(result.history), "tokens": result.usage.total_tokens, "calls": result.usage.calls,
                         "commits": result.committed, "head": result.version,
                         "round_tokens": sum(h.tokens for h in result.history)}
    return out


def _agree(run_dir: Path, *, finished: bool) -> dict:
    from agentdescent.cli.report import build_report

    from ..test_report import parse

    t = _totals(run_dir)
    rows, status = t["rows"], t["status"]
    assert rows["rounds"] == status["rounds"] and rows["tokens"] == rows["tokens_total"] == status["tokens"], t
    assert rows["calls"] == status["calls"] > 0, t
    if finished:
        result = t["result"]
        assert (result["rounds"], result["tokens"], result["calls"], result["commits"]) == (
            rows["rounds"], rows["tokens"], rows["calls"], rows["commits"]), t
        assert result["round_tokens"] == result["tokens"] and result["head"] == status["head"], t
        cost = parse(build_report(RunDir(run_dir))).section("cost")
        assert f"all {result['tokens']:,} 100%" in cost, cost[:400]
        assert f"model calls {result['calls']:,}" in cost, cost[:600]
    verbose = cli("status", str(run_dir), "--verbose").stdout
    assert f"tokens spent: {status['tokens']:,}" in verbose and f"model calls: {status['calls']:,}" in verbose
    assert f"commits: {rows['commits']} in {rows['rounds']} round(s)" in verbose
    assert verbose.count("\nround ") == rows["rounds"]
    return t


def test_totals_agree_across_result_rounds_status_and_report_after_a_run_a_ctrl_c_and_a_resume(tmp_path):
    with LLMServer(responder=responder(delay=0.05)) as server:
        clean = init(tmp_path, server, name="clean")
        assert cli("run", str(clean), "--rounds", "3", "--workers", "2").returncode == 0
        _agree(clean, finished=True)

        run_dir = init(tmp_path, server, name="stopped")
        proc, _, _ = _interrupted_after_two_rounds(run_dir)
        assert proc.returncode == 130
        stopped = _agree(run_dir, finished=False)  # what is paid outside a saved round is apart: tokens_unsaved
        resumed = cli("resume", str(run_dir), "--rounds", "2")
        assert resumed.returncode == 0, resumed.stderr
        after = _agree(run_dir, finished=True)
    assert after["rows"]["rounds"] == stopped["rows"]["rounds"] + 2
    assert after["rows"]["tokens"] >= stopped["rows"]["tokens"] and after["rows"]["calls"] > stopped["rows"]["calls"]
