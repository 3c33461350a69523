"""A toy task family for engine tests: a task is solved once the artifact holds ``solve <its group>``.

Tasks fall in three groups (``g0``, ``g1``, ``g2``), so a rule learned on a train task
also solves the held-out tasks of its group: a real held-out gain, which is what the
evidence rule asks of every commit.
"""

from __future__ import annotations

from typing import Any

from agentdescent import Task


def toy_tasks(n: int = 8) -> list[Task]:
    """``n`` tasks with ids ``t0``, ``t1``, ... in groups ``g{i % 3}``."""
    return [Task(f"t{i}", f"prompt {i}", {"group": f"g{i % 3}"}) for i in range(n)]


def group_of(task: Task) -> str:
    """The task's group (a task without one is its own group)."""
    return str(task.meta.get("group", task.id))


def echo_run(rendered: str, task: Task) -> str:
    """Solved when the rendered artifact names the task's group."""
    return "solved" if f"solve {group_of(task)}" in rendered else "unsolved"


def toy_reward(task: Task, output: str) -> float:
    """1.0 for a solved output, else 0.0."""
    return 1.0 if output == "solved" else 0.0


def toy_propose(rendered: str, task: Task, output: str, reward: float) -> str | None:
    """The rule that solves ``task``'s group."""
    return f"solve {group_of(task)}"


def never_propose(rendered: str, task: Task, output: str, reward: float) -> None:
    """No change, ever."""
    return None


def replayable(info: Any) -> dict[str, Any]:
    """A round's JSON without its wall time (``elapsed``): what repeats bit for bit."""
    data = info.to_json()
    data.pop("elapsed", None)
    return data


def replayable_result(result: Any) -> dict[str, Any]:
    """A result's JSON without its rounds' wall times: what repeats bit for bit."""
    data = result.to_json()
    for info in data["history"]:
        info.pop("elapsed", None)
    return data
