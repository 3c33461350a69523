"""A toy task family for engine tests: a task is solved once the artifact holds ``solve <task id>``."""

from __future__ import annotations

from agentdescent import Task


def toy_tasks(n: int = 8) -> list[Task]:
    """``n`` tasks with ids ``t0``, ``t1``, ..."""
    return [Task(f"t{i}", f"prompt {i}") for i in range(n)]


def echo_run(rendered: str, task: Task) -> str:
    """Solved when the rendered artifact names the task."""
    return "solved" if f"solve {task.id}" in rendered else "unsolved"


def toy_reward(task: Task, output: str) -> float:
    """1.0 for a solved output, else 0.0."""
    return 1.0 if output == "solved" else 0.0


def toy_propose(rendered: str, task: Task, output: str, reward: float) -> str | None:
    """The rule that solves ``task``."""
    return f"solve {task.id}"


def never_propose(rendered: str, task: Task, output: str, reward: float) -> None:
    """No change, ever."""
    return None
