"""Kill -9 loops on four kinds of run: does every kill leave the ledger consistent and the run resumable?

Each kind of run is driven by a child process on one ledger file (or run directory),
killed with SIGKILL at a random moment (a seeded RNG draws the delay after its start),
and started again on the same file until it has been killed ``--kills`` times; a last
child then runs what is left to the end. The kinds:

- ``sync``: ``evolve`` on the offline router domain (simulated latency), on a
  `agentdescent.SqliteLedger` path;
- ``async``: ``async_evolve`` likewise (its planned work is rollouts; its rounds are merges);
- ``cli``: ``agentdescent run`` then ``agentdescent resume`` on an offline run directory:
  a loopback OpenAI-compatible server (``agentdescent/testing/llmserver.py``) plays the model, on sums,
  differences, products and parity questions, one rule each to learn;
- ``tree``: ``agentdescent init RUN --tree DIR`` on examples/code_project, then ``run`` and
  ``resume``; the loopback server plays the code model with the seeded patches of
  examples/code_evolution.py (right 15 % of the time, else wrong or regressing, so four of
  the five bugs take several rounds to fix; the fifth it never fixes, so every round
  still waits for the model).

The sync and async children are killed by pid, the command-line ones by process group
(they run in a session of their own). The bench is the children's subreaper, so any
process that outlives a kill (a suite run of the tree kind, which the sandbox starts in a
session of its own) becomes the bench's child: it is counted, then its group is killed.

After every kill, with the ledger opened read-only (`SqliteLedger(read_only=True)`, as
``agentdescent status`` does, so the bench writes nothing between the kill and the next
child), the check is: the file opens (its open-time history check passes); the saved
progress reads (`agentdescent.engine.progress.read_progress`, which adopts a commit made
after the last save); the head version is 1 + the commits the progress records; the
saved rounds are numbered 1..N and the rounds saved before the kill are a prefix of them
(nothing lost or rewritten); for a run directory, ``rounds.jsonl`` is numbered 1..M with
M at most one behind the ledger (a kill between a round's save and its line), each line
agreeing with the ledger's round. A kind whose check fails stops at that kill, and the
script exits 1. The next child starting and going on without error is the check that the
run resumes; the last one must finish the planned work on the ledger. For a run
directory the table also says whether ``rounds.jsonl``, ``status.json`` and
``result.json`` then agree with the ledger (``run directory says finished``), and what the
kills left behind: processes that outlived them, and temporary folders (the children's
``TMPDIR`` is the bench's, so each one left is counted).

    python bench/kill_loops.py --kills 10 --json /tmp/kill_loops.json

With ``--end-probe`` a 3-round ``cli`` and ``tree`` run is also killed in the one window a
random delay seldom hits: right after its last round's line is in ``rounds.jsonl`` (polled
every 2 ms), before the run's end is written; ``resume`` then runs, and the table says
what the run directory and ``agentdescent status`` say after it (``--kinds ''`` for the
probe alone).

    python bench/kill_loops.py --kinds '' --end-probe --json /tmp/kill_loops_end.json
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent import SqliteLedger  # noqa: E402
from agentdescent.engine.progress import read_progress  # noqa: E402
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body  # noqa: E402
from bench.jsonout import write_json  # noqa: E402
from examples.code_evolution import PATCHES  # noqa: E402

ARTIFACT = "artifact"  # the artifact id of evolve's default and of the command line
KEY_ENV, KEY = "KILL_LOOPS_KEY", "sk-kill-loops-0123456789"
PROJECT = ROOT / "examples" / "code_project"
KINDS = ("sync", "async", "cli", "tree")

#: Per kind: the planned work (rounds; rollouts for async), workers, the latency (the router domain's median
#: rollout latency, or the loopback model's reply delay, in seconds) and the window the kill delay is drawn
#: from (seconds after the child's start: its early part lands in the child's imports and its opening, the
#: rest in its rounds; a child's opening took about 1 s (cli, tree: 2 to 4 s) on 2 shared cores, and a sync or
#: async child records its first round 2.5 to 4.5 s after its start: its starting evaluation and the first decision).
PLAN: dict[str, dict[str, Any]] = {
    "sync": {"rounds": 150, "workers": 4, "latency": 0.03, "window": (0.5, 8.0)},
    "async": {"rollouts": 2400, "workers": 4, "latency": 0.03, "window": (0.5, 8.0)},
    "cli": {"rounds": 300, "workers": 2, "latency": 0.1, "window": (1.5, 7.0)},
    "tree": {"rounds": 40, "workers": 2, "latency": 0.5, "window": (1.5, 6.0)},
}

SYNC_CHILD = """
import sys
sys.path.insert(0, {root!r})
from agentdescent import evolve
from agentdescent.domains.router import RouterDomain
evolve(**RouterDomain(seed={seed}, latency={latency}).evolve_kwargs(), rounds={left}, seed={seed},
       ledger={ledger!r}, max_concurrency={workers})
