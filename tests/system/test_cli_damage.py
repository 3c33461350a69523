"""Run directories that nothing can corrupt, probed through the console script as a hostile but realistic user would.

One test per guarantee: one driver per run directory (two ``run`` started together),
outputs that never destroy inputs (``export -o`` / ``report -o`` / ``eval --json`` at the
run's own files, symlinks, FIFOs, devices, directories, existing files), input that round-trips
(prompts holding U+2028, U+2029, U+0085), a report with markup in every field of every
file, errors as promised (exit 2 or 1 in one line, never a run left "running", a reward
that is not a Python function refused without being called, a damaged or missing ledger),
and secrets that stay out (a password in a URL, a key given as the variable's name, a
server that echoes the key back). Real processes, a loopback model server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentdescent.cli.rundir import atomic_write
from agentdescent.testing.llmserver import LLMServer, Reply

from ..test_report import parse
from .test_cli import KEY, ROOT, _script, cli, init, responder, snapshot, write_rows, write_tasks

pytest.importorskip("openai")

ENV = {**os.environ, "CLI_TEST_KEY": KEY, "PYTHONPATH": str(ROOT)}


def _one_line_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The command exited ``code`` with one line on stderr, no traceback, holding each of ``words``."""
    err = "\n".join(line for line in proc.stderr.strip().splitlines() if not line.startswith("evolve:")).strip()
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)
    return err


def _round_numbers(run_dir: Path) -> list[int]:
    return [json.loads(line)["round"] for line in (run_dir / "rounds.jsonl").read_text().splitlines()]


def _ran(tmp_path: Path, server: LLMServer, *extra: str, rounds: str = "1", name: str = "run") -> Path:
    run_dir = init(tmp_path, server, *extra, name=name)
    proc = cli("run", str(run_dir), "--rounds", rounds, "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    return run_dir


# --------------------------------------------------------------------------- 1. one driver per run directory


def test_two_runs_started_together_one_drives_and_the_other_exits_2_at_once_naming_it(tmp_path):
    """The loser exits while the driver's run is still going, not after it: no clock is read.

    The server holds every reply until the test has seen the loser exit (and ``status`` and
    ``resume`` refused), so the driver cannot finish first however slow the machine is: the
    loser's exit before the gate opens is the proof that it did not wait for the lock.
    """
    gate = threading.Event()
    answer = responder(delay=0.05)

    def held(path: str, body: Any) -> Reply:
        gate.wait(120)  # a safety net only: the test opens the gate once the loser is seen out
        return answer(path, body)

    with LLMServer(responder=held) as server:
        try:
            run_dir = init(tmp_path, server)  # init sends nothing: it only writes the run directory
            command = [*_script(), "run", str(run_dir), "--rounds", "3", "--workers", "2"]
            procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
                     for _ in range(2)]
            deadline = time.monotonic() + 120  # a wait for the condition, not a bound on its speed
            while all(p.poll() is None for p in procs):
                assert time.monotonic() < deadline, "neither run ended"
                time.sleep(0.01)
            loser = next(p for p in procs if p.poll() is not None)
            driver = next(p for p in procs if p is not loser)
            assert loser.returncode == 2, loser.stderr.read()
            assert driver.poll() is None and not gate.is_set()  # refused while the driver runs: no reply has left yet
            out, err = loser.communicate()
            assert out == "" and re.fullmatch(
                rf"agentdescent run: {re.escape(str(run_dir))} is being run by pid {driver.pid} \(agentdescent run, "
                r"since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00\); one run or resume at a time: wait for it to end, or "
                r"stop it first\n", err), err

            status = cli("status", str(run_dir))  # read-only: it never takes the lock, and says who holds it
            assert status.stdout.startswith(f"state: running (pid {driver.pid}, since "), status.stdout
            resume = cli("resume", str(run_dir))
            _one_line_error(resume, 2, f"pid {driver.pid}", "one run or resume at a time")
            assert driver.poll() is None  # all three refused while it ran
        finally:
            gate.set()
        assert driver.wait(timeout=120) == 0, driver.stderr.read()
        driver.stdout.close()
        driver.stderr.close()
    assert _round_numbers(run_dir) == [1, 2, 3]  # each round once
    result = json.loads((run_dir / "result.json").read_text())
    assert [h["index"] for h in result["history"]] == [1, 2, 3]
    assert json.loads((run_dir / "status.json").read_text())["tokens"] == result["usage"]["total_tokens"]
    assert cli("status", str(run_dir)).stdout.startswith("state: finished\n")
    assert (run_dir / ".lock").read_text() == ""  # released; the file stays


