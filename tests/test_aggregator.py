"""The merge pipeline of SPEC §5, end to end through ``Aggregator.step()``.

The evaluator is a deterministic table: every state value names the tasks it solves
and the tasks it breaks (``"e:<solves>:<breaks>:<nonce>"``, comma-separated task ids;
breaks win over solves). Held-out tasks are ``h0..h9``, the cheap subset ``c0..c3``,
and every state solves ``h0, h1, c0`` to begin with. So a test reads as a story:
"this diff solves three held-out tasks and one cheap task", "that one breaks c0".

A table cannot draw again, so the tests declare it deterministic (`TABLE`): a held-out
gain with no regression then commits once a sample of the held-out tasks is scored. The
tests of the cheap-score ranking say so (`CHEAP_RANKED`); the others rank on the evidence.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import agentdescent.merge.prepare as prepare_module
from agentdescent import (
    Diff,
    EvidenceCard,
    GovernanceError,
    LedgerError,
    MergeOutcome,
    MergeReport,
    Task,
    get_policy,
)
from agentdescent.budget.allocator import AllocateDecision, AllocatorContext, AllocatorPolicy
from agentdescent.ledger import MemoryLedger, SqliteLedger
from agentdescent.merge.aggregator import Aggregator, AggregatorConfig, Evaluator

HELD_OUT = [f"h{i}" for i in range(10)]
CHEAP = [f"c{i}" for i in range(4)]
BASE_SOLVED = frozenset({"h0", "h1", "c0"})
ART = "art"


def effect(solves: str = "", breaks: str = "", nonce: str = "") -> str:
    """A state value the evaluator understands."""
    return f"e:{solves}:{breaks}:{nonce}"


def _tasks(text: str) -> set[str]:
    return {t for t in text.split(",") if t}


#: The table evaluator's config: deterministic, declared so (scores are facts: a candidate is
#: accepted once the unscored tasks cannot undo its net gain, or E >= 20).
TABLE = AggregatorConfig(rescore="deterministic")
#: The same, with contradictions and fusion ranked on the cheap score (``rank_by="cheap"``).
CHEAP_RANKED = replace(TABLE, rank_by="cheap")


def table_config(**knobs: Any) -> AggregatorConfig:
    """`TABLE` with some knobs changed."""
    return replace(TABLE, **knobs)


class TableEvaluator(Evaluator):
    """Scores a state from the effects its values name. Deterministic and counted.

    ``named``: the evaluator names its held-out tasks (``held_out_tasks``, prompts = ids),
    so the acceptance test can rank them by relevance (a diff naming ``h3`` affects ``h3``).
    """

    def __init__(self, named: bool = False) -> None:
        self.held_out_tasks = [Task(t, t) for t in HELD_OUT] if named else None
        self.held_out_calls = 0
        self.cheap_calls = 0
        self.fail_held_out = False
        self.fail_cheap = False

    @staticmethod
    def solved(state: Mapping[str, str]) -> set[str]:
        solves, breaks = set(BASE_SOLVED), set()
        for value in state.values():
            if value.startswith("e:"):
                _, s, b, _ = value.split(":", 3)
                solves |= _tasks(s)
                breaks |= _tasks(b)
        return solves - breaks

    def held_out(self, artifact_id: str, state: Mapping[str, str]) -> Sequence[float]:
        self.held_out_calls += 1
        if self.fail_held_out:
            raise RuntimeError("held-out evaluator is down")
        solved = self.solved(state)
        return [1.0 if t in solved else 0.0 for t in HELD_OUT]

    def cheap(self, artifact_id: str, state: Mapping[str, str]) -> float:
        self.cheap_calls += 1
        if self.fail_cheap:
            raise RuntimeError("cheap evaluator is down")
        solved = self.solved(state)
        return sum(t in solved for t in CHEAP) / len(CHEAP)


class VerifyingEvaluator(TableEvaluator):
    """A `TableEvaluator` with the rebase re-verification hook (as the engines' evaluator has).

    A rebased card is re-run on its prompting tasks (``trajectory_refs``, named like the
    held-out tasks), so a card that solves held-out tasks the head lacks still helps even
    when the cheap subset cannot see it.
    """

    def verify(self, artifact_id: str, state: Mapping[str, str], tasks: Sequence[Task]) -> Sequence[float]:
        solved = self.solved(state)
        return [1.0 if t.id in solved else 0.0 for t in tasks]


class RecordingAllocator(AllocatorPolicy):
    """An allocator that records every ``observe(ctx, committed)`` call."""

    def __init__(self) -> None:
        self.calls: list[tuple[AllocatorContext, bool]] = []

    def decide(self, ctx: AllocatorContext) -> AllocateDecision:
        return AllocateDecision()

    def observe(self, ctx: AllocatorContext, committed: bool) -> None:
        self.calls.append((ctx, committed))


class RivalLedger:
    """Wraps a ledger; while ``rivals > 0`` each commit first lets a rival commit land.

    The rival adds its own key on top of the current head, so the aggregator's commit
    (built on the old head) loses the compare-and-swap and must re-apply its diff.
    """

    def __init__(self, inner: Any, rivals: int = 0) -> None:
        self.inner = inner
        self.rivals = rivals
        self.rival_keys: list[str] = []
        self.attempts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, artifact_id, new_state, base_version, *, meta=None):
        self.attempts += 1
        if self.rivals > 0:
            self.rivals -= 1
            version, state = self.inner.head(artifact_id)
            key = f"rival-{len(self.rival_keys)}"
            self.rival_keys.append(key)
            self.inner.commit(artifact_id, {**state, key: "rival"}, version, meta={"author": "rival"})
        return self.inner.commit(artifact_id, new_state, base_version, meta=meta)


_ids = itertools.count()


def card(
    ops: Mapping[str, str | None],
    *,
    base: int | Mapping[str, int] = 1,
    delta: float | None = 0.1,
    advantage: float | None = 0.0,
    target: str = ART,
    breaking: bool = False,
    refs: Sequence[str] = (),
    verified: bool = False,
) -> EvidenceCard:
    base_version = dict(base) if isinstance(base, Mapping) else {target: base}
    diff = Diff(f"d{next(_ids)}", target, dict(ops), contract_breaking=breaking, author="w")
    return EvidenceCard(diff, base_version, delta, advantage, [Task(r, r) for r in refs],
                        self_verified=verified)


def make(
    *,
    blast: float = 0.2,
    config: AggregatorConfig | None = None,
    ledger: Any = None,
    policy: str | None = None,
    artifacts: Mapping[str, float] | None = None,
    evaluator: TableEvaluator | None = None,
    **kwargs: Any,
) -> tuple[Any, Aggregator, TableEvaluator, RecordingAllocator]:
    ledger = ledger if ledger is not None else MemoryLedger()
    for aid, radius in (artifacts or {ART: blast}).items():
        ledger.register(aid, {}, radius)
    evaluator = evaluator if evaluator is not None else TableEvaluator()
    allocator = RecordingAllocator()
    agg = Aggregator(
        ledger,
        evaluator,
        config if config is not None else TABLE,
        get_policy(policy) if policy else None,
        allocator,
        **kwargs,
    )
    return ledger, agg, evaluator, allocator


def step_one(agg: Aggregator, *cards: EvidenceCard) -> MergeReport:
    for c in cards:
        agg.ingest(c)
    reports = agg.step()
    assert len(reports) == 1
    check_fates(reports[0])
    return reports[0]


def check_fates(report: MergeReport) -> None:
    """Every card of a decision has one fate, and the report's counts are counts of those fates."""
    assert len(report.fates) == report.considered, (report.considered, report.fates)
    assert len({f.diff_id for f in report.fates}) == len(report.fates)  # one fate per card
    first = [f for f in report.fates if not f.retried]
    assert report.discarded_stale == sum(f.kind.value == "stale" for f in first)
    assert report.conflicts_dropped == sum(f.kind.value == "conflict-lost" for f in report.fates)
    measured = {"committed", "below-test", "oracle-rejected", "cas-lost", "gated"}
    behind = [f for f in report.fates if f.kind.value in measured]
    if report.outcome is MergeOutcome.COMMITTED:
        assert behind and {f.kind.value for f in behind} == {"committed"}
    assert all(f.fused == report.fused for f in behind)
    assert MergeReport.from_json(json.loads(json.dumps(report.to_json()))).fates == report.fates


GOOD_A = effect("h2,h3,h4,c1", nonce="A")
GOOD_B = effect("h5,h6,h7,c2", nonce="B")
NEUTRAL = effect(nonce="neutral")


@pytest.fixture(params=["memory", "sqlite"])
def any_ledger(request, tmp_path):
    if request.param == "memory":
        yield MemoryLedger()
    else:
        ledger = SqliteLedger(tmp_path / "ledger.sqlite")
        yield ledger
        ledger.close()


# --------------------------------------------------------------------------- basics


def test_fakes_satisfy_the_protocols():
    assert isinstance(TableEvaluator(), Evaluator)
    assert isinstance(RecordingAllocator(), AllocatorPolicy)


def test_default_config_matches_the_issue():
    cfg = AggregatorConfig()
    assert (cfg.false_accept_rate, cfg.alpha_head, cfg.alpha_tail) == (0.05, 5, 1)
    assert (cfg.trust_region_ops, cfg.trust_region_chars, cfg.cas_attempts) == (6, 32000, 3)
    assert cfg.fusion_tournament is False and cfg.fusion_requires_evidence is True
    assert (cfg.max_regressions, cfg.evidence_pool_size) == (0, 256)
    assert (cfg.pool_draw, cfg.pool_retries) == (2, 1)
    assert (cfg.sequential, cfg.eval_batch, cfg.error_control, cfg.acceptance_null) == (True, 4, "per_decision", "full")
    assert (cfg.group_key, cfg.relevance) == (None, None)
    assert (cfg.rescore, cfg.noise_probe, cfg.rescore_draws, cfg.evidence_groups) == ("auto", 16, 2, None)
    assert (cfg.self_verify_gate, cfg.rank_by) == (True, "evidence")
    assert (cfg.head_sample, cfg.futility_sample, cfg.local_regression_share) == (16, 8, 0.3)
    for removed in ("base_delta", "self_verify_counts", "futility", "min_eval_fraction"):
        assert not hasattr(cfg, removed)
    ledger = MemoryLedger()
    ledger.register(ART, {}, 0.2)
    agg = Aggregator(ledger, TableEvaluator())
    assert agg.config == cfg
    assert agg.staleness_policy.name == "guarded"
    assert agg.noise.state == "unknown"  # the default evaluator has to earn "deterministic"
    assert Aggregator(ledger, TableEvaluator(), TABLE).noise.state == "deterministic"


@pytest.mark.parametrize(
    "kwargs",
    [{"false_accept_rate": 0.0}, {"false_accept_rate": 0.7}, {"alpha_head": -1}, {"cas_attempts": 0},
     {"trust_region_ops": 0}, {"max_regressions": -1}, {"pool_draw": -1}, {"pool_draw": 1.5},
     {"pool_retries": 0}, {"rescore": "sometimes"}, {"rank_by": "best"}, {"error_control": "per_round"}],
)
def test_bad_config_is_refused_naming_the_knob(kwargs):
    (name,) = kwargs
    with pytest.raises(ValueError, match=name):
        AggregatorConfig(**kwargs)


def test_step_without_cards_reports_nothing():
    _, agg, _, alloc = make()
    assert agg.step() == []
    assert alloc.calls == []


# --------------------------------------------------------------------------- fusion


def test_complementary_diffs_fuse_and_commit_together(any_ledger):
    ledger, agg, _, alloc = make(ledger=any_ledger)
    a = card({"ka": GOOD_A})
    b = card({"kb": GOOD_B})
    report = step_one(agg, a, b)
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.fused
    assert report.considered == 2
    assert report.conflicts_dropped == 0
    assert report.committed_version == 2
    assert report.accepted is not None and report.accepted.ops == {"ka": GOOD_A, "kb": GOOD_B}
    assert "better for certain" in report.reason and report.evidence["certain"]
    history = ledger.history(ART)
    assert [e.version for e in history] == [1, 2]  # one commit for both diffs
    assert history[-1].state == {"ka": GOOD_A, "kb": GOOD_B}
    meta = history[-1].meta
    assert meta["fused"] is True
    assert meta["contributors"] == [a.diff.diff_id, b.diff.diff_id]
    assert meta["gains"] >= 1 and meta["losses"] == 0 and meta["scored"] < len(HELD_OUT)
    assert meta["e_value"] > 1
    # p_improve is the e-value's confidence (1 when the full mean is better for certain), on
    # the report and in the ledger alike
    assert report.p_improve == 1.0 == meta["p_improve"]
    assert [committed for _, committed in alloc.calls] == [True]
    assert alloc.calls[0][0].p_improve == report.p_improve


def test_contradiction_keeps_the_better_on_the_cheap_score():
    ledger, agg, ev, alloc = make(config=CHEAP_RANKED)
    weak = card({"slot": effect("h2", nonce="weak")})  # no cheap gain, arrives first
    strong = card({"slot": GOOD_A})
    other = card({"kb": GOOD_B})
    report = step_one(agg, weak, strong, other)
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.conflicts_dropped == 1
    assert report.fused
    _, state = ledger.head(ART)
    assert state == {"slot": GOOD_A, "kb": GOOD_B}
    assert ev.cheap_calls > 0
    assert list(agg.evidence_pool) == [weak]  # the weaker side keeps its evidence


def test_contradiction_ranked_on_the_evidence_keeps_the_larger_self_verify_delta():
    # rank_by="evidence" (the default): no cheap evaluation; the self-verify delta decides,
    # even against the card the cheap score would prefer
    ledger, agg, ev, _ = make()
    cheap_better = card({"slot": GOOD_A}, delta=0.1)
    better_evidence = card({"slot": effect("h2,h3", nonce="claimed")}, delta=0.6)
    report = step_one(agg, cheap_better, better_evidence)
    assert report.outcome is MergeOutcome.COMMITTED and not report.fused
    assert report.conflicts_dropped == 1
    assert report.accepted == better_evidence.diff
    assert ledger.head(ART)[1] == {"slot": better_evidence.diff.ops["slot"]}
    assert ev.cheap_calls == 0 and agg.counters["cheap_evals"] == 0
    assert list(agg.evidence_pool) == [cheap_better]


def test_contradicting_pair_alone_commits_the_better_single():
    ledger, agg, _, _ = make(config=CHEAP_RANKED)
    report = step_one(agg, card({"slot": effect("h2", nonce="weak")}), card({"slot": GOOD_A}))
    assert report.outcome is MergeOutcome.COMMITTED
    assert not report.fused
    assert report.conflicts_dropped == 1
    assert ledger.head(ART)[1] == {"slot": GOOD_A}


HARMFUL = effect("", "c0,h0", nonce="X")  # breaks a held-out task the head passes, and c0


def test_harmful_diff_fused_with_a_helpful_one_is_left_out():
    # X cancels A's cheap gain (A solves c1, X breaks c0): the union ties the head on
    # the cheap score, so the singles are ranked and A goes forward alone.
    ledger, agg, _, alloc = make(config=CHEAP_RANKED)
    helpful_card = card({"ka": GOOD_A}, delta=0.1)
    harmful_card = card({"kx": HARMFUL}, delta=0.5)  # even with the better self-verify claim
    report = step_one(agg, harmful_card, helpful_card)
    assert report.outcome is MergeOutcome.COMMITTED
    assert not report.fused
    assert report.accepted == helpful_card.diff
    _, state = ledger.head(ART)
    assert state == {"ka": GOOD_A}
    assert "kx" not in state
    assert all("kx" not in e.state for e in ledger.history(ART))
    assert agg.counters["tournaments_on_demand"] == 1
    assert "best single" in report.reason
    # feedback is attributed to the single that was measured
    assert [(ctx.advantage, c) for ctx, c in alloc.calls] == [(helpful_card.advantage, True)]


def test_harmful_diff_in_a_union_ranked_on_the_evidence_is_refused_by_its_regression():
    # rank_by="evidence": the union goes forward unranked; scored on every task, the
    # paired test sees the regression X causes (h0): nothing harmful is committed
    ledger, agg, ev, alloc = make(config=table_config(sequential=False))
    report = step_one(agg, card({"kx": HARMFUL}, delta=0.5), card({"ka": GOOD_A}, delta=0.1))
    assert report.fused and report.outcome is MergeOutcome.BELOW_THRESHOLD
    assert "regresses 1 held-out task" in report.reason
    assert ledger.head(ART)[0] == 1
    assert agg.counters["tournaments_on_demand"] == 0 and ev.cheap_calls == 0
    assert [c for _, c in alloc.calls] == [False]


def test_union_that_beats_the_head_goes_forward_without_a_tournament():
    _, agg, _, _ = make()
    report = step_one(agg, card({"ka": GOOD_A}), card({"kb": GOOD_B}))
    assert report.fused
    assert agg.counters["tournaments"] == 0
    assert agg.counters["tournaments_on_demand"] == 0


def test_tournament_gate_closed_means_no_tournament():
    cfg = replace(CHEAP_RANKED, fusion_tournament=True)
    _, agg, _, _ = make(config=cfg, tournament_gate=lambda: False)
    report = step_one(agg, card({"ka": GOOD_A}), card({"kb": GOOD_B}))
    assert report.fused
    assert agg.counters["tournaments"] == 0


# --------------------------------------------------------------------------- unmeasured ends


def test_oversized_by_ops_is_reported_and_not_observed():
    ledger, agg, ev, alloc = make()
    big = card({f"k{i}": NEUTRAL for i in range(7)})
    report = step_one(agg, big)
    assert report.outcome is MergeOutcome.OVERSIZED
    assert report.considered == 1
    assert report.accepted is None and report.p_improve is None
    assert "6 ops" in report.reason
    assert alloc.calls == []
    assert ev.held_out_calls == 0
    assert ledger.head(ART)[0] == 1


def test_oversized_by_chars_is_reported_and_not_observed():
    cfg = table_config(trust_region_chars=100)
    _, agg, _, alloc = make(config=cfg)
    report = step_one(agg, card({"k": effect("h2", nonce="x" * 100)}))
    assert report.outcome is MergeOutcome.OVERSIZED
    assert alloc.calls == []


def test_at_the_trust_region_limit_is_not_oversized():
    _, agg, _, _ = make()
    ops = {"ka": GOOD_A} | {f"n{i}": NEUTRAL for i in range(5)}
    report = step_one(agg, card(ops))
    assert report.outcome is MergeOutcome.COMMITTED


def test_oversized_card_beside_a_good_one_is_dropped_and_the_good_one_commits():
    _, agg, _, alloc = make()
    report = step_one(agg, card({f"k{i}": NEUTRAL for i in range(9)}), card({"ka": GOOD_A}))
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.considered == 2
    assert "1 oversized" in report.reason
    assert len(alloc.calls) == 1


def _advance(ledger: Any, n: int) -> None:
    """Move the head ``n`` versions with neutral commits."""
    for _ in range(n):
        version, state = ledger.head(ART)
        ledger.commit(ART, {**state, f"pad{version}": NEUTRAL}, version)


def test_all_stale_is_reported_pooled_and_not_observed():
    ledger, agg, ev, alloc = make()  # L2: alpha_tail = 1
    _advance(ledger, 2)  # head v3
    stale = card({"ka": GOOD_A}, base=1)  # eta 2 > alpha 1 -> discard
    report = step_one(agg, stale)
    assert report.outcome is MergeOutcome.ALL_STALE
    assert report.discarded_stale == 1 and report.reason.startswith("no diff survived: 1 stale (policy ")
    assert report.considered == 1
    assert report.p_improve is None
    assert alloc.calls == []
    assert ev.held_out_calls == 0
    assert list(agg.evidence_pool) == [stale]
    assert agg.eta_histogram[2] == 1
    assert ledger.head(ART)[0] == 3


def test_a_decision_whose_diffs_are_all_in_the_head_says_none_was_stale():
    ledger, agg, ev, alloc = make()
    _advance(ledger, 1)
    _, state = ledger.head(ART)
    key = next(iter(state))
    report = step_one(agg, card({key: state[key]}, base=2))  # a no-op on the head: nothing new, not stale
    assert report.outcome is MergeOutcome.ALL_STALE and report.discarded_stale == 0
    assert report.reason == "nothing new to merge, none stale: 1 already in the head"
    assert agg.counters["already_in_head"] == 1 and agg.counters["discarded_stale"] == 0
    assert alloc.calls == [] and ev.held_out_calls == 0


def test_l1_artifact_tolerates_more_staleness_than_l2():
    ledger, agg, _, _ = make(blast=0.6)  # L1: alpha_head = 5
    _advance(ledger, 3)
    report = step_one(agg, card({"ka": GOOD_A}, base=1))  # eta 3 <= 5 -> rebase
    assert report.outcome is MergeOutcome.COMMITTED
    assert agg.counters["rebased"] == 1


def test_stale_contract_breaking_diff_is_discarded_even_within_alpha():
    ledger, agg, _, alloc = make()
    _advance(ledger, 1)
    report = step_one(agg, card({"ka": GOOD_A}, base=1, breaking=True))
    assert report.outcome is MergeOutcome.ALL_STALE
    assert alloc.calls == []


def test_full_policy_accepts_a_very_stale_diff():
    ledger, agg, _, _ = make(policy="full")
    _advance(ledger, 4)
    report = step_one(agg, card({"ka": GOOD_A}, base=1))
    assert report.outcome is MergeOutcome.COMMITTED
    assert agg.counters["rebased"] == 0


# --------------------------------------------------------------------------- rebase


def test_rebase_keeps_a_stale_diff_that_still_helps():
    ledger, agg, _, _ = make()
    ledger.commit(ART, {"kb": GOOD_B}, 1)  # head v2, solves c2
    stale = card({"ka": GOOD_A}, base=1)  # eta 1 <= alpha 1; A still adds c1
    report = step_one(agg, stale)
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.discarded_stale == 0
    assert agg.counters["rebased"] == 1
    assert agg.counters["rebase_rejected"] == 0
    assert ledger.head(ART) == (3, {"kb": GOOD_B, "ka": GOOD_A})


def test_rebase_drops_a_stale_diff_that_no_longer_helps():
    ledger, agg, _, alloc = make()
    ledger.commit(ART, {"kb": GOOD_B}, 1)  # head v2 already solves c2
    stale = card({"kdup": effect("h5,c2", nonce="dup")}, base=1)
    report = step_one(agg, stale)
    assert report.outcome is MergeOutcome.ALL_STALE
    assert report.discarded_stale == 1
    assert agg.counters["rebase_rejected"] == 1
    assert list(agg.evidence_pool) == [stale]
    assert alloc.calls == []


def test_evidence_pool_receives_every_discarded_card():
    ledger, agg, _, _ = make()  # L2: alpha_tail = 1
    _advance(ledger, 2)  # head v3
    too_old = card({"k1": GOOD_A}, base=1)  # eta 2 > alpha: discard
    useless = card({"k2": NEUTRAL}, base=2)  # eta 1: rebase, no cheap gain: discard
    breaking = card({"k3": GOOD_A}, base=2, breaking=True)  # stale and contract-breaking
    fresh = card({"k4": GOOD_B}, base=3)
    report = step_one(agg, too_old, useless, fresh, breaking)
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.considered == 4
    assert report.discarded_stale == 3
    assert list(agg.evidence_pool) == [too_old, useless, breaking]
    assert ledger.head(ART)[1]["k4"] == GOOD_B


def test_staleness_is_measured_over_the_whole_version_vector():
    ledger, agg, _, _ = make(artifacts={ART: 0.2, "other": 0.2})
    ledger.commit("other", {"x": "1"}, 1)
    ledger.commit("other", {"x": "2"}, 2)  # "other" at v3
    lagging = card({"ka": GOOD_A}, base={ART: 1, "other": 1})  # fresh here, 2 behind there
    report = step_one(agg, lagging)
    assert report.outcome is MergeOutcome.ALL_STALE
    assert list(agg.evidence_pool) == [lagging]


# --------------------------------------------------------------------------- drawing on the evidence pool

# Two diffs that both solve the cheap task c1 and differ only on held-out tasks: in a
# tournament ranked on the cheap score the union ties the singles, so the better
# self-verify claim (A) goes forward alone and B is set aside into the pool.
TIE_A = effect("h2,h3,h4,c1", nonce="A")
TIE_B = effect("h5,h6,h7,c1", nonce="B")


def _set_aside_b(pool_draw: int = 2) -> tuple[Any, Aggregator, VerifyingEvaluator, RecordingAllocator, EvidenceCard]:
    """Step 1: A commits (v2) and B, which still helps on its own tasks, is pooled."""
    cfg = replace(CHEAP_RANKED, fusion_tournament=True, pool_draw=pool_draw)
    ledger, agg, ev, alloc = make(config=cfg, evaluator=VerifyingEvaluator())
    b = card({"kb": TIE_B}, delta=0.1, advantage=-0.7, refs=["h5"])
    report = step_one(agg, card({"ka": TIE_A}, delta=0.3, refs=["h2"]), b)
    assert report.outcome is MergeOutcome.COMMITTED and not report.fused
    assert agg.evidence_pool == (b,)
    assert agg.counters["set_aside"] == 1
    return ledger, agg, ev, alloc, b


@pytest.mark.parametrize("pool_draw", [2, 0])
def test_a_pooled_card_is_retried_next_step_and_commits_when_it_still_helps(pool_draw):
    ledger, agg, _, alloc, b = _set_aside_b(pool_draw)
    # Step 2 brings only a neutral card. B, now one version stale, is rebased, re-verified
    # on its prompting task (the head lacks h5) and wins the tournament on its own.
    neutral = card({"kn": NEUTRAL}, base=2, delta=None)
    report = step_one(agg, neutral)
    if pool_draw == 0:  # the old behaviour: the pool is a record, the neutral card fails
        assert report.outcome is MergeOutcome.BELOW_THRESHOLD
        assert agg.evidence_pool == (b,)
        assert "pool_drawn" not in agg.counters
        return
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.accepted == b.diff and not report.fused
    assert report.considered == 2 and "1 re-tried from the pool" in report.reason
    assert ledger.head(ART) == (3, {"ka": TIE_A, "kb": TIE_B})
    assert (agg.counters["pool_drawn"], agg.counters["pool_committed"]) == (1, 1)
    assert agg.counters["pool_recovered"] == 0  # B was set aside, never counted as stale
    assert agg.counters["rebased"] == 0  # the staleness counters describe new cards only
    assert agg.evidence_pool == (neutral,)  # B left the pool; the outranked card went in
    # one observation per decision; the second is attributed to B's own card
    assert [(ctx.advantage, committed) for ctx, committed in alloc.calls] == [(0.0, True), (-0.7, True)]


def test_an_artifact_without_new_cards_draws_nothing():
    _, agg, ev, alloc, b = _set_aside_b()
    calls = (ev.held_out_calls, ev.cheap_calls)
    assert agg.step() == []
    assert (ev.held_out_calls, ev.cheap_calls) == calls
    assert agg.evidence_pool == (b,)
    assert "pool_drawn" not in agg.counters and len(alloc.calls) == 1


def test_a_stale_discarded_card_is_retried_once_the_head_has_moved_and_commits():
    ledger, agg, _, alloc = make(config=table_config(alpha_tail=2))
    ledger.commit(ART, {"kx": effect("", "c1", nonce="breaker")}, 1)  # head v2 breaks c1
    stale = card({"ka": effect("h2,h3,h4,c1", nonce="S")}, base=1)
    # step 1: one version stale, rebased, no cheap gain while c1 is broken: discarded
    report = step_one(agg, stale)
    assert report.outcome is MergeOutcome.ALL_STALE and report.discarded_stale == 1
    assert agg.evidence_pool == (stale,)
    # step 2, same head: re-verifying on the head that rejected it would say the same
    report = step_one(agg, card({"kn": NEUTRAL}, base=2, delta=None))
    assert report.outcome is MergeOutcome.BELOW_THRESHOLD
    assert "pool_drawn" not in agg.counters
    # another writer repairs c1 (head v3); step 3 re-tries the card from its original base
    ledger.commit(ART, {"kx": effect("h9", nonce="fixed")}, 2)
    fresh = card({"kb": GOOD_B}, base=3)
    report = step_one(agg, fresh)
    assert report.outcome is MergeOutcome.COMMITTED and report.fused
    assert report.discarded_stale == 0
    assert ledger.head(ART)[1] == {"kx": effect("h9", nonce="fixed"), "kb": GOOD_B, "ka": stale.diff.ops["ka"]}
    assert ledger.history(ART)[-1].meta["contributors"] == [fresh.diff.diff_id, stale.diff.diff_id]
    assert (agg.counters["pool_drawn"], agg.counters["pool_committed"]) == (1, 1)
    assert agg.counters["pool_recovered"] == 1  # a rollout counted as wasted was not, after all
    assert stale not in agg.evidence_pool
    assert agg.counters["discarded_stale"] == agg.counters["rebase_rejected"] == 1
    assert agg.eta_histogram == {1: 1, 0: 2}  # the re-try's eta (2) is not a new card's
    assert [committed for _, committed in alloc.calls] == [False, True]


def _move_head(ledger: Any) -> None:
    version, state = ledger.head(ART)
    ledger.commit(ART, {**state, f"other{version}": NEUTRAL}, version)


@pytest.mark.parametrize("retries", [1, 2])
def test_a_retried_card_that_no_longer_helps_is_not_retried_past_pool_retries(retries):
    # P helps a little but breaks what Q fixes; Q wins the tournament, P is set aside.
    cfg = replace(CHEAP_RANKED, fusion_tournament=True, alpha_tail=8, pool_retries=retries)
    ledger, agg, _, _ = make(config=cfg)
    p = card({"kp": effect("c1", "c2,c3", nonce="P")}, delta=0.3)
    q = card({"kq": effect("h2,h3,h4,c2,c3", nonce="Q"), "n1": NEUTRAL}, delta=0.1)
    assert step_one(agg, p, q).accepted == q.diff
    assert agg.evidence_pool == (p,)
    for n in range(4):
        step_one(agg, card({f"g{n}": effect(nonce=f"g{n}")}, base=ledger.head(ART)[0], delta=None))
        _move_head(ledger)  # so the same-head rule never hides a re-try
    assert agg.counters["pool_drawn"] == retries
    assert agg.counters["pool_returned"] == retries
    assert agg.counters["pool_committed"] == 0
    assert all("kp" not in e.state for e in ledger.history(ART))
    assert p in agg.evidence_pool  # still on record, never re-tried again


def test_the_draw_takes_the_oldest_eligible_cards_up_to_pool_draw():
    ledger, agg, _, _ = make()  # L2, alpha 1, pool_draw 2
    _advance(ledger, 2)  # head v3
    w_value = effect("h2,h3", nonce="W")
    w = card({"kw": w_value}, base=3, delta=0.5, verified=True)

    def no_gain(ops: Mapping[str, str]) -> EvidenceCard:  # self-verified, measured no gain
        return card(ops, base=3, delta=0.0, verified=True)

    shared = no_gain({"shared": effect("h7,c1", nonce="old")})
    dup = no_gain({"kw": w_value})
    e1 = no_gain({"k1": effect("h4,c1", nonce="e1")})
    e2 = no_gain({"k2": effect("h5,c2", nonce="e2")})
    e3 = no_gain({"k3": effect("h6,c3", nonce="e3")})
    too_stale = card({"k9": effect("h8,c2", nonce="late")}, base=1)
    # step 1: evidence gating keeps W alone (v4); the others are set aside, the late one discarded
    report = step_one(agg, w, shared, dup, e1, e2, e3, too_stale)
    assert report.outcome is MergeOutcome.COMMITTED and report.accepted == w.diff
    assert agg.evidence_pool == (too_stale, shared, dup, e1, e2, e3)
    # step 2: too_stale is past alpha, shared collides with the new card's key, dup is
    # already in the head; e1 and e2 are drawn (pool_draw 2), e3 waits
    fresh = card({"shared": effect("h9", nonce="new")}, base=4, delta=None)
    report = step_one(agg, fresh)
    assert report.outcome is MergeOutcome.COMMITTED and report.fused
    assert "2 re-tried from the pool" in report.reason
    _, state = ledger.head(ART)
    assert state["shared"] == fresh.diff.ops["shared"]
    assert {"k1", "k2"} <= set(state) and not {"k3", "k9"} & set(state)
    assert agg.evidence_pool == (too_stale, shared, dup, e3)
    assert (agg.counters["pool_drawn"], agg.counters["pool_committed"]) == (2, 2)


@pytest.mark.parametrize("where", ["held_out", "cheap"])
def test_evaluator_raising_leaves_the_pool_as_it_was(where):
    ledger, agg, ev, alloc, b = _set_aside_b()
    counters = dict(agg.counters)
    neutral = card({"kn": NEUTRAL}, base=2, delta=None)
    agg.ingest(neutral)
    setattr(ev, f"fail_{where}", True)
    with pytest.raises(RuntimeError, match="down"):
        agg.step()
    assert agg.evidence_pool == (b,)
    assert agg.pending() == 1
    assert len(alloc.calls) == 1
    booked = ("discarded_stale", "rebased", "rebase_rejected", "set_aside", "committed",
              "below-threshold", "pool_drawn", "pool_committed", "pool_returned", "pool_dropped")
    assert {k: agg.counters[k] for k in booked} == {k: counters.get(k, 0) for k in booked}
    setattr(ev, f"fail_{where}", False)
    (report,) = agg.step()
    assert report.outcome is MergeOutcome.COMMITTED and report.accepted == b.diff
    assert agg.evidence_pool == (neutral,)  # B once, gone; nothing duplicated
    assert (agg.counters["pool_drawn"], agg.counters["pool_committed"]) == (1, 1)
    assert len(alloc.calls) == 2


def _story_outcomes(config: AggregatorConfig) -> list[tuple]:
    """The three pool stories above, as plain tuples (every gain in them is clear-cut)."""
    global _ids
    _ids = itertools.count()
    out: list[tuple] = []

    def run(agg: Aggregator, ledger: Any, alloc: RecordingAllocator, steps: list) -> None:
        for batch in steps:
            if callable(batch):  # another writer moves the head between steps
                batch()
                continue
            report = step_one(agg, *batch)
            out.append((report.outcome.value, report.committed_version, report.considered,
                        report.discarded_stale))
        out.append((sorted(ledger.head(ART)[1]), [c.diff.diff_id for c in agg.evidence_pool]))
        out.append(tuple((ctx.advantage, committed) for ctx, committed in alloc.calls))

    # a set-aside card that still helps (see _set_aside_b)
    ledger, agg, _, alloc = make(config=replace(config, fusion_tournament=True), evaluator=VerifyingEvaluator())
    run(agg, ledger, alloc, [
        [card({"ka": TIE_A}, delta=0.3, refs=["h2"]), card({"kb": TIE_B}, delta=0.1, refs=["h5"], advantage=-0.7)],
        [card({"kn": NEUTRAL}, base=2, delta=None)],
        [card({"kc": effect("h8,h9,c3", nonce="C")}, base=2, delta=0.2)],
    ])
    # the draw rules (see test_the_draw_takes_the_oldest_eligible_cards_up_to_pool_draw)
    ledger, agg, _, alloc = make(config=config)
    _advance(ledger, 2)
    w_value = effect("h2,h3", nonce="W")
    run(agg, ledger, alloc, [
        [card({"kw": w_value}, base=3, delta=0.5, verified=True),
         *(card(ops, base=3, delta=0.0, verified=True) for ops in (
             {"shared": effect("h7,c1", nonce="old")}, {"kw": w_value}, {"k1": effect("h4,c1", nonce="e1")},
             {"k2": effect("h5,c2", nonce="e2")}, {"k3": effect("h6,c3", nonce="e3")})),
         card({"k9": effect("h8,c2", nonce="late")}, base=1)],
        [card({"shared": effect("h9", nonce="new")}, base=4, delta=None)],
    ])
    # a stale card rejected on rebase, re-tried once the head has moved
    ledger, agg, _, alloc = make(config=replace(config, alpha_tail=2))
    ledger.commit(ART, {"kx": effect("", "c1", nonce="breaker")}, 1)
    run(agg, ledger, alloc, [
        [card({"ka": effect("h2,h3,h4,c1", nonce="S")}, base=1)],
        [card({"kn": NEUTRAL}, base=2, delta=None)],
        lambda: ledger.commit(ART, {"kx": effect("h9", nonce="fixed")}, 2),
        [card({"kb": GOOD_B}, base=3)],
    ])
    return out


# Recorded by running `_story_outcomes` against the aggregator of commit dbf7465, the
# last one in which nothing read the evidence pool (the same under the acceptance rule
# of 2c32ca6, under the evidence rule, and under the paired test with the table declared
# deterministic and the cheap-score ranking of those commits: every gain in the stories
# is clear-cut). Under the default evidence ranking the fusion tournament of the second
# story sends the union forward instead (it carries both members' self-verified gains):
# `PINNED_EVIDENCE_RANKED`.
PINNED_BEFORE_THE_POOL = [
    ("committed", 2, 2, 0),
    ("below-threshold", None, 1, 0),
    ("committed", 3, 1, 0),
    (["ka", "kc"], ["d1"]),
    ((0.0, True), (0.0, False), (0.0, True)),
    ("committed", 4, 7, 1),
    ("committed", 5, 1, 0),
    (["kw", "pad1", "pad2", "shared"], ["d10", "d5", "d6", "d7", "d8", "d9"]),
    ((0.0, True), (0.0, True)),
    ("all-stale", None, 1, 1),
    ("below-threshold", None, 1, 0),
    ("committed", 4, 1, 0),
    (["kb", "kx"], ["d12"]),
    ((0.0, False), (0.0, True)),
]


PINNED_EVIDENCE_RANKED = [
    *PINNED_BEFORE_THE_POOL[:3], (["ka", "kb", "kc"], []), *PINNED_BEFORE_THE_POOL[4:],
]


def test_pool_draw_0_reproduces_the_merges_from_before_the_pool():
    before = _story_outcomes(table_config(pool_draw=0, rank_by="cheap"))
    assert before == PINNED_BEFORE_THE_POOL
    assert _story_outcomes(table_config(rank_by="cheap")) != before  # the stories do exercise the pool
    assert _story_outcomes(table_config(pool_draw=0)) == PINNED_EVIDENCE_RANKED


# --------------------------------------------------------------------------- acceptance, L1


def test_no_improvement_is_below_threshold():
    ledger, agg, _, alloc = make()
    report = step_one(agg, card({"k": NEUTRAL}, delta=None))
    assert report.outcome is MergeOutcome.BELOW_THRESHOLD
    assert report.p_improve == 0.0  # no discordant pair: E stays 1, confidence 1 - 1/E = 0
    assert "E=1 vs 20" in report.reason
    assert report.accepted is not None
    assert ledger.head(ART)[0] == 1
    assert [c for _, c in alloc.calls] == [False]
    assert agg.counters["pooled_for_evidence"] == 0  # no gain: nothing worth keeping


def test_held_out_regression_is_below_threshold():
    # every task scored, so the one regression is seen (a sequential evaluation may accept a
    # candidate whose full mean is better for certain before it reaches the regressed task)
    ledger, agg, _, _ = make(config=table_config(sequential=False))
    report = step_one(agg, card({"k": effect("h2,h3,h4,h5,h6,c1", "h0", nonce="r")}))
    assert report.outcome is MergeOutcome.BELOW_THRESHOLD
    assert "regresses 1" in report.reason
    assert ledger.head(ART)[0] == 1


@pytest.mark.parametrize("config", [TABLE, AggregatorConfig()], ids=["deterministic", "auto"])
@pytest.mark.parametrize("blast", [0.2, 0.6], ids=["L2", "L1"])
def test_a_tie_never_commits_whatever_the_self_verify_says(config, blast):
    ledger, agg, _, alloc = make(blast=blast, config=config)
    report = step_one(agg, card({"k": NEUTRAL}, delta=0.25))  # equal on held-out, self-verify +0.25
    assert report.outcome is MergeOutcome.BELOW_THRESHOLD
    assert report.p_improve == 0.0
    assert "0 gain(s), 0 loss(es)" in report.reason and "E=1 vs 20" in report.reason
    assert ledger.head(ART)[0] == 1
    assert [c for _, c in alloc.calls] == [False]
    assert alloc.calls[0][0].blast_radius == pytest.approx(blast)


def _solves_per_its_text(diff: Diff, trajectory: Sequence[Task], task: Task) -> float:
    """A relevance ranking that sees the tasks a diff's values solve and misses the ones they break."""
    solves = set().union(*(_tasks(v.split(":")[1]) for v in diff.ops.values() if v and v.startswith("e:")))
    return 1.0 if task.id in solves else 0.0


#: An evaluation that accepts on the diff's affected tasks and a one-unit sample (the local
#: null, bounding the share of losing units by 1.0) with a ranking blind to what the diff
#: breaks: only the L1 oracle gate's full comparison can see the damage.
PARTIAL_VIEW = table_config(relevance=_solves_per_its_text, acceptance_null="local", local_regression_share=1.0, eval_batch=1)
TRAP = effect("h2", "h0,h1", nonce="trap")  # solves h2, breaks the two tasks the head passes


def _trap(blast: float) -> tuple[Any, Aggregator, TableEvaluator, RecordingAllocator]:
    return make(blast=blast, config=PARTIAL_VIEW, evaluator=TableEvaluator(named=True))


def test_an_accepted_l1_candidate_is_refused_by_the_oracle_gate_on_the_full_held_out_means():
    ledger, agg, _, alloc = _trap(0.6)
    report = step_one(agg, card({"k": TRAP}))
    assert report.outcome is MergeOutcome.ORACLE_REJECTED
    assert "L1 oracle gate" in report.reason
    assert "0.1000 over all 10 task(s)" in report.reason and "0.2000" in report.reason
    assert report.p_improve is not None and 0 < report.p_improve < 0.95  # accepted without E >= 20
    assert agg.counters["accepted_early"] == 1  # on the one affected task and a one-unit sample...
    assert agg.counters["held_out_tasks_scored"] == len(HELD_OUT)  # ...then the gate scored the rest
    assert ledger.head(ART)[0] == 1
    assert [c for _, c in alloc.calls] == [False]
    assert alloc.calls[0][0].blast_radius == pytest.approx(0.6)


def test_the_same_candidate_on_an_l2_artifact_commits():
    # the control for the test above: only the oracle gate differs (the risk of a partial view)
    ledger, agg, _, _ = _trap(0.3)
    report = step_one(agg, card({"k": TRAP}))
    assert report.outcome is MergeOutcome.COMMITTED
    assert agg.counters["held_out_tasks_scored"] == 2
    assert TableEvaluator.solved(ledger.head(ART)[1]) & {"h0", "h1"} == set()


@pytest.mark.parametrize(("blast", "full"), [(0.6, True), (0.2, False)], ids=["L1", "L2"])
def test_a_strict_improvement_commits_and_only_l1_pays_for_every_held_out_task(blast, full):
    _, agg, _, _ = make(blast=blast)
    assert step_one(agg, card({"ka": GOOD_A})).outcome is MergeOutcome.COMMITTED
    scored, saved = agg.counters["held_out_tasks_scored"], agg.counters["held_out_tasks_saved"]
    assert scored + saved == len(HELD_OUT)
    assert (scored == len(HELD_OUT)) is full and (saved > 0) is not full


# --------------------------------------------------------------------------- the gate, sequential evaluation


@pytest.mark.parametrize(("cards", "gated"), [
    ([dict(delta=0.0, verified=True)], True),  # self-verified, no gain on its own task
    ([dict(delta=-0.2, verified=True), dict(delta=None, verified=True)], True),  # a union, none gained
    ([dict(delta=0.0, verified=True), dict(delta=0.4, verified=True)], False),  # one card gained
    ([dict(delta=0.0, verified=False)], False),  # the self-verify never ran: not held against it
], ids=["single", "union", "one-gained", "not-verified"])
def test_the_self_verify_gate_drops_a_no_gain_candidate_before_any_held_out_call(cards, gated):
    ledger, agg, ev, alloc = make()
    values = [GOOD_A, GOOD_B]
    report = step_one(agg, *(card({f"k{i}": values[i]}, **kw) for i, kw in enumerate(cards)))
    if gated:
        assert report.outcome is MergeOutcome.BELOW_THRESHOLD
        assert "self-verify gate" in report.reason
        assert report.accepted is not None and report.p_improve is None
        assert agg.counters["gate_dropped"] == 1
        assert ev.held_out_calls == 0 and agg.counters["held_out_evals"] == 0
        # measured on its own task and refused: reported once, as a rejection (SPEC §5)
        assert [c for _, c in alloc.calls] == [False]
        assert agg.evidence_pool == ()  # dropped, not kept for a later merge
        assert ledger.head(ART)[0] == 1
    else:
        assert report.outcome is MergeOutcome.COMMITTED  # the diffs do help on held-out
        assert agg.counters["gate_dropped"] == 0 and ev.held_out_calls > 0
        assert [c for _, c in alloc.calls] == [True]


def test_with_the_gate_off_a_no_gain_self_verify_is_measured_like_any_candidate():
    ledger, agg, ev, alloc = make(config=table_config(self_verify_gate=False))
    report = step_one(agg, card({"ka": GOOD_A}, delta=0.0, verified=True))
    assert report.outcome is MergeOutcome.COMMITTED  # the held-out test, not the self-verify, decides
    assert agg.counters["gate_dropped"] == 0
    assert ev.held_out_calls > 0 and agg.counters["held_out_evals"] == 1
    assert [c for _, c in alloc.calls] == [True]


SOLVES_ALL = effect(",".join(HELD_OUT[2:]) + ",c1", nonce="all")  # every task the head fails


def test_a_sequential_evaluation_stops_once_the_test_settles():
    _, agg, _, _ = make()
    report = step_one(agg, card({"k": SOLVES_ALL}))
    assert report.outcome is MergeOutcome.COMMITTED
    scored = agg.counters["held_out_tasks_scored"]  # whole looks, until the rest cannot undo the gain
    assert scored % TABLE.eval_batch == 0 and scored < len(HELD_OUT)
    assert agg.counters["held_out_tasks_saved"] == len(HELD_OUT) - scored > 0
    assert report.evidence["certain"]
    assert agg.counters["accepted_early"] == 1


def test_sequential_false_scores_every_task_before_deciding():
    ledger, agg, _, _ = make(config=table_config(sequential=False))
    report = step_one(agg, card({"k": SOLVES_ALL}))
    assert report.outcome is MergeOutcome.COMMITTED
    assert agg.counters["held_out_tasks_scored"] == len(HELD_OUT)
    assert agg.counters["held_out_tasks_saved"] == 0
    assert agg.counters["accepted_early"] == 0
    assert ledger.history(ART)[-1].meta["scored"] == len(HELD_OUT)


def test_an_evaluator_that_cannot_draw_again_is_measured_without_replacement():
    # the default rescore="auto" with an evaluator without rescore(): nothing can be drawn
    # again, so its scores count as they came (facts), sampled without replacement
    ledger, agg, _, alloc = make(config=AggregatorConfig())
    report = step_one(agg, card({"ka": GOOD_A}))  # three gains; the head passes two tasks
    assert report.outcome is MergeOutcome.COMMITTED, report.reason
    assert report.evidence["sampling"] == "without-replacement" and report.evidence["certain"]
    assert agg.noise.state == "unknown" and agg.counters["probe_redraws"] == 0
    assert agg.counters["held_out_draws"] == 0
    assert [c for _, c in alloc.calls] == [True]


# --------------------------------------------------------------------------- CAS


def test_lost_cas_race_never_overwrites_the_winner(any_ledger):
    ledger = RivalLedger(any_ledger, rivals=1)
    _, agg, _, alloc = make(ledger=ledger)
    c = card({"ka": GOOD_A})
    report = step_one(agg, c)
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.committed_version == 3
    history = ledger.history(ART)
    assert [e.version for e in history] == [1, 2, 3]
    assert history[1].meta == {"author": "rival"}
    assert history[1].state == {"rival-0": "rival"}
    # the diff was re-applied on top of the winner
    assert history[2].state == {"rival-0": "rival", "ka": GOOD_A}
    assert agg.counters["cas_retries"] == 1
    assert [c_ for _, c_ in alloc.calls] == [True]


def test_every_cas_attempt_lost_is_a_cas_conflict(any_ledger):
    ledger = RivalLedger(any_ledger, rivals=10)
    _, agg, _, alloc = make(ledger=ledger)
    report = step_one(agg, card({"ka": GOOD_A}))
    assert report.outcome is MergeOutcome.CAS_CONFLICT
    assert report.committed_version is None
    assert ledger.attempts == 3  # cas_attempts
    version, state = ledger.head(ART)
    assert version == 4
    assert state == {"rival-0": "rival", "rival-1": "rival", "rival-2": "rival"}
    assert [c for _, c in alloc.calls] == [False]
    assert "3 compare-and-swap" in report.reason


class SameKeyRival(RivalLedger):
    """The rival writes the very key the aggregator's diff writes (a contradicting winner)."""

    def commit(self, artifact_id, new_state, base_version, *, meta=None):
        self.attempts += 1
        if self.rivals > 0:
            self.rivals -= 1
            version, state = self.inner.head(artifact_id)
            self.inner.commit(artifact_id, {**state, "slot": GOOD_B}, version, meta={"author": "rival"})
        return self.inner.commit(artifact_id, new_state, base_version, meta=meta)


BLOCKER = effect("", ",".join(HELD_OUT) + ",c0", nonce="blocker")  # breaks every held-out task


@pytest.mark.parametrize("op", [GOOD_A, None], ids=["write", "delete"])
def test_cas_retry_never_overwrites_a_key_the_winner_wrote(op):
    """Re-applying the diff must not silently replace the winner's value of the same key.

    The diff was measured against the old head; on the fresh head its write to
    ``slot`` would erase the rival's committed (and never compared) value.
    """
    inner = MemoryLedger()
    inner.register(ART, {"slot": BLOCKER, "rules": SOLVES_ALL}, 0.2)  # the head fails every task
    ledger = SameKeyRival(inner, rivals=1)
    alloc = RecordingAllocator()
    agg = Aggregator(ledger, TableEvaluator(), TABLE, allocator=alloc)
    # on the old head both gain every held-out task: writing GOOD_A over the blocker, or deleting it
    report = step_one(agg, card({"slot": op}, delta=0.5))
    assert report.outcome is MergeOutcome.CAS_CONFLICT
    assert ledger.head(ART)[1].get("slot") == GOOD_B  # the winner's value survives
    assert len(ledger.history(ART)) == 2
    assert ledger.attempts == 1  # no second attempt on a head whose key the winner wrote
    assert [c for _, c in alloc.calls] == [False]


def test_cas_attempts_is_a_knob():
    ledger = RivalLedger(MemoryLedger(), rivals=4)
    _, agg, _, _ = make(ledger=ledger, config=table_config(cas_attempts=5))
    report = step_one(agg, card({"ka": GOOD_A}))
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.committed_version == 6


def test_a_ledger_error_other_than_cas_propagates_and_restores_the_cards():
    class Broken(RivalLedger):
        def commit(self, *args, **kwargs):
            raise LedgerError("disk full")

    ledger = Broken(MemoryLedger())
    _, agg, _, alloc = make(ledger=ledger)
    agg.ingest(card({"ka": GOOD_A}))
    with pytest.raises(LedgerError, match="disk full"):
        agg.step()
    assert agg.pending() == 1
    assert alloc.calls == []


# --------------------------------------------------------------------------- feedback


def _scenario(outcome: MergeOutcome) -> tuple[Aggregator, RecordingAllocator, list[EvidenceCard]]:
    if outcome is MergeOutcome.COMMITTED:
        _, agg, _, alloc = make()
        cards = [card({"ka": GOOD_A})]
    elif outcome is MergeOutcome.BELOW_THRESHOLD:
        _, agg, _, alloc = make()
        cards = [card({"k": NEUTRAL}, delta=None)]
    elif outcome is MergeOutcome.ORACLE_REJECTED:
        # acceptance demands a held-out gain, so only a partial view of the held-out set
        # lets a harmful candidate reach the oracle gate (see PARTIAL_VIEW)
        _, agg, _, alloc = _trap(0.6)
        cards = [card({"k": TRAP})]
    elif outcome is MergeOutcome.CAS_CONFLICT:
        _, agg, _, alloc = make(ledger=RivalLedger(MemoryLedger(), rivals=99))
        cards = [card({"ka": GOOD_A})]
    elif outcome is MergeOutcome.ALL_STALE:
        ledger, agg, _, alloc = make()
        _advance(ledger, 3)
        cards = [card({"ka": GOOD_A}, base=1), card({"kb": GOOD_B}, base=2)]
    else:
        _, agg, _, alloc = make()
        cards = [card({f"k{i}": NEUTRAL for i in range(8)})]
    return agg, alloc, cards


@pytest.mark.parametrize("outcome", list(MergeOutcome))
def test_exactly_once_feedback_for_measured_outcomes_and_none_otherwise(outcome):
    agg, alloc, cards = _scenario(outcome)
    report = step_one(agg, *cards)
    assert report.outcome is outcome
    if outcome.measured:
        assert [c for _, c in alloc.calls] == [outcome is MergeOutcome.COMMITTED]
        assert agg.counters["allocator_observations"] == 1
    else:
        assert alloc.calls == []
        assert agg.counters["allocator_observations"] == 0
    # a later empty step never re-reports
    assert agg.step() == []
    assert len(alloc.calls) == (1 if outcome.measured else 0)


def test_without_an_allocator_nothing_breaks():
    ledger = MemoryLedger()
    ledger.register(ART, {}, 0.2)
    agg = Aggregator(ledger, TableEvaluator(), TABLE)
    agg.ingest(card({"ka": GOOD_A}))
    (report,) = agg.step()
    assert report.outcome is MergeOutcome.COMMITTED


def test_fused_commit_reports_the_first_contributors_original_card():
    _, agg, _, alloc = make(blast=0.25)
    first = card({"ka": GOOD_A, "pad": NEUTRAL}, advantage=1.5, delta=0.1)
    second = card({"kb": GOOD_B}, advantage=-0.3, delta=0.9)
    report = step_one(agg, first, second)
    assert report.fused and report.outcome is MergeOutcome.COMMITTED
    assert report.accepted is not None and report.accepted.size() == 3
    ((ctx, committed),) = alloc.calls
    assert committed is True
    assert ctx.advantage == 1.5
    assert ctx.size == 2  # its own diff, not the union's 3
    assert ctx.blast_radius == pytest.approx(0.25)
    assert ctx.features() == pytest.approx((1.5, math.log1p(2) / math.log1p(100), 0.25))


def test_fused_commit_attribution_skips_a_card_dropped_in_a_conflict():
    _, agg, _, alloc = make()
    loser = card({"slot": effect("h2", nonce="weak")}, advantage=9.0, delta=0.05)
    winner = card({"slot": GOOD_A}, advantage=0.7, delta=0.3)  # the better self-verify
    partner = card({"kb": GOOD_B}, advantage=-1.0)
    report = step_one(agg, loser, winner, partner)
    assert report.fused and report.conflicts_dropped == 1
    ((ctx, _),) = alloc.calls
    assert ctx.advantage == 0.7


def test_tournament_single_winner_reports_its_own_card():
    # P helps a little but breaks what Q fixes; Q alone beats P and beats the union.
    cfg = replace(CHEAP_RANKED, fusion_tournament=True)
    _, agg, _, alloc = make(config=cfg)
    p = card({"kp": effect("c1", "c2,c3", nonce="P")}, advantage=0.9, delta=0.3)
    q = card({"kq": effect("h2,h3,h4,c2,c3", nonce="Q"), "n1": NEUTRAL, "n2": NEUTRAL},
             advantage=-1.2, delta=0.1)
    report = step_one(agg, p, q)
    assert report.outcome is MergeOutcome.COMMITTED
    assert not report.fused
    assert report.accepted == q.diff
    assert agg.counters["tournaments"] == 1
    assert "tournament" in report.reason
    ((ctx, committed),) = alloc.calls
    assert committed is True
    assert ctx.advantage == -1.2
    assert ctx.size == 3


def test_tournament_union_winner_reports_the_first_contributor():
    cfg = replace(CHEAP_RANKED, fusion_tournament=True)
    _, agg, _, alloc = make(config=cfg)
    a = card({"ka": GOOD_A}, advantage=0.4)
    b = card({"kb": GOOD_B}, advantage=2.0)
    report = step_one(agg, a, b)
    assert report.fused
    assert agg.counters["tournaments"] == 1
    ((ctx, _),) = alloc.calls
    assert ctx.advantage == 0.4


def test_rejected_single_reports_the_selected_card():
    _, agg, _, alloc = make()
    c = card({"k": NEUTRAL, "k2": NEUTRAL}, advantage=-0.5, delta=None)
    step_one(agg, c)
    ((ctx, committed),) = alloc.calls
    assert (ctx.advantage, ctx.size, committed) == (-0.5, 2, False)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("where", ["held_out", "cheap"])
def test_evaluator_raising_puts_the_cards_back(where):
    ledger, agg, ev, alloc = make(config=CHEAP_RANKED)  # the union is checked on the cheap score
    cards = [card({"ka": GOOD_A}), card({"kb": GOOD_B})]
    for c in cards:
        agg.ingest(c)
    setattr(ev, f"fail_{where}", True)
    with pytest.raises(RuntimeError, match="down"):
        agg.step()
    assert agg.pending() == 2
    assert alloc.calls == []
    assert ledger.head(ART)[0] == 1
    setattr(ev, f"fail_{where}", False)
    (report,) = agg.step()
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.considered == 2
    assert agg.pending() == 0


def test_evaluator_raising_then_retrying_pools_a_discarded_card_once():
    ledger, agg, ev, _ = make()
    _advance(ledger, 2)  # head v3
    stale = card({"k1": GOOD_A}, base=1)
    agg.ingest(stale)
    agg.ingest(card({"k2": GOOD_B}, base=3))
    ev.fail_held_out = True
    with pytest.raises(RuntimeError):
        agg.step()
    ev.fail_held_out = False
    (report,) = agg.step()
    assert report.outcome is MergeOutcome.COMMITTED
    assert report.discarded_stale == 1
    assert list(agg.evidence_pool) == [stale]
    assert agg.counters["discarded_stale"] == 1


def test_evaluator_raising_on_the_second_artifact_keeps_the_first_merge():
    ledger, agg, ev, alloc = make(artifacts={"one": 0.2, "two": 0.2})
    agg.ingest(card({"ka": GOOD_A}, target="one"))
    agg.ingest(card({"kb": GOOD_B}, target="two"))

    real = ev.held_out

    def flaky(artifact_id, state):
        if artifact_id == "two":
            raise RuntimeError("down for two")
        return real(artifact_id, state)

    ev.held_out = flaky  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="two"):
        agg.step()
    assert ledger.head("one")[0] == 2
    assert ledger.head("two")[0] == 1
    assert agg.pending() == 1
    ev.held_out = real  # type: ignore[method-assign]
    (report,) = agg.step()
    assert report.artifact_id == "two" and report.outcome is MergeOutcome.COMMITTED
    assert [c for _, c in alloc.calls] == [True, True]


