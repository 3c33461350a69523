"""Every rollout an async run counts is in a recorded sweep or counted as dropped at the stop.

``result.counters["rollouts"]`` (and ``result.rollouts``) count every finished rollout; the
sweeps' ``RoundInfo.rollouts`` count those merged; ``async_stats.late_results_dropped`` those
the stop left unmerged (arrived after it, queued at it, in a sweep it cut off, or in a worker
step the stop ended). The three add up, whatever the moment of the stop.
"""

from __future__ import annotations

import pytest

from agentdescent import async_evolve
from agentdescent.domains.router import RouterDomain


@pytest.mark.parametrize("seed", [1, 3])
def test_rollouts_counted_equal_rollouts_merged_plus_dropped_after_a_clock_stop(seed: int) -> None:
    kwargs = RouterDomain(seed=seed, latency=0.01).evolve_kwargs()
    result = async_evolve(**kwargs, seed=seed, max_seconds=2.0, n_workers=6)
    assert result.stop_reason == "max_seconds"
    merged = sum(h.rollouts for h in result.history)
    dropped = result.async_stats.late_results_dropped
    assert result.counters["rollouts"] == result.rollouts == merged + dropped
    assert result.async_stats.admitted == result.rollouts + result.counters.get("backend_failures", 0)


def test_a_rollout_cap_merges_every_rollout() -> None:
    result = async_evolve(**RouterDomain(seed=0, latency=0.0).evolve_kwargs(), seed=0, max_rollouts=30)
    assert result.rollouts == sum(h.rollouts for h in result.history) == 30
    assert result.async_stats.late_results_dropped == 0


_KILLED_RUN = """
import os, sys
from agentdescent import async_evolve
from agentdescent.domains.router import RouterDomain

def on_round(info):
    if info.index == 4:
        os._exit(9)  # a kill: nothing after the fourth sweep's save runs, rollouts in flight are lost

async_evolve(**RouterDomain(seed=0, latency=0.002).evolve_kwargs(), seed=0, max_rollouts=400, n_workers=4,
             ledger=sys.argv[1], on_round=on_round)
"""


def test_rollouts_a_killed_process_never_merged_are_counted_as_cut_off_on_resume(tmp_path) -> None:
    import subprocess
    import sys

    ledger = tmp_path / "run.db"
    killed = subprocess.run([sys.executable, "-c", _KILLED_RUN, str(ledger)], capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == 9, killed.stderr
    result = async_evolve(**RouterDomain(seed=0, latency=0.002).evolve_kwargs(), seed=0, max_rollouts=40,
                          n_workers=4, ledger=str(ledger))
    merged = sum(h.rollouts for h in result.history)  # the killed process's four sweeps and this call's
    cut_off = result.counters.get("rollouts_cut_off", 0)
    assert result.rollouts == merged + result.async_stats.late_results_dropped + cut_off
    assert len(result.history) > 4