# --------------------------------------------------------------------------- 2. outputs never destroy inputs


def test_export_report_and_eval_never_write_inside_the_run_or_over_what_is_not_a_file(tmp_path):
    holdout = write_rows(tmp_path / "holdout.jsonl", [{"id": "h1", "prompt": "What is 9 + 9?", "answer": "18"}])
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "fifo")
    (out / "into-run").symlink_to(tmp_path / "run" / "ledger.sqlite")
    (out / "elsewhere").symlink_to(tmp_path / "target.md")
    (out / "old.md").write_text("keep me\n")
    with LLMServer(responder=responder()) as server:
        run_dir = _ran(tmp_path, server)
        cli("report", str(run_dir))
        before = snapshot(run_dir)
        calls = len(server.requests)
        refused = [
            (["export", "-o", str(run_dir / "ledger.sqlite")], "inside the run directory"),
            (["export", "-o", str(run_dir / "new" / "skill.md")], "inside the run directory"),
            (["export", "-o", str(out / "into-run"), "--force"], "inside the run directory"),
            (["export", "-o", str(out / "elsewhere"), "--force"], "a symbolic link, not a regular file"),
            (["export", "-o", str(out), "--force"], "a directory, not a regular file"),
            (["export", "-o", str(out / "fifo"), "--force"], "a named pipe (FIFO), not a regular file"),
            (["export", "-o", "/dev/null", "--force"], "a character device, not a regular file"),
            (["export", "-o", str(out / "old.md")], "exists; pass --force to replace it"),
            (["report", "-o", str(run_dir / "spec.json")], "inside the run directory"),
            (["report", "-o", str(run_dir / "other.html")], "report.html is the one file written there"),
            (["report", "-o", str(out / "old.md")], "exists; pass --force"),
            (["eval", "--tasks", str(holdout), "--json", str(run_dir / "e.json")], "inside the run directory"),
            (["eval", "--tasks", str(holdout), "--json", str(out / "old.md")], "exists; pass --force"),
            (["eval", "--tasks", str(holdout), "--json", str(out / "fifo"), "--force"], "a named pipe"),
        ]
        for args, words in refused:
            proc = cli(args[0], str(run_dir), *args[1:], timeout=20)
            _one_line_error(proc, 2, words)
        assert len(server.requests) == calls  # eval refused before any call
        assert snapshot(run_dir) == before  # the run's files untouched

        assert cli("report", str(run_dir)).returncode == 0  # its own report.html, replaced freely
        os.chmod(out / "old.md", 0o640)
        forced = cli("export", str(run_dir), "-o", str(out / "old.md"), "--force")
        assert forced.returncode == 0, forced.stderr
        assert cli("export", str(run_dir), "-o", str(out / "new" / "skill.md")).returncode == 0
        assert cli("eval", str(run_dir), "--tasks", str(holdout), "--json", str(out / "e.json")).returncode == 0
    assert (out / "old.md").read_text() == (out / "new" / "skill.md").read_text() != "keep me\n"
    assert (out / "old.md").stat().st_mode & 0o777 == 0o640  # replaced, its permissions kept
    assert (out / "fifo").is_fifo() and (out / "into-run").is_symlink() and not (tmp_path / "target.md").exists()
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]  # no temporary file left anywhere
    # a write that fails half way leaves nothing behind
    (out / "a-dir").mkdir()
    with pytest.raises(IsADirectoryError):
        atomic_write(out / "a-dir", "text")
    assert sorted(p.name for p in out.iterdir()) == ["a-dir", "e.json", "elsewhere", "fifo", "into-run", "new",
                                                     "old.md"]


# --------------------------------------------------------------------------- 6. input that round-trips

SEPARATORS = "\u2028\u2029\u0085"