def test_ingest_into_an_l0_artifact_is_a_governance_error():
    ledger, agg, _, _ = make(artifacts={ART: 0.2, "governance": 0.1, "L0:contract": 0.1})
    for frozen in ("governance", "L0:contract"):
        with pytest.raises(GovernanceError, match=repr(frozen)):
            agg.ingest(card({"k": "v"}, target=frozen))
    assert agg.pending() == 0
    assert issubclass(GovernanceError, ValueError)


def test_ingest_into_an_unknown_artifact_is_a_ledger_error():
    _, agg, _, _ = make()
    with pytest.raises(LedgerError, match="'nope'"):
        agg.ingest(card({"k": "v"}, target="nope"))


# --------------------------------------------------------------------------- determinism


def _run_sequence(
    config: AggregatorConfig | None = None,
) -> tuple[list[dict], list[Any], list[tuple[AllocatorContext, bool]]]:
    global _ids
    _ids = itertools.count()  # same diff ids on both runs
    ledger = RivalLedger(MemoryLedger(), rivals=0)
    _, agg, _, alloc = make(ledger=ledger, artifacts={ART: 0.2, "slow": 0.6}, config=config)
    batches = [
        [card({"ka": GOOD_A}), card({"kb": GOOD_B}), card({"slot": effect("h8", nonce="w")})],
        [card({"slot": effect("h8,c3", nonce="s")}, base=2), card({"slot": effect("h9", nonce="t")}, base=2),
         card({"k": NEUTRAL}, target="slow", delta=0.25)],
        [card({"x": effect("", "c0", nonce="X")}, base=3), card({"y": effect("h9,c3", nonce="Y")}, base=1),
         card({f"o{i}": NEUTRAL for i in range(7)}, target="slow")],
    ]
    reports: list[dict] = []
    for i, batch in enumerate(batches):
        ledger.rivals = 1 if i == 1 else 0
        for c in batch:
            agg.ingest(c)
        reports.extend(r.to_json() for r in agg.step())
    history = [e for aid in (ART, "slow") for e in ledger.history(aid)]
    return reports, [(e.version, e.state, e.meta) for e in history], alloc.calls


