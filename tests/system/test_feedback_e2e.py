"""Rewards that explain, end to end, on both runtimes (``evolve`` and ``async_evolve``).

A reward's `agentdescent.Score` feedback travels from the rollout to the proposer (an
`LLMAgent`'s proposal request over a real loopback OpenAI-compatible server, or a
``propose=`` callable's ``reward`` argument), onto the evidence card, the commit's ledger
metadata and the merge report; a judge reward's calls are calls of the run (phase
``judge``, in the budget); ``LLMAgent(propose_with=...)`` sends proposals to a second
server; ``test_tasks`` scores the starting and final heads outside the budget.

The model behind the server is scripted (`respond`): it answers a QA task in a full
sentence unless the playbook tells it to give the bare answer for the task's category,
proposes exactly that rule, and grades like a judge when asked to.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentdescent import (
    Aggregator,
    EvolutionResult,
    LLMAgent,
    MemoryLedger,
    MergeOutcome,
    Score,
    Task,
    async_evolve,
    evolve,
    judge,
    openai_compatible,
)
from agentdescent.agents.llm import DEFAULT_PROPOSE_TEMPLATE, feedback_paragraph
from agentdescent.errors import InvalidArgument
from agentdescent.providers import from_callable
from agentdescent.rewards.builtin import exact_match
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body
from agentdescent.usage import Usage

ENGINES = [pytest.param(evolve, id="evolve"), pytest.param(async_evolve, id="async_evolve")]
N_WORKERS = 3

QA = {
    "year": [("In which year did the Berlin Wall fall?", "1989"), ("In which year did Apollo 11 land?", "1969"),
             ("In which year did the Titanic sink?", "1912"), ("In which year was the euro introduced?", "1999")],
    "symbol": [("What is the chemical symbol for gold?", "Au"), ("What is the chemical symbol for iron?", "Fe"),
               ("What is the chemical symbol for silver?", "Ag"), ("What is the chemical symbol for tin?", "Sn")],
    "unit": [("What is the SI unit of force?", "newton"), ("What is the SI unit of energy?", "joule"),
             ("What is the SI unit of power?", "watt"), ("What is the SI unit of charge?", "coulomb")],
}
TASKS = [Task(f"{cat}-{i}", q, {"answer": a, "category": cat})
         for i in range(4) for cat, items in QA.items() for q, a in [items[i]]]
BY_PROMPT = {t.prompt: t for t in TASKS}
SPLIT = {"held_out_frac": 0.5, "stratify": "category"}

PROPOSE_HEAD = "You are improving the playbook"
JUDGE_HEAD = "You grade an assistant's answer"


def rule_for(task: Task) -> str:
    word = task.meta["category"]
    return f"When the answer is a {word}, reply with the bare {word} only, no sentence."


def sentence(task: Task) -> str:
    return f"The answer is {task.meta['answer']}, as far as I know."


def answer(rendered: str, task: Task) -> str:
    """The scripted model's answer on ``rendered``: bare when the playbook has the category's rule."""
    return str(task.meta["answer"]) if f"bare {task.meta['category']}" in rendered else sentence(task)


def kind_of(body: dict[str, Any]) -> str:
    user = body["messages"][-1]["content"]
    return "propose" if user.startswith(PROPOSE_HEAD) else "judge" if user.startswith(JUDGE_HEAD) else "solve"


def task_in(text: str) -> Task:
    return next(t for p, t in BY_PROMPT.items() if p in text)


def critique(task: Task) -> str:
    return f"The reply should be the bare {task.meta['category']} {task.meta['answer']}, not a sentence."


def respond(path: str, body: dict[str, Any]) -> Reply:
    """The scripted model behind the loopback server: solve, propose or grade, with usage."""
    assert path == "/v1/chat/completions"
    user = body["messages"][-1]["content"]
    kind = kind_of(body)
    if kind == "propose":
        text = rule_for(task_in(user))
    elif kind == "judge":
        task = task_in(user)
        given = user.split("The assistant's answer:\n", 1)[1].split("\n\nReply with", 1)[0].strip()
        text = "SCORE: 1\nCRITIQUE: Right." if given == task.meta["answer"] else f"SCORE: 0\nCRITIQUE: {critique(task)}"
    else:
        system = " ".join(m["content"] for m in body["messages"] if m["role"] == "system")
        text = answer(system, BY_PROMPT[user])
    return Reply(200, openai_body(text, prompt_tokens=len(user) // 4 + 1, completion_tokens=len(text) // 4 + 1))


def reported_tokens(requests: list[Any], kind: str) -> int:
    """The tokens the server reported for its requests of one kind (what `respond` answered)."""
    total = 0
    for r in requests:
        if kind_of(r.body) == kind:
            user = r.body["messages"][-1]["content"]
            reply = respond(r.path, r.body).body["choices"][0]["message"]["content"]
            total += len(user) // 4 + 1 + len(reply) // 4 + 1
    return total


def provider_on(server: LLMServer, model: str = "test-model") -> Any:
    return openai_compatible(model, base_url=server.openai_base_url, api_key="sk-local", max_retries=1, seed=0)


def stop_after(engine: Callable[..., EvolutionResult], rounds: int) -> dict[str, Any]:
    """A stop rule worth ``rounds`` sync rounds on either runtime."""
    if engine is evolve:
        return {"rounds": rounds, "max_concurrency": N_WORKERS}
    return {"max_rollouts": rounds * N_WORKERS, "max_seconds": 20}


def run_engine(engine: Callable[..., EvolutionResult], reward: Any, *, rounds: int = 2,
               tasks: list[Task] | None = None, **kwargs: Any) -> EvolutionResult:
    kwargs = {**SPLIT, "n_workers": N_WORKERS, **stop_after(engine, rounds), **kwargs}
    result = engine(TASKS if tasks is None else tasks, reward, **kwargs)
    assert result.error is None, result.error
    return result


def proposals(server: LLMServer) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in server.requests if kind_of(r.body) == "propose"]


def float_match(task: Task, output: str) -> float:
    return 1.0 if output.strip() == task.meta["answer"] else 0.0


def scripted_propose(rendered: str, task: Task, output: str, reward: float) -> str:
    return rule_for(task)


# --------------------------------------------------------------------------- feedback to the proposer


@pytest.mark.parametrize("engine", ENGINES)
def test_a_scores_feedback_is_in_the_llm_agents_proposal_request(engine) -> None:
    with LLMServer(responder=respond) as server:
        agent = LLMAgent(provider_on(server), call_tokens=64)
        result = run_engine(engine, exact_match, agent=agent)
        sent = proposals(server)
    assert sent and result.committed >= 1
    for request in sent:
        task = task_in(request)
        output = request.split("The assistant's answer:\n", 1)[1].split("\n\nScore:", 1)[0]
        feedback = exact_match(task, output).feedback
        assert f"Score: 0.00 out of 1.\n\nFeedback on the answer: {feedback}\n\nWrite ONE" in request
    first = next(r for r in sent if "Current playbook:\n(empty)" in r)
    task = task_in(first)
    feedback = f"expected exactly {task.meta['answer']!r}; the reply was {sentence(task)!r}"
    assert first == DEFAULT_PROPOSE_TEMPLATE.format(
        artifact="(empty)", prompt=task.prompt, output=sentence(task), reward=0.0, task_id=task.id,
        feedback=feedback_paragraph(feedback), feedback_text=feedback, others="")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_float_rewards_proposal_request_has_no_feedback_paragraph(engine) -> None:
    with LLMServer(responder=respond) as server:
        result = run_engine(engine, float_match, agent=LLMAgent(provider_on(server), call_tokens=64))
        sent = proposals(server)
    assert sent and result.committed >= 1
    assert not any("Feedback" in request for request in sent)
    first = next(r for r in sent if "Current playbook:\n(empty)" in r)
    task = task_in(first)
    assert first == DEFAULT_PROPOSE_TEMPLATE.format(  # the prompt of a float reward, unchanged
        artifact="(empty)", prompt=task.prompt, output=sentence(task), reward=0.0, task_id=task.id,
        feedback="", feedback_text="", others="")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_propose_callable_receives_the_score_itself(engine) -> None:
    received: list[tuple[Task, str, Any]] = []
    lock = threading.Lock()

    def propose(rendered: str, task: Task, output: str, reward: float) -> str:
        with lock:
            received.append((task, output, reward))
        return rule_for(task)

    result = run_engine(engine, exact_match, run=answer, propose=propose)
    assert received and result.committed >= 1
    for task, output, reward in received:
        assert type(reward) is Score and reward < 1.0 and float(reward) == 0.0
        assert reward.feedback == f"expected exactly {task.meta['answer']!r}; the reply was {output!r}"
        assert f"{reward:.2f}" == "0.00"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_float_reward_reaches_a_propose_callable_without_feedback(engine) -> None:
    received: list[Any] = []

    def propose(rendered: str, task: Task, output: str, reward: float) -> str:
        received.append(reward)
        return rule_for(task)

    run_engine(engine, float_match, run=answer, propose=propose)
    assert received and all(reward == 0.0 and getattr(reward, "feedback", "") == "" for reward in received)


# --------------------------------------------------------------------------- feedback on the record


class CardKeeper(Aggregator):
    """The run's aggregator, keeping every evidence card it ingests."""

    cards: list[Any] = []

    def ingest(self, card: Any) -> None:
        CardKeeper.cards.append(card)
        super().ingest(card)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_feedback_is_on_the_card_the_commit_metadata_and_the_merge_report(engine) -> None:
    CardKeeper.cards = []
    ledger = MemoryLedger()
    result = run_engine(engine, exact_match, run=answer, propose=scripted_propose, ledger=ledger,
                        aggregator_factory=CardKeeper)
    cards = CardKeeper.cards
    assert cards
    for card in cards:
        (task,) = card.trajectory_refs
        assert card.feedback == f"expected exactly {task.meta['answer']!r}; the reply was {sentence(task)!r}"
    committed = [r for h in result.history for r in h.reports if r.outcome is MergeOutcome.COMMITTED]
    assert committed and len(committed) == result.committed
    card_feedback = {c.feedback for c in cards}
    entries = {e.version: e for e in ledger.history("artifact")}
    assert "feedback" not in entries[1].meta  # the starting state
    for report in committed:
        assert report.feedback and set(report.feedback) <= card_feedback
        meta = entries[report.committed_version].meta
        assert meta["feedback"] == report.feedback
        # each feedback names a task whose rule the commit holds
        for text in report.feedback:
            task = next(t for t in TASKS if f"expected exactly {t.meta['answer']!r};" in text)
            assert rule_for(task) in entries[report.committed_version].state.values()
    # the report keeps it through the result's JSON
    assert [r["feedback"] for h in result.to_json()["history"] for r in h["reports"]
            if r["outcome"] == "committed"] == [r.feedback for r in committed]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_float_reward_leaves_no_feedback_on_the_record(engine) -> None:
    CardKeeper.cards = []
    ledger = MemoryLedger()
    result = run_engine(engine, float_match, run=answer, propose=scripted_propose, ledger=ledger,
                        aggregator_factory=CardKeeper)
    assert result.committed >= 1 and CardKeeper.cards
    assert all(card.feedback == "" for card in CardKeeper.cards)
    assert all("feedback" not in e.meta for e in ledger.history("artifact"))
    assert all(r.feedback == [] for h in result.history for r in h.reports)


