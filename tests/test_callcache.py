"""CallCache: model calls kept on disk, served again without a request and charged 0 tokens."""

from __future__ import annotations

import json
import logging
import pickle
import threading

import pytest

from agentdescent import CallCache, LLMAgent, Task, evolve
from agentdescent.agents.callcache import (
    InCallCache,
    active_call_cache,
    as_call_cache,
    call_cache_scope,
)
from agentdescent.model import Completion
from agentdescent.providers import from_callable, openai_compatible
from agentdescent.testing import FakeProvider
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body
from agentdescent.usage import Usage, run_meters

TASK = Task("t1", "What is the capital of France?", {"answer": "Paris"})
PLAYBOOK = "# Playbook\n- Answer with one word."
MESSAGES = [{"role": "user", "content": "hi"}]
ZERO = {"model": "m", "temperature": 0.0}


@pytest.fixture
def server():
    with LLMServer(responder=lambda path, body: Reply(200, openai_body("Paris", prompt_tokens=40,
                                                                         completion_tokens=1))) as srv:
        yield srv


def server_agent(server, cache, **kwargs) -> LLMAgent:
    provider = openai_compatible("test-model", base_url=server.openai_base_url, api_key="sk-local-test",
                                 max_retries=0)
    return LLMAgent(provider, call_cache=cache, **kwargs)


# --------------------------------------------------------------------------- over a real server


def test_a_second_temperature_zero_call_is_served_from_disk_for_nothing(server, tmp_path):
    cache = CallCache(tmp_path / "calls")
    agent = server_agent(server, cache, temperature=0.0)
    assert agent.solve(PLAYBOOK, TASK) == "Paris"
    assert len(server.requests) == 1 and cache.stats()["stores"] == 1
    spent = agent.usage.snapshot()
    run_meter = Usage()
    with run_meters(run_meter):
        assert agent.solve(PLAYBOOK, TASK) == "Paris"
    assert len(server.requests) == 1  # no request sent
    assert agent.usage.snapshot() == spent and run_meter.snapshot()["calls"] == 0 and run_meter.total_tokens == 0
    assert (cache.hits, cache.misses, cache.saved_tokens) == (1, 1, 41)


def test_a_sampling_call_is_not_cached_by_default_and_is_with_all(server, tmp_path):
    agent = server_agent(server, CallCache(tmp_path / "zero"), temperature=0.7)
    agent.solve(PLAYBOOK, TASK)
    agent.solve(PLAYBOOK, TASK)
    assert len(server.requests) == 2 and agent.call_cache.stats()["skipped"] == 2
    assert not (tmp_path / "zero").exists()
    agent = server_agent(server, CallCache(tmp_path / "all", temperatures="all"), temperature=0.7)
    agent.solve(PLAYBOOK, TASK)
    agent.solve(PLAYBOOK, TASK)
    assert len(server.requests) == 3 and agent.call_cache.hits == 1


def test_a_call_with_no_temperature_is_not_cached(server, tmp_path):
    agent = server_agent(server, tmp_path / "calls")  # a folder becomes a CallCache
    assert isinstance(agent.call_cache, CallCache)
    agent.solve(PLAYBOOK, TASK)
    agent.solve(PLAYBOOK, TASK)
    assert len(server.requests) == 2 and agent.call_cache.hits == 0


def test_an_entry_holds_the_call_and_never_the_api_key(server, tmp_path):
    agent = server_agent(server, CallCache(tmp_path), temperature=0.0, call_tokens=32)
    agent.solve(PLAYBOOK, TASK)
    (entry,) = tmp_path.glob("*.json")
    assert len(entry.stem) == 64 and set(entry.stem) <= set("0123456789abcdef")
    text = entry.read_text(encoding="utf-8")
    assert "sk-local-test" not in text
    data = json.loads(text)
    assert data["key"]["messages"][-1] == {"role": "user", "content": TASK.prompt}
    assert data["key"]["options"] == {"max_tokens": 32, "temperature": 0.0}
    assert data["completion"]["text"] == "Paris" and data["completion"]["usage"]["prompt_tokens"] == 40


# --------------------------------------------------------------------------- the key and the files


