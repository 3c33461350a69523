"""The worker step: walk the train tasks, roll one out on a snapshot, propose, build the evidence card.

This module owns what one worker does between two looks at the ledger, the same in both
engines: `TaskWalk` (the seeded walk over the train tasks, unsolved ones first), `rollout_step` (solve and
score one task on the worker's snapshot), `card_step` (after an unsolved rollout:
propose -> ``strategy.to_diff`` (an `agentdescent.errors.EditRefused` is counted in
``edits_refused``, no card) -> ``governor.candidate_worth`` -> optional self-verify
-> `agentdescent.types.EvidenceCard`), and `GroupTracker` (the group-relative advantage
a card carries). It must not commit, merge, or wait for other workers: the schedulers
decide when steps run, the aggregator what becomes of their cards.
"""

from __future__ import annotations

import collections
import functools
import logging
import math
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..budget.allocator import pre_spend_context
from ..budget.governor import BudgetGovernor
from ..errors import EditRefused, ProposalContractError
from ..fate import CardFate, FateKind, FateLog
from ..merge.relevance import Relevance
from ..merge.strategies import Strategy
from ..seams import unwrap
from ..types import Diff, EvidenceCard, Task, sanitize_text, stable_hash
from ..usage import thread_tokens
from .counters import Counters
from .demos import DemoChooser, PromptGuard
from .executors import CallRunner

logger = logging.getLogger("agentdescent.worker")

__all__ = ["FailureBuffer", "GroupTracker", "Rollout", "TaskWalk", "WorkerContext", "card_step", "rollout_step"]


class GroupTracker:
    """Rewards per base version: the group-relative advantage, one rule for both runtimes.

    The advantage of a rollout is the z-score of its reward among every reward finished so
    far on the same base version (itself included); 0.0 while the group has fewer than two
    or no spread. The sync runtime adds a whole round before asking, so a round's rollouts
    on one version form one group; the async runtime asks as each rollout finishes, so the
    first rollout on a version scores 0.0. Each group keeps its last ``keep`` rewards.
    """

    def __init__(self, keep: int = 256) -> None:
        self._lock = threading.Lock()
        self._groups: dict[int, collections.deque[float]] = {}
        self._keep = keep

    def add(self, version: int, reward: float) -> None:
        """Record one finished rollout's reward."""
        with self._lock:
            self._groups.setdefault(version, collections.deque(maxlen=self._keep)).append(reward)

    def state_dict(self, versions: int = 8) -> dict[str, list[float]]:
        """The groups of the newest ``versions`` versions, JSON-ready (older ones are done)."""
        with self._lock:
            keep = sorted(self._groups)[-versions:]
            return {str(v): list(self._groups[v]) for v in keep}

    def load_state_dict(self, state: Mapping[str, Sequence[float]]) -> None:
        """Put back a `state_dict`."""
        with self._lock:
            for v, rewards in state.items():
                self._groups[int(v)] = collections.deque((float(r) for r in rewards), maxlen=self._keep)

    def advantage(self, version: int, reward: float) -> float:
        """``(reward - mean) / std`` over the version's group; 0.0 when it has no spread."""
        with self._lock:
            group = list(self._groups.get(version, ()))
        if len(group) < 2:
            return 0.0
        mean = sum(group) / len(group)
        std = math.sqrt(sum((g - mean) ** 2 for g in group) / len(group))
        return 0.0 if std == 0.0 else (reward - mean) / std


