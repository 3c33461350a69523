"""A run stopped by a signal, driven as a user would: the console script in a subprocess, a real signal.

SIGTERM, SIGHUP and SIGQUIT end ``agentdescent run`` as Ctrl-C (SIGINT) does: one line
naming the signal and ``agentdescent resume RUN_DIR``, the state in ``status.json``
(``terminated`` with the signal's name; ``interrupted`` for SIGINT), exit code 128 + the
signal's number, and a ``resume`` that goes on with the round numbering. A tree run whose
suite hangs, sent SIGTERM, leaves neither a sandbox root, a copy of the project, a
``.tree.tmp-*`` folder nor a process of the suite behind; nor does ``init --tree`` whose
suite hangs while its tests are collected.

Each child starts with the four signals at their defaults, whatever the test runner
ignores (``nohup`` ignores SIGHUP, and a child would inherit that).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentdescent.testing.llmserver import LLMServer

from .test_cli import KEY, ROOT, _script, cli, init, responder, write_tasks

pytest.importorskip("openai")

#: Sets the four signals to their defaults, then becomes the command of ``sys.argv[1:]``.
_DEFAULTS = ("import os, signal, sys\n"
             "for name in ('SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'):\n"
             "    signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
             "os.execv(sys.argv[1], sys.argv[1:])\n")

#: A generous wait for a child to get going or to end (never a bound the test asserts).
WAIT = 120.0


def _start(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "CLI_TEST_KEY": KEY, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    script = _script()
    if len(script) == 1:
        command = [sys.executable, "-c", _DEFAULTS, script[0], *args]
    else:  # python -m agentdescent
        command = [sys.executable, "-c", _DEFAULTS, sys.executable, *script[1:], *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(proc: subprocess.Popen, ready, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not ready():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended before {what}: exit {proc.returncode}\n{out}\n{err}")
        assert time.monotonic() < deadline, f"no {what} within {WAIT:g} s"
        time.sleep(0.05)


def _ended(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate(timeout=WAIT)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _rounds(run_dir: Path) -> list[int]:
    path = run_dir / "rounds.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["round"] for line in path.read_text().splitlines() if line.strip().endswith("}")]


def _stop_line(err: str) -> str:
    """The one line the stopped run wrote, besides its progress bar."""
    lines = [t.strip() for t in err.replace("\r", "\n").splitlines() if t.strip() and not t.startswith("evolve")]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGINT")


@dataclass
class Stopped:
    """One signal's run: how it ended, its status after the signal, ``status``'s first line, the resume."""

    run_dir: Path
    returncode: int
    stderr: str
    status: dict
    shown: str
    resumed: subprocess.CompletedProcess
    lines_at_stop: list[dict]


@pytest.fixture(scope="module")
def stopped_runs(tmp_path_factory) -> dict[str, Stopped]:
    """A run per signal, all going at once, each sent its signal once its second round ended, then resumed for one.

    Together, not one after the other: the runs' start-up is most of a run's time here.
    """
    tmp = tmp_path_factory.mktemp("signals")
    tasks = write_tasks(tmp / "tasks.jsonl", 8)
    with LLMServer(responder=responder(delay=0.02)) as server:
        made = init(tmp, server, tasks=tasks, name="made")
        dirs = {sig: Path(shutil.copytree(made, tmp / sig)) for sig in SIGNALS}  # one init, four runs
        procs = {sig: _start("run", str(run_dir), "--rounds", "200", "--workers", "2") for sig, run_dir in dirs.items()}
        try:
            waiting = set(SIGNALS)
            deadline = time.monotonic() + WAIT
            while waiting:
                for sig in sorted(waiting):
                    if len(_rounds(dirs[sig])) >= 2:  # so round 1 is in the ledger (a line comes just before its save)
                        procs[sig].send_signal(getattr(signal, sig))
                        waiting.discard(sig)
                    elif procs[sig].poll() is not None:
                        pytest.fail(f"the {sig} run ended before its second round: {procs[sig].communicate()}")
                assert time.monotonic() < deadline, f"no second round within {WAIT:g} s: {sorted(waiting)}"
                time.sleep(0.05)
            errs = {sig: proc.communicate(timeout=WAIT)[1] for sig, proc in procs.items()}
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        statuses = {sig: json.loads((run_dir / "status.json").read_text()) for sig, run_dir in dirs.items()}
        lines = {sig: [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
                 for sig, run_dir in dirs.items()}
        shown = {sig: cli("status", str(run_dir)).stdout.splitlines()[0] for sig, run_dir in dirs.items()}
        resumes = {sig: _start("resume", str(run_dir), "--rounds", "1") for sig, run_dir in dirs.items()}
        resumed = {sig: _ended(p) for sig, p in resumes.items()}
    return {sig: Stopped(dirs[sig], procs[sig].returncode, errs[sig], statuses[sig], shown[sig], resumed[sig],
                         lines[sig]) for sig in SIGNALS}


@pytest.mark.parametrize("sig", SIGNALS)
def test_a_signal_ends_a_run_like_ctrl_c_and_resume_goes_on(stopped_runs, sig):
    run = stopped_runs[sig]
    state = "interrupted" if sig == "SIGINT" else "terminated"
    assert run.returncode == 128 + getattr(signal, sig), (run.returncode, run.stderr)
    assert (run.status["state"], run.status["stop_reason"], run.status["signal"]) == (state, state, sig)
    done = run.status["round"]
    assert done >= 1
    recorded, unsaved = run.status["tokens"], run.status["tokens_unsaved"]
    lost = (f"; {unsaved:,} tokens paid since the last saved round are in no record (its calls were cut off)"
            if unsaved else "")
    assert _stop_line(run.stderr) == (
        f"{state} after {done} finished round(s) ({sig}); the ledger keeps head v{run.status['head_version']} and "
        f"every commit before it, {recorded:,} tokens recorded{lost}; go on with `agentdescent resume "
        f"{run.run_dir}`")
    # the run directory says what the ledger keeps: as many rounds as the line says, their tokens the status's
    assert [row["round"] for row in run.lines_at_stop] == list(range(1, done + 1))
    assert run.lines_at_stop[-1]["tokens_total"] == recorded == sum(row["tokens"] for row in run.lines_at_stop)
    assert unsaved >= 0
    assert run.shown == f"state: {state} ({sig}); go on with `agentdescent resume {run.run_dir}`"

    assert run.resumed.returncode == 0, run.resumed.stderr
    assert _rounds(run.run_dir) == list(range(1, done + 2))  # went on from the saved rounds: no gap, no restart
    after = json.loads((run.run_dir / "status.json").read_text())
    assert (after["state"], after["signal"], after["round"]) == ("finished", None, done + 1)


HANGING_TEST = '''\
from lib import double


def test_one():
    assert double(1) == 2


def test_two():
    assert double(2) == 4


def test_three():
    assert double(3) == 6


def test_hangs():
    import hang  # noqa: F401  (tests/hang.py: it hangs as it is imported)
'''


def _alive_in_group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are not zombies (a zombie has ended; only its parent's reap is left)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry.name))
    return alive


def _project(tmp_path: Path, hang_in: str) -> Path:
    """Four tests of ``lib.py``, whose suite hangs in ``hang_in``: the tests file (a run), or collecting (init)."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "lib.py").write_text("def double(x):\n    return 2 * x\n")
    (project / "tests" / "test_lib.py").write_text(HANGING_TEST)
    (project / "tests" / "hang.py").write_text(HANG)
    if hang_in == "collection":
        (project / "tests" / "conftest.py").write_text("import hang  # noqa: F401\n")
    return project