# --------------------------------------------------------------------------- a judge reward


@pytest.mark.parametrize("engine", ENGINES)
def test_a_judges_calls_are_calls_of_the_run_in_phase_judge(engine) -> None:
    with LLMServer(responder=respond) as server:
        grader = judge(provider_on(server, "judge-model"), "The reply is the bare answer, nothing else.")
        agent = LLMAgent(provider_on(server), call_tokens=64)
        result = run_engine(engine, grader, agent=agent)
        requests = list(server.requests)
    judged = [r for r in requests if kind_of(r.body) == "judge"]
    assert judged and result.committed >= 1
    assert all(r.body["model"] == "judge-model" for r in judged)
    phases = result.usage.by_phase()
    assert phases["judge"] == reported_tokens(requests, "judge")
    assert result.counters["judge_calls"] == len(judged) == grader.stats()["calls"]
    assert grader.stats()["unreadable"] == 0
    assert result.usage.total_tokens == sum(reported_tokens(requests, k) for k in ("solve", "propose", "judge"))
    # the judge's critique is the feedback that reached the proposer
    sent = [r.body["messages"][-1]["content"] for r in requests if kind_of(r.body) == "propose"]
    assert sent
    for request in sent:
        assert f"Feedback on the answer: {critique(task_in(request))}\n\n" in request


