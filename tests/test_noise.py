"""Is the evaluation stochastic? (`agentdescent.merge.noise.NoiseMonitor`).

The states (unknown, deterministic, noisy, fixed), how free probes and re-draws move them,
`declared`, how many extra draws a would-be regression gets in each state, the counters,
and a resumed monitor.
"""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent.merge.noise import NoiseMonitor

STATS_KEYS = {"state", "free_probes", "redraws", "agreements", "disagreements", "disagreement_rate"}


@pytest.mark.parametrize("mode,state", [("auto", "unknown"), ("deterministic", "deterministic"),
                                        (0, "fixed"), (3, "fixed")])
def test_the_mode_sets_the_starting_state(mode, state):
    monitor = NoiseMonitor(mode)
    assert monitor.state == state
    assert monitor.deterministic is (state == "deterministic")
    assert monitor.disagreement_rate is None
    assert monitor.stats() == {"state": state, "free_probes": 0, "redraws": 0, "agreements": 0,
                               "disagreements": 0, "disagreement_rate": None}


def test_an_unknown_monitor_gives_one_extra_draw_per_side():
    monitor = NoiseMonitor("auto", draws=3)
    assert [monitor.extra_draws() for _ in range(5)] == [1] * 5
    monitor.observe_redraw(1.0, 1.0)
    assert monitor.state == "unknown" and monitor.extra_draws() == 1
    with pytest.raises(TypeError):
        monitor.extra_draws(True)  # whether the pair would be a regression does not matter
    assert not hasattr(monitor, "observe")  # the pair-level observation is gone: re-draws only


def test_probe_agreements_make_it_deterministic_and_then_nothing_is_redrawn():
    monitor = NoiseMonitor("auto", probe=3)
    monitor.observe_free(1.0, 1.0)
    monitor.observe_redraw(0.5, 0.5)
    assert monitor.state == "unknown"
    assert monitor.extra_draws() == 1
    monitor.observe_free(0.0, 0.0)
    assert monitor.state == "deterministic" and monitor.deterministic
    assert monitor.extra_draws() == 0
    assert not monitor.declared  # learned, not declared


def test_the_first_disagreement_makes_it_noisy_for_good():
    monitor = NoiseMonitor("auto", probe=2, draws=4)
    monitor.observe_free(1.0, 0.0)
    assert monitor.state == "noisy"
    assert monitor.extra_draws() == 4
    for _ in range(10):
        monitor.observe_free(1.0, 1.0)
    assert monitor.state == "noisy" and not monitor.deterministic
    assert monitor.extra_draws() == 4


def test_a_disagreement_after_deterministic_makes_it_noisy():
    monitor = NoiseMonitor("auto", probe=1)
    monitor.observe_redraw(1.0, 1.0)
    assert monitor.deterministic
    monitor.observe_redraw(1.0, 0.0)
    assert monitor.state == "noisy" and not monitor.deterministic


def test_declared_deterministic_is_declared_until_a_disagreement():
    monitor = NoiseMonitor("deterministic", probe=100)
    assert monitor.deterministic and monitor.declared
    assert monitor.extra_draws() == 0
    monitor.observe_free(0.3, 0.3)
    assert monitor.deterministic and monitor.declared
    monitor.observe_redraw(0.3, 0.7)
    assert monitor.state == "noisy"
    assert not monitor.declared and not monitor.deterministic
    assert monitor.extra_draws() == 2


@pytest.mark.parametrize("mode", ["auto", 1, 5])
def test_only_a_declaration_is_declared(mode):
    monitor = NoiseMonitor(mode, probe=1)
    monitor.observe_redraw(1.0, 1.0)
    assert not monitor.declared


def test_mode_zero_is_declared():
    """The docstring: "declared (``mode="deterministic"``, or 0) and nothing contradicted it"."""
    assert NoiseMonitor(0).declared


@pytest.mark.parametrize("draws", [0, 1, 5])
def test_a_fixed_mode_always_redraws_that_many_and_never_learns(draws):
    monitor = NoiseMonitor(draws, probe=1)
    assert monitor.extra_draws() == draws
    monitor.observe_free(1.0, 1.0)
    assert monitor.state == "fixed" and monitor.extra_draws() == draws  # one agreement is not "deterministic"
    monitor.observe_redraw(1.0, 0.0)
    assert monitor.state == "fixed" and not monitor.deterministic
    assert monitor.extra_draws() == draws
    assert (monitor.agreements, monitor.disagreements) == (1, 1)  # still counted
    assert monitor.disagreement_rate == pytest.approx(0.5)


