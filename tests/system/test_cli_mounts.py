"""Run directories on a read-only mount and on a full disk, through the command line, in real processes.

We run as root, and root writes through any file mode: a read-only folder has to be a
read-only mount, and a full disk a small tmpfs filled up. Both are made in a private
mount namespace (`Mounts`: ``unshare -m``, kept by a sleeping process; each command runs
in it through ``nsenter``), so nothing outside the test sees them; where one cannot be
made the test is skipped, naming what was missing. The test process reaches the
namespace's files through ``/proc/PID/root``. A loopback server plays the model.

Starting a process costs a second on a busy machine, so the commands that only read run
in one process (`_COMMANDS`: the console script's ``main``, each command with its own
stdout, stderr and exit code); ``run`` and the ``resume`` that follows a failed run are
processes of their own, as a user's would be.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentdescent import SqliteLedger
from agentdescent.testing.llmserver import LLMServer

from .test_cli import (
    KEY,
    ROOT,
    RULE,
    _is_proposal,
    _script,
    responder,
    snapshot,
    write_rows,
    write_tasks,
)

pytest.importorskip("openai")


class Mounts:
    """A private mount namespace where ``setup`` (shell commands) made its mounts; closed by killing its keeper."""

    def __init__(self, setup: str) -> None:
        missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
        if missing:
            pytest.skip(f"no {' or '.join(missing)} on PATH: cannot make a private mount namespace")
        self.keeper = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", f"{setup} && echo ready && exec sleep 300"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.keeper.stdout is not None
        if self.keeper.stdout.readline().strip() != "ready":
            error = self.keeper.communicate(timeout=10)[1].strip()
            pytest.skip(f"cannot make the mounts in a private mount namespace (unshare -m; {setup!r}): {error}")

    def run(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """``argv`` run inside the namespace, with the test's key and this checkout on the import path."""
        env = ["env", f"CLI_TEST_KEY={KEY}", f"PYTHONPATH={ROOT}"]
        return subprocess.run(["nsenter", "-t", str(self.keeper.pid), "-m", "--", *env, *argv],
                              capture_output=True, text=True, timeout=timeout)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """The console script, run inside the namespace."""
        return self.run(*_script(), *args)

    def commands(self, *commands: list[str]) -> list[subprocess.CompletedProcess]:
        """Each command line run through the console script's ``main`` in one process inside the namespace."""
        return _results(self.run(sys.executable, "-c", _COMMANDS, json.dumps(list(commands))))

    def seen(self, path: Path) -> Path:
        """``path`` as the namespace sees it, from outside it."""
        return Path(f"/proc/{self.keeper.pid}/root{os.path.abspath(path)}")

    def close(self) -> None:
        self.keeper.kill()
        self.keeper.communicate()


_COMMANDS = """
import contextlib, io, json, sys
from agentdescent.cli.main import main
done = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    done.append({"args": argv, "returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
print(json.dumps(done))
"""


def _results(proc: subprocess.CompletedProcess) -> list[subprocess.CompletedProcess]:
    assert proc.returncode == 0, proc
    return [subprocess.CompletedProcess(**done) for done in json.loads(proc.stdout)]


def _commands_here(*commands: list[str]) -> list[subprocess.CompletedProcess]:
    """`Mounts.commands` outside any namespace."""
    env = {**os.environ, "CLI_TEST_KEY": KEY, "PYTHONPATH": str(ROOT)}
    return _results(subprocess.run([sys.executable, "-c", _COMMANDS, json.dumps(list(commands))],
                                   capture_output=True, text=True, timeout=120, env=env))


