"""The budget is never exceeded by more than one call: each call is admitted against it before it starts.

Before the gate a budget read only before each call was overshot by every call in flight
when it ran out: a held-out batch fans its calls out at once, async workers call side by
side. With calls of 1,000 tokens and a 20,500-token budget, async runs ended at 27,000
(8 workers) and 28,000 (1 worker, its merge's held-out batch).
"""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent import Task, Usage, async_evolve, evolve
from agentdescent.engine.reservations import BudgetGate

CALL = 1000


def _case(engine: str, workers: int, budget: int, seed: int):
    usage = Usage()
    tasks = [Task(f"t{i}", f"p{i}", {"g": str(i % 4)}) for i in range(40)]

    def run(rendered: str, task: Task) -> str:
        time.sleep(0.005)
        usage.record(CALL - 100, 100)
        return "ok" if f"rule {task.meta['g']}" in rendered else "no"

    def propose(rendered: str, task: Task, output: str, reward: float) -> str:
        time.sleep(0.005)
        usage.record(CALL - 100, 100)
        return f"rule {task.meta['g']}"

    kw = dict(run=run, propose=propose, usage=usage, max_tokens=budget, n_workers=workers, seed=seed)
    if engine == "sync":
        return evolve(tasks, lambda t, o: 1.0 if o == "ok" else 0.0, rounds=100, max_concurrency=workers, **kw)
    return async_evolve(tasks, lambda t, o: 1.0 if o == "ok" else 0.0, max_rollouts=10_000, **kw)


@pytest.mark.parametrize("engine", ["sync", "async"])
@pytest.mark.parametrize("workers", [1, 8])
def test_a_run_ends_within_one_call_of_its_budget(engine: str, workers: int) -> None:
    budget = 20_500
    result = _case(engine, workers, budget, seed=0)
    assert result.stop_reason == "max_tokens"
    assert budget <= result.usage.total_tokens <= budget + CALL, result.usage.total_tokens
    assert result.budget["spent"] == result.usage.total_tokens
    assert sum(h.tokens for h in result.history) == result.usage.total_tokens


def test_calls_in_flight_wait_for_room_and_the_spend_ends_within_one_call() -> None:
    spent = [0]
    lock = threading.Lock()
    gate = BudgetGate(lambda: spent[0], 10_500, lambda phase: phase != "test")
    barrier = threading.Barrier(6)

    def worker() -> None:
        barrier.wait()
        while True:
            reservation = gate.admit("rollout", lambda: False)
            if reservation is None:
                return
            time.sleep(0.002)
            with lock:
                spent[0] += CALL
            gate.release(reservation, CALL, "rollout")

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert 10_500 <= spent[0] <= 10_500 + CALL
    assert gate.largest_call == CALL and gate.waits > 0
    assert gate.admit("test", lambda: False) is not None  # a phase the budget does not count is never held


def test_a_waiting_call_leaves_when_its_stop_is_set() -> None:
    gate = BudgetGate(lambda: 0, 1_000, lambda phase: True)
    gate.largest_call = 800
    first = gate.admit("rollout", lambda: False)
    assert first is not None
    stop = threading.Event()
    out: list[object] = []
    waiter = threading.Thread(target=lambda: out.append(gate.admit("rollout", stop.is_set)))
    waiter.start()
    time.sleep(0.1)
    assert waiter.is_alive()  # 800 reserved, 800 more would not fit in 1,000: it waits
    stop.set()
    waiter.join(timeout=5)
    assert out == [None]


@settings(max_examples=40, deadline=None)
@given(budget=st.integers(1, 20_000), costs=st.lists(st.integers(1, 500), min_size=1, max_size=60))
def test_sequential_calls_of_any_sizes_end_within_the_largest_call(budget: int, costs: list[int]) -> None:
    spent = 0
    gate = BudgetGate(lambda: spent, budget, lambda phase: True)
    for cost in costs:
        reservation = gate.admit("rollout", lambda: False)
        if reservation is None:
            break
        spent += cost
        gate.release(reservation, cost, "rollout")
    assert spent < budget + max(costs)
