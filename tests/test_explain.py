"""agentdescent.cli.explain and the records behind it: what a round keeps, and the cause named when nothing committed."""

from __future__ import annotations

import json

from agentdescent import LLMAgent, MemoryLedger, Task, evolve
from agentdescent.cli.explain import (
    decision_record,
    estimate_note,
    likely_cause,
    round_lines,
    round_record,
)
from agentdescent.engine.result import RoundInfo
from agentdescent.testing import FakeProvider
from agentdescent.types import Diff, MergeOutcome, MergeReport

from .toy import never_propose, toy_propose, toy_reward, toy_tasks


def _row(index: int, *, made: int = 0, cards: int = 0, rules: int | None = None, declined: int = 0,
         refused: dict[str, int] | None = None, decisions: list[dict] | None = None, rollouts: int = 2,
         committed: int = 0, failures: int = 0) -> dict:
    proposals: dict = {"made": made, "cards": cards}
    if rules is not None:
        proposals.update(rules=rules, declined=declined, refused=refused or {}, examples={})
    return {"round": index, "held_out_reward": 0.5, "committed": committed, "tokens": 100, "cards": cards,
            "rollouts": rollouts, "backend_failures": failures, "proposals": proposals,
            "decisions": decisions or []}


def _measured(gains: int, losses: int) -> dict:
    return {"outcome": "below-threshold", "reason": "paired test: not enough evidence", "candidate": ["- a rule"],
            "evidence": {"scored": 8, "held_out": 10, "gains": gains, "losses": losses, "regressions": 0,
                         "e_value": 2.5, "threshold": 20.0, "candidate_mean": 0.6, "head_mean": 0.5}}


def test_no_cause_when_something_committed_or_nothing_ran():
    assert likely_cause([]) is None
    assert likely_cause([_row(1, committed=1), _row(2)]) is None


def test_each_stage_where_a_run_can_lose_everything_is_named_with_its_fix():
    every_rollout_passed = likely_cause([_row(1, rollouts=4)])
    assert "no proposal was asked for" in every_rollout_passed and "4 rollout(s) scored 1" in every_rollout_passed

    failing = likely_cause([_row(1, rollouts=0, failures=3)])
    assert "3 model call(s) failed" in failing

    cut_off = likely_cause([_row(1, made=4, rules=0, refused={"truncated": 3, "not_a_rule": 1})])
    assert "4 proposal(s): 0 rule(s), 0 NONE, 4 refused (3 cut off by the per-call limit, 1 not a rule)" in cut_off
    assert "none became a card" in cut_off and "raise --call-tokens" in cut_off

    declining = likely_cause([_row(1, made=3, rules=0, declined=3)])
    assert "3 NONE" in declining and "a reward with feedback" in declining

    gated = likely_cause([_row(1, made=2, cards=2, rules=2, decisions=[
        {"outcome": "below-threshold", "reason": "self-verify gate: no card behind the candidate improved it"}])])
    assert "each stopped at the self-verify gate" in gated and "does not follow the rules it writes" in gated
    assert "use a stronger proposer" not in gated  # the proposals were fine

    measured = likely_cause([_row(1, made=2, cards=2, rules=2, decisions=[_measured(3, 1)]),
                             _row(2, made=1, cards=1, rules=1, decisions=[_measured(1, 2)])])
    assert "2 candidate(s) measured on held-out tasks, none passed the paired test" in measured
    assert "16 task(s) scored in all: 4 gained, 3 lost" in measured

    budget = likely_cause([_row(1, made=1, cards=1, rules=1, decisions=[
        {"outcome": "below-threshold", "reason": "not evaluated: the budget governor judged 1 card(s) ..."}])])
    assert "budget ran short" in budget and "--max-tokens" in budget

    stale = likely_cause([_row(1, made=2, cards=2, rules=2, decisions=[{"outcome": "all-stale", "reason": "x"}])])
    assert "stale" in stale and "fewer workers" in stale
    in_head = likely_cause([_row(1, made=2, cards=2, rules=2, decisions=[
        {"outcome": "all-stale", "discarded_stale": 0, "reason": "nothing new to merge, none stale: 2 already in the head"}])])
    assert "no card was stale: every proposed change was already in the head" in in_head
    assert "fewer workers" not in in_head