def test_agreement_is_equality_within_a_nanounit():
    monitor = NoiseMonitor("auto")
    monitor.observe_free(0.5, 0.5 + 1e-10)
    assert monitor.agreements == 1 and monitor.disagreements == 0
    monitor.observe_free(0.5, 0.5 + 1e-6)
    assert monitor.disagreements == 1


def test_free_probes_and_redraws_are_counted_apart():
    monitor = NoiseMonitor("auto")
    monitor.observe_free(1.0, 1.0)
    monitor.observe_free(1.0, 1.0)
    monitor.observe_redraw(0.0, 1.0)
    stats = monitor.stats()
    assert set(stats) == STATS_KEYS
    assert stats["free_probes"] == 2 and stats["redraws"] == 1
    assert stats["agreements"] == 2 and stats["disagreements"] == 1
    assert stats["disagreement_rate"] == pytest.approx(1 / 3)
    assert stats["state"] == "noisy"
    json.dumps(stats)


def test_load_state_dict_goes_on_from_saved_stats():
    monitor = NoiseMonitor("auto", probe=4)
    for _ in range(3):
        monitor.observe_free(1.0, 1.0)
    monitor.observe_redraw(0.0, 0.0)
    saved = json.loads(json.dumps(monitor.stats()))
    resumed = NoiseMonitor("auto", probe=4)
    resumed.load_state_dict(saved)
    assert resumed.stats() == monitor.stats()
    assert resumed.deterministic and not resumed.declared
    resumed.observe_redraw(0.0, 1.0)  # and it goes on learning
    assert resumed.state == "noisy" and resumed.disagreements == 1


def test_load_state_dict_of_an_unknown_state_goes_on_counting_to_the_probe():
    monitor = NoiseMonitor("auto", probe=4)
    monitor.observe_redraw(1.0, 1.0)
    monitor.observe_redraw(1.0, 1.0)
    resumed = NoiseMonitor("auto", probe=4)
    resumed.load_state_dict(monitor.stats())
    assert resumed.state == "unknown" and resumed.agreements == 2
    resumed.observe_redraw(1.0, 1.0)
    assert resumed.state == "unknown"
    resumed.observe_redraw(1.0, 1.0)
    assert resumed.deterministic


def test_load_state_dict_of_an_empty_state_keeps_the_mode_state():
    monitor = NoiseMonitor("deterministic")
    monitor.load_state_dict({})
    assert monitor.deterministic and monitor.declared and monitor.agreements == 0


def test_concurrent_observations_are_all_counted():
    monitor = NoiseMonitor("auto", probe=10**9)

    def worker() -> None:
        for _ in range(500):
            monitor.observe_free(1.0, 1.0)
            monitor.observe_redraw(0.0, 0.0)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert monitor.agreements == 8000
    assert monitor.free_probes == 4000 and monitor.redraws == 4000
    assert monitor.state == "unknown"


# --------------------------------------------------------------------------- properties


observation = st.tuples(st.sampled_from(["free", "redraw"]), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(observation, max_size=40), st.integers(min_value=1, max_value=12),
       st.sampled_from(["auto", "deterministic"]))
def test_a_learning_monitor_is_noisy_after_its_first_disagreement_for_good(history, probe, mode):
    """State = noisy iff a disagreement was seen; else deterministic iff declared or ``probe`` agreed; else unknown."""
    monitor = NoiseMonitor(mode, probe=probe, draws=2)
    agreements = disagreements = free = redraws = 0
    for kind, agree in history:
        if kind == "free":
            monitor.observe_free(1.0, 1.0 if agree else 0.0)
            free += 1
        else:
            monitor.observe_redraw(0.25, 0.25 if agree else 0.75)
            redraws += 1
        agreements += agree
        disagreements += not agree
        if disagreements:
            expected = "noisy"
        elif mode == "deterministic" or agreements >= probe:
            expected = "deterministic"
        else:
            expected = "unknown"
        assert monitor.state == expected
        assert monitor.deterministic is (expected == "deterministic")
        assert monitor.declared is (expected == "deterministic" and mode == "deterministic")
        assert monitor.extra_draws() == {"noisy": 2, "deterministic": 0, "unknown": 1}[expected]
    assert (monitor.agreements, monitor.disagreements) == (agreements, disagreements)
    assert (monitor.free_probes, monitor.redraws) == (free, redraws)
    seen = agreements + disagreements
    assert monitor.disagreement_rate == (disagreements / seen if seen else None)