def test_same_sequence_twice_gives_identical_reports():
    first = _run_sequence()
    second = _run_sequence()
    assert first == second
    outcomes = {r["outcome"] for r in first[0]}
    assert len(outcomes) >= 3  # the sequence exercises several paths


# --------------------------------------------------------------------------- property

_KINDS = ["good", "bad", "neutral", "oversized", "stale"]
_ARTIFACTS = {"fast": 0.2, "slow": 0.6}


@st.composite
def _card_specs(draw):
    return {
        "kind": draw(st.sampled_from(_KINDS)),
        "target": draw(st.sampled_from(sorted(_ARTIFACTS))),
        "key": draw(st.sampled_from(["s0", "s1", None])),  # shared keys make conflicts
        "held": draw(st.sets(st.sampled_from(HELD_OUT[2:]), max_size=4)),
        "cheap": draw(st.sets(st.sampled_from(CHEAP[1:]), max_size=2)),
        "lag": draw(st.integers(min_value=1, max_value=4)),
        "delta": draw(st.sampled_from([None, -0.2, 0.0, 0.1, 0.3])),
        "advantage": draw(st.sampled_from([None, -1.0, 0.0, 0.5, 2.0])),
        "verified": draw(st.booleans()),  # a verified card with delta <= 0 meets the self-verify gate
    }


