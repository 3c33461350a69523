"""The aggregator: turns a batch of evidence cards into at most one commit per artifact.

This module owns the merge pipeline (trust region, staleness filter, conflict
resolution, fusion, acceptance, the L1 oracle gate, compare-and-swap commit) and the
allocator feedback. It is the only writer of the ledger in a run. It must not call a
language model, read the clock or use the global RNG: given the same cards, ledger and
evaluator it makes the same decisions.

The path of one decision reads straight through: the head read once (a
`agentdescent.merge.prepare.HeadSnapshot`) -> `agentdescent.merge.prepare.Preparer.prepare`
(pool draw, trust region, staleness, conflicts, fusion: no held-out spend) -> the
self-verify gate -> `agentdescent.merge.measurement.Measurer.measure` (the paired
sequential test of `agentdescent.merge.acceptance`, affected tasks first, noise-aware) ->
`Aggregator._decide` (acceptance, oracle, CAS, and exactly one allocator report).
`Aggregator._settle` books a decision once it has ended: counters, the eta histogram
and the evidence pool, which later decisions draw on (`AggregatorConfig.pool_draw`).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..budget.allocator import AllocatorPolicy, pre_spend_context
from ..budget.merge_budget import NO_BUDGET, GateBudget, MergeBudget
from ..errors import CASConflict, GovernanceError, InvalidArgument, InvalidArgumentType
from ..fate import CardFate, FateKind
from ..ledger import Ledger
from ..seams import adopt
from ..types import EvidenceCard, MergeOutcome, MergeReport, Task
from .aggregator_config import AggregatorConfig
from .evidence_pool import EvidencePool
from .governance import ArtifactInfo, Layer, classify
from .measurement import Evaluator, Measurement, Measurer, Prepared
from .noise import NoiseMonitor
from .prepare import CommitMemory, HeadSnapshot, Intake, Preparer
from .scoreboard import HeadEstimate, Scoreboard
from .staleness import GuardedStaleness, StalenessPolicy

__all__ = ["Aggregator", "AggregatorConfig", "Evaluator"]

logger = logging.getLogger("agentdescent.aggregator")

class Aggregator:
    """Merges evidence cards into the ledger, one decision per artifact per step.

    Workers (any thread) call `ingest`; the merging thread calls `step`.
    Every measured outcome (committed, below-threshold, oracle-rejected,
    cas-conflict) is reported to the allocator exactly once, with the pre-spend
    context of the attributable card: the first contributor of a fused candidate, or
    the selected card of a single one.

    Args:
        ledger: where states are versioned and committed.
        evaluator: scores states (see `Evaluator`).
        config: pipeline knobs.
        staleness_policy: defaults to `GuardedStaleness`.
        allocator: receives outcome feedback (optional).
        budget: the run's budget, the merge's one budget input
            (`agentdescent.budget.merge_budget.MergeBudget`: whether each card gets its
            held-out evaluation, whether the optional fusion tournament is affordable); the
            engines pass their `agentdescent.BudgetGovernor`. None: the tournament always
            runs, and a card is evaluated unless its ``allocated`` records a refusal.
        tournament_gate: the older form of ``budget``: a callable saying whether the
            tournament is affordable (a card is then evaluated unless ``card.allocated`` is
            False). Not with ``budget``.

    Raises:
        InvalidArgument: both ``budget`` and ``tournament_gate``.
        InvalidArgumentType: a ``budget`` without ``evaluates`` and ``allows_tournament``.
    """

    def __init__(
        self,
        ledger: Ledger,
        evaluator: Evaluator,
        config: AggregatorConfig | None = None,
        staleness_policy: StalenessPolicy | None = None,
        allocator: AllocatorPolicy | None = None,
        *,
        budget: MergeBudget | None = None,
        tournament_gate: Callable[[], bool] | None = None,
    ) -> None:
        self.ledger = adopt(ledger, Ledger, "ledger")
        self.evaluator = adopt(evaluator, Evaluator, "evaluator")
        if config is not None and not isinstance(config, AggregatorConfig):
            raise InvalidArgumentType(f"config={config!r:.80}: pass an agentdescent.AggregatorConfig or None")
        self.config = config if config is not None else AggregatorConfig()
        self.staleness_policy = (adopt(staleness_policy, StalenessPolicy, "staleness_policy")
                                 if staleness_policy is not None else GuardedStaleness())
        self.allocator = adopt(allocator, AllocatorPolicy, "allocator") if allocator is not None else None
        if budget is not None and tournament_gate is not None:
            raise InvalidArgument("pass budget= or tournament_gate=, not both (a budget answers the tournament too)")
        if budget is not None and not isinstance(budget, MergeBudget):
            raise InvalidArgumentType(f"budget={budget!r:.80}: pass an object with evaluates(card) and "
                                      "allows_tournament() (an agentdescent.BudgetGovernor), or None")
        #: the merge's one budget input (`agentdescent.budget.merge_budget.MergeBudget`)
        self.budget: MergeBudget = budget if budget is not None else (
            GateBudget(tournament_gate) if tournament_gate is not None else NO_BUDGET)
        self._lock = threading.Lock()
        self._pending: list[EvidenceCard] = []
        self.pool = EvidencePool(self.config.evidence_pool_size)
        self.eta_histogram: collections.Counter[int] = collections.Counter()
        self._blast: dict[str, float] = {}
        self.counters: collections.Counter[str] = collections.Counter()
        self.measurer = Measurer(self.evaluator, self.config, self.counters)
        #: the diffs committed here for recent versions, with their trajectory tasks
        self.memory = CommitMemory()
        self.preparer = Preparer(self)
        #: artifact -> its head version as of this step's one read (or this aggregator's commit)
        self._heads: dict[str, int] = {}

    # ------------------------------------------------------------------ intake

    def ingest(self, card: EvidenceCard) -> None:
        """Queue a card for the next `step` (thread-safe).

        Raises:
            GovernanceError: the card targets a frozen (L0) artifact.
            LedgerError: the card targets an artifact the ledger does not know.
        """
        target = card.diff.target
        if self._layer(target) is Layer.L0_FROZEN:
            raise GovernanceError(
                f"artifact {target!r} is frozen (L0): it can never be evolved; "
                "propose changes to another artifact id"
            )
        with self._lock:
            self._pending.append(card)
            self.counters["ingested"] += 1

    def alpha_for(self, artifact_id: str) -> int:
        """The staleness tolerance of an artifact: ``alpha_head`` for L1, ``alpha_tail`` otherwise.

        The one place alpha is chosen (from `classify`);
        the engines' admission pacing asks here too.
        """
        return self._alpha(self._layer(artifact_id))

    def _alpha(self, layer: Layer) -> int:
        return self.config.alpha_head if layer is Layer.L1_SLOW else self.config.alpha_tail

    def _layer(self, artifact_id: str) -> Layer:
        return classify(ArtifactInfo(artifact_id, self._blast_radius(artifact_id)))

    def _blast_radius(self, artifact_id: str) -> float:
        # fixed at registration, so one ledger read per artifact is enough
        if artifact_id not in self._blast:
            self._blast[artifact_id] = float(self.ledger.blast_radius(artifact_id))
        return self._blast[artifact_id]

    def pending(self) -> int:
        """Cards waiting for the next step."""
        with self._lock:
            return len(self._pending)

    @property
    def evidence_pool(self) -> tuple[EvidenceCard, ...]:
        """The pooled cards, oldest first (a snapshot; read it from the merging thread).

        Cards the staleness filter discarded, the weaker sides of contradictions and
        survivors set aside by fusion. Later steps re-try some of them
        (`AggregatorConfig.pool_draw`); a card stays listed after its retries are used
        up, until newer entries evict it (`AggregatorConfig.evidence_pool_size`).
        """
        return self.pool.cards()

    @property
    def scoreboard(self) -> Scoreboard:
        """The head's held-out scores per version (`agentdescent.merge.scoreboard.Scoreboard`)."""
        return self.measurer.scoreboard

    @property
    def noise(self) -> NoiseMonitor:
        """What the noise probe and the re-draws showed (`agentdescent.merge.noise.NoiseMonitor`)."""
        return self.measurer.noise

    def measure_head(self, artifact_id: str, sample: int) -> HeadEstimate:
        """Score the current head on up to ``sample`` held-out tasks it has no score for (seeded order).

        The engines call it once, before any work, so the starting head's reward is a
        measurement, not a guess; later versions are measured task by task as candidates
        need them.
        """
        version, state = self.ledger.head(artifact_id)
        return self.measurer.measure_head(artifact_id, version, state, sample)

    def measure_final(self, artifact_id: str, *, counter: str = "final_tasks_scored") -> HeadEstimate:
        """Score the current head on every held-out task it has no score for (`Measurer.measure_rest`).

        The engines call it once, as a run ends: the reported final reward is then measured on
        the whole held-out set, not an estimate. It reads the head from the ledger (a head
        another driver committed is scored in full). They also call it when a round's estimate
        reaches the run's ``target_reward`` (``counter="target_tasks_scored"``), so a target is
        met on a measurement, never on inherited scores.
        """
        version, state = self.ledger.head(artifact_id)
        self._heads[artifact_id] = version
        return self.measurer.measure_rest(artifact_id, version, state, counter=counter)

    def head_estimate(self, artifact_id: str) -> HeadEstimate:
        """The current head's held-out reward as far as it was measured (no spend).

        See `agentdescent.merge.scoreboard`: scores measured on the head, inherited from the
        version it was committed on where its candidate was not scored, the mean of what is
        known for a task never scored.
        """
        return self.scoreboard.estimate(artifact_id, self.head_version(artifact_id))

    def head_version(self, artifact_id: str) -> int:
        """The head version as of this step: the one read of the head a merge makes, or the commit it made.

        Each `step` reads every artifact it merges once (a `HeadSnapshot`) and knows the
        version its commit made, so the round's record and the saved progress read the
        head from here rather than from the ledger again. An artifact the step did not
        merge is read once, on first ask.
        """
        if artifact_id not in self._heads:
            self._heads[artifact_id] = self.ledger.head(artifact_id)[0]
        return self._heads[artifact_id]

    def pool_state(self) -> list[dict[str, Any]]:
        """The evidence pool, JSON-ready, oldest first (saved with a run's progress)."""
        return self.pool.state()

    def restore_pool(self, entries: Sequence[Mapping[str, Any]], tasks: Mapping[str, Task]) -> None:
        """Put back a `pool_state` (a resumed run draws on what the killed one had pooled)."""
        self.pool.restore(entries, tasks)

    def memory_state_dict(self) -> dict[str, Any]:
        """What later decisions remember of earlier ones, JSON-ready (saved with a run's progress).

        The diffs committed here for the last
        `agentdescent.merge.prepare.REMEMBERED_COMMITS` versions of each artifact (with
        their trajectory tasks' ids: the rebase checks that reuse a self-verify read them)
        and the number of measured decisions (per-run error control spends its rate over them), so a resumed run decides as the
        uninterrupted one would.
        """
        return {"committed": self.memory.state_dict(), "decisions": self.measurer.decisions}

    def load_memory_state_dict(self, state: Mapping[str, Any], tasks: Mapping[str, Task]) -> None:
        """Put back a `memory_state_dict` (task ids no longer known are dropped)."""
        self.memory.load_state_dict(state.get("committed", []), tasks)
        self.measurer.decisions = int(state.get("decisions", 0))

    def head_state_dict(self, artifact_id: str, version: int) -> dict[str, Any]:
        """The scores known for ``version``, JSON-ready (saved with a run's progress)."""
        return self.scoreboard.state_dict(artifact_id, version)

    def load_head_state_dict(self, artifact_id: str, version: int, state: Mapping[str, Any]) -> None:
        """Put back `head_state_dict` (a resumed run does not pay for its head again)."""
        self.scoreboard.load_state_dict(artifact_id, version, state)

    # ------------------------------------------------------------------ step

    def step(self) -> list[MergeReport]:
        """Merge every pending card: one `MergeReport` per artifact with cards.

        Each artifact merged also re-tries up to `AggregatorConfig.pool_draw` cards from
        the evidence pool: that artifact's pooled cards, oldest first, that have been
        re-tried fewer than `AggregatorConfig.pool_retries` times, whose diff is not
        already in the head, that write no key a card of the batch writes (the step's new
        cards, or a card drawn before them: fresher evidence for a key wins, and drawn
        cards never contradict each other), that the staleness policy would not discard
        outright (eta is measured from the card's original ``base_version``, so a card
        only grows staler), and that did not fail the rebase re-verification on the very
        head version it would be re-verified on. The drawn cards join the new ones
        (after them) and go through the same pipeline: staleness, conflicts, fusion,
        acceptance, the oracle gate, CAS. Nothing bypasses acceptance. They count in the
        report's ``considered``; the eta histogram, ``discarded_stale``, ``rebased``,
        ``rebase_rejected`` and ``set_aside`` count each worker card once, on arrival, and
        what became of a drawn card is counted under ``pool_*`` (`AggregatorConfig.pool_draw`).

        An artifact with pooled cards but no new ones is not merged: a step in which
        nothing arrived for an artifact spends nothing on it, the runtimes keep their
        one report per artifact with cards, and the re-tries stay paced by the workers'
        progress in both runtimes alike (the sync runtime steps once per round, the async
        one once per sweep).

        If the evaluator or the ledger raises, the cards of the artifact being merged
        go back to the queue and the pool is left as it was (nothing is lost or counted
        twice), and the error propagates.
        """
        with self._lock:
            cards, self._pending = self._pending, []
        self._heads.clear()
        by_artifact: dict[str, list[EvidenceCard]] = {}
        for card in cards:
            by_artifact.setdefault(card.diff.target, []).append(card)
        reports: list[MergeReport] = []
        for position, (artifact_id, group) in enumerate(by_artifact.items()):
            try:
                reports.append(self._merge(artifact_id, group))
            except BaseException:
                rest = [c for g in list(by_artifact.values())[position:] for c in g]
                with self._lock:
                    self._pending = rest + self._pending
                raise
        self.counters["steps"] += 1
        return reports

    def _merge(self, artifact_id: str, cards: list[EvidenceCard]) -> MergeReport:
        intake = Intake()
        # A card the budget governor judged not worth its optional spend is not evaluated
        # at all (not even on the cheap subset), so it cannot be committed; it keeps its
        # evidence in the pool, and nothing is measured or reported to the allocator.
        evaluated: list[EvidenceCard] = []
        skipped: list[EvidenceCard] = []
        for card in cards:
            (evaluated if self.budget.evaluates(card) else skipped).append(card)
        if skipped:
            self.counters["not_evaluated"] += len(skipped)
            intake.set_aside.extend(skipped)
            for card in skipped:
                intake.end(card, FateKind.NOT_ALLOCATED, "the budget governor judged it not worth its held-out "
                           "evaluation: not evaluated, its evidence pooled")
            cards = evaluated
            if not cards:
                report = MergeReport(
                    artifact_id, MergeOutcome.BELOW_THRESHOLD, considered=len(skipped),
                    reason=f"not evaluated: the budget governor judged {len(skipped)} card(s) "
                    "not worth their held-out evaluation",
                )
                self._settle(intake, report)
                return report
        version, state = self.ledger.head(artifact_id)
        head = HeadSnapshot(version, state, self.ledger.versions())
        self._heads[artifact_id] = version
        layer = self._layer(artifact_id)
        prepared = self.preparer.prepare(artifact_id, head, cards, intake, blast_radius=self._blast_radius(artifact_id),
                                         layer=layer, alpha=self._alpha(layer))
        if isinstance(prepared, MergeReport):
            prepared.considered += len(skipped)
            if skipped:
                prepared.reason += f"; {len(skipped)} more not evaluated (the budget governor's call)"
            self._settle(intake, prepared)
            logger.debug("merge %s: %s (%s)", artifact_id, prepared.outcome.value, prepared.reason)
            return prepared
        intake.contributors = list(prepared.contributors)
        gated = self._gate(prepared)
        if gated is not None:
            gated.considered += len(skipped)
            self._feedback(prepared, gated)  # measured (on the trajectory tasks) and refused
            self._settle(intake, gated)
            logger.debug("merge %s: %s (%s)", artifact_id, gated.outcome.value, gated.reason)
            return gated
        measurement = self.measurer.measure(prepared)
        report = self._decide(prepared, measurement)
        report.considered += len(skipped)
        acc = measurement.acceptance
        if report.outcome is MergeOutcome.BELOW_THRESHOLD and acc.gains and not acc.losses:
            # Gains and no loss, but too few tasks to settle it: the cards keep their
            # evidence in the pool, where a later merge can fuse them with others.
            intake.set_aside.extend(prepared.contributors)
            self.counters["pooled_for_evidence"] += 1
        self._settle(intake, report)
        logger.info(
            "merge %s: %s (%s)", artifact_id, report.outcome.value, report.reason
        )
        return report

    def _gate(self, prepared: Prepared) -> MergeReport | None:
        """The self-verify gate: a report that ends the decision before any held-out call, or None.

        A candidate every card of which self-verified and none of which improved the task it
        was proposed from has shown no sign of helping: with ``self_verify_gate`` it is
        dropped here (``merge_gate_dropped``) without a held-out call. It ends
        ``below-threshold`` and, like every measured rejection, is reported to the allocator
        once (its self-verify was the measurement).
        """
        if not self.config.self_verify_gate:
            return None
        cards = prepared.contributors
        if not cards or not all(c.self_verified for c in cards):
            return None
        if any((c.before_after_delta or 0.0) > 0 for c in cards):
            return None
        self.counters["gate_dropped"] += 1
        report = MergeReport(
            prepared.artifact_id, MergeOutcome.BELOW_THRESHOLD, accepted=prepared.candidate,
            fused=prepared.fused, considered=prepared.considered, discarded_stale=prepared.discarded_stale,
            conflicts_dropped=prepared.conflicts_dropped,
            feedback=[c.feedback for c in cards if c.feedback],
            reason="self-verify gate: no card behind the candidate improved the task it was proposed "
                   "from, so it was not evaluated on held-out tasks",
        )
        _end_candidate(prepared, report, FateKind.GATED,
                       {"deltas": [c.before_after_delta or 0.0 for c in cards]})
        return report

    def _settle(self, intake: Intake, report: MergeReport) -> None:
        """Book a finished decision: counters, the eta histogram, the evidence pool.

        Done only once the decision has ended, so a step that fails and is retried never
        pools, draws or counts a card twice. A drawn card leaves the pool here: it comes
        back one retry older if it was discarded or set aside again, and not at all if it
        was measured (committed, or rejected on held-out evidence, like a new card).
        """
        report.fates[:0] = intake.fates  # the steps before the measurement ended these
        self.counters[report.outcome.value] += 1
        self.counters["discarded_stale"] += report.discarded_stale
        self.counters["rebased"] += intake.rebased
        self.counters["rebase_rejected"] += intake.rebase_rejected
        self.counters["already_in_head"] += intake.already_in_head
        self.eta_histogram.update(intake.etas)
        returned = self.pool.settle(intake.drawn, (*intake.pooled, *intake.set_aside),
                                    rejected=intake.rejected, stale=intake.stale, head_version=intake.head_version)
        drawn = {id(entry.card): entry for entry in intake.drawn}
        self.counters["set_aside"] += sum(id(card) not in drawn for card in intake.set_aside)
        if drawn:
            committed = []
            if report.outcome is MergeOutcome.COMMITTED:
                committed = [drawn[id(card)] for card in intake.contributors if id(card) in drawn]
            self.counters["pool_drawn"] += len(drawn)
            self.counters["pool_committed"] += len(committed)
            self.counters["pool_recovered"] += sum(entry.stale for entry in committed)
            self.counters["pool_returned"] += returned
            self.counters["pool_dropped"] += len(drawn) - len(committed) - returned

    # ------------------------------------------------------------------ decide

    def _changed_tasks(self, measurement: Measurement) -> dict[str, list[str]]:
        """The held-out tasks the candidate fixed and broke (by id), when the evaluator names its tasks."""
        tasks = getattr(self.evaluator, "held_out_tasks", None)
        if not tasks:
            return {}
        head = measurement.head_scores
        fixed = [tasks[i].id for i, s in sorted(measurement.candidate_scores.items()) if i in head and s > head[i]]
        broke = [tasks[i].id for i, s in sorted(measurement.candidate_scores.items()) if i in head and s < head[i]]
        return {"fixed": fixed, "broke": broke}

    def _decide(self, prepared: Prepared, measurement: Measurement) -> MergeReport:
        """End a measured merge: acceptance, oracle gate, CAS commit; report to the allocator once."""
        acc = measurement.acceptance
        report = MergeReport(
            prepared.artifact_id,
            MergeOutcome.BELOW_THRESHOLD,
            accepted=prepared.candidate,
            fused=prepared.fused,
            considered=prepared.considered,
            discarded_stale=prepared.discarded_stale,
            conflicts_dropped=prepared.conflicts_dropped,
            p_improve=acc.confidence, evidence={**acc.evidence(measurement.n), **self._changed_tasks(measurement)},
            feedback=[c.feedback for c in prepared.contributors if c.feedback],
            trajectory=tuple(prepared.trajectory),
        )
        suffix = f"; {', '.join(prepared.notes)}" if prepared.notes else ""
        oracle: tuple[float, float] | None = None
        if acc.accept and prepared.layer is Layer.L1_SLOW:
            oracle = self.measurer.complete(prepared, measurement)
        kind = FateKind.BELOW_TEST
        if not acc.accept:
            report.reason = acc.reason + suffix
        elif oracle is not None and not oracle[0] > oracle[1]:
            report.outcome, kind = MergeOutcome.ORACLE_REJECTED, FateKind.ORACLE_REJECTED
            report.reason = (
                f"L1 oracle gate: held-out mean {oracle[0]:.4f} over all {measurement.n} task(s) does "
                f"not strictly beat the head's {oracle[1]:.4f}{suffix}"
            )
        elif (veto := self._veto(prepared)) is not None:
            self.counters["commit_vetoes"] += 1
            kind = FateKind.VETOED
            report.reason = f"vetoed before the commit: {veto}{suffix}"
        else:
            version = self._commit(prepared, measurement)
            if version is None:
                report.outcome, kind = MergeOutcome.CAS_CONFLICT, FateKind.CAS_LOST
                report.reason = (
                    f"lost {self.config.cas_attempts} compare-and-swap attempt(s) to "
                    f"concurrent writers{suffix}"
                )
            else:
                report.outcome, kind = MergeOutcome.COMMITTED, FateKind.COMMITTED
                report.committed_version = version
                report.reason = acc.reason + suffix
        _end_candidate(prepared, report, kind, report.evidence or {})
        self._feedback(prepared, report)
        return report

    def _veto(self, prepared: Prepared) -> str | None:
        """`AggregatorConfig.commit_veto` on the head and the candidate's state: a reason to refuse, or None.

        A single card's diff was checked on this very head in `_prepare`; only a fused
        candidate (whose members may break a test together) is checked again here.
        """
        veto = self.config.commit_veto
        if veto is None or not prepared.fused:
            return None
        reason = veto(prepared.head_state, prepared.candidate.apply(prepared.head_state))
        return None if reason is None else str(reason)

    def _commit(self, prepared: Prepared, measurement: Measurement) -> int | None:
        """CAS commit with bounded retry: re-apply the same diff to a fresh head, never overwrite."""
        base_version, base_state = prepared.head_version, prepared.head_state
        meta = {
            "diff_id": prepared.candidate.diff_id,
            "author": prepared.candidate.author,
            "fused": prepared.fused,
            "contributors": [c.diff.diff_id for c in prepared.contributors],
            "p_improve": measurement.acceptance.confidence,
            "e_value": measurement.acceptance.e_value,
            "gains": measurement.acceptance.gains,
            "losses": measurement.acceptance.losses,
            "scored": measurement.scored,
        }
        feedback = [c.feedback for c in prepared.contributors if c.feedback]
        if feedback:
            meta["feedback"] = feedback  # what the reward said about the rollouts behind it
        for attempt in range(self.config.cas_attempts):
            new_state = prepared.candidate.apply(base_state)
            try:
                version = self.ledger.commit(
                    prepared.artifact_id, new_state, base_version, meta=meta
                )
            except CASConflict:
                self.counters["cas_retries"] += 1
                logger.info(
                    "CAS lost on %s at v%d (attempt %d); re-applying to the fresh head",
                    prepared.artifact_id, base_version, attempt + 1,
                )
                fresh_version, fresh_state = self.ledger.head(prepared.artifact_id)
                self._heads[prepared.artifact_id] = fresh_version
                touched = [
                    k for k in prepared.candidate.ops
                    if fresh_state.get(k) != base_state.get(k)
                ]
                if touched:
                    # The winner wrote a key this diff writes too: re-applying would
                    # overwrite its value unmeasured. Never overwrite the winner.
                    logger.info("CAS winner on %s changed %s; giving up", prepared.artifact_id, touched)
                    return None
                base_version, base_state = fresh_version, fresh_state
                continue
            self._heads[prepared.artifact_id] = version
            if base_version == prepared.head_version:  # the new head is the candidate's very state
                self.memory.remember(prepared.artifact_id, version, prepared.candidate, prepared.trajectory)
                self.scoreboard.commit(prepared.artifact_id, base_version, version, measurement.candidate_scores,
                                       measurement.projected, measurement.touched)
            else:
                self.scoreboard.commit(prepared.artifact_id, base_version, version, {},
                                       affected=set(range(self.scoreboard.n_tasks)))
            return version
        return None

    def _feedback(self, prepared: Prepared, report: MergeReport) -> None:
        """Report one measured outcome to the allocator: the attributable card's pre-spend
        context, with the audit fields filled in after the fact (the model never reads them)."""
        if self.allocator is None:
            return
        card = prepared.attributable
        ctx = replace(
            pre_spend_context(card, prepared.blast_radius),
            before_after_delta=card.before_after_delta,
            p_improve=report.p_improve,
            stable_distance=float(prepared.head_version - card.base_version.get(prepared.artifact_id, prepared.head_version)),
        )
        self.allocator.observe(ctx, report.outcome is MergeOutcome.COMMITTED)
        self.counters["allocator_observations"] += 1


def _end_candidate(prepared: Prepared, report: MergeReport, kind: FateKind, numbers: Mapping[str, Any]) -> None:
    """Record the fate of each card behind the measured (or gated) candidate: the decision's, with its numbers."""
    report.fates.extend(
        CardFate(kind, report.reason, dict(numbers), c.diff.diff_id, c.diff.author, fused=prepared.fused,
                 retried=id(c) in prepared.retried)
        for c in prepared.contributors)