def test_the_key_has_the_model_the_messages_and_the_options(tmp_path):
    cache = CallCache(tmp_path)
    key = cache.key(MESSAGES, ZERO)
    assert key == cache.key(list(MESSAGES), dict(reversed(list(ZERO.items()))))  # canonical: order-blind
    assert key != cache.key(MESSAGES, {**ZERO, "model": "other"})
    assert key != cache.key(MESSAGES, {**ZERO, "max_tokens": 10})
    assert key != cache.key(MESSAGES, {**ZERO, "tools": [{"type": "function", "function": {"name": "f"}}]})
    assert key != cache.key([{"role": "user", "content": "hi!"}], ZERO)
    assert key == cache.key(MESSAGES, {**ZERO, "api_key": "sk-secret", "timeout": 3})  # neither shapes a reply
    assert cache.key(MESSAGES, {"model": "m", "temperature": 0.5}) is None
    assert cache.key(MESSAGES, {**ZERO, "tools": [object()]}) is None  # not JSON data: not cached


def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path):
    cache = CallCache(tmp_path)
    cache.put(MESSAGES, ZERO, Completion("first", Usage(3, 1, 0, 1)))
    (entry,) = tmp_path.glob("*.json")
    for damage in ("{not json", "[]", json.dumps({"format": 1, "key": {}, "completion": {}}), "\udcff"):
        entry.write_text(damage, encoding="utf-8", errors="surrogateescape")
        assert cache.get(MESSAGES, ZERO) is None
    assert cache.damaged == 4 and cache.misses == 4 and cache.hits == 0
    cache.put(MESSAGES, ZERO, Completion("second"))
    assert cache.get(MESSAGES, ZERO).text == "second"


def test_an_entry_under_another_call_s_name_is_a_miss(tmp_path):
    cache = CallCache(tmp_path)
    cache.put(MESSAGES, ZERO, Completion("for hi"))
    (entry,) = tmp_path.glob("*.json")
    other = [{"role": "user", "content": "bye"}]
    entry.rename(tmp_path / f"{cache.key(other, ZERO)}.json")
    assert cache.get(other, ZERO) is None and cache.damaged == 1