"""

ASYNC_CHILD = """
import sys
sys.path.insert(0, {root!r})
from agentdescent import async_evolve
from agentdescent.domains.router import RouterDomain
async_evolve(**RouterDomain(seed={seed}, latency={latency}).evolve_kwargs(), max_rollouts={left}, seed={seed},
             ledger={ledger!r}, n_workers={workers}, max_seconds=600.0)
"""

# --------------------------------------------------------------------------- the stand-in models

#: The command-line kind's questions: (the prompt's pattern, its answer, the one rule that makes the stand-in
#: answer it bare). Until the playbook holds a kind's rule, the stand-in answers in a sentence, wrong under
#: the ``exact`` reward.
QUESTIONS = {
    "sum": (r"What is (\d+) \+ (\d+)\?", lambda a, b: str(a + b), "Give a sum as the bare number only."),
    "difference": (r"What is (\d+) - (\d+)\?", lambda a, b: str(a - b),
                   "Give a difference as the bare number only."),
    "product": (r"What is (\d+) \* (\d+)\?", lambda a, b: str(a * b), "Give a product as the bare number only."),
    "parity": (r"Is (\d+) even or odd\?", lambda n, _: "odd" if n % 2 else "even",
               "Answer a parity question with the single word even or odd."),
}
PROMPTS = {"sum": "What is {a} + {b}?", "difference": "What is {a} - {b}?", "product": "What is {a} * {b}?",
           "parity": "Is {a} even or odd?"}


def cli_tasks(n_each: int = 6) -> list[dict[str, Any]]:
    """Six questions of each kind, their kind as the ``category`` the split is stratified by."""
    return [{"id": f"{kind}-{i}", "prompt": PROMPTS[kind].format(a=3 + 7 * i, b=2 + i),
             "answer": QUESTIONS[kind][1](3 + 7 * i, 2 + i), "category": kind}
            for kind in QUESTIONS for i in range(n_each)]


def _question(text: str) -> tuple[str, str] | None:
    """(kind, right answer) of the first question in ``text``."""
    found = [(m.start(), kind, m) for kind, (pattern, _, _) in QUESTIONS.items() if (m := re.search(pattern, text))]
    if not found:
        return None
    _, kind, m = min(found, key=lambda f: f[0])
    numbers = [int(g) for g in m.groups()] + [0]
    return kind, QUESTIONS[kind][1](numbers[0], numbers[1])


def cli_model(delay: float):
    """Answers bare under its kind's rule, else in a sentence; proposes the rule of the task it is shown."""
    def respond(path: str, body: Any) -> Reply:
        messages = body["messages"]
        user = messages[-1]["content"]
        if "ONE general rule" in user:  # a proposal: the failing task is quoted in it
            q = _question(user.split("Task:", 1)[-1])
            return Reply(200, openai_body(QUESTIONS[q[0]][2] if q else "NONE"), delay=delay)
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        q = _question(user)
        if q is None:
            return Reply(200, openai_body("?"), delay=delay)
        kind, answer = q
        text = answer if QUESTIONS[kind][2] in system else f"I think the answer is {answer}."
        return Reply(200, openai_body(text), delay=delay)

    return respond


#: How often the code model's patch is the right one (examples/code_evolution.py's proposer: half the time).
RIGHT = 0.15
#: The bug whose right patch the code model never writes (only its wrong one), so the run never converges and
#: every round still waits for a reply: a round's time stays bounded below by the model's, not by the cache.
UNFIXED = "TestClamp"


