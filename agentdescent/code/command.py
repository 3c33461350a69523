"""`CommandReward`: run a script on a state, read a number — the general form of a sandboxed reward.

This module owns the plainest way to score code: a command (a benchmark script, a
scorer) runs in the sandbox on a state's files and prints its score. With ``{task}`` in
the command it runs once per (state, task), with the task's id in place of ``{task}``;
without, once per state, and that one score is every task's. The score is read off
stdout of a run that exited 0: the one line that is a number in [0, 1], or a JSON object
``{"score": x, "feedback": "..."}``. A command that fails, times out, prints no such line
or prints more than one (a second score printed by an exit hook) scores 0 with feedback
saying so. `agentdescent.code.TestSuite` is the special form for test suites (one run
gives every test's result).

What the exit status and the one-score rule stop: a score printed by an exit hook after
the command failed (the exit status stays non-zero), or printed beside the honest one. What
they cannot stop: a command whose code (the tree's, imported by the scorer) prints a score
and calls ``os._exit(0)`` looks, from outside, exactly like an honest run; the tree's
machinery scan, which refuses diffs calling ``os._exit`` or ``atexit``, is what stops that.
Unlike `TestSuite`'s runner there is no channel here: the command's stdout is the report.

It must not run anything outside its sandbox, write into the project folder, or call a
model.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..merge.aggregator_config import AggregatorConfig
from ..rewards.builtin import Score
from ..types import Task
from .base import SandboxedReward, split_command
from .cache import state_hash
from .sandbox import Sandbox, SandboxRun
from .tree import DEFAULT_EXCLUDE, FileTree

__all__ = ["CommandReward", "read_score", "score_lines"]

_SCORE = "SCORE"
_FAILED = "FAILED"


def read_score(stdout: str) -> tuple[float, str] | None:
    """The score a command printed and its feedback, or None when it printed none.

    The last line of ``stdout`` that is a number in [0, 1] (feedback: the lines before it,
    cut short), or a JSON object with a ``"score"`` in [0, 1] (and an optional
    ``"feedback"`` string). `CommandReward` goes further and refuses a run that printed
    more than one such line (`score_lines` finds them all).
    """
    found = score_lines(stdout)
    return found[-1] if found else None


def score_lines(stdout: str) -> list[tuple[float, str]]:
    """Every score line of ``stdout`` (as `read_score` reads one), in order, each with its feedback.

    A number line's feedback is the (up to ten) lines before it; a JSON line's is its
    ``"feedback"``.
    """
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    found: list[tuple[float, str]] = []
    for i, line in enumerate(lines):
        value: Any = None
        feedback = ""
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict):
                value, feedback = data.get("score"), data.get("feedback", "")
        else:
            try:
                value = float(line)
            except ValueError:
                continue
            feedback = "\n".join(lines[max(0, i - 10):i])
        if (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                and 0.0 <= value <= 1.0):
            found.append((float(value), str(feedback)[-1200:]))
    return found


def _scorer_files(directory: str | os.PathLike[str], parts: Sequence[str]) -> list[str]:
    """The project's files the command names (``score.py`` in ``python score.py {task}``), as tree paths."""
    root = os.path.realpath(directory)
    found = []
    for part in parts:
        if "{task}" in part or not part or part.startswith("-"):
            continue
        path = os.path.realpath(os.path.join(root, part))
        if path.startswith(root + os.sep) and os.path.isfile(path):
            found.append(os.path.relpath(path, root).replace(os.sep, "/"))
    return found


