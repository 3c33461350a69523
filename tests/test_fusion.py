"""Conflict resolution, union and ranking of concurrent diffs."""

from __future__ import annotations

import pytest

from agentdescent import Diff, EvidenceCard
from agentdescent.merge.fusion import contradicts, rank_cards, resolve_conflicts, union_diff


def _card(diff_id: str, ops: dict[str, str | None], delta: float | None = None) -> EvidenceCard:
    return EvidenceCard(Diff(diff_id, "art", ops), {"art": 1}, delta, None)


def _scorer(table: dict[str, float]):
    calls: list[str] = []

    def score(diff: Diff) -> float:
        calls.append(diff.diff_id)
        return table[diff.diff_id]

    score.calls = calls  # type: ignore[attr-defined]
    return score


# --------------------------------------------------------------------------- contradicts


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({"k": "1"}, {"k": "2"}, True),
        ({"k": "1"}, {"k": "1"}, False),
        ({"k": "1"}, {"j": "1"}, False),
        ({"k": "1", "x": "y"}, {"k": "1", "z": "w"}, False),
        ({"k": "1", "x": "y"}, {"x": "other"}, True),
        ({"k": "1"}, {"k": None}, True),  # write vs delete of the same key
        ({"k": None}, {"k": None}, False),
        ({}, {"k": "1"}, False),  # an empty diff, as an older agentdescent could have stored it
    ],
)
def test_contradicts(a, b, expected):
    da, db = (Diff.from_json({"diff_id": i, "target": "art", "ops": ops}) for i, ops in (("a", a), ("b", b)))
    assert contradicts(da, db) is expected
    assert contradicts(db, da) is expected


# --------------------------------------------------------------------------- resolve


def test_resolve_conflicts_keeps_the_better_on_the_cheap_score():
    a = _card("a", {"slot": "A"})
    b = _card("b", {"slot": "B"})
    other = _card("o", {"free": "x"})
    score = _scorer({"a": 0.2, "b": 0.6, "o": 0.1})
    survivors, dropped = resolve_conflicts([a, other, b], score)
    assert survivors == [other, b]
    assert dropped == [a]
    # the reverse arrival order gives the same winner
    survivors, dropped = resolve_conflicts([b, a, other], score)
    assert survivors == [b, other]
    assert dropped == [a]


def test_resolve_conflicts_tie_goes_to_the_larger_self_verify_delta():
    a = _card("a", {"slot": "A"}, delta=0.1)
    b = _card("b", {"slot": "B"}, delta=0.3)
    score = _scorer({"a": 0.5, "b": 0.5})
    assert resolve_conflicts([a, b], score) == ([b], [a])
    assert resolve_conflicts([b, a], score) == ([b], [a])


def test_resolve_conflicts_unmeasured_delta_loses_the_tie_to_a_measured_one():
    a = _card("a", {"slot": "A"}, delta=None)
    b = _card("b", {"slot": "B"}, delta=-0.5)
    score = _scorer({"a": 0.5, "b": 0.5})
    assert resolve_conflicts([a, b], score) == ([b], [a])


def test_resolve_conflicts_full_tie_keeps_the_earlier_card():
    a = _card("a", {"slot": "A"}, delta=0.2)
    b = _card("b", {"slot": "B"}, delta=0.2)
    c = _card("c", {"slot": "C"}, delta=0.2)
    score = _scorer({"a": 0.5, "b": 0.5, "c": 0.5})
    assert resolve_conflicts([a, b, c], score) == ([a], [b, c])
    assert resolve_conflicts([c, b, a], score) == ([c], [b, a])


def test_resolve_conflicts_newcomer_must_beat_every_rival():
    # n contradicts both a and b (which do not contradict each other)
    a = _card("a", {"x": "1"})
    b = _card("b", {"y": "1"})
    n = _card("n", {"x": "2", "y": "2"})
    score = _scorer({"a": 0.3, "b": 0.7, "n": 0.5})
    assert resolve_conflicts([a, b, n], score) == ([a, b], [n])
    score = _scorer({"a": 0.3, "b": 0.4, "n": 0.5})
    assert resolve_conflicts([a, b, n], score) == ([n], [a, b])


def test_resolve_conflicts_without_conflicts_scores_nothing():
    cards = [_card("a", {"x": "1"}), _card("b", {"y": "1"}), _card("c", {"x": "1"})]
    score = _scorer({})
    assert resolve_conflicts(cards, score) == (cards, [])
    assert score.calls == []


def test_resolve_conflicts_scores_each_diff_once():
    a, b, c = (_card(i, {"slot": i}) for i in "abc")
    score = _scorer({"a": 0.1, "b": 0.2, "c": 0.3})
    survivors, dropped = resolve_conflicts([a, b, c], score)
    assert survivors == [c]
    assert sorted(score.calls) == ["a", "b", "c"]


# --------------------------------------------------------------------------- union


def test_union_diff_merges_ops_and_marks_fusion():
    d1 = Diff("d1", "art", {"a": "1", "shared": "s"})
    d2 = Diff("d2", "art", {"b": "2", "shared": "s"})
    d3 = Diff("d3", "art", {"c": None}, contract_breaking=True)
    u = union_diff([d1, d2, d3], "art")
    assert u.ops == {"a": "1", "shared": "s", "b": "2", "c": None}
    assert u.author == "fusion"
    assert u.target == "art"
    assert u.contract_breaking
    assert u.size() == 4
    assert not union_diff([d1, d2], "art").contract_breaking


def test_union_diff_id_is_deterministic_and_order_sensitive():
    d1 = Diff("d1", "art", {"a": "1"})
    d2 = Diff("d2", "art", {"b": "2"})
    assert union_diff([d1, d2], "art").diff_id == union_diff([d1, d2], "art").diff_id
    assert union_diff([d1, d2], "art").diff_id != union_diff([d2, d1], "art").diff_id


def test_union_diff_rejects_contradictions():
    d1 = Diff("d1", "art", {"a": "1"})
    d2 = Diff("d2", "art", {"a": "2"})
    with pytest.raises(ValueError, match="'a'.*resolve_conflicts"):
        union_diff([d1, d2], "art")
    with pytest.raises(ValueError, match="cannot fuse"):
        union_diff([Diff("x", "art", {"k": "v"}), Diff("y", "art", {"k": None})], "art")


# --------------------------------------------------------------------------- rank


def test_rank_cards_score_then_delta_then_arrival():
    a = _card("a", {"a": "1"}, delta=0.0)
    b = _card("b", {"b": "1"}, delta=0.5)
    c = _card("c", {"c": "1"}, delta=0.5)
    d = _card("d", {"d": "1"}, delta=None)
    e = _card("e", {"e": "1"}, delta=0.0)
    score = _scorer({"a": 0.9, "b": 0.4, "c": 0.4, "d": 0.4, "e": 0.1})
    ranked = rank_cards([a, b, c, d, e], score)
    assert [c_.diff.diff_id for _, c_ in ranked] == ["a", "b", "c", "d", "e"]
    assert [s for s, _ in ranked] == [0.9, 0.4, 0.4, 0.4, 0.1]