def code_model(seed: int, delay: float):
    """The code model: for a failing test, one patch of its group from examples/code_evolution.py, seeded.

    Right 15 % of the time (`RIGHT`; never for `UNFIXED`), else one of the group's wrong or
    regressing patches; the draw is seeded by ``seed``, the group and how often it was
    asked (the count lives in the bench, so it goes on across the kills).
    """
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def respond(path: str, body: Any) -> Reply:
        user = body["messages"][-1]["content"]
        if "You are fixing the code of a project" not in user:
            return Reply(500, {"error": {"message": "a tree run must not ask the model to solve a task"}})
        m = re.search(r"::(Test\w+)::", user.split("The failing test:", 1)[-1])
        if m is None or m.group(1) not in PATCHES:
            return Reply(200, openai_body("NONE"), delay=delay)
        group = m.group(1)
        with lock:
            n = asked[group] = asked.get(group, 0) + 1
        rng = random.Random(f"{seed}:{group}:{n}")
        right = [p for kind, p in PATCHES[group] if kind == "right" and group != UNFIXED]
        others = [p for kind, p in PATCHES[group] if kind != "right"]
        patch = right[0] if right and (rng.random() < RIGHT or not others) else rng.choice(others)
        return Reply(200, openai_body(patch, prompt_tokens=400, completion_tokens=120), delay=delay)

    return respond


# --------------------------------------------------------------------------- processes


def _become_subreaper() -> bool:
    """Make this process the subreaper of its descendants (Linux), so one orphaned by a kill is ours to see."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    return False


def _orphans() -> list[tuple[int, bool, str]]:
    """Processes whose parent is this one (orphans of a killed child, re-parented here): pid, alive, command line.

    A zombie (it has exited; only its reaping is left) is not alive.
    """
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
            if int(ppid) == me:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(entry), state not in ("Z", "X"), cmd.strip()))
        except (OSError, ValueError):
            continue
    return found


def _end_orphans() -> list[str]:
    """Kill the process group of every orphan of a killed child and reap it; returns the command lines of
    those still alive when first seen (each process once)."""
    outlived = [cmd for _, alive, cmd in _orphans() if alive]
    for _ in range(50):  # an orphan's own children are re-parented here as it dies
        left = _orphans()
        if not left:
            break
        for pid, _, _ in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                group = os.getpgid(pid)
                if group != os.getpgrp():  # never the bench's own group
                    os.kill(-group, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return outlived


@dataclass
class Child:
    """One child's end: killed by the bench, exited by itself (its code), or over its time bound."""

    killed: bool
    returncode: int | None
    seconds: float
    timed_out: bool = False
    outlived: list[str] = field(default_factory=list)
    log_tail: str = ""


def run_child(argv: list[str], env: dict[str, str], *, group: bool, kill_after: float | None, timeout: float,
              log: Path, kill_when: Callable[[], bool] | None = None) -> Child:
    """Start ``argv``; SIGKILL it (its group with ``group``) after ``kill_after`` s, or wait up to ``timeout`` s.

    With ``kill_when``, the kill comes instead as soon as ``kill_when()`` is true (polled every 2 ms).
    """
    start = time.monotonic()
    with log.open("ab") as out:
        out.write(f"\n==== {' '.join(argv[:3])} ... (kill after {kill_after})\n".encode())
        out.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                                start_new_session=group)
    limit = timeout if kill_after is None else min(kill_after, timeout)
    try:
        if kill_when is None:
            proc.wait(timeout=limit)
        else:
            while proc.poll() is None and not kill_when():
                if time.monotonic() - start > limit:
                    raise subprocess.TimeoutExpired(argv, limit)
                time.sleep(0.002)
            if proc.poll() is None:
                raise subprocess.TimeoutExpired(argv, limit)
        return Child(False, proc.returncode, time.monotonic() - start, log_tail=_tail(log))
    except subprocess.TimeoutExpired:
        os.kill(-proc.pid if group else proc.pid, signal.SIGKILL)
        proc.wait()
        seconds = time.monotonic() - start
        outlived = _end_orphans()
        over = kill_when is not None and seconds >= limit or kill_when is None and (
            kill_after is None or kill_after > timeout)
        return Child(True, proc.returncode, seconds, timed_out=over, outlived=outlived, log_tail=_tail(log))


def _tail(log: Path, lines: int = 6) -> str:
    text = log.read_text(errors="replace").rstrip().splitlines()
    return "\n".join(line[-300:] for line in text[-lines:])


