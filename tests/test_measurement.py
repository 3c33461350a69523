"""One candidate's held-out evaluation (`agentdescent.merge.measurement.Measurer`).

The evaluators are small real ones written here. `TableEvaluator` is deterministic: a
state's ``name`` value picks its row of per-task scores, and it records every call (the
tasks asked for, per state, in order). `NoisyEvaluator` draws every score afresh from a
seeded ``random.Random`` (a pass with the row's probability). `GlitchEvaluator` is a table
whose chosen (state, task) pairs come out flipped the first time they are scored, and right
ever after: noise the head-only noise probe cannot see. `SilentEvaluator` has no ``rescore``
(the seam's default: it cannot draw again). The held-out tasks are 40 customer questions on
five topics, eight each (task ``i`` is about ``TOPICS[i % 5]``); a diff that writes a rule
naming a topic plausibly affects that topic's eight tasks (the stratum, at most
`STRATUM_SHARE` of the units). The knobs the counts depend on are pinned (`PINNED`).
"""

from __future__ import annotations

import collections
import json
import math
import random
from collections.abc import Mapping, Sequence

import pytest

from agentdescent import MergeOutcome
from agentdescent.errors import InvalidArgument
from agentdescent.ledger import MemoryLedger
from agentdescent.merge.acceptance import local_sample_size, run_level
from agentdescent.merge.aggregator import Aggregator, AggregatorConfig
from agentdescent.merge.governance import Layer
from agentdescent.merge.measurement import (
    CONFIRM_GAINS,
    STRATUM_SHARE,
    Evaluator,
    Measurement,
    Measurer,
    Prepared,
)
from agentdescent.merge.units import evidence_units
from agentdescent.types import Diff, EvidenceCard, Task

ART = "prompt"
TOPICS = ["refund", "shipping", "warranty", "billing", "login"]
N = 40
TASKS = [Task(f"h{i}", f"Customer asks about {TOPICS[i % 5]}: case c{i}") for i in range(N)]


def topic_tasks(topic: str, n: int = N, topics: Sequence[str] = TOPICS) -> set[int]:
    return {i for i in range(n) if topics[i % len(topics)] == topic}


REFUND, SHIPPING, LOGIN = topic_tasks("refund"), topic_tasks("shipping"), topic_tasks("login")

#: The head passes the login tasks and fails every other.
HEAD_ROW = [1.0 if i in LOGIN else 0.0 for i in range(N)]


def row_with(base: Sequence[float], solves: set[int] = frozenset(), breaks: set[int] = frozenset()) -> list[float]:
    return [0.0 if i in breaks else 1.0 if i in solves else base[i] for i in range(len(base))]


TABLES = {
    "head": HEAD_ROW,
    "refund-fix": row_with(HEAD_ROW, solves=REFUND),
    "login-break": row_with(HEAD_ROW, breaks=LOGIN),
    "junk": list(HEAD_ROW),  # changes nothing
    "two-fix": row_with(HEAD_ROW, solves=REFUND | SHIPPING),
}
HEAD = {"name": "head", "system": "You are a support agent."}


def diff(name: str, *topics: str, note: str = "") -> Diff:
    ops = {"name": name}
    for topic in topics:
        ops[f"rule:{topic}"] = f"Handle every {topic} question with care{note}"
    return Diff(f"d-{name}{note}", ART, ops)