def counting_judge(tokens_per_call: int) -> Any:
    """A judge on a plain function that reports ``tokens_per_call`` per grading."""
    from agentdescent.model import Completion

    def grade(prompt: str, **options: Any) -> Completion:
        task = task_in(prompt)
        given = prompt.split("The assistant's answer:\n", 1)[1].split("\n\nReply with", 1)[0].strip()
        text = "SCORE: 1\nCRITIQUE: ok" if given == task.meta["answer"] else f"SCORE: 0\nCRITIQUE: {critique(task)}"
        return Completion(text, Usage(prompt_tokens=tokens_per_call - 10, completion_tokens=10))

    return judge(from_callable(grade), "The reply is the bare answer.")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_judges_tokens_count_against_max_tokens(engine) -> None:
    budget = 2500
    free = run_engine(engine, float_match, rounds=6, run=answer, propose=scripted_propose, max_tokens=budget)
    assert free.stop_reason != "max_tokens" and free.usage.total_tokens == 0
    grader = counting_judge(100)
    judged = run_engine(engine, grader, rounds=6, run=answer, propose=scripted_propose, max_tokens=budget)
    assert judged.stop_reason == "max_tokens"
    assert judged.usage.by_phase() == {"judge": judged.usage.total_tokens}
    assert judged.usage.total_tokens == 100 * judged.counters["judge_calls"] == 100 * grader.stats()["calls"]
    assert judged.budget["spent"] == judged.usage.total_tokens >= budget
    assert judged.rollouts < free.rollouts