def test_without_the_agents_counts_the_cause_still_reads_the_cards():
    cause = likely_cause([_row(1, made=3, cards=0)])  # a propose= callable: no rules / refusals known
    assert cause == "nothing committed in 1 round(s): 3 proposal(s), 0 card(s); none became a card"


def test_round_lines_print_a_record_and_an_old_one_without_the_new_fields():
    row = _row(3, made=2, cards=1, rules=1, refused={"not_a_rule": 1}, decisions=[_measured(2, 0)])
    row["proposals"]["examples"] = {"not_a_rule": "The answer was wrong because it was long."}
    row["seconds"] = 2.5
    lines = round_lines(row)
    assert lines[0] == "round 3: held-out 0.500, 0 commit(s), 100 tokens, 2.5 s"
    assert "refused: 1 not a rule" in lines[1]
    assert lines[2] == "    e.g. not a rule: 'The answer was wrong because it was long.'"
    assert lines[3] == "  below-threshold: - a rule"
    assert "scored 8 of 10 held-out task(s): 2 gained, 0 lost" in lines[4] and "e-value 2.50 against 20" in lines[4]
    assert lines[5] == "    why: paired test: not enough evidence"

    old = {"round": 1, "held_out_reward": 0.25, "committed": 0, "tokens": 10, "cards": 1,
           "outcomes": ["below-threshold"]}
    assert round_lines(old) == ["round 1: held-out 0.250, 0 commit(s), 10 tokens",
                                "  proposals: not recorded (1 card(s))", "  below-threshold: (no candidate)"]


def test_a_decision_record_keeps_the_candidate_its_numbers_and_a_deletion():
    report = MergeReport("a", MergeOutcome.COMMITTED, accepted=Diff("d1", "a", {"rule:1": "Be brief.", "rule:0": None}),
                         committed_version=3, reason="passed", feedback=["expected 4"],
                         evidence={"scored": 4, "held_out": 4, "gains": 2, "losses": 0, "regressions": 0,
                                   "e_value": 25.0, "threshold": 20.0, "candidate_mean": 1.0, "head_mean": 0.5})
    record = decision_record(report)
    assert record["candidate"] == ["(removes rule:0)", "Be brief."]
    assert record["evidence"]["e_value"] == 25.0 and record["committed_version"] == 3
    assert json.loads(json.dumps(record)) == record
    again = MergeReport.from_json(report.to_json())
    assert again.evidence == report.evidence and again.accepted == report.accepted
    assert "candidate" in report.to_json() and "accepted" not in report.to_json()
    legacy = dict(report.to_json())
    legacy["accepted"] = legacy.pop("candidate")
    assert MergeReport.from_json(legacy).accepted == report.accepted  # older files still load