class TableEvaluator(Evaluator):
    """A deterministic table, recording every call."""

    def __init__(self, tables: Mapping[str, Sequence[float]] = TABLES, tasks: Sequence[Task] | None = TASKS,
                 *, can_redraw: bool = True) -> None:
        self.tables = dict(tables)
        self.can_redraw = can_redraw
        self.held_out_tasks = list(tasks) if tasks is not None else None
        self.n = len(next(iter(self.tables.values())))
        self.scored: collections.Counter[str] = collections.Counter()  # name -> tasks scored
        self.batches: list[tuple[str, tuple[int, ...]]] = []  # (name, indices) per held_out_subset call
        self.redrawn: list[tuple[str, tuple[int, ...]]] = []  # (name, indices) per rescore call

    def row(self, state: Mapping[str, str]) -> Sequence[float]:
        return self.tables[state.get("name", "head")]

    def held_out(self, artifact_id: str, state: Mapping[str, str]) -> Sequence[float]:
        self.scored[state.get("name", "head")] += self.n
        return list(self.row(state))

    def cheap(self, artifact_id: str, state: Mapping[str, str]) -> float:
        return sum(self.row(state)) / self.n

    def held_out_subset(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> Sequence[float]:
        name = state.get("name", "head")
        self.scored[name] += len(indices)
        self.batches.append((name, tuple(indices)))
        row = self.row(state)
        return [row[i] for i in indices]

    def rescore(self, artifact_id: str, state: Mapping[str, str], indices: Sequence[int]) -> Sequence[float] | None:
        if not self.can_redraw:
            return None
        self.redrawn.append((state.get("name", "head"), tuple(indices)))
        row = self.row(state)
        return [row[i] for i in indices]

    def order(self, name: str) -> list[int]:
        """The tasks ``name`` was scored on (held_out_subset), in order."""
        return [i for n, batch in self.batches if n == name for i in batch]

    def redraws(self, name: str) -> list[int]:
        return [i for n, batch in self.redrawn if n == name for i in batch]


class NoisyEvaluator(TableEvaluator):
    """Every score a fresh draw: 1.0 with the row's probability, from one seeded generator."""

    def __init__(self, tables: Mapping[str, Sequence[float]], seed: int, tasks: Sequence[Task] = TASKS) -> None:
        super().__init__(tables, tasks)
        self.rng = random.Random(seed)

    def _draw(self, state: Mapping[str, str], indices: Sequence[int]) -> list[float]:
        row = self.row(state)
        return [float(self.rng.random() < row[i]) for i in indices]

    def held_out_subset(self, artifact_id, state, indices):
        super().held_out_subset(artifact_id, state, indices)
        return self._draw(state, indices)

    def rescore(self, artifact_id, state, indices):
        super().rescore(artifact_id, state, indices)
        return self._draw(state, indices)


class GlitchEvaluator(TableEvaluator):
    """A table, except that each (state name, task) in ``glitch`` comes out flipped the first time it is scored."""

    def __init__(self, tables: Mapping[str, Sequence[float]] = TABLES, glitch: set[tuple[str, int]] = frozenset(),
                 **kw) -> None:
        super().__init__(tables, **kw)
        self.glitch = set(glitch)
        self.draws: collections.Counter[tuple[str, int]] = collections.Counter()

    def _flip(self, state: Mapping[str, str], indices: Sequence[int], scores: Sequence[float]) -> list[float]:
        name = state.get("name", "head")
        out = []
        for i, x in zip(indices, scores):
            self.draws[name, i] += 1
            out.append(1.0 - x if (name, i) in self.glitch and self.draws[name, i] == 1 else x)
        return out

    def held_out_subset(self, artifact_id, state, indices):
        return self._flip(state, indices, super().held_out_subset(artifact_id, state, indices))

    def rescore(self, artifact_id, state, indices):
        return self._flip(state, indices, super().rescore(artifact_id, state, indices))


class SilentEvaluator(Evaluator):
    """Names its tasks and scores subsets, but has no ``rescore``: the seam's default (None)."""

    held_out_tasks = TASKS

    def __init__(self) -> None:
        self.asked: list[tuple[str, tuple[int, ...]]] = []

    def held_out(self, artifact_id, state):
        return list(TABLES[state.get("name", "head")])

    def cheap(self, artifact_id, state):
        return 0.0

    def held_out_subset(self, artifact_id, state, indices):
        self.asked.append((state.get("name", "head"), tuple(indices)))
        row = TABLES[state.get("name", "head")]
        return [row[i] for i in indices]


def prepared(d: Diff, version: int = 1, head_state: Mapping[str, str] = HEAD,
             trajectory: Sequence[Task] = ()) -> Prepared:
    card = EvidenceCard(d, {ART: version}, None, None, list(trajectory))
    return Prepared(ART, version, dict(head_state), 0.5, Layer.L2_FAST, d, False, [card], card, 1, 0, 0)


#: The knobs the counts below depend on, pinned (the tests do not follow a change of defaults).
PINNED = {"false_accept_rate": 0.05, "eval_batch": 4, "futility_sample": 8, "noise_probe": 16, "rescore_draws": 2}


def measurer(evaluator: Evaluator, **config) -> Measurer:
    return Measurer(evaluator, AggregatorConfig(**{**PINNED, **config}), collections.Counter())


def declared(evaluator: Evaluator, **config) -> Measurer:
    """A measurer told the evaluation is deterministic (no probe, no confirming draws)."""
    return measurer(evaluator, rescore="deterministic", **config)


def commit(m: Measurer, parent: int, version: int, measurement: Measurement) -> None:
    """What the aggregator does on a commit of the measured candidate's own state."""
    m.scoreboard.commit(ART, parent, version, measurement.candidate_scores, measurement.projected,
                        measurement.touched)


# --------------------------------------------------------------------------- deterministic: the sequential test


def test_a_clear_gain_is_accepted_early_and_costs_less_than_the_full_evaluation():
    ev = TableEvaluator()
    m = declared(ev)
    out = m.measure(prepared(diff("refund-fix", "refund")))
    acc = out.acceptance
    assert acc.settled and acc.accept and not acc.certain
    assert acc.reason.startswith("paired test passed for the full held-out mean: 8 gain(s), 0 loss(es)")
    assert acc.sampling == "without-replacement" and acc.null == "full" and acc.level == 0.05
    assert acc.gains == 8 and acc.losses == 0 and acc.e_value >= acc.threshold == pytest.approx(20.0)
    assert out.n == N and 8 < out.scored < N
    assert ev.scored["refund-fix"] == out.scored and ev.scored["head"] == out.scored
    assert m.counters["held_out_tasks_scored"] == out.scored
    assert m.counters["held_out_tasks_saved"] == N - out.scored
    assert m.counters["accepted_early"] == 1 and m.counters["held_out_evals"] == 1
    assert set(out.candidate_scores) == set(out.head_scores) == set(ev.order("refund-fix"))
    assert ev.redrawn == []  # declared: nothing drawn again

    full_ev = TableEvaluator()
    full = declared(full_ev, sequential=False).measure(prepared(diff("refund-fix", "refund")))
    assert full.acceptance.accept and full.scored == N
    assert sum(full_ev.scored.values()) == 2 * N > sum(ev.scored.values())


def test_the_stratum_is_scored_first_and_fully():
    ev = TableEvaluator()
    out = declared(ev).measure(prepared(diff("refund-fix", "refund")))
    order = ev.order("refund-fix")
    assert order[:8] == sorted(REFUND)  # the affected units (all equally relevant: in index order)
    assert not set(order[8:]) & REFUND
    assert ev.order("head") == order  # the head is scored on the same tasks, look by look
    assert [len(b) for n, b in ev.batches if n == "refund-fix"] == [4] * math.ceil(len(order) / 4)
    assert out.affected == REFUND and out.touched == REFUND
    assert f"(8 of 8 affected units, {len(order) - 8} sampled)" in out.acceptance.reason


def test_the_most_relevant_units_come_first_up_to_the_stratum_share():
    """A ranking (here a user hook) that puts shipping above refund: shipping first, then refund, up to the cap."""

    def hook(d: Diff, trajectory: Sequence[Task], task: Task) -> float:
        return 2.0 if "shipping" in task.prompt else 1.0 if "refund" in task.prompt else 0.0

    ev = TableEvaluator()
    out = declared(ev, sequential=False, relevance=hook).measure(prepared(diff("two-fix", "refund", "shipping")))
    order = ev.order("two-fix")
    cap = max(1, int(STRATUM_SHARE * N))
    assert 8 <= cap < 16  # all of shipping fits, not all of refund too
    stratum = (sorted(SHIPPING) + sorted(REFUND))[:cap]
    assert order[:cap] == stratum
    assert out.affected == set(SHIPPING) | set(REFUND)  # every task it plausibly changes, beyond the cap too
    assert f"({cap} of {cap} affected" in out.acceptance.reason


def test_a_diff_that_affects_every_task_gets_a_stratum_of_at_most_the_share():
    ev = TableEvaluator()
    out = declared(ev, sequential=False, relevance=lambda d, trajectory, task: 1.0).measure(
        prepared(diff("junk", "refund")))
    cap = max(1, int(STRATUM_SHARE * N))
    assert ev.order("junk")[:cap] == list(range(cap))  # equally relevant: the first units, in index order
    assert f"({cap} of {cap} affected" in out.acceptance.reason
    assert out.affected == set(range(N))  # affected, all of them (the head estimate's clean scores)
    assert not out.acceptance.accept


def test_a_commit_touches_every_task_its_diff_plausibly_changes_not_only_the_stratum():
    def hook(d: Diff, trajectory: Sequence[Task], task: Task) -> float:
        return 2.0 if "shipping" in task.prompt else 1.0 if "refund" in task.prompt else 0.0

    ev = TableEvaluator()
    m = declared(ev, relevance=hook)
    m.measure_head(ART, 1, HEAD, sample=N)
    out = m.measure(prepared(diff("two-fix", "refund", "shipping")))
    assert out.acceptance.accept
    commit(m, 1, 2, out)
    assert out.touched >= REFUND | SHIPPING
    assert all(m.scoreboard.clean(ART, 2, i) is None for i in REFUND | SHIPPING)


def full_order(d: Diff, version: int = 1, tables: Mapping[str, Sequence[float]] = TABLES) -> list[int]:
    ev = TableEvaluator(tables)
    declared(ev, sequential=False).measure(prepared(d, version))
    return ev.order(d.ops["name"])


def test_the_other_units_come_in_a_seeded_order_that_repeats_bit_for_bit():
    d = diff("refund-fix", "refund")
    order = full_order(d)
    assert len(order) == N and order[:8] == sorted(REFUND)
    assert sorted(order[8:]) == sorted(set(range(N)) - REFUND)
    runs = []
    for _ in range(2):
        ev = TableEvaluator()
        out = declared(ev).measure(prepared(d))
        runs.append((out.candidate_scores, out.head_scores, out.acceptance, ev.batches))
    assert runs[0] == runs[1]
    assert full_order(d) == order
    # Another diff (same effect, other text) and another head version shuffle the others differently.
    assert full_order(diff("refund-fix", "refund", note=" and patience"))[8:] != order[8:]
    assert full_order(d, version=2)[8:] != order[8:]


def test_the_order_of_the_other_units_is_spread_uniformly_over_versions():
    """Over 200 head versions the first sampled unit is each of the 32 others about equally often."""
    firsts = collections.Counter(full_order(diff("refund-fix", "refund"), v)[8] for v in range(200))
    assert set(firsts) <= set(range(N)) - REFUND
    assert len(firsts) >= 28 and max(firsts.values()) <= 20


#: The head passes four shipping tasks; "refund-swap" fixes four refund tasks (the stratum) and breaks those.
SWAP_FIXED, SWAP_BROKEN = set(sorted(REFUND)[:4]), set(sorted(SHIPPING)[:4])
SWAP_TABLES = {"head": row_with(HEAD_ROW, solves=SWAP_BROKEN),
               "refund-swap": row_with(HEAD_ROW, solves=SWAP_FIXED, breaks=SWAP_BROKEN)}
SWAP_HEAD = {**HEAD, "name": "head"}


def test_a_swap_candidate_is_rejected():
    """Four fixed where the diff points, four broken elsewhere: the full mean ties."""
    for max_regressions in (0, None):
        ev = TableEvaluator(SWAP_TABLES)
        out = declared(ev, max_regressions=max_regressions).measure(
            prepared(diff("refund-swap", "refund"), head_state=SWAP_HEAD))
        acc = out.acceptance
        assert acc.settled and not acc.accept, acc.reason
        assert out.affected == REFUND
        if max_regressions == 0:
            assert acc.reason.startswith("regresses 1 held-out task(s)")


def test_a_swap_candidate_is_accepted_at_most_at_the_stated_rate_over_head_versions():
    """The guard off, 300 head versions (300 seeded orders): accepted at most 0.05 + 3 sigma of the time."""
    accepted = 0
    for version in range(1, 301):
        ev = TableEvaluator(SWAP_TABLES)
        out = declared(ev, max_regressions=None, futility_sample=0).measure(
            prepared(diff("refund-swap", "refund"), version, SWAP_HEAD))
        accepted += out.acceptance.accept
    assert accepted / 300 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 300), accepted


