"""`TestSuite`: a project's own tests as the tasks and the reward of an evolving file tree.

This module owns what a test run means to the engine: discovering the tests as tasks
(one per pytest node id, `TestSuite.tasks`), running the whole suite **once** per state in
a fresh sandbox (`agentdescent.code.Sandbox`; cached by the state's hash, so one run
scores every task of that state, and concurrent askers of one state wait for the one
run), deciding whether that run's results can be believed, and turning each test's
result into the engine's ``run`` output and reward (`agentdescent.rewards.builtin.Score`: 1.0 for
a pass, else 0.0 with the assertion message as feedback, which reaches the proposer). A
crash, a timeout or a collection error is a score of 0 with feedback saying so, never a
failed run. `TestSuite.evolve_kwargs` wires it all into `evolve`/`async_evolve`.

**Results the candidate cannot write.** pytest runs through ``agentdescent/code/_runner.py``
(``python -I``: a ``pytest.py`` in the tree shadows nothing), which reports every test on
the sandbox's results channel (``Sandbox.run(..., channel=True)``: a descriptor the
command can only append to, outside its folder) with the run's nonce. The records are
believed only if every line is one, in order, carrying the nonce, with one end record,
last, whose counts and exit status agree with the records and with the process's own
exit status (`agentdescent.code.reports.read_channel` checks); anything else (a crash or ``os._exit`` before the end, a line
after it, a record the runner saw tampered with) scores every test 0 and is counted as
``untrusted``. `TestSuite.veto` re-runs the files of the tests a candidate newly passes,
one file per process, and refuses a candidate whose tests say otherwise alone. A custom
``command=`` writes JUnit XML instead, which a test can forge: only the exit status is
checked against it there.

It must not run anything outside its sandbox, write into the project folder it was given,
or call a model.
"""

from __future__ import annotations

import ast
import os
import shlex
import sys
import textwrap
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..merge.aggregator_config import AggregatorConfig
from ..rewards.builtin import Score
from ..types import Task, clip_middle
from .base import SandboxedReward, split_command
from .cache import RunCache, state_hash
from .reports import CUT_OFF, NO_END, TEST_OUTCOMES, read_channel, read_junit
from .sandbox import Sandbox, SandboxRun
from .tree import FileTree

__all__ = ["SuiteRun", "TestOutcome", "TestSuite"]

#: Where a custom ``command=``'s JUnit XML is written, relative to the sandbox's working folder.
JUNIT_PATH = ".agentdescent/junit.xml"

#: The runner the default pytest command starts (a standalone script; see its docstring).
RUNNER = str(Path(__file__).resolve().with_name("_runner.py"))

#: Longest feedback kept per test (head and tail of the failure text).
MAX_FEEDBACK_CHARS = 1200

_PASS = "PASSED"


@dataclass(frozen=True)
class TestOutcome:
    """One test's result in one suite run.

    Args:
        node: the test's id (a pytest node id).
        outcome: ``"passed"``, ``"failed"``, ``"error"``, ``"skipped"``, ``"timeout"``
            (the suite was killed before it reported), ``"not run"`` (the suite crashed,
            or the test was not collected) or ``"untrusted"`` (the run's results could not
            be believed: `agentdescent.code.reports.read_channel` says why).
        message: what the runner said (the assertion message, a traceback tail), cut to
            ``MAX_FEEDBACK_CHARS``.
    """

    __test__ = False  # not a pytest test class

    node: str
    outcome: str
    message: str = ""

    @property
    def passed(self) -> bool:
        """Did the test pass?"""
        return self.outcome == "passed"

    def line(self) -> str:
        """The engine's ``run`` output for this test: ``PASSED node`` or ``FAILED node`` and the message."""
        head = f"{self.outcome.upper().replace(' ', '_')} {self.node}"
        return head if not self.message else f"{head}\n{self.message}"