class TaskWalk:
    """A seeded walk over the train tasks that prefers the ones the head does not solve yet.

    Rollouts teach where they fail: a solved rollout proposes nothing. The walk keeps each
    train task's last rollout reward and visits the *open* tasks first — never rolled out,
    or last seen below 1 — in a seeded order, each once per pass. A commit marks the train
    tasks its diff plausibly affects (`agentdescent.merge.relevance.Relevance`) as presumed
    solved: they are left for last, after every other open task (a plausible effect is not
    a fix), until a rollout shows what they score. With probability ``explore`` a step is a
    seeded uniform draw over every train task instead (so solved tasks are revisited now and
    then, and a regression there is seen); when no task is open, every step is. One rule for
    both engines.

    Args:
        train: the train tasks.
        seed: seeds the order and the exploration draws.
        explore: share of steps that draw uniformly, in [0, 1].
        relevance: ranks the train tasks against a committed diff (None: commits mark nothing).
    """

    def __init__(self, train: Sequence[Task], seed: int, explore: float = 0.1,
                 relevance: Relevance | None = None) -> None:
        self._train = list(train)
        self._rng = random.Random(stable_hash(seed, "task-walk"))
        self.explore = explore
        self._relevance = relevance
        self._last: dict[str, float] = {}
        self._presumed: set[str] = set()
        self._queue: list[Task] = []
        self._lock = threading.Lock()
        self.explored = 0
        self.skipped_presumed = 0

    def _open(self, task: Task) -> bool:
        return self._last.get(task.id, 0.0) < 1.0

    def _fresh(self, task: Task) -> bool:
        """Open, and not presumed solved by a commit."""
        return task.id not in self._presumed and self._last.get(task.id, 0.0) < 1.0

    def next(self) -> Task:
        """The next task to roll out."""
        with self._lock:
            if self._rng.random() >= self.explore:
                while self._queue or any(self._open(t) for t in self._train):
                    if not self._queue:
                        fresh = [t for t in self._train if self._fresh(t)]
                        self._queue = fresh or [t for t in self._train if self._open(t)]
                        self._rng.shuffle(self._queue)
                    task = self._queue.pop()
                    # A task presumed solved since it was queued waits for the last pass.
                    if self._fresh(task) or (self._open(task) and not any(self._fresh(t) for t in self._queue)
                                             and not any(self._fresh(t) for t in self._train)):
                        return task
            self.explored += 1
            return self._train[int(self._rng.random() * len(self._train))]

    def observe(self, task: Task, reward: float) -> None:
        """A rollout of ``task`` scored ``reward`` (on the worker's snapshot)."""
        with self._lock:
            self._last[task.id] = float(reward)
            self._presumed.discard(task.id)

    def note_commit(self, diff: Diff, trajectory: Sequence[Task]) -> None:
        """``diff`` was committed: the train tasks it plausibly affects are presumed solved."""
        if self._relevance is None:
            return
        scores = self._relevance.affected(diff, trajectory)
        with self._lock:
            for task, score in zip(self._train, scores):
                if score > 0 and self._last.get(task.id, 0.0) < 1.0:
                    self._presumed.add(task.id)
                    self.skipped_presumed += 1

    def stats(self) -> dict[str, int]:
        """What the walk did: exploration draws, tasks presumed solved by commits, tasks still open."""
        with self._lock:
            return {"walk_explored": self.explored, "walk_presumed_solved": self.skipped_presumed,
                    "walk_open": sum(self._open(t) for t in self._train)}

    def state_dict(self) -> dict[str, Any]:
        """Where the walk stands (the RNG, the last rewards, the presumed-solved tasks, the pass), JSON-ready."""
        with self._lock:
            version, internal, gauss = self._rng.getstate()
            return {"format": "walk/1", "rng": [version, list(internal), gauss], "last": dict(self._last),
                    "presumed": sorted(self._presumed), "queue": [t.id for t in self._queue],
                    "explored": self.explored, "skipped_presumed": self.skipped_presumed}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go on from a saved `state_dict` (tasks no longer in the train set are skipped)."""
        if state.get("format") != "walk/1":
            return  # an older run's walk: start a fresh one on the same seed
        by_id = {t.id: t for t in self._train}
        with self._lock:
            version, internal, gauss = state["rng"]
            self._rng.setstate((version, tuple(internal), gauss))
            self._last = {k: float(v) for k, v in state.get("last", {}).items() if k in by_id}
            self._presumed = {k for k in state.get("presumed", []) if k in by_id}
            self._queue = [by_id[i] for i in state.get("queue", []) if i in by_id]
            self.explored = int(state.get("explored", 0))
            self.skipped_presumed = int(state.get("skipped_presumed", 0))


class FailureBuffer:
    """Each worker's latest failed rollouts, for a proposer that reflects on several at once.

    ``LLMAgent(reflect_on=k)`` asks for a proposal with up to ``k - 1`` other failures of
    the same worker on the same artifact version beside the one that prompts it (GEPA's
    reflective minibatch); this buffer keeps them. ``width`` is ``k`` (1: nothing is kept
    and proposals carry one failure, as they always did).
    """

    def __init__(self, width: int) -> None:
        self.width = width
        self._lock = threading.Lock()
        self._by_worker: dict[int, collections.deque[Rollout]] = {}

    @classmethod
    def for_agent(cls, agent: Any) -> FailureBuffer:
        """The buffer an agent's ``reflect_on`` asks for (width 1 without one)."""
        width = getattr(unwrap(agent), "reflect_on", 1) if agent is not None else 1
        return cls(width if isinstance(width, int) and not isinstance(width, bool) and width > 1 else 1)

    def add(self, rollout: Rollout) -> None:
        """Keep ``rollout`` (a failed one) as its worker's latest."""
        if self.width <= 1:
            return
        with self._lock:
            self._by_worker.setdefault(rollout.worker_id, collections.deque(maxlen=self.width)).append(rollout)

    def others(self, rollout: Rollout) -> list[tuple[Task, str, float]]:
        """Up to ``width - 1`` other failures of the worker on the same version, newest first."""
        with self._lock:
            kept = list(self._by_worker.get(rollout.worker_id, ()))
        out = [(r.task, r.output, r.reward) for r in reversed(kept)
               if r is not rollout and r.version == rollout.version and r.task.id != rollout.task.id]
        return out[: self.width - 1]