T6 = ["refund", "shipping", "login", "billing", "warranty", "returns"]
TASKS24 = [Task(f"t{i}", f"Customer asks about {T6[i % 6]}: case c{i}") for i in range(24)]
GAINS24 = topic_tasks("shipping", 24, T6) | topic_tasks("login", 24, T6)


def test_gains_the_relevance_ranking_misses_are_still_found():
    """+8 of 24 where the diff's text names another topic: the stratum ties, the sample finds the gains."""
    tables = {"head": [0.0] * 24, "ship-fix": [1.0 if i in GAINS24 else 0.0 for i in range(24)]}
    for version in range(1, 6):
        ev = TableEvaluator(tables, TASKS24)
        d = Diff("d-x", ART, {"name": "ship-fix", "rule:refund": "Handle every refund question"})
        out = declared(ev).measure(prepared(d, version))
        acc = out.acceptance
        assert acc.accept, acc.reason
        assert out.affected == topic_tasks("refund", 24, T6)
        assert ev.order("ship-fix")[:4] == sorted(out.affected)
        assert out.scored < 24 and acc.gains >= 1


#: A head that passes four login tasks, fully measured; "refund-fix4" fixes the eight refund tasks.
HEAD4 = row_with([0.0] * N, solves=set(sorted(LOGIN)[:4]))
CERTAIN_TABLES = {"head": HEAD4, "refund-fix4": row_with(HEAD4, solves=REFUND)}