def _one_line(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    """The command exited ``code`` with one line on stderr (the progress bar's frames aside), holding ``words``."""
    err = re.sub(r"evolve:[^\r\n]*?\]", "", proc.stderr)  # a frame ends at its "[elapsed<left, rate]"
    lines = [line for line in re.split(r"[\r\n]", err) if line.strip()]
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in err and len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


# --------------------------------------------------------------------------- finding 4: a read-only run directory


def test_every_read_only_command_works_on_a_run_directory_mounted_read_only(tmp_path):
    holdout = write_rows(tmp_path / "holdout.jsonl", [{"id": "h1", "prompt": "What is 9 + 9?", "answer": "18"}])
    out = tmp_path / "out"
    out.mkdir()
    with LLMServer(responder=responder()) as server:
        run_dir = tmp_path / "run"
        made, ran = _commands_here(
            ["init", str(run_dir), "--tasks", str(write_tasks(tmp_path / "tasks.jsonl")), "--model", "test-model",
             "--base-url", server.openai_base_url, "--api-key-env", "CLI_TEST_KEY", "--reward", "exact"],
            ["run", str(run_dir), "--rounds", "1", "--workers", "2"])
        assert made.returncode == 0 and ran.returncode == 0, (made, ran)
        before = snapshot(run_dir)
        mounts = Mounts(f"mount --bind -o ro {run_dir} {run_dir}")
        try:
            assert mounts.run("touch", str(run_dir / "probe")).returncode != 0  # read-only, for root too
            status, show, diff, export, report, own_report, evaluated = mounts.commands(
                ["status", str(run_dir)], ["show", str(run_dir)], ["show", str(run_dir), "--diff", "1", "2"],
                ["export", str(run_dir), "-o", str(out / "skill.md")],
                ["report", str(run_dir), "-o", str(out / "report.html")], ["report", str(run_dir)],
                ["eval", str(run_dir), "--tasks", str(holdout), "--json", str(out / "eval.json")])
        finally:
            mounts.close()
    assert status.returncode == 0 and status.stdout.startswith("state: finished\n"), status
    assert "damaged" not in status.stdout and "head version: 2" in status.stdout
    assert show.returncode == 0 and RULE in show.stdout, show
    assert diff.returncode == 0 and "+- " + RULE in diff.stdout, diff
    assert export.returncode == 0 and RULE in (out / "skill.md").read_text(), export
    assert report.returncode == 0 and "<html" in (out / "report.html").read_text(), report
    _one_line(own_report, 2, "is read-only", "pass -o FILE.html outside it")
    assert evaluated.returncode == 0 and "v2 of 2" in evaluated.stdout, evaluated
    assert json.loads((out / "eval.json").read_text())["version"] == 2
    assert snapshot(run_dir) == before  # nothing written inside: no -wal, no -shm, no report.html


_READ = """
import sys
from agentdescent import SqliteLedger
from agentdescent.errors import LedgerError
for path in sys.argv[1:]:
    try:
        with SqliteLedger(path, read_only=True) as led:
            print(led._ro_mode, [e.version for e in led.history("a")])
    except LedgerError as exc:
        print("refused:", exc)
"""


def test_a_ledger_on_a_read_only_mount_reads_its_log_and_says_what_it_needs_without_its_index(tmp_path):
    closed, live, orphan = (tmp_path / name for name in ("closed", "live", "orphan"))
    for folder in (closed, live, orphan):
        folder.mkdir()
    with SqliteLedger(closed / "ledger.sqlite") as led:  # closed: everything is in the file, no -wal
        led.register("a", {"n": "1"}, 0.2)
        led.commit("a", {"n": "2"}, 1)
    writer = SqliteLedger(live / "ledger.sqlite")  # a writer going on: its last commits are in its log only
    try:
        writer.register("a", {"n": "1"}, 0.2)
        writer.commit("a", {"n": "2"}, 1)
        writer.commit("a", {"n": "3"}, 2)
        for name in ("ledger.sqlite", "ledger.sqlite-wal"):  # a log left without its index (-shm)
            shutil.copyfile(live / name, orphan / name)
        mounts = Mounts(" && ".join(f"mount --bind -o ro {f} {f}" for f in (closed, live, orphan)))
        try:
            proc = mounts.run(sys.executable, "-c", _READ, *(str(f / "ledger.sqlite") for f in (closed, live, orphan)))
        finally:
            mounts.close()
    finally:
        writer.close()
    assert proc.returncode == 0, proc
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["immutable [1, 2]", "ro [1, 2, 3]"], lines
    assert lines[2].startswith("refused: ") and "holds writes not yet copied into the file" in lines[2], lines
    assert "cannot be made in the read-only folder" in lines[2]
    assert sorted(os.listdir(orphan)) == ["ledger.sqlite", "ledger.sqlite-wal"]  # nothing made there
    with SqliteLedger(orphan / "ledger.sqlite") as led:  # where the folder is writable, its log is read
        assert led.head("a") == (3, {"n": "3"})


# --------------------------------------------------------------------------- finding 5: a full disk


def test_a_full_disk_fails_the_run_as_disk_full_and_resume_refuses_until_there_is_room(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounts = Mounts(f"mount -t tmpfs -o size=2m tmpfs {disk}")
    filler = mounts.seen(disk / "filler")
    filled = threading.Event()
    lock = threading.Lock()
    stand_in = responder()

    def fill() -> None:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass  # no space left on the device: full to the last block
        finally:
            os.close(fd)

    def respond(path: str, body: dict) -> object:
        with lock:
            if _is_proposal(body) and not filled.is_set():  # mid-round 1: the disk fills up
                fill()
                filled.set()
        return stand_in(path, body)

    run_dir = disk / "run"
    try:
        with LLMServer(responder=respond) as server:
            tasks = write_tasks(tmp_path / "tasks.jsonl")
            made, = mounts.commands(["init", str(run_dir), "--tasks", str(tasks), "--model", "test-model",
                                     "--base-url", server.openai_base_url, "--api-key-env", "CLI_TEST_KEY",
                                     "--reward", "exact"])
            assert made.returncode == 0, made

            ran = mounts.cli("run", str(run_dir), "--rounds", "1", "--workers", "2")
            assert filled.is_set()
            _one_line(ran, 1, "the run failed: disk full", f"the disk holding {run_dir}",
                      f"`agentdescent resume {run_dir}`")
            status = json.loads(mounts.seen(run_dir / "status.json").read_text())
            assert status["state"] == "failed" and status["stop_reason"] == "disk full", status
            assert "free space on it" in status["error"]
            fill()  # the block the run's lock let go of, too
            resumed = mounts.cli("resume", str(run_dir))  # a process of its own, as the user's
            err = _one_line(resumed, 1, "disk full", f"the disk holding {run_dir} has 0 bytes free",
                            f"writing {run_dir}/.lock: No space left on device", "free space on it")
            assert "OSError" not in err
            assert mounts.seen(run_dir / ".lock").read_text() == ""  # not held: the run lock was let go
            shown, = mounts.commands(["status", str(run_dir)])
            assert shown.returncode == 0 and shown.stdout.startswith("state: failed: disk full\n"), shown

            filler.unlink()  # room again: the run goes on from what the ledger kept, nothing lost or doubled
            resumed, shown = mounts.commands(["resume", str(run_dir)], ["status", str(run_dir)])
            assert resumed.returncode == 0 and resumed.stdout.startswith("finished: rounds after round 1"), resumed
        assert shown.stdout.startswith("state: finished\n") and "head version: 2" in shown.stdout, shown  # checked
        rounds = [json.loads(line)["round"] for line in mounts.seen(run_dir / "rounds.jsonl").read_text().splitlines()]
        assert rounds == [1]
    finally:
        mounts.close()
