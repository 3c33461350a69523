"""The offline reference domains: deterministic, token-reporting, with the documented shape."""

from __future__ import annotations

import time

import pytest

from agentdescent.domains import router
from agentdescent.domains.router import KEYWORDS, LABELS, RouterDomain, make_tasks, parse_rules
from agentdescent.domains.valuesim import ValueSim


def test_router_tasks_are_interleaved_and_unique() -> None:
    tasks = make_tasks()
    assert len(tasks) == 24 * 12 == len({t.id for t in tasks})
    assert [t.meta["keyword"] for t in tasks[:24]] == list(KEYWORDS)
    # a positional 60/40 split leaves every keyword on both sides
    cut = int(len(tasks) * 0.6)
    assert {t.meta["keyword"] for t in tasks[:cut]} == {t.meta["keyword"] for t in tasks[cut:]} == set(KEYWORDS)
    assert set(KEYWORDS.values()) == set(LABELS)


def test_router_parse_rules_first_rule_wins_and_ignores_prose() -> None:
    text = "# Router skill\n- refund: billing\nsome prose: here\n- refund: sales\n-  Crash :  technical "
    assert parse_rules(text) == {"refund": "billing", "crash": "technical"}


def test_router_is_deterministic_and_records_tokens() -> None:
    a, b = RouterDomain(seed=7), RouterDomain(seed=7)
    other = RouterDomain(seed=8)
    proposals = [(a.propose("# s", t, "unknown", 0.0), b.propose("# s", t, "unknown", 0.0),
                  other.propose("# s", t, "unknown", 0.0)) for t in a.tasks]
    assert all(x == y for x, y, _ in proposals)
    assert any(x != z for x, _, z in proposals)
    wrong = sum(1 for (x, _, _), t in zip(proposals, a.tasks) if x != f"{t.meta['keyword']}: {t.meta['label']}")
    assert 0.15 < wrong / len(a.tasks) < 0.35  # noise 0.25
    assert a.usage.calls == len(a.tasks) and a.usage.total_tokens > 0
    assert a.propose("# s", a.tasks[0], "billing", 1.0) is None  # nothing to propose when solved


def test_router_latency_is_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    domain = RouterDomain(latency=0.01, latency_sigma=1.0)
    for task in domain.tasks[:50]:
        domain.run("# s", task)
    assert len(slept) == 50 and all(s > 0 for s in slept)
    assert len(set(slept)) > 40  # heavy-tailed draws, not a constant


def test_router_module_level_pieces_and_bad_knobs() -> None:
    assert router.run("# s", router.tasks[0]) == "unknown"
    with pytest.raises(ValueError, match="noise"):
        RouterDomain(noise=1.5)
    with pytest.raises(ValueError, match="texts_per_keyword"):
        make_tasks(13)


def test_valuesim_signals_carry_information() -> None:
    sim = ValueSim(seed=0)
    good, junk = [], []
    for task in sim.tasks:
        proposal = sim.propose("# Playbook", task, sim.run("# Playbook", task), float(task.meta["partial"]))
        assert proposal is not None
        (good if proposal.startswith("when ") else junk).append(float(task.meta["partial"]))
    assert good and junk
    assert sum(good) / len(good) > sum(junk) / len(junk)  # higher partial credit, more good proposals
    diff = sim.strategy.to_diff({}, sim.propose("# P", sim.tasks[1], "x", 0.0) or "", "w", 1, "a")
    assert diff is not None


def test_valuesim_rule_solves_its_skill_only() -> None:
    sim = ValueSim(seed=2)
    task = sim.tasks[0]
    rendered = f"# Playbook\n- when {task.meta['skill']} => {task.meta['label']}"
    assert sim.reward(task, sim.run(rendered, task)) == 1.0
    other = next(t for t in sim.tasks if t.meta["skill"] != task.meta["skill"])
    assert sim.reward(other, sim.run(rendered, other)) < 1.0