@pytest.mark.parametrize("engine", ENGINES)
def test_a_judge_that_fails_for_good_ends_the_run_like_any_call(engine) -> None:
    def broken(prompt: str, **options: Any) -> str:
        raise ConnectionError("judge backend down")

    grader = judge(from_callable(broken), "The reply is the bare answer.")
    result = engine(TASKS, grader, run=answer, propose=scripted_propose, n_workers=N_WORKERS, **SPLIT,
                    **stop_after(engine, 2), call_attempts=2, failure_limit=2, grace_seconds=0.2)
    assert result.stop_reason == "error"
    assert "judge of" in result.error and "judge backend down" in result.error
    assert result.counters["backend_errors"] >= 1 and "judge_calls" not in result.counters


# --------------------------------------------------------------------------- propose_with


@pytest.mark.parametrize("engine", ENGINES)
def test_propose_with_sends_proposals_to_the_second_server_only(engine) -> None:
    with LLMServer(responder=respond) as solver, LLMServer(responder=respond) as writer:
        solve_provider, write_provider = provider_on(solver), provider_on(writer, "writer-default")
        agent = LLMAgent(solve_provider, propose_with=write_provider, propose_model="writer-model",
                         model="solver-model", call_tokens=64)
        result = run_engine(engine, exact_match, agent=agent)
        solves, writes = list(solver.requests), list(writer.requests)
    assert solves and writes and result.committed >= 1
    assert {kind_of(r.body) for r in solves} == {"solve"}
    assert {kind_of(r.body) for r in writes} == {"propose"}
    assert {r.body["model"] for r in solves} == {"solver-model"}
    assert {r.body["model"] for r in writes} == {"writer-model"}
    # both meters reach the run's meter, by phase
    phases = result.usage.by_phase()
    assert phases["proposal"] == reported_tokens(writes, "propose") == write_provider.usage.total_tokens
    assert sum(v for k, v in phases.items() if k != "proposal") == reported_tokens(solves, "solve")
    assert solve_provider.usage.total_tokens == reported_tokens(solves, "solve")
    assert result.usage.total_tokens == solve_provider.usage.total_tokens + write_provider.usage.total_tokens
    assert agent.stats()["proposals"] == len(writes)


