"""End-to-end runs of the barrier-free engine, ``async_evolve()`` (issue 4 "Tests").

Thread timing varies from run to run, so these tests assert invariants (exact rollout
accounting, eta bounds, stop reasons, nothing merged after the stop) and compare
policies with a wide margin; every run has a ``max_seconds`` cap and simulated
latencies stay at a few milliseconds.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import warnings

import pytest

from agentdescent import (
    EvolutionResult,
    MemoryLedger,
    MergeOutcome,
    async_evolve,
    evolve,
)
from agentdescent.domains.router import RouterDomain

STOP_REASONS = {
    "rounds", "target_reward", "patience", "max_seconds", "max_rollouts",
    "max_tokens", "diminishing_returns", "error",
}
N_HELD_OUT = 115  # 288 router tasks, held_out_frac=0.4


@pytest.fixture(autouse=True)
def _quiet_retry_warnings(caplog):
    caplog.set_level(logging.ERROR, logger="agentdescent")


def router_kwargs(seed: int = 0, noise: float = 0.25, **domain_kwargs):
    # the positional split: the tests below pick out the held-out tasks as the last ones
    return dict(RouterDomain(seed=seed, noise=noise, **domain_kwargs).evolve_kwargs(), shuffle=False)


def eta_keys(result: EvolutionResult) -> list[int]:
    return sorted(int(k) for k in result.counters["eta_histogram"])


def check_accounting(result: EvolutionResult) -> None:
    """Invariants every async run keeps, whatever the timing."""
    c = result.counters
    assert result.stop_reason in STOP_REASONS
    assert c["sweeps"] == len(result.history)
    assert [h.index for h in result.history] == list(range(1, len(result.history) + 1))
    merged_rollouts = sum(h.rollouts for h in result.history)
    merged_cards = sum(h.cards for h in result.history)
    assert merged_cards == c.get("merge_ingested", 0)
    if result.stop_reason == "max_rollouts":
        # every admitted rollout is merged before a max_rollouts stop
        assert merged_rollouts == result.rollouts == c["admitted"]
        assert merged_cards == c.get("cards", 0)
    else:
        # rollouts still queued (or finishing) at a stop are dropped and counted as such
        assert merged_rollouts + c["late_results_dropped"] <= result.rollouts <= c["admitted"]
        assert merged_cards <= c.get("cards", 0)
    assert sum(h.committed for h in result.history) == c.get("merge_committed", 0)
    assert result.version == 1 + result.committed
    assert sum(h.discarded_stale for h in result.history) == c.get("merge_discarded_stale", 0)
    assert c["wasted_rollouts"] == c.get("merge_discarded_stale", 0)
    assert sum(c["eta_histogram"].values()) <= c.get("merge_ingested", 0)
    assert result.forced_refreshes >= 0


# --------------------------------------------------------------------------- parity and progress


def test_sync_and_async_reach_the_target_on_the_same_callables():
    sync = evolve(**router_kwargs(), rounds=40, target_reward=0.9)
    kwargs = router_kwargs()
    asyn = async_evolve(**kwargs, target_reward=0.9, max_seconds=15)
    assert sync.stop_reason == "target_reward" and sync.final_reward >= 0.9
    assert asyn.stop_reason == "target_reward" and asyn.final_reward >= 0.9
    assert asyn.error is None and asyn.committed > 0
    # the run meter saw every token the domain recorded into its own meter
    assert asyn.usage.total_tokens == sum(h.tokens for h in asyn.history) > 0
    assert asyn.usage.total_tokens <= kwargs["usage"].total_tokens  # stragglers may record later
    check_accounting(asyn)


@pytest.mark.parametrize("async_ratio", [0, 1, 64])
def test_no_livelock_at_extreme_async_ratios(async_ratio):
    # A livelock would spin until the time cap: ending on the run's own rules (the target, or
    # every rollout admitted) is the proof, whatever the machine's speed. The cap is a safety
    # net set far above what any load makes of this run.
    result = async_evolve(**router_kwargs(), async_ratio=async_ratio, target_reward=0.9,
                          max_iters=800, max_seconds=120)
    assert result.stop_reason in {"target_reward", "max_rollouts"}, (result.stop_reason, result.error)
    assert result.committed > 0
    check_accounting(result)


def test_forced_refresh_when_nothing_can_commit():
    # Every proposal names a wrong label: no sweep ever commits, so the stall guard fires.
    result = async_evolve(**router_kwargs(noise=1.0), n_workers=4, stall_sweeps=3,
                          max_iters=120, max_seconds=20)
    assert result.committed == 0 and result.version == 1
    assert result.stop_reason == "max_rollouts"
    assert result.forced_refreshes > 0
    assert result.counters["resyncs"] >= result.forced_refreshes
    assert result.outcomes()[MergeOutcome.BELOW_THRESHOLD.value] > 0
    check_accounting(result)


def test_progress_and_on_round_see_every_sweep(capfd):
    seen = []
    result = async_evolve(**router_kwargs(), max_iters=40, max_seconds=15, progress=True,
                          on_round=seen.append)
    assert seen == result.history and len(seen) == result.counters["sweeps"] > 0
    err = capfd.readouterr().err
    assert "async_evolve" in err and "commits=" in err


# --------------------------------------------------------------------------- failures


def test_a_flaky_backend_is_retried_and_the_run_goes_on():
    kwargs = router_kwargs()
    inner = kwargs["run"]
    calls = {"n": 0}
    lock = threading.Lock()

    def run(rendered, task):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n % 5 == 0:
            raise ConnectionError("a dropped request")
        return inner(rendered, task)

    kwargs["run"] = run
    result = async_evolve(**kwargs, n_workers=3, target_reward=0.9, max_seconds=15)
    assert result.counters["backend_errors"] > 0  # each retried with a WARNING, then succeeded
    assert result.error is None and result.stop_reason == "target_reward"
    check_accounting(result)


def test_the_run_ends_with_error_when_every_rollout_fails():
    kwargs = router_kwargs()
    inner = kwargs["run"]
    held_out = {t.id for t in kwargs["tasks"][-N_HELD_OUT:]}
    lock = threading.Lock()
    failed = [0]

    def run(rendered, task):
        if task.id not in held_out:  # rollouts fail, the held-out evaluation works
            with lock:
                failed[0] += 1
            raise ConnectionError("rollout backend is down")
        return inner(rendered, task)

    kwargs["run"] = run
    result = async_evolve(**kwargs, n_workers=3, max_seconds=120)  # the cap: a safety net, never reached
    assert result.stop_reason == "error"
    # it ends at once, counted in calls: failure_limit (3) calls of call_attempts (3) attempts, plus
    # at most one call still running on each of the other two workers
    assert 3 * 3 <= failed[0] <= (3 + 3 - 1) * 3, failed[0]
    assert result.error and "rollout call(s) in a row failed" in result.error
    assert "rollout backend is down" in result.error
    assert result.rollouts == 0 and result.version == 1


def test_a_contract_error_in_a_worker_propagates():
    kwargs = router_kwargs()
    kwargs["propose"] = lambda rendered, task, output, reward: 42
    from agentdescent import ProposalContractError

    with pytest.raises(ProposalContractError):
        async_evolve(**kwargs, max_seconds=10)


# --------------------------------------------------------------------------- stop rules


@pytest.mark.parametrize("max_iters, n_workers", [(37, 4), (5, 8), (1, 2)])
def test_max_iters_is_honoured_exactly(max_iters, n_workers):
    result = async_evolve(**router_kwargs(), n_workers=n_workers, max_iters=max_iters,
                          max_seconds=20)
    assert result.stop_reason == "max_rollouts"
    assert result.rollouts == max_iters
    assert sum(h.rollouts for h in result.history) == max_iters
    assert result.counters["admitted"] == max_iters
    check_accounting(result)


def test_shutdown_with_a_stuck_rollout_returns_within_the_grace():
    kwargs = router_kwargs()
    inner = kwargs["run"]
    held_out = {t.id for t in kwargs["tasks"][-N_HELD_OUT:]}
    release = threading.Event()
    stuck: list[str] = []
    lock = threading.Lock()
    unstuck = threading.Event()

    def run(rendered, task):
        if task.id not in held_out:
            with lock:
                if not stuck:
                    stuck.append(task.id)  # the first train task rolled out hangs
            if task.id == stuck[0]:
                release.wait(120)  # until the test releases it, after the run returned
                unstuck.set()
        return inner(rendered, task)

    kwargs["run"] = run
    ledger = MemoryLedger()
    before = {t.ident for t in threading.enumerate()}
    try:
        result = async_evolve(**kwargs, ledger=ledger, max_seconds=1, grace_seconds=0.5)
        # order, not seconds: the run returned while the stuck rollout still hung (the bound
        # max_seconds + grace itself is tested on virtual time, tests/test_runtime_conformance.py)
        assert stuck and not unstuck.is_set()
        assert result.counters["stragglers"] >= 1
        assert result.stop_reason == "max_seconds"
        head_at_return = ledger.versions()
        assert head_at_return["artifact"] == result.version
    finally:
        release.set()
    stragglers = [t for t in threading.enumerate()
                  if t.name.startswith("agentdescent-worker-") and t.ident not in before]
    for t in stragglers:
        t.join(10)
        assert not t.is_alive()
    # the late results were dropped: nothing reached the ledger after the return
    assert ledger.versions() == head_at_return
    assert ledger.head("artifact") == (result.version, result.state)


def test_max_seconds_bounds_a_run_without_a_target():
    # No other stop rule is set: its stop reason is the bound. It returned once the bound had
    # passed, never before; how soon after is a speed, tested on virtual time
    # (tests/test_runtime_conformance.py), not here on a machine of unknown load.
    start = time.monotonic()
    result = async_evolve(**router_kwargs(latency=0.002), n_workers=4, max_seconds=0.5)
    assert time.monotonic() - start >= 0.5
    assert result.stop_reason == "max_seconds"
    assert result.counters["stragglers"] == 0
    check_accounting(result)


def test_every_finished_rollout_is_merged_or_reported_as_dropped():
    result = async_evolve(**router_kwargs(), target_reward=0.9, max_seconds=15)
    assert result.stop_reason == "target_reward"
    merged = sum(h.rollouts for h in result.history)
    dropped = result.counters["late_results_dropped"]
    assert merged + dropped == result.rollouts


# --------------------------------------------------------------------------- staleness


def test_guarded_discards_at_least_as_much_as_reflective():
    # A staleness-heavy workload: 8 workers on small latencies, resync only past 4 versions
    # (alpha_tail is 1). Same admitted rollouts for both policies.
    # Measured (target-free, 160 admissions): guarded discards ~3-4x what reflective does.
    discards = {}
    for policy in ("guarded", "reflective"):
        result = async_evolve(**router_kwargs(latency=0.002), staleness_policy=policy,
                              async_ratio=4, n_workers=8, max_iters=160, max_seconds=20)
        assert result.stop_reason == "max_rollouts", (policy, result.error)
        assert max(eta_keys(result)) > 1, "the workload should produce diffs staler than alpha"
        check_accounting(result)
        discards[policy] = result.counters.get("merge_discarded_stale", 0)
    assert discards["guarded"] >= discards["reflective"]
    assert discards["guarded"] > 0


def test_full_staleness_never_discards():
    result = async_evolve(**router_kwargs(latency=0.002), staleness_policy="full",
                          async_ratio=4, n_workers=8, max_iters=80, max_seconds=20)
    assert result.counters.get("merge_discarded_stale", 0) == 0
    assert result.counters["wasted_rollouts"] == 0
    check_accounting(result)


@pytest.mark.parametrize("blast_radius, alpha", [(0.2, 1), (0.6, 5)])
def test_pacing_keeps_eta_within_alpha(blast_radius, alpha):
    result = async_evolve(**router_kwargs(latency=0.002), pacing=True, blast_radius=blast_radius,
                          async_ratio=4, n_workers=8, max_iters=60, max_seconds=20)
    assert max(eta_keys(result)) <= alpha, result.counters["eta_histogram"]
    assert result.stop_reason == "max_rollouts"
    if alpha == 1:
        # under guarded nothing admitted under pacing is ever too stale to merge
        assert result.counters.get("merge_discarded_stale", 0) == result.counters.get(
            "merge_rebase_rejected", 0)
    check_accounting(result)


# --------------------------------------------------------------------------- delegation


def test_evolve_asynchronous_delegates():
    result = evolve(**router_kwargs(), asynchronous=True, async_ratio=2, target_reward=0.9,
                    max_seconds=15)
    assert isinstance(result, EvolutionResult)
    assert result.stop_reason in STOP_REASONS
    assert result.stop_reason == "target_reward"
    assert "sweeps" in result.counters and "stragglers" in result.counters
    check_accounting(result)


def test_evolve_asynchronous_passes_max_rollouts_on():
    result = evolve(**router_kwargs(), asynchronous=True, max_rollouts=9, max_seconds=15)
    assert result.stop_reason == "max_rollouts"
    assert result.rollouts == 9


def test_max_iters_and_max_rollouts_are_one_knob():
    with pytest.raises(ValueError, match="same knob"):
        async_evolve(**router_kwargs(), max_iters=5, max_rollouts=5)


def test_evolve_asynchronous_does_not_silently_ignore_sync_only_knobs():
    with concurrent.futures.ThreadPoolExecutor(2) as pool, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            evolve(**router_kwargs(), asynchronous=True, refresh_interval=4, executor=pool,
                   max_rollouts=4, max_seconds=10)
        except (ValueError, TypeError) as exc:
            message = str(exc)
        else:
            message = " ".join(str(w.message) for w in caught)
    assert "refresh_interval" in message or "executor" in message
