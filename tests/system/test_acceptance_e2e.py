"""The paired acceptance test end to end, on both engines: ties, junk on a young head, a noisy head.

Acceptance is a betting e-process over the per-task paired differences between a
candidate and the head (`agentdescent.merge.acceptance.PairedTest`): a candidate commits once
its e-value reaches ``1 / false_accept_rate`` (20 at the default 0.05), or, in an
evaluation known to be deterministic, on a net gain with no regression. These runs check
the cases where a weaker rule used to commit something no better than the head:

- a tie (rules that change no output) never commits, and says why in the test's terms;
- on a young head with eight held-out tasks and a sampled model, a junk rule that one
  lucky draw makes look better does not commit, because the run learns that the
  evaluation is noisy rather than taking it for deterministic;
- when the head's cached score on some tasks is a single unlucky draw, a rule that changes
  nothing looks better there; re-scoring the discordant pairs refuses it, while a truly
  better rule under the same noise still commits.

The workloads are offline and seeded (the router domain, and a small sampled model whose
every draw is keyed by the artifact, the task and the draw's number), so a run takes a
fraction of a second.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentdescent import (
    AggregatorConfig,
    AppendRules,
    EvolutionResult,
    MergeOutcome,
    MergeReport,
    Task,
    async_evolve,
    evolve,
    stable_hash,
)
from agentdescent.domains.router import RouterDomain, parse_rules

#: The e-value against the threshold, as every reason of a measured decision states it.
PAIRED_TEST = re.compile(r"E=(\S+) vs 20\b")
FALSE_ACCEPT_RATE = 0.05


@pytest.fixture(autouse=True)
def _quiet_logs(caplog):
    caplog.set_level(logging.ERROR, logger="agentdescent")


@pytest.fixture(params=["evolve", "async_evolve"])
def engine(request: pytest.FixtureRequest) -> Callable[..., EvolutionResult]:
    """``engine(tasks, reward, rounds=..., **kwargs)``: ``rounds`` rounds' worth of rollouts on either engine."""

    def run(tasks: Any, reward: Any, *, rounds: int, n_workers: int = 2, **kwargs: Any) -> EvolutionResult:
        if request.param == "evolve":
            return evolve(tasks, reward, rounds=rounds, n_workers=n_workers, **kwargs)
        return async_evolve(tasks, reward, max_rollouts=rounds * n_workers, n_workers=n_workers,
                            max_seconds=60, **kwargs)

    return run


def measured(result: EvolutionResult) -> list[MergeReport]:
    """Reports of decisions the paired test made (the candidate was scored on held-out tasks)."""
    return [r for h in result.history for r in h.reports if r.outcome.measured and r.p_improve is not None]


def gains(report: MergeReport) -> int:
    match = re.search(r"(\d+) gain\(s\)", report.reason)
    assert match, report.reason
    return int(match.group(1))


# --------------------------------------------------------------------------- a sampled model


class SampledModel:
    """A seeded sampling model on grouped tasks, with scripted draws.

    It solves a task when the rendered artifact says ``solve <the task's group>``, but
    each draw comes out flipped (solved <-> unsolved) with probability ``p``: the ``k``-th
    draw of an (artifact, task) pair is decided by `stable_hash` of the seed, the
    artifact, the task and ``k``, so a run repeats whatever order the calls come in, and
    a second draw of the same pair is a fresh one. ``script(rendered, task, k)`` may
    decide a draw instead (True: flipped, False: not, None: the seeded draw).
    """

    def __init__(self, p: float = 0.0, seed: int = 0,
                 script: Callable[[str, Task, int], bool | None] | None = None) -> None:
        self.p, self.seed, self.script = p, seed, script
        self._draws: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()
        self.scripted = 0

    def run(self, rendered: str, task: Task) -> str:
        with self._lock:
            k = self._draws[(rendered, task.id)]
            self._draws[(rendered, task.id)] += 1
        solved = f"solve {task.meta['group']}" in rendered
        flip = self.script(rendered, task, k) if self.script is not None else None
        if flip is None:
            flip = stable_hash(self.seed, rendered, task.id, k) / 2.0**64 < self.p
        else:
            with self._lock:
                self.scripted += 1
        return "solved" if solved != flip else "unsolved"


def solved_reward(task: Task, output: str) -> float:
    return 1.0 if output == "solved" else 0.0


def grouped(group: str, start: int, count: int) -> list[Task]:
    return [Task(f"{group}{i:02d}", f"case {group}{i:02d}", {"group": group}) for i in range(start, start + count)]