def test_prompts_holding_unicode_line_separators_pass_init_plan_run_and_eval(tmp_path):
    rows = [{"id": f"q{i:02d}", "prompt": f"What is {i} + {i}?{SEPARATORS[i % 3]}", "answer": str(2 * i)}
            for i in range(16)]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert any(s in tasks.read_text(encoding="utf-8") for s in SEPARATORS)  # raw, not escaped
    with LLMServer(responder=responder()) as server:
        run_dir = init(tmp_path, server, tasks=tasks)
        plan = cli("plan", str(run_dir), "--rounds", "1", "--workers", "2")
        assert plan.returncode == 0 and plan.stdout.startswith("16 tasks:"), plan.stderr
        run = cli("run", str(run_dir), "--rounds", "1", "--workers", "2")
        assert run.returncode == 0, run.stderr
        evaluation = cli("eval", str(run_dir), "--tasks", str(tasks))
        assert evaluation.returncode == 0 and "on 16 tasks" in evaluation.stdout, evaluation.stderr
        sent = [r.body["messages"][-1]["content"] for r in server.requests]
    copy = [json.loads(line) for line in (run_dir / "tasks.jsonl").read_text(encoding="utf-8").split("\n") if line]
    assert [r["prompt"] for r in copy] == [r["prompt"] for r in rows]
    assert any(SEPARATORS[0] in text for text in sent) and any(SEPARATORS[2] in text for text in sent)
    # a rounds.jsonl line holding a raw separator is one round, not a torn line
    row = {**json.loads((run_dir / "rounds.jsonl").read_text().splitlines()[-1]), "round": 2,
           "note": f"a{SEPARATORS}b"}
    with (run_dir / "rounds.jsonl").open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
    assert " in 2 round(s)" in cli("status", str(run_dir)).stdout


# --------------------------------------------------------------------------- 7. markup in every field

MARKUP = '<script>alert(1)</script><img src=x onerror="alert(2)">'
#: The spec's keys any text is a value of: poisoned with markup as text. Its other values say how to run and are
#: checked on every open, as the flags that set them are (`agentdescent.cli.specvalues`): exit 2, below.
SPEC_TEXT = {"model", "reward", "initial_text", "command", "run_command", "created", "version", "stratify"}
SHAPES = ["text", "nested", "level-1", "level-2", "level-3"]


def _poison(value: Any, shape: str, depth: int = 0) -> Any:
    """Markup everywhere, and a markup key in every dict.

    "text": every value a markup string (numbers too); "nested": every value a list
    holding a dict of markup; "level-N": every value N levels down a markup string,
    whatever it was (a dict or a list where one goes).
    """
    if shape.startswith("level-") and depth == int(shape.removeprefix("level-")):
        return MARKUP
    if isinstance(value, dict):
        out = {k: _poison(v, shape, depth + 1) for k, v in value.items()}
        out[MARKUP] = MARKUP
        return out
    if isinstance(value, list):
        return [_poison(v, shape, depth + 1) for v in value] or [MARKUP]
    return [{MARKUP: MARKUP}, MARKUP] if shape == "nested" else MARKUP


def _poison_run(run_dir: Path, shape: str) -> None:
    for name in ("status.json", "result.json"):
        path = run_dir / name
        path.write_text(json.dumps(_poison(json.loads(path.read_text()), shape)))
    spec = json.loads((run_dir / "spec.json").read_text())
    poisoned = {**spec, MARKUP: MARKUP, **({k: MARKUP for k in SPEC_TEXT} if shape == "text" else {})}
    (run_dir / "spec.json").write_text(json.dumps(poisoned))
    rows = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    (run_dir / "rounds.jsonl").write_text("".join(json.dumps(_poison(r, shape)) + "\n" for r in rows))