def test_a_gain_the_unscored_tasks_cannot_undo_is_accepted_for_certain():
    """The head fully measured (it passes 4 tasks): +8 in the stratum; the 32 unscored tasks can lose 4 at most."""
    ev = TableEvaluator(CERTAIN_TABLES)
    m = declared(ev)
    m.measure_head(ART, 1, HEAD, sample=N)
    out = m.measure(prepared(diff("refund-fix4", "refund")))
    acc = out.acceptance
    assert acc.accept and acc.certain and acc.confidence == 1.0
    assert acc.reason.startswith("the full held-out mean is better for certain (the unscored tasks cannot undo it): "
                                 "a net gain of 8; ")
    assert out.scored == 8 and acc.e_value == 1.0  # the stratum alone: the random order never started


def test_a_regression_ends_the_evaluation_at_the_first_look():
    ev = TableEvaluator()
    m = declared(ev)
    out = m.measure(prepared(diff("login-break", "login")))
    acc = out.acceptance
    assert acc.settled and not acc.accept
    assert acc.reason.startswith("regresses 4 held-out task(s) the head passes (tolerated: 0)")
    assert out.scored == 4 and set(out.candidate_scores) <= LOGIN
    assert m.counters["rejected_early"] == 1 and ev.redrawn == []


def test_a_candidate_that_changes_nothing_is_rejected_by_futility():
    ev = TableEvaluator()
    m = declared(ev, futility_sample=8)
    out = m.measure(prepared(diff("junk", "refund")))
    assert not out.acceptance.accept
    assert out.acceptance.reason.startswith("futility: no net gain after the affected tasks and 8 sampled unit(s)")
    assert out.scored == 16 and m.counters["futility_stops"] == 1


def test_sequential_false_scores_every_task_before_deciding():
    ev = TableEvaluator()
    m = declared(ev, sequential=False)
    out = m.measure(prepared(diff("refund-fix", "refund")))
    assert out.acceptance.accept and out.acceptance.certain  # every task scored: a net gain is a fact
    assert out.scored == N and ev.scored["refund-fix"] == N
    assert [n for n, _ in ev.batches] == ["refund-fix", "head"]  # one look
    assert m.counters["held_out_tasks_saved"] == 0 and m.counters["accepted_early"] == 0


# --------------------------------------------------------------------------- the head's scores


def test_measure_head_scores_a_seeded_sample_once():
    ev = TableEvaluator()
    m = measurer(ev)
    estimate = m.measure_head(ART, 1, HEAD, sample=10)
    assert estimate.measured == 10 and estimate.tasks == N
    assert ev.scored["head"] == 10 and m.counters["head_tasks_scored"] == 10
    sampled = ev.batches[0][1]
    assert estimate.reward == pytest.approx(sum(HEAD_ROW[i] for i in sampled) / 10)
    again = m.measure_head(ART, 1, HEAD, sample=10)
    assert ev.scored["head"] == 10 and again == estimate  # nothing missing: no call
    more = m.measure_head(ART, 1, HEAD, sample=N)
    assert ev.scored["head"] == 10 and more == estimate  # a head with scores is not sampled again
    other = TableEvaluator()
    measurer(other).measure_head(ART, 1, HEAD, sample=10)
    assert other.batches == ev.batches[:1]  # the same seeded sample


