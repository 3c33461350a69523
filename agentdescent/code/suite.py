"""`TestSuite`: a project's own tests as the tasks and the reward of an evolving file tree.

This module owns what a test run means to the engine: discovering the tests as tasks
(one per pytest node id, `TestSuite.tasks`), running the whole suite **once** per state in
a fresh sandbox (`agentdescent.code.Sandbox`; cached by the state's hash, so one run
scores every task of that state, and concurrent askers of one state wait for the one
run), reading per-test results from the runner's JUnit XML, and turning each test's
result into the engine's ``run`` output and reward (`agentdescent.rewards.builtin.Score`: 1.0 for
a pass, else 0.0 with the assertion message as feedback, which reaches the proposer). A
crash, a timeout or a collection error is a score of 0 with feedback saying so, never a
failed run. `TestSuite.evolve_kwargs` wires it all into `evolve`/`async_evolve`.

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
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..merge.aggregator_config import AggregatorConfig
from ..rewards.builtin import Score
from ..types import Task, clip_middle
from .base import SandboxedReward, split_command
from .cache import state_hash
from .sandbox import Sandbox, SandboxRun
from .tree import FileTree

__all__ = ["SuiteRun", "TestOutcome", "TestSuite"]

#: Where the suite's JUnit XML is written, relative to the sandbox's working folder.
JUNIT_PATH = ".agentdescent/junit.xml"

#: Longest feedback kept per test (head and tail of the failure text).
MAX_FEEDBACK_CHARS = 1200

_PASS = "PASSED"


@dataclass(frozen=True)
class TestOutcome:
    """One test's result in one suite run.

    Args:
        node: the test's id (a pytest node id).
        outcome: ``"passed"``, ``"failed"``, ``"error"``, ``"skipped"``, ``"timeout"``
            (the suite was killed before it reported) or ``"not run"`` (the suite crashed,
            or the test was not collected).
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
    """

    outcomes: dict[str, TestOutcome]
    sandbox: SandboxRun
    seconds: float

    @property
    def passed(self) -> int:
        """Tests that passed."""
        return sum(o.passed for o in self.outcomes.values())


def _cut(text: str, limit: int = MAX_FEEDBACK_CHARS) -> str:
    return clip_middle(text.strip(), limit)


def _junit_key(node: str) -> tuple[str, str]:
    """(classname, name) pytest's JUnit XML gives the test ``node``."""
    parts = node.split("::")
    path = parts[0][:-3] if parts[0].endswith(".py") else parts[0]
    names = [path.replace("/", "."), *parts[1:]]
    return ".".join(names[:-1]), names[-1]


