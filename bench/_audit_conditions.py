"""The acceptance audit's scenarios, synthetic evaluator and named conditions (`bench/acceptance_audit.py`).

A `Scenario` says what one decision's truth looks like; `draw` draws it from a seeded RNG;
`AuditEvaluator` scores states against it with flip noise (shared per near-duplicate group
per call) and counts every task it scores; `conditions` names the audit's conditions.
Public API of agentdescent only.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentdescent import Diff, Evaluator, EvidenceCard, Task

__all__ = ["ARTIFACT", "AuditEvaluator", "Condition", "Instance", "Scenario", "card", "conditions", "draw",
           "held_out_tasks", "junk_named", "nonce"]

ARTIFACT = "skill"
DELTA = 0.25  # the graded conditions' gain / loss per changed task


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """What one decision's truth looks like.

    Args:
        n: held-out tasks.
        fixed: tasks the candidate fixes (binary: head 0, candidate 1; graded: +DELTA).
        broken: tasks it breaks (binary: head 1, candidate 0; graded: -DELTA). Neither: junk.
        graded: head scores uniform in [0.3, 0.7] instead of a binary pass on half the tasks.
        hit: the op text names the fixed tasks' keywords (False: as many unchanged tasks').
        group_size: near-duplicate groups of this size share their noise (0: none).
        flip: the probability a score flips on each call.
    """

    n: int
    fixed: int = 0
    broken: int = 0
    graded: bool = False
    hit: bool = True
    group_size: int = 0
    flip: float = 0.0


@dataclass
class Instance:
    """One decision's (or one run's) drawn truth."""

    tasks: list[Task]
    head: list[float]
    cand: list[float]
    failing: list[int]
    groups: list[int] | None
    named: list[int]
    nonce: str
    noise_seed: int


_TASKS: dict[tuple[int, int], list[Task]] = {}


def held_out_tasks(n: int, group_size: int = 0) -> list[Task]:
    """``n`` tasks, each prompt with its own rare keyword ``kwNNN``; ``meta["group"]`` when grouped."""
    key = (n, group_size)
    if key not in _TASKS:
        _TASKS[key] = [Task(f"t{i}", f"route the request about kw{i:03d} please",
                            {"group": i // group_size} if group_size else {}) for i in range(n)]
    return _TASKS[key]


def nonce(rng: random.Random) -> str:
    """A fresh word no prompt contains (a diff's key and value carry it, so every diff differs)."""
    return f"z{rng.getrandbits(40):010x}"


def junk_named(failing: Sequence[int], groups: Sequence[int] | None, rng: random.Random) -> list[int]:
    """The tasks a junk diff claims to fix: one failing group's members, or two failing tasks."""
    if groups is not None:
        g = rng.choice(sorted({groups[i] for i in failing}))
        return [i for i, gi in enumerate(groups) if gi == g]
    return rng.sample(list(failing), min(2, len(failing)))


def draw(s: Scenario, rng: random.Random) -> Instance:
    """Draw one decision's truth from ``rng`` (see `Scenario`)."""
    n = s.n
    groups = [i // s.group_size for i in range(n)] if s.group_size else None
    if s.graded:
        head = [rng.uniform(0.3, 0.7) for _ in range(n)]
        picked = rng.sample(range(n), s.fixed + s.broken)
        fixed, broken = picked[:s.fixed], picked[s.fixed:]
        cand = list(head)
        for i in fixed:
            cand[i] += DELTA
        for i in broken:
            cand[i] -= DELTA
        failing = list(range(n))
    else:
        if groups is not None:
            n_groups = max(groups) + 1
            passing_groups = set(rng.sample(range(n_groups), n_groups // 2))
            passing = {i for i in range(n) if groups[i] in passing_groups}
        else:
            passing = set(rng.sample(range(n), n // 2))
        head = [1.0 if i in passing else 0.0 for i in range(n)]
        failing = [i for i in range(n) if i not in passing]
        fixed = rng.sample(failing, s.fixed)
        broken = rng.sample(sorted(passing), s.broken)
        cand = list(head)
        for i in fixed:
            cand[i] = 1.0
        for i in broken:
            cand[i] = 0.0
    changed = set(fixed) | set(broken)
    if not changed:
        named = junk_named(failing, groups, rng)
    elif s.hit:
        named = sorted(fixed)
    else:
        named = rng.sample([i for i in range(n) if i not in changed], max(1, s.fixed))
    return Instance(held_out_tasks(n, s.group_size), head, cand, failing, groups, named, nonce(rng),
                    rng.getrandbits(64))


def card(diff_id: str, named: Sequence[int], nonce: str, base_version: int) -> EvidenceCard:
    """A card whose one op names the keywords of ``named`` (and a nonce, so every diff differs)."""
    keywords = " ".join(f"kw{i:03d}" for i in sorted(named))
    ops: dict[str, str | None] = {f"rule-{nonce}": f"{keywords} -> label {nonce}"}
    trajectory = [Task(f"train-{nonce}", f"route the request about {keywords} please")]
    return EvidenceCard(Diff(diff_id, ARTIFACT, ops), {ARTIFACT: base_version}, 1.0, 1.0,
                        trajectory_refs=trajectory)


class AuditEvaluator(Evaluator):
    """A synthetic evaluator: true scores per task for the head and the candidate, flip noise, a call meter.

    Args:
        tasks: the held-out tasks (``held_out_tasks``: the library ranks them by relevance).
        head: each task's true score for any state without ``cand_key``.
        cand: each task's true score for a state holding ``cand_key``.
        cand_key: the candidate's op key (None: every state scores ``head``).
        flip: probability that a score flips (``x -> 1 - x``) on a call.
        groups: per task its near-duplicate group (one coin per group per call), or None.
        seed: the noise RNG's seed.
    """

    def __init__(self, tasks: Sequence[Task], head: Sequence[float], cand: Sequence[float],
                 cand_key: str | None, flip: float, groups: Sequence[int] | None, seed: int) -> None:
        self.held_out_tasks = list(tasks)
        self.head, self.cand, self.cand_key = list(head), list(cand), cand_key
        self.flip, self.groups = flip, groups
        self.rng = random.Random(seed)
        self.calls = 0

    def _draw(self, state: Mapping[str, str], indices: Sequence[int]) -> list[float]:
        true = self.cand if self.cand_key is not None and self.cand_key in state else self.head
        self.calls += len(indices)
        if not self.flip:
            return [true[i] for i in indices]
        coins: dict[tuple[int, int], bool] = {}
        repeats: collections.Counter[int] = collections.Counter()
        out = []
        for i in indices:
            if self.groups is None:
                flipped = self.rng.random() < self.flip
            else:
                key = (self.groups[i], repeats[i])
                repeats[i] += 1
                if key not in coins:
                    coins[key] = self.rng.random() < self.flip
                flipped = coins[key]
            out.append(1.0 - true[i] if flipped else true[i])
        return out

    def held_out(self, artifact_id: str, state: Mapping[str, str]) -> Sequence[float]:
        """Every task's (noisy) score."""
        return self._draw(state, range(len(self.head)))

    def held_out_subset(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> Sequence[float]:
        """The (noisy) scores of the tasks at ``indices``."""
        return self._draw(state, list(indices))

    def rescore(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> Sequence[float]:
        """Fresh draws (repeats allowed); a deterministic evaluator returns the true scores again."""
        return self._draw(state, list(indices))

    def cheap(self, artifact_id: str, state: Mapping[str, str]) -> float:
        """Mean (noisy) score over the first four tasks."""
        scores = self._draw(state, range(min(4, len(self.head))))
        return sum(scores) / len(scores)


# --------------------------------------------------------------------------- conditions


@dataclass(frozen=True)
class Condition:
    """A named audit condition: its scenario, its config, how it is run.

    ``kind`` is ``"decisions"`` (a fresh aggregator per decision), ``"probe"`` (a sequence of
    junk decisions per seed on one aggregator) or ``"runs"`` (rounds of junk cards).
    """

    name: str
    scenario: Scenario
    config: Mapping[str, Any]
    null: bool
    kind: str = "decisions"
    seed_key: str = ""

    @property
    def key(self) -> str:
        """The seed key (shared by the variants of one scenario)."""
        return self.seed_key or self.name


def conditions() -> list[Condition]:
    """Every condition of the audit, in report order."""
    det, auto = {"rescore": "deterministic"}, {"rescore": "auto"}
    out: list[Condition] = []
    for k, n in ((1, 24), (2, 24), (4, 24), (1, 96), (4, 96)):
        name = f"det-swap-k{k}-n{n}"
        out.append(Condition(name, Scenario(n, k, k), det, True))
        out.append(Condition(f"auto-{name}", Scenario(n, k, k), auto, True, seed_key=name))
    out += [Condition(f"graded-k{k}-n24", Scenario(24, k, k, graded=True), det, True) for k in (1, 4)]
    out += [Condition(f"small-n{n}", Scenario(n, 1, 1), det, True) for n in (6, 8, 12)]
    out += [Condition(f"flip0.1-swap8-n{n}", Scenario(n, 8, 8, flip=0.1), auto, True) for n in (24, 96)]
    for g, n in ((4, 24), (8, 32)):
        s = Scenario(n, group_size=g, flip=0.2)
        out.append(Condition(f"dup-g{g}", s, {**auto, "evidence_groups": "group"}, True))
        out.append(Condition(f"dup-g{g}-undeclared", s, auto, True, seed_key=f"dup-g{g}"))
    out.append(Condition("probe-2pct", Scenario(24, flip=0.02), auto, True, kind="probe"))
    for p in (0.1, 0.2):
        name = f"per-run-flip{p:g}"
        out.append(Condition(name, Scenario(96, flip=p), {}, True, kind="runs"))
        out.append(Condition(f"{name}-per_run", Scenario(96, flip=p), {"error_control": "per_run"}, True,
                             kind="runs", seed_key=name))
    for mode, flip, cfg in (("det", 0.0, det), ("flip0.1", 0.1, auto)):
        for hit in ("hit", "miss"):
            for g in (1, 2, 4, 8):
                for n in (24, 96):
                    out.append(Condition(f"power-{mode}-{hit}-g{g}-n{n}",
                                         Scenario(n, g, 0, hit=hit == "hit", flip=flip), cfg, False))
    return out
