"""One candidate's held-out evaluation: the paired sequential test, scored batch by batch.

This module owns `Measurer`, the part of the aggregator that spends held-out calls. It
groups the held-out tasks into units of evidence (`agentdescent.merge.units.evidence_units`), learns whether a score
is a fact or a draw (`agentdescent.merge.noise.NoiseMonitor`), and feeds
`agentdescent.merge.acceptance.PairedTest` look by look until it settles: in a deterministic
evaluation the units the diff plausibly changes (`agentdescent.merge.relevance.Relevance`)
first and in full, then the others in a seeded uniformly random order, each scored once on
the candidate and, where the head has no score at this version yet, on the head (kept per
version in `agentdescent.merge.scoreboard.Scoreboard`); in a noisy one, units drawn with
replacement and scored afresh on both sides. Each deterministic look's tasks, on both sides,
are named before any of them is scored (`Evaluator.prefetch`, so an evaluator can start them
together). It also scores the starting head's sample and, for the L1 oracle gate, the rest
of an accepted candidate's tasks.

It also owns the `Evaluator` seam (what it asks of whoever scores states). It must not
commit, read the clock or use the global RNG: the order is seeded by the head version and
the diff.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..seams import Seam
from ..types import Diff, EvidenceCard, Task, stable_hash
from .acceptance import AcceptanceDecision, PairedTest, run_level
from .governance import Layer
from .noise import NoiseMonitor
from .relevance import Relevance
from .scoreboard import HeadEstimate, Scoreboard
from .units import evidence_units

__all__ = ["CONFIRM_GAINS", "STRATUM_SHARE", "Evaluator", "Measurement", "Measurer", "Prepared"]

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

        When the evaluation is stochastic (a sampled model, a noisy reward) a cached score
        is one draw: the acceptance test then draws both sides afresh for every piece of
        evidence, and the noise probe and the confirming draws use this too. The default
        cannot draw again (None), and the test then takes every score as it came (a fact);
        the engines' evaluator bypasses its cache.
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
    #: ids of the contributors drawn again from the evidence pool (their fates are re-tries)
    retried: frozenset[int] = frozenset()

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


#: In a learned (not declared) deterministic evaluation, an accepted candidate's gains are
#: drawn again on both sides, up to this many, before it commits: a noisy evaluator that
#: fooled the noise probe shows itself exactly where noise would have made the gains.
CONFIRM_GAINS = 4
#: The stratum holds at most this share of the held-out units (the most relevant ones): a
#: diff whose text matches most prompts would otherwise have every task scored before the
#: random order could reject it.
STRATUM_SHARE = 0.25


class Measurer:
    """Spends a merge's held-out calls: the starting head's sample, each candidate's paired test.

    Args:
        evaluator: the aggregator's evaluator.
        config: the aggregator's `agentdescent.merge.aggregator.AggregatorConfig` (read:
            ``false_accept_rate``, ``error_control``, ``acceptance_null``,
            ``local_regression_share``, ``evidence_groups``, ``max_regressions``,
            ``sequential``, ``eval_batch``, ``group_key``, ``relevance``, ``rescore``,
            ``noise_probe``, ``rescore_draws``, ``futility_sample``).
        counters: the aggregator's counters (``held_out_tasks_scored``, ``head_tasks_scored``...).
    """

    def __init__(self, evaluator: Evaluator, config: Any, counters: collections.Counter[str]) -> None:
        self.evaluator = evaluator
        self.config = config
        self.counters = counters
        self.noise = NoiseMonitor(config.rescore, config.noise_probe, config.rescore_draws)
        self._scoreboard: Scoreboard | None = None
        self._relevance: Relevance | None = None
        self._units: list[list[int]] | None = None
        #: measured decisions so far (per-run error control spends its rate over them)
        self.decisions = 0
        self._cannot_redraw = False

    @property
    def scoreboard(self) -> Scoreboard:
        """The head's held-out scores per version (built on first use, from the evaluator's task count)."""
        if self._scoreboard is None:
            tasks = self.evaluator.held_out_tasks
            n = len(tasks) if tasks is not None else len(self.evaluator.held_out("", {}))
            self._scoreboard = Scoreboard(n)
        return self._scoreboard

    @property
    def units(self) -> list[list[int]]:
        """The held-out units of evidence (`evidence_units`, from ``evidence_groups``)."""
        if self._units is None:
            self._units = evidence_units(self.evaluator.held_out_tasks, self.scoreboard.n_tasks,
                                         self.config.evidence_groups)
        return self._units

    def level(self, decision: int) -> float:
        """The false-accept rate decision number ``decision`` is tested at (`agentdescent.merge.acceptance.run_level`)."""
        rate = self.config.false_accept_rate
        return run_level(rate, decision) if self.config.error_control == "per_run" else rate

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

    def measure_rest(self, artifact_id: str, version: int, state: Mapping[str, str], *,
                     counter: str = "final_tasks_scored") -> HeadEstimate:
        """Score the head on every held-out task not measured on this version yet: then its estimate is exact.

        The engines call it once, as a run ends, so the result's reward is the final head's
        measured mean and not partly inherited from the versions before it. Each task is
        scored at most once per version (the measured ones are reused); the calls count as
        evaluation (``counter`` counts the tasks: ``final_tasks_scored`` as the run ends,
        ``target_tasks_scored`` when an estimate reached the run's target).
        """
        self._head_scores(artifact_id, version, state, range(self.scoreboard.n_tasks), counter=counter)
        return self.scoreboard.estimate(artifact_id, version)

    def _head_scores(self, artifact_id: str, version: int, state: Mapping[str, str],
                     indices: Sequence[int], *, counter: str = "head_tasks_scored") -> dict[int, float]:
        """The head's scores on ``indices`` at this version: measured ones reused, the rest scored now
        (and counted under ``counter``)."""
        board = self.scoreboard
        known = board.known_on(artifact_id, version, indices)
        missing = [i for i in dict.fromkeys(indices) if i not in known]
        if missing:
            scores = [float(x) for x in self.evaluator.held_out_subset(artifact_id, state, missing)]
            self.counters[counter] += len(missing)
            fresh = dict(zip(missing, scores))
            board.record(artifact_id, version, fresh)
            known.update(fresh)
        return {i: known[i] for i in indices}

    def _sampling(self) -> str:
        """``"without"`` when a score is a fact (deterministic, or nothing can be drawn again), else ``"with"``."""
        if self._cannot_redraw or self.config.rescore == 0 or self.noise.deterministic:
            return "without"
        return "with"

    def _probe(self, aid: str, version: int, state: Mapping[str, str]) -> None:
        """While it is unknown whether the evaluation reproduces: draw the head again on measured tasks.

        Up to ``noise_probe`` re-draws of the head's measured scores at this version
        (scoring a few first when none is measured), round robin, stopping at the first
        disagreement: once in a run. An evaluator that cannot draw again is taken as
        deterministic (its scores count as they came).
        """
        if self.noise.state != "unknown" or self._cannot_redraw:
            return
        known = self.scoreboard.measured(aid, version)
        if not known:
            order = sorted(range(self.scoreboard.n_tasks), key=lambda i: stable_hash(aid, "head-sample", i))
            known = self._head_scores(aid, version, state, order[: self.config.noise_probe])
        pool = sorted(known)
        indices = [pool[k % len(pool)] for k in range(max(0, self.noise.probe - self.noise.agreements))]
        if not indices:
            return
        again = self.evaluator.rescore(aid, state, indices)
        if again is None:
            self._cannot_redraw = True
            return
        self.counters["probe_redraws"] += len(indices)
        for i, x in zip(indices, again):
            self.noise.observe_redraw(known[i], float(x))
            if self.noise.state != "unknown":
                break

    def measure(self, prepared: Prepared) -> Measurement:
        """The paired sequential test of the candidate against the head, for the full held-out mean.

        Deterministic (declared, learned, or an evaluator that cannot draw again): the
        units the diff plausibly changes (`agentdescent.merge.relevance.Relevance`) are
        scored first and in full, then the others in a uniformly random order, without
        replacement (`agentdescent.merge.acceptance`). Noisy or not known yet: units drawn
        uniformly with replacement, both sides scored afresh. Batch by batch
        (``eval_batch`` tasks); seeded by the head version and the diff, so a decision
        repeats bit for bit. ``sequential=False`` scores a deterministic candidate's every
        task before deciding.
        """
        self.counters["held_out_evals"] += 1
        self.decisions += 1
        level = self.level(self.decisions)
        if self.config.rescore == "auto":
            self._probe(prepared.artifact_id, prepared.head_version, prepared.head_state)
        if self._sampling() == "without":
            return self._without_replacement(prepared, level)
        return self._with_replacement(prepared, level)

    def _seed(self, prepared: Prepared) -> int:
        return stable_hash(prepared.artifact_id, prepared.head_version,
                           sorted(prepared.candidate.ops.items())) % (2**63)

    def _stratum(self, prepared: Prepared) -> tuple[list[int], set[int]]:
        """The stratum: the units the diff plausibly changes, most relevant first (at most `STRATUM_SHARE` of them).

        Returns it with every task the diff plausibly changes (also beyond the cap: a
        commit's affected tasks are not clean for the head estimate).
        """
        relevance = self._relevance_of(prepared)
        best: dict[int, float] = {}
        for u, members in enumerate(self.units):
            top = max(relevance[i] for i in members)
            if top > 0:
                best[u] = top
        cap = max(1, int(STRATUM_SHARE * len(self.units)))
        stratum = sorted(best, key=lambda u: (-best[u], u))[:cap]
        return stratum, {i for u in best for i in self.units[u]}

    def _batches(self, plan: Sequence[int]) -> Iterator[list[int]]:
        """``plan``'s units cut into looks of at least ``eval_batch`` tasks (one look when not sequential)."""
        if not self.config.sequential:
            if plan:
                yield list(plan)
            return
        units, width = self.units, self.config.eval_batch
        look: list[int] = []
        size = 0
        for u in plan:
            look.append(u)
            size += len(units[u])
            if size >= width:
                yield look
                look, size = [], 0
        if look:
            yield look

    def _without_replacement(self, prepared: Prepared, level: float) -> Measurement:
        cfg = self.config
        aid, version = prepared.artifact_id, prepared.head_version
        units = self.units
        n = self.scoreboard.n_tasks
        candidate_state = prepared.candidate.apply(prepared.head_state)
        stratum, affected = self._stratum(prepared)
        rest = [u for u in range(len(units)) if u not in set(stratum)]
        random.Random(self._seed(prepared)).shuffle(rest)
        test = PairedTest(len(units), level, cfg.max_regressions, sampling="without", stratum=stratum,
                          unit_size=max(len(m) for m in units), null=cfg.acceptance_null,
                          local_share=cfg.local_regression_share, n_tasks=n)
        if cfg.acceptance_null == "local":
            rest = rest[: test.local_sample]
        plan = stratum + rest
        # The bounds on what the unscored tasks could still add together: every one at its
        # best (``1 - head``) and at its worst (``-head``), from the head scores known at
        # the start (an unknown head score counts 0 for the best and 1 for the worst).
        known = self.scoreboard.measured(aid, version)
        planned = len(plan) == len(units)
        head_sum = sum(known.values()) if planned else sum(known.get(i, 0.0) for u in plan for i in units[u])
        tasks_left = n if planned else sum(len(units[u]) for u in plan)
        unknown_left = tasks_left - (len(known) if planned else sum(i in known for u in plan for i in units[u]))
        high_rest, low_rest = tasks_left - head_sum, -(head_sum + unknown_left)
        cand_scores: dict[int, float] = {}
        head_scores: dict[int, float] = {}
        decision = test.verdict(high_rest if plan else None, low_rest if plan else None)
        done = 0
        for look in self._batches(plan):
            if decision.settled:
                break
            indices = [i for u in look for i in units[u]]
            head_known = self.scoreboard.known_on(aid, version, indices)
            self.evaluator.prefetch(aid, [(candidate_state, indices),
                                          (prepared.head_state, [i for i in indices if i not in head_known])])
            cand = dict(zip(indices, (float(x) for x in self.evaluator.held_out_subset(aid, candidate_state, indices))))
            head = self._head_scores(aid, version, prepared.head_state, indices)
            for u in look:
                pairs = [(cand[i], head[i]) for i in units[u]]
                if u in test.stratum:
                    test.add_stratum(u, pairs)
                else:
                    test.add(u, pairs)
            cand_scores.update(cand)
            head_scores.update(head)
            done += len(look)
            for i in indices:
                was = known.get(i)
                high_rest -= 1.0 - (was or 0.0)
                low_rest += 1.0 if was is None else was
            left = done < len(plan)
            decision = test.verdict(high_rest if left else None, low_rest if left else None, cfg.futility_sample)
        if (decision.accept and not self.noise.declared and not self._cannot_redraw
                and not self._confirm(aid, prepared, candidate_state, cand_scores, head_scores)):
            self.counters["confirmations_overturned"] += 1
            self.counters["held_out_tasks_scored"] += len(cand_scores)  # spent, then tested afresh
            return self._with_replacement(prepared, level)
        return self._measurement(prepared, cand_scores, head_scores, decision, affected)

    def _confirm(self, aid: str, prepared: Prepared, candidate_state: Mapping[str, str],
                 cand: Mapping[int, float], head: Mapping[int, float]) -> bool:
        """Draw up to `CONFIRM_GAINS` of an accepted candidate's gains again on both sides; False if any differs.

        Only where the evaluation was learned to be deterministic: the noise probe can be
        fooled by a rarely noisy evaluator, and a noise-made gain is what would have
        carried the decision. A disagreement makes the evaluation noisy for good.
        """
        gains = [i for i in cand if cand[i] > head[i] + 1e-12][:CONFIRM_GAINS]
        if not gains:
            return True
        again_c = self.evaluator.rescore(aid, candidate_state, gains)
        again_h = self.evaluator.rescore(aid, prepared.head_state, gains)
        if again_c is None or again_h is None:
            return True
        self.counters["confirm_redraws"] += 2 * len(gains)
        for i, c, h in zip(gains, again_c, again_h):
            self.noise.observe_redraw(cand[i], float(c))
            self.noise.observe_redraw(head[i], float(h))
        return self.noise.state != "noisy"

    def _with_replacement(self, prepared: Prepared, level: float) -> Measurement:
        cfg = self.config
        aid, version = prepared.artifact_id, prepared.head_version
        units = self.units
        candidate_state = prepared.candidate.apply(prepared.head_state)
        _, affected = self._stratum(prepared)
        test = PairedTest(len(units), level, cfg.max_regressions, sampling="with",
                          unit_size=max(len(m) for m in units), n_tasks=self.scoreboard.n_tasks)
        rng = random.Random(self._seed(prepared))
        board = self.scoreboard
        first_c: dict[int, float] = {}
        first_h = board.measured(aid, version)
        draws_c: dict[int, list[float]] = collections.defaultdict(list)
        draws_h: dict[int, list[float]] = collections.defaultdict(list)
        decision = test.verdict(futility_sample=cfg.futility_sample)
        while not decision.settled:
            look: list[int] = []
            size = 0
            while size < cfg.eval_batch and len(look) + test.rest_units < test.draw_limit:
                u = rng.randrange(len(units))
                look.append(u)
                size += len(units[u])
            indices = [i for u in look for i in units[u]]
            cand = self.evaluator.rescore(aid, candidate_state, indices)
            head = self.evaluator.rescore(aid, prepared.head_state, indices) if cand is not None else None
            if cand is None or head is None:
                self._cannot_redraw = True  # nothing can be drawn again: scores count as they came
                return self._without_replacement(prepared, level)
            cand, head = [float(x) for x in cand], [float(x) for x in head]
            self.counters["held_out_draws"] += len(indices)
            unseen_head = {}
            for i, c, h in zip(indices, cand, head):
                if i in first_c:
                    self.noise.observe_free(first_c[i], c)  # the draw was evidence anyway: a free check
                else:
                    first_c[i] = c
                if i in first_h:
                    self.noise.observe_free(first_h[i], h)
                else:
                    first_h[i] = h
                    unseen_head[i] = h
                draws_c[i].append(c)
                draws_h[i].append(h)
            if unseen_head:  # the head's first score at this version (the estimate; never a fact here)
                board.record(aid, version, unseen_head)
            k = 0
            for u in look:
                pairs = list(zip(cand[k:k + len(units[u])], head[k:k + len(units[u])]))
                suspects = [i for i, (c, h) in zip(units[u], pairs) if h >= 0.5 > c]
                test.add(u, pairs, self._confirmed_regressions(aid, prepared, candidate_state, suspects))
                k += len(units[u])
            decision = test.verdict(futility_sample=cfg.futility_sample)
        cand_scores = {i: sum(v) / len(v) for i, v in draws_c.items()}
        head_scores = {i: sum(v) / len(v) for i, v in draws_h.items()}
        return self._measurement(prepared, cand_scores, head_scores, decision, affected)

    def _confirmed_regressions(self, aid: str, prepared: Prepared, candidate_state: Mapping[str, str],
                               suspects: Sequence[int]) -> int:
        """Of the tasks a noisy draw shows regressed, those whose re-drawn means still do.

        Each is drawn `NoiseMonitor.extra_draws` more times on both sides; it counts when
        the candidate's mean is below the pass mark and the head's at or above it. Only the
        regression guard reads this: the test's value counts the pair as first drawn, so
        re-drawing one kind of pair cannot tilt it.
        """
        confirmed = 0
        for i in suspects:
            extra = self.noise.extra_draws()
            if extra == 0:
                confirmed += 1
                continue
            again_c = self.evaluator.rescore(aid, candidate_state, [i] * extra)
            again_h = self.evaluator.rescore(aid, prepared.head_state, [i] * extra)
            if again_c is None or again_h is None:
                confirmed += 1
                continue
            self.counters["regression_redraws"] += 2 * extra
            mean_c = sum(float(x) for x in again_c) / extra
            mean_h = sum(float(x) for x in again_h) / extra
            confirmed += mean_h >= 0.5 > mean_c
        return confirmed

    def _measurement(self, prepared: Prepared, cand: dict[int, float], head: dict[int, float],
                     decision: AcceptanceDecision, affected: set[int]) -> Measurement:
        n = self.scoreboard.n_tasks
        scored = len(cand)
        self.counters["held_out_tasks_scored"] += scored
        self.counters["held_out_tasks_saved"] += max(0, n - scored)
        projected: dict[int, float] = {}
        if scored < n:
            self.counters["accepted_early" if decision.accept else "rejected_early"] += 1
            if "futility" in decision.reason:
                self.counters["futility_stops"] += 1
            if decision.accept:
                projected = self._project(prepared, cand, head, affected)
        touched = affected if self.relevance is not None else set(range(n))
        return Measurement(cand, head, decision, scored, n, projected, affected, touched)

    def _project(self, prepared: Prepared, cand: Mapping[int, float], head: Mapping[int, float],
                 affected: set[int]) -> dict[int, float]:
        """Estimates for the tasks an early acceptance left unscored: the head's score plus the mean gain.

        The mean gain of the scored tasks of the same kind — the affected ones for an
        affected task, the randomly ordered others for the rest (an unbiased estimate of
        their mean, as they were sampled without replacement) — added to what is known of
        the head there (measured, else inherited, else the head's estimate). For the
        round's reported reward only: never a score the paired test uses.
        """
        def mean_gain(inside: bool) -> float:
            diffs = [cand[i] - head[i] for i in cand if (i in affected) == inside]
            return sum(diffs) / len(diffs) if diffs else 0.0

        board = self.scoreboard
        aid, version = prepared.artifact_id, prepared.head_version
        known = {**board.inherited(aid, version), **board.measured(aid, version)}
        base = board.estimate(aid, version).reward
        gains = {True: mean_gain(True), False: mean_gain(False)}
        return {i: min(1.0, max(0.0, known.get(i, base) + gains[i in affected]))
                for i in range(board.n_tasks) if i not in cand}

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

    def complete(self, prepared: Prepared, measurement: Measurement) -> tuple[float, float]:
        """The oracle gate's full comparison: every held-out task scored on both sides (candidate, head means)."""
        aid = prepared.artifact_id
        n = measurement.n
        rest = [i for i in range(n) if i not in measurement.candidate_scores]
        state = prepared.candidate.apply(prepared.head_state)
        known = self.scoreboard.measured(aid, prepared.head_version)
        self.evaluator.prefetch(aid, [(state, rest), (prepared.head_state, [i for i in range(n) if i not in known])])
        if rest:
            scores = [float(x) for x in self.evaluator.held_out_subset(aid, state, rest)]
            measurement.candidate_scores.update(zip(rest, scores))
            self.counters["held_out_tasks_scored"] += len(rest)
            self.counters["held_out_tasks_saved"] -= len(rest)
        head = self._head_scores(aid, prepared.head_version, prepared.head_state, range(n))
        measurement.head_scores.update(head)
        return (sum(measurement.candidate_scores.values()) / n, sum(head.values()) / n)
