"""The head's held-out scores per version (`agentdescent.merge.scoreboard`).

Measured scores, inherited ones (a commit's unscored tasks take the parent's), projected
ones (counted like inherited), clean ones (an earlier measurement no commit since plausibly
changed), the estimate over every task, and the state a resumed run gets back.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent.merge.scoreboard import HeadEstimate, Scoreboard

A = "prompt"


def test_an_empty_board_knows_nothing():
    board = Scoreboard(4)
    assert board.measured(A, 0) == {}
    assert board.inherited(A, 0) == {}
    assert board.score(A, 0, 1) is None
    assert board.clean(A, 0, 1) is None
    assert board.estimate(A, 0) == HeadEstimate(0.0, 0, 0, 4)
    assert Scoreboard(0).estimate(A, 0).reward == 0.0


def test_record_stores_measured_scores_per_artifact_and_version():
    board = Scoreboard(4)
    board.record(A, 1, {0: 1.0, 2: 0.5})
    board.record(A, 1, {3: 0})
    assert board.measured(A, 1) == {0: 1.0, 2: 0.5, 3: 0.0}
    assert isinstance(board.measured(A, 1)[3], float)
    assert board.score(A, 1, 2) == 0.5
    assert board.score(A, 1, 1) is None
    assert board.measured(A, 2) == {} and board.measured("other", 1) == {}
    board.record(A, 1, {2: 0.25})  # a later measurement replaces the earlier one
    assert board.score(A, 1, 2) == 0.25


def test_the_dicts_handed_out_are_copies():
    board = Scoreboard(3)
    board.record(A, 1, {0: 1.0})
    board.measured(A, 1)[1] = 0.0
    board.inherited(A, 1)[2] = 0.0
    assert board.measured(A, 1) == {0: 1.0}
    assert board.inherited(A, 1) == {}


def test_commit_measured_scores_become_the_new_heads_and_the_rest_is_inherited():
    board = Scoreboard(5)
    board.record(A, 1, {0: 0.0, 1: 1.0, 2: 0.5})
    board.commit(A, 1, 2, {0: 1.0, 3: 1.0})
    assert board.measured(A, 2) == {0: 1.0, 3: 1.0}
    assert board.inherited(A, 2) == {1: 1.0, 2: 0.5}
    # Inheritance carries on through later commits, measured beats inherited.
    board.commit(A, 2, 3, {1: 0.0})
    assert board.measured(A, 3) == {1: 0.0}
    assert board.inherited(A, 3) == {0: 1.0, 2: 0.5, 3: 1.0}
    # The parent keeps its own scores.
    assert board.measured(A, 1) == {0: 0.0, 1: 1.0, 2: 0.5}


def test_record_on_a_version_replaces_what_it_inherited():
    board = Scoreboard(3)
    board.record(A, 1, {0: 1.0, 1: 1.0})
    board.commit(A, 1, 2, {})
    assert board.inherited(A, 2) == {0: 1.0, 1: 1.0}
    board.record(A, 2, {1: 0.0})
    assert board.measured(A, 2) == {1: 0.0}
    assert board.inherited(A, 2) == {0: 1.0}


def test_projected_scores_count_like_inherited_and_are_clipped():
    board = Scoreboard(4)
    board.record(A, 1, {0: 0.5, 1: 0.5, 2: 0.5})
    # Projected tasks are tasks the diff plausibly affects (as the measurer projects them).
    board.commit(A, 1, 2, {0: 1.0}, projected={1: 1.3, 2: -0.2, 0: 0.0}, affected={0, 1, 2})
    assert board.measured(A, 2) == {0: 1.0}  # a projection never replaces a measurement
    assert board.inherited(A, 2) == {1: 1.0, 2: 0.0}
    # No clean score is left: the never-scored task 3 gets the mean of what is known, 2/3.
    assert board.estimate(A, 2) == HeadEstimate(pytest.approx((1.0 + 1.0 + 0.0 + (2.0 / 3)) / 4), 1, 2, 4)


def test_clean_scores_are_earlier_measurements_outside_the_commits_affected_tasks():
    board = Scoreboard(4)
    board.record(A, 1, {0: 0.0, 1: 1.0, 2: 0.5})
    board.commit(A, 1, 2, {3: 1.0}, affected={2, 3})
    assert board.clean(A, 2, 0) == 0.0
    assert board.clean(A, 2, 1) == 1.0
    assert board.clean(A, 2, 2) is None  # the diff plausibly changed it
    assert board.clean(A, 2, 3) is None  # measured on the new head itself
    # A later commit that touches task 0 makes it unclean; task 1 stays clean.
    board.commit(A, 2, 3, {}, affected={0})
    assert board.clean(A, 3, 0) is None
    assert board.clean(A, 3, 1) == 1.0
    assert board.clean(A, 3, 3) == 1.0  # v2's measurement, untouched since


def test_the_latest_clean_measurement_wins():
    board = Scoreboard(2)
    board.record(A, 1, {0: 0.0})
    board.commit(A, 1, 2, {})
    assert board.clean(A, 2, 0) == 0.0
    board.record(A, 2, {0: 1.0})  # measured again on v2
    board.commit(A, 2, 3, {})
    assert board.clean(A, 3, 0) == 1.0


def test_commit_without_affected_keeps_every_earlier_measurement_clean():
    board = Scoreboard(3)
    board.record(A, 1, {0: 1.0, 1: 0.0, 2: 0.5})
    board.commit(A, 1, 2, {0: 0.0})
    assert [board.clean(A, 2, i) for i in range(3)] == [None, 0.0, 0.5]


def test_estimate_is_measured_else_inherited_else_imputed_from_the_clean_scores():
    board = Scoreboard(6)
    board.record(A, 1, {0: 1.0, 1: 0.0})
    board.commit(A, 1, 2, {2: 1.0}, affected={2})
    estimate = board.estimate(A, 2)
    # Known: 2 -> 1.0 (measured), 0 -> 1.0 and 1 -> 0.0 (inherited, and clean); the 3 never
    # scored get the mean of the clean scores, 1/2 (not 2/3, the mean of what is known).
    assert estimate.reward == pytest.approx((1.0 + 1.0 + 0.0 + 3 * 0.5) / 6)
    assert (estimate.measured, estimate.inherited, estimate.tasks) == (1, 2, 6)
    assert not estimate.exact


def test_without_a_clean_score_the_estimate_imputes_the_mean_of_what_is_known():
    board = Scoreboard(5)
    board.record(A, 1, {0: 1.0, 1: 0.0, 2: 1.0})  # the starting head: nothing earlier to be clean
    assert board.estimate(A, 1).reward == pytest.approx((2.0 + 2 * (2.0 / 3)) / 5)
    board.commit(A, 1, 2, {3: 1.0}, affected={0, 1, 2, 3})  # every earlier score touched
    assert all(board.clean(A, 2, i) is None for i in range(5))
    assert board.estimate(A, 2).reward == pytest.approx((3.0 + 0.75) / 5)


def test_the_estimate_is_not_inflated_by_the_commits_gains():
    """A commit that gains on its affected tasks says nothing of the tasks no commit touched."""
    board = Scoreboard(12)
    # The starting head's sample: one pass in four.
    board.record(A, 1, {0: 0.0, 1: 0.0, 2: 1.0, 3: 0.0})
    # A commit that solves its four affected tasks (three scored, one projected from the gain).
    board.commit(A, 1, 2, {4: 1.0, 5: 1.0, 6: 1.0}, projected={7: 1.0}, affected={4, 5, 6, 7})
    assert {i for i in range(12) if board.clean(A, 2, i) is not None} == {0, 1, 2, 3}
    # Tasks 8..11 were never scored: imputed with the clean mean 1/4, not the known mean 5/8.
    assert board.estimate(A, 2).reward == pytest.approx((1.0 + 4 * 1.0 + 4 * 0.25) / 12)
    known_mean = (1.0 + 4 * 1.0) / 8
    assert board.estimate(A, 2).reward < (1.0 + 4 * 1.0 + 4 * known_mean) / 12
    # A second gaining commit does not inflate it either; its affected task 3 is no longer clean.
    board.commit(A, 2, 3, {3: 1.0, 8: 1.0}, affected={3, 8})
    assert {i for i in range(12) if board.clean(A, 3, i) is not None} == {0, 1, 2, 4, 5, 6}
    clean_mean = (0.0 + 0.0 + 1.0 + 3 * 1.0) / 6
    assert board.estimate(A, 3).reward == pytest.approx((1.0 + 1.0 + 4 * 1.0 + 1.0 + 3 * clean_mean) / 12)
    # A clean task measured again on the version counts with its measured value.
    board.record(A, 3, {0: 1.0})
    clean_mean = (1.0 + 0.0 + 1.0 + 3 * 1.0) / 6
    assert board.estimate(A, 3).reward == pytest.approx((2.0 + 1.0 + 4 * 1.0 + 1.0 + 3 * clean_mean) / 12)


def test_estimate_is_exact_when_every_task_was_measured_on_the_head():
    board = Scoreboard(3)
    board.record(A, 1, {0: 1.0, 1: 0.5, 2: 0.0})
    estimate = board.estimate(A, 1)
    assert estimate.exact and estimate.reward == pytest.approx(0.5)
    board.commit(A, 1, 2, {0: 1.0})
    assert not board.estimate(A, 2).exact


def test_state_dict_is_json_ready_and_round_trips():
    board = Scoreboard(4)
    board.record(A, 1, {0: 1.0, 3: 0.25})
    board.commit(A, 1, 2, {1: 0.5}, projected={0: 0.75}, affected={0, 1})
    state = json.loads(json.dumps(board.state_dict(A, 2)))
    assert state == {"measured": {"1": 0.5}, "inherited": {"0": 0.75, "3": 0.25}, "clean": {"3": 0.25}}
    fresh = Scoreboard(4)
    fresh.load_state_dict(A, 7, state)
    assert fresh.measured(A, 7) == board.measured(A, 2)
    assert fresh.inherited(A, 7) == board.inherited(A, 2)
    assert [fresh.clean(A, 7, i) for i in range(4)] == [board.clean(A, 2, i) for i in range(4)]
    # The estimate imputes task 2 from the clean score (0.25), so it needs the clean scores back.
    assert fresh.estimate(A, 7) == board.estimate(A, 2)
    assert board.estimate(A, 2).reward == pytest.approx((0.75 + 0.5 + 0.25 + 0.25) / 4)
    without_clean = Scoreboard(4)
    without_clean.load_state_dict(A, 7, {k: v for k, v in state.items() if k != "clean"})
    assert without_clean.estimate(A, 7) != board.estimate(A, 2)


def test_load_state_dict_accepts_a_partial_state():
    board = Scoreboard(2)
    board.load_state_dict(A, 1, {"measured": {"1": 1}})
    assert board.measured(A, 1) == {1: 1.0}
    board.load_state_dict(A, 1, {})
    assert board.measured(A, 1) == {1: 1.0}


# --------------------------------------------------------------------------- properties


N_TASKS = 8
score_maps = st.dictionaries(st.integers(min_value=0, max_value=N_TASKS - 1),
                             st.floats(min_value=0.0, max_value=1.0, allow_nan=False), max_size=N_TASKS)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("record"), score_maps),
        st.tuples(st.just("commit"), score_maps, score_maps,
                  st.sets(st.integers(min_value=0, max_value=N_TASKS - 1))),
    ),
    min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(score_maps, operations)
def test_commits_and_records_keep_the_books_straight(start, ops):
    """After any history: measured is never reported as inherited, a commit's scores follow from
    its parent's, the clean scores are the earlier measurements outside every later commit's
    affected tasks, and the estimate is the mean of measured-else-inherited, a never-scored task
    imputed with the mean of the clean scores (measured where measured again), else the known mean."""
    board = Scoreboard(N_TASKS)
    board.record(A, 1, start)
    head = 1
    clean: dict[int, float] = {}  # the model: the starting head has no earlier measurement
    for op in ops:
        if op[0] == "record":
            board.record(A, head, op[1])
        else:
            _, measured, projected, affected = op
            parent = {**board.inherited(A, head), **board.measured(A, head)}
            earlier = {**clean, **board.measured(A, head)}
            board.commit(A, head, head + 1, measured, projected, affected)
            head += 1
            expect = {**parent, **{i: min(1.0, max(0.0, s)) for i, s in projected.items()}, **measured}
            assert {**board.inherited(A, head), **board.measured(A, head)} == expect
            assert board.measured(A, head) == measured
            clean = {i: s for i, s in earlier.items() if i not in measured and i not in affected}
            for i in range(N_TASKS):
                if i in measured or i in affected:
                    assert board.clean(A, head, i) is None
        assert {i: board.clean(A, head, i) for i in range(N_TASKS) if board.clean(A, head, i) is not None} == clean
        measured = board.measured(A, head)
        inherited = board.inherited(A, head)
        assert not set(measured) & set(inherited)
        known = {**inherited, **measured}
        pool = [measured.get(i, s) for i, s in clean.items()] or list(known.values())
        fill = sum(pool) / len(pool) if pool else 0.0
        estimate = board.estimate(A, head)
        assert estimate.reward == pytest.approx(sum(known.get(i, fill) for i in range(N_TASKS)) / N_TASKS)
        assert (estimate.measured, estimate.inherited) == (len(measured), len(inherited))
        if len(known) == N_TASKS:
            assert estimate.reward == pytest.approx(sum(known.values()) / N_TASKS)
        assert 0.0 <= estimate.reward <= 1.0


@settings(max_examples=200, deadline=None)
@given(score_maps, score_maps, score_maps, st.sets(st.integers(min_value=0, max_value=N_TASKS - 1)))
def test_state_dict_round_trips_through_json(start, measured, projected, affected):
    board = Scoreboard(N_TASKS)
    board.record(A, 1, start)
    board.commit(A, 1, 2, measured, projected, affected)
    fresh = Scoreboard(N_TASKS)
    fresh.load_state_dict(A, 2, json.loads(json.dumps(board.state_dict(A, 2))))
    assert fresh.state_dict(A, 2) == board.state_dict(A, 2)
    assert [fresh.clean(A, 2, i) for i in range(N_TASKS)] == [board.clean(A, 2, i) for i in range(N_TASKS)]
    ours, theirs = fresh.estimate(A, 2), board.estimate(A, 2)
    assert ours.reward == pytest.approx(theirs.reward, rel=1e-12)  # summed in another order
    assert (ours.measured, ours.inherited, ours.tasks) == (theirs.measured, theirs.inherited, theirs.tasks)