def _build(spec: dict, ledger: Any, n: int) -> EvidenceCard:
    target = spec["target"]
    head = ledger.head(target)[0]
    key = spec["key"] or f"u{n}"
    base = head
    solves = ",".join(sorted(spec["held"] | spec["cheap"]))
    if spec["kind"] == "good":
        ops = {key: effect(solves, nonce=str(n))}
    elif spec["kind"] == "bad":
        ops = {key: effect("", "h0,c0", nonce=str(n))}
    elif spec["kind"] == "neutral":
        ops = {key: effect(nonce=str(n))}
    elif spec["kind"] == "oversized":
        ops = {f"{key}-{i}": effect(solves, nonce=str(n)) for i in range(7)}
    else:
        ops = {key: effect(solves, nonce=str(n))}
        base = max(1, head - spec["lag"])
    diff = Diff(f"p{n}", target, ops)
    refs = [Task(t, t) for t in sorted(spec["held"])]  # what a verifying evaluator re-runs on a rebase
    return EvidenceCard(diff, {target: base}, spec["delta"], spec["advantage"], refs,
                        self_verified=spec["verified"])


def _check_pool(agg: Aggregator, ledger: Any, ever_pooled: set[str]) -> None:
    """What the evidence pool keeps true after every step, failed or not."""
    cfg = agg.config
    ids = [id(c) for c in agg.evidence_pool]
    assert len(ids) == len(set(ids)) <= cfg.evidence_pool_size  # no card pooled twice
    c = agg.counters
    # every draw ended one way: in a commit, back in the pool, or dropped after a measurement
    assert c["pool_drawn"] == c["pool_committed"] + c["pool_returned"] + c["pool_dropped"]
    assert c["pool_recovered"] <= min(c["pool_committed"], c["discarded_stale"])
    assert c["pool_drawn"] <= cfg.pool_draw * c["steps"] * len(_ARTIFACTS)
    ever_pooled.update(card.diff.diff_id for card in agg.evidence_pool)
    assert c["pool_drawn"] <= cfg.pool_retries * len(ever_pooled)
    # a card that made it into a commit is never in the pool afterwards
    committed = {d for aid in _ARTIFACTS for e in ledger.history(aid) for d in e.meta.get("contributors", ())}
    assert not committed & {card.diff.diff_id for card in agg.evidence_pool}


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    steps=st.lists(
        st.tuples(
            st.lists(_card_specs(), max_size=6),
            st.sampled_from([0, 0, 1, 5]),
            st.sampled_from([None, None, None, "held_out", "cheap"]),  # the evaluator fails once
        ),
        min_size=1,
        max_size=6,
    ),
    tournament=st.booleans(),
    verifying=st.booleans(),
    named=st.booleans(),
    rank_by=st.sampled_from(["evidence", "cheap"]),
    pool_draw=st.sampled_from([0, 1, 2]),
    pool_retries=st.sampled_from([1, 2]),
)
def test_property_exactly_once_feedback(steps, tournament, verifying, named, rank_by, pool_draw, pool_retries):
    ledger = RivalLedger(MemoryLedger())
    for aid, radius in _ARTIFACTS.items():
        ledger.register(aid, {}, radius)
    alloc = RecordingAllocator()
    evaluator = (VerifyingEvaluator if verifying else TableEvaluator)(named=named)
    config = table_config(fusion_tournament=tournament, rank_by=rank_by, pool_draw=pool_draw,
                          pool_retries=pool_retries)
    agg = Aggregator(ledger, evaluator, config, allocator=alloc)
    n = 0
    all_reports: list[MergeReport] = []
    observed = 0
    ever_pooled: set[str] = set()
    for specs, rivals, failure in steps:
        ledger.rivals = rivals
        if failure and specs:  # one artifact, so a failure leaves nothing half-merged
            specs = [spec for spec in specs if spec["target"] == specs[0]["target"]]
        batch = []
        for spec in specs:
            batch.append(_build(spec, ledger, n))
            n += 1
        for c in batch:
            agg.ingest(c)
        pooled_before = agg.evidence_pool
        before = len(alloc.calls)
        gate_before = agg.counters["gate_dropped"]
        reports = None
        if failure:
            setattr(evaluator, f"fail_{failure}", True)
            try:
                reports = agg.step()
            except RuntimeError:
                event("a step failed")
                # nothing was booked: the pool, the queue and the feedback are as they were
                assert [id(c) for c in agg.evidence_pool] == [id(c) for c in pooled_before]
                assert agg.pending() == len(batch)
                assert len(alloc.calls) == before
                _check_pool(agg, ledger, ever_pooled)
            finally:
                setattr(evaluator, f"fail_{failure}", False)
        if reports is None:
            reports = agg.step()
        new_calls = alloc.calls[before:]
        # the self-verify gate ends a decision before any held-out call; the self-verify was
        # the measurement, so it is reported to the allocator once, as a rejection
        gated = [r for r in reports if r.reason.startswith("self-verify gate")]
        assert agg.counters["gate_dropped"] - gate_before == len(gated)
        for report in gated:
            assert report.outcome is MergeOutcome.BELOW_THRESHOLD and report.p_improve is None
        measured = [r for r in reports if r.outcome.measured]
        # one report per artifact with new cards (pooled cards alone never make a report)
        assert sorted(r.artifact_id for r in reports) == sorted({c.diff.target for c in batch})
        # exactly one call per measured report, in order, with the right verdict
        assert len(new_calls) == len(measured)
        assert [c for _, c in new_calls] == [r.outcome is MergeOutcome.COMMITTED for r in measured]
        for (ctx, _), report in zip(new_calls, measured):
            assert ctx.blast_radius == pytest.approx(_ARTIFACTS[report.artifact_id])
            # attributed to a card of this artifact: a new one or one drawn from the pool
            own = {(c.advantage, c.diff.size()) for c in (*batch, *pooled_before)
                   if c.diff.target == report.artifact_id}
            assert (ctx.advantage, ctx.size) in own
            assert ctx.size <= config.trust_region_ops
            assert report.accepted is not None
            assert (report.p_improve is None) == any(report is g for g in gated)
        for report in reports:
            if not report.outcome.measured:
                assert report.accepted is None and report.p_improve is None
            if report.outcome is MergeOutcome.COMMITTED:
                assert report.committed_version == ledger.head(report.artifact_id)[0]
        _check_pool(agg, ledger, ever_pooled)
        all_reports.extend(reports)
        observed += len(measured)
    for report in all_reports:
        event(f"outcome: {report.outcome.value}")
    event(f"gate_dropped: {'0' if not agg.counters['gate_dropped'] else '1 or more'}")
    for name in ("drawn", "committed", "returned", "dropped"):
        event(f"pool_{name}: {'0' if not agg.counters[f'pool_{name}'] else '1 or more'}")
    assert len(alloc.calls) == observed
    assert agg.counters["allocator_observations"] == len(alloc.calls)
    assert agg.pending() == 0
    if pool_draw == 0:
        assert agg.counters["pool_drawn"] == 0