def numbered_notes(text: str) -> Callable[..., str]:
    """A proposer of rules that change nothing, each one new (``{n}`` numbers them)."""
    lock = threading.Lock()
    count = [0]

    def propose(rendered: str, task: Task, output: str, reward: float) -> str:
        with lock:
            count[0] += 1
            n = count[0]
        return text.format(n=n)

    return propose


# --------------------------------------------------------------------------- 1. the tie


def test_a_rule_that_changes_no_output_never_commits(engine):
    """Every proposal is a routing rule for a word no prompt contains: the candidate ties the head.

    The self-verify gate is off so that every candidate reaches the held-out evaluation.
    No discordant pair ever shows, so E stays 1: nothing commits, every decision's reason
    is the paired test's (its e-value against 1 / false_accept_rate), and no report claims
    more confidence than ``1 - false_accept_rate``.
    """
    domain = RouterDomain(seed=0, texts_per_keyword=4)

    def junk(rendered, task, output, reward):
        domain.propose(rendered, task, output, reward)  # spend what a proposal spends
        return f"zq{stable_hash(rendered, task.id) % 10_000:04d}x: billing"

    config = AggregatorConfig(false_accept_rate=FALSE_ACCEPT_RATE, self_verify_gate=False)
    result = engine(**dict(domain.evolve_kwargs(), propose=junk), rounds=4, n_workers=3, agg_config=config)
    assert result.error is None
    assert result.committed == 0 and result.version == 1 and result.state == {}
    decisions = measured(result)
    assert decisions, "the candidates were measured"
    assert sum(len(h.reports) for h in result.history) == len(decisions)  # nothing was decided otherwise
    for report in decisions:
        assert report.outcome is MergeOutcome.BELOW_THRESHOLD
        match = PAIRED_TEST.search(report.reason)
        assert match and float(match.group(1)) == 1.0, report.reason
        assert "0 gain(s), 0 loss(es)" in report.reason
        assert report.p_improve <= 1 - FALSE_ACCEPT_RATE
        assert all(k.startswith("zq") for k in parse_rules(domain.strategy.render(report.accepted.apply({}))))
    assert result.counters["merge_held_out_tasks_saved"] > 0  # a tie is refused before every task is scored


# --------------------------------------------------------------------------- 2. junk on a young head


def _young_head_junk(engine, rescore: str, seed: int = 0) -> tuple[EvolutionResult, SampledModel]:
    """Twenty tasks, the last eight held out; the head solves none, and a sampled model flips 10 % of draws.

    The proposer writes notes that change nothing; each note's first held-out draw comes out
    flipped, in its favour (a task the head fails looks solved).
    """
    tasks = grouped("a", 0, 20)
    held = {t.id for t in tasks[-8:]}
    lucky: set[str] = set()
    lock = threading.Lock()

    def script(rendered: str, task: Task, k: int) -> bool | None:
        if "note" not in rendered or task.id not in held:
            return None
        with lock:
            if rendered in lucky:
                return None
            lucky.add(rendered)
        return True

    model = SampledModel(p=0.1, seed=seed, script=script)
    config = AggregatorConfig(false_accept_rate=FALSE_ACCEPT_RATE, self_verify_gate=False, rescore=rescore)
    result = engine(tasks, solved_reward, run=model.run, propose=numbered_notes("note {n}: double-check the answer"),
                    strategy=AppendRules(), shuffle=False, seed=seed, rounds=6, agg_config=config)
    assert result.error is None
    return result, model


def test_a_junk_rule_that_one_lucky_draw_favours_does_not_commit_on_a_young_head(engine):
    """Eight held-out tasks, a sampled model, and a junk rule with one task flipped in its favour.

    With so few tasks the e-value cannot reach 20 on a single gain; the only way such a rule
    could commit is taking the lucky draw as a fact (sampling without replacement: the head
    solves nothing, so one gain makes the full mean better for certain). The run does not:
    the noise probe draws the head again and sees the noise, the monitor calls the
    evaluation noisy, every piece of evidence is then a fresh draw, and at
    ``false_accept_rate=0.05`` the junk never commits. The contrast: the same run with the
    evaluation *declared* deterministic commits the junk, which is what learning the noise
    prevents.
    """
    result, model = _young_head_junk(engine, "auto")
    assert model.scripted > 0  # a candidate did draw its lucky task
    decisions = measured(result)
    assert decisions and any(gains(r) > 0 for r in decisions)  # the junk looked better somewhere
    assert result.committed == 0 and result.version == 1
    noise = result.counters["noise"]
    assert noise["state"] == "noisy" and noise["disagreements"] > 0
    for report in decisions:
        assert report.outcome is MergeOutcome.BELOW_THRESHOLD
        assert report.p_improve <= 1 - FALSE_ACCEPT_RATE and PAIRED_TEST.search(report.reason), report.reason

    declared, _ = _young_head_junk(engine, "deterministic")
    assert declared.committed > 0
    junk_commits = [r for r in measured(declared) if r.outcome is MergeOutcome.COMMITTED]
    assert all(r.evidence["sampling"] == "without-replacement" for r in junk_commits)


