"""Strategies: content addressing, slots, rendering, and what contradicts what."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent import AppendRules, Diff, KeyedRules, SingleSlot, Strategy
from agentdescent.merge.fusion import contradicts, union_diff


def _diff(strategy, state, text, author="w0", base=1, target="art") -> Diff | None:
    return strategy.to_diff(state, text, author, base, target)


# --------------------------------------------------------------------------- AppendRules


def test_shipped_strategies_satisfy_the_protocol():
    for s in (AppendRules(), KeyedRules(["format"]), SingleSlot()):
        assert isinstance(s, Strategy)


@pytest.mark.parametrize(
    "variant",
    [
        "Always check the units",
        "always check the units",
        "ALWAYS CHECK THE UNITS",
        "   Always check the units   ",
        "\tAlways check the units\n",
        "- Always check the units",
    ],
)
def test_append_rules_same_text_any_case_or_outer_whitespace_same_key(variant):
    s = AppendRules()
    ref = _diff(s, {}, "Always check the units")
    other = _diff(s, {}, variant, author="w9", base=4)
    assert ref is not None and other is not None
    assert list(ref.ops) == list(other.ops)


def test_append_rules_different_text_different_key():
    s = AppendRules()
    a = _diff(s, {}, "Always check the units")
    b = _diff(s, {}, "Never guess the answer")
    assert a is not None and b is not None
    assert set(a.ops).isdisjoint(b.ops)
    assert not contradicts(a, b)


def test_append_rules_the_same_rule_in_another_case_does_not_contradict():
    """Two workers proposing the same rule (case aside) agree: they must fuse, not conflict.

    The strategy gives them the same content-addressed key; if the values differ
    by case, the aggregator sees a contradiction and drops one as the "weaker"
    side of a conflict that is not one.
    """
    s = AppendRules()
    a = _diff(s, {}, "Always check the units", author="w1")
    b = _diff(s, {}, "always CHECK the units", author="w2")
    assert a is not None and b is not None
    assert not contradicts(a, b)
    union_diff([a, b], "art")  # must not raise


def test_append_rules_duplicate_proposal_is_none():
    s = AppendRules()
    d = _diff(s, {}, "Cite the source")
    assert d is not None
    state = d.apply({})
    assert _diff(s, state, "Cite the source") is None
    assert _diff(s, state, "  CITE THE SOURCE ") is None


def test_append_rules_empty_proposal_is_none():
    s = AppendRules()
    assert _diff(s, {}, "") is None
    assert _diff(s, {}, "   \n ") is None
    assert _diff(s, {}, "-") is None


def test_append_rules_rejects_a_non_str_proposal():
    with pytest.raises(TypeError, match="proposal must be a str"):
        _diff(AppendRules(), {}, 42)  # type: ignore[arg-type]


def test_append_rules_render_is_title_then_rules_in_key_order():
    s = AppendRules(title="# My playbook")
    state: dict[str, str] = {}
    for text in ("Zebra rule", "apple rule", "Middle rule"):
        d = _diff(s, state, text)
        assert d is not None
        state = d.apply(state)
    rendered = s.render(state)
    expected = ["# My playbook"] + [f"- {state[k]}" for k in sorted(state)]
    assert rendered.split("\n") == expected
    assert s.render({}) == "# My playbook"
    assert AppendRules().render({}) == "# Playbook"
    assert s.initial() == {}


def test_append_rules_diff_metadata():
    d = _diff(AppendRules(), {}, "A rule", author="worker-3", target="skill")
    assert d is not None
    assert d.target == "skill"
    assert d.author == "worker-3"
    assert d.size() == 1
    assert not d.contract_breaking


_rule_text = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")), min_size=0, max_size=30
)


@settings(max_examples=150, deadline=None)
@given(
    existing=st.lists(_rule_text, max_size=8),
    proposal=_rule_text,
)
def test_append_rules_to_diff_then_apply_never_loses_existing_keys(existing, proposal):
    s = AppendRules()
    state = s.initial()
    for text in existing:
        d = _diff(s, state, text)
        if d is not None:
            state = d.apply(state)
    d = _diff(s, state, proposal, author="w", base=2)
    if d is None:
        return
    new = d.apply(state)
    assert set(state) <= set(new)
    assert all(new[k] == v for k, v in state.items())
    assert all(v is not None for v in d.ops.values())
    assert len(new) == len(state) + 1


# --------------------------------------------------------------------------- KeyedRules


def test_keyed_rules_slot_writes_are_case_insensitive():
    s = KeyedRules(["Format", "tone"])
    a = _diff(s, {}, "format: answer in JSON")
    b = _diff(s, {}, "FORMAT : answer in JSON", author="w2")
    c = _diff(s, {}, "Tone: be brief")
    assert a is not None and b is not None and c is not None
    assert a.ops == {KeyedRules.slot_key("Format"): "answer in JSON"}
    assert b.ops == a.ops
    assert c.ops == {KeyedRules.slot_key("tone"): "be brief"}
    assert not contradicts(a, b)
    assert not contradicts(a, c)


def test_keyed_rules_same_slot_different_value_contradicts():
    s = KeyedRules(["format"])
    a = _diff(s, {}, "format: JSON")
    b = _diff(s, {}, "Format: YAML")
    assert a is not None and b is not None
    assert list(a.ops) == list(b.ops)
    assert contradicts(a, b)
    with pytest.raises(ValueError, match="cannot fuse"):
        union_diff([a, b], "art")


def test_keyed_rules_other_text_becomes_its_own_rule():
    s = KeyedRules(["format"])
    slot = _diff(s, {}, "format: JSON")
    plain = _diff(s, {}, "Double-check arithmetic")
    unknown_cat = _diff(s, {}, "style: terse")
    empty_slot = _diff(s, {}, "format:   ")
    assert slot is not None and plain is not None and unknown_cat is not None
    assert empty_slot is not None
    for d in (plain, unknown_cat, empty_slot):
        (key,) = d.ops
        assert not key.startswith("slot:")
    assert plain.ops[next(iter(plain.ops))] == "Double-check arithmetic"
    assert unknown_cat.ops[next(iter(unknown_cat.ops))] == "style: terse"
    assert not contradicts(slot, plain)
    assert not contradicts(plain, unknown_cat)


def test_keyed_rules_same_value_again_is_none():
    s = KeyedRules(["format"])
    d = _diff(s, {}, "format: JSON")
    assert d is not None
    state = d.apply({})
    assert _diff(s, state, "FORMAT: JSON") is None
    rewrite = _diff(s, state, "format: YAML")
    assert rewrite is not None
    assert rewrite.apply(state) == {"slot:format": "YAML"}


def test_keyed_rules_free_rule_repeated_in_another_case_is_a_duplicate():
    """A free-text rule is content-addressed as in AppendRules: a repeat is None, not a rewrite."""
    s = KeyedRules(["format"])
    d = _diff(s, {}, "Double-check arithmetic")
    assert d is not None
    state = d.apply({})
    assert _diff(s, state, "double-check ARITHMETIC") is None


def test_keyed_rules_render_lists_slots_in_category_order_then_rules():
    s = KeyedRules(["tone", "format"], title="# R")
    state: dict[str, str] = {}
    for text in ("format: JSON", "zz free rule", "tone: calm"):
        d = _diff(s, state, text)
        assert d is not None
        state = d.apply(state)
    assert s.render(state).split("\n") == ["# R", "- tone: calm", "- format: JSON", "- zz free rule"]


@pytest.mark.parametrize("categories", [[], ["a", ""], ["Dup", "dup"]])
def test_keyed_rules_rejects_bad_categories(categories):
    with pytest.raises(ValueError, match="categories"):
        KeyedRules(categories)


# --------------------------------------------------------------------------- SingleSlot


def test_single_slot_competing_proposals_always_contradict():
    s = SingleSlot("start", key="prompt")
    state = s.initial()
    assert state == {"prompt": "start"}
    a = _diff(s, state, "You are careful.")
    b = _diff(s, state, "You are fast.", author="w2")
    assert a is not None and b is not None
    assert list(a.ops) == list(b.ops) == ["prompt"]
    assert contradicts(a, b)


def test_single_slot_unchanged_or_empty_is_none_and_render_is_the_value():
    s = SingleSlot("start")
    state = s.initial()
    assert _diff(s, state, "start") is None
    assert _diff(s, state, "  start  ") is None
    assert _diff(s, state, "   ") is None
    d = _diff(s, state, "new text")
    assert d is not None
    assert s.render(d.apply(state)) == "new text"
    assert s.render({}) == ""
    with pytest.raises(ValueError, match="key"):
        SingleSlot(key="")