def test_measure_head_does_not_score_a_restored_head_again():
    """A resumed run restores its head's scores (measured and inherited): measure_head spends nothing on it."""
    ev = TableEvaluator()
    m = declared(ev)
    m.measure_head(ART, 1, HEAD, sample=10)
    first = m.measure(prepared(diff("refund-fix", "refund")))
    commit(m, 1, 2, first)
    new_head = diff("refund-fix", "refund").apply(HEAD)
    saved = json.loads(json.dumps(m.scoreboard.state_dict(ART, 2)))

    resumed_ev = TableEvaluator()
    resumed = declared(resumed_ev)
    resumed.scoreboard.load_state_dict(ART, 2, saved)
    estimate = resumed.measure_head(ART, 2, new_head, sample=10)
    assert resumed_ev.scored == {} and resumed_ev.batches == []
    assert resumed.counters["head_tasks_scored"] == 0
    assert estimate == m.scoreboard.estimate(ART, 2)
    only_inherited = declared(TableEvaluator())
    only_inherited.scoreboard.load_state_dict(ART, 2, {"inherited": saved["inherited"]})
    only_inherited.measure_head(ART, 2, new_head, sample=10)
    assert only_inherited.evaluator.scored == {}
    fresh = declared(TableEvaluator())
    assert fresh.measure_head(ART, 2, new_head, sample=10).measured == 10


def test_the_head_estimate_after_a_gaining_commit_imputes_from_the_clean_scores():
    """The never-scored tasks of a committed head are imputed from earlier measurements outside the diff's tasks."""
    ev = TableEvaluator()
    m = declared(ev)
    m.measure_head(ART, 1, HEAD, sample=10)
    first = m.measure(prepared(diff("refund-fix", "refund")))
    assert first.acceptance.accept and first.touched == REFUND
    commit(m, 1, 2, first)
    board = m.scoreboard
    known = {**board.inherited(ART, 2), **board.measured(ART, 2)}
    clean = {i: board.clean(ART, 2, i) for i in range(N) if board.clean(ART, 2, i) is not None}
    assert clean and not set(clean) & REFUND  # the gains are not clean
    fill = sum(clean.values()) / len(clean)
    estimate = board.estimate(ART, 2)
    assert estimate.reward == pytest.approx(sum(known.get(i, fill) for i in range(N)) / N)


def test_known_head_scores_are_not_scored_again():
    ev = TableEvaluator()
    m = declared(ev)
    m.measure_head(ART, 1, HEAD, sample=N)
    out = m.measure(prepared(diff("refund-fix", "refund")))
    assert out.acceptance.accept
    assert ev.scored["head"] == N  # the candidate's evaluation used the board
    assert out.head_scores == {i: HEAD_ROW[i] for i in out.candidate_scores}
    assert m.counters["head_tasks_scored"] == N


def test_complete_scores_the_rest_for_the_oracle_gate():
    ev = TableEvaluator()
    m = declared(ev)
    p = prepared(diff("refund-fix", "refund"))
    out = m.measure(p)
    assert out.scored < N
    cand_mean, head_mean = m.complete(p, out)
    assert cand_mean == pytest.approx(sum(TABLES["refund-fix"]) / N)
    assert head_mean == pytest.approx(sum(HEAD_ROW) / N)
    assert ev.scored["refund-fix"] == N and ev.scored["head"] == N
    assert m.counters["held_out_tasks_scored"] == N and m.counters["held_out_tasks_saved"] == 0
    assert len(out.candidate_scores) == len(out.head_scores) == N


# --------------------------------------------------------------------------- the noise probe


def test_the_probe_learns_a_deterministic_evaluation_once():
    """``rescore="auto"``: the head is drawn again at most ``noise_probe`` times, once; later decisions draw nothing more."""
    ev = TableEvaluator()
    m = measurer(ev, noise_probe=6)
    assert m.noise.state == "unknown"
    out = m.measure(prepared(diff("login-break", "login")))  # rejected: no confirmation either
    assert m.noise.state == "deterministic" and not m.noise.declared
    assert m.counters["probe_redraws"] == 6 == len(ev.redraws("head")) == m.noise.redraws == m.noise.agreements
    assert [n for n, _ in ev.redrawn] == ["head"]  # one call, on the head only
    probed = ev.redraws("head")
    assert set(probed) <= set(ev.order("head")[:6])  # tasks the head was scored on first
    assert out.acceptance.sampling == "without-replacement" and not out.acceptance.accept
    assert m.counters["held_out_draws"] == 0

    ev.redrawn.clear()
    again = m.measure(prepared(diff("junk", "refund")))
    assert not again.acceptance.accept and ev.redrawn == []  # no probe, no draws
    assert m.counters["probe_redraws"] == 6


def test_a_learned_deterministic_acceptance_redraws_its_gains_once_on_both_sides():
    ev = TableEvaluator()
    m = measurer(ev)
    out = m.measure(prepared(diff("refund-fix", "refund")))
    assert out.acceptance.accept and m.noise.deterministic
    gains = [i for i in out.candidate_scores if out.candidate_scores[i] > out.head_scores[i]][:CONFIRM_GAINS]
    assert ev.redrawn[1:] == [("refund-fix", tuple(gains)), ("head", tuple(gains))]
    assert m.counters["confirm_redraws"] == 2 * CONFIRM_GAINS
    assert m.counters["confirmations_overturned"] == 0
    assert m.noise.deterministic