#: Names the suite's process (what /proc/PID/comm shows) so the host can find it, then hangs
#: (bounded). The suite can write nothing the host sees (its work folder is read-only, its
#: scratch space a tmpfs of its own) and its process ids are its PID namespace's.
HANG_NAME = "agdsuitehangs"
HANG = f"""\
import ctypes
import time

ctypes.CDLL(None).prctl(15, b"{HANG_NAME}", 0, 0, 0)  # PR_SET_NAME
time.sleep(60)  # bounded: a suite left behind by a failing command still ends
"""


def _hanging_suites() -> list[int]:
    """Host process ids of the suites that reached the hang."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/comm").read_text().strip() == HANG_NAME:
                    found.append(int(entry))
    return found


def _sigterm_while_the_suite_hangs(proc: subprocess.Popen, temp: Path) -> str:
    """Wait for the suite to hang, send SIGTERM, check nothing is left in ``temp`` and no suite process lives.

    Returns:
        The one line the command wrote.
    """
    found: list[int] = []
    pgid = None
    try:
        _wait_for(proc, lambda: found.extend(_hanging_suites()) or found, "the suite hanging")
        pid = found[0]
        pgid = os.getpgid(pid)
        assert pid in _alive_in_group(pgid)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=WAIT)
        assert proc.returncode == 143, (proc.returncode, err)
        assert sorted(p.name for p in temp.iterdir()) == []  # no sandbox root, no copy of the project
        deadline = time.monotonic() + WAIT  # SIGKILL is sent; the kernel ends the processes on its own time
        while _alive_in_group(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive_in_group(pgid) == [], "a process of the suite survived the command"
        return _stop_line(err)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)  # whatever a failing command left behind


def _init_tree(run_dir: Path, project: Path, start: bool = False, **kw):
    args = ("init", str(run_dir), "--tree", str(project), "--model", "code-model", "--base-url",
            "http://127.0.0.1:9/v1", "--api-key-env", "CLI_TEST_KEY", "--suite-timeout", "30", "--pytest-plugins", "")
    return _start(*args, **kw) if start else cli(*args)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")
def test_sigterm_in_a_tree_run_kills_the_hanging_suite_and_leaves_no_temporary_folder(tmp_path):
    run_dir = tmp_path / "run"
    made = _init_tree(run_dir, _project(tmp_path, "tests"))
    assert made.returncode == 0, made.stderr
    temp = tmp_path / "temp"  # the run's TMPDIR: its sandbox roots and its copy of the project go here
    temp.mkdir()
    proc = _start("run", str(run_dir), "--rounds", "2", "--workers", "2", env_extra={"TMPDIR": str(temp)})
    line = _sigterm_while_the_suite_hangs(proc, temp)
    assert line.startswith("terminated after 0 finished round(s) (SIGTERM); ")
    assert line.endswith(f"go on with `agentdescent resume {run_dir}`")
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["signal"]) == ("terminated", "SIGTERM")
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith((".tree.tmp-", ".status.json.tmp"))]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")
def test_sigterm_in_init_tree_leaves_no_half_made_copy(tmp_path):
    temp = tmp_path / "temp"
    temp.mkdir()
    run_dir = tmp_path / "run"
    proc = _init_tree(run_dir, _project(tmp_path, "collection"), start=True, env_extra={"TMPDIR": str(temp)})
    assert _sigterm_while_the_suite_hangs(proc, temp) == "agentdescent init: terminated (SIGTERM)"
    assert not run_dir.exists()  # its .tree.tmp-* copy removed, and the folder init made
