"""`agentdescent.rewards.builtin`: the `Score` type, the reward contract and the built-in rewards with feedback."""

from __future__ import annotations

import copy
import json
import math
import pickle
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentdescent import Task
from agentdescent.errors import InvalidArgument, InvalidArgumentType, RewardContractError
from agentdescent.rewards.builtin import (
    FEEDBACK_LIMIT,
    REWARD_NAMES,
    Score,
    answer_regex,
    any_target,
    by_name,
    check_reward,
    contains_answer,
    exact_match,
    normalized_match,
    number_within,
    one_of,
)

TASK = Task("task-7", "What is asked?")


def answered(answer: object, task_id: str = "q1") -> Task:
    return Task(task_id, "What is the answer?", {"answer": answer})


# --------------------------------------------------------------------------- Score


def test_a_score_is_a_float_with_its_feedback() -> None:
    s = Score(0.75, "expected 'Paris'; the reply was 'Lyon'")
    assert isinstance(s, float)
    assert s == 0.75 and s.value == 0.75 and type(s.value) is float
    assert s.feedback == "expected 'Paris'; the reply was 'Lyon'"
    assert Score(1).feedback == "" and Score(1) == 1.0


def test_float_operations_work_and_give_plain_floats() -> None:
    s = Score(0.5, "half right")
    assert s + 0.25 == 0.75 and type(s + 0.25) is float
    assert s * 2 == 1.0 and 1 - s == 0.5 and -s == -0.5 and s / 2 == 0.25
    assert s < 0.6 and s >= 0.5 and s != 0.4
    assert round(s, 1) == 0.5 and int(Score(1.0)) == 1
    assert math.isclose(sum([Score(0.25, "a"), Score(0.5, "b")]), 0.75)
    assert max(Score(0.2, "low"), Score(0.9, "high")).feedback == "high"
    assert hash(s) == hash(0.5) and {s: "x"}[0.5] == "x"  # keys a dict like its float


def test_formatting_and_json_are_the_floats() -> None:
    s = Score(0.125, "feedback that must not leak into a number")
    assert f"{s:.2f}" == "0.12" and f"{s}" == "0.125" and f"{s:g}" == "0.125"
    assert str(s) == "0.125"
    assert json.dumps(s) == "0.125"
    assert json.loads(json.dumps({"reward": s})) == {"reward": 0.125}


def test_repr_shows_value_and_feedback() -> None:
    assert repr(Score(0.5, "half")) == "Score(0.5, feedback='half')"
    assert repr(Score(1)) == "Score(1.0, feedback='')"


def test_a_score_is_immutable() -> None:
    s = Score(0.5, "half")
    for name in ("feedback", "value", "anything", "_feedback"):
        with pytest.raises(AttributeError):
            setattr(s, name, "changed")
    with pytest.raises(AttributeError):
        del s.feedback
    assert s.feedback == "half" and s == 0.5
    assert not hasattr(s, "__dict__")  # nowhere to hang a new attribute


def test_a_scores_feedback_cannot_be_deleted() -> None:
    s = Score(0.5, "half")
    with pytest.raises(AttributeError):
        del s._feedback
    assert s.feedback == "half"


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_score_pickles_with_its_feedback(protocol: int) -> None:
    s = Score(0.25, "expected 42; the reply's number was 41")
    back = pickle.loads(pickle.dumps(s, protocol))
    assert type(back) is Score and back == 0.25 and back.feedback == s.feedback


def test_copies_keep_the_feedback() -> None:
    s = Score(0.25, "quarter")
    for other in (copy.copy(s), copy.deepcopy(s)):
        assert type(other) is Score and other == s and other.feedback == "quarter"


def test_other_real_numbers_are_accepted() -> None:
    assert Score(Fraction(1, 4)) == 0.25 and Score(0) == 0.0
    assert type(Score(Fraction(1, 4)).value) is float


