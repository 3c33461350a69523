"""`agentdescent.rewards.judge`: reading a judge's verdict, and a judge reward against a real loopback server.

The grading model is a real OpenAI-compatible HTTP server on 127.0.0.1 (`agentdescent.testing.llmserver`)
behind `agentdescent.openai_compatible`: the judge's request is built, sent, recorded and
parsed for real; the server's responder grades by comparing the answer in the request
with the expected one.
"""

from __future__ import annotations

import pickle
import re
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentdescent import Task, judge, openai_compatible
from agentdescent.errors import InvalidArgument, InvalidArgumentType, ProviderError
from agentdescent.providers import from_callable
from agentdescent.rewards.builtin import Score, check_reward
from agentdescent.rewards.judge import DEFAULT_JUDGE_TEMPLATE, JudgeReward, read_verdict
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

KEY = "sk-judge-test-Vq8Lm2Xp4Rt6"
RUBRIC = "The answer names the right city and nothing else."
TASK = Task("capital-fr", "What is the capital of France?", {"answer": "Paris"})


# --------------------------------------------------------------------------- read_verdict


@pytest.mark.parametrize("reply, value", [
    ("SCORE: 0.7\nCRITIQUE: close", 0.7),
    ("SCORE: 7/10", 0.7),
    ("SCORE: 70%", 0.7),
    ("SCORE: 7", 0.7),  # above 1 without a scale: out of 10
    ("SCORE: 10", 1.0),
    ("SCORE: 1", 1.0),
    ("SCORE: 0", 0.0),
    ("score = 0.25", 0.25),
    ("Score: 8 / 10", 0.8),
    ("**SCORE:** 0.5", 0.5),
    ("SCORE: 100%", 1.0),
    ("My verdict.\nSCORE: 3/4\nCRITIQUE: mostly right", 0.75),
    ("SCORE: 0.85.", 0.85),
])
def test_read_verdict_reads_each_scale(reply: str, value: float) -> None:
    read, _ = read_verdict(reply)
    assert read == pytest.approx(value)


@pytest.mark.parametrize("reply", [
    "I think it is fine.",
    "",
    "SCORE: 11",  # above 10 without a scale
    "SCORE: 11/10",
    "SCORE: 150%",
    "SCORE: 3/0",
    "SCORE: -0.5",
    "SCORE: high",
])
def test_read_verdict_refuses_what_it_cannot_read(reply: str) -> None:
    assert read_verdict(reply)[0] is None


def test_read_verdict_returns_the_critique_with_its_white_space_joined() -> None:
    value, critique = read_verdict("SCORE: 0.3\nCRITIQUE:  the city is wrong;\n   it is Lyon, not Paris.  ")
    assert value == pytest.approx(0.3)
    assert critique == "the city is wrong; it is Lyon, not Paris."
    assert read_verdict("SCORE: 1") == (1.0, "")
    # an unreadable score still hands back the critique
    assert read_verdict("SCORE: n/a\nCRITIQUE: no answer given") == (None, "no answer given")


def test_read_verdict_critique_is_the_critique_line_when_the_score_follows_it() -> None:
    assert read_verdict("CRITIQUE: wrong city\nSCORE: 0") == (0.0, "wrong city")


@given(st.integers(min_value=0, max_value=1000))
def test_any_decimal_in_range_reads_back(thousandths: int) -> None:
    value = thousandths / 1000
    read, critique = read_verdict(f"SCORE: {value:.3f}\nCRITIQUE: ok")
    assert read == pytest.approx(value) and critique == "ok"


@given(st.integers(min_value=1, max_value=100).flatmap(lambda d: st.tuples(st.integers(0, d), st.just(d))))
def test_any_fraction_in_range_reads_as_its_value(pair: tuple[int, int]) -> None:
    numerator, denominator = pair
    read, _ = read_verdict(f"score: {numerator}/{denominator}")
    assert read == pytest.approx(numerator / denominator)


@given(st.integers(min_value=0, max_value=100))
def test_any_percentage_reads_as_a_fraction(percent: int) -> None:
    assert read_verdict(f"SCORE: {percent}%")[0] == pytest.approx(percent / 100)


@given(st.text())
def test_read_verdict_never_raises_and_a_score_is_in_range(reply: str) -> None:
    value, critique = read_verdict(reply)
    assert value is None or 0.0 <= value <= 1.0
    assert isinstance(critique, str)


# --------------------------------------------------------------------------- the judge, over HTTP