# --------------------------------------------------------------------------- evidence-gated fusion


class _KeyEvaluator(Evaluator):
    """Held-out: one task per key in GOOD, solved when the state holds the key's good value."""

    GOOD = {"a": "1", "b": "2", "c": "3"}

    def _scores(self, state):
        return [1.0 if state.get(k) == v else 0.0 for k, v in sorted(self.GOOD.items())]

    def held_out(self, artifact_id, state):
        return self._scores(state)

    def cheap(self, artifact_id, state):
        scores = self._scores(state)
        return sum(scores) / len(scores)


def _card(diff_id, ops, delta, verified=True, version=1):
    from agentdescent import Diff, EvidenceCard

    return EvidenceCard(Diff(diff_id, "art", ops), {"art": version}, delta, 0.0, [],
                        self_verified=verified)


@pytest.mark.parametrize("gated", [True, False])
def test_a_verified_no_gain_diff_stays_out_of_a_union(gated):
    from agentdescent import Aggregator, MemoryLedger

    ledger = MemoryLedger()
    ledger.register("art", {}, 0.2)
    agg = Aggregator(ledger, _KeyEvaluator(), table_config(fusion_requires_evidence=gated))
    agg.ingest(_card("good-a", {"a": "1"}, 1.0))
    agg.ingest(_card("good-b", {"b": "2"}, 1.0))
    agg.ingest(_card("neutral", {"zzz": "wrong"}, 0.0))  # verified, no gain, invisible on held-out
    [report] = agg.step()
    assert report.outcome.value == "committed" and report.fused
    _, state = ledger.head("art")
    assert state["a"] == "1" and state["b"] == "2"
    assert ("zzz" in state) is (not gated)
    if gated:
        assert any(c.diff.diff_id == "neutral" for c in agg.evidence_pool)
        assert agg.counters["set_aside"] == 1


