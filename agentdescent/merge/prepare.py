"""Preparing one merge decision: everything between the cards and the held-out spend.

This module owns the steps `Aggregator.step` takes before any held-out call, each a named
method of `Preparer`, read in order: draw from the evidence pool → trust region →
staleness filter (with the rebase re-verification) → conflict resolution and fusion (with
the optional tournament). It also owns what those steps share within one decision: the
`HeadSnapshot` (the head read once per decision), the `CheapScores` (each paid once), the
`Intake` (what the decision will book once it has ended) and the `CommitMemory` (what
later rebase checks remember of earlier commits). It must not commit, measure on held-out
tasks, call a model, read the clock or use the global RNG.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..fate import CardFate, FateKind
from ..types import Diff, EvidenceCard, MergeOutcome, MergeReport, Task, vv_staleness
from .evidence_pool import PoolEntry
from .fusion import fusable, rank_cards, resolve_conflicts, union_diff, union_members
from .measurement import Prepared
from .staleness import StaleAction

__all__ = ["REMEMBERED_COMMITS", "CheapScores", "CommitMemory", "HeadSnapshot", "Intake", "Preparer"]

#: Committed diffs a decision remembers (the rebase checks look this far back at most).
REMEMBERED_COMMITS = 64


@dataclass(frozen=True)
class HeadSnapshot:
    """The head one decision works on, read once: its version and state, and every artifact's version.

    A decision reads the ledger once (`Aggregator.step`); every step of it, the rebase
    checks included, sees this snapshot, and only a lost compare-and-swap reads the head
    again (to re-apply the same diff on it).
    """

    version: int
    state: dict[str, str]
    versions: dict[str, int]


@dataclass
class Intake:
    """What one decision will book once it has ended (see ``Aggregator._settle``).

    ``etas``, ``rebased``, ``rebase_rejected``, ``already_in_head``, ``set_aside`` and ``discarded_stale`` (on
    the report) describe the step's new cards only; what happened to the cards drawn from
    the pool is booked under the ``pool_*`` counters, so every worker card is counted once.
    ``fates`` holds the fate of each card whose end a step before the measurement decided
    (`end`); the measured candidate's contributors get theirs from the decision.
    """

    head_version: int = 0
    etas: list[int] = field(default_factory=list)
    rebased: int = 0
    rebase_rejected: int = 0
    already_in_head: int = 0  # new cards whose diff the head already holds (no-ops, not stale)
    pooled: list[EvidenceCard] = field(default_factory=list)
    set_aside: list[EvidenceCard] = field(default_factory=list)
    rejected: list[EvidenceCard] = field(default_factory=list)  # failed the rebase check
    stale: list[EvidenceCard] = field(default_factory=list)  # new cards counted in discarded_stale
    drawn: list[PoolEntry] = field(default_factory=list)
    contributors: list[EvidenceCard] = field(default_factory=list)  # of the measured candidate
    fates: list[CardFate] = field(default_factory=list)

    def retried_ids(self) -> frozenset[int]:
        """The ids of the cards drawn from the evidence pool for this decision."""
        return frozenset(id(entry.card) for entry in self.drawn)

    def end(self, card: EvidenceCard, kind: FateKind, reason: str, numbers: Mapping[str, Any] | None = None) -> None:
        """Record ``card``'s fate in this decision (a re-try when it was drawn from the pool)."""
        self.fates.append(CardFate(kind, reason, dict(numbers or {}), card.diff.diff_id, card.diff.author,
                                   retried=any(entry.card is card for entry in self.drawn)))