# --------------------------------------------------------------------------- test_tasks

TEST_TASKS = [Task(f"test-{cat}-{i}", f"{q} (test {i})", {"answer": a, "category": cat})
              for i, (cat, q, a) in enumerate([("year", "When did the Cold War end?", "1991"),
                                              ("symbol", "What is the chemical symbol for copper?", "Cu"),
                                              ("unit", "What is the SI unit of pressure?", "pascal"),
                                              ("year", "When did the first Moon landing happen?", "1969"),
                                              ("unit", "What is the SI unit of frequency?", "hertz")])]
TEST_TOKENS, RUN_TOKENS = 400, 10


def metered_run(calls: dict[str, int] | None = None) -> Callable[[str, Task], str]:
    """`answer`, recording tokens into its own meter (the run forwards them): more for a test task."""
    lock = threading.Lock()

    def run(rendered: str, task: Task) -> str:
        Usage().record(prompt_tokens=TEST_TOKENS if task.id.startswith("test-") else RUN_TOKENS)
        if calls is not None:
            with lock:
                calls[task.id] = calls.get(task.id, 0) + 1
        return answer(rendered, task)

    return run


def run_with_tests(engine, **kwargs: Any) -> EvolutionResult:
    kwargs = {"test_tasks": TEST_TASKS, "test_repeats": 2, **kwargs}
    return run_engine(engine, exact_match, run=kwargs.pop("run", metered_run()), propose=scripted_propose, **kwargs)


def phase_test_tokens(meter: Usage) -> int:
    return meter.by_phase().get("test", 0)


@pytest.mark.parametrize("engine", ENGINES)
def test_test_tasks_score_the_starting_and_the_final_head(engine) -> None:
    calls: dict[str, int] = {}
    mine = Usage()
    result = run_with_tests(engine, run=metered_run(calls), usage=mine)
    assert result.committed >= 1
    assert result.test_initial == 0.0 and result.test_final == 1.0
    initial, final, difference = result.test["initial"], result.test["final"], result.test["difference"]
    assert initial["mean"] == result.test_initial and final["mean"] == result.test_final
    assert initial["tasks"] == final["tasks"] == [t.id for t in TEST_TASKS]
    assert initial["repeats"] == 2 and all(len(d) == 2 for d in initial["draws"].values())
    task = TEST_TASKS[1]
    assert initial["feedback"][task.id] == f"expected exactly {task.meta['answer']!r}; the reply was {sentence(task)!r}"
    assert final["outputs"][task.id] == "Cu" and final["feedback"][task.id].startswith("correct")
    assert difference["mean"] == 1.0 and difference["tasks"] == len(TEST_TASKS) and difference["separated"]
    # every test task was drawn twice on each head, and no decision used one
    assert {k: v for k, v in calls.items() if k.startswith("test-")} == {t.id: 4 for t in TEST_TASKS}
    assert result.counters["test_calls"] >= 2 * len(TEST_TASKS)
    # the calls are under phase "test", in the caller's meter
    assert phase_test_tokens(mine) == 4 * len(TEST_TASKS) * TEST_TOKENS