def test_a_skipped_self_verify_is_not_held_against_a_card():
    from agentdescent import Aggregator, MemoryLedger

    ledger = MemoryLedger()
    ledger.register("art", {}, 0.2)
    agg = Aggregator(ledger, _KeyEvaluator(), TABLE)
    agg.ingest(_card("good-a", {"a": "1"}, 1.0))
    agg.ingest(_card("skipped-b", {"b": "2"}, 0.0, verified=False))  # the budget skipped it
    [report] = agg.step()
    assert report.fused
    assert ledger.head("art")[1] == {"a": "1", "b": "2"}


# --------------------------------------------------------------------------- memory of a resumed run


def _two_commits() -> tuple[Any, Aggregator, VerifyingEvaluator]:
    """The head sampled, then two self-verified cards committed here (v2 from ``h2``'s card, v3 from ``h8``'s)."""
    ledger, agg, ev, _ = make(evaluator=VerifyingEvaluator(named=True))
    agg.measure_head(ART, 10)
    for ops, base, ref in (({"ka": effect("h2,h3,h4,c1", nonce="A")}, 1, "h2"),
                           ({"kc": effect("h8,h9", nonce="C")}, 2, "h8")):
        report = step_one(agg, card(ops, base=base, refs=[ref], verified=True, delta=0.5))
        assert report.outcome is MergeOutcome.COMMITTED, report.reason
    assert ledger.head(ART)[0] == 3
    return ledger, agg, ev