class CheapScores:
    """The cheap-subset scores one decision needs, each paid at most once: the head's, and each diff's on it."""

    def __init__(self, evaluator: Any, artifact_id: str, head_state: dict[str, str], counters: Any) -> None:
        self._evaluator, self._artifact_id, self._head_state = evaluator, artifact_id, head_state
        self._counters = counters
        self._by_ops: dict[tuple[tuple[str, str | None], ...], float] = {}
        self._head: float | None = None

    def of(self, diff: Diff) -> float:
        """The cheap score of the head with ``diff`` applied."""
        key = tuple(sorted(diff.ops.items(), key=lambda kv: kv[0]))
        if key not in self._by_ops:
            self._by_ops[key] = float(self._evaluator.cheap(self._artifact_id, diff.apply(self._head_state)))
            self._counters["cheap_evals"] += 1
        return self._by_ops[key]

    def head(self) -> float:
        """The cheap score of the head itself."""
        if self._head is None:
            self._head = float(self._evaluator.cheap(self._artifact_id, self._head_state))
            self._counters["cheap_evals"] += 1
        return self._head


class CommitMemory:
    """The diffs committed here for recent versions, with their trajectory tasks (what the rebase checks read)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, int], tuple[Diff, list[Task]]] = {}

    def remember(self, artifact_id: str, version: int, diff: Diff, trajectory: Sequence[Task]) -> None:
        """Note that ``diff`` (proposed from ``trajectory``) made ``version`` of ``artifact_id``."""
        self._rows[(artifact_id, version)] = (diff, list(trajectory))

    def get(self, artifact_id: str, version: int) -> tuple[Diff, list[Task]] | None:
        """The diff that made ``version`` here and its trajectory, or None (made elsewhere, or forgotten)."""
        return self._rows.get((artifact_id, version))

    def state_dict(self) -> list[dict[str, Any]]:
        """The last `REMEMBERED_COMMITS` commits of each artifact, JSON-ready, oldest first."""
        by_artifact: dict[str, list[tuple[tuple[str, int], tuple[Diff, list[Task]]]]] = {}
        for key, value in sorted(self._rows.items(), key=lambda kv: kv[0][1]):
            by_artifact.setdefault(key[0], []).append((key, value))
        recent = [kv for rows in by_artifact.values() for kv in rows[-REMEMBERED_COMMITS:]]
        return [{"artifact": aid, "version": v, "diff": diff.to_json(), "trajectory": [t.id for t in trajectory]}
                for (aid, v), (diff, trajectory) in recent]

    def load_state_dict(self, rows: Sequence[Mapping[str, Any]], tasks: Mapping[str, Task]) -> None:
        """Put back a `state_dict` (task ids no longer known are dropped)."""
        for row in rows:
            trajectory = [tasks[i] for i in row.get("trajectory", []) if i in tasks]
            self._rows[(str(row["artifact"]), int(row["version"]))] = (Diff.from_json(row["diff"]), trajectory)


class MergeParts(Protocol):
    """What `Preparer` reads of the aggregator that owns it (its public collaborators; never written)."""

    config: Any
    evaluator: Any
    staleness_policy: Any
    budget: Any
    pool: Any
    counters: Any
    measurer: Any
    memory: CommitMemory


class Preparer:
    """Trust region, staleness, conflicts and fusion for one decision: everything before the held-out spend.

    Owned by an `Aggregator` (``parts``), whose config, evaluator, staleness policy, pool,
    counters and measurer it reads at each call, so a collaborator replaced on the
    aggregator is the one used.
    """

    def __init__(self, parts: MergeParts) -> None:
        self.parts = parts

    def prepare(self, artifact_id: str, head: HeadSnapshot, new_cards: list[EvidenceCard], intake: Intake, *,
                blast_radius: float, layer: Any, alpha: int) -> Prepared | MergeReport:
        """One candidate ready for measurement, or the report that ends the decision here."""
        cards, drawn_actions = self._draw(artifact_id, head, new_cards, intake, alpha)
        considered = len(cards)
        in_region = self._in_trust_region(cards)
        oversized = considered - len(in_region)
        cfg = self.parts.config
        kept = {id(c) for c in in_region}
        for card in cards:
            if id(card) not in kept:
                intake.end(card, FateKind.OVERSIZED,
                           f"{card.diff.size()} op(s) / {card.diff.chars()} char(s) exceed the trust region "
                           f"({cfg.trust_region_ops} ops / {cfg.trust_region_chars} chars)",
                           {"ops": card.diff.size(), "chars": card.diff.chars()})
        if not in_region:
            return MergeReport(
                artifact_id, MergeOutcome.OVERSIZED, considered=considered,
                reason=f"all {considered} diff(s) exceed the trust region "
                f"({cfg.trust_region_ops} ops / {cfg.trust_region_chars} chars)",
            )
        cheap = CheapScores(self.parts.evaluator, artifact_id, head.state, self.parts.counters)
        survivors, discarded, already, vetoed = self._filter(artifact_id, head, in_region, drawn_actions, cheap,
                                                             intake, alpha)
        retried_note = f"{len(intake.drawn)} re-tried from the pool" if intake.drawn else ""
        if not survivors:
            return MergeReport(
                artifact_id, MergeOutcome.ALL_STALE, considered=considered, discarded_stale=discarded,
                reason=_nothing_survived(discarded, already, oversized, vetoed,
                                         f"policy {self.parts.staleness_policy.name}, alpha={alpha}")
                + (f"; {retried_note}, none survived again" if retried_note else ""),
            )
        notes = ([f"{oversized} oversized"] if oversized else []) + ([retried_note] if retried_note else [])
        return self._choose(artifact_id, head, survivors, cheap, intake, notes, considered=considered,
                            discarded=discarded, blast_radius=blast_radius, layer=layer)

    # ------------------------------------------------------------------ the steps, in order

    def _draw(self, artifact_id: str, head: HeadSnapshot, new_cards: list[EvidenceCard], intake: Intake,
              alpha: int) -> tuple[list[EvidenceCard], dict[int, StaleAction]]:
        """The new cards, then the pooled cards re-tried with them (see `Aggregator.step`)."""
        cfg = self.parts.config
        intake.head_version = head.version
        intake.drawn, drawn_actions = self.parts.pool.draw(
            artifact_id, head.version, head.state, head.versions, alpha, new_cards,
            policy=self.parts.staleness_policy, draw=cfg.pool_draw, max_retries=cfg.pool_retries,
            evaluates=self.parts.budget.evaluates,
        )
        return [*new_cards, *(entry.card for entry in intake.drawn)], drawn_actions

    def _in_trust_region(self, cards: list[EvidenceCard]) -> list[EvidenceCard]:
        """The cards whose diff fits the trust region (ops and characters)."""
        cfg = self.parts.config
        return [c for c in cards if c.diff.size() <= cfg.trust_region_ops and c.diff.chars() <= cfg.trust_region_chars]

    def _filter(self, artifact_id: str, head: HeadSnapshot, cards: list[EvidenceCard],
                drawn_actions: Mapping[int, StaleAction], cheap: CheapScores, intake: Intake,
                alpha: int) -> tuple[list[EvidenceCard], int, int, int]:
        """The staleness filter, the no-op check, the rebase re-verification and the per-card veto.

        Returns:
            The surviving cards, and how many were discarded as stale, already in the head,
            and vetoed.
        """
        cfg = self.parts.config
        policy = self.parts.staleness_policy.name
        survivors: list[EvidenceCard] = []
        discarded = already = vetoed = 0
        for card in cards:
            retried = id(card) in drawn_actions
            eta = vv_staleness(head.versions, card.base_version)
            if retried:
                action = drawn_actions[id(card)]
            else:
                intake.etas.append(eta)
                action = self.parts.staleness_policy.decide(eta, alpha, card.diff.contract_breaking)
            if action is StaleAction.DISCARD:  # never a drawn card: the pool's draw skips those
                discarded += 1
                intake.stale.append(card)
                intake.pooled.append(card)
                intake.end(card, FateKind.STALE, f"built {eta} version(s) behind the head (policy {policy}, "
                           f"alpha={alpha}): discarded, its evidence pooled", {"eta": eta})
                continue
            if card.diff.is_noop(head.state):
                already += 1
                intake.already_in_head += not retried
                intake.end(card, FateKind.ALREADY_IN_HEAD, f"the head (v{head.version}) already holds its diff")
                continue
            if action is StaleAction.REBASE:
                intake.rebased += not retried
                if not self._still_helps(artifact_id, head, card, cheap):
                    if not retried:
                        discarded += 1
                        intake.rebase_rejected += 1
                        intake.stale.append(card)
                    intake.rejected.append(card)
                    intake.pooled.append(card)
                    intake.end(card, FateKind.STALE, f"built {eta} version(s) behind the head and rebased on "
                               f"v{head.version}, where it no longer helps (policy {policy})",
                               {"eta": eta, "rebased": True})
                    continue
            if cfg.commit_veto is not None and (
                    veto := cfg.commit_veto(head.state, card.diff.apply(head.state))) is not None:
                # refused on its own before it can join a union (the union is checked again at the commit)
                self.parts.counters["card_vetoes"] += 1
                vetoed += 1
                intake.rejected.append(card)
                intake.end(card, FateKind.VETOED, f"vetoed on its own (commit_veto): {veto}")
                continue
            survivors.append(card)
        return survivors, discarded, already, vetoed

    def _choose(self, artifact_id: str, head: HeadSnapshot, survivors: list[EvidenceCard], cheap: CheapScores,
                intake: Intake, notes: list[str], *, considered: int, discarded: int, blast_radius: float,
                layer: Any) -> Prepared:
        """Conflict resolution, then the union of what fuses (or the best single), as the candidate."""
        cfg = self.parts.config
        by_cheap = cfg.rank_by == "cheap"
        rank = cheap.of if by_cheap else _no_cheap_score
        survivors, dropped = resolve_conflicts(survivors, rank)
        intake.pooled.extend(dropped)  # the weaker side of a contradiction keeps its evidence
        for card in dropped:
            intake.end(card, FateKind.CONFLICT_LOST, "the weaker side of a contradiction (a key another card "
                       "writes differently): its evidence pooled")
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
            chosen, fused, contributors = self._fuse(artifact_id, survivors, members, cheap, rank, intake, notes)
        chosen_ids = {id(c) for c in contributors}
        for card in survivors:
            if id(card) not in chosen_ids:
                intake.end(card, FateKind.SET_ASIDE, f"survived, but the candidate was {_candidate_words(fused, notes)}"
                           ": its evidence pooled")
        return Prepared(
            artifact_id=artifact_id, head_version=head.version, head_state=head.state,
            blast_radius=blast_radius, layer=layer, candidate=chosen, fused=fused,
            contributors=contributors, attributable=contributors[0], considered=considered,
            discarded_stale=discarded, conflicts_dropped=len(dropped), notes=notes,
            retried=intake.retried_ids(),
        )

    def _fuse(self, artifact_id: str, survivors: list[EvidenceCard], members: list[EvidenceCard],
              cheap: CheapScores, rank: Any, intake: Intake,
              notes: list[str]) -> tuple[Diff, bool, list[EvidenceCard]]:
        """The union of several members, or the best single when the union cannot stand on its own."""
        cfg = self.parts.config
        by_cheap = cfg.rank_by == "cheap"
        union = union_diff([c.diff for c in members], artifact_id)
        if cfg.fusion_tournament and self.parts.budget.allows_tournament():
            self.parts.counters["tournaments"] += 1
            # Ranked by evidence, the union carries every member's self-verified gain
            # (by the cheap score it is scored like any single).
            deltas = [c.before_after_delta for c in members
                      if c.before_after_delta is not None and math.isfinite(c.before_after_delta)]
            union_card = EvidenceCard(union, {}, None if by_cheap or not deltas else sum(deltas), None)
            best = rank_cards([*survivors, union_card], rank)[0][1]
            notes.append("tournament")
            if best is union_card:
                return union, True, members
            intake.set_aside.extend(c for c in members if c is not best)
            return best.diff, False, [best]
        if not by_cheap or cheap.of(union) > cheap.head():
            # Without the cheap subset the union goes forward: the paired test scores its
            # members' affected tasks first and a random sample of the rest, so a member
            # that hurts shows as a loss (and a regression ends the evaluation at once).
            return union, True, members
        # The union does not beat the head on the cheap score: rank the singles
        # so that a harmful diff cannot ride in on its partners' evidence.
        self.parts.counters["tournaments_on_demand"] += 1
        best = rank_cards(survivors, cheap.of)[0][1]
        intake.set_aside = [c for c in survivors if c is not best]
        notes.append("union did not beat the head; best single kept")
        return best.diff, False, [best]

    # ------------------------------------------------------------------ the rebase check

    def _still_helps(self, artifact_id: str, head: HeadSnapshot, card: EvidenceCard, cheap: CheapScores) -> bool:
        """The cheap re-verification of a rebased diff on the current head.

        With an evaluator whose `Evaluator.verify` returns scores, the diff is re-run on the
        tasks that prompted it (before vs after on the fresh head); otherwise it must
        strictly beat the head on the cheap subset.
        """
        if card.trajectory_refs:
            refs = list(card.trajectory_refs)
            if self._self_verify_still_holds(artifact_id, head, card):
                self.parts.counters["rebase_checks_reused"] += 1
                return (card.before_after_delta or 0.0) > 0
            evaluator = self.parts.evaluator
            before = evaluator.verify(artifact_id, head.state, refs)
            if before is not None:
                after = evaluator.verify(artifact_id, card.diff.apply(head.state), refs)
                if after is not None:
                    self.parts.counters["rebase_verifications"] += 1
                    return sum(after) > sum(before)
        return cheap.of(card.diff) > cheap.head()

    def _self_verify_still_holds(self, artifact_id: str, head: HeadSnapshot, card: EvidenceCard) -> bool:
        """Would the rebase re-verification only repeat the card's own self-verify?

        It would in a deterministic evaluation (`agentdescent.merge.noise`) when every commit since
        the card's base version was made here and none plausibly changes the card's
        trajectory tasks (`agentdescent.merge.relevance.Relevance`): the diff then meets its tasks
        on the fresh head exactly as it met them on its base, and its self-verify delta is
        the answer, at no call.
        """
        measurer = self.parts.measurer
        if not (card.self_verified and card.before_after_delta is not None and measurer.noise.deterministic):
            return False
        base = card.base_version.get(artifact_id)
        if base is None or head.version - base > REMEMBERED_COMMITS:
            return False
        relevance = measurer.relevance
        if relevance is None:
            return False
        for version in range(base + 1, head.version + 1):
            committed = self.parts.memory.get(artifact_id, version)
            if committed is None or relevance.affects_any(committed[0], committed[1], card.trajectory_refs):
                return False
        return True


def _nothing_survived(stale: int, already: int, oversized: int, vetoed: int, policy: str) -> str:
    """Why no card of a decision survived, naming only what happened (an ``"all-stale"`` report's reason).

    A decision whose cards were all already in the head (or oversized, or vetoed) is an
    ``"all-stale"`` decision by its outcome, but its reason says that none was stale.
    """
    parts = [f"{n} {what}" for n, what in ((stale, "stale"), (already, "already in the head"),
                                          (oversized, "oversized"), (vetoed, "vetoed (commit_veto)")) if n]
    if stale:
        return f"no diff survived: {', '.join(parts)} ({policy})"
    return f"nothing new to merge, none stale: {', '.join(parts)}"


def _candidate_words(fused: bool, notes: Sequence[str]) -> str:
    """How the decision's candidate was chosen, for a set-aside card's reason."""
    if fused:
        return "a union of other cards"
    if "tournament" in notes:
        return "another card (the fusion tournament)"
    if any(n.startswith("union did not beat") for n in notes):
        return "the best single card (the union did not beat the head)"
    return "another card (they do not fuse)"


def _no_cheap_score(diff: Diff) -> float:
    """The rank score with ``rank_by="evidence"``: no evaluation, so the self-verify delta decides."""
    return 0.0