def test_markup_in_every_field_of_every_file_renders_as_text_and_nothing_crashes(tmp_path):
    with LLMServer(responder=responder()) as server:
        ran = _ran(tmp_path, server, "--test-tasks", str(write_tasks(tmp_path / "test.jsonl", 2, start=30,
                                                                      prefix="t")), rounds="2")
    for shape in SHAPES:
        run_dir = tmp_path / shape
        shutil.copytree(ran, run_dir)
        _poison_run(run_dir, shape)
        page_file = tmp_path / f"{shape}.html"
        report = cli("report", str(run_dir), "-o", str(page_file))
        assert report.returncode == 0, (shape, report.stderr)
        page = page_file.read_text()
        parsed = parse(page)
        assert "script" not in parsed.tags and "img" not in parsed.tags, shape
        assert not [(tag, name) for tag, name, _ in parsed.attrs if name.startswith("on") or name == "src"], shape
        assert "<script" not in page.lower() and "<img" not in page.lower(), shape
        assert parsed.all_text().count("<script>alert(1)</script>") >= 5, shape  # shown, as text
        for args in (["status", "--verbose"], ["show", "--round", "1"]):
            proc = cli(args[0], str(run_dir), *args[1:])
            assert "Traceback" not in proc.stderr and proc.returncode in (0, 2), (shape, args, proc.stderr)
            assert len(proc.stderr.strip().splitlines()) <= 1, (shape, args, proc.stderr)
    spec = json.loads((ran / "spec.json").read_text())
    for key, value in (("strategy", MARKUP), ("seed", MARKUP), ("model", [{MARKUP: MARKUP}])):
        (ran / "spec.json").write_text(json.dumps({**spec, key: value}))
        for args in (["report", "-o", str(tmp_path / "bad.html")], *([["status"], ["show"]] if key == "model" else [])):
            _one_line_error(cli(args[0], str(ran), *args[1:]), 2, f'spec.json: "{key}": ', "set it right in spec.json")


# --------------------------------------------------------------------------- 8. errors as promised

MY_REWARDS = '''
def text(task, output):
    return "yes"


def one(task):
    return 1.0


def picky(task, output):
    if output.startswith("I think"):
        raise KeyError("a sentence, not a number")
    return float(output.strip() == task.meta["answer"])
'''


def test_every_failure_exits_2_or_1_in_one_line_and_no_run_is_left_running(tmp_path):
    (tmp_path / "my_rewards.py").write_text(MY_REWARDS)
    tasks = write_tasks(tmp_path / "tasks.jsonl")

    def init_with(reward: str) -> subprocess.CompletedProcess:
        return cli("init", str(tmp_path / "refused"), "--tasks", str(tasks), "--model", "m", "--reward", reward)

    for reward, words in [("os:system", "a built-in or C function (or a class), refused without calling it"),
                          ("subprocess:call", "the standard library is refused"),
                          ("my_rewards:one", "its signature does not take (task, output)"),
                          ("my_rewards:text", "returned 'yes' (str); return a float in [0, 1] or a Score")]:
        _one_line_error(subprocess.run([*_script(), "init", str(tmp_path / "refused"), "--tasks", str(tasks),
                                        "--model", "m", "--reward", reward], capture_output=True, text=True,
                                       env=ENV, cwd=tmp_path, timeout=60), 2, words)
    assert not (tmp_path / "refused").exists()
    assert init_with("os:system").returncode == 2  # also outside the module's directory

    with LLMServer(responder=responder()) as server:
        proc = subprocess.run([*_script(), "init", str(tmp_path / "picky"), "--tasks", str(tasks), "--model", "m",
                               "--base-url", server.openai_base_url, "--api-key-env", "CLI_TEST_KEY",
                               "--reward", "my_rewards:picky"], capture_output=True, text=True, env=ENV,
                              cwd=tmp_path, timeout=60)
        assert proc.returncode == 0, proc.stderr  # "" and the answer score fine: it passes init
        picky = subprocess.run([*_script(), "run", str(tmp_path / "picky"), "--rounds", "1", "--workers", "2"],
                               capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=60)
        run_dir = _ran(tmp_path, server)
    err = _one_line_error(picky, 1, "the run failed: KeyError: 'a sentence, not a number' (at my_rewards.py:")
    assert err.startswith("agentdescent: the run failed")
    assert json.loads((tmp_path / "picky" / "status.json").read_text())["state"] == "failed"  # not "running"

    spec = json.loads((run_dir / "spec.json").read_text())  # a hand-edited spec: refused before anything runs
    (run_dir / "spec.json").write_text(json.dumps({**spec, "reward": "os:system"}))
    status_before = (run_dir / "status.json").read_bytes()
    _one_line_error(cli("resume", str(run_dir)), 2, "--reward 'os:system'")
    assert (run_dir / "status.json").read_bytes() == status_before
    (run_dir / "spec.json").write_text(json.dumps(spec))

    ledger = run_dir / "ledger.sqlite"
    intact = ledger.read_bytes()
    ledger.write_bytes(intact[:3000])  # truncated
    for args in (["show"], ["export", "-o", str(tmp_path / "x.md")], ["report", "-o", str(tmp_path / "x.html")],
                 ["resume"], ["eval", "--tasks", str(tasks)], ["show", "--diff", "1", "2"]):
        _one_line_error(cli(args[0], str(run_dir), *args[1:]), 2, "ledger", "damaged")
    status = cli("status", str(run_dir))
    assert status.returncode == 0 and status.stdout.startswith("state: finished, but ledger.sqlite is damaged\n"
                                                               "ledger: "), status.stdout
    ledger.unlink()
    assert cli("status", str(run_dir)).stdout.startswith("state: finished, but ledger.sqlite is missing\n")
    for command in ("show", "resume", "run"):
        _one_line_error(cli(command, str(run_dir)), 2, "ledger.sqlite: missing, though", "--restart")
    assert not ledger.exists()  # nothing made a new, empty one in its place