def _script() -> list[str]:
    found = shutil.which("agentdescent", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "agentdescent"]


# --------------------------------------------------------------------------- what a kill left


@dataclass
class Snapshot:
    """What the ledger (and the run directory's view) held after a kill."""

    ledger: str = "absent"  # absent / ok / refused
    error: str | None = None
    head: int | None = None
    rounds: list[tuple[int, int | None, int]] = field(default_factory=list)  # (index, head_version, committed)
    commits: int = 0
    adopted: int = 0
    rollouts: int = 0
    view: list[dict[str, Any]] | None = None  # rounds.jsonl's rows (a run directory only)
    torn: bool = False  # rounds.jsonl's last line cut short
    leftovers: list[str] = field(default_factory=list)


def snapshot(ledger: Path, rounds_file: Path | None, tmp: Path | None) -> Snapshot:
    snap = Snapshot()
    snap.leftovers = sorted(p.name for p in ledger.parent.glob(f".{ledger.name}.*.new"))
    if tmp is not None:
        snap.leftovers += sorted(p.name for p in tmp.iterdir() if p.name.startswith("agentdescent-"))
    if rounds_file is not None and rounds_file.exists():
        snap.view = []
        text = rounds_file.read_text(encoding="utf-8")
        for line in text.splitlines():
            try:
                snap.view.append(json.loads(line))
            except ValueError:
                snap.torn = True
        snap.torn = snap.torn or bool(text and not text.endswith("\n"))
    if not ledger.exists():
        return snap
    try:
        with SqliteLedger(ledger, read_only=True) as led:
            snap.head = led.versions().get(ARTIFACT)
            progress = read_progress(led, ARTIFACT)
    except Exception as exc:  # what refuses the file is the finding
        snap.ledger, snap.error = "refused", f"{type(exc).__name__}: {exc}"
        return snap
    snap.ledger = "ok"
    if progress is not None:
        snap.rounds = [(r.index, r.head_version, r.committed) for r in progress.rounds]
        snap.commits, snap.adopted = progress.commits, len(progress.adopted)
        snap.rollouts = sum(r.rollouts for r in progress.rounds)
    return snap


def problems(before: Snapshot, after: Snapshot) -> tuple[list[str], list[str]]:
    """(what is inconsistent, what is only worth noting) in ``after``, the state after a kill from ``before``."""
    bad: list[str] = []
    notes: list[str] = []
    if after.ledger == "refused":
        return [f"the ledger was refused: {after.error}"], notes
    if after.ledger == "absent":
        if before.ledger != "absent":
            bad.append("the ledger file is gone")
        if after.view:
            bad.append(f"rounds.jsonl holds {len(after.view)} line(s) but there is no ledger")
        return bad, notes
    if after.head is not None and after.head != 1 + after.commits:
        bad.append(f"head v{after.head}, but the saved progress records {after.commits} commit(s)")
    if after.head is None and after.rounds:
        bad.append(f"{len(after.rounds)} saved round(s) but no artifact in the ledger")
    indexes = [r[0] for r in after.rounds]
    if indexes != list(range(1, len(indexes) + 1)):
        bad.append(f"saved rounds not numbered 1..{len(indexes)}: {indexes}")
    if after.rounds[:len(before.rounds)] != before.rounds:
        bad.append(f"the {len(before.rounds)} round(s) saved before the kill are not a prefix of the "
                   f"{len(after.rounds)} saved after it")
    if before.head is not None and (after.head or 0) < before.head:
        bad.append(f"the head went back from v{before.head} to v{after.head}")
    if after.adopted:
        notes.append(f"{after.adopted} orphan commit(s) adopted")
    if after.view is not None:
        numbers = [row.get("round") for row in after.view]
        if numbers != list(range(1, len(numbers) + 1)):
            bad.append(f"rounds.jsonl not numbered 1..{len(numbers)}: {numbers}")
        if len(numbers) > len(after.rounds) or len(after.rounds) - len(numbers) > 1:
            bad.append(f"rounds.jsonl holds {len(numbers)} round(s), the ledger {len(after.rounds)}")
        elif len(numbers) < len(after.rounds):
            notes.append("rounds.jsonl one round behind the ledger")
        for row, (index, head, committed) in zip(after.view, after.rounds):
            if (row.get("head_version"), row.get("committed")) != (head, committed):
                bad.append(f"rounds.jsonl's round {index} (head v{row.get('head_version')}, {row.get('committed')} "
                           f"commit(s)) disagrees with the ledger's (head v{head}, {committed})")
                break
        if after.torn:
            notes.append("rounds.jsonl's last line torn")
    return bad, notes