@dataclass(frozen=True)
class SuiteRun:
    """One run of the whole suite on one state.

    Args:
        outcomes: node id -> its `TestOutcome`, for every known test.
        sandbox: the sandbox run (exit status, wall time, output).
        seconds: the wall time of the run, copying included.
        untrusted: why the run's results were not believed (every test then scores 0),
            or None.
    """

    outcomes: dict[str, TestOutcome]
    sandbox: SandboxRun
    seconds: float
    untrusted: str | None = None

    @property
    def passed(self) -> int:
        """Tests that passed."""
        return sum(o.passed for o in self.outcomes.values())


def _cut(text: str, limit: int = MAX_FEEDBACK_CHARS) -> str:
    return clip_middle(text.strip(), limit)


class TestSuite(SandboxedReward[SuiteRun]):
    """A project folder whose tests score an evolving file tree, run in a sandbox.

    With the default runner (``command=None``) the results are read from the sandbox's
    results channel only, and believed only when they hold together
    (`agentdescent.code.reports.read_channel`):
    the process that runs the tests can neither shadow pytest (the runner starts with
    ``python -I``, before any project code), nor end early and keep what it reported
    (no end record: every test scores 0), nor add a result after the end (an exit hook:
    every test scores 0), nor report an exit status other than the one it ended with. What
    it can still do from inside is lie about itself (read the nonce from the runner's
    memory and write records of its own): the tree's machinery scan, which refuses diffs
    calling ``os._exit``, ``atexit`` and the like, is what narrows that.

    Args:
        directory: the project: the files the tree evolves and the tests that score them.
            It is only read (once, at construction); every run works on a copy.
        command: the test command (a list, or a string split like a shell would). None:
            pytest through the runner ``agentdescent/code/_runner.py``, reporting on the
            results channel. Another runner must write JUnit XML to the path that
            replaces ``{junit}`` in the command; its tests are then discovered by running
            it once, and named ``classname::name``. That is weaker: the command's own
            process writes the file, so a test can forge it; only its exit status is held
            against it (a non-zero exit with every test passed scores every test 0).
        timeout: seconds one run of the whole suite may take; the sandbox kills it (its
            whole process group) after that plus its grace.
        sandbox: where the suite runs (default ``Sandbox(timeout=timeout)``).
        tree: which files of ``directory`` are the artifact (default `FileTree`: the
            ``*.py`` files that are not tests, so the tests themselves can never be edited).
        plugins: pytest's plugins. None: those installed are loaded, as a plain ``pytest``
            would. A list: plugin autoloading is off and only these load (``-p NAME``
            each), which starts each run faster (``()``: none; a project whose tests need
            a plugin, such as ``pytest_asyncio``, names it). With ``command``, ignored.
        cache_size: suite runs kept, by state (one run scores every test of its state).
        recheck: before a commit (`veto`), run each test file holding a test the candidate
            newly passes again on its own, one file per process, and refuse the candidate
            if any test of those files passes alone where it failed in the full run, or the
            other way round. None: on with the default runner, off with ``command``
            (which cannot be run one file at a time).

    Raises:
        InvalidArgument, InvalidArgumentType: a bad folder, command, timeout, sandbox or
            ``recheck``; a tree that holds none of the folder's files.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | os.PathLike[str], command: str | Sequence[str] | None = None,
                 timeout: float = 60.0, sandbox: Sandbox | None = None, *, tree: FileTree | None = None,
                 plugins: Sequence[str] | None = None, cache_size: int = 64, recheck: bool | None = None) -> None:
        super().__init__(directory, timeout, sandbox, tree, cache_size,
                         ("suite_runs", "timeouts", "crashes", "untrusted", "rechecks", "recheck_refusals"))
        self.pytest = command is None
        if plugins is not None and (isinstance(plugins, str) or not all(isinstance(p, str) and p for p in plugins)):
            raise InvalidArgumentType(f"TestSuite(plugins={plugins!r:.80}): give None or a list of plugin names")
        if recheck is not None and not isinstance(recheck, bool):
            raise InvalidArgumentType(f"TestSuite(recheck={recheck!r:.80}): give True, False or None")
        if recheck and not self.pytest:
            raise InvalidArgument("TestSuite(recheck=True) runs one test file per process through the default "
                                  "pytest runner; a custom command= cannot be run that way: drop command= "
                                  "or pass recheck=False")
        self.recheck = self.pytest if recheck is None else recheck
        self.plugins = None if plugins is None else tuple(plugins)
        self._env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"} if self.pytest and self.plugins is not None else {}
        self.command = self._command(command)
        self._tasks: list[Task] | None = None
        self._alone: RunCache[tuple[dict[str, TestOutcome], str | None]] = RunCache(cache_size)
        self._recheck_seconds = 0.0

    def _command(self, command: str | Sequence[str] | None) -> list[str]:
        if command is None:
            return [sys.executable, "-I", RUNNER, "-q", *self._plugin_flags(), "--tb=short"]
        return [p.replace("{junit}", JUNIT_PATH) for p in split_command(command, "TestSuite", "python -m pytest -q")]

    def _plugin_flags(self) -> list[str]:
        flags = ["-p", "no:cacheprovider"]
        for name in self.plugins or ():
            flags += ["-p", name]
        return flags

    # ----------------------------------------------------------------- the tasks

    def tasks(self) -> list[Task]:
        """One task per test, in the runner's order (discovered once, on the starting tree).

        A task's id is the test's node id; its prompt names the test and holds its source
        (what a proposer needs to see what the test expects); ``meta`` holds ``test``,
        ``file`` and ``group`` (the test's class, or its file when it has none: give
        ``stratify="group"`` to hold out part of every group's tests).

        Raises:
            InvalidArgument: no test was found (the message holds the runner's output, and
                why its report was not believed, if it was not).
        """
        if self._tasks is None:
            nodes, run, why = self._discover()
            if not nodes:
                refused = f"; its report was not believed: {why}" if why else ""
                raise InvalidArgument(
                    f"TestSuite({str(self.directory)!r}): no test found with {shlex.join(self.command)} "
                    f"({run.describe()}{refused}). The runner said:\n{_cut(run.stdout + run.stderr, 2000)}")
            self._tasks = [self._task(n) for n in nodes]
        return list(self._tasks)

    def _discover(self) -> tuple[list[str], SandboxRun, str | None]:
        if self.pytest:
            run = self._sandbox_run([sys.executable, "-I", RUNNER, "--collect-only", "-q", *self._plugin_flags()],
                                    self.initial, channel=True)
            report = read_channel(run.channel, run.nonce, run.returncode, collect_only=True)
            if report.problem is not None:
                return [], run, report.problem
            return [r["node"] for r in report.records if r["outcome"] == "collected"], run, None
        result = self.results(self.initial)
        return list(result.outcomes), result.sandbox, result.untrusted

    def _task(self, node: str) -> Task:
        file = node.split("::", 1)[0]
        source = _test_source(self.directory / file, node.split("::")[1:])
        prompt = f"Make the test {node} pass." + (f"\n\n{source}" if source else "")
        parts = node.split("::")
        group = "::".join(parts[:2]) if len(parts) > 2 else file
        return Task(node, prompt, meta={"test": node, "file": file, "group": group})

    # ----------------------------------------------------------------- running

    def _sandbox_run(self, command: list[str], state: Mapping[str, str], read_back: Sequence[str] = (),
                     channel: bool = False) -> SandboxRun:
        return self.sandbox.run(command, tree=state, base=self.project.base, read_back=read_back, env=self._env,
                                channel=channel)

    def results(self, state: Mapping[str, str]) -> SuiteRun:
        """The suite's results on ``state``: run once in the sandbox, then from the cache.

        Thread-safe: callers asking for a state being run wait for that run.
        """
        if self.pytest and self._tasks is None:
            self.tasks()  # the tests a run must report, known before it
        return self._cache.get(state_hash(state), lambda: self._run_suite(state))

    def _run_suite(self, state: Mapping[str, str]) -> SuiteRun:
        started = time.monotonic()
        if self.pytest:
            run = self._sandbox_run(list(self.command), state, channel=True)
            outcomes, untrusted, crashed = self._channel_outcomes(run, [t.id for t in self._tasks or ()])
        else:
            run = self._sandbox_run(list(self.command), state, read_back=(JUNIT_PATH,))
            outcomes, untrusted = self._junit_outcomes(run)
            crashed = not run.timed_out and JUNIT_PATH not in run.files
        seconds = time.monotonic() - started
        self._count(seconds, suite_runs=True, timeouts=run.timed_out, crashes=crashed, untrusted=untrusted is not None)
        return SuiteRun(outcomes, run, round(seconds, 3), untrusted)

    def _channel_outcomes(self, run: SandboxRun, known: Sequence[str]) -> tuple[dict[str, TestOutcome], str | None, bool]:
        """(every known test's outcome, why the results were not believed or None, did the run crash)."""
        if run.timed_out:
            why = f"the suite was {run.describe()} before this test reported"
            return {n: TestOutcome(n, "timeout", why) for n in known}, None, False
        report = read_channel(run.channel, run.nonce, run.returncode)
        said = _cut(run.stdout + run.stderr, 800)
        if report.problem is not None and run.channel is not None and not run.channel.strip():  # nothing reported
            why = f"the suite crashed ({run.describe()}) before it reported:\n{said}"
            return {n: TestOutcome(n, "not run", why) for n in known}, None, True
        if report.problem is not None:
            why = f"the results are not trustworthy: {report.problem}" + (f"\nThe runner said:\n{said}" if said else "")
            return ({n: TestOutcome(n, "untrusted", why) for n in known}, report.problem,
                    report.problem.startswith((NO_END, CUT_OFF)))
        found = {r["node"]: r for r in report.records if r["outcome"] in TEST_OUTCOMES}
        errors = [r for r in report.records if r["outcome"] == "collection error"]
        if errors:
            missing = ("error", f"not collected: {_cut(errors[0]['node'] + ': ' + errors[0]['message'], 800)}")
        else:
            missing = ("not run", "the suite did not report this test")
        return {n: (TestOutcome(n, found[n]["outcome"], _cut(found[n]["message"])) if n in found
                    else TestOutcome(n, *missing)) for n in known}, None, False

    def _junit_outcomes(self, run: SandboxRun) -> tuple[dict[str, TestOutcome], str | None]:
        known = [t.id for t in self._tasks] if self._tasks is not None else []
        found, collection_errors = read_junit(run.files.get(JUNIT_PATH, ""))
        outcomes = {f"{classname}::{name}": TestOutcome(f"{classname}::{name}", *outcome)
                    for (classname, name), outcome in found.items()}
        untrusted = None
        if (not run.timed_out and JUNIT_PATH in run.files and run.returncode != 0 and outcomes
                and all(o.passed for o in outcomes.values())):
            untrusted = (f"the runner ended with {run.describe()} though every test it reported passed "
                         "(an exit hook, or a crash after the report?)")
            why = f"the results are not trustworthy: {untrusted}"
            outcomes = {n: TestOutcome(n, "untrusted", why) for n in outcomes}
        if run.timed_out:
            why = f"the suite was {run.describe()} before this test reported"
            missing_outcome = "timeout"
        elif JUNIT_PATH not in run.files:
            why = f"the suite crashed ({run.describe()}) before it reported:\n{_cut(run.stdout + run.stderr, 800)}"
            missing_outcome = "not run"
        elif untrusted is not None:
            why, missing_outcome = f"the results are not trustworthy: {untrusted}", "untrusted"
        elif collection_errors:
            why = f"not collected: {_cut(collection_errors[0], 800)}"
            missing_outcome = "error"
        else:
            why, missing_outcome = "the suite did not report this test", "not run"
        for node in known:
            if node not in outcomes:
                outcomes[node] = TestOutcome(node, missing_outcome, why)
        return outcomes, untrusted

    # ----------------------------------------------------------------- the recheck

    def _run_alone(self, state: Mapping[str, str], file: str) -> tuple[dict[str, TestOutcome], str | None]:
        """The outcomes of the tests of ``file`` on ``state``, run on their own (one sandboxed run, cached)."""
        def run_it() -> tuple[dict[str, TestOutcome], str | None]:
            started = time.monotonic()
            run = self._sandbox_run([*self.command, file], state, channel=True)
            known = [t.id for t in self._tasks or () if t.meta["file"] == file]
            outcomes, untrusted, _ = self._channel_outcomes(run, known)
            seconds = time.monotonic() - started
            with self._lock:
                self._recheck_seconds += seconds
            self._count(0.0, rechecks=True)
            return outcomes, untrusted
        return self._alone.get(state_hash(state, "alone", file), run_it)

    def _rechecked(self, head: Mapping[str, TestOutcome], state: Mapping[str, str],
                   full: Mapping[str, TestOutcome]) -> str | None:
        """Why the candidate's tests, run one file per process, disagree with its full run (None: they agree)."""
        gained = [n for n, o in full.items() if o.passed and not (head.get(n) and head[n].passed)]
        disagree: list[str] = []
        untrusted: list[str] = []
        for file in dict.fromkeys(n.split("::", 1)[0] for n in gained):
            alone, why = self._run_alone(state, file)
            if why is not None:
                untrusted.append(f"{file} ({why})")
            disagree += [n for n, o in alone.items() if o.passed != full[n].passed]
        if not disagree and not untrusted:
            return None
        self._count(0.0, recheck_refusals=True)
        said = [f"{n} {'passed in the full run but not alone' if full[n].passed else 'failed in the full run but passed alone'}"
                for n in disagree[:3]]
        if len(disagree) > 3:
            said.append(f"and {len(disagree) - 3} more")
        said += [f"run alone, the results of {u} were not trustworthy" for u in untrusted]
        return f"its tests disagree when each test file runs in a fresh interpreter: {'; '.join(said)}"

    # ----------------------------------------------------------------- the engine's callables

    def run(self, rendered: str, task: Task) -> str:
        """The engine's ``run(rendered, task)``: the test's result line on the tree ``rendered`` shows."""
        outcome = self.results(self.tree.parse(rendered)).outcomes.get(task.id)
        if outcome is None:
            return f"NOT_RUN {task.id}\nthe suite does not know this test"
        return outcome.line()

    def reward(self, task: Task, output: str) -> Score:
        """The engine's ``reward(task, output)``: 1.0 for a pass, else 0.0 with what the run said as feedback."""
        head, _, rest = str(output).partition("\n")
        if head.split(" ", 1)[0] == _PASS:
            return Score(1.0)
        word = head.split(" ", 1)[0].lower().replace("_", " ") or "no result"
        return Score(0.0, _cut(f"the test {task.id} {_SAID.get(word, word)}" + (f": {rest}" if rest else "")))

    def evaluate(self, state: Mapping[str, str]) -> dict[str, TestOutcome]:
        """Every test's outcome on ``state`` (one suite run, or the cache)."""
        if self._tasks is None:
            self.tasks()
        return dict(self.results(state).outcomes)

    def veto(self, head_state: Mapping[str, str], candidate_state: Mapping[str, str]) -> str | None:
        """Refuse a candidate that breaks any test the head passes, or whose gains do not hold alone (None: neither).

        The acceptance test sees only the held-out tests; this sees them all, from the
        runs already made (both states were scored): `evolve_kwargs` gives it to the
        aggregator as ``AggregatorConfig(commit_veto=...)``, so a patch that fixes a
        held-out test and breaks a train test is never committed. With ``recheck`` (the
        default with the default runner), a candidate that breaks nothing but passes
        tests the head does not is run again, each file holding such a test in a process
        of its own: a test whose result there differs from the full run's (a pass that
        needed another file's code beside it, a forged result) refuses the candidate, and
        so do results of those runs that are not trustworthy. Each (state, file) runs once.
        """
        if self._tasks is None:
            self.tasks()
        head, candidate = self.results(head_state).outcomes, self.results(candidate_state).outcomes
        broken = [n for n, o in head.items() if o.passed and not candidate[n].passed]
        if broken:
            shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
            return f"it breaks {len(broken)} test(s) the head passes: {shown}"
        if self.recheck:
            return self._rechecked(head, candidate_state, candidate)
        return None

    def stats(self) -> dict[str, float]:
        """The runs counted so far: ``suite_runs``, ``timeouts``, ``crashes`` (ended before the runner's end
        record), ``untrusted`` (results refused: `agentdescent.code.reports.read_channel`), ``rechecks`` (runs of one file alone, whose
        time is ``recheck_seconds``, not part of ``sandbox_seconds``), ``recheck_refusals``, ``cache_hits``
        and ``sandbox_seconds``."""
        counts = super().stats()
        with self._lock:
            counts["recheck_seconds"] = round(self._recheck_seconds, 3)
        return counts

    def evolve_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """The keyword arguments of `evolve`/`async_evolve` that evolve this project's tree.

        ``tasks`` (the tests), ``run`` and ``reward`` (this suite), ``strategy`` (the tree),
        ``initial_state`` (the project's files) and ``agg_config`` (declared
        deterministic: a test's result on one tree is a fact, sampled without replacement;
        ``sequential=False``: a candidate is scored on every held-out test,
        which one suite run gives at once, so the head's held-out reward is measured, never
        inherited; `veto` as its ``commit_veto``, so no commit breaks any test the head
        passes; the trust region sized for whole files), updated with ``overrides``.
        An ``agent=`` override (an `agentdescent.LLMAgent` in ``proposal="edit"`` mode)
        becomes ``propose=agent.propose``: the suite, not the agent, runs the tests. An
        agent given to the engine instead (``evolve(**suite.evolve_kwargs(), agent=...)``)
        works the same way: with ``run=``, the agent only proposes.

        Raises:
            InvalidArgument: ``agent=`` together with ``propose=``, or an agent whose
                proposal mode is not ``"edit"``.
        """
        kwargs: dict[str, Any] = {
            "tasks": self.tasks(), "run": self.run, "reward": self.reward, "strategy": self.tree,
            "initial_state": dict(self.initial),
            "agg_config": AggregatorConfig(rescore="deterministic", commit_veto=self.veto, sequential=False,
                                           trust_region_chars=max(32000, 2 * self.tree.max_file_bytes)),
        }
        return self._engine_kwargs(kwargs, overrides, _check_edit_mode)

    def __repr__(self) -> str:
        return f"TestSuite({str(self.directory)!r}, command={shlex.join(self.command)!r}, timeout={self.timeout:g})"


def _check_edit_mode(agent: Any) -> None:
    mode = getattr(agent, "proposal", "edit")
    if mode != "edit":
        raise InvalidArgument(
            f"TestSuite.evolve_kwargs(agent=...): the agent proposes in {mode!r} mode; code needs "
            "LLMAgent(..., proposal='edit'), whose replies are search/replace blocks")


_SAID = {"failed": "failed", "error": "errored", "skipped": "was skipped", "timeout": "timed out",
         "not run": "did not run", "untrusted": "has no result to trust"}

def _test_source(path: Path, names: list[str]) -> str:
    """The source of the test function ``names`` (class, then function; parameters dropped) in ``path``."""
    if not names:
        return ""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ""
    wanted = [n.split("[", 1)[0] for n in names]
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for name in wanted:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == name), None)
        if node is None:
            return ""
        body = getattr(node, "body", [])
    segment = ast.get_source_segment(text, node) if node is not None else None
    if not segment:
        return ""
    return _cut(textwrap.dedent(" " * getattr(node, "col_offset", 0) + segment), 3000)