def test_a_noisy_evaluator_is_tested_with_fresh_draws_on_both_sides():
    good = {"head": [0.3] * N, "refund-fix": [0.95 if i in REFUND else 0.3 for i in range(N)]}
    for seed in range(3):
        ev = NoisyEvaluator(good, seed)
        m = measurer(ev)
        out = m.measure(prepared(diff("refund-fix", "refund")))
        assert m.noise.state == "noisy"
        assert out.acceptance.sampling == "with-replacement"
        assert ev.order("refund-fix") == []  # the candidate is never scored once and cached
        probe, *draws = ev.redrawn
        assert probe[0] == "head"
        cand_calls = [b for n, b in draws if n == "refund-fix"]
        assert cand_calls == [b for n, b in draws if n == "head"]  # every draw on both sides, the same tasks
        assert [n for n, _ in draws] == ["refund-fix", "head"] * len(cand_calls)
        drawn = sum(len(b) for b in cand_calls) - m.counters["regression_redraws"] // 2
        assert m.counters["held_out_draws"] == drawn > 0
        assert out.scored == len(out.candidate_scores) <= m.counters["held_out_draws"]


def test_a_noisy_neutral_candidate_is_rarely_accepted_and_a_noisy_good_one_often_is():
    neutral = {"head": [0.5] * N, "refund-fix": [0.5] * N}
    good = {"head": [0.05] * N, "refund-fix": [0.95 if i in REFUND else 0.05 for i in range(N)]}
    runs = 300
    false_accepts = sum(measurer(NoisyEvaluator(neutral, s), max_regressions=None)
                        .measure(prepared(diff("refund-fix", "refund"))).acceptance.accept for s in range(runs))
    assert false_accepts / runs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / runs), false_accepts
    accepts = sum(measurer(NoisyEvaluator(good, s))
                  .measure(prepared(diff("refund-fix", "refund"))).acceptance.accept for s in range(40))
    assert accepts >= 20, accepts


def test_a_confirmed_regression_rejects():
    """A fixed ``rescore=2``: a would-be regression is drawn twice more on each side, and holds."""
    ev = TableEvaluator()
    m = measurer(ev, rescore=2)
    out = m.measure(prepared(diff("login-break", "login")))
    acc = out.acceptance
    assert acc.settled and not acc.accept and acc.sampling == "with-replacement"
    assert acc.reason.startswith("regresses 1 held-out task(s) the head passes, confirmed by re-drawing "
                                 "(tolerated: 0)")
    suspect = next(i for n, b in ev.redrawn if len(b) == 2 and b[0] == b[1] for i in b[:1])
    assert suspect in LOGIN
    assert ("login-break", (suspect, suspect)) in ev.redrawn and ("head", (suspect, suspect)) in ev.redrawn
    assert m.counters["regression_redraws"] == 4 * acc.regressions


def test_an_unconfirmed_regression_does_not_count():
    """The candidate's first draw of each login task glitches to 0 (the head passes it); the re-draws say 1."""
    ev = GlitchEvaluator(glitch={("two-fix", i) for i in LOGIN})
    m = measurer(ev, rescore=2)
    out = m.measure(prepared(diff("two-fix", "refund", "shipping")))
    acc = out.acceptance
    suspects = [b[0] for n, b in ev.redrawn if n == "two-fix" and len(b) == 2 and b[0] == b[1]]
    assert suspects and set(suspects) <= LOGIN  # would-be regressions, each drawn twice more
    assert m.counters["regression_redraws"] == 4 * len(suspects)
    assert acc.regressions == 0 and acc.losses >= len(suspects)  # the glitched draws still count as losses
    assert acc.accept, acc.reason


def test_a_learned_deterministic_acceptance_whose_gains_do_not_reproduce_is_tested_again_with_fresh_draws():
    """The probe sees the head only (deterministic); the junk candidate's refund tasks glitch on their first score.

    The without-replacement test accepts the glitched gains; drawing them again disagrees, the
    evaluation is noisy for good, and the fresh-draw test finds nothing.
    """
    glitch = {("junk", i) for i in REFUND}
    ev = GlitchEvaluator(glitch=glitch)
    m = measurer(ev)
    out = m.measure(prepared(diff("junk", "refund")))
    acc = out.acceptance
    assert m.counters["probe_redraws"] >= 1 and m.counters["confirm_redraws"] >= 2
    assert m.counters["confirmations_overturned"] == 1
    assert m.noise.state == "noisy"
    assert acc.sampling == "with-replacement" and not acc.accept
    assert m.counters["held_out_draws"] > 0

    # Declared deterministic: nothing is drawn again, and the glitch is taken as a fact.
    trusting = declared(GlitchEvaluator(glitch=glitch))
    assert trusting.measure(prepared(diff("junk", "refund"))).acceptance.accept
    assert trusting.counters["confirm_redraws"] == 0


def test_noise_switched_on_after_the_probe_is_caught_by_the_confirmation():
    """The probe's re-draws agree; noise starts right after (every candidate score of a refund task flips once)."""

    class LateNoise(GlitchEvaluator):
        def rescore(self, artifact_id, state, indices):
            out = super().rescore(artifact_id, state, indices)
            self.glitch |= {("junk", i) for i in REFUND}  # the noise starts once the probe is done
            return out

    ev = LateNoise()
    m = measurer(ev)
    out = m.measure(prepared(diff("junk", "refund")))
    assert m.counters["confirmations_overturned"] == 1
    assert not out.acceptance.accept and out.acceptance.sampling == "with-replacement"