# --------------------------------------------------------------------------- the kinds


@dataclass
class Kind:
    """How to start, restart and judge one kind of run in its own folder."""

    name: str
    tmp: Path
    seed: int
    latency: float
    rounds: int | None = None  # the planned rounds instead of PLAN's (the end probe's short runs)
    server: LLMServer | None = None
    run_dir: Path | None = None

    @property
    def plan(self) -> dict[str, Any]:
        return PLAN[self.name] if self.rounds is None else {**PLAN[self.name], "rounds": self.rounds}

    @property
    def ledger(self) -> Path:
        return self.run_dir / "ledger.sqlite" if self.run_dir else self.tmp / "run.sqlite"

    @property
    def rounds_file(self) -> Path | None:
        return self.run_dir / "rounds.jsonl" if self.run_dir else None

    @property
    def group(self) -> bool:
        return self.run_dir is not None

    def env(self) -> dict[str, str]:
        return {**os.environ, KEY_ENV: KEY, "PYTHONPATH": str(ROOT), "TMPDIR": str(self.suite_tmp)}

    @property
    def suite_tmp(self) -> Path:
        return self.tmp / "tmp"

    def setup(self) -> None:
        self.suite_tmp.mkdir()
        def quiet(request: Any, client_address: Any) -> None:  # a killed client resets its connection: no traceback
            pass

        if self.name == "cli":
            self.server = LLMServer(responder=cli_model(self.latency))
            self.server._httpd.handle_error = quiet
            tasks = self.tmp / "tasks.jsonl"
            tasks.write_text("".join(json.dumps(r) + "\n" for r in cli_tasks()), encoding="utf-8")
            self.run_dir = self.tmp / "run"
            self._init("--tasks", str(tasks), "--model", "stand-in", "--reward", "exact", "--stratify", "category")
        elif self.name == "tree":
            self.server = LLMServer(responder=code_model(self.seed, self.latency))
            self.server._httpd.handle_error = quiet
            project = self.tmp / "project"
            shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
            self.run_dir = self.tmp / "run"
            self._init("--tree", str(project), "--model", "code-model", "--suite-timeout", "30",
                       "--pytest-plugins", "")

    def _init(self, *flags: str) -> None:
        assert self.server is not None and self.run_dir is not None
        proc = subprocess.run([*_script(), "init", str(self.run_dir), *flags, "--base-url",
                               self.server.openai_base_url, "--api-key-env", KEY_ENV, "--seed", str(self.seed)],
                              capture_output=True, text=True, env=self.env(), timeout=120)
        if proc.returncode != 0:
            raise SystemExit(f"{self.name}: agentdescent init failed: {proc.stderr.strip()}")

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def argv(self, snap: Snapshot) -> list[str]:
        """The next child's command: what is left of the planned work, from what the ledger saved."""
        workers = self.plan["workers"]
        if self.name in ("sync", "async"):
            if self.name == "sync":
                code, left = SYNC_CHILD, max(0, self.plan["rounds"] - len(snap.rounds))
            else:
                code, left = ASYNC_CHILD, max(0, self.plan["rollouts"] - snap.rollouts)
            return [sys.executable, "-c", code.format(root=str(ROOT), seed=self.seed, latency=self.latency,
                                                      left=left, ledger=str(self.ledger), workers=workers)]
        if not self.ledger.exists():  # killed before its ledger was made: `run` again (resume needs one)
            return [*_script(), "run", str(self.run_dir), "--rounds", str(self.plan["rounds"]),
                    "--workers", str(workers)]
        return [*_script(), "resume", str(self.run_dir)]

    def done(self, snap: Snapshot) -> bool:
        if self.name == "async":
            return snap.rollouts >= self.plan["rollouts"]
        return len(snap.rounds) >= self.plan["rounds"]

    def planned(self) -> str:
        return f"{self.plan['rollouts']} rollouts" if self.name == "async" else f"{self.plan['rounds']} rounds"

    def final_checks(self, snap: Snapshot) -> tuple[list[str], list[str]]:
        """(what the ledger lacks, what the run directory's files say otherwise) once the last child has ended."""
        short = [] if self.done(snap) else [
            f"ended short of the plan: {len(snap.rounds)} round(s), {snap.rollouts} rollout(s) of {self.planned()}"]
        said: list[str] = []
        if self.run_dir is not None:
            view = [(row.get("round"), row.get("head_version"), row.get("committed")) for row in snap.view or []]
            if view != snap.rounds:
                said.append(f"rounds.jsonl holds {len(view)} round(s), the ledger {len(snap.rounds)}")
            status = json.loads((self.run_dir / "status.json").read_text())
            if status.get("state") != "finished" or status.get("round") != len(snap.rounds):
                said.append(f"status.json says {status.get('state')!r} at round {status.get('round')}")
            result = self.run_dir / "result.json"
            if not result.exists():
                said.append("no result.json")
            elif json.loads(result.read_text()).get("version") != snap.head:
                said.append("result.json's version is not the ledger's head")
        return short, said


