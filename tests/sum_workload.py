"""The sums workload bench/run_is_over.py and tests/system/test_run_is_over.py share.

Forty tasks ``What is i + i?`` (after an optional paragraph of context), answered right
when the reply holds ``2i``; the rule a scripted model proposes; the pattern it reads a
sum with.
"""

from __future__ import annotations

import re

from agentdescent import Task

RULE = "Always add the two numbers and reply with the sum."
SUM = re.compile(r"What is (\d+) \+ (\d+)\?")
#: A paragraph in front of each sum of the budget scenario: a solve call is then about 100
#: tokens, so the held-out evaluation weighs in a sweep what it does with a real prompt.
CONTEXT = " ".join(["Context: the numbers below are whole numbers written in base ten."] * 6)


def tasks(context: str = "") -> list[Task]:
    """40 sums, ``What is i + i?`` (after ``context``), answer ``2i``."""
    lead = f"{context}\n" if context else ""
    return [Task(f"q{i:02d}", f"{lead}What is {i} + {i}?", {"answer": str(2 * i)}) for i in range(40)]


def reward(task: Task, output: str) -> float:
    """1.0 when the answer is in the reply."""
    return 1.0 if task.meta["answer"] in output else 0.0