class WorkerContext(Protocol):
    """What a worker step reads of its run (the run's environment provides it)."""

    artifact_id: str
    blast_radius: float
    strategy: Strategy
    runner: CallRunner
    propose: Callable[..., str | None]
    governor: BudgetGovernor
    groups: GroupTracker
    cycle: TaskWalk
    counters: Counters
    self_verify: bool
    chooser: DemoChooser
    guard: PromptGuard | None
    failures: FailureBuffer
    explain_proposal: Callable[..., Any] | None
    refusals: FateLog


@dataclass
class Rollout:
    """One finished rollout of a worker on its snapshot."""

    worker_id: int
    task: Task
    version: int
    state: dict[str, str]
    rendered: str
    output: str
    reward: float  # a `agentdescent.rewards.builtin.Score`: the proposer reads its ``feedback``
    tokens: int = 0


def rollout_step(env: WorkerContext, worker_id: int, task: Task, version: int, state: Mapping[str, str]) -> Rollout:
    """Roll ``task`` out on the worker's snapshot and record its reward in the version's group.

    Raises:
        BackendFailure: the rollout failed for good.
    """
    rendered = env.strategy.render(state)
    tokens_before = thread_tokens()
    output, reward = env.runner.solve_and_score(
        rendered, task, what=f"worker {worker_id} rollout of task {task.id!r}", phase="rollout", worker=worker_id)
    env.counters.add("rollouts")
    if reward < 1.0:
        env.counters.add("rollouts_failed")
    env.groups.add(version, reward)
    env.cycle.observe(task, reward)
    tokens = thread_tokens() - tokens_before
    env.counters.add("step_tokens", tokens)
    return Rollout(worker_id, task, version, dict(state), rendered, output, reward, tokens)


def _model_proposal(env: WorkerContext, rollout: Rollout) -> str | None:
    """Ask the agent for a rule, rewrite or edit (with the worker's other failures when it reflects on several).

    With an agent that says why it proposed nothing (``explain_proposal``, as
    `agentdescent.LLMAgent`), a reply that is no change is recorded as its proposal's fate:
    ``declined`` (NONE) or ``refused`` with the kind; a plain ``propose`` returning None is
    ``declined``.
    """
    task = rollout.task
    explain = env.explain_proposal
    propose = explain if explain is not None else env.propose
    if env.failures.width > 1:
        propose = functools.partial(propose, failures=env.failures.others(rollout))
    reply = env.runner.call(
        propose, rollout.rendered, task, rollout.output, rollout.reward,
        what=f"worker {rollout.worker_id} proposal for task {task.id!r}", phase="proposal",
        worker=rollout.worker_id)
    env.counters.add("proposals")
    kind, example = None, ""
    if explain is not None:
        if not hasattr(reply, "text") or not hasattr(reply, "kind"):
            raise ProposalContractError(
                f"explain_proposal returned {type(reply).__name__} for task {task.id!r}; return an object with "
                "text (the change, or None) and kind (as agentdescent.agents.proposals.ParsedProposal)")
        proposal, kind, example = reply.text, reply.kind, getattr(reply, "example", "")
        proposal = sanitize_text(proposal) if isinstance(proposal, str) else proposal
    else:
        proposal = reply
    if proposal is not None and not isinstance(proposal, str):
        raise ProposalContractError(
            f"propose returned {type(proposal).__name__} for task {task.id!r}; "
            "return a str (one change) or None (no change)"
        )
    if proposal is None:
        author = f"worker-{rollout.worker_id}"
        if kind in (None, "declined"):
            said = "the model answered NONE" if kind == "declined" else "the proposer returned None"
            env.refusals.add(CardFate(FateKind.DECLINED, f"{said} for task {task.id!r}: no change",
                                      author=author))
        else:
            env.refusals.add(CardFate(FateKind.REFUSED, f"the reply to task {task.id!r} was refused ({kind})",
                                      {"by": "agent", "kind": str(kind), "example": str(example or "")},
                                      author=author))
    return proposal