def kill_loop(kind: Kind, kills: int, rng: random.Random, timeout: float) -> dict[str, Any]:
    """Kill ``kind``'s children ``kills`` times, then let one finish; stops at the first inconsistency found."""
    kind.setup()
    log = kind.tmp / "children.log"
    before = snapshot(kind.ledger, kind.rounds_file, kind.suite_tmp)
    cycles: list[dict[str, Any]] = []
    failure: dict[str, Any] | None = None
    final: dict[str, Any] | None = None
    start = time.monotonic()
    while True:
        kill_after = rng.uniform(*kind.plan["window"]) if len(cycles) < kills else None
        argv = kind.argv(before)
        child = run_child(argv, kind.env(), group=kind.group, kill_after=kill_after, timeout=timeout, log=log)
        after = snapshot(kind.ledger, kind.rounds_file, kind.suite_tmp)
        bad, notes = problems(before, after)
        if child.timed_out:
            bad.append(f"the child ran past its time bound ({timeout:g} s)")
        if not child.killed and child.returncode != 0:
            bad.append(f"the child failed (exit {child.returncode}): {child.log_tail}")
        if not child.killed or bad:
            if not child.killed and not bad:
                short, said = kind.final_checks(after)
                final = {"problems": short, "run_directory": said, "seconds": round(child.seconds, 2),
                         "command": argv[1] if kind.run_dir else "evolve", "log_tail": child.log_tail}
                if short:
                    failure = {"after_kill": len(cycles), "problems": short, "child": "the last, run to its end"}
            else:
                failure = {"after_kill": len(cycles) + child.killed, "problems": bad,
                           "child": "killed" if child.killed else "the next, not killed"}
        if child.killed:
            cycles.append({
                "kill": len(cycles) + 1, "after_seconds": round(child.seconds, 2), "consistent": not bad,
                "problems": bad, "notes": notes, "outlived_the_kill": child.outlived,
                "ledger": after.ledger, "head": after.head, "rounds_saved": len(after.rounds),
                "rounds_saved_by_the_killed_child": len(after.rounds) - len(before.rounds),
                "commits_recorded": after.commits, "rollouts_saved": after.rollouts,
                "commits_by_the_killed_child": after.commits - before.commits,
                "planned_work_saved": after.ledger == "ok" and kind.done(after),
                "rounds_jsonl_lines": None if after.view is None else len(after.view),
                "leftovers": after.leftovers,
            })
            print(f"  {kind.name} kill {len(cycles)} at {child.seconds:.2f} s: {after.ledger}, "
                  f"{len(after.rounds)} round(s), head v{after.head}, {after.commits} commit(s)"
                  f"{'' if not bad else ' -- INCONSISTENT: ' + '; '.join(bad)}"
                  f"{'' if not notes else ' (' + '; '.join(notes) + ')'}"
                  f"{'' if not child.outlived else f' ({len(child.outlived)} process(es) outlived it)'}",
                  file=sys.stderr, flush=True)
        if failure is not None or final is not None:
            break
        before = after
    seconds = time.monotonic() - start
    kind.close()
    leftovers = sorted(set(after.leftovers))
    return {
        "kind": kind.name, "planned": kind.planned(), "kills": len(cycles),
        "consistent_after_each_kill": all(c["consistent"] for c in cycles),
        "resumed_to_completion": final is not None and not final["problems"],
        "run_directory_finished": None if kind.run_dir is None else bool(final) and not final["run_directory"],
        "final": final, "final_rounds": len(after.rounds), "final_rollouts": after.rollouts, "head": after.head,
        "commits_in_ledger": None if after.head is None else after.head - 1, "commits_recorded": after.commits,
        "orphans_adopted": sum("orphan" in " ".join(c["notes"]) for c in cycles),
        "kills_before_a_save_of_the_child": sum(c["rounds_saved_by_the_killed_child"] == 0 for c in cycles),
        "kills_before_the_first_save": sum(c["rounds_saved"] == 0 for c in cycles),
        "kills_after_a_save_of_the_child": sum(c["rounds_saved_by_the_killed_child"] > 0 for c in cycles),
        "kills_after_a_commit_of_the_child": sum(c["commits_by_the_killed_child"] > 0 for c in cycles),
        "kills_after_the_planned_work": sum(c["planned_work_saved"] for c in cycles),
        "view_behind": sum("behind" in " ".join(c["notes"]) for c in cycles),
        "torn_lines": sum("torn" in " ".join(c["notes"]) for c in cycles),
        "processes_outliving_kills": sum(len(c["outlived_the_kill"]) for c in cycles),
        "leftovers_at_end": leftovers, "failure": failure, "seconds": round(seconds, 1), "cycles": cycles,
    }


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except OSError:
        return 0


