"""A returned run is over: nothing more reaches the backend, what still runs is counted, the budget holds.

Both runtimes run an `LLMAgent` over the real ``openai_compatible`` adapter against a
loopback server (agentdescent/testing/llmserver.py, which records every request with its arrival time).
Backoffs are short; after a run returns each test watches the server for twice the
longest backoff (or past the provider's timeout) and counts what arrived.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest

from agentdescent import LLMAgent, SqliteLedger, Task, async_evolve, evolve
from agentdescent.clock import StopSignal, stop_scope
from agentdescent.engine.evaluation import look_width
from agentdescent.engine.progress import read_progress
from agentdescent.errors import ProviderUnavailableError
from agentdescent.merge.aggregator import AggregatorConfig
from agentdescent.providers import openai_compatible
from agentdescent.testing import ManualClock
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

from ..sum_workload import CONTEXT, RULE, SUM, reward, tasks

pytest.importorskip("openai")

KEY = "sk-loopback-run-is-over-0123"
N_WORKERS = 4
MAX_BACKOFF = 0.2


def answer(body: dict[str, Any]) -> tuple[str, int]:
    """A small model: a rule when asked for one, sums right once the skill says to add (or for i % 3 == 0)."""
    messages = body["messages"]
    last = messages[-1]["content"]
    if "ONE general rule" in last:
        text = RULE
    else:
        found = SUM.search(last)
        a = int(found.group(1)) if found else 1
        skilled = any("add the two numbers" in m["content"] for m in messages)
        text = f"The sum is {2 * a}." if skilled or a % 3 == 0 else "It is hard to say."
    return text, sum(len(m["content"]) for m in messages) // 4 + 1


def reply(body: dict[str, Any]) -> Reply:
    text, prompt = answer(body)
    return Reply(200, openai_body(text, prompt_tokens=prompt, completion_tokens=len(text) // 4 + 1))


def agent_for(server: LLMServer, **options: Any) -> LLMAgent:
    knobs: dict[str, Any] = dict(initial_backoff=0.05, max_backoff=MAX_BACKOFF, max_retries=4, seed=0)
    knobs.update(options)
    return LLMAgent(openai_compatible("test-model", base_url=server.openai_base_url, api_key=KEY, **knobs))


def run(runtime: str, agent: LLMAgent, task_list: list[Task] | None = None, **kwargs: Any):
    task_list = task_list if task_list is not None else tasks()
    if runtime == "sync":
        kwargs.setdefault("rounds", 30)
        return evolve(task_list, reward, agent=agent, n_workers=N_WORKERS, max_concurrency=N_WORKERS, **kwargs)
    kwargs.pop("rounds", None)
    kwargs.setdefault("max_seconds", 30.0)
    return async_evolve(task_list, reward, agent=agent, n_workers=N_WORKERS, **kwargs)


def after(server: LLMServer, moment: float) -> list[float]:
    """Seconds after ``moment`` of every request that arrived after it."""
    return [round(r.at - moment, 3) for r in server.requests if r.at > moment]


@pytest.fixture(params=["sync", "async"])
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


# --------------------------------------------------------------------------- retries end with the run


def test_a_run_that_fails_leaves_no_retry_behind(runtime):
    """The server fails 9 requests in 10 (seeded); the run ends on the failure limit while
    other calls are somewhere in their retries (3 of them, backoffs up to 0.8 s; a 0.3 s grace).

    Those calls' retries are cancelled: in the watch (twice the longest backoff) the server
    sees no request, and no call is left running.
    """
    rng = random.Random(7)
    lock = threading.Lock()

    def respond(path: str, body: Any) -> Reply:
        with lock:
            fail = rng.random() < 0.9
        return Reply(500, {"error": {"message": "the server is down"}}) if fail else reply(body)

    longest = 0.8
    with LLMServer(responder=respond) as server:
        agent = agent_for(server, initial_backoff=0.2, max_backoff=longest, max_retries=3)
        result = run(runtime, agent, grace_seconds=0.3)
        returned = time.monotonic()
        time.sleep(2 * longest)
        late = after(server, returned)
    assert result.stop_reason == "error" and "in a row failed" in result.error
    assert late == []
    assert result.counters["stragglers"] == 0
    if runtime == "async":
        assert result.async_stats.stragglers == 0


def test_a_hung_call_is_a_straggler_and_its_retry_is_never_sent(runtime):
    """Every reply is held 2.5 s; the run's bound is 0.6 s, the provider's timeout 1 s.

    At return the calls the server holds are the run's stragglers (the first evaluation's,
    as many at a time as the pool holds: ``max_concurrency`` = 4 in sync, ``max(n_workers,
    look_width)`` = 8 for the async merger); when their attempts time out, none is retried.
    """
    hold = 2.5
    with LLMServer(responder=lambda path, body: Reply(200, openai_body("2"), delay=hold)) as server:
        result = run(runtime, agent_for(server, timeout=1.0, max_retries=2), max_seconds=0.4, grace_seconds=0.2)
        returned = time.monotonic()
        held = sum(1 for r in server.requests if r.at > returned - hold)
        time.sleep(1.0 + 2 * MAX_BACKOFF)  # past every attempt's timeout, and its backoff
        late = after(server, returned)
    assert result.stop_reason == "max_seconds"
    assert held == (N_WORKERS if runtime == "sync" else max(N_WORKERS, look_width(AggregatorConfig())))
    assert result.counters["stragglers"] == held
    if runtime == "async":
        assert result.async_stats.stragglers == held
    assert late == []


def test_a_provider_stopped_in_its_backoff_sends_nothing_more():
    """The provider's own retry loop reads the call's stop signal: set during a backoff, it ends the call."""
    clock = ManualClock()
    with LLMServer(responder=lambda path, body: Reply(500, {"error": {"message": "down"}})) as server:
        provider = openai_compatible("test-model", base_url=server.openai_base_url, api_key=KEY, clock=clock,
                                     initial_backoff=5.0, max_backoff=5.0)
        signal = StopSignal()
        raised: list[BaseException] = []

        def call() -> None:
            with stop_scope(signal):
                try:
                    provider.complete([{"role": "user", "content": "hi"}])
                except BaseException as exc:  # the test reads it below
                    raised.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        deadline = time.monotonic() + 10
        while clock.waiting() == 0:  # the first attempt failed: the provider backs off
            assert time.monotonic() < deadline
            time.sleep(0.005)
        signal.set("the run has ended")
        thread.join(10)
        assert not thread.is_alive()
        assert len(server.requests) == 1 and clock.now() == 0.0  # no retry, no time passed
    assert isinstance(raised[0], ProviderUnavailableError)
    assert "not retried: the run has ended" in str(raised[0])

    with stop_scope(signal), pytest.raises(ProviderUnavailableError, match="not sent: the run has ended"):
        provider.complete([{"role": "user", "content": "hi"}])  # a stopped call sends nothing at all


# --------------------------------------------------------------------------- the budget


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_budget_overshoot_stays_within_the_calls_in_flight(runtime, seed):
    """``max_tokens=3000``: once it is spent no call starts or retries, so the spend stays
    within the budget plus what the calls then in flight spend (each worker's, and the
    evaluation's 4 threads: 8 calls), the largest call being what the server answered most."""
    sizes: list[int] = []

    def respond(path: str, body: Any) -> Reply:
        r = reply(body)
        sizes.append(r.body["usage"]["total_tokens"])
        return r

    budget = 3000
    with LLMServer(responder=respond) as server:
        result = run(runtime, agent_for(server, seed=seed), tasks(CONTEXT), max_tokens=budget, rounds=50, seed=seed)
        returned = time.monotonic()
        time.sleep(2 * MAX_BACKOFF)
        late = after(server, returned)
    spent = result.usage.total_tokens
    # each worker's call and the merger's evaluation (sync: max_concurrency = N_WORKERS in all)
    in_flight = N_WORKERS + max(N_WORKERS, look_width(AggregatorConfig()))
    assert result.stop_reason == "max_tokens"
    assert spent == result.budget["spent"] == sum(sizes)
    assert spent <= budget + in_flight * max(sizes), (spent / budget, max(sizes))
    assert late == []
    print(f"{runtime} seed {seed}: spent {spent} of {budget} ({spent / budget:.3f}x), largest call {max(sizes)}")


# --------------------------------------------------------------------------- resume


def test_a_finished_run_resumed_with_no_rounds_left_makes_no_call(tmp_path):
    """A run of 2 rounds, then the same run with the rounds it has left (0): no request at all.

    Asking for more rounds runs them, numbered on.
    """
    path = tmp_path / "run.sqlite"
    with LLMServer(responder=lambda p, body: reply(body)) as server:
        agent = agent_for(server)
        first = evolve(tasks(), reward, agent=agent, rounds=2, n_workers=2, ledger=path)
        with SqliteLedger(path) as ledger:
            done = len(read_progress(ledger, "artifact").rounds)
        sent = len(server.requests)
        again = evolve(tasks(), reward, agent=agent, rounds=2 - done, n_workers=2, ledger=path)
        assert len(server.requests) == sent  # nothing was sent
        assert again.stop_reason == "rounds" and again.error is None
        assert [h.index for h in again.history] == [h.index for h in first.history] == [1, 2]
        assert again.state == first.state and again.version == first.version
        assert again.usage.total_tokens == first.usage.total_tokens
        assert again.final_reward == first.final_reward

        fast = async_evolve(tasks(), reward, agent=agent, max_rollouts=0, n_workers=2, ledger=path)
        assert len(server.requests) == sent and fast.stop_reason == "max_rollouts"

        more = evolve(tasks(), reward, agent=agent, rounds=1, n_workers=2, ledger=path)
        assert [h.index for h in more.history] == [1, 2, 3]
        assert len(server.requests) > sent