def test_a_completion_round_trips_with_its_finish_reason_tool_calls_and_usage(tmp_path):
    cache = CallCache(tmp_path)
    calls = ({"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},)
    cache.put(MESSAGES, ZERO, Completion("x", Usage(5, 2, 1, 1, cache_write_tokens=3), "length", calls))
    hit = cache.get(MESSAGES, ZERO)
    assert (hit.text, hit.finish_reason, hit.tool_calls) == ("x", "length", calls)
    assert hit.usage.snapshot() == Usage(5, 2, 1, 1, cache_write_tokens=3).snapshot()
    assert cache.saved_tokens == 7 and len(cache) == 1
    assert cache.clear() == 1 and len(cache) == 0 and cache.get(MESSAGES, ZERO) is None


def test_a_cache_that_cannot_write_warns_and_goes_on(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cache = CallCache(blocker)
    with caplog.at_level(logging.WARNING, logger="agentdescent.agents.callcache"):
        assert cache.put(MESSAGES, ZERO, Completion("x")) is False
        assert cache.put(MESSAGES, ZERO, Completion("x")) is False
    assert cache.write_errors == 2 and len(caplog.records) == 1
    assert cache.get(MESSAGES, ZERO) is None


def test_the_cache_is_thread_safe(tmp_path):
    cache = CallCache(tmp_path)
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(40):
                messages = [{"role": "user", "content": f"q{i % 5}"}]
                if cache.get(messages, ZERO) is None:
                    cache.put(messages, ZERO, Completion(f"a{i % 5}", Usage(1, 1, 0, 1)))
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(cache) == 5
    stats = cache.stats()
    assert stats["hits"] + stats["misses"] == 8 * 40 and stats["saved_tokens"] == 2 * stats["hits"]
    assert not list(tmp_path.glob("*.tmp"))


def test_knobs_are_checked(tmp_path):
    with pytest.raises(ValueError, match="temperatures"):
        CallCache(tmp_path, temperatures="some")
    with pytest.raises(TypeError, match="folder"):
        CallCache(3)
    with pytest.raises(TypeError, match="call_cache"):
        as_call_cache(42)
    assert as_call_cache(None) is None
    cache = CallCache(tmp_path)
    assert as_call_cache(cache) is cache and as_call_cache(str(tmp_path)).path == tmp_path


# --------------------------------------------------------------------------- scopes and travel


def test_the_agent_uses_its_own_cache_else_the_scope_s(tmp_path):
    calls = []
    fake = FakeProvider(lambda messages, **options: calls.append(1) or "Paris")
    agent = LLMAgent(fake, temperature=0.0)
    scoped = CallCache(tmp_path / "scoped")
    assert active_call_cache() is None
    with call_cache_scope(scoped):
        assert active_call_cache() is scoped
        with call_cache_scope(None):  # None changes nothing
            assert active_call_cache() is scoped
        agent.solve(PLAYBOOK, TASK)
        agent.solve(PLAYBOOK, TASK)
    assert active_call_cache() is None
    assert len(calls) == 1 and scoped.hits == 1
    own = LLMAgent(fake, temperature=0.0, call_cache=CallCache(tmp_path / "own"))
    with call_cache_scope(scoped):
        own.solve(PLAYBOOK, TASK)
    assert len(calls) == 2 and scoped.hits == 1 and own.call_cache.stores == 1


def test_a_cache_pickles_as_its_folder_and_counts(tmp_path):
    cache = CallCache(tmp_path, temperatures="all")
    cache.put(MESSAGES, ZERO, Completion("x"))
    cache.get(MESSAGES, ZERO)
    twin = pickle.loads(pickle.dumps(cache))
    assert twin.path == cache.path and twin.temperatures == "all" and twin.stats() == cache.stats()
    assert twin.get(MESSAGES, ZERO).text == "x" and twin.hits == 2 and cache.hits == 1


def _active_path() -> str:
    return str(active_call_cache().path)


def test_a_travelling_call_enters_the_run_s_cache_where_it_lands(tmp_path):
    wrapped = pickle.loads(pickle.dumps(InCallCache(_active_path, CallCache(tmp_path))))
    assert wrapped() == str(tmp_path) and active_call_cache() is None


# --------------------------------------------------------------------------- a whole run, twice

CAPITALS = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo", "Egypt": "Cairo",
            "Peru": "Lima", "Kenya": "Nairobi", "Chile": "Santiago"}
TASKS = [Task(f"c{i}", f"What is the capital of {c}?", {"answer": a}) for i, (c, a) in enumerate(CAPITALS.items())]


def _capitals_model(calls: list[str]):
    def model(prompt: str, **options) -> str:
        calls.append(prompt)
        if "Write ONE general rule" in prompt:
            return "Answer with the city name only."
        country = next(c for c in CAPITALS if f"capital of {c}?" in prompt.split("\n\n")[-1])
        return CAPITALS[country] if "city name only" in prompt else f"I believe it is {CAPITALS[country]}."
    return model


def _exact(task: Task, output: str) -> float:
    return 1.0 if output.strip() == task.meta["answer"] else 0.0


def test_a_run_repeated_with_the_same_cache_makes_almost_no_calls(tmp_path):
    calls: list[str] = []
    results = []
    for _ in range(2):
        before = len(calls)
        agent = LLMAgent(from_callable(_capitals_model(calls)), temperature=0.0)
        result = evolve(TASKS, _exact, agent=agent, rounds=3, n_workers=2, max_concurrency=1, seed=1,
                        call_cache=tmp_path / "calls")
        results.append((result, len(calls) - before))
    (first, first_calls), (second, second_calls) = results
    assert first.error is None and second.error is None
    assert first_calls > 0 and second_calls <= 0.1 * first_calls
    assert second.counters["cache_hits"] > 0 and second.counters["cache_misses"] == second_calls
    assert second.counters["cache_saved_tokens"] > 0
    assert second.usage.total_tokens < first.usage.total_tokens
    assert second.rendered == first.rendered and second.final_reward == first.final_reward
    assert first.counters["cache_misses"] == first_calls


def test_a_run_without_a_cache_reports_no_cache_counters():
    agent = LLMAgent(from_callable(_capitals_model([])), temperature=0.0)
    result = evolve(TASKS, _exact, agent=agent, rounds=1, n_workers=2, max_concurrency=1, seed=1)
    assert "cache_hits" not in result.counters


def _answers_with_the_cache_in_scope(rendered: str, task: Task) -> str:
    cache = active_call_cache()
    return "in scope" if isinstance(cache, CallCache) else "no cache"


def _no_proposal(rendered: str, task: Task, output: str, reward: float) -> None:
    return None


def _in_scope(task: Task, output: str) -> float:
    return float(output == "in scope")


def test_calls_on_a_process_pool_run_inside_the_run_s_cache(tmp_path):
    import concurrent.futures

    tasks = [Task(f"t{i}", f"q{i}") for i in range(6)]
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        result = evolve(tasks, _in_scope, run=_answers_with_the_cache_in_scope,
                        propose=_no_proposal, rounds=1, n_workers=2, executor=pool, call_cache=tmp_path / "calls")
    assert result.error is None and result.final_reward == 1.0