@pytest.mark.parametrize("value", [True, False, "0.5", None, [0.5], 0.5j])
def test_a_score_needs_a_real_number(value: object) -> None:
    with pytest.raises(InvalidArgumentType, match="real number"):
        Score(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("feedback", [None, 3, b"bytes", ["text"]])
def test_a_scores_feedback_must_be_a_string(feedback: object) -> None:
    with pytest.raises(InvalidArgumentType, match="feedback"):
        Score(0.5, feedback)  # type: ignore[arg-type]


def test_score_errors_are_type_errors_too() -> None:
    with pytest.raises(TypeError):
        Score("high")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- check_reward


@given(st.floats(min_value=0.0, max_value=1.0))
def test_any_float_in_range_passes_as_a_score_without_feedback(value: float) -> None:
    checked = check_reward(TASK, value)
    assert type(checked) is Score and checked == value and checked.feedback == ""


@given(st.integers(min_value=0, max_value=1) | st.fractions(min_value=0, max_value=1))
def test_other_reals_in_range_pass(value: object) -> None:
    checked = check_reward(TASK, value)
    assert type(checked.value) is float and checked == float(value)  # type: ignore[arg-type]


@given(st.floats(min_value=0.0, max_value=1.0), st.text(max_size=300))
def test_a_score_in_range_keeps_its_value_and_stripped_feedback(value: float, feedback: str) -> None:
    checked = check_reward(TASK, Score(value, feedback))
    assert checked == value
    assert checked.feedback == feedback.strip()


@given(st.floats(allow_nan=True, allow_infinity=True).filter(lambda v: not 0.0 <= v <= 1.0))
def test_any_float_out_of_range_or_not_finite_breaks_the_contract(value: float) -> None:
    with pytest.raises(RewardContractError, match="task-7") as info:
        check_reward(TASK, value)
    assert "[0, 1]" in str(info.value)
    with pytest.raises(RewardContractError, match="task-7"):
        check_reward(TASK, Score(value, "a score out of range is out of range too"))


@given(st.integers().filter(lambda v: v not in (0, 1)))
def test_integers_out_of_range_break_the_contract(value: int) -> None:
    with pytest.raises(RewardContractError, match="task-7"):
        check_reward(TASK, value)


@pytest.mark.parametrize("value", [True, False, "1.0", None, [1.0], {"score": 1}, 1j, b"1"])
def test_non_numbers_and_bools_break_the_contract_naming_the_task_and_the_type(value: object) -> None:
    with pytest.raises(RewardContractError) as info:
        check_reward(TASK, value)
    message = str(info.value)
    assert "'task-7'" in message and type(value).__name__ in message
    assert "Score(value, feedback)" in message


def test_the_contract_error_is_a_contract_error_and_a_value_error() -> None:
    from agentdescent.errors import ContractError

    with pytest.raises(ContractError):
        check_reward(TASK, 2.0)
    with pytest.raises(ValueError):
        check_reward(TASK, math.nan)


def test_feedback_up_to_the_limit_is_kept_whole() -> None:
    text = "x" * FEEDBACK_LIMIT
    assert check_reward(TASK, Score(0.0, text)).feedback == text


@given(st.integers(min_value=1, max_value=5000))
def test_longer_feedback_is_cut_to_the_limit_with_an_ellipsis(extra: int) -> None:
    text = "y" * (FEEDBACK_LIMIT + extra)
    cut = check_reward(TASK, Score(0.0, text)).feedback
    assert len(cut) == FEEDBACK_LIMIT
    assert cut.endswith("...") and cut[:-3] == text[: FEEDBACK_LIMIT - 3]


def test_feedback_is_sanitised_and_stripped() -> None:
    checked = check_reward(TASK, Score(0.5, "  half \ud83d right \n"))
    assert checked.feedback == "half \ufffd right"
    checked.feedback.encode("utf-8")  # a lone surrogate would not encode
    assert check_reward(TASK, Score(0.5, " \n\t ")).feedback == ""


def test_a_checked_score_is_a_new_score_of_the_same_value() -> None:
    original = Score(0.5, "half")
    checked = check_reward(TASK, original)
    assert checked == original and checked.feedback == "half"


# --------------------------------------------------------------------------- the built-ins

BUILT_INS = [exact_match, normalized_match, contains_answer, one_of(["yes", "no"]), number_within(1.0),
             answer_regex()]


@pytest.mark.parametrize("reward", BUILT_INS, ids=lambda r: r.__name__)
def test_every_built_in_needs_the_tasks_answer(reward) -> None:
    for task in (Task("no-answer", "p"), Task("none-answer", "p", {"answer": None})):
        with pytest.raises(RewardContractError, match=f"'{task.id}'.*meta\\['answer'\\]"):
            reward(task, "yes 1")


@pytest.mark.parametrize("reward", BUILT_INS, ids=lambda r: r.__name__)
def test_every_built_in_returns_a_score_that_passes_the_contract(reward) -> None:
    task = answered("yes" if reward.__name__ not in ("number_within",) else "1")
    for reply in ("yes", "1", "something else entirely", ""):
        score = reward(task, reply)
        assert type(score) is Score and score in (0.0, 1.0) and score.feedback
        assert check_reward(task, score).feedback == score.feedback


def test_exact_match() -> None:
    task = answered("1989")
    right = exact_match(task, " 1989\n")
    assert right == 1.0 and right.feedback == "correct: the reply is exactly '1989'"
    wrong = exact_match(task, "The wall fell in 1989.")
    assert wrong == 0.0
    assert wrong.feedback == "expected exactly '1989'; the reply was 'The wall fell in 1989.'"
    assert exact_match(answered(1989), "1989") == 1.0  # a non-str answer compares as its text
    assert exact_match(task, "1989.") == 0.0


def test_exact_match_feedback_shortens_a_long_reply_and_joins_its_lines() -> None:
    feedback = exact_match(answered("a"), "line one\n\nline two " + "z" * 400).feedback
    assert feedback.startswith("expected exactly 'a'; the reply was 'line one line two zzz")
    assert feedback.endswith("...'") and len(feedback) < 220


@given(st.text(min_size=1).filter(lambda s: s.strip()))
def test_exact_match_accepts_the_answer_itself(answer: str) -> None:
    assert exact_match(answered(answer), answer) == 1.0
    assert exact_match(answered(answer), answer + " and more") == 0.0


def test_normalized_match() -> None:
    task = answered("The Eiffel Tower")
    right = normalized_match(task, "eiffel   tower!")
    assert right == 1.0 and "'The Eiffel Tower'" in right.feedback and right.feedback.startswith("correct")
    wrong = normalized_match(task, "Big Ben")
    assert wrong == 0.0
    assert wrong.feedback == ("expected 'The Eiffel Tower' (case and punctuation ignored); "
                              "the reply was 'Big Ben'")
    assert normalized_match(task, "an eiffel tower") == 1.0  # articles are dropped
    assert normalized_match(task, "eiffel towers") == 0.0


def test_contains_answer() -> None:
    task = answered("Paris")
    right = contains_answer(task, "I believe it is paris.")
    assert right == 1.0 and right.feedback == "correct: the reply contains 'Paris'"
    wrong = contains_answer(task, "Parisian food is good")  # not as a whole word
    assert wrong == 0.0
    assert wrong.feedback == "expected the reply to contain 'Paris'; it was 'Parisian food is good'"
    assert contains_answer(answered("C++"), "write it in C++, please") == 1.0
    assert contains_answer(answered("New York"), "it is new york city") == 1.0


def test_contains_answer_rewards_a_hedge_as_documented() -> None:
    assert contains_answer(answered("positive"), "positive or negative") == 1.0


LABELS = one_of(["positive", "negative", "neutral"])


def test_one_of_names_the_right_label() -> None:
    task = answered("positive")
    right = LABELS(task, "Positive!")
    assert right == 1.0 and right.feedback == "correct: the reply names 'positive' and no other choice"


def test_one_of_refuses_a_hedge_naming_every_label_it_named() -> None:
    hedge = LABELS(answered("positive"), "positive or negative")
    assert hedge == 0.0
    assert hedge.feedback == "expected exactly one choice, 'positive'; the reply named 2: positive, negative"
    # the hedge fails for either answer
    assert LABELS(answered("negative"), "positive or negative") == 0.0


def test_one_of_on_a_wrong_label_and_on_none() -> None:
    wrong = LABELS(answered("positive"), "clearly negative")
    assert wrong == 0.0 and wrong.feedback == "expected 'positive'; the reply named 'negative'"
    none = LABELS(answered("positive"), "I cannot tell")
    assert none == 0.0
    assert none.feedback == ("expected exactly one of ['positive', 'negative', 'neutral'], the right one "
                             "being 'positive'; the reply named none: 'I cannot tell'")
    assert LABELS(answered("positive"), "positively") == 0.0  # whole words only


def test_one_of_matches_the_answer_case_insensitively() -> None:
    assert LABELS(answered("POSITIVE"), "positive") == 1.0
    assert one_of(["Yes", "No"])(answered("yes"), "YES") == 1.0


def test_one_of_with_labels_that_contain_one_another() -> None:
    languages = one_of(["C", "C++", "C#"])
    assert languages(answered("C#"), "C#") == 1.0
    assert languages(answered("C++"), "It is C++.") == 1.0


def test_one_of_refuses_a_task_whose_answer_is_not_a_choice() -> None:
    with pytest.raises(RewardContractError, match="'q1'.*'maybe'.*not one of the choices"):
        LABELS(answered("maybe"), "positive")


@pytest.mark.parametrize("choices", [["positive"], ["yes", "YES"], ["yes", ""], ["yes", "  "], []])
def test_one_of_needs_two_distinct_non_empty_labels(choices: list[str]) -> None:
    with pytest.raises(InvalidArgument, match="at least two distinct, non-empty labels"):
        one_of(choices)


@pytest.mark.parametrize("choices", ["positive,negative", 3, {"a", "b"}])  # None: each task's meta["choices"]
def test_one_of_needs_a_list(choices: object) -> None:
    with pytest.raises(InvalidArgumentType, match="list of labels"):
        one_of(choices)  # type: ignore[arg-type]


def test_one_of_accepts_a_tuple_and_strips_labels() -> None:
    reward = one_of((" yes ", "no"))
    assert reward(answered("yes"), "yes") == 1.0
    assert reward.__name__ == "one_of" and "yes" in reward.__qualname__


def test_number_within_absolute() -> None:
    reward = number_within(0.5)
    task = answered("42")
    right = reward(task, "about 42.3 units")
    assert right == 1.0 and right.feedback == "correct: 42.3 is within 0.5 of 42"
    wrong = reward(task, "43")
    assert wrong == 0.0 and wrong.feedback == "expected 42 (within 0.5); the reply's number was 43"
    none = reward(task, "no idea")
    assert none == 0.0 and none.feedback == "expected the number 42; the reply has no number: 'no idea'"
    assert reward(task, "41.5 exactly") == 1.0 and reward(task, "41.4") == 0.0


def test_number_within_reads_the_first_number_in_several_notations() -> None:
    exact = number_within(0)
    assert exact(answered("-5"), "it is -5 degrees") == 1.0
    assert exact(answered("1000"), "1,000 of them") == 1.0  # thousands separator
    assert exact(answered("1500"), "1.5e3") == 1.0
    assert exact(answered("0.5"), "a half is .5") == 1.0
    assert exact(answered("7"), "7 then 8") == 1.0 and exact(answered("8"), "7 then 8") == 0.0
    assert exact(answered("the answer is 12"), "12") == 1.0  # the answer's first number too


def test_number_within_relative() -> None:
    reward = number_within(0.01, relative=True)
    right = reward(answered("1000"), "1,005")
    assert right == 1.0 and right.feedback == "correct: 1005 is within 10 of 1000"
    assert reward(answered("1000"), "1011") == 0.0
    assert reward(answered("-200"), "-201.5") == 1.0  # relative to the magnitude
    assert reward(answered("0"), "0.0001") == 0.0  # nothing is within 1 % of 0 but 0


@given(st.integers(-10**6, 10**6), st.integers(-10**6, 10**6), st.integers(0, 1000))
def test_number_within_scores_integers_by_their_distance(answer: int, reply: int, tolerance: int) -> None:
    score = number_within(tolerance)(answered(str(answer)), f"my answer: {reply}")
    assert score == (1.0 if abs(answer - reply) <= tolerance else 0.0)


def test_number_within_feedback_names_large_numbers_exactly() -> None:
    wrong = number_within(0)(answered("1234567"), "1234568")
    assert wrong == 0.0
    assert "1234567" in wrong.feedback and "1234568" in wrong.feedback


def test_number_within_refuses_a_task_whose_answer_is_not_a_number() -> None:
    with pytest.raises(RewardContractError, match="'q1'.*'Paris' is not a number"):
        number_within(1)(answered("Paris"), "12")


@pytest.mark.parametrize("tolerance", [-0.1, math.nan, math.inf, -math.inf])
def test_number_within_needs_a_finite_tolerance_of_zero_or_more(tolerance: float) -> None:
    with pytest.raises(InvalidArgument, match="tolerance"):
        number_within(tolerance)


@pytest.mark.parametrize("tolerance", [True, "0.1", None])
def test_number_within_needs_a_number(tolerance: object) -> None:
    with pytest.raises(InvalidArgumentType, match="tolerance"):
        number_within(tolerance)  # type: ignore[arg-type]


def test_answer_regex_default_is_the_answer_as_a_whole_word_escaped() -> None:
    reward = answer_regex()
    task = answered("3.14")
    right = reward(task, "Pi is about 3.14 here")
    assert right == 1.0 and right.feedback == "correct: the reply matches '(?<!\\\\w)3\\\\.14(?!\\\\w)'"
    wrong = reward(task, "pi is 3x14")  # the dot is escaped: it matches only a dot
    assert wrong == 0.0
    assert wrong.feedback == "expected the reply to match '(?<!\\\\w)3\\\\.14(?!\\\\w)'; it was 'pi is 3x14'"
    assert reward(answered("Paris"), "PARIS") == 1.0  # case-insensitive by default
    assert reward(answered("Paris"), "Parisian") == 0.0


def test_answer_regex_default_matches_answers_ending_in_punctuation() -> None:
    assert answer_regex()(answered("C++"), "use C++ here") == 1.0


def test_answer_regex_with_a_custom_pattern_and_flags() -> None:
    anchored = answer_regex("^{answer}$")
    assert anchored(answered("yes"), "Yes") == 1.0
    assert anchored(answered("yes"), "yes sir") == 0.0
    strict = answer_regex("^{answer}$", flags=0)
    assert strict(answered("yes"), "Yes") == 0.0
    fixed = answer_regex(r"\d+")  # no {answer}: the same pattern for every task
    assert fixed(answered("anything"), "12") == 1.0 and fixed(Task("no-answer", "p"), "12") == 1.0
    assert fixed(answered("anything"), "twelve") == 0.0


@pytest.mark.parametrize("pattern", ["(", "[a-", "{answer}("])
def test_answer_regex_refuses_a_pattern_that_does_not_compile(pattern: str) -> None:
    with pytest.raises(InvalidArgument, match="not a regular expression"):
        answer_regex(pattern)


@pytest.mark.parametrize("pattern", ["", None, 3])
def test_answer_regex_needs_a_pattern(pattern: object) -> None:
    with pytest.raises(InvalidArgumentType, match="pattern"):
        answer_regex(pattern)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- by_name

#: Each of REWARD_NAMES with its argument filled in, and a (answer, right reply, wrong reply).
EXAMPLES = {
    "exact": ("exact", "1989", "1989", "in 1989"),
    "normalized": ("normalized", "The Louvre", "the louvre.", "Orsay"),
    "contains": ("contains", "Paris", "It is Paris.", "Rome"),
    "choice:A,B,...": ("choice:positive,negative", "positive", "positive", "positive or negative"),
    "number:TOLERANCE": ("number:0.5", "42", "42.4", "43"),
    "regex:PATTERN": ("regex:^{answer}$", "yes", "yes", "yes indeed"),
}


def test_every_reward_name_has_an_example() -> None:
    assert set(EXAMPLES) == set(REWARD_NAMES)


@pytest.mark.parametrize("name", REWARD_NAMES)
def test_by_name_gives_a_working_reward_for_every_name(name: str) -> None:
    spelled, answer, right, wrong = EXAMPLES[name]
    reward = by_name(spelled)
    task = answered(answer)
    good, bad = reward(task, right), reward(task, wrong)
    assert (good, bad) == (1.0, 0.0)
    assert isinstance(good, Score) and good.feedback and bad.feedback


def test_by_name_gives_the_built_ins_themselves() -> None:
    assert by_name("exact") is exact_match
    assert by_name("normalized") is normalized_match
    assert by_name("contains") is contains_answer


def test_by_name_choice_strips_the_labels() -> None:
    reward = by_name("choice:positive, negative")
    assert reward(answered("negative"), "negative") == 1.0
    assert reward(answered("negative"), "positive and negative") == 0.0


def test_by_name_number_reads_a_percentage_as_relative() -> None:
    reward = by_name("number:1%")
    assert reward(answered("200"), "201.5").feedback == "correct: 201.5 is within 2 of 200"
    assert reward(answered("200"), "203") == 0.0
    assert by_name("number:0")(answered("200"), "200.5") == 0.0


@pytest.mark.parametrize("name", ["bogus", "exact:x", "normalized:", "contains:1", "choice:", "number:",
                                  "regex:", "EXACT", "", "module.path:function"])
def test_by_name_refuses_an_unknown_name_listing_the_names(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        by_name(name)
    message = str(info.value)
    assert repr(name) in message
    assert all(n in message for n in REWARD_NAMES)


@pytest.mark.parametrize("name", ["number:abc", "number:%", "number:1%%"])
def test_by_name_refuses_a_bad_tolerance_showing_the_form(name: str) -> None:
    with pytest.raises(InvalidArgument, match="number:TOLERANCE"):
        by_name(name)


@pytest.mark.parametrize("name, words", [("number:-1", "tolerance"), ("number:nan", "tolerance"),
                                         ("choice:only", "two distinct"), ("choice:a,A", "two distinct"),
                                         ("regex:(", "not a regular expression")])
def test_by_name_passes_on_the_built_ins_own_errors(name: str, words: str) -> None:
    with pytest.raises(InvalidArgument, match=words):
        by_name(name)


@pytest.mark.parametrize("name", [None, 3, ["exact"]])
def test_by_name_needs_a_string(name: object) -> None:
    with pytest.raises(InvalidArgumentType, match="reward name"):
        by_name(name)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- one_of() and any_target


def choosing(answer: str, choices: object, task_id: str = "c1") -> Task:
    return Task(task_id, "Which one?", {"answer": answer, "choices": choices})


@pytest.mark.parametrize("make", [lambda: one_of(), lambda: one_of(None)])
def test_one_of_without_choices_reads_each_tasks_own(make: object) -> None:
    reward = make()  # type: ignore[operator]
    sports = choosing("plausible", ["plausible", "implausible"])
    colours = choosing("blue", ["red", "green", "blue"], "c2")
    assert reward(sports, "Plausible.") == 1.0
    assert reward(colours, "It is blue") == 1.0
    assert reward(colours, "red") == 0.0
    assert reward.__name__ == "one_of"


def test_one_of_without_choices_gives_the_same_feedback_as_with_them() -> None:
    task = choosing("positive", ["positive", "negative", "neutral"])
    fixed, per_task = one_of(["positive", "negative", "neutral"]), one_of()
    for reply in ("positive", "positive or negative", "negative", "no idea"):
        a, b = fixed(task, reply), per_task(task, reply)
        assert (float(a), a.feedback) == (float(b), b.feedback)
    assert per_task(task, "positive or negative").feedback == (
        "expected exactly one choice, 'positive'; the reply named 2: positive, negative")
    assert per_task(task, "positive").feedback == "correct: the reply names 'positive' and no other choice"


def test_one_of_reads_implausible_as_one_choice_not_two() -> None:
    reward = one_of()
    task = choosing("implausible", ["plausible", "implausible"])
    right = reward(task, "Implausible")
    assert right == 1.0 and right.feedback == "correct: the reply names 'implausible' and no other choice"
    assert reward(task, "plausible") == 0.0
    hedge = reward(task, "plausible, or maybe implausible")
    assert hedge == 0.0 and "named 2" in hedge.feedback


def test_one_of_with_fixed_choices_is_unchanged_by_task_choices() -> None:
    reward = one_of(["yes", "no"])
    assert reward(choosing("yes", ["a", "b"]), "yes") == 1.0


@pytest.mark.parametrize("choices", [None, "a,b", ["only"], ["x", "X"], ["x", ""], 3])
def test_one_of_without_choices_refuses_a_task_without_two_of_them(choices: object) -> None:
    task = choosing("x", choices) if choices is not None else answered("x")
    with pytest.raises(RewardContractError, match="'c1'|'q1'"):
        one_of()(task, "x")


def test_one_of_without_choices_refuses_an_answer_that_is_not_a_choice() -> None:
    with pytest.raises(RewardContractError, match="not one of the choices"):
        one_of()(choosing("maybe", ["yes", "no"]), "yes")


def targeted(targets: object, answer: str = "unused") -> Task:
    return Task("g1", "How many?", {"answer": answer, "targets": targets})


@pytest.mark.parametrize("reply", ["6", "There are 6.", "six", "Six apples", "I count 6, in all"])
def test_any_target_accepts_any_target_as_a_whole_word(reply: str) -> None:
    score = any_target(targeted(["six", "6"]), reply)
    assert score == 1.0 and score.feedback.startswith("correct: the reply contains")


@pytest.mark.parametrize("reply", ["16", "6.5", "0.6", "sixteen", "", "seven"])
def test_any_target_refuses_a_number_inside_another(reply: str) -> None:
    score = any_target(targeted(["six", "6"]), reply)
    assert score == 0.0
    assert score.feedback.startswith("expected the reply to contain one of 'six', '6'; it was")


def test_any_target_falls_back_to_the_answer_and_takes_a_phrase() -> None:
    task = Task("g2", "Capital?", {"answer": "New York"})
    assert any_target(task, "It is new york.") == 1.0
    assert any_target(task, "York") == 0.0
    assert any_target(targeted("C++"), "use C++ here") == 1.0


@pytest.mark.parametrize("targets", [[], ["", "  "], 5])
def test_any_target_refuses_empty_targets(targets: object) -> None:
    with pytest.raises(RewardContractError, match="'g1'"):
        any_target(targeted(targets), "x")


def test_any_target_needs_targets_or_an_answer() -> None:
    with pytest.raises(RewardContractError, match="meta\\['answer'\\]"):
        any_target(TASK, "x")


def test_any_target_is_exported() -> None:
    import agentdescent.rewards

    assert agentdescent.rewards.any_target is any_target and "any_target" in agentdescent.rewards.__all__
    assert check_reward(targeted(["1"]), any_target(targeted(["1"]), "1")) == 1.0
