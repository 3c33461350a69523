"""The data model: tasks, diffs, staleness, outcomes, reports, errors, stable_hash."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import agentdescent
from agentdescent import (
    AgentDescentError,
    CASConflict,
    ContractError,
    Diff,
    EvidenceCard,
    GovernanceError,
    LedgerError,
    MergeOutcome,
    MergeReport,
    ProposalContractError,
    ProviderError,
    RewardContractError,
    Task,
    stable_hash,
    vv_staleness,
)
from agentdescent import ledger as ledger_module

# --------------------------------------------------------------------------- Task


def test_task_equality_and_hash_use_the_id_only():
    a = Task("t1", "first prompt", {"gold": [1, 2]})
    b = Task("t1", "another prompt", {"labels": {"x": 1}})
    c = Task("t2", "first prompt", {"gold": [1, 2]})
    assert a == b
    assert hash(a) == hash(b)
    assert a != c
    assert {a, b, c} == {a, c}
    assert {a: 1, b: 2} == {a: 2}


def test_task_with_unhashable_meta_is_hashable():
    task = Task("t", "p", {"list": [1, 2], "dict": {"k": [3]}})
    assert hash(task) == hash(Task("t", "q"))
    assert task in {Task("t", "")}


def test_task_is_frozen():
    task = Task("t", "p")
    with pytest.raises(AttributeError):
        task.id = "u"  # type: ignore[misc]


@pytest.mark.parametrize("bad_id", ["", 3, None])
def test_task_rejects_a_bad_id(bad_id):
    with pytest.raises(ContractError, match="Task.id"):
        Task(bad_id, "p")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- Diff


@pytest.mark.parametrize("bad_value", [3, 1.5, b"bytes", ["x"], {"y": 1}, True])
def test_diff_op_value_that_is_not_str_or_none_raises_type_error_naming_the_key(bad_value):
    with pytest.raises(TypeError, match="'the-key'"):
        Diff("d1", "art", {"ok": "fine", "the-key": bad_value})


def test_diff_op_key_must_be_str():
    with pytest.raises(TypeError, match="op key 7"):
        Diff("d1", "art", {7: "x"})  # type: ignore[dict-item]


def test_diff_ops_must_be_a_mapping():
    with pytest.raises(TypeError, match="ops must be a dict"):
        Diff("d1", "art", [("k", "v")])  # type: ignore[arg-type]


def test_diff_size_is_the_number_of_ops():
    assert Diff.from_json({"diff_id": "d", "target": "a", "ops": {}}).size() == 0  # stored before empty diffs were refused
    assert Diff("d", "a", {"x": "1"}).size() == 1
    assert Diff("d", "a", {"x": "1", "y": None, "z": ""}).size() == 3


def test_diff_apply_writes_and_none_deletes_without_touching_the_input():
    state = {"keep": "k", "change": "old", "drop": "bye"}
    diff = Diff("d", "a", {"change": "new", "drop": None, "add": "hello", "absent": None})
    new = diff.apply(state)
    assert new == {"keep": "k", "change": "new", "add": "hello"}
    assert state == {"keep": "k", "change": "old", "drop": "bye"}


def test_diff_copies_its_ops():
    ops: dict[str, str | None] = {"k": "v"}
    diff = Diff("d", "a", ops)
    ops["k"] = "changed"
    assert diff.ops == {"k": "v"}


def test_diff_is_noop_and_chars():
    diff = Diff("d", "a", {"k": "vv", "gone": None})
    assert diff.chars() == len("k") + 2 + len("gone")
    assert diff.is_noop({"k": "vv"})
    assert not diff.is_noop({"k": "vv", "gone": "x"})
    assert not diff.is_noop({})


def test_diff_json_round_trip():
    diff = Diff("d", "a", {"k": "v", "x": None}, contract_breaking=True, author="w3")
    assert Diff.from_json(json.loads(json.dumps(diff.to_json()))) == diff


# --------------------------------------------------------------------------- staleness


def test_vv_staleness_of_an_empty_base_is_zero():
    assert vv_staleness({"a": 9, "b": 4}, {}) == 0
    assert vv_staleness({}, {}) == 0


def test_vv_staleness_is_the_max_over_the_base_keys():
    head = {"a": 9, "b": 4, "c": 100}
    assert vv_staleness(head, {"a": 9}) == 0
    assert vv_staleness(head, {"a": 7}) == 2
    assert vv_staleness(head, {"a": 7, "b": 1}) == 3
    assert vv_staleness(head, {"a": 2, "b": 1}) == 7
    # keys of the head outside the base do not count
    assert vv_staleness(head, {"b": 4}) == 0


def test_vv_staleness_of_an_unknown_artifact_counts_as_not_moved():
    assert vv_staleness({"a": 5}, {"zzz": 1}) == 0


# --------------------------------------------------------------------------- MergeOutcome


def test_merge_outcome_values_are_exactly_the_six_of_the_spec():
    assert {m.value for m in MergeOutcome} == {
        "committed",
        "below-threshold",
        "oracle-rejected",
        "cas-conflict",
        "all-stale",
        "oversized",
    }
    assert len(MergeOutcome) == 6


def test_merge_outcome_is_a_str_enum():
    assert MergeOutcome.COMMITTED == "committed"
    assert MergeOutcome("cas-conflict") is MergeOutcome.CAS_CONFLICT
    assert str(MergeOutcome.ALL_STALE) == "all-stale"
    assert isinstance(MergeOutcome.OVERSIZED, str)


def test_merge_outcome_measured():
    measured = {m for m in MergeOutcome if m.measured}
    assert measured == {
        MergeOutcome.COMMITTED,
        MergeOutcome.BELOW_THRESHOLD,
        MergeOutcome.ORACLE_REJECTED,
        MergeOutcome.CAS_CONFLICT,
    }


# --------------------------------------------------------------------------- errors


def test_error_hierarchy():
    assert issubclass(ContractError, AgentDescentError)
    assert issubclass(ContractError, ValueError)
    assert issubclass(RewardContractError, ContractError)
    assert issubclass(RewardContractError, ValueError)
    assert issubclass(ProposalContractError, ContractError)
    assert issubclass(ProposalContractError, TypeError)
    assert issubclass(LedgerError, AgentDescentError)
    assert issubclass(CASConflict, LedgerError)
    assert issubclass(GovernanceError, AgentDescentError)
    assert issubclass(ProviderError, AgentDescentError)
    for name in (
        "AgentDescentError",
        "ContractError",
        "RewardContractError",
        "ProposalContractError",
        "LedgerError",
        "CASConflict",
        "GovernanceError",
        "ProviderError",
    ):
        assert issubclass(getattr(agentdescent, name), Exception), name


def test_cas_conflict_is_the_same_class_from_the_ledger_module():
    assert ledger_module.CASConflict is CASConflict


def test_cas_conflict_carries_and_names_the_versions():
    err = CASConflict("skill", 3, 5)
    assert (err.artifact_id, err.base_version, err.head_version) == ("skill", 3, 5)
    text = str(err)
    assert "'skill'" in text and "3" in text and "5" in text
    with pytest.raises(AgentDescentError):
        raise err


# --------------------------------------------------------------------------- stable_hash

_HASH_INPUTS = [("a",), ("a", "b"), ("ab",), (1, "x"), ((1, 2), None), ("ünïcode", 3.5)]


def test_stable_hash_is_stable_across_processes():
    here = [stable_hash(*parts) for parts in _HASH_INPUTS]
    code = (
        "import json, sys\n"
        "from agentdescent import stable_hash\n"
        f"inputs = {_HASH_INPUTS!r}\n"
        "print(json.dumps([stable_hash(*p) for p in inputs]))\n"
    )
    # A different PYTHONHASHSEED makes sure nothing leans on str.__hash__.
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        timeout=60,
    ).stdout
    assert json.loads(out) == here


def test_stable_hash_differs_for_different_inputs():
    values = [stable_hash(*parts) for parts in _HASH_INPUTS]
    assert len(set(values)) == len(values)
    # the separator is unambiguous: ("a", "b") is not ("ab",)
    assert stable_hash("a", "b") != stable_hash("ab")


def test_stable_hash_width():
    assert 0 <= stable_hash("x") < 2**64
    assert 0 <= stable_hash("x", bits=16) < 2**16
    with pytest.raises(ValueError, match="bits"):
        stable_hash("x", bits=12)


# --------------------------------------------------------------------------- MergeReport


@pytest.mark.parametrize(
    "report",
    [
        MergeReport(
            "skill",
            MergeOutcome.COMMITTED,
            accepted=Diff("u1", "skill", {"a": "1", "b": None}, author="fusion"),
            fused=True,
            considered=4,
            discarded_stale=1,
            conflicts_dropped=1,
            p_improve=0.93,
            committed_version=7,
            reason="P(improve)=0.930 > 0.505 at v1",
        ),
        MergeReport("skill", MergeOutcome.ALL_STALE, considered=2, discarded_stale=2),
        MergeReport("x", MergeOutcome.OVERSIZED),
    ],
)
def test_merge_report_json_round_trip(report):
    text = json.dumps(report.to_json())
    back = MergeReport.from_json(json.loads(text))
    assert back == report
    assert back.outcome is report.outcome


def test_evidence_card_defaults():
    card = EvidenceCard(Diff("d", "a", {"k": "v"}), {"a": 1}, None, None)
    assert card.trajectory_refs == []
    assert card.cost_tokens == 0
