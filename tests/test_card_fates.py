"""One fate per card: each proposal and card ends once, where it is decided, and every view counts those records.

The aggregator's decisions are built one fate at a time (every merge kind, CAS and the L1
oracle included); then a scripted agent drives both runtimes through refusals, NONE,
oversized and vetoed rules, allocation refusals, neutral rules and a rule that helps, and
every view of the run (``result.fates()``, ``outcomes()``, each ``RoundInfo.proposals``,
``async_stats``, the ``rounds.jsonl`` records, ``status -v``'s lines and the report) is
checked against the fates themselves.
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from typing import Any

import pytest

from agentdescent import MergeOutcome, Task, async_evolve, evolve
from agentdescent.agents.proposals import ParsedProposal
from agentdescent.budget.allocator import AllocateDecision, AllocatorContext, AllocatorPolicy
from agentdescent.cli.explain import fate_totals, round_lines, round_record
from agentdescent.cli.reportsections import _fates_cell, _why
from agentdescent.engine.result import RoundInfo
from agentdescent.fate import CardFate, FateKind, count_fates
from agentdescent.merge.aggregator import AggregatorConfig

from .test_aggregator import (
    ART,
    CHEAP_RANKED,
    GOOD_A,
    GOOD_B,
    HARMFUL,
    NEUTRAL,
    PARTIAL_VIEW,
    TRAP,
    TableEvaluator,
    _advance,
    card,
    make,
    step_one,
    table_config,
)

MERGE_KINDS = {k for k in FateKind if k not in (FateKind.REFUSED, FateKind.DECLINED)}


class SameKeyRival:
    """A ledger whose next commit loses to a rival writing the same key (so the re-apply gives up)."""

    def __init__(self, inner: Any, key: str) -> None:
        self.inner, self.key, self.armed = inner, key, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(self, artifact_id, new_state, base_version, *, meta=None):
        if self.armed:
            self.armed = False
            version, state = self.inner.head(artifact_id)
            self.inner.commit(artifact_id, {**state, self.key: "rival"}, version, meta={"author": "rival"})
        return self.inner.commit(artifact_id, new_state, base_version, meta=meta)


def _merge_fates() -> list[CardFate]:
    """Decisions that, between them, end a card in every merge fate."""
    fates: list[CardFate] = []

    def keep(agg: Any, *cards: Any) -> None:
        fates.extend(step_one(agg, *cards).fates)  # step_one checks the report against its fates

    _, agg, _, _ = make()
    skipped = card({"ka": GOOD_A})
    skipped.allocated = False
    keep(agg, skipped, card({"kb": GOOD_B}))  # not-allocated, committed
    _, agg, _, _ = make(config=table_config(trust_region_ops=1))
    keep(agg, card({"a": GOOD_A, "b": GOOD_B}), card({"kb": GOOD_B}))  # oversized
    ledger, agg, _, _ = make()
    _advance(ledger, 2)
    _, state = ledger.head(ART)
    key = next(iter(state))
    keep(agg, card({"ka": GOOD_A}, base=1), card({key: state[key]}, base=3))  # stale, already-in-head
    veto = table_config(commit_veto=lambda head, new: "no kv" if "kv" in new else None)
    _, agg, _, _ = make(config=veto)
    keep(agg, card({"kv": GOOD_A}))  # vetoed on its own
    _, agg, _, _ = make()
    keep(agg, card({"k": GOOD_A}), card({"k": NEUTRAL}))  # a contradiction: conflict-lost
    _, agg, _, _ = make(config=CHEAP_RANKED)
    keep(agg, card({"kx": HARMFUL}, delta=0.5), card({"ka": GOOD_A}))  # best single: set-aside
    _, agg, _, _ = make()
    keep(agg, card({"kg": GOOD_A}, delta=0.0, verified=True))  # gated
    _, agg, _, _ = make()
    keep(agg, card({"kn": NEUTRAL}))  # below-test
    _, agg, _, _ = make(blast=0.6, config=PARTIAL_VIEW, evaluator=TableEvaluator(named=True))
    keep(agg, card({"k": TRAP}))  # oracle-rejected
    ledger, agg, _, _ = make()
    agg.ledger = SameKeyRival(ledger, "kc")
    keep(agg, card({"kc": GOOD_A}))  # cas-lost
    _, agg, _, _ = make()
    keep(agg, card({"ka": GOOD_A}), card({"kb": GOOD_B}))  # fused, committed
    return fates


def test_the_aggregator_ends_a_card_in_every_merge_fate_with_its_reason_and_numbers() -> None:
    fates = _merge_fates()
    assert {f.kind for f in fates} == MERGE_KINDS
    by_kind = {f.kind: f for f in fates}
    assert by_kind[FateKind.STALE].numbers["eta"] == 2 and "policy" in by_kind[FateKind.STALE].reason
    oversized = by_kind[FateKind.OVERSIZED]
    assert oversized.numbers["ops"] == 2 and f"{oversized.numbers['chars']} char(s)" in oversized.reason
    assert "no kv" in by_kind[FateKind.VETOED].reason
    assert "compare-and-swap" in by_kind[FateKind.CAS_LOST].reason
    below = by_kind[FateKind.BELOW_TEST]
    assert {"scored", "gains", "losses", "e_value", "threshold"} <= set(below.numbers)
    assert any(f.fused and f.kind is FateKind.COMMITTED for f in fates)
    assert all(f.diff_id and f.author == "w" for f in fates)
    assert [CardFate.from_json(json.loads(json.dumps(f.to_json()))) for f in fates] == fates


# --------------------------------------------------------------------------- both runtimes

LONG = "An over-long remark. " * 20


def _group(task: Task) -> int:
    return int(task.id[1:]) % 6


class ScriptedAgent:
    """Solves a task once the artifact holds ``solve g0`` and the task is of group 0; proposes by the task's group.

    Group 0: the rule that solves it; 1: NONE; 2: a refused reply (echoed); 3: a rule over
    the trust region; 4: a rule the run vetoes; 5: a remark that fixes its own task (its
    self-verify gains) and no held-out one (measured, below the test).
    """

    def solve(self, rendered: str, task: Task) -> str:
        if _group(task) == 0 and "solve g0" in rendered or f"a remark on {task.id}." in rendered:
            return "solved"
        return "unsolved"

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        return self.explain_proposal(rendered, task, output, reward).text

    def explain_proposal(self, rendered: str, task: Task, output: str, reward: float, *,
                         failures: Any = ()) -> ParsedProposal:
        g = _group(task)
        if g == 0:
            return ParsedProposal("solve g0", "rule")
        if g == 1:
            return ParsedProposal(None, "declined")
        if g == 2:
            return ParsedProposal(None, "echoed", example=task.prompt)
        if g == 3:
            return ParsedProposal(LONG, "rule")
        if g == 4:
            return ParsedProposal("forbidden remark", "rule")
        return ParsedProposal(f"a remark on {task.id}.", "rule")  # fixes its own task only


class SecondCardAllocator(AllocatorPolicy):
    """Consulted on every card (``budget_start`` above 1); refuses the second."""

    budget_start = 1.5

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0

    def decide(self, ctx: AllocatorContext) -> AllocateDecision:
        with self._lock:
            self.calls += 1
            return AllocateDecision(deep_eval=self.calls != 2)

    def observe(self, ctx: AllocatorContext, committed: bool) -> None:
        pass


def _reward(task: Task, output: str) -> float:
    return 1.0 if output == "solved" else 0.0


def _run(engine: str) -> Any:
    tasks = [Task(f"t{i}", f"prompt {i}", {"group": str(i % 6)}) for i in range(36)]
    config = AggregatorConfig(trust_region_chars=200,
                              commit_veto=lambda head, new: "forbidden" if any("forbidden" in v for v in new.values())
                              else None)
    common = dict(agent=ScriptedAgent(), n_workers=3, seed=0, agg_config=config, allocator=SecondCardAllocator(),
                  max_tokens=10**9, stratify="group")
    if engine == "sync":
        return evolve(tasks, _reward, rounds=12, max_concurrency=1, **common)
    return async_evolve(tasks, _reward, max_rollouts=60, **common)


def _views_agree(result: Any) -> None:
    first = result.fates()
    every = [f for h in result.history for f in h.fates]
    assert first == count_fates(every)
    # outcomes() counts decisions; each decision's cards are its fates
    assert sum(result.outcomes().values()) == sum(len(h.reports) for h in result.history)
    for h in result.history:
        for report in h.reports:
            assert len(report.fates) == report.considered
        card_fates = [f for f in h.fates if f.is_card and not f.retried]
        refusals = [f for f in h.fates if not f.is_card]
        assert refusals == h.refusals
        p = h.proposals
        assert p["cards"] == len(card_fates) == h.cards
        assert p["declined"] == sum(f.kind is FateKind.DECLINED for f in refusals)
        assert sum(p["refused"].values()) == sum(f.kind is FateKind.REFUSED for f in refusals)
        assert h.discarded_stale == sum(f.kind is FateKind.STALE for f in card_fates)
        assert h.committed == sum(r.outcome is MergeOutcome.COMMITTED for r in h.reports)
        again = RoundInfo.from_json(json.loads(json.dumps(h.to_json())))
        assert again.fates == h.fates and again.proposals == h.proposals
    if result.async_stats is not None:
        assert result.async_stats.discarded_stale == first["stale"]
    # rounds.jsonl, status -v and the report read the same records
    rows = [json.loads(json.dumps(round_record(h, 0))) for h in result.history]
    assert fate_totals(rows) == first
    for row, h in zip(rows, result.history, strict=True):
        assert row["fates"] == {k: n for k, n in count_fates(h.fates).items() if n}
        assert len(row["refusals"]) == len(h.refusals)
        assert [len(d["fates"]) for d in row["decisions"]] == [r.considered for r in h.reports]
        if row["fates"]:
            assert any(line.startswith("  fates: ") for line in round_lines(row))
            assert "not recorded" not in _fates_cell(row)
    assert "What became of the proposals and cards" in _why(rows, {}, [d for r in rows for d in r["decisions"]])


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_both_runtimes_record_one_fate_per_proposal_and_card_and_every_view_agrees(engine: str) -> None:
    result = _run(engine)
    assert result.error is None
    _views_agree(result)
    kinds = {k for k, n in result.fates().items() if n}
    expected = {"refused", "declined", "oversized", "vetoed", "not-allocated", "committed", "below-test"}
    assert expected <= kinds, kinds
    refused = [f for h in result.history for f in h.refusals if f.kind is FateKind.REFUSED]
    assert all(f.numbers["by"] == "agent" and f.numbers["kind"] == "echoed" and f.numbers["example"] for f in refused)
    assert all(p["refused"].keys() <= {"echoed"} for p in (h.proposals for h in result.history))
    assert "solve g0" in result.rendered and "forbidden" not in result.rendered


def test_a_sync_run_repeats_its_fates_bit_for_bit() -> None:
    one, two = _run("sync"), _run("sync")
    assert [h.fates for h in one.history] == [h.fates for h in two.history]


def test_a_subclass_that_overrides_propose_is_asked_through_its_override() -> None:
    seen: list[str] = []

    class Logging(ScriptedAgent):
        def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
            seen.append(task.id)
            return super().propose(rendered, task, output, reward)

    tasks = [Task(f"t{i}", f"prompt {i}", {"group": str(i % 6)}) for i in range(12)]
    result = evolve(tasks, _reward, agent=Logging(), rounds=2, n_workers=2, seed=0, max_concurrency=1)
    assert len(seen) == sum(h.proposals["made"] for h in result.history) > 0  # its override ran, on every call
    # without explain_proposal the reasons are not known: no change is "declined", never a guessed refusal kind
    assert all(f.kind is FateKind.DECLINED for h in result.history for f in h.refusals)


def test_a_report_saved_before_fates_were_kept_reads_back_with_none() -> None:
    _, agg, _, _ = make()
    data = step_one(agg, card({"ka": GOOD_A})).to_json()
    del data["fates"]
    from agentdescent import MergeReport

    assert MergeReport.from_json(data).fates == []
    row = RoundInfo(index=1, held_out_reward=0.5).to_json()
    del row["refusals"]
    assert RoundInfo.from_json(row).refusals == []


def test_the_fate_of_a_retried_card_is_marked_and_counted_apart() -> None:
    _, agg, _, _ = make(config=replace(CHEAP_RANKED, pool_draw=2))
    step_one(agg, card({"kx": HARMFUL}, delta=0.5), card({"ka": GOOD_A}))  # kx set aside, pooled
    report = step_one(agg, card({"kb": GOOD_B}))  # kx is drawn again with the new card
    retried = [f for f in report.fates if f.retried]
    assert len(retried) == 1 and retried[0].diff_id is not None
    assert sum(count_fates(report.fates).values()) == len(report.fates) - len(retried)
    assert sum(count_fates(report.fates, retried=True).values()) == len(report.fates)


def test_a_decision_that_ends_before_the_measurement_names_the_cards_the_budget_kept_out() -> None:
    veto = table_config(commit_veto=lambda head, new: "no kv" if "kv" in new else None)
    _, agg, _, _ = make(config=veto)
    skipped = card({"ka": GOOD_A})
    skipped.allocated = False
    report = step_one(agg, skipped, card({"kv": GOOD_B}))
    assert report.outcome is MergeOutcome.ALL_STALE and report.considered == 2
    assert report.reason == ("nothing new to merge, none stale: 1 vetoed (commit_veto); "
                             "1 more not evaluated (the budget governor's call)")
    assert sorted(f.kind.value for f in report.fates) == ["not-allocated", "vetoed"]


def test_an_explain_proposal_that_returns_a_bare_string_is_refused_naming_the_contract() -> None:
    from agentdescent import ProposalContractError

    class Wrong(ScriptedAgent):
        def explain_proposal(self, rendered, task, output, reward, *, failures=()):
            return "solve g0"

    tasks = [Task(f"t{i}", f"prompt {i}", {"group": str(i % 6)}) for i in range(12)]
    with pytest.raises(ProposalContractError, match="explain_proposal returned str"):
        evolve(tasks, _reward, agent=Wrong(), rounds=1, n_workers=2, seed=0)