def end_probe(kind: Kind, timeout: float) -> dict[str, Any]:
    """Kill a short run directory's child as soon as its last round's line is in rounds.jsonl, then resume it.

    The window between the last round's save and the ``status.json``/``result.json`` of its
    end is one a random delay seldom hits; polling ``rounds.jsonl`` every 2 ms lands in it.
    """
    kind.setup()
    assert kind.run_dir is not None and kind.rounds_file is not None
    log, rounds_file, planned = kind.tmp / "children.log", kind.rounds_file, kind.plan["rounds"]
    killed = run_child(kind.argv(Snapshot()), kind.env(), group=True, kill_after=None, timeout=timeout, log=log,
                       kill_when=lambda: _lines(rounds_file) >= planned)
    after_kill = snapshot(kind.ledger, rounds_file, kind.suite_tmp)
    status_kill = json.loads((kind.run_dir / "status.json").read_text())
    resumed = subprocess.run(kind.argv(after_kill), capture_output=True, text=True, env=kind.env(), timeout=timeout)
    end = snapshot(kind.ledger, rounds_file, kind.suite_tmp)
    bad, _ = problems(after_kill, end)
    short, said = kind.final_checks(end)
    shown = subprocess.run([*_script(), "status", str(kind.run_dir)], capture_output=True, text=True,
                           env=kind.env(), timeout=timeout)
    kind.close()

    def lines(text: str) -> list[str]:
        return [line.replace(str(kind.run_dir), "RUN") for line in text.strip().splitlines()]

    return {
        "kind": kind.name, "planned": planned, "killed": killed.killed, "killed_after_seconds": round(killed.seconds, 2),
        "rounds_saved_at_the_kill": len(after_kill.rounds), "rounds_jsonl_lines_at_the_kill": len(after_kill.view or []),
        "status_at_the_kill": {k: status_kill.get(k) for k in ("state", "round")},
        "result_json_at_the_kill": (kind.run_dir / "result.json").exists(),
        "resume": {"argv": lines(" ".join(kind.argv(after_kill)[1:])), "exit": resumed.returncode,
                   "said": lines(resumed.stdout or resumed.stderr)[-1:]},
        "ledger_consistent": not bad and not short, "ledger_problems": bad + short,
        "run_directory_after_resume": said, "status_says": lines(shown.stdout)[:1],
    }


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10, help="kill -9 cycles per kind (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill delays, the runs and the code model")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    parser.add_argument("--plan", action="append", default=[], metavar="KIND=N",
                        help="override a kind's planned rounds (rollouts for async), repeatable")
    parser.add_argument("--latency", type=float, help="override every kind's latency (s; default: its own)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds one child may run (default 180)")
    parser.add_argument("--end-probe", action="store_true",
                        help="also kill a 3-round cli and tree run right after its last round's line, then resume it")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        parser.error(f"--kinds: unknown {unknown}; use some of {', '.join(KINDS)}")
    for item in args.plan:
        name, _, n = item.partition("=")
        if name not in KINDS or not n.isdigit() or int(n) < 1:
            parser.error(f"--plan {item!r}: use KIND=N, KIND one of {', '.join(KINDS)} and N >= 1")
        PLAN[name]["rollouts" if name == "async" else "rounds"] = int(n)
    reaper = _become_subreaper()
    rng = random.Random(args.seed)
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kill-loops-") as tmp:
        for name in kinds:
            folder = Path(tmp) / name
            folder.mkdir()
            latency = PLAN[name]["latency"] if args.latency is None else args.latency
            row = kill_loop(Kind(name, folder, args.seed, latency), args.kills, rng, args.timeout)
            row["subreaper"] = reaper
            rows.append(row)
            if row["failure"]:  # that kind's loop stopped at it; the other kinds are independent
                print(f"{name}: FOUND {row['failure']}", file=sys.stderr)
            if row["final"] and row["final"]["run_directory"]:
                print(f"{name}: the run directory after the last child ({row['final']['command']}): "
                      f"{'; '.join(row['final']['run_directory'])}", file=sys.stderr)
        probes = []
        for name in ("cli", "tree") if args.end_probe else ():
            folder = Path(tmp) / f"{name}-end"
            folder.mkdir()
            probes.append(end_probe(Kind(name, folder, args.seed, PLAN[name]["latency"], rounds=3), args.timeout))
    seconds = time.monotonic() - started
    if rows:
        print("| kind | kills | consistent after each kill | resumed to completion | final rounds (planned) | "
              "commits in the ledger / recorded (orphans adopted) | run directory says finished | seconds |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            final = (f"{r['final_rounds']} merges ({r['final_rollouts']} of {r['planned']})" if r["kind"] == "async"
                     else f"{r['final_rounds']} ({r['planned']})")
            print(f"| {r['kind']} | {r['kills']} | {_yes(r['consistent_after_each_kill'])} | "
                  f"{_yes(r['resumed_to_completion'])} | {final} | {r['commits_in_ledger']} / "
                  f"{r['commits_recorded']} ({r['orphans_adopted']}) | {_yes(r['run_directory_finished'])} | "
                  f"{r['seconds']} |")
        print()
        print("| kind | kills before the child saved a round (before the run's first save) / after (after a commit "
              "of its own) | kills after the last planned round's save | rounds.jsonl one round behind / last line "
              "torn | processes outliving a kill | temporary folders and files left at the end |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            view = f"{r['view_behind']} / {r['torn_lines']}" if r["kind"] in ("cli", "tree") else "-"
            print(f"| {r['kind']} | {r['kills_before_a_save_of_the_child']} ({r['kills_before_the_first_save']}) / "
                  f"{r['kills_after_a_save_of_the_child']} ({r['kills_after_a_commit_of_the_child']}) | "
                  f"{r['kills_after_the_planned_work']} | {view} | {r['processes_outliving_kills']} | "
                  f"{len(r['leftovers_at_end'])} |")
    if probes:
        if rows:
            print()
        print("| kind (3 rounds) | killed after the last round's line | rounds saved / in rounds.jsonl | status.json "
              "then | `resume` then | the run directory after it | `agentdescent status` says |")
        print("|---|---|---|---|---|---|---|")
        for p in probes:
            st, res = p["status_at_the_kill"], p["resume"]
            print(f"| {p['kind']} | {'yes' if p['killed'] else 'no (it ended first)'}, at {p['killed_after_seconds']} s | "
                  f"{p['rounds_saved_at_the_kill']} / {p['rounds_jsonl_lines_at_the_kill']} | {st['state']}, round "
                  f"{st['round']}{'' if p['result_json_at_the_kill'] else ', no result.json'} | exit {res['exit']}: "
                  f"{' '.join(res['said'])} | {'; '.join(p['run_directory_after_resume']) or 'finished'} | "
                  f"{' '.join(p['status_says'])} |")
    print(f"({seconds:.0f} s in all)", file=sys.stderr)
    write_json(args.json, {"seconds": round(seconds, 1), "seed": args.seed, "plan": PLAN, "kinds": rows,
                           "end_probes": probes})
    return 0 if all(not r["failure"] for r in rows) and all(p["ledger_consistent"] for p in probes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