@pytest.mark.parametrize("engine", ENGINES)
def test_the_results_meter_holds_every_test_call(engine) -> None:
    mine = Usage()
    result = run_with_tests(engine, usage=mine)
    assert phase_test_tokens(result.usage) == phase_test_tokens(mine) == 4 * len(TEST_TASKS) * TEST_TOKENS
    assert result.counters["test_calls"] == 4 * len(TEST_TASKS)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_budget_leaves_the_test_calls_out_by_default_and_counts_them_when_asked(engine) -> None:
    outside, inside = Usage(), Usage()
    out = run_with_tests(engine, usage=outside, max_tokens=10**6)
    assert out.budget["spent"] == outside.total_tokens - phase_test_tokens(outside)
    assert phase_test_tokens(outside) > 0
    within = run_with_tests(engine, usage=inside, max_tokens=10**6, test_in_budget=True)
    assert within.budget["spent"] == inside.total_tokens
    assert within.budget["spent"] - out.budget["spent"] >= 4 * len(TEST_TASKS) * TEST_TOKENS - 2000


@pytest.mark.parametrize("engine", ENGINES)
def test_with_the_test_calls_in_the_budget_they_can_stop_the_run(engine) -> None:
    budget = 3000  # less than the starting head's test draws (5 tasks x 2 x 400 tokens)
    within = run_with_tests(engine, max_tokens=budget, test_in_budget=True)
    assert within.stop_reason == "max_tokens" and within.committed == 0
    # once the budget is spent no test draw starts: the calls then in flight finish (one per thread)
    assert budget <= within.budget["spent"] <= budget + N_WORKERS * TEST_TOKENS
    assert within.test_initial is None and within.counters["budget_refused_calls"] > 0


@pytest.mark.parametrize("engine", [
    pytest.param(evolve, id="evolve"),
    pytest.param(async_evolve, id="async_evolve"),
])
def test_test_calls_outside_the_budget_never_stop_the_run(engine) -> None:
    budget = 3000
    plain = run_engine(engine, exact_match, run=metered_run(), propose=scripted_propose, max_tokens=budget)
    tested = run_with_tests(engine, max_tokens=budget)
    assert plain.stop_reason != "max_tokens"
    assert tested.stop_reason == plain.stop_reason
    assert tested.budget["spent"] < budget


@pytest.mark.parametrize("engine", ENGINES)
def test_the_test_report_survives_save_and_load(engine, tmp_path) -> None:
    result = run_with_tests(engine)
    loaded = EvolutionResult.load(result.save(tmp_path / "result.json"))
    assert loaded.test == result.test
    assert (loaded.test_initial, loaded.test_final) == (result.test_initial, result.test_final) == (0.0, 1.0)
    assert loaded.to_json() == result.to_json()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_resumed_run_keeps_the_first_runs_starting_test_score(engine, tmp_path) -> None:
    ledger = str(tmp_path / "ledger.db")
    first = run_with_tests(engine, ledger=ledger, rounds=2)
    assert first.committed >= 1 and (first.test_initial, first.test_final) == (0.0, 1.0)
    calls: dict[str, int] = {}
    second = run_with_tests(engine, ledger=ledger, rounds=2, run=metered_run(calls))
    # the starting head of the second run is the first run's final head (it scores 1.0 on the test
    # set), yet the starting score reported is the first run's: the test set is scored once at the start
    assert len(second.history) > len(first.history)
    assert second.test["initial"] == first.test["initial"] and second.test_initial == 0.0
    assert second.test_final == 1.0 and second.test["difference"]["mean"] == 1.0
    assert {k: v for k, v in calls.items() if k.startswith("test-")} == {t.id: 2 for t in TEST_TASKS}


@pytest.mark.parametrize("engine", ENGINES)
def test_test_tasks_that_are_run_tasks_are_refused(engine) -> None:
    with pytest.raises(InvalidArgument, match="test_tasks.*also run tasks"):
        engine(TASKS, exact_match, run=answer, propose=scripted_propose, test_tasks=[TASKS[0], *TEST_TASKS],
               **stop_after(engine, 1))
    # the same id is the same task, whatever its prompt
    with pytest.raises(InvalidArgument, match=re.escape(repr(TASKS[0].id))):
        engine(TASKS, exact_match, run=answer, propose=scripted_propose,
               test_tasks=[Task(TASKS[0].id, "another prompt", {"answer": "x"})], **stop_after(engine, 1))
