"""One candidate's held-out evaluation: the paired sequential test, scored batch by batch.

This module owns `Measurer`, the part of the aggregator that spends held-out calls: it
orders a candidate's held-out tasks (`agentdescent.merge.acceptance.evaluation_order`, affected
tasks first by `agentdescent.merge.relevance.Relevance`), scores them batch by batch on the
candidate and, where the head has no score yet, on the head (kept per version in
`agentdescent.merge.scoreboard.Scoreboard`), re-scores discordant pairs as the
`agentdescent.merge.noise.NoiseMonitor` says, feeds `agentdescent.merge.acceptance.PairedTest`, and
stops once the test settles. Each look's tasks, on both sides, are named before any of them is
scored (`Evaluator.prefetch`, so an evaluator can start them together); the scores are then
read and fed to the test in the same fixed order, whenever their calls ran. It also scores
the starting head's sample and, for the L1 oracle gate, the rest of an accepted candidate's
tasks.

It also owns the `Evaluator` seam (what it asks of whoever scores states). It must not
commit, read the clock or use the global RNG: the order is seeded by the head version and
the diff.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..seams import Seam
from ..types import Diff, EvidenceCard, Task, stable_hash
from .acceptance import AcceptanceDecision, PairedTest, evaluation_order
from .governance import Layer
from .noise import NoiseMonitor
from .relevance import Relevance
from .scoreboard import HeadEstimate, Scoreboard

__all__ = ["SPOT_CHECK_EVERY", "Evaluator", "Measurement", "Measurer", "Prepared"]

#: In a deterministic evaluation, one in this many reusable (clean) head scores is measured
#: again anyway: the free check that would notice noise, or a commit the relevance ranking
#: missed, goes on at a quarter of its cost.
SPOT_CHECK_EVERY = 4


class Evaluator(Seam):
    """Scores artifact states for the aggregator.

    Called only from the merging thread. ``held_out`` must score the same tasks in
    the same order on every call (the acceptance test pairs them); ``cheap`` scores a
    fixed small subset and is what conflict resolution, rebase checks and the fusion
    tournament rank on. Both should be deterministic for a given state.

    ``held_out`` and ``cheap`` are required; ``verify``, ``held_out_subset``, ``rescore``
    and ``prefetch`` are optional, with the defaults below. Subclass this class, or give
    any object with the two required methods: the aggregator wraps it
    (`agentdescent.seams.adopt`).
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("held_out", "cheap")
    OPTIONAL: ClassVar[tuple[str, ...]] = ("verify", "held_out_subset", "rescore", "prefetch", "held_out_tasks")

    #: The held-out tasks, in ``held_out``'s order, when the evaluator knows them (None: the
    #: acceptance test cannot rank them by relevance and scores them in a seeded order).
    held_out_tasks: Sequence[Task] | None = None

    def held_out(self, artifact_id: str, state: Mapping[str, str]) -> Sequence[float]:
        """Per-task rewards of ``state`` on the full held-out set."""
        raise NotImplementedError

    def cheap(self, artifact_id: str, state: Mapping[str, str]) -> float:
        """Mean reward of ``state`` on the fixed cheap subset."""
        raise NotImplementedError

    def verify(self, artifact_id: str, state: Mapping[str, str], tasks: Sequence[Task]) -> Sequence[float] | None:
        """Per-task rewards of ``state`` on ``tasks`` (the tasks that prompted a diff), or None.

        The optional rebase re-verification: when it returns scores, a rebased diff is
        re-run on the tasks that prompted it (before vs after on the fresh head); the
        default returns None, and the diff must instead strictly beat the head on the cheap
        subset.
        """
        return None

    def held_out_subset(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> Sequence[float]:
        """Per-task rewards of ``state`` on the held-out tasks at ``indices`` (one batch).

        The sequential evaluation asks for a candidate's held-out scores batch by batch
        and stops once its decision is settled. The default scores the whole held-out set
        and picks the batch out (correct, but saving nothing); an evaluator that can score
        single tasks should override it, as the engines' evaluator does.
        """
        scores = self.held_out(artifact_id, state)
        return [scores[i] for i in indices]

    def rescore(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> Sequence[float] | None:
        """Fresh draws of ``state``'s rewards on the held-out tasks at ``indices`` (repeats allowed), or None.

        The noise-aware acceptance test re-scores a discordant pair before it counts when
        the evaluation is stochastic (a sampled model, a noisy reward): a cached score is
        one draw. The default cannot draw again (None), and the test then takes every score
        as it came; the engines' evaluator bypasses its cache.
        """
        return None

    def prefetch(self, artifact_id: str, batches: Sequence[tuple[Mapping[str, str], Sequence[int]]]) -> None:
        """Score several states' held-out tasks together, ahead of the `held_out_subset` calls that ask for them.

        A look of the paired test needs the candidate's batch and the head's scores on the
        same tasks. The tasks are fixed before this is called, and the scores are then read
        one `held_out_subset` call at a time, in the test's order: this only lets an
        evaluator that can run calls at once (the engines' evaluator, on the run's pool)
        start them together, and serve the reads that follow from what it scored. The
        default does nothing (each read scores its own batch). It may raise what
        `held_out_subset` raises.

        Args:
            artifact_id: the artifact.
            batches: ``(state, held-out indices)`` pairs.
        """
        return None


@dataclass
class Prepared:
    """A candidate ready for the held-out measurement (what `Aggregator._prepare` hands on)."""

    artifact_id: str
    head_version: int
    head_state: dict[str, str]
    blast_radius: float
    layer: Layer
    candidate: Diff
    fused: bool
    contributors: list[EvidenceCard]
    attributable: EvidenceCard
    considered: int
    discarded_stale: int
    conflicts_dropped: int
    notes: list[str] = field(default_factory=list)

    @property
    def trajectory(self) -> list[Task]:
        """The tasks behind the candidate: its contributors' trajectories, in order (the one way a commit's trajectory is built)."""
        return [t for c in self.contributors for t in c.trajectory_refs]



@dataclass
class Measurement:
    """One candidate's paired evaluation: the scores on both sides and the test's decision."""

    candidate_scores: dict[int, float]  # held-out task index -> the candidate's (mean) score
    head_scores: dict[int, float]  # the head's, on the same tasks
    acceptance: AcceptanceDecision
    scored: int = 0  # held-out tasks of the candidate actually scored
    n: int = 0  # held-out tasks in all
    projected: dict[int, float] = field(default_factory=dict)  # unscored affected tasks, estimated
    affected: set[int] = field(default_factory=set)  # the tasks the diff plausibly changes
    #: the tasks whose earlier scores the commit may have changed (``affected``; every task
    #: when the evaluator does not name its tasks and nothing can be ranked)
    touched: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class _HeadPlan:
    """What `Measurer._head_scores_on` will do on some tasks: score ``missing``, reuse ``reused``."""

    missing: list[int]
    reused: dict[int, float]
    clean_uses: int  # `Measurer.clean_uses` once the plan is followed


class _Room:
    """The curtailment bound's terms along one candidate's order, summed from the back once.

    For each stake, ``log(1 + lam * room)`` of every task in the order, as suffix sums, so
    the bound over the unscored tasks (a suffix) or over the next few (a slice) costs one
    subtraction per stake instead of a pass over the tasks: a look stays O(stakes).
    """

    def __init__(self, test: PairedTest, order: Sequence[int], room: Sequence[float]) -> None:
        self.size = len(order)
        self._suffix = []
        for lam in test.bets:
            sums = [0.0] * (self.size + 1)
            for j in range(self.size - 1, -1, -1):
                r = room[j]
                sums[j] = sums[j + 1] + (math.log1p(lam * r) if r > 0 else 0.0)
            self._suffix.append(sums)

    def between(self, start: int, stop: int) -> list[float]:
        """Per stake, the log terms of the tasks at positions ``start..stop-1`` of the order."""
        return [s[start] - s[stop] for s in self._suffix]

    def after(self, start: int) -> list[float] | None:
        """Per stake, the log terms of every task from position ``start`` on (None: none left)."""
        return self.between(start, self.size) if start < self.size else None


class Measurer:
    """Spends a merge's held-out calls: the starting head's sample, each candidate's paired test.

    Args:
        evaluator: the aggregator's evaluator.
        config: the aggregator's `agentdescent.merge.aggregator.AggregatorConfig` (read:
            ``false_accept_rate``, ``max_regressions``, ``sequential``, ``eval_batch``,
            ``random_share``, ``group_key``, ``relevance``, ``rescore``, ``noise_probe``,
            ``rescore_draws``).
        counters: the aggregator's counters (``held_out_tasks_scored``, ``head_tasks_scored``...).
    """

    def __init__(self, evaluator: Evaluator, config: Any, counters: collections.Counter[str]) -> None:
        self.evaluator = evaluator
        self.config = config
        self.counters = counters
        self.noise = NoiseMonitor(config.rescore, config.noise_probe, config.rescore_draws)
        self._scoreboard: Scoreboard | None = None
        self._relevance: Relevance | None = None
        #: reusable clean head scores met so far (every `SPOT_CHECK_EVERY`-th is measured again)
        self.clean_uses = 0
        self._reused_at: dict[tuple[str, int], set[int]] = {}  # clean scores reused, per version
        self._head_revised = False  # a stale reuse was found and re-scored: rebuild the test

    @property
    def scoreboard(self) -> Scoreboard:
        """The head's held-out scores per version (built on first use, from the evaluator's task count)."""
        if self._scoreboard is None:
            tasks = self.evaluator.held_out_tasks
            n = len(tasks) if tasks is not None else len(self.evaluator.held_out("", {}))
            self._scoreboard = Scoreboard(n)
        return self._scoreboard

    def measure_head(self, artifact_id: str, version: int, state: Mapping[str, str], sample: int) -> HeadEstimate:
        """Score the current head on ``sample`` held-out tasks (seeded order), unless it has scores already.

        The engines call it once, before any work, so the starting head's reward is a
        measurement, not a guess; later versions are measured task by task as candidates
        need them. A head with any score known (a resumed run restores its head's scores
        with its progress) is not scored again: the resumed run spends what the
        uninterrupted one would have.
        """
        board = self.scoreboard
        known = board.measured(artifact_id, version)
        if known or board.inherited(artifact_id, version):
            return board.estimate(artifact_id, version)
        order = sorted(range(board.n_tasks), key=lambda i: stable_hash(artifact_id, "head-sample", i))
        missing = [i for i in order if i not in known][: max(0, sample - len(known))]
        if missing:
            scores = [float(x) for x in self.evaluator.held_out_subset(artifact_id, state, missing)]
            board.record(artifact_id, version, dict(zip(missing, scores)))
            self.counters["head_tasks_scored"] += len(missing)
        return board.estimate(artifact_id, version)

    def _head_plan(self, artifact_id: str, version: int, indices: Sequence[int]) -> _HeadPlan:
        """Which of ``indices`` `_head_scores_on` will score on the head, and which clean scores it reuses.

        Pure (it reads the scoreboard and counts clean uses ahead without keeping the
        count), so `measure` can name the head's tasks before anything of the look is
        scored; `_head_scores_on` keeps the count when it follows the plan.
        """
        board = self.scoreboard
        known = board.measured(artifact_id, version)
        missing = [i for i in indices if i not in known]
        reused: dict[int, float] = {}
        uses = self.clean_uses
        if missing and self.noise.deterministic:
            for i in missing:
                earlier = board.clean(artifact_id, version, i)
                if earlier is None:
                    continue
                uses += 1
                if uses % SPOT_CHECK_EVERY:
                    reused[i] = earlier
            missing = [i for i in missing if i not in reused]
        return _HeadPlan(missing, reused, uses)

    def _head_scores_on(self, artifact_id: str, version: int, state: Mapping[str, str],
                        indices: Sequence[int], plan: _HeadPlan | None = None) -> dict[int, float]:
        """The head's scores on ``indices``: measured ones from the scoreboard, the rest scored now.

        In a deterministic evaluation an earlier measurement that no commit since plausibly
        changed (a *clean* score) is the head's score: it is used as it is, except that one
        in `SPOT_CHECK_EVERY` is scored again, as a free check that stays on. When a check
        shows that a commit did change a task the relevance ranking called unaffected, no
        clean score of this version is trusted any more: the ones this call was about to
        reuse are scored too, the version's clean scores are dropped, and the ones reused
        before at this version are measured (`measure` then compares its earlier pairs
        again with them).

        Args:
            plan: `_head_plan` of the same ``indices``, made since the last change to the
                scoreboard (None: made here).
        """
        board = self.scoreboard
        if plan is None:
            plan = self._head_plan(artifact_id, version, indices)
        self.clean_uses = plan.clean_uses
        known = board.measured(artifact_id, version)
        missing, reused = list(plan.missing), dict(plan.reused)
        if missing:
            fresh = self._score_head(artifact_id, version, state, missing)
            if self._checks_disagree(artifact_id, version, state, fresh) and reused:
                fresh.update(self._score_head(artifact_id, version, state, list(reused)))
                reused = {}
            board.record(artifact_id, version, fresh)
            known.update(fresh)
        if reused:
            board.record(artifact_id, version, reused)
            known.update(reused)
            self.counters["head_tasks_reused"] += len(reused)
            self._reused_at.setdefault((artifact_id, version), set()).update(reused)
        return {i: known[i] for i in indices}

    def _score_head(self, artifact_id: str, version: int, state: Mapping[str, str],
                    indices: Sequence[int]) -> dict[int, float]:
        scores = [float(x) for x in self.evaluator.held_out_subset(artifact_id, state, indices)]
        self.counters["head_tasks_scored"] += len(indices)
        return dict(zip(indices, scores))

    def _checks_disagree(self, artifact_id: str, version: int, state: Mapping[str, str],
                         fresh: Mapping[int, float]) -> bool:
        """Compare fresh head scores with the clean ones they replace (free checks); True on a relevance miss."""
        board = self.scoreboard
        earlier = {i: board.clean(artifact_id, version, i) for i in fresh}
        changed = {i: e for i, e in earlier.items() if e is not None and abs(e - fresh[i]) > 1e-9}
        for i, e in earlier.items():
            if e is not None and i not in changed:
                self.noise.observe_free(e, fresh[i])  # the head had to be scored anyway: a free check
        if not changed:
            return False
        missed = self._changed_or_noise(artifact_id, state, changed, fresh)
        if missed:
            board.drop_clean(artifact_id, version)
            stale = sorted(self._reused_at.pop((artifact_id, version), set()))
            if stale:  # scores reused earlier at this version are suspect too: measure them
                board.record(artifact_id, version, self._score_head(artifact_id, version, state, stale))
                self._head_revised = True
        return missed

    def _changed_or_noise(self, artifact_id: str, state: Mapping[str, str], earlier: Mapping[int, float],
                          fresh: Mapping[int, float]) -> bool:
        """A free check disagreed: noise, or a commit changed a task the ranking called unaffected?

        Each such task is drawn once more on the same head. A draw that repeats the new
        score says the commit changed the task (a relevance miss, counted in
        ``relevance_misses``, not noise); one that differs is noise. An evaluator that
        cannot draw again leaves it to the safe side: noise. Returns whether any task was a
        relevance miss.
        """
        changed = list(earlier)
        again = self.evaluator.rescore(artifact_id, state, changed)
        if again is None:
            for i in changed:
                self.noise.observe_free(earlier[i], fresh[i])  # a disagreement, as seen
            return False
        self.counters["free_check_redraws"] += len(changed)
        missed = False
        for i, x in zip(changed, again):
            if abs(float(x) - fresh[i]) <= 1e-9:
                self.counters["relevance_misses"] += 1
                missed = True
            else:
                self.noise.observe_redraw(fresh[i], float(x))
        return missed

    def measure(self, prepared: Prepared) -> Measurement:
        """The paired sequential test of the candidate against the head (`agentdescent.merge.acceptance`).

        The held-out tasks are scored in `evaluation_order`: the ones the candidate's diff
        most plausibly changes first (`agentdescent.merge.relevance.Relevance`, from the diff's
        text, the cards' trajectory tasks and ``group_key``), interleaved with a seeded
        sample of the rest; seeded by the head version and the diff, so a decision repeats
        bit for bit. Batch by batch (``eval_batch``) the candidate is scored, the head is
        scored on the same tasks where its score is not known yet (once per version), a
        discordant pair is re-scored as `NoiseMonitor` says before it counts, and the test
        is asked whether it has settled. ``sequential=False`` scores every task first.
        """
        cfg = self.config
        aid = prepared.artifact_id
        board = self.scoreboard
        n = board.n_tasks
        candidate_state = prepared.candidate.apply(prepared.head_state)
        self.counters["held_out_evals"] += 1
        seed = stable_hash(aid, prepared.head_version, sorted(prepared.candidate.ops.items()))
        relevance = self._relevance_of(prepared)
        order = evaluation_order(n, relevance, seed % (2**63), cfg.random_share)
        affected = {i for i in range(n) if relevance[i] > 0}
        ranked = self.relevance is not None
        touched = affected if ranked else set(range(n))
        test = PairedTest(n, cfg.false_accept_rate, cfg.max_regressions)
        room = _Room(test, order, self._room(order, {}, prepared))
        cand_scores: dict[int, float] = {}
        head_scores: dict[int, float] = {}
        decision = test.verdict(room_logs=room.after(0))
        start = 0
        while start < n:
            batch = self._next_batch(test, room, start) if cfg.sequential else n
            indices = order[start:start + batch]
            start += len(indices)
            # The look's tasks on both sides are fixed now; they are scored together, then
            # read in the test's order (concurrency changes when calls run, never what is used).
            plan = self._head_plan(aid, prepared.head_version, indices)
            self.evaluator.prefetch(aid, [(candidate_state, indices), (prepared.head_state, plan.missing)])
            cand = dict(zip(indices, (float(x) for x in self.evaluator.held_out_subset(aid, candidate_state, indices))))
            head = self._head_scores_on(aid, prepared.head_version, prepared.head_state, indices, plan)
            if self._head_revised:
                # A reused head score turned out stale: the earlier pairs are compared again
                # with the head's fresh scores, from a new test (nothing stale is counted).
                self._head_revised = False
                measured = board.measured(aid, prepared.head_version)
                head_scores = {i: measured.get(i, h) for i, h in head_scores.items()}
                test = PairedTest(n, cfg.false_accept_rate, cfg.max_regressions)
                for i in cand_scores:
                    test.add(i, cand_scores[i], head_scores[i])
            self._confirm(aid, prepared, candidate_state, cand, head)
            for i in indices:
                test.add(i, cand[i], head[i])
            cand_scores.update(cand)
            head_scores.update(head)
            rest = order[start:]
            futile = self._futile(rest, affected, cand_scores, head_scores) if rest and ranked else None
            covered = not any(i in affected for i in rest) and (
                sum(i not in affected for i in cand_scores) >= cfg.coverage_sample
                or not any(i not in affected for i in rest))
            decision = test.verdict(None, futile, room_logs=room.after(start), certain=self.noise.deterministic,
                                    covered=covered)
            # Refused for want of evidence where whether the evaluation is deterministic
            # decides it: find out now, on the candidate's own scored tasks.
            if (decision.settled and not decision.accept and covered and decision.gains and not decision.losses
                    and self.noise.state == "unknown"
                    and self._probe(aid, prepared, candidate_state, cand_scores, head_scores)):
                decision = test.verdict(None, futile, room_logs=room.after(start), certain=self.noise.deterministic,
                                    covered=covered)
            if decision.settled:
                break
        scored = len(cand_scores)
        self.counters["held_out_tasks_scored"] += scored
        self.counters["held_out_tasks_saved"] += n - scored
        projected: dict[int, float] = {}
        if scored < n:
            self.counters["accepted_early" if decision.accept else "rejected_early"] += 1
            if "futility" in decision.reason:
                self.counters["futility_stops"] += 1
            if decision.accept:
                projected = self._project(prepared, affected, cand_scores, head_scores)
        return Measurement(cand_scores, head_scores, decision, scored, n, projected, affected, touched)

    def _project(self, prepared: Prepared, affected: set[int], cand: Mapping[int, float],
                 head: Mapping[int, float]) -> dict[int, float]:
        """Estimates for the affected tasks an early acceptance left unscored: the head's score plus the mean gain."""
        scored = [i for i in cand if i in affected]
        if not scored:
            return {}
        gain = sum(cand[i] - head[i] for i in scored) / len(scored)
        board = self.scoreboard
        estimate = board.estimate(prepared.artifact_id, prepared.head_version)
        known = {**board.inherited(prepared.artifact_id, prepared.head_version),
                 **board.measured(prepared.artifact_id, prepared.head_version)}
        base = estimate.reward
        return {i: known.get(i, base) + gain for i in affected if i not in cand}

    def _next_batch(self, test: PairedTest, room: _Room, start: int) -> int:
        """``eval_batch``, or fewer when fewer tasks (all gains) would already pass: no overshoot."""
        limit = min(self.config.eval_batch, room.size - start)
        for k in range(1, limit):
            if test.best_completion_logs(room.between(start, start + k)) >= test.threshold:
                return k
        return limit

    def _futile(self, rest: Sequence[int], affected: set[int], cand: Mapping[int, float],
                head: Mapping[int, float]) -> str | None:
        """The futility rule: every affected task scored, and ``futility_sample`` others showed no gain."""
        sample = self.config.futility_sample
        if not sample or any(i in affected for i in rest):
            return None
        others = [i for i in cand if i not in affected]
        if len(others) < sample or any(cand[i] > head[i] + 1e-12 for i in others):
            return None
        return (f"futility: all {len(affected)} affected task(s) scored, and {len(others)} of the others "
                "showed no gain")

    @property
    def relevance(self) -> Relevance | None:
        """The ranking over the held-out tasks (None when the evaluator does not name them)."""
        tasks = self.evaluator.held_out_tasks
        if tasks is None:
            return None
        if self._relevance is None:
            self._relevance = Relevance(tasks, self.config.group_key, self.config.relevance)
        return self._relevance

    def _relevance_of(self, prepared: Prepared) -> list[float]:
        relevance = self.relevance
        if relevance is None:
            return [0.0] * self.scoreboard.n_tasks
        return relevance.affected(prepared.candidate, prepared.trajectory)

    def _room(self, rest: Sequence[int], head_scores: Mapping[int, float], prepared: Prepared) -> list[float]:
        """The largest gain each unscored task could still show: ``1 - head`` where known, else 1."""
        known = self.scoreboard.measured(prepared.artifact_id, prepared.head_version)
        return [1.0 - head_scores.get(i, known.get(i, 0.0)) for i in rest]

    def _probe(self, aid: str, prepared: Prepared, candidate_state: Mapping[str, str],
               cand: Mapping[int, float], head: Mapping[int, float]) -> bool:
        """Settle whether the evaluation is deterministic, on this candidate's own scored tasks.

        The discordant pairs were drawn again already (while the state is unknown every one
        is); the head is drawn again on the candidate's other scored tasks — round robin,
        so a task may be drawn more than once — until the monitor has ``noise_probe``
        agreeing observations or sees a disagreement: at most ``noise_probe`` extra calls,
        once in a run. With no other scored task the candidate's side of the discordant
        tasks is drawn instead. False if the evaluator cannot draw again.
        """
        short = self.noise.probe - self.noise.agreements
        if short <= 0:
            return True
        others = [i for i in cand if abs(cand[i] - head[i]) <= 1e-12]
        state, first = (prepared.head_state, head) if others else (candidate_state, cand)
        pool = others or list(cand)
        if not pool:
            return False
        indices = [pool[k % len(pool)] for k in range(short)]
        again = self.evaluator.rescore(aid, state, indices)
        if again is None:
            return False
        self.counters["probe_redraws"] += len(indices)
        for i, x in zip(indices, again):
            self.noise.observe_redraw(first[i], float(x))
            if self.noise.state != "unknown":
                break
        return True

    def _confirm(self, aid: str, prepared: Prepared, candidate_state: Mapping[str, str],
                 cand: dict[int, float], head: dict[int, float]) -> None:
        """Re-score the batch's discordant pairs as the noise monitor says; replace them by their means.

        Every discordant pair gets the same number of extra draws on both sides, gains and
        losses alike: symmetric in the two sides, so a candidate no better than the head
        still shows differences of mean zero and the test's rate holds (re-drawing only one
        kind of pair would tilt it).
        """
        discordant = [i for i in cand if abs(cand[i] - head[i]) > 1e-12]
        for i in discordant:
            extra = self.noise.extra_draws()
            if extra == 0:
                continue
            again_c = self.evaluator.rescore(aid, candidate_state, [i] * extra)
            again_h = self.evaluator.rescore(aid, prepared.head_state, [i] * extra)
            if again_c is None or again_h is None:
                return  # this evaluator cannot draw again: scores count as they came
            again_c, again_h = [float(x) for x in again_c], [float(x) for x in again_h]
            mean_c = (cand[i] + sum(again_c)) / (1 + len(again_c))
            mean_h = (head[i] + sum(again_h)) / (1 + len(again_h))
            overturned = (mean_c - mean_h) * (cand[i] - head[i]) <= 0
            self.noise.observe((cand[i], head[i]), (again_c, again_h), overturned)
            self.counters["rescored_pairs"] += 1
            cand[i], head[i] = mean_c, mean_h
            self.scoreboard.record(aid, prepared.head_version, {i: mean_h})

    def complete(self, prepared: Prepared, measurement: Measurement) -> tuple[float, float]:
        """The oracle gate's full comparison: every held-out task scored on both sides (candidate, head means)."""
        aid = prepared.artifact_id
        n = measurement.n
        rest = [i for i in range(n) if i not in measurement.candidate_scores]
        state = prepared.candidate.apply(prepared.head_state)
        plan = self._head_plan(aid, prepared.head_version, range(n))
        self.evaluator.prefetch(aid, [(state, rest), (prepared.head_state, plan.missing)])
        if rest:
            scores = [float(x) for x in self.evaluator.held_out_subset(aid, state, rest)]
            measurement.candidate_scores.update(zip(rest, scores))
            self.counters["held_out_tasks_scored"] += len(rest)
            self.counters["held_out_tasks_saved"] -= len(rest)
        head = self._head_scores_on(aid, prepared.head_version, prepared.head_state, range(n), plan)
        measurement.head_scores.update(head)
        return (sum(measurement.candidate_scores.values()) / n, sum(head.values()) / n)