def grading(path: str, body: dict[str, Any]) -> Reply:
    """A grading model: SCORE 1 when the answer in the request is the expected one, else 0."""
    user = body["messages"][-1]["content"]
    expected = re.search(r"Expected answer: (.*)", user).group(1).strip()
    answer = user.split("The assistant's answer:\n", 1)[1].split("\n\nReply with", 1)[0].strip()
    if answer == expected:
        text = f"SCORE: 1\nCRITIQUE: The answer {answer} is the expected city."
    else:
        text = f"SCORE: 2/10\nCRITIQUE: The answer should be {expected}, not a sentence."
    return Reply(200, openai_body(text, prompt_tokens=len(user) // 4, completion_tokens=12))


@pytest.fixture
def server():
    with LLMServer(responder=grading) as s:
        yield s


def provider_for(server: LLMServer, **kwargs: Any):
    kwargs.setdefault("max_retries", 0)
    return openai_compatible("judge-model", base_url=server.openai_base_url, api_key=KEY, seed=0, **kwargs)


def test_a_judge_grades_over_http_and_explains(server: LLMServer) -> None:
    reward = judge(provider_for(server), RUBRIC)
    right = reward(TASK, "Paris")
    wrong = reward(TASK, "The capital of France is Paris.")
    assert type(right) is Score and right == 1.0
    assert right.feedback == "The answer Paris is the expected city."
    assert wrong == pytest.approx(0.2)
    assert wrong.feedback == "The answer should be Paris, not a sentence."
    assert reward.stats() == {"calls": 2, "unreadable": 0}
    assert check_reward(TASK, wrong) == wrong  # a judge's score keeps the reward contract


def test_the_judges_request_carries_rubric_task_answer_output_and_options(server: LLMServer) -> None:
    reward = judge(provider_for(server), RUBRIC, model="grader-7", call_tokens=99, temperature=0.2)
    reward(TASK, "Lyon")
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    body = request.body
    assert body["model"] == "grader-7" and body["max_tokens"] == 99 and body["temperature"] == 0.2
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert body["messages"][0]["content"] == DEFAULT_JUDGE_TEMPLATE.format(
        rubric=RUBRIC, prompt=TASK.prompt, answer="Paris", output="Lyon", task_id=TASK.id)
    assert reward.messages(TASK, "Lyon") == body["messages"]


def test_the_judges_default_options_and_no_option_when_none(server: LLMServer) -> None:
    judge(provider_for(server), RUBRIC)(TASK, "Paris")
    judge(provider_for(server), RUBRIC, call_tokens=None, temperature=None)(TASK, "Paris")
    default, bare = (r.body for r in server.requests)
    assert default["max_tokens"] == 256 and default["temperature"] == 0.0
    assert default["model"] == "judge-model"  # the provider's own model
    assert "max_tokens" not in bare and "temperature" not in bare


def test_a_task_without_an_answer_says_so_in_the_request(server: LLMServer) -> None:
    server.push(openai_body("SCORE: 0.5\nCRITIQUE: a fair attempt"))
    reward = judge(provider_for(server), "Any sensible answer is fine.")
    score = reward(Task("open", "Describe Paris."), "A city.")
    assert score == 0.5 and score.feedback == "a fair attempt"
    assert "Expected answer: (not given)" in server.requests[0].body["messages"][0]["content"]


def test_a_custom_template_fills_every_field(server: LLMServer) -> None:
    server.push(openai_body("Score: 9/10 Critique: nearly"))
    template = "[{task_id}] {rubric} | {prompt} | {answer} | {output} | SCORE/CRITIQUE please"
    reward = judge(provider_for(server), RUBRIC, template=template)
    score = reward(TASK, "Paris!")
    assert score == pytest.approx(0.9) and score.feedback == "nearly"
    assert server.requests[0].body["messages"][0]["content"] == (
        f"[capital-fr] {RUBRIC} | What is the capital of France? | Paris | Paris! | SCORE/CRITIQUE please")


def test_a_score_without_a_critique_gets_feedback_saying_so(server: LLMServer) -> None:
    server.push(openai_body("SCORE: 0.4"))
    score = judge(provider_for(server), RUBRIC)(TASK, "Par")
    assert score == pytest.approx(0.4) and score.feedback == "the judge gave 0.4 without a critique"


def test_an_unreadable_verdict_scores_zero_with_feedback_and_is_counted(server: LLMServer) -> None:
    server.push(openai_body("I would rather not grade this one."))
    server.push(openai_body("SCORE: 42\nCRITIQUE: great"))  # out of any scale it reads
    reward = judge(provider_for(server), RUBRIC)
    first, second = reward(TASK, "Paris"), reward(TASK, "Paris")
    assert type(first) is Score and first == 0.0 and second == 0.0
    assert first.feedback == ("the judge's reply had no readable SCORE line: "
                              "'I would rather not grade this one.'")
    assert "SCORE: 42" in second.feedback
    assert reward.stats() == {"calls": 2, "unreadable": 2}
    assert reward(TASK, "Paris") == 1.0  # the responder grades again once the queue is empty
    assert reward.stats() == {"calls": 3, "unreadable": 2}


def test_an_unreadable_verdicts_feedback_is_short(server: LLMServer) -> None:
    server.push(openai_body("blah " * 500))
    score = judge(provider_for(server), RUBRIC)(TASK, "Paris")
    assert score == 0.0 and len(score.feedback) < 300


def test_the_judge_records_its_tokens_in_the_providers_meter(server: LLMServer) -> None:
    provider = provider_for(server)
    reward = judge(provider, RUBRIC)
    reward(TASK, "Paris")
    reward(TASK, "Lyon")
    expected = sum(len(r.body["messages"][-1]["content"]) // 4 + 12 for r in server.requests)
    assert provider.usage.calls == 2 and provider.usage.total_tokens == expected


def test_a_provider_error_propagates_from_the_judge(server: LLMServer) -> None:
    server.push({"error": {"message": "bad model name"}}, status=400)
    reward = judge(provider_for(server), RUBRIC)
    with pytest.raises(ProviderError, match="bad model name"):
        reward(TASK, "Paris")
    assert reward.stats() == {"calls": 0, "unreadable": 0}


def test_concurrent_gradings_are_all_counted(server: LLMServer) -> None:
    reward = judge(provider_for(server), RUBRIC)
    scores: list[float] = []
    lock = threading.Lock()

    def grade(i: int) -> None:
        score = reward(TASK, "Paris" if i % 2 == 0 else "Rome")
        with lock:
            scores.append(float(score))

    threads = [threading.Thread(target=grade, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(scores) == [0.2] * 4 + [1.0] * 4
    assert reward.stats() == {"calls": 8, "unreadable": 0} and len(server.requests) == 8


def test_the_judge_is_marked_as_calling_a_model_and_keeps_its_key_out_of_repr(server: LLMServer) -> None:
    reward = judge(provider_for(server), RUBRIC, model="grader-7")
    assert isinstance(reward, JudgeReward) and reward.calls_a_model is True
    text = repr(reward)
    assert text.startswith("judge(") and "grader-7" in text and "The answer names" in text
    assert KEY not in text and KEY[:12] not in text


def echo_grade(prompt: str, **options: Any) -> str:
    """A plain grading function (module level, so it pickles)."""
    return "SCORE: 1\nCRITIQUE: fine" if "Paris" in prompt.split("The assistant's answer:")[1] else "SCORE: 0"


def test_a_judge_on_a_picklable_provider_pickles_and_still_counts() -> None:
    reward = judge(from_callable(echo_grade), RUBRIC)
    assert reward(TASK, "Paris") == 1.0
    back = pickle.loads(pickle.dumps(reward))
    assert back.stats() == {"calls": 1, "unreadable": 0}
    assert back(TASK, "Rome") == 0.0 and back(TASK, "Paris").feedback == "fine"
    assert back.stats() == {"calls": 3, "unreadable": 0}
    assert reward.stats() == {"calls": 1, "unreadable": 0}


def test_a_provider_returning_plain_text_is_accepted() -> None:
    class Plain:
        usage = None

        def complete(self, messages, **options):
            return "SCORE: 60%\nCRITIQUE: partly"

    score = judge(Plain(), RUBRIC)(TASK, "Paris")
    assert score == pytest.approx(0.6) and score.feedback == "partly"


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("rubric", ["", "   \n", None, 3])
def test_a_judge_needs_a_rubric_in_words(rubric: object) -> None:
    with pytest.raises(InvalidArgument, match="rubric"):
        judge(from_callable(echo_grade), rubric)  # type: ignore[arg-type]


def test_the_rubric_is_stripped() -> None:
    assert judge(from_callable(echo_grade), "  be right \n").rubric == "be right"


@pytest.mark.parametrize("template, words", [
    ("{rubric} {prompt}", "{output}"),
    ("{rubric} {output}", "{prompt}"),
    ("{prompt} {output}", "{rubric}"),
    ("{rubric} {prompt} {output} {score}", "unknown field"),
])
def test_a_template_must_use_the_required_fields_and_only_known_ones(template: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(words)):
        judge(from_callable(echo_grade), RUBRIC, template=template)


def test_a_template_must_be_a_string() -> None:
    with pytest.raises(InvalidArgumentType, match="template"):
        judge(from_callable(echo_grade), RUBRIC, template=["{rubric}"])  # type: ignore[arg-type]


@pytest.mark.parametrize("options, knob", [
    ({"call_tokens": 0}, "call_tokens"),
    ({"call_tokens": -5}, "call_tokens"),
    ({"call_tokens": 2.5}, "call_tokens"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": "hot"}, "temperature"),
])
def test_judge_limits_out_of_range_are_refused(options: dict[str, Any], knob: str) -> None:
    with pytest.raises(InvalidArgument, match=knob):
        judge(from_callable(echo_grade), RUBRIC, **options)


@pytest.mark.parametrize("value", [99, None])
def test_max_tokens_is_refused_naming_call_tokens_the_per_call_caps_name(value: Any) -> None:
    # max_tokens is the run's budget everywhere; on the judge it would silently mean another thing
    for make in (lambda: judge(from_callable(echo_grade), RUBRIC, max_tokens=value),
                 lambda: JudgeReward(from_callable(echo_grade), RUBRIC, model=None, call_tokens=None,
                                     temperature=None, template=DEFAULT_JUDGE_TEMPLATE, max_tokens=value)):
        with pytest.raises(InvalidArgument) as caught:
            make()
        message = str(caught.value)
        assert "\n" not in message and f"max_tokens={value!r}" in message
        assert f"call_tokens={value!r}" in message and "run's token budget" in message and "evolve" in message


def test_a_judge_needs_a_provider() -> None:
    with pytest.raises(InvalidArgumentType, match="provider.*from_callable"):
        judge(object(), RUBRIC)  # type: ignore[arg-type]