class CommandReward(SandboxedReward[tuple[str, SandboxRun]]):
    """A command run in a sandbox on each state, whose printed number is the reward.

    Args:
        directory: the project (the files the tree evolves, and whatever the command
            needs); only read, once.
        command: the command, a list or a string split like a shell would; ``{task}``
            stands for the task's id (one run per state and task), else one run per state.
        tasks: the tasks (at least 4, as the engines need); their ids replace ``{task}``.
        timeout: seconds one run may take (the sandbox kills it after that plus its grace).
        sandbox: where it runs (default ``Sandbox(timeout=timeout)``).
        tree: which files of ``directory`` are the artifact (default `FileTree`, without
            the files the command names: the scorer is never the candidate's to edit).
        cache_size: runs kept, by state (and task).

    Raises:
        InvalidArgument, InvalidArgumentType: a bad folder, command, task list, timeout
            or sandbox; a ``tree`` that holds a file the command names (its scorer).
    """

    def __init__(self, directory: str | os.PathLike[str], command: str | Sequence[str], tasks: Sequence[Task],
                 timeout: float = 60.0, sandbox: Sandbox | None = None, *, tree: FileTree | None = None,
                 cache_size: int = 256) -> None:
        parts = split_command(command, "CommandReward", "python score.py {task}")
        self.command = parts
        self.per_task = any("{task}" in p for p in parts)
        self._tasks = list(tasks)
        if not self._tasks or not all(isinstance(t, Task) for t in self._tasks):
            raise InvalidArgumentType("CommandReward(tasks=...): give a list of agentdescent.Task")
        scorers = _scorer_files(directory, parts)
        if tree is None:
            tree = FileTree(exclude=(*DEFAULT_EXCLUDE, *scorers))
        elif any(tree.matches(path) for path in scorers):
            held = [path for path in scorers if tree.matches(path)]
            raise InvalidArgument(
                f"CommandReward(tree=...): the tree holds {', '.join(map(repr, held))}, the command's own "
                "scorer, so a candidate could rewrite how it is scored; exclude it "
                f"(FileTree(exclude=[..., {held[0]!r}]))")
        super().__init__(directory, timeout, sandbox, tree, cache_size, ("runs", "timeouts", "failures", "refused"))

    def tasks(self) -> list[Task]:
        """The tasks given."""
        return list(self._tasks)

    def score(self, state: Mapping[str, str], task: Task) -> tuple[str, SandboxRun]:
        """The ``run`` output for ``task`` on ``state`` (one sandboxed run, or the cache) and that run."""
        key = state_hash(state, task.id if self.per_task else "")
        return self._cache.get(key, lambda: self._run(state, task))

    def _run(self, state: Mapping[str, str], task: Task) -> tuple[str, SandboxRun]:
        argv = [p.replace("{task}", task.id) for p in self.command] if self.per_task else list(self.command)
        run = self.sandbox.run(argv, tree=state, base=self.project.base)
        found = score_lines(run.stdout) if run.ok else []
        self._count(run.seconds, runs=True, timeouts=run.timed_out, failures=len(found) != 1,
                    refused=len(found) > 1)
        if len(found) == 1:
            value, feedback = found[0]
            return f"{_SCORE} {value!r}" + (f"\n{feedback}" if feedback else ""), run
        tail = (run.stderr.strip() or run.stdout.strip())[-800:]
        if len(found) > 1:
            why = (f"it printed more than one score ({len(found)} lines that are a number in [0, 1] or "
                   "{\"score\": ...}: an exit hook?); print exactly one, and other numbers with a label")
        elif run.ok:
            why = "it printed no score (a line that is a number in [0, 1], or {\"score\": ...})"
        else:
            why = f"the command was {run.describe()}" if run.timed_out else f"the command ended with {run.describe()}"
        return f"{_FAILED}\n{why}" + (f":\n{tail}" if tail else ""), run

    def run(self, rendered: str, task: Task) -> str:
        """The engine's ``run(rendered, task)``: the score line of the tree ``rendered`` shows."""
        return self.score(self.tree.parse(rendered), task)[0]

    def reward(self, task: Task, output: str) -> Score:
        """The engine's ``reward(task, output)``: the printed score, or 0.0 with why."""
        head, _, rest = str(output).partition("\n")
        if head.startswith(_SCORE + " "):
            try:
                return Score(min(1.0, max(0.0, float(head[len(_SCORE) + 1:]))), rest)
            except ValueError:
                pass
        return Score(0.0, rest or "the command gave no score")

    def evolve_kwargs(self, **overrides: Any) -> dict[str, Any]:
        """The keyword arguments of `evolve`/`async_evolve`: ``tasks``, ``run``, ``reward``,
        ``strategy``, ``initial_state``, ``agg_config`` (the trust region sized for whole
        files), updated with ``overrides``; an ``agent=`` override becomes its ``propose``
        (see `agentdescent.code.TestSuite.evolve_kwargs`)."""
        kwargs: dict[str, Any] = {
            "tasks": self.tasks(), "run": self.run, "reward": self.reward, "strategy": self.tree,
            "initial_state": dict(self.initial),
            "agg_config": AggregatorConfig(trust_region_chars=max(32000, 2 * self.tree.max_file_bytes)),
        }
        return self._engine_kwargs(kwargs, overrides)

    def __repr__(self) -> str:
        return f"CommandReward({str(self.project.directory)!r}, command={shlex.join(self.command)!r})"