def test_memory_state_dict_round_trips_through_json_into_a_fresh_aggregator():
    ledger, agg, ev = _two_commits()
    state = json.loads(json.dumps(agg.memory_state_dict()))
    assert [(row["artifact"], row["version"]) for row in state["committed"]] == [(ART, 2), (ART, 3)]
    assert [row["trajectory"] for row in state["committed"]] == [["h2"], ["h8"]]
    assert [Diff.from_json(row["diff"]).ops for row in state["committed"]] == [
        {"ka": effect("h2,h3,h4,c1", nonce="A")}, {"kc": effect("h8,h9", nonce="C")}]
    assert state["decisions"] == agg.measurer.decisions == 2  # per-run control numbers decisions on
    fresh = Aggregator(ledger, ev, TABLE)
    assert fresh.memory_state_dict() == {"committed": [], "decisions": 0}
    fresh.load_memory_state_dict(state, {t.id: t for t in ev.held_out_tasks})
    assert fresh.memory_state_dict() == state
    assert fresh.measurer.decisions == agg.measurer.decisions


def test_memory_keeps_the_last_remembered_commits_and_drops_unknown_tasks(monkeypatch):
    _, agg, ev = _two_commits()
    state = json.loads(json.dumps(agg.memory_state_dict()))
    fresh = make(evaluator=VerifyingEvaluator(named=True))[1]
    fresh.load_memory_state_dict(state, {t.id: t for t in ev.held_out_tasks if t.id != "h2"})
    assert [row["trajectory"] for row in fresh.memory_state_dict()["committed"]] == [[], ["h8"]]
    monkeypatch.setattr(prepare_module, "REMEMBERED_COMMITS", 1)
    assert [row["version"] for row in agg.memory_state_dict()["committed"]] == [3]


