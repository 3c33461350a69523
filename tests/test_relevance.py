"""Which tasks a diff most plausibly changes (`agentdescent.merge.relevance`).

The ranking: rarity-weighted (IDF) words a diff's text shares with each prompt, a bonus for
the diff's meta group, the prompts of the tasks it was proposed from as the fallback, and a
user hook that replaces it all; `Relevance.affected` keeps the tasks within
`AFFECTED_SHARE` of the best, `Relevance.affects_any` asks the same of other tasks.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent.merge.relevance import AFFECTED_SHARE, Relevance, words
from agentdescent.types import Diff, Task

PROMPTS = [
    "Please refund my order",  # t0
    "Please track my order",  # t1
    "Please refund the shipping fee",  # t2
    "Please reset my password",  # t3
]
TASKS = [Task(f"t{i}", p) for i, p in enumerate(PROMPTS)]
N = len(TASKS)


def diff(ops: dict[str, str | None]) -> Diff:
    return Diff("d1", "prompt", ops)


def idf(count: int) -> float:
    return math.log(N / count)


# --------------------------------------------------------------------------- words


def test_words_are_lower_cased_tokens_of_two_characters_or_more():
    assert words("Hello, World a b2 x REFUND-policy") == {"hello", "world", "b2", "refund", "policy"}
    assert words("") == set()
    assert words("I a 7") == set()
    assert words("rule:refund_v2") == {"rule", "refund", "v2"}


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_words_are_always_lower_case_alphanumeric(text):
    for w in words(text):
        assert len(w) >= 2
        assert w == w.lower()
        assert all(ch in "abcdefghijklmnopqrstuvwxyz0123456789" for ch in w)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=string.printable, max_size=80))
def test_words_ignore_case_and_punctuation(text):
    assert words(text) == words(text.upper()) == words(text.swapcase())
    assert words(text) == words(re.sub(r"[^A-Za-z0-9]", " ", text))


# --------------------------------------------------------------------------- lexical scores


def test_a_shared_word_scores_its_idf():
    rel = Relevance(TASKS)
    scores = rel.scores(diff({"rule": "Always offer a refund"}), [])
    # "refund" is in 2 of 4 prompts; nothing else the diff says is in any prompt.
    assert scores == pytest.approx([idf(2), 0.0, idf(2), 0.0])


def test_scores_add_the_idf_of_every_shared_word():
    rel = Relevance(TASKS)
    scores = rel.scores(diff({"rule": "track the order"}), [])
    # t1: track (1 prompt) + order (2); t2: the (1); t0: order (2).
    assert scores == pytest.approx([idf(2), idf(1) + idf(2), idf(1), 0.0])


def test_a_word_in_every_prompt_counts_nothing():
    rel = Relevance(TASKS)
    assert rel.scores(diff({"rule": "please"}), []) == [0.0] * N


def test_the_diff_keys_count_split_at_colons_and_dashes():
    rel = Relevance(TASKS)
    by_key = rel.scores(diff({"rule:password-reset": None}), [])  # a deletion: the key alone
    assert by_key == pytest.approx([0.0, 0.0, 0.0, 2 * idf(1)])


def test_words_are_matched_case_insensitively():
    rel = Relevance(TASKS)
    assert rel.scores(diff({"rule": "REFUND"}), []) == rel.scores(diff({"rule": "refund"}), [])


def test_a_diff_that_matches_no_prompt_falls_back_to_its_trajectory_prompts():
    rel = Relevance(TASKS)
    unrelated = diff({"rule": "zebra crossing"})
    assert rel.scores(unrelated, []) == [0.0] * N
    trajectory = [Task("x", "Track the parcel")]
    # "track" (t1) and "the" (t2) are shared; "parcel" is in no ranked prompt.
    assert rel.scores(unrelated, trajectory) == pytest.approx([0.0, idf(1), idf(1), 0.0])


def test_the_trajectory_is_not_used_when_the_diff_text_matches():
    rel = Relevance(TASKS)
    d = diff({"rule": "refund"})
    assert rel.scores(d, [Task("x", "reset password")]) == rel.scores(d, [])


def test_the_group_key_lifts_the_trajectory_group_above_every_lexical_match():
    tasks = [Task("a", "refund my order", {"team": "billing"}),
             Task("b", "refund the fee", {"team": "shipping"}),
             Task("c", "reset password", {"team": "billing"}),
             Task("d", "track parcel")]
    rel = Relevance(tasks, group_key="team")
    trajectory = [Task("x", "anything", {"team": "billing"})]
    scores = rel.scores(diff({"rule": "refund"}), trajectory)
    plain = Relevance(tasks).scores(diff({"rule": "refund"}), trajectory)
    top = max(plain) + 1.0
    assert scores == pytest.approx([plain[0] + top, plain[1], plain[2] + top, plain[3]])
    assert min(scores[0], scores[2]) > max(scores[1], scores[3])
    # No group in the trajectory: the key adds nothing.
    assert rel.scores(diff({"rule": "refund"}), [Task("y", "z")]) == pytest.approx(plain)


def test_the_hook_replaces_the_ranking_and_is_clipped_at_zero():
    seen: list[tuple[Diff, tuple[str, ...], str]] = []

    def hook(d: Diff, trajectory: Sequence[Task], task: Task) -> float:
        seen.append((d, tuple(t.id for t in trajectory), task.id))
        return {"t0": 3.0, "t1": -2.0, "t2": 0.5}.get(task.id, 0.0)

    rel = Relevance(TASKS, hook=hook)
    d = diff({"rule": "password"})  # lexically only t3
    trajectory = [Task("x", "x")]
    assert rel.scores(d, trajectory) == [3.0, 0.0, 0.5, 0.0]
    assert seen == [(d, ("x",), t.id) for t in TASKS]
    assert rel.affected(d, trajectory) == [3.0, 0.0, 0.0, 0.0]  # 0.5 < AFFECTED_SHARE * 3


def test_an_empty_task_list_scores_nothing():
    rel = Relevance([])
    assert rel.scores(diff({"rule": "refund"}), []) == []
    assert rel.affected(diff({"rule": "refund"}), []) == []


# --------------------------------------------------------------------------- affected


def test_affected_cuts_below_the_share_of_the_best():
    assert AFFECTED_SHARE == 0.5
    rel = Relevance(TASKS)
    d = diff({"rule": "track the order"})
    scores = rel.scores(d, [])  # [0.69, 2.08, 1.39, 0]
    assert rel.affected(d, []) == pytest.approx([0.0, scores[1], scores[2], 0.0])


def test_affected_keeps_every_task_when_they_tie():
    rel = Relevance(TASKS)
    d = diff({"rule": "refund"})
    assert rel.affected(d, []) == rel.scores(d, [])


task_prompts = st.lists(
    st.lists(st.sampled_from(["refund", "order", "track", "fee", "reset", "password", "the", "my"]),
             min_size=1, max_size=5).map(" ".join),
    min_size=1, max_size=12)
diff_texts = st.lists(st.sampled_from(["refund", "order", "track", "fee", "zebra", "the", "policy"]),
                      min_size=1, max_size=4).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(task_prompts, diff_texts, st.booleans())
def test_affected_is_the_scores_cut_at_the_share_of_the_best(prompts, text, with_trajectory):
    tasks = [Task(f"t{i}", p) for i, p in enumerate(prompts)]
    rel = Relevance(tasks)
    d = diff({"rule": text})
    trajectory = [tasks[0]] if with_trajectory else []
    scores = rel.scores(d, trajectory)
    affected = rel.affected(d, trajectory)
    assert len(scores) == len(affected) == len(tasks)
    assert all(s >= 0 for s in scores)
    best = max(scores)
    for s, a in zip(scores, affected):
        assert a == (s if s > 0 and s >= AFFECTED_SHARE * best else 0.0)
    if best > 0:
        assert max(affected) == best  # the best task is always affected
    assert rel.scores(d, trajectory) == scores  # deterministic


# --------------------------------------------------------------------------- affects_any


def test_affects_any_of_no_tasks_is_false():
    assert not Relevance(TASKS).affects_any(diff({"rule": "refund"}), [], [])


def test_affects_any_sees_a_shared_rare_word_in_other_tasks():
    rel = Relevance(TASKS)
    d = diff({"rule": "refund"})
    assert rel.affects_any(d, [], [Task("o1", "I want a refund")])
    assert not rel.affects_any(d, [], [Task("o2", "reset my password")])


def test_affects_any_counts_a_word_the_ranked_prompts_never_use_as_rare():
    rel = Relevance(TASKS)
    d = diff({"rule": "refund zebra"})
    # "zebra" scores log(4) in the other task: above half the best ranked score (log 2).
    assert rel.affects_any(d, [], [Task("o", "a zebra crossing")])


def test_affects_any_needs_the_share_of_the_best_over_both():
    rel = Relevance(TASKS)
    d = diff({"rule": "track the order"})  # best ranked score: track + order on t1 (2.08)
    # "order" alone scores log 2 = 0.69 in the other task: below half of 2.08.
    assert idf(2) < AFFECTED_SHARE * (idf(1) + idf(2))
    assert not rel.affects_any(d, [], [Task("o", "order my")])
    assert not rel.affects_any(diff({"rule": "track the password"}), [], [Task("o", "my")])
    assert rel.affects_any(d, [], [Task("o", "track the order")])


def test_affects_any_uses_the_hook_too():
    rel = Relevance(TASKS, hook=lambda d, trajectory, task: 1.0 if task.id == "other" else 0.0)
    assert rel.affects_any(diff({"rule": "x"}), [], [Task("other", "y")])
    assert not rel.affects_any(diff({"rule": "x"}), [], [Task("else", "y")])
