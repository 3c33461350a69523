"""The seeded walk over the train tasks (`agentdescent.engine.worker.TaskWalk`).

Open tasks (never rolled out, or last seen below 1) first, each once per pass in a seeded
order; a solved task leaves the passes; a commit presumes the tasks its diff plausibly
affects solved, and they wait until no other open task is left; ``explore`` draws
uniformly over every task; and the walk resumes bit for bit from its `TaskWalk.state_dict`.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent.engine.worker import TaskWalk
from agentdescent.merge.relevance import Relevance
from agentdescent.types import Diff, Task

TOPICS = ["refund", "shipping", "warranty", "login"]


def make_tasks(n: int) -> list[Task]:
    return [Task(f"t{i}", f"customer question about {TOPICS[i % len(TOPICS)]} number x{i}") for i in range(n)]


def steps(walk: TaskWalk, k: int) -> list[str]:
    return [walk.next().id for _ in range(k)]


# --------------------------------------------------------------------------- passes


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=25), st.integers(min_value=0, max_value=2**32), st.integers(1, 4))
def test_without_exploration_every_open_task_is_visited_once_per_pass(n, seed, passes):
    tasks = make_tasks(n)
    walk = TaskWalk(tasks, seed, explore=0.0)
    seen = steps(walk, n * passes)
    for p in range(passes):
        assert sorted(seen[p * n:(p + 1) * n]) == sorted(t.id for t in tasks), p
    assert walk.explored == 0


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=2, max_value=20), st.integers(min_value=0, max_value=2**32),
       st.lists(st.floats(min_value=0.0, max_value=0.99), min_size=1, max_size=40))
def test_failed_rollouts_keep_a_task_open_and_no_task_repeats_before_the_others(n, seed, rewards):
    tasks = make_tasks(n)
    walk = TaskWalk(tasks, seed, explore=0.0)
    counts: Counter[str] = Counter()
    for reward in rewards:
        task = walk.next()
        counts[task.id] += 1
        assert max(counts.values()) - min(counts.get(t.id, 0) for t in tasks) <= 1
        walk.observe(task, reward)


def test_a_solved_task_leaves_the_walk():
    tasks = make_tasks(6)
    walk = TaskWalk(tasks, 3, explore=0.0)
    first = walk.next()
    walk.observe(first, 1.0)
    later = steps(walk, 50)
    assert first.id not in later
    assert set(later) == {t.id for t in tasks} - {first.id}
    assert walk.stats() == {"walk_explored": 0, "walk_presumed_solved": 0, "walk_open": 5}


def test_a_solved_task_that_fails_again_is_open_again():
    tasks = make_tasks(3)
    walk = TaskWalk(tasks, 0, explore=0.0)
    walk.observe(tasks[0], 1.0)
    assert tasks[0].id not in steps(walk, 10)
    walk.observe(tasks[0], 0.5)
    assert tasks[0].id in steps(walk, 3)


def test_with_every_task_solved_every_step_explores_uniformly():
    tasks = make_tasks(5)
    walk = TaskWalk(tasks, 11, explore=0.0)
    for t in tasks:
        walk.observe(t, 1.0)
    drawn = Counter(steps(walk, 2000))
    assert walk.explored == 2000
    assert set(drawn) == {t.id for t in tasks}
    # Uniform: each task ~ Bin(2000, 0.2), sd ~ 17.9; 5 sd either side.
    assert all(abs(c - 400) < 90 for c in drawn.values()), drawn
    assert walk.stats()["walk_open"] == 0


def test_the_exploration_share_is_about_explore():
    """``explore`` of the steps are uniform draws: 0.3 of 4000 steps, within 4 sd of Bin(4000, 0.3) (+-116)."""
    walk = TaskWalk(make_tasks(10), 5, explore=0.3)
    steps(walk, 4000)
    sd = math.sqrt(4000 * 0.3 * 0.7)
    assert abs(walk.explored - 1200) < 4 * sd


def test_explore_one_draws_every_step_and_still_visits_solved_tasks():
    tasks = make_tasks(4)
    walk = TaskWalk(tasks, 2, explore=1.0)
    walk.observe(tasks[0], 1.0)
    seen = steps(walk, 200)
    assert walk.explored == 200
    assert tasks[0].id in seen


# --------------------------------------------------------------------------- seeds


def test_a_walk_repeats_bit_for_bit_for_a_seed():
    tasks = make_tasks(12)
    a = TaskWalk(tasks, 42, explore=0.3)
    b = TaskWalk(tasks, 42, explore=0.3)
    for k in range(60):
        ta, tb = a.next(), b.next()
        assert ta == tb
        reward = (k % 3) / 2
        a.observe(ta, reward)
        b.observe(tb, reward)
    assert a.stats() == b.stats()
    assert a.state_dict() == b.state_dict()


def test_different_seeds_walk_differently():
    tasks = make_tasks(12)
    walks = {tuple(steps(TaskWalk(tasks, seed, explore=0.0), 12)) for seed in range(6)}
    assert len(walks) > 1


# --------------------------------------------------------------------------- commits


def refund_diff() -> Diff:
    return Diff("d-refund", "prompt", {"rule:refund": "Explain the refund policy first"})


def test_a_commit_leaves_the_affected_unsolved_tasks_for_last():
    tasks = make_tasks(8)  # t0, t4 are about refunds
    walk = TaskWalk(tasks, 1, explore=0.0, relevance=Relevance(tasks))
    walk.observe(tasks[4], 1.0)  # already solved: not counted as presumed
    walk.note_commit(refund_diff(), [])
    assert walk.skipped_presumed == 1
    assert walk.stats() == {"walk_explored": 0, "walk_presumed_solved": 1, "walk_open": 7}
    seen = steps(walk, 36)  # six passes over the six other open tasks
    assert "t0" not in seen and "t4" not in seen
    assert set(seen) == {t.id for t in tasks} - {"t0", "t4"}
    # Once every other task is solved, the presumed one gets its rollout (and no exploration yet).
    for t in tasks:
        if t.id not in {"t0", "t4"}:
            walk.observe(t, 1.0)
    assert steps(walk, 3) == ["t0"] * 3
    assert walk.explored == 0


def test_a_rollout_of_a_presumed_task_replaces_the_presumption():
    tasks = make_tasks(4)
    walk = TaskWalk(tasks, 1, explore=0.0, relevance=Relevance(tasks))
    walk.note_commit(refund_diff(), [])
    assert "t0" not in steps(walk, 6)  # two passes over the three other tasks
    walk.observe(tasks[0], 0.0)  # an exploration step found it still failing
    assert sorted(steps(walk, 4)) == ["t0", "t1", "t2", "t3"]  # back in the passes
    walk.observe(tasks[0], 1.0)
    walk.note_commit(refund_diff(), [])  # solved tasks are not presumed again
    assert walk.skipped_presumed == 1


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=12), st.integers(min_value=0, max_value=2**32),
       st.sets(st.integers(min_value=0, max_value=11)),
       st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=60))
def test_presumed_tasks_wait_while_any_other_task_is_open(n, seed, marked, rewards):
    tasks = make_tasks(n)
    marked_ids = {tasks[i].id for i in marked if i < n}
    relevance = Relevance(tasks, hook=lambda d, trajectory, task: 1.0 if task.id in marked_ids else 0.0)
    walk = TaskWalk(tasks, seed, explore=0.0, relevance=relevance)
    walk.note_commit(refund_diff(), [])
    assert walk.skipped_presumed == len(marked_ids)
    presumed, last = set(marked_ids), {}
    for reward in rewards:
        explored = walk.explored
        task = walk.next()
        open_ids = {t.id for t in tasks if last.get(t.id, 0.0) < 1.0}
        if walk.explored > explored:
            assert not open_ids  # exploration only when nothing is open (explore=0)
        else:
            assert task.id in open_ids
            if task.id in presumed:
                assert open_ids <= presumed  # no other open task was waiting
        walk.observe(task, reward)
        last[task.id] = reward
        presumed.discard(task.id)
    assert walk.stats()["walk_open"] == sum(last.get(t.id, 0.0) < 1.0 for t in tasks)


def test_a_walk_without_relevance_ignores_commits():
    tasks = make_tasks(4)
    walk = TaskWalk(tasks, 1, explore=0.0)
    walk.note_commit(refund_diff(), [])
    assert walk.skipped_presumed == 0
    assert walk.stats()["walk_open"] == 4


def test_a_commit_can_use_the_trajectory_fallback():
    tasks = make_tasks(8)
    walk = TaskWalk(tasks, 1, explore=0.0, relevance=Relevance(tasks))
    unrelated = Diff("d", "prompt", {"rule": "zebra"})
    walk.note_commit(unrelated, [Task("x", "about warranty")])  # t2, t6
    assert walk.skipped_presumed == 2
    assert {"t2", "t6"}.isdisjoint(steps(walk, 36))


# --------------------------------------------------------------------------- state


def test_state_dict_is_json_ready_and_resumes_the_walk_bit_for_bit():
    tasks = make_tasks(10)
    walk = TaskWalk(tasks, 9, explore=0.2, relevance=Relevance(tasks))
    for k in range(13):
        walk.observe(walk.next(), 1.0 if k % 4 == 0 else 0.0)
    walk.note_commit(refund_diff(), [])
    state = json.loads(json.dumps(walk.state_dict()))
    assert state["format"] == "walk/1"
    resumed = TaskWalk(tasks, 12345, explore=0.2, relevance=Relevance(tasks))  # another seed: the state wins
    resumed.load_state_dict(state)
    assert resumed.stats() == walk.stats()
    assert steps(resumed, 50) == steps(walk, 50)


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=15), st.integers(min_value=0, max_value=2**32),
       st.integers(min_value=0, max_value=40), st.sampled_from([0.0, 0.1, 0.5]))
def test_state_dict_round_trips_at_any_point(n, seed, before, explore):
    tasks = make_tasks(n)
    walk = TaskWalk(tasks, seed, explore=explore)
    for k in range(before):
        walk.observe(walk.next(), float(k % 2))
    resumed = TaskWalk(tasks, seed + 1, explore=explore)
    resumed.load_state_dict(json.loads(json.dumps(walk.state_dict())))
    assert resumed.state_dict() == walk.state_dict()
    assert steps(resumed, 20) == steps(walk, 20)


def test_load_state_dict_skips_tasks_no_longer_in_the_train_set():
    tasks = make_tasks(6)
    walk = TaskWalk(tasks, 4, explore=0.0, relevance=Relevance(tasks))
    walk.next()
    walk.observe(tasks[1], 0.5)
    walk.note_commit(refund_diff(), [])  # t0, t4 presumed
    state = json.loads(json.dumps(walk.state_dict()))
    fewer = [t for t in tasks if t.id not in {"t0", "t1"}]
    resumed = TaskWalk(fewer, 4, explore=0.0)
    resumed.load_state_dict(state)
    saved = resumed.state_dict()
    assert "t1" not in saved["last"]
    assert saved["presumed"] == ["t4"]
    assert "t0" not in saved["queue"] and "t1" not in saved["queue"]
    assert set(steps(resumed, 30)) <= {t.id for t in fewer}


@pytest.mark.parametrize("state", [{}, {"format": "walk/0", "rng": None}])
def test_an_unknown_state_format_starts_a_fresh_walk(state):
    tasks = make_tasks(5)
    walk = TaskWalk(tasks, 8, explore=0.1)
    walk.load_state_dict(state)
    assert steps(walk, 20) == steps(TaskWalk(tasks, 8, explore=0.1), 20)