def test_an_evaluator_without_rescore_is_measured_without_replacement():
    ev = SilentEvaluator()
    m = measurer(ev)
    out = m.measure(prepared(diff("refund-fix", "refund")))
    acc = out.acceptance
    assert acc.accept and acc.sampling == "without-replacement"
    assert m.noise.state == "unknown"  # nothing could be learned
    assert m.counters["probe_redraws"] == 0 and m.counters["confirm_redraws"] == 0
    assert m.counters["held_out_draws"] == 0
    assert [i for n, b in ev.asked if n == "refund-fix" for i in b][:8] == sorted(REFUND)
    second = m.measure(prepared(diff("login-break", "login")))
    assert not second.acceptance.accept and second.acceptance.sampling == "without-replacement"


def test_an_evaluator_without_rescore_is_probed_once_in_a_run():
    """`Measurer._probe`: "once in a run"; an evaluator that cannot draw again is then taken as it is."""
    ev = SilentEvaluator()
    m = measurer(ev)
    m.measure(prepared(diff("refund-fix", "refund")))
    ev.asked.clear()
    out = m.measure(prepared(diff("login-break", "login"), version=7))  # a head with nothing measured yet
    head = {i for n, b in ev.asked if n == "head" for i in b}
    assert head <= set(out.candidate_scores), (len(head), out.scored)


def test_a_fixed_rescore_with_an_evaluator_that_cannot_draw_again_falls_back_to_without_replacement():
    ev = TableEvaluator(can_redraw=False)
    m = measurer(ev, rescore=2)
    out = m.measure(prepared(diff("refund-fix", "refund")))
    assert out.acceptance.accept and out.acceptance.sampling == "without-replacement"
    assert m.counters["held_out_draws"] == 0


def test_rescore_zero_takes_every_score_as_it_came():
    ev = TableEvaluator()
    m = measurer(ev, rescore=0)
    out = m.measure(prepared(diff("refund-fix", "refund")))
    assert out.acceptance.accept and out.acceptance.sampling == "without-replacement"
    assert m.counters["probe_redraws"] == 0 and m.counters["held_out_draws"] == 0


def test_rescore_zero_spends_no_confirming_draws():
    ev = TableEvaluator()
    m = measurer(ev, rescore=0)
    assert m.measure(prepared(diff("refund-fix", "refund"))).acceptance.accept
    assert ev.redrawn == [] and m.counters["confirm_redraws"] == 0


@pytest.mark.parametrize("knob,value", [("error_control", "per_step"), ("acceptance_null", "half"),
                                        ("local_regression_share", 0.0), ("local_regression_share", 1.5),
                                        ("evidence_groups", 3)])
def test_a_bad_acceptance_knob_is_refused_naming_it(knob, value):
    with pytest.raises(InvalidArgument, match=knob):
        AggregatorConfig(**{knob: value})


@pytest.mark.parametrize("gone", ["random_share", "coverage_sample"])
def test_the_removed_knobs_are_gone(gone):
    with pytest.raises(TypeError, match=gone):
        AggregatorConfig(**{gone: 0.1})


# --------------------------------------------------------------------------- units of evidence


def test_evidence_units_join_duplicate_prompts_and_groups():
    tasks = [Task("a", "p1", {"g": 1}), Task("b", "p2", {"g": 1}), Task("c", "p1"), Task("d", "p3"),
             Task("e", "p4", {"g": 2}), Task("f", "p5", {"g": 2}), Task("h", "p4")]
    assert evidence_units(None, 3, None) == [[0], [1], [2]]
    assert evidence_units(tasks, 7, None) == [[0, 2], [1], [3], [4, 6], [5]]  # duplicate prompts only
    # A meta key: a group is one unit, and a prompt shared across units still joins them.
    assert evidence_units(tasks, 7, "g") == [[0, 1, 2], [3], [4, 5, 6]]
    assert evidence_units(tasks, 7, "missing") == evidence_units(tasks, 7, None)
    # A callable: its key groups; None leaves a task to its prompt.
    by_vowel = evidence_units(tasks, 7, lambda t: "v" if t.id in "ae" else None)
    assert by_vowel == [[0, 2, 4, 6], [1], [3], [5]]


GROUPED = [Task(f"h{i}", f"Customer asks about {TOPICS[i % 5]}: case c{i}", {"thread": i % 20}) for i in range(N)]


def test_an_evidence_group_is_one_unit_scored_in_one_look():
    ev = TableEvaluator(tasks=GROUPED)
    m = declared(ev, evidence_groups="thread")
    assert m.units == [[u, u + 20] for u in range(20)]
    out = m.measure(prepared(diff("refund-fix", "refund")))
    acc = out.acceptance
    assert acc.accept and " of 40 task(s) in 20 unit(s) " in acc.reason and "(4 of 4 affected" in acc.reason
    for name, batch in ev.batches:
        if name == "refund-fix":
            assert all((i + 20) % 40 in batch for i in batch), batch  # whole groups only
    assert set(ev.order("refund-fix")[:8]) == REFUND  # the four refund groups first


# --------------------------------------------------------------------------- per-run error control (Aggregator)


def run_three_decisions(**config) -> tuple[list, Aggregator]:
    tables = dict(TABLES)
    tables["shipping-fix"] = row_with(TABLES["refund-fix"], solves=SHIPPING)
    ev = TableEvaluator(tables)
    ledger = MemoryLedger()
    ledger.register(ART, HEAD, 0.2)
    agg = Aggregator(ledger, ev, AggregatorConfig(**{**PINNED, "rescore": "deterministic", **config}))
    reports = []
    for version, name, topic in [(1, "refund-fix", "refund"), (2, "login-break", "login"),
                                 (2, "shipping-fix", "shipping")]:
        agg.ingest(EvidenceCard(diff(name, topic), {ART: version}, 0.1, 0.0, []))
        [report] = agg.step()
        reports.append(report)
    return reports, agg


