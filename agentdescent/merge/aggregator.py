"""The aggregator: turns a batch of evidence cards into at most one commit per artifact.

This module owns the merge pipeline (trust region, staleness filter, conflict
resolution, fusion, acceptance, the L1 oracle gate, compare-and-swap commit) and the
allocator feedback. It is the only writer of the ledger in a run. It must not call a
language model, read the clock or use the global RNG: given the same cards, ledger and
evaluator it makes the same decisions.

The path of one decision reads straight through: `Aggregator._prepare` (no
held-out spend) -> the self-verify gate -> `Aggregator._measure` (the paired sequential
test of `agentdescent.merge.acceptance`, affected tasks first, noise-aware) ->
`Aggregator._decide` (acceptance, oracle, CAS, and exactly one allocator report).
`Aggregator._settle` books a decision once it has ended: counters, the eta histogram
and the evidence pool, which later decisions draw on (`AggregatorConfig.pool_draw`).
"""

from __future__ import annotations

import collections
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..budget.allocator import AllocatorPolicy, pre_spend_context
from ..errors import CASConflict, GovernanceError, InvalidArgumentType
from ..ledger import Ledger
from ..seams import adopt
from ..types import Diff, EvidenceCard, MergeOutcome, MergeReport, Task, vv_staleness
from .aggregator_config import AggregatorConfig
from .evidence_pool import EvidencePool, PoolEntry
from .fusion import fusable, rank_cards, resolve_conflicts, union_diff, union_members
from .governance import ArtifactInfo, Layer, classify
from .measurement import Evaluator, Measurement, Measurer, Prepared
from .noise import NoiseMonitor
from .scoreboard import HeadEstimate, Scoreboard
from .staleness import GuardedStaleness, StaleAction, StalenessPolicy

__all__ = ["Aggregator", "AggregatorConfig", "Evaluator"]

logger = logging.getLogger("agentdescent.aggregator")

#: Committed diffs a decision remembers (the rebase checks look this far back at most).
REMEMBERED_COMMITS = 64