@pytest.mark.parametrize("remembered", [True, False])
def test_a_resumed_aggregator_decides_and_spends_as_the_uninterrupted_one(remembered):
    """A stale self-verified card after the two commits: the uninterrupted run reuses its self-verify for the
    rebase check (no commit since its base touches its task) and numbers its decision on; a
    run resumed from JSON with its memory does the same, call for call; one without it verifies again."""
    late = card({"kb": effect("h5,h6,c2", nonce="B")}, base=2, refs=["h5"], verified=True, delta=0.5)
    keys = ("rebase_checks_reused", "rebase_verifications", "head_tasks_scored",
            "held_out_tasks_scored")

    ledger, agg, ev = _two_commits()
    before, calls = dict(agg.counters), ev.held_out_calls
    report = step_one(agg, late)
    uninterrupted = ({k: agg.counters[k] - before.get(k, 0) for k in keys}, ev.held_out_calls - calls,
                     report.outcome, ledger.head(ART)[1])
    assert uninterrupted[0]["rebase_checks_reused"] == 1 and uninterrupted[0]["rebase_verifications"] == 0

    ledger, killed, ev = _two_commits()
    saved = json.loads(json.dumps({"memory": killed.memory_state_dict(), "noise": killed.noise.stats(),
                                   "head": killed.head_state_dict(ART, 3)}))
    resumed = Aggregator(ledger, ev, TABLE)
    resumed.noise.load_state_dict(saved["noise"])
    resumed.load_head_state_dict(ART, 3, saved["head"])
    if remembered:
        resumed.load_memory_state_dict(saved["memory"], {t.id: t for t in ev.held_out_tasks})
    calls = ev.held_out_calls
    report = step_one(resumed, late)
    after = ({k: resumed.counters[k] for k in keys}, ev.held_out_calls - calls, report.outcome, ledger.head(ART)[1])
    if remembered:
        assert after == uninterrupted
        assert resumed.measurer.decisions == agg.measurer.decisions
    else:
        assert after[0]["rebase_checks_reused"] == 0 and after[0]["rebase_verifications"] == 1
        assert after != uninterrupted


# --------------------------------------------------------------------------- the commit veto


def test_commit_veto_refuses_a_card_before_fusion_and_a_union_before_its_commit():
    asked: list[tuple[dict, dict]] = []

    def veto(head, candidate):
        asked.append((dict(head), dict(candidate)))
        if "kb" in candidate and "ka" not in candidate:
            return "kb breaks a test outside the held-out set"
        return None

    ledger, agg, _, _ = make(config=table_config(commit_veto=veto))
    report = step_one(agg, card({"ka": GOOD_A}), card({"kb": GOOD_B}))
    assert report.outcome is MergeOutcome.COMMITTED and not report.fused  # kb never joined the union
    assert report.accepted is not None and report.accepted.ops == {"ka": GOOD_A}
    assert agg.counters["card_vetoes"] == 1
    # each card checked once, on this head; the unfused candidate (ka's own diff) is not asked again
    assert asked == [({}, {"ka": GOOD_A}), ({}, {"kb": GOOD_B})]

    _, agg, _, _ = make(config=table_config(commit_veto=lambda head, cand: "no" if "ka" in cand and "kb" in cand
                                            else None))
    report = step_one(agg, card({"ka": GOOD_A}), card({"kb": GOOD_B}))
    assert report.outcome is MergeOutcome.BELOW_THRESHOLD and report.reason.startswith("vetoed before the commit: no")
    assert agg.counters["commit_vetoes"] == 1 and agg.counters["card_vetoes"] == 0


def test_a_card_the_veto_refuses_alone_ends_the_merge_naming_it():
    _, agg, _, _ = make(config=table_config(commit_veto=lambda head, cand: "breaks t1"))
    report = step_one(agg, card({"ka": GOOD_A}))
    assert report.outcome is MergeOutcome.ALL_STALE and "1 vetoed (commit_veto)" in report.reason


def test_commit_veto_must_take_two_arguments():
    with pytest.raises(TypeError, match="commit_veto"):
        AggregatorConfig(commit_veto=lambda state: None)


# --------------------------------------------------------------------------- one head read per decision


class CountingLedger(MemoryLedger):
    """A memory ledger that counts its reads of the head."""

    def __init__(self) -> None:
        super().__init__()
        self.head_reads = 0
        self.versions_reads = 0

    def head(self, artifact_id):
        self.head_reads += 1
        return super().head(artifact_id)

    def versions(self):
        self.versions_reads += 1
        return super().versions()


def test_a_decision_reads_the_head_once_even_with_a_stale_rebased_card_and_a_commit():
    ledger = CountingLedger()
    _, agg, _, _ = make(ledger=ledger, policy="reflective")
    _advance(ledger, 2)  # the card below is stale: it is rebased and re-verified on the snapshot
    ledger.head_reads = ledger.versions_reads = 0
    report = step_one(agg, card({"ka": GOOD_A}, base=1, refs=["h2"], verified=True, delta=0.5),
                      card({"kb": GOOD_B}, base=3))
    assert report.outcome is MergeOutcome.COMMITTED, report.reason
    assert (ledger.head_reads, ledger.versions_reads) == (1, 1)
    # the version the round's record and the save read is the one the decision made, with no read
    assert agg.head_version(ART) == report.committed_version == 4
    assert ledger.head_reads == 1


def test_a_committed_report_carries_its_contributors_trajectory_only():
    _, agg, _, _ = make()
    helpful = card({"ka": GOOD_A}, refs=["h2"])
    rival = card({"ka": NEUTRAL}, refs=["h9"])  # the same key: the weaker side of a contradiction
    report = step_one(agg, helpful, rival)
    assert report.outcome is MergeOutcome.COMMITTED, report.reason
    assert report.accepted is not None and set(report.accepted.ops) == {"ka"}
    assert [t.id for t in report.trajectory] == ["h2"]  # not the task of the round's other card