class TestSuite(SandboxedReward[SuiteRun]):
    """A project folder whose tests score an evolving file tree, run in a sandbox.

    Args:
        directory: the project: the files the tree evolves and the tests that score them.
            It is only read (once, at construction); every run works on a copy.
        command: the test command (a list, or a string split like a shell would). None:
            pytest (``python -m pytest``, writing JUnit XML). Another runner must write
            JUnit XML to the path that replaces ``{junit}`` in the command; its tests are
            then discovered by running it once, and named ``classname::name``.
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

    Raises:
        InvalidArgument, InvalidArgumentType: a bad folder, command, timeout or sandbox;
            a tree that holds none of the folder's files.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, directory: str | os.PathLike[str], command: str | Sequence[str] | None = None,
                 timeout: float = 60.0, sandbox: Sandbox | None = None, *, tree: FileTree | None = None,
                 plugins: Sequence[str] | None = None, cache_size: int = 64) -> None:
        super().__init__(directory, timeout, sandbox, tree, cache_size, ("suite_runs", "timeouts", "crashes"))
        self.pytest = command is None
        if plugins is not None and (isinstance(plugins, str) or not all(isinstance(p, str) and p for p in plugins)):
            raise InvalidArgumentType(f"TestSuite(plugins={plugins!r:.80}): give None or a list of plugin names")
        self.plugins = None if plugins is None else tuple(plugins)
        self._env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"} if self.pytest and self.plugins is not None else {}
        self.command = self._command(command)
        self._tasks: list[Task] | None = None

    def _command(self, command: str | Sequence[str] | None) -> list[str]:
        if command is None:
            return [sys.executable, "-m", "pytest", "-q", *self._plugin_flags(), "--tb=short",
                    f"--junitxml={JUNIT_PATH}", "-o", "junit_family=xunit1"]
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
            InvalidArgument: no test was found (the message holds the runner's output).
        """
        if self._tasks is None:
            nodes, run = self._discover()
            if not nodes:
                raise InvalidArgument(
                    f"TestSuite({str(self.directory)!r}): no test found with {shlex.join(self.command)} "
                    f"({run.describe()}). The runner said:\n{_cut(run.stdout + run.stderr, 2000)}")
            self._tasks = [self._task(n) for n in nodes]
        return list(self._tasks)

    def _discover(self) -> tuple[list[str], SandboxRun]:
        if self.pytest:
            run = self._sandbox_run([sys.executable, "-m", "pytest", "--collect-only", "-q", *self._plugin_flags()],
                                    self.initial, read_back=())
            nodes = [line.strip() for line in run.stdout.splitlines()
                     if "::" in line and not line[:1].isspace() and not line.startswith(("ERROR", "FAILED"))]
            return list(dict.fromkeys(nodes)), run
        result = self.results(self.initial)
        return list(result.outcomes), result.sandbox

    def _task(self, node: str) -> Task:
        file = node.split("::", 1)[0]
        source = _test_source(self.directory / file, node.split("::")[1:])
        prompt = f"Make the test {node} pass." + (f"\n\n{source}" if source else "")
        parts = node.split("::")
        group = "::".join(parts[:2]) if len(parts) > 2 else file
        return Task(node, prompt, meta={"test": node, "file": file, "group": group})

    # ----------------------------------------------------------------- running

    def _sandbox_run(self, command: list[str], state: Mapping[str, str], read_back: Sequence[str]) -> SandboxRun:
        return self.sandbox.run(command, tree=state, base=self.project.base, read_back=read_back, env=self._env)

    def results(self, state: Mapping[str, str]) -> SuiteRun:
        """The suite's results on ``state``: run once in the sandbox, then from the cache.

        Thread-safe: callers asking for a state being run wait for that run.
        """
        return self._cache.get(state_hash(state), lambda: self._run_suite(state))

    def _run_suite(self, state: Mapping[str, str]) -> SuiteRun:
        started = time.monotonic()
        run = self._sandbox_run(list(self.command), state, read_back=(JUNIT_PATH,))
        outcomes = self._outcomes(run)
        seconds = time.monotonic() - started
        self._count(seconds, suite_runs=True, timeouts=run.timed_out,
                    crashes=not run.timed_out and JUNIT_PATH not in run.files)
        return SuiteRun(outcomes, run, round(seconds, 3))

    def _outcomes(self, run: SandboxRun) -> dict[str, TestOutcome]:
        known = [t.id for t in self._tasks] if self._tasks is not None else []
        found, collection_errors = _read_junit(run.files.get(JUNIT_PATH, ""))
        by_key = {_junit_key(n): n for n in known}
        outcomes: dict[str, TestOutcome] = {}
        for (classname, name), outcome in found.items():
            node = by_key.get((classname, name)) or (f"{classname}::{name}" if not self.pytest else None)
            if node is not None:
                outcomes[node] = TestOutcome(node, *outcome)
        if run.timed_out:
            why = f"the suite was {run.describe()} before this test reported"
            missing_outcome = "timeout"
        elif JUNIT_PATH not in run.files:
            why = f"the suite crashed ({run.describe()}) before it reported:\n{_cut(run.stdout + run.stderr, 800)}"
            missing_outcome = "not run"
        elif collection_errors:
            why = f"not collected: {_cut(collection_errors[0], 800)}"
            missing_outcome = "error"
        else:
            why, missing_outcome = "the suite did not report this test", "not run"
        for node in known:
            if node not in outcomes:
                outcomes[node] = TestOutcome(node, missing_outcome, why)
        return outcomes

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
        """Refuse a candidate that breaks any test the head passes, held out or not (None: none broken).

        The acceptance test sees only the held-out tests; this sees them all, from the
        runs already made (both states were scored): `evolve_kwargs` gives it to the
        aggregator as ``AggregatorConfig(commit_veto=...)``, so a patch that fixes a
        held-out test and breaks a train test is never committed.
        """
        if self._tasks is None:
            self.tasks()
        head, candidate = self.results(head_state).outcomes, self.results(candidate_state).outcomes
        broken = [n for n, o in head.items() if o.passed and not candidate[n].passed]
        if not broken:
            return None
        shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
        return f"it breaks {len(broken)} test(s) the head passes: {shown}"

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
         "not run": "did not run"}


def _read_junit(text: str) -> tuple[dict[tuple[str, str], tuple[str, str]], list[str]]:
    """(classname, name) -> (outcome, message) of every test case, and the collection errors."""
    if not text.strip():
        return {}, []
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        return {}, [f"the runner's JUnit XML is unreadable ({exc})"]
    found: dict[tuple[str, str], tuple[str, str]] = {}
    errors: list[str] = []
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = _cut("\n".join(x for x in (child.get("message", ""), child.text or "") if x))
                break
        if not classname and outcome == "error":  # a file that failed to collect
            errors.append(f"{name}: {message}")
            continue
        found[(classname, name)] = (outcome, message)
    return found, errors


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