@dataclass
class _Intake:
    """What one decision will book once it has ended (see ``Aggregator._settle``).

    ``etas``, ``rebased``, ``rebase_rejected``, ``set_aside`` and ``discarded_stale`` (on
    the report) describe the step's new cards only; what happened to the cards drawn from
    the pool is booked under the ``pool_*`` counters, so every worker card is counted once.
    """

    head_version: int = 0
    etas: list[int] = field(default_factory=list)
    rebased: int = 0
    rebase_rejected: int = 0
    pooled: list[EvidenceCard] = field(default_factory=list)
    set_aside: list[EvidenceCard] = field(default_factory=list)
    rejected: list[EvidenceCard] = field(default_factory=list)  # failed the rebase check
    stale: list[EvidenceCard] = field(default_factory=list)  # new cards counted in discarded_stale
    drawn: list[PoolEntry] = field(default_factory=list)
    contributors: list[EvidenceCard] = field(default_factory=list)  # of the measured candidate


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
        self.ledger = adopt(ledger, Ledger, "ledger")
        self.evaluator = adopt(evaluator, Evaluator, "evaluator")
        if config is not None and not isinstance(config, AggregatorConfig):
            raise InvalidArgumentType(f"config={config!r:.80}: pass an agentdescent.AggregatorConfig or None")
        self.config = config if config is not None else AggregatorConfig()
        self.staleness_policy = (adopt(staleness_policy, StalenessPolicy, "staleness_policy")
                                 if staleness_policy is not None else GuardedStaleness())
        self.allocator = adopt(allocator, AllocatorPolicy, "allocator") if allocator is not None else None
        self.tournament_gate = tournament_gate
        self._lock = threading.Lock()
        self._pending: list[EvidenceCard] = []
        self.pool = EvidencePool(self.config.evidence_pool_size)
        self.eta_histogram: collections.Counter[int] = collections.Counter()
        self._blast: dict[str, float] = {}
        self.counters: collections.Counter[str] = collections.Counter()
        self.measurer = Measurer(self.evaluator, self.config, self.counters)
        #: (artifact, version) -> the diff committed here to make it, and its trajectory tasks
        self._committed: dict[tuple[str, int], tuple[Diff, list[Task]]] = {}

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
        """What re-scoring discordant pairs showed (`agentdescent.merge.noise.NoiseMonitor`)."""
        return self.measurer.noise

    def measure_head(self, artifact_id: str, sample: int) -> HeadEstimate:
        """Score the current head on up to ``sample`` held-out tasks it has no score for (seeded order).

        The engines call it once, before any work, so the starting head's reward is a
        measurement, not a guess; later versions are measured task by task as candidates
        need them.
        """
        version, state = self.ledger.head(artifact_id)
        return self.measurer.measure_head(artifact_id, version, state, sample)

    def head_estimate(self, artifact_id: str) -> HeadEstimate:
        """The current head's held-out reward as far as it was measured (no spend).

        See `agentdescent.merge.scoreboard`: scores measured on the head, inherited from the
        version it was committed on where its candidate was not scored, the mean of what is
        known for a task never scored.
        """
        version, _ = self.ledger.head(artifact_id)
        return self.scoreboard.estimate(artifact_id, version)

    def pool_state(self) -> list[dict[str, Any]]:
        """The evidence pool, JSON-ready, oldest first (saved with a run's progress)."""
        return self.pool.state()

    def restore_pool(self, entries: Sequence[Mapping[str, Any]], tasks: Mapping[str, Task]) -> None:
        """Put back a `pool_state` (a resumed run draws on what the killed one had pooled)."""
        self.pool.restore(entries, tasks)

    def memory_state_dict(self) -> dict[str, Any]:
        """What later decisions remember of earlier ones, JSON-ready (saved with a run's progress).

        The diffs committed here for the last `REMEMBERED_COMMITS` versions of each artifact (with their
        trajectory tasks' ids: the rebase checks that reuse a self-verify read them) and
        the measurement's spot-check count, so a resumed run decides as the uninterrupted
        one would.
        """
        by_artifact: dict[str, list[tuple[tuple[str, int], tuple[Diff, list[Task]]]]] = {}
        for key, value in sorted(self._committed.items(), key=lambda kv: kv[0][1]):
            by_artifact.setdefault(key[0], []).append((key, value))
        recent = [kv for rows in by_artifact.values() for kv in rows[-REMEMBERED_COMMITS:]]
        return {"committed": [{"artifact": aid, "version": v, "diff": diff.to_json(),
                               "trajectory": [t.id for t in trajectory]}
                              for (aid, v), (diff, trajectory) in recent],
                "clean_uses": self.measurer.clean_uses}

    def load_memory_state_dict(self, state: Mapping[str, Any], tasks: Mapping[str, Task]) -> None:
        """Put back a `memory_state_dict` (task ids no longer known are dropped)."""
        for row in state.get("committed", []):
            trajectory = [tasks[i] for i in row.get("trajectory", []) if i in tasks]
            self._committed[(str(row["artifact"]), int(row["version"]))] = (Diff.from_json(row["diff"]), trajectory)
        self.measurer.clean_uses = int(state.get("clean_uses", 0))

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
        # A card the budget governor judged not worth its optional spend is not evaluated
        # at all (not even on the cheap subset), so it cannot be committed; it keeps its
        # evidence in the pool, and nothing is measured or reported to the allocator.
        skipped = [c for c in cards if not c.allocated]
        if skipped:
            self.counters["not_evaluated"] += len(skipped)
            intake.set_aside.extend(skipped)
            cards = [c for c in cards if c.allocated]
            if not cards:
                report = MergeReport(
                    artifact_id, MergeOutcome.BELOW_THRESHOLD, considered=len(skipped),
                    reason=f"not evaluated: the budget governor judged {len(skipped)} card(s) "
                    "not worth their held-out evaluation",
                )
                self._settle(intake, report)
                return report
        prepared = self._prepare(artifact_id, cards, intake)
        if isinstance(prepared, MergeReport):
            self._settle(intake, prepared)
            logger.debug("merge %s: %s (%s)", artifact_id, prepared.outcome.value, prepared.reason)
            return prepared
        intake.contributors = list(prepared.contributors)
        gated = self._gate(prepared)
        if gated is not None:
            self._feedback(prepared, gated)  # measured (on the trajectory tasks) and refused
            self._settle(intake, gated)
            logger.debug("merge %s: %s (%s)", artifact_id, gated.outcome.value, gated.reason)
            return gated
        measurement = self.measurer.measure(prepared)
        report = self._decide(prepared, measurement)
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
        return MergeReport(
            prepared.artifact_id, MergeOutcome.BELOW_THRESHOLD, accepted=prepared.candidate,
            fused=prepared.fused, considered=prepared.considered, discarded_stale=prepared.discarded_stale,
            conflicts_dropped=prepared.conflicts_dropped,
            feedback=[c.feedback for c in cards if c.feedback],
            reason="self-verify gate: no card behind the candidate improved the task it was proposed "
                   "from, so it was not evaluated on held-out tasks",
        )

    def _settle(self, intake: _Intake, report: MergeReport) -> None:
        """Book a finished decision: counters, the eta histogram, the evidence pool.

        Done only once the decision has ended, so a step that fails and is retried never
        pools, draws or counts a card twice. A drawn card leaves the pool here: it comes
        back one retry older if it was discarded or set aside again, and not at all if it
        was measured (committed, or rejected on held-out evidence, like a new card).
        """
        self.counters[report.outcome.value] += 1
        self.counters["discarded_stale"] += report.discarded_stale
        self.counters["rebased"] += intake.rebased
        self.counters["rebase_rejected"] += intake.rebase_rejected
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

    # ------------------------------------------------------------------ prepare

    def _prepare(
        self, artifact_id: str, new_cards: list[EvidenceCard], intake: _Intake
    ) -> Prepared | MergeReport:
        """Trust region, staleness, conflicts and fusion: everything before the held-out spend."""
        cfg = self.config
        version, head_state = self.ledger.head(artifact_id)
        blast = self._blast_radius(artifact_id)
        layer = self._layer(artifact_id)
        alpha = self._alpha(layer)
        head_versions = self.ledger.versions()
        intake.head_version = version
        intake.drawn, drawn_actions = self.pool.draw(
            artifact_id, version, head_state, head_versions, alpha, new_cards,
            policy=self.staleness_policy, draw=cfg.pool_draw, max_retries=cfg.pool_retries,
        )
        cards = [*new_cards, *(entry.card for entry in intake.drawn)]
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

        survivors: list[EvidenceCard] = []
        discarded = 0
        already = 0
        vetoed = 0
        for card in in_region:
            retried = id(card) in drawn_actions
            if retried:
                action = drawn_actions[id(card)]
            else:
                eta = vv_staleness(head_versions, card.base_version)
                intake.etas.append(eta)
                action = self.staleness_policy.decide(eta, alpha, card.diff.contract_breaking)
            if action is StaleAction.DISCARD:  # never a drawn card: `_draw` skips those
                discarded += 1
                intake.stale.append(card)
                intake.pooled.append(card)
                continue
            if card.diff.is_noop(head_state):
                already += 1
                continue
            if action is StaleAction.REBASE:
                intake.rebased += not retried
                if not self._still_helps(artifact_id, head_state, card, cheap_with, cheap_head):
                    if not retried:
                        discarded += 1
                        intake.rebase_rejected += 1
                        intake.stale.append(card)
                    intake.rejected.append(card)
                    intake.pooled.append(card)
                    continue
            if cfg.commit_veto is not None and cfg.commit_veto(head_state, card.diff.apply(head_state)) is not None:
                # refused on its own before it can join a union (the union is checked again at the commit)
                self.counters["card_vetoes"] += 1
                vetoed += 1
                intake.rejected.append(card)
                continue
            survivors.append(card)
        retried_note = f"{len(intake.drawn)} re-tried from the pool" if intake.drawn else ""
        if not survivors:
            return MergeReport(
                artifact_id, MergeOutcome.ALL_STALE, considered=considered,
                discarded_stale=discarded,
                reason=f"no diff survived: {discarded} stale, {already} already in the head, "
                f"{oversized} oversized" + (f", {vetoed} vetoed (commit_veto)" if vetoed else "")
                + f" (policy {self.staleness_policy.name}, alpha={alpha})"
                + (f"; {retried_note}, none survived again" if retried_note else ""),
            )

        by_cheap = cfg.rank_by == "cheap"
        rank = cheap_with if by_cheap else _no_cheap_score
        survivors, dropped = resolve_conflicts(survivors, rank)
        intake.pooled.extend(dropped)  # the weaker side of a contradiction keeps its evidence
        notes = []
        if oversized:
            notes.append(f"{oversized} oversized")
        if retried_note:
            notes.append(retried_note)
        members = union_members(survivors) if cfg.fusion_requires_evidence else list(survivors)
        if any(c.diff.edits for c in members):
            # edits of one file may overlap once all are applied; those left out are set aside below
            members = fusable(members)[0]
        if len(members) == 1:
            chosen, fused, contributors = members[0].diff, False, members
            intake.set_aside.extend(c for c in survivors if c is not members[0])
        else:
            member_ids = {id(m) for m in members}
            intake.set_aside.extend(c for c in survivors if id(c) not in member_ids)
            union = union_diff([c.diff for c in members], artifact_id)
            tournament = cfg.fusion_tournament and (
                self.tournament_gate is None or self.tournament_gate()
            )
            if tournament:
                self.counters["tournaments"] += 1
                # Ranked by evidence, the union carries every member's self-verified gain
                # (by the cheap score it is scored like any single).
                deltas = [c.before_after_delta for c in members
                          if c.before_after_delta is not None and math.isfinite(c.before_after_delta)]
                union_card = EvidenceCard(union, {}, None if by_cheap or not deltas else sum(deltas), None)
                ranked = rank_cards([*survivors, union_card], rank)
                best = ranked[0][1]
                if best is union_card:
                    chosen, fused, contributors = union, True, members
                else:
                    chosen, fused, contributors = best.diff, False, [best]
                    intake.set_aside.extend(c for c in members if c is not best)
                notes.append("tournament")
            elif not by_cheap or cheap_with(union) > cheap_head():
                # Without the cheap subset the union goes forward: the paired test scores its
                # members' affected tasks first and a random sample of the rest, so a member
                # that hurts shows as a loss (and a regression ends the evaluation at once).
                chosen, fused, contributors = union, True, members
            else:
                # The union does not beat the head on the cheap score: rank the singles
                # so that a harmful diff cannot ride in on its partners' evidence.
                self.counters["tournaments_on_demand"] += 1
                best = rank_cards(survivors, cheap_with)[0][1]
                chosen, fused, contributors = best.diff, False, [best]
                intake.set_aside = [c for c in survivors if c is not best]
                notes.append("union did not beat the head; best single kept")
        return Prepared(
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
            if self._self_verify_still_holds(artifact_id, card):
                self.counters["rebase_checks_reused"] += 1
                return (card.before_after_delta or 0.0) > 0
            before = self.evaluator.verify(artifact_id, head_state, refs)
            if before is not None:
                after = self.evaluator.verify(artifact_id, card.diff.apply(head_state), refs)
                if after is not None:
                    self.counters["rebase_verifications"] += 1
                    return sum(after) > sum(before)
        return cheap_with(card.diff) > cheap_head()

    def _self_verify_still_holds(self, artifact_id: str, card: EvidenceCard) -> bool:
        """Would the rebase re-verification only repeat the card's own self-verify?

        It would in a deterministic evaluation (`agentdescent.merge.noise`) when every commit since
        the card's base version was made here and none plausibly changes the card's
        trajectory tasks (`agentdescent.merge.relevance.Relevance`): the diff then meets its tasks
        on the fresh head exactly as it met them on its base, and its self-verify delta is
        the answer, at no call.
        """
        if not (card.self_verified and card.before_after_delta is not None and self.measurer.noise.deterministic):
            return False
        base = card.base_version.get(artifact_id)
        head = self.ledger.head(artifact_id)[0]
        if base is None or head - base > REMEMBERED_COMMITS:
            return False
        relevance = self.measurer.relevance
        if relevance is None:
            return False
        for version in range(base + 1, head + 1):
            committed = self._committed.get((artifact_id, version))
            if committed is None or relevance.affects_any(committed[0], committed[1], card.trajectory_refs):
                return False
        return True

    # ------------------------------------------------------------------ decide

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
            p_improve=acc.confidence, evidence=acc.evidence(measurement.n),
            feedback=[c.feedback for c in prepared.contributors if c.feedback],
        )
        suffix = f"; {', '.join(prepared.notes)}" if prepared.notes else ""
        oracle: tuple[float, float] | None = None
        if acc.accept and prepared.layer is Layer.L1_SLOW:
            oracle = self.measurer.complete(prepared, measurement)
        if not acc.accept:
            report.reason = acc.reason + suffix
        elif oracle is not None and not oracle[0] > oracle[1]:
            report.outcome = MergeOutcome.ORACLE_REJECTED
            report.reason = (
                f"L1 oracle gate: held-out mean {oracle[0]:.4f} over all {measurement.n} task(s) does "
                f"not strictly beat the head's {oracle[1]:.4f}{suffix}"
            )
        elif (veto := self._veto(prepared)) is not None:
            self.counters["commit_vetoes"] += 1
            report.reason = f"vetoed before the commit: {veto}{suffix}"
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
            if base_version == prepared.head_version:  # the new head is the candidate's very state
                self._committed[(prepared.artifact_id, version)] = (
                    prepared.candidate, [t for c in prepared.contributors for t in c.trajectory_refs])
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


def _no_cheap_score(diff: Diff) -> float:
    """The rank score with ``rank_by="evidence"``: no evaluation, so the self-verify delta decides."""
    return 0.0
