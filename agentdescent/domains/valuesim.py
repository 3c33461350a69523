"""A simulated workload for budget allocation: some proposals are worth verifying, some are not.

This is a **simulation**, documented as one: it exists so that the equal-budget A/B
(``bench/ab_allocator.py``) can run offline and so that the allocator has something
real but noisy to learn from. Each task belongs to a *skill*; the agent solves it when
the playbook holds the right ``skill => label`` rule, and otherwise earns graded partial
credit that is a fixed property of the task. After a failure the simulated proposer
suggests either the right rule (a **good** proposal, one op) or a few vague notes that
change nothing (a **junk** proposal, two to five ops). The chance of a good proposal
rises with the task's partial credit, so the pre-spend signals carry real information:
a higher rollout reward gives a higher group-relative advantage, and junk is larger.
Neither signal is perfect (``noise`` blurs the link, and good proposals sometimes come
with a junk note attached).

Knobs: ``n_skills`` (30), ``tasks_per_skill`` (8), ``good_base`` and ``good_slope``
(P(good) = good_base + good_slope * partial_credit, clipped, plus ``noise``), and the
simulated token costs ``run_overhead`` / ``propose_overhead``. Every draw comes from
`agentdescent.stable_hash` of the seed and the call's inputs, so runs repeat.
This module must not touch the network or the global RNG.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import InvalidArgument
from ..merge.strategies import AppendRules
from ..tokens import estimate_tokens
from ..types import Task, stable_hash
from ..usage import Usage

__all__ = ["ValueSim"]

_LABELS = ("alpha", "beta", "gamma", "delta", "epsilon")
_RULE = re.compile(r"^\s*-\s*when (\w+)\s*=>\s*(\w+)\s*$")
_JUNK = (
    "double-check the wording", "be concise", "think step by step", "prefer common labels",
    "consider the context", "avoid guessing", "re-read the question", "stay consistent",
)


class ValueSim:
    """A seeded instance of the value simulation (see the module docstring).

    Args:
        seed: seeds every simulated draw.
        n_skills: number of skills (each with its own label).
        tasks_per_skill: tasks per skill.
        good_base: P(good proposal) at zero partial credit.
        good_slope: how much partial credit raises P(good).
        noise: extra uniform noise on P(good), in [0, 1].
        run_overhead: simulated prompt tokens of a rollout besides the skill text.
        propose_overhead: simulated prompt tokens of a proposal besides the skill text.
        usage: the meter simulated tokens are recorded into.
    """

    def __init__(
        self,
        seed: int = 0,
        n_skills: int = 30,
        tasks_per_skill: int = 8,
        good_base: float = 0.1,
        good_slope: float = 1.6,
        noise: float = 0.2,
        run_overhead: int = 60,
        propose_overhead: int = 150,
        usage: Usage | None = None,
    ) -> None:
        if n_skills < 2 or tasks_per_skill < 2:
            raise InvalidArgument(f"n_skills={n_skills!r}, tasks_per_skill={tasks_per_skill!r}: use >= 2 each")
        if not 0.0 <= noise <= 1.0:
            raise InvalidArgument(f"noise={noise!r}: use a value in [0, 1]")
        self.seed = seed
        self.good_base = good_base
        self.good_slope = good_slope
        self.noise = noise
        self.run_overhead = run_overhead
        self.propose_overhead = propose_overhead
        self.usage = usage if usage is not None else Usage()
        self.strategy = AppendRules(title="# Playbook", separator=";")
        self.skills = {f"s{i:02d}": _LABELS[stable_hash(seed, "label", i) % len(_LABELS)] for i in range(n_skills)}
        self.tasks = [
            Task(
                id=f"{skill}-{j}",
                prompt=f"Classify item {j} of skill {skill}.",
                meta={"skill": skill, "label": label,
                      "partial": round(0.6 * self._u("partial", skill, j), 3)},
            )
            for j in range(tasks_per_skill)
            for skill, label in self.skills.items()
        ]

    def _u(self, *parts: object) -> float:
        return stable_hash(self.seed, *parts) / 2.0**64

    @staticmethod
    def _tokens(text: str) -> int:
        return estimate_tokens(text)

    def run(self, rendered: str, task: Task) -> str:
        """Answer the task's label when the playbook has its rule; else report partial credit."""
        self.usage.record(self._tokens(rendered) + self.run_overhead, 20)
        for line in rendered.splitlines():
            m = _RULE.match(line)
            if m and m.group(1) == task.meta["skill"]:
                return m.group(2)
        return f"partial:{task.meta['partial']}"

    @staticmethod
    def reward(task: Task, output: str) -> float:
        """1.0 for the right label, the task's partial credit for a partial answer, else 0."""
        if output == task.meta["label"]:
            return 1.0
        if output.startswith("partial:"):
            return float(task.meta["partial"])
        return 0.0

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        """A good rule with probability rising with the partial credit, else junk notes."""
        self.usage.record(self._tokens(rendered) + self.propose_overhead, 40)
        if reward >= 1.0:
            return None
        key = (rendered, task.id)
        p_good = self.good_base + self.good_slope * float(task.meta["partial"])
        p_good += self.noise * (self._u("noise", *key) - 0.5) * 2
        rule = f"when {task.meta['skill']} => {task.meta['label']}"
        n_junk = 2 + int(self._u("njunk", *key) * 4)
        junk = [
            f"note: {_JUNK[int(self._u('junk', i, *key) * len(_JUNK))]} ({int(self._u('tag', i, *key) * 1e6)})"
            for i in range(n_junk)
        ]
        if self._u("good", *key) < p_good:
            if self._u("extra", *key) < 0.3:
                return f"{rule}; {junk[0]}"
            return rule
        return "; ".join(junk)

    def evolve_kwargs(self) -> Mapping[str, object]:
        """The ``evolve()`` arguments that wire this workload in."""
        return {
            "tasks": self.tasks,
            "reward": self.reward,
            "run": self.run,
            "propose": self.propose,
            "strategy": self.strategy,
            "usage": self.usage,
            "shuffle": True,
            "seed": self.seed,
        }

    def __repr__(self) -> str:
        return f"ValueSim(seed={self.seed}, skills={len(self.skills)}, tasks={len(self.tasks)})"
