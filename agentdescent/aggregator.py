"""The aggregator: turns a batch of evidence cards into at most one commit per artifact.

This module owns the merge pipeline (trust region, staleness filter, conflict
resolution, fusion, acceptance, the L1 oracle gate, compare-and-swap commit) and the
allocator feedback. It is the only writer of the ledger in a run. It must not call a
language model, read the clock or use the global RNG: given the same cards, ledger and
evaluator it makes the same decisions.

The path of one decision reads straight through: `Aggregator._prepare` (no
held-out spend) -> `Aggregator._measure` (the held-out evaluation) ->
`Aggregator._decide` (acceptance, oracle, CAS, and exactly one allocator report).
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .acceptance import AcceptanceDecision, decide_acceptance
from .allocator import AllocatorPolicy, pre_spend_context
from .fusion import rank_cards, resolve_conflicts, union_diff, union_members
from .governance import ArtifactInfo, Layer, classify
from .staleness import GuardedStaleness, StaleAction, StalenessPolicy
from .types import (
    CASConflict,
    Diff,
    EvidenceCard,
    GovernanceError,
    MergeOutcome,
    MergeReport,
    Task,
    vv_staleness,
)

if TYPE_CHECKING:
    from .ledger import Ledger

__all__ = ["Aggregator", "AggregatorConfig", "Evaluator"]

logger = logging.getLogger("agentdescent.aggregator")


@runtime_checkable
class Evaluator(Protocol):
    """Scores artifact states for the aggregator.

    Called only from the merging thread. ``held_out`` must score the same tasks in
    the same order on every call (the acceptance test pairs them); ``cheap`` scores a
    fixed small subset and is what conflict resolution, rebase checks and the fusion
    tournament rank on. Both should be deterministic for a given state.
    """

    def held_out(self, artifact_id: str, state: Mapping[str, str]) -> Sequence[float]:
        """Per-task rewards of ``state`` on the full held-out set."""
        ...

    def cheap(self, artifact_id: str, state: Mapping[str, str]) -> float:
        """Mean reward of ``state`` on the fixed cheap subset."""
        ...

    def verify(self, artifact_id: str, state: Mapping[str, str], tasks: Sequence[Task]) -> Sequence[float] | None:
        """Per-task rewards of ``state`` on ``tasks`` (the tasks that prompted a diff), or None.

        The optional rebase re-verification: when it returns scores, a rebased diff is
        re-run on the tasks that prompted it (before vs after on the fresh head); the
        default returns None, and the diff must instead strictly beat the head on the cheap
        subset. Subclass `Evaluator` to inherit this default.
        """
        return None


@dataclass(frozen=True)
class AggregatorConfig:
    """Knobs of the merge pipeline.

    Args:
        base_delta: acceptance risk budget at version 0 (annealed with the version).
        alpha_head: staleness tolerance for slow (L1) artifacts.
        alpha_tail: staleness tolerance for fast (L2) artifacts.
        trust_region_ops: largest diff (in ops) considered; larger ones are ``oversized``.
        trust_region_chars: largest diff payload (in characters) considered.
        cas_attempts: commit attempts before giving up with ``cas-conflict``.
        fusion_tournament: rank the singles and the union on the cheap score and send
            the best forward (instead of the union whenever it beats the head).
        max_regressions: held-out tasks a candidate may regress (None: no guard).
        fusion_requires_evidence: keep a survivor out of a union when its self-verify ran
            and measured no gain while a partner's measured a gain (so a wrong but
            neutral-looking diff cannot ride in on its partners' evidence).
        evidence_pool_size: discarded cards kept for later inspection.
    """

    base_delta: float = 0.5
    alpha_head: int = 5
    alpha_tail: int = 1
    trust_region_ops: int = 6
    trust_region_chars: int = 32000
    cas_attempts: int = 3
    fusion_tournament: bool = False
    max_regressions: int | None = 0
    evidence_pool_size: int = 256
    fusion_requires_evidence: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.base_delta) and 0.0 < self.base_delta <= 0.5):
            raise ValueError(f"base_delta={self.base_delta!r}: use a number in (0, 0.5]")
        for name in ("alpha_head", "alpha_tail"):
            if int(getattr(self, name)) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r}: use a version count >= 0")
        for name in ("trust_region_ops", "trust_region_chars", "cas_attempts", "evidence_pool_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: use an integer >= 1")
        if self.max_regressions is not None and self.max_regressions < 0:
            raise ValueError(f"max_regressions={self.max_regressions!r}: use a count >= 0 or None")


@dataclass
class _Prepared:
    """A candidate ready for the held-out measurement."""

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


@dataclass
class _Intake:
    """What one decision will book once it has ended (see ``Aggregator._settle``)."""

    etas: list[int] = field(default_factory=list)
    pooled: list[EvidenceCard] = field(default_factory=list)
    set_aside: list[EvidenceCard] = field(default_factory=list)


@dataclass
class _Measurement:
    candidate_scores: list[float]
    head_scores: list[float]
    acceptance: AcceptanceDecision


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
        tournament_gate: a callable saying whether the optional fusion tournament is
            still affordable (the budget governor's ``allow_fusion_tournament``).
    """

    def __init__(
        self,
        ledger: Ledger,
        evaluator: Evaluator,
        config: AggregatorConfig | None = None,
        staleness_policy: StalenessPolicy | None = None,
        allocator: AllocatorPolicy | None = None,
        *,
        tournament_gate: Callable[[], bool] | None = None,
    ) -> None:
        if not isinstance(evaluator, Evaluator):
            missing = [m for m in ("held_out", "cheap", "verify") if not callable(getattr(evaluator, m, None))]
            raise TypeError(
                f"evaluator={evaluator!r:.80} lacks {', '.join(missing)}(); subclass "
                "agentdescent.Evaluator to inherit the optional verify() default"
            )
        self.ledger = ledger
        self.evaluator = evaluator
        self.config = config if config is not None else AggregatorConfig()
        self.staleness_policy = staleness_policy if staleness_policy is not None else GuardedStaleness()
        self.allocator = allocator
        self.tournament_gate = tournament_gate
        self._lock = threading.Lock()
        self._pending: list[EvidenceCard] = []
        self._head_scores: dict[tuple[str, int], list[float]] = {}
        self.evidence_pool: collections.deque[EvidenceCard] = collections.deque(
            maxlen=self.config.evidence_pool_size
        )
        self.eta_histogram: collections.Counter[int] = collections.Counter()
        self._blast: dict[str, float] = {}
        self.counters: collections.Counter[str] = collections.Counter()

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

    def head_scores(self, artifact_id: str) -> list[float]:
        """Held-out scores of the current head (cached per version)."""
        version, state = self.ledger.head(artifact_id)
        return self._scores_of_head(artifact_id, version, state)

    def cached_head_scores(self, artifact_id: str, version: int) -> list[float] | None:
        """Held-out scores of ``version`` if this aggregator already measured it, else None (no spend)."""
        return self._head_scores.get((artifact_id, version))

    def _scores_of_head(self, artifact_id: str, version: int, state: Mapping[str, str]) -> list[float]:
        key = (artifact_id, version)
        if key not in self._head_scores:
            self._head_scores[key] = [float(s) for s in self.evaluator.held_out(artifact_id, state)]
            self.counters["held_out_evals"] += 1
        return self._head_scores[key]

    # ------------------------------------------------------------------ step

    def step(self) -> list[MergeReport]:
        """Merge every pending card: one `MergeReport` per artifact with cards.

        If the evaluator or the ledger raises, the cards of the artifact being merged
        go back to the queue (nothing is lost) and the error propagates.
        """
        with self._lock:
            cards, self._pending = self._pending, []
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
        intake = _Intake()
        prepared = self._prepare(artifact_id, cards, intake)
        if isinstance(prepared, MergeReport):
            self._settle(intake, prepared)
            logger.debug("merge %s: %s (%s)", artifact_id, prepared.outcome.value, prepared.reason)
            return prepared
        measurement = self._measure(prepared)
        report = self._decide(prepared, measurement)
        self._settle(intake, report)
        logger.info(
            "merge %s: %s (%s)", artifact_id, report.outcome.value, report.reason
        )
        return report

    def _settle(self, intake: _Intake, report: MergeReport) -> None:
        """Book a finished decision: counters, the eta histogram, the evidence pool.

        Done only once the decision has ended, so a step that fails and is retried never
        pools or counts a card twice.
        """
        self.counters[report.outcome.value] += 1
        self.counters["discarded_stale"] += report.discarded_stale
        self.eta_histogram.update(intake.etas)
        self.evidence_pool.extend(intake.pooled)
        # Survivors that lost to a better single keep their evidence in the pool too
        # (counted apart: they were not judged, only outranked).
        self.evidence_pool.extend(intake.set_aside)
        self.counters["set_aside"] += len(intake.set_aside)

    # ------------------------------------------------------------------ prepare

    def _prepare(
        self, artifact_id: str, cards: list[EvidenceCard], intake: _Intake
    ) -> _Prepared | MergeReport:
        """Trust region, staleness, conflicts and fusion: everything before the held-out spend."""
        cfg = self.config
        version, head_state = self.ledger.head(artifact_id)
        blast = self._blast_radius(artifact_id)
        layer = self._layer(artifact_id)
        alpha = self._alpha(layer)
        considered = len(cards)

        in_region = [
            c for c in cards
            if c.diff.size() <= cfg.trust_region_ops and c.diff.chars() <= cfg.trust_region_chars
        ]
        oversized = considered - len(in_region)
        if not in_region:
            return MergeReport(
                artifact_id, MergeOutcome.OVERSIZED, considered=considered,
                reason=f"all {considered} diff(s) exceed the trust region "
                f"({cfg.trust_region_ops} ops / {cfg.trust_region_chars} chars)",
            )

        cheap_cache: dict[tuple[tuple[str, str | None], ...], float] = {}

        def cheap_with(diff: Diff) -> float:
            key = tuple(sorted(diff.ops.items(), key=lambda kv: kv[0]))
            if key not in cheap_cache:
                cheap_cache[key] = float(self.evaluator.cheap(artifact_id, diff.apply(head_state)))
                self.counters["cheap_evals"] += 1
            return cheap_cache[key]

        head_cheap: list[float] = []

        def cheap_head() -> float:
            if not head_cheap:
                head_cheap.append(float(self.evaluator.cheap(artifact_id, head_state)))
                self.counters["cheap_evals"] += 1
            return head_cheap[0]

        head_versions = self.ledger.versions()
        survivors: list[EvidenceCard] = []
        discarded = 0
        already = 0
        for card in in_region:
            eta = vv_staleness(head_versions, card.base_version)
            intake.etas.append(eta)
            action = self.staleness_policy.decide(eta, alpha, card.diff.contract_breaking)
            if action is StaleAction.DISCARD:
                discarded += 1
                intake.pooled.append(card)
                continue
            if card.diff.is_noop(head_state):
                already += 1
                continue
            if action is StaleAction.REBASE:
                self.counters["rebased"] += 1
                if not self._still_helps(artifact_id, head_state, card, cheap_with, cheap_head):
                    discarded += 1
                    self.counters["rebase_rejected"] += 1
                    intake.pooled.append(card)
                    continue
            survivors.append(card)
        if not survivors:
            return MergeReport(
                artifact_id, MergeOutcome.ALL_STALE, considered=considered,
                discarded_stale=discarded,
                reason=f"no diff survived: {discarded} stale, {already} already in the head, "
                f"{oversized} oversized (policy {self.staleness_policy.name}, alpha={alpha})",
            )

        survivors, dropped = resolve_conflicts(survivors, cheap_with)
        intake.pooled.extend(dropped)  # the weaker side of a contradiction keeps its evidence
        notes = []
        if oversized:
            notes.append(f"{oversized} oversized")
        members = union_members(survivors) if cfg.fusion_requires_evidence else list(survivors)
        if len(members) == 1:
            chosen, fused, contributors = members[0].diff, False, members
            intake.set_aside.extend(c for c in survivors if c is not members[0])
        else:
            intake.set_aside.extend(c for c in survivors if not any(c is m for m in members))
            union = union_diff([c.diff for c in members], artifact_id)
            tournament = cfg.fusion_tournament and (
                self.tournament_gate is None or self.tournament_gate()
            )
            if tournament:
                self.counters["tournaments"] += 1
                union_card = EvidenceCard(union, {}, None, None)
                ranked = rank_cards([*survivors, union_card], cheap_with)
                best = ranked[0][1]
                if best is union_card:
                    chosen, fused, contributors = union, True, members
                else:
                    chosen, fused, contributors = best.diff, False, [best]
                    intake.set_aside.extend(c for c in members if c is not best)
                notes.append("tournament")
            elif cheap_with(union) > cheap_head():
                chosen, fused, contributors = union, True, members
            else:
                # The union does not beat the head on the cheap score: rank the singles
                # so that a harmful diff cannot ride in on its partners' evidence.
                self.counters["tournaments_on_demand"] += 1
                best = rank_cards(survivors, cheap_with)[0][1]
                chosen, fused, contributors = best.diff, False, [best]
                intake.set_aside = [c for c in survivors if c is not best]
                notes.append("union did not beat the head; best single kept")
        return _Prepared(
            artifact_id=artifact_id,
            head_version=version,
            head_state=head_state,
            blast_radius=blast,
            layer=layer,
            candidate=chosen,
            fused=fused,
            contributors=contributors,
            attributable=contributors[0],
            considered=considered,
            discarded_stale=discarded,
            conflicts_dropped=len(dropped),
            notes=notes,
        )

    def _still_helps(
        self,
        artifact_id: str,
        head_state: dict[str, str],
        card: EvidenceCard,
        cheap_with: Callable[[Diff], float],
        cheap_head: Callable[[], float],
    ) -> bool:
        """The cheap re-verification of a rebased diff on the current head.

        With an evaluator whose `Evaluator.verify` returns scores, the diff is re-run on the tasks that prompted it (before vs after on the
        fresh head); otherwise it must strictly beat the head on the cheap subset.
        """
        if card.trajectory_refs:
            refs = list(card.trajectory_refs)
            before = self.evaluator.verify(artifact_id, head_state, refs)
            if before is not None:
                after = self.evaluator.verify(artifact_id, card.diff.apply(head_state), refs)
                if after is not None:
                    self.counters["rebase_verifications"] += 1
                    return sum(after) > sum(before)
        return cheap_with(card.diff) > cheap_head()

    # ------------------------------------------------------------------ measure

    def _measure(self, prepared: _Prepared) -> _Measurement:
        """Score the candidate and the head on the full held-out set and run the test."""
        head_scores = self._scores_of_head(
            prepared.artifact_id, prepared.head_version, prepared.head_state
        )
        candidate_state = prepared.candidate.apply(prepared.head_state)
        cand_scores = [
            float(s) for s in self.evaluator.held_out(prepared.artifact_id, candidate_state)
        ]
        self.counters["held_out_evals"] += 1
        deltas = [
            c.before_after_delta for c in prepared.contributors
            if c.before_after_delta is not None and math.isfinite(c.before_after_delta)
        ]
        sv_delta = sum(deltas) / len(deltas) if deltas else None
        decision = decide_acceptance(
            cand_scores,
            head_scores,
            prepared.head_version,
            base_delta=self.config.base_delta,
            self_verify_delta=sv_delta,
            max_regressions=self.config.max_regressions,
        )
        return _Measurement(cand_scores, head_scores, decision)

    # ------------------------------------------------------------------ decide

    def _decide(self, prepared: _Prepared, measurement: _Measurement) -> MergeReport:
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
            p_improve=acc.p_improve,
        )
        suffix = f"; {', '.join(prepared.notes)}" if prepared.notes else ""
        if not acc.accept:
            report.reason = acc.reason + suffix
        elif prepared.layer is Layer.L1_SLOW and not acc.candidate_mean > acc.head_mean:
            report.outcome = MergeOutcome.ORACLE_REJECTED
            report.reason = (
                f"L1 oracle gate: held-out mean {acc.candidate_mean:.4f} does not strictly "
                f"beat the head's {acc.head_mean:.4f}{suffix}"
            )
        else:
            version = self._commit(prepared, measurement)
            if version is None:
                report.outcome = MergeOutcome.CAS_CONFLICT
                report.reason = (
                    f"lost {self.config.cas_attempts} compare-and-swap attempt(s) to "
                    f"concurrent writers{suffix}"
                )
            else:
                report.outcome = MergeOutcome.COMMITTED
                report.committed_version = version
                report.reason = acc.reason + suffix
        self._feedback(prepared, report.outcome is MergeOutcome.COMMITTED)
        return report

    def _commit(self, prepared: _Prepared, measurement: _Measurement) -> int | None:
        """CAS commit with bounded retry: re-apply the same diff to a fresh head, never overwrite."""
        base_version, base_state = prepared.head_version, prepared.head_state
        meta = {
            "diff_id": prepared.candidate.diff_id,
            "author": prepared.candidate.author,
            "fused": prepared.fused,
            "contributors": [c.diff.diff_id for c in prepared.contributors],
            "p_improve": measurement.acceptance.p_improve,
        }
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
            if base_version == prepared.head_version:
                self._head_scores[(prepared.artifact_id, version)] = measurement.candidate_scores
            return version
        return None

    def _feedback(self, prepared: _Prepared, committed: bool) -> None:
        if self.allocator is None:
            return
        ctx = pre_spend_context(prepared.attributable, prepared.blast_radius)
        self.allocator.observe(ctx, committed)
        self.counters["allocator_observations"] += 1
