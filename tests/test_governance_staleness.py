"""Governance layers and staleness policies (SPEC §4), the table checked exhaustively."""

from __future__ import annotations

import itertools

import pytest

from agentdescent import (
    FAST_MAX,
    FullStaleness,
    GuardedStaleness,
    Layer,
    ReflectiveStaleness,
    StaleAction,
    StalenessPolicy,
    classify,
    get_policy,
)
from agentdescent.merge.governance import RESERVED_IDS, ArtifactInfo

# --------------------------------------------------------------------------- governance


def _layer(artifact_id: str, blast: float) -> Layer:
    return classify(ArtifactInfo(artifact_id, blast))


def test_fast_max_is_030():
    assert FAST_MAX == 0.30


@pytest.mark.parametrize(
    ("blast", "layer"),
    [
        (0.0, Layer.L2_FAST),
        (0.2, Layer.L2_FAST),
        (0.29999, Layer.L2_FAST),
        (0.30, Layer.L2_FAST),
        (0.3000001, Layer.L1_SLOW),
        (0.31, Layer.L1_SLOW),
        (0.6, Layer.L1_SLOW),
        (1.0, Layer.L1_SLOW),
    ],
)
def test_classify_boundary(blast, layer):
    assert _layer("skill", blast) is layer


@pytest.mark.parametrize("reserved", sorted(RESERVED_IDS))
@pytest.mark.parametrize("blast", [0.0, 0.3, 0.9])
def test_reserved_ids_are_frozen_whatever_the_blast_radius(reserved, blast):
    assert _layer(reserved, blast) is Layer.L0_FROZEN


def test_l0_prefix_is_frozen_and_reserved_set_is_not_empty():
    assert {"governance", "safety", "evaluator"} <= RESERVED_IDS
    assert _layer("L0:contract", 0.1) is Layer.L0_FROZEN
    assert _layer("governance-notes", 0.1) is Layer.L2_FAST


def test_classify_accepts_any_object_with_the_two_attributes():
    class Artifact:
        artifact_id = "prompt"
        blast_radius = 0.45

    assert classify(Artifact()) is Layer.L1_SLOW


# --------------------------------------------------------------------------- staleness


def _oracle(policy: str, eta: int, alpha: int, contract_breaking: bool) -> StaleAction:
    """SPEC §4 written out independently of the package, cell by cell."""
    if eta == 0:
        return StaleAction.ACCEPT
    # from here on the diff is stale
    if contract_breaking:
        return StaleAction.DISCARD
    within = eta <= alpha
    table = {
        ("full", True): StaleAction.ACCEPT,
        ("full", False): StaleAction.ACCEPT,
        ("guarded", True): StaleAction.REBASE,
        ("guarded", False): StaleAction.DISCARD,
        ("reflective", True): StaleAction.REBASE,
        ("reflective", False): StaleAction.REBASE,
    }
    return table[(policy, within)]


_POLICIES = {"full": FullStaleness, "guarded": GuardedStaleness, "reflective": ReflectiveStaleness}


@pytest.mark.parametrize("name", sorted(_POLICIES))
def test_staleness_table_exhaustive(name):
    policy = _POLICIES[name]()
    checked = 0
    for eta, alpha, breaking in itertools.product(range(9), range(7), (False, True)):
        got = policy.decide(eta, alpha, breaking)
        want = _oracle(name, eta, alpha, breaking)
        assert got is want, f"{name}: eta={eta} alpha={alpha} breaking={breaking}: {got} != {want}"
        checked += 1
    assert checked == 9 * 7 * 2


@pytest.mark.parametrize("name", sorted(_POLICIES))
def test_get_policy_returns_the_named_policy(name):
    policy = get_policy(name)
    assert isinstance(policy, _POLICIES[name])
    assert isinstance(policy, StalenessPolicy)
    assert policy.name == name
    assert isinstance(get_policy(name.upper()), _POLICIES[name])


def test_get_policy_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError) as info:
        get_policy("optimistic")
    text = str(info.value)
    assert "'optimistic'" in text
    for known in ("full", "guarded", "reflective"):
        assert known in text


def test_fresh_diffs_are_accepted_even_when_contract_breaking():
    for policy in (FullStaleness(), GuardedStaleness(), ReflectiveStaleness()):
        assert policy.decide(0, 0, True) is StaleAction.ACCEPT


@pytest.mark.parametrize("name", sorted(_POLICIES))
def test_negative_eta_or_alpha_is_refused(name):
    policy = get_policy(name)
    with pytest.raises(ValueError, match="eta"):
        policy.decide(-1, 1, False)
    with pytest.raises(ValueError, match="alpha"):
        policy.decide(1, -1, False)