def test_a_run_records_its_proposals_refusals_evidence_and_per_task_samples():
    tasks = [Task(f"t{i}", f"What is {i} + {i}?", {"answer": str(2 * i)}) for i in range(10)]

    asked = []

    def reply(messages, **options):
        user = messages[-1]["content"]
        if "ONE general rule" in user:
            asked.append(user)  # the first proposal explains instead of writing a rule
            return "The assistant's answer is wrong because it has words in it." if len(asked) == 1 else \
                "Answer with the bare number only."
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        n = int(user.split()[2])
        return str(2 * n) if "bare number" in system else f"It is {2 * n}."

    def exact(task, output):
        return 1.0 if output.strip() == task.meta["answer"] else 0.0

    agent = LLMAgent(FakeProvider(reply))
    result = evolve(tasks, exact, agent=agent, rounds=3, n_workers=1, seed=1, ledger=MemoryLedger())
    made = sum(h.proposals["made"] for h in result.history)
    stats = agent.stats()
    assert made == stats["proposals"] and sum(h.proposals["rules"] for h in result.history) == stats["rules"]
    [first, *_] = [h.proposals for h in result.history if h.proposals.get("refused")]
    assert first["refused"] == {"not_a_rule": 1} and stats["not_a_rule"] == 1
    assert first["examples"] == {"not_a_rule": "The assistant's answer is wrong because it has words in it."}
    assert agent.refusal_examples() == {"not_a_rule": "The assistant's answer is wrong because it has words in it."}
    committed = [r for h in result.history for r in h.reports if r.outcome is MergeOutcome.COMMITTED]
    assert committed and committed[0].evidence["gains"] > 0 and committed[0].evidence["losses"] == 0
    assert all(h.elapsed >= 0 for h in result.history)
    samples = result.held_out_samples
    start = next(iter(samples["initial"]["tasks"].values()))
    assert start["output"].startswith("It is") and start["score"] == 0.0
    assert samples["final"]["version"] == result.version
    assert all(v["score"] == 1.0 for v in samples["final"]["tasks"].values())
    [info] = [h for h in result.history if h.committed]
    row = round_record(info, info.tokens)
    assert json.loads(json.dumps(row)) == row and row["decisions"][0]["evidence"] == committed[0].evidence


def test_a_callable_proposer_has_counts_from_the_fates_without_refusal_kinds():
    result = evolve(toy_tasks(), toy_reward, run=lambda rendered, task: task.prompt, propose=toy_propose,
                    rounds=2, n_workers=2, seed=0)
    info: RoundInfo = result.history[0]
    assert info.proposals["made"] == info.proposals["rules"] == info.proposals["cards"] > 0
    assert info.proposals["refused"] == {} and info.proposals["declined"] == 0 and not info.refusals
    quiet = evolve(toy_tasks(), toy_reward, run=lambda rendered, task: task.prompt, propose=never_propose,
                   rounds=1, n_workers=2, seed=0)
    first = quiet.history[0]
    assert first.proposals["declined"] == first.proposals["made"] == len(first.refusals) > 0
    assert {f.kind.value for f in first.refusals} == {"declined"} and quiet.fates()["declined"] == len(first.refusals)


def test_a_rounds_reward_that_is_an_estimate_says_so() -> None:
    partly = {"round": 3, "held_out_reward": 0.8, "committed": 1, "tokens": 10, "measured_share": 0.8}
    assert estimate_note(partly) == " (an estimate: 80% of the held-out tasks measured on this head)"
    assert round_lines(partly)[0].startswith("round 3: held-out 0.800 (an estimate: 80% of the held-out tasks")
    for whole in ({**partly, "measured_share": 1.0}, {**partly, "measured_share": None},
                  {k: v for k, v in partly.items() if k != "measured_share"}, {**partly, "measured_share": "x"}):
        assert estimate_note(whole) == ""
        assert "estimate" not in round_lines(whole)[0]


def test_refused_code_edits_are_shown_by_kind_wherever_refused_replies_are() -> None:
    from agentdescent.cli.reportsections import _proposals_cell

    record = {"round": 2, "held_out_reward": 0.5, "committed": 0, "tokens": 10, "cards": 0, "rollouts": 2,
              "proposals": {"made": 2, "cards": 0, "edits_refused": 2,
                            "edits_refused_kinds": {"not_found": 1, "excluded": 1}}, "decisions": []}
    line = round_lines(record)[1]
    assert "2 edit(s) refused (1 search block not in the file, 1 a path the tree excludes)" in line
    assert "2 edit(s) refused" in _proposals_cell(record["proposals"])
    why = likely_cause([record])
    assert why is not None and "2 edit(s) refused (" in why and "code edits do not apply" in why