def test_per_run_error_control_tests_decision_j_at_rate_over_j_j_plus_1():
    reports, agg = run_three_decisions(error_control="per_run", false_accept_rate=0.05)
    assert [r.outcome for r in reports] == [MergeOutcome.COMMITTED, MergeOutcome.BELOW_THRESHOLD,
                                            MergeOutcome.COMMITTED]
    levels = [r.evidence["level"] for r in reports]
    assert levels == pytest.approx([run_level(0.05, j) for j in (1, 2, 3)])
    assert levels == pytest.approx([0.025, 0.05 / 6, 0.05 / 12])
    assert [r.evidence["threshold"] for r in reports] == pytest.approx([1 / lv for lv in levels])
    assert agg.measurer.decisions == 3
    assert agg.memory_state_dict()["decisions"] == 3


def test_per_decision_error_control_tests_every_decision_at_the_rate():
    reports, agg = run_three_decisions(false_accept_rate=0.05)
    assert [r.evidence["level"] for r in reports] == [0.05, 0.05, 0.05]
    assert agg.measurer.decisions == 3


def test_a_resumed_run_goes_on_numbering_its_decisions():
    _, agg = run_three_decisions(error_control="per_run")
    saved = json.loads(json.dumps(agg.memory_state_dict()))
    m = measurer(TableEvaluator(), rescore="deterministic", error_control="per_run")
    m.decisions = saved["decisions"]
    out = m.measure(prepared(diff("refund-fix", "refund")))
    assert out.acceptance.level == pytest.approx(run_level(0.05, 4))


# --------------------------------------------------------------------------- the local null


Z = 24
TASKS96 = [Task(f"z{i}", f"Question in zone{i % Z}: case c{i}") for i in range(96)]
ZONE5 = {i for i in range(96) if i % Z == 5}
ZONE_TABLES = {
    "head": [0.4] * 96,
    "zone-fix": [1.0 if i in ZONE5 else 0.4 for i in range(96)],  # +4 of 96
    # the same, and a loss on every third other task (graded: not a regression)
    "zone-leaky": [1.0 if i in ZONE5 else 0.2 if i % 3 == 0 else 0.4 for i in range(96)],
}


def zone_diff(name: str) -> Diff:
    return Diff(f"d-{name}", ART, {"name": name, "rule:zone5": "Answer zone5 questions in full"})


def test_the_local_null_accepts_a_local_gain_with_far_fewer_calls():
    share = 0.2
    full_ev, local_ev = TableEvaluator(ZONE_TABLES, TASKS96), TableEvaluator(ZONE_TABLES, TASKS96)
    full = declared(full_ev).measure(prepared(zone_diff("zone-fix")))
    local = declared(local_ev, acceptance_null="local", local_regression_share=share).measure(
        prepared(zone_diff("zone-fix")))
    assert full.acceptance.accept and full.acceptance.null == "full"
    acc = local.acceptance
    assert acc.accept and acc.null == "local" and not acc.certain
    sample = local_sample_size(92, share, 0.05)
    assert local.scored == 4 + sample
    assert acc.reason.startswith(f"local null: the affected tasks gain 2.4 and {sample} sampled other unit(s) "
                                 "show no loss (so fewer than 20% of them lose, at rate 0.05)")
    assert set(local_ev.order("zone-fix")[:4]) == ZONE5
    assert 3 * local.scored < full.scored
    assert sum(local_ev.scored.values()) * 3 < sum(full_ev.scored.values())


def test_the_local_null_refuses_a_candidate_whose_sample_shows_a_loss():
    ev = TableEvaluator(ZONE_TABLES, TASKS96)
    out = declared(ev, acceptance_null="local", local_regression_share=0.2).measure(
        prepared(zone_diff("zone-leaky")))
    acc = out.acceptance
    assert acc.settled and not acc.accept and acc.regressions == 0
    assert acc.reason.startswith("local null: ")
    assert "sampled unit(s) outside the affected ones lose" in acc.reason


def test_a_noisy_evaluation_keeps_the_full_null():
    good = {"head": [0.3] * N, "refund-fix": [0.95 if i in REFUND else 0.3 for i in range(N)]}
    m = measurer(NoisyEvaluator(good, 1), acceptance_null="local")
    out = m.measure(prepared(diff("refund-fix", "refund")))
    assert out.acceptance.null == "full" and out.acceptance.sampling == "with-replacement"


# --------------------------------------------------------------------------- no task names


def test_an_evaluator_that_does_not_name_its_tasks_is_scored_in_a_seeded_order():
    ev = TableEvaluator(tasks=None)
    m = declared(ev)
    assert m.relevance is None
    out = m.measure(prepared(diff("refund-fix", "refund")))
    assert m.scoreboard.n_tasks == N and m.units == [[i] for i in range(N)]
    assert out.affected == set() and out.touched == set(range(N))  # a commit makes every score unclean
    assert out.acceptance.settled and out.acceptance.accept
    assert "(0 of 0 affected" in out.acceptance.reason
    order = ev.order("refund-fix")
    assert order != sorted(order)