# --------------------------------------------------------------------------- 3. a noisy head


#: Forty tasks, the last sixteen held out: six of group ``a`` (the starting head solves them)
#: and ten of group ``b`` (nothing solves them yet); the train tasks are all ``b``.
NOISY_HEAD_TASKS = grouped("b", 0, 24) + grouped("a", 0, 6) + grouped("b", 24, 10)
START = {"base": "solve a"}


def _noisy_head(engine, propose: Callable[..., str], rescore: int) -> tuple[EvolutionResult, SampledModel]:
    """The starting head's first draw on every ``a`` task comes out unlucky (unsolved); every other draw is true.

    That first draw is what the head's score on those tasks is cached as (the starting
    head is scored on every held-out task before any work); drawing again gives the truth.
    """
    start_text = AppendRules().render(START)

    def script(rendered: str, task: Task, k: int) -> bool | None:
        return True if rendered == start_text and task.meta["group"] == "a" and k == 0 else None

    model = SampledModel(script=script)
    config = AggregatorConfig(false_accept_rate=FALSE_ACCEPT_RATE, self_verify_gate=False, rescore=rescore)
    result = engine(NOISY_HEAD_TASKS, solved_reward, run=model.run, propose=propose, strategy=AppendRules(),
                    shuffle=False, initial_state=START, rounds=4, agg_config=config)
    assert result.error is None
    assert model.scripted == 6  # the six unlucky draws, all in the starting head's sample
    return result, model


def test_rescoring_refuses_a_rule_that_only_looks_better_against_an_unlucky_head(engine):
    """A rule that changes nothing gains on the six tasks where the head's cached draw was unlucky.

    With fresh draws (``rescore=2``: the noisy test draws both sides afresh, so the cached
    unlucky draws are never evidence) the rule shows no gain and the e-value stays far below
    20: nothing commits. Taking every score as it came (``rescore=0``) the same six cached
    draws carry the rule to acceptance and it commits: the fresh draws are what refuse it.
    """
    notes = numbered_notes("note {n}: take care")
    result, _ = _noisy_head(engine, notes, rescore=2)
    assert result.committed == 0 and result.state == START
    assert result.counters["noise"]["state"] == "fixed" and result.counters["noise"]["disagreements"] > 0
    assert result.counters["merge_held_out_draws"] > 0  # every piece of evidence a fresh draw
    decisions = measured(result)
    assert decisions and all(r.evidence["sampling"] == "with-replacement" for r in decisions)
    for report in decisions:
        match = PAIRED_TEST.search(report.reason)
        assert match and float(match.group(1)) < 20, report.reason
        assert report.p_improve <= 1 - FALSE_ACCEPT_RATE

    unchecked, _ = _noisy_head(engine, numbered_notes("note {n}: take care"), rescore=0)
    assert unchecked.counters.get("merge_held_out_draws", 0) == 0
    first = next(r for r in measured(unchecked) if r.outcome is MergeOutcome.COMMITTED)
    assert first.evidence["sampling"] == "without-replacement" and "0 loss(es)" in first.reason


def test_a_truly_better_rule_still_commits_under_the_same_noise(engine):
    """The counterpart: ``solve b`` fixes the ten held-out ``b`` tasks; re-scored, the gains stand.

    Its fresh draws on the ``b`` tasks show the gain (the rule really solves them), so the
    e-value passes 20 within the run, and the head then solves every held-out task.
    """
    result, _ = _noisy_head(engine, lambda rendered, task, output, reward: "solve b", rescore=2)
    assert result.committed == 1 and START.items() <= result.state.items()
    assert all(f"solve {t.meta['group']}" in result.rendered for t in NOISY_HEAD_TASKS[-16:])
    assert result.counters["merge_held_out_draws"] > 0
    (commit,) = [r for r in measured(result) if r.outcome is MergeOutcome.COMMITTED]
    assert commit.reason.startswith("paired test passed") and commit.evidence["sampling"] == "with-replacement"
    assert commit.p_improve > 1 - FALSE_ACCEPT_RATE
    assert result.final_reward > result.initial_reward