# --------------------------------------------------------------------------- 9. secrets stay out

PASSWORD = "hunter2-Pa55word"


def echo_key(path: str, body: Any) -> Reply:
    """A server that refuses every call and echoes the key it was sent in its message (a debugging proxy)."""
    return Reply(400, {"error": {"message": f"unknown model; you sent Authorization: Bearer {KEY}"}})


GRADER = """
import os


def graded(task, output):
    if output.startswith("I think"):  # a grader service that refuses, naming the key it was given
        raise RuntimeError("the grading service refused the key " + os.environ["CLI_TEST_KEY"])
    return float(output.strip() == task.meta["answer"])
"""


def test_secrets_never_reach_the_spec_or_any_message(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl")
    base = ["init", str(tmp_path / "run"), "--tasks", str(tasks), "--model", "m"]
    key_shaped = [KEY, "gsk_" + "a1B2c3D4" * 5, "9f86d081884c7d659a2feaa0c55ad015", "Ab12Cd34Ef56Gh78Ij90"]
    cases = [(["--base-url", f"http://user:{PASSWORD}@127.0.0.1:9/v1"], "put the credential in the API key's"),
             (["--proposer-model", "p", "--proposer-base-url", f"https://:{PASSWORD}@example.com/v1"],
              "--proposer-base-url: the URL holds a user name or password"),
             (["--base-url", f"http://127.0.0.1:9/v1?api_key={KEY}"], "the URL's query holds what looks like"),
             *[(["--api-key-env", k], "--api-key-env: the value looks like an API key (not shown)")
               for k in key_shaped],
             (["--api-key-env", "MY KEY"], "holds characters no variable name has"),
             (["--proposer-model", "p", "--proposer-api-key-env", KEY], "--proposer-api-key-env: the value looks"),
             (["--reward", f"{KEY}:f"], "cannot import f from [redacted]"),
             (["--provider", KEY], "invalid choice: '[redacted]'")]
    for extra, words in cases:
        proc = cli(*base, *extra)
        assert proc.returncode == 2, (extra, proc.stderr)
        assert words in proc.stderr, (extra, proc.stderr)
        assert PASSWORD not in proc.stderr and not any(k in proc.stderr + proc.stdout for k in key_shaped), proc.stderr
    assert not (tmp_path / "run").exists()
    assert cli(*base, "--api-key-env", "AZURE_OPENAI_API_KEY_EASTUS2").returncode == 0  # a name is a name

    with LLMServer(responder=echo_key) as server:
        echoed = init(tmp_path, server, name="echoed")
        evaluation = cli("eval", str(echoed), "--tasks", str(write_tasks(tmp_path / "probe.jsonl", 1, start=40,
                                                                          prefix="h")))
        assert server.requests and server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    _one_line_error(evaluation, 1, "the model call failed", "you sent Authorization: Bearer [redacted]")

    (tmp_path / "graded").mkdir()
    (tmp_path / "graded" / "grader.py").write_text(GRADER)  # found in the run directory
    with LLMServer(responder=responder()) as server:
        graded = init(tmp_path, server, "--reward", "grader:graded", name="graded")
        run = cli("run", str(graded), "--rounds", "1", "--workers", "2")
    _one_line_error(run, 1, "the run failed: RuntimeError: the grading service refused the key [redacted]")
    status = cli("status", str(graded)).stdout
    assert "state: failed" in status and "refused the key [redacted]" in status
    for f in tmp_path.rglob("*"):
        if f.is_file() and f.parent != tmp_path:  # every file of every run directory
            data = f.read_bytes()
            assert KEY.encode() not in data and PASSWORD.encode() not in data, f