def _proposal_diff(env: WorkerContext, rollout: Rollout, kind: str) -> Diff | None:
    """The diff of this rollout's proposal of ``kind`` (a model's, or a demonstration), or None."""
    author = f"worker-{rollout.worker_id}"
    if kind in ("labeled", "bootstrapped"):
        env.counters.add(f"demos_{kind}")
        return env.chooser.diff(kind, rollout.task, rollout.output, rollout.state, author=author,
                                version=rollout.version, target=env.artifact_id)
    proposal = _model_proposal(env, rollout)
    if proposal is None:
        return None
    try:
        return env.strategy.to_diff(rollout.state, proposal, author, rollout.version, env.artifact_id)
    except EditRefused as refused:
        # an edit that does not apply (a code strategy): counted like a refused reply
        env.counters.add("edits_refused")
        env.counters.add(f"edits_refused_{refused.reason}")  # by kind, as the replies' refusals are
        env.refusals.add(CardFate(FateKind.REFUSED, f"the edit for task {rollout.task.id!r} does not apply: "
                                  f"{refused}", {"by": "edit", "kind": refused.reason}, author=author))
        logger.debug("worker %d: edit refused (%s): %s", rollout.worker_id, refused.reason, refused)
        return None


def card_step(env: WorkerContext, rollout: Rollout) -> EvidenceCard | None:
    """Propose after a rollout and build its evidence card.

    What is proposed is the run's ``proposal=`` rule (`agentdescent.engine.demos.DemoChooser`):
    after an unsolved rollout, a model proposal or a labeled demonstration; after a
    full-marks one, a bootstrapped demonstration or nothing. A diff that would put a
    held-out or test prompt into the artifact is refused (``demos_refused``, no card).
    The advantage is read from the run's `GroupTracker` now. The budget governor is asked
    once, from the card's pre-spend features, whether the candidate is worth its optional
    spend: its self-verify rollout (re-run the task on the patched artifact, when
    ``self_verify`` is on; never for a demonstration of the task itself, which would only
    show the model copying it). With an allocator the same answer is ``card.allocated``,
    the candidate's held-out evaluation at the merge; the spend floors alone (no allocator)
    never refuse that evaluation. A skipped self-verify records ``before_after_delta =
    0.0``; the card still goes to the merge, where a candidate with no allocated card is not
    evaluated (so not committed).

    Raises:
        BackendFailure: the proposal or the self-verify failed for good.
        ProposalContractError: the proposer returned neither ``str`` nor ``None``.
    """
    task = rollout.task
    if rollout.reward < 1.0:
        env.failures.add(rollout)
    kind = env.chooser.kind(task, rollout.version, rollout.state, rollout.reward, rollout.output)
    if kind is None:
        return None
    advantage = env.groups.advantage(rollout.version, rollout.reward)
    tokens_before = thread_tokens()
    try:
        diff = _proposal_diff(env, rollout, kind)
        if diff is None:
            return None
        refusal = env.guard.refusal(diff) if env.guard is not None else None
        if refusal is not None:
            env.counters.add("demos_refused")
            env.refusals.add(CardFate(FateKind.REFUSED, f"a {kind} proposal from task {task.id!r} refused: {refusal}",
                                      {"by": "guard", "kind": "evaluation_prompt"}, diff.diff_id, diff.author))
            logger.info("worker %d: a %s proposal from task %r refused: %s", rollout.worker_id, kind, task.id,
                        refusal)
            return None
        card = EvidenceCard(diff, {env.artifact_id: rollout.version}, None, advantage, [task],
                            feedback=getattr(rollout.reward, "feedback", ""), proposal_kind=kind)
        # The spend floors alone (no allocator) cut only the optional spend, the self-verify;
        # whether a candidate gets its held-out evaluation is an allocator's call to make.
        worth = env.governor.allocate(card, pre_spend_context(card, env.blast_radius))
        if not env.governor.evaluates(card):
            env.counters.add("not_allocated")
        if env.self_verify and kind == "model":
            if worth:
                patched = env.strategy.render(diff.apply(rollout.state))
                _, verified = env.runner.solve_and_score(
                    patched, task, what=f"worker {rollout.worker_id} self-verify of task {task.id!r}",
                    phase="self_verify", worker=rollout.worker_id,
                )
                card.before_after_delta = float(verified) - float(rollout.reward)
                card.self_verified = True
                env.counters.add("self_verify_rollouts")
            else:
                card.before_after_delta = 0.0
                env.counters.add("self_verify_skipped")
        elif kind != "model":
            card.before_after_delta = 0.0
    finally:
        spent = thread_tokens() - tokens_before
        env.counters.add("step_tokens", spent)
    card.cost_tokens = rollout.tokens + spent
    env.counters.add("cards")
    env.counters.add("card_tokens", card.cost_tokens)
    return card
