"""`AggregatorConfig`: the merge pipeline's knobs, each checked and documented once.

The aggregator (`agentdescent.merge.aggregator`, which re-exports it) reads them; `RunConfig`
builds one from the engines' keywords. Values only: it must not merge, evaluate or
commit anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..validation import (
    check_bool,
    check_callable,
    check_choice,
    check_fraction,
    check_int,
    check_real,
    check_text,
)
from .relevance import RelevanceHook

__all__ = ["AggregatorConfig"]


@dataclass(frozen=True)
class AggregatorConfig:
    """Knobs of the merge pipeline.

    Args:
        false_accept_rate: the acceptance test's stated rate of committing a candidate
            that is no better than the head, at every version, however often the
            evaluation looks (`agentdescent.merge.acceptance.PairedTest`).
        alpha_head: staleness tolerance for slow (L1) artifacts.
        alpha_tail: staleness tolerance for fast (L2) artifacts.
        trust_region_ops: largest diff (in ops) considered; larger ones are ``oversized``.
        trust_region_chars: largest diff payload (in characters) considered.
        cas_attempts: commit attempts before giving up with ``cas-conflict``.
        fusion_tournament: rank the singles and the union on the cheap score and send
            the best forward (needs a cheap subset: ``cheap_eval_tasks``).
        max_regressions: held-out tasks a candidate may regress (None: no guard).
        fusion_requires_evidence: keep a survivor out of a union when its self-verify ran
            and measured no gain while a partner's measured a gain (so a wrong but
            neutral-looking diff cannot ride in on its partners' evidence).
        evidence_pool_size: cards the evidence pool keeps (discarded, conflict-dropped,
            set aside, or rejected for want of evidence); the oldest is evicted first.
        pool_draw: pooled cards re-tried per artifact per step, oldest first, beside the
            step's new cards and through the same pipeline (0 turns drawing off: the pool
            is then only a record). See `Aggregator.step` for which cards qualify. Counted
            in `Aggregator.counters`: ``pool_drawn``, ``pool_committed`` (of those, in a
            commit), ``pool_recovered`` (of those, first counted as stale discards),
            ``pool_returned`` (back in the pool) and ``pool_dropped`` (measured, rejected).
        pool_retries: how many times one pooled card may be re-tried; a re-tried card that
            is discarded or set aside again goes back to the pool one retry older, one
            that commits (or is measured and rejected on a loss) leaves it.
        sequential: score a candidate's held-out tasks in batches and stop as soon as the
            paired test settles (accept or reject); False scores every task, then decides.
        eval_batch: held-out tasks per batch (the test looks after each).
        random_share: share of each candidate's evaluation spent on a seeded random sample
            of the tasks its diff does not plausibly affect (the rest go to the affected
            ones first: `agentdescent.merge.acceptance.evaluation_order`).
        group_key: a ``task.meta`` key: held-out tasks in the same group as a card's
            trajectory tasks count as affected (the engines use the run's ``stratify`` key
            when this is None).
        relevance: ``relevance(diff, trajectory_tasks, task) -> float``: a user ranking of
            the held-out tasks (higher first) that replaces the built-in one
            (`agentdescent.merge.relevance.Relevance`).
        rescore: noise handling (`agentdescent.merge.noise.NoiseMonitor`). ``"auto"`` learns
            whether the evaluation reproduces, mostly from free checks (the head scored again
            on a task no commit since plausibly changed): once ``noise_probe`` checks agree,
            it is deterministic and nothing is re-scored (a discordant pair is a fact, and a
            net gain with no regression is accepted once ``coverage_sample`` tasks beyond
            the affected ones are scored); the first disagreement makes it noisy, and every
            discordant pair is then re-scored ``rescore_draws`` more times on both sides and
            counts with its means. While unknown, only a would-be regression is re-scored
            (once, and only to clear the regression guard: its difference counts as first
            drawn, so the test stays unbiased). ``"deterministic"`` declares the evaluation deterministic from the start
            (an evaluator that cannot draw again, a table, a cached reward: nothing to learn);
            a free check that disagrees still makes it noisy. An int re-scores every
            discordant pair that many more times and never treats the evaluation as
            deterministic; 0 never re-scores.
        noise_probe: agreeing checks before the evaluation counts as deterministic.
        rescore_draws: extra draws per side of a discordant pair once noise is seen.
        coverage_sample: in a deterministic evaluation, tasks beyond the affected ones a
            candidate must be scored on (no regression among them) before it is accepted.
        self_verify_gate: drop a candidate before any held-out call when every card behind
            it self-verified and none improved the task it was proposed from (a minibatch
            gate; the self-verify never counts as acceptance evidence).
        rank_by: how contradictions and fusion choices are ranked: ``"evidence"`` (the
            self-verify delta, then arrival: no evaluation spent) or ``"cheap"`` (the cheap
            subset's score first, the rule before issue 19; with a union that does not beat
            the head on it, the best single goes forward instead).
        futility_sample: once every held-out task the diff plausibly affects is scored,
            stop (a rejection, the cards pooled if they gained) after this many of the
            others show no gain (0: never; only exact curtailment stops early). A
            candidate whose gains lie outside its relevant tasks can be refused this way;
            ``bench/sample_efficiency.py`` measures how often against full evaluation.
        head_sample: held-out tasks the starting head is scored on before any work (a
            seeded sample: its reward is measured, not assumed); later heads are scored
            task by task, as candidates need them.
        commit_veto: ``commit_veto(head_state, candidate_state) -> str | None``: the last
            check before an accepted candidate is committed. A string refuses it (the
            merge ends ``below-threshold`` with that reason, counted in ``commit_vetoes``);
            None lets it commit. For a guard the held-out test cannot give: a code
            suite refusing a patch that breaks any test the head passes, held out or not
            (`agentdescent.code.TestSuite.veto`). It is called on the merging thread: on
            each card's diff before conflicts and fusion (a refused card never joins a
            union; counted in ``card_vetoes``), and on an accepted fused candidate before
            its commit (its members may break a test together; a single card's diff was
            already checked on the same head). It must not commit anything.
    """

    false_accept_rate: float = 0.05
    alpha_head: int = 5
    alpha_tail: int = 1
    trust_region_ops: int = 6
    trust_region_chars: int = 32000
    cas_attempts: int = 3
    fusion_tournament: bool = False
    max_regressions: int | None = 0
    evidence_pool_size: int = 256
    fusion_requires_evidence: bool = True
    pool_draw: int = 2
    pool_retries: int = 1
    sequential: bool = True
    eval_batch: int = 4
    random_share: float = 0.25
    group_key: str | None = None
    relevance: RelevanceHook | None = None
    rescore: str | int = "auto"
    noise_probe: int = 16
    rescore_draws: int = 2
    coverage_sample: int = 4
    self_verify_gate: bool = True
    rank_by: str = "evidence"
    head_sample: int = 16
    futility_sample: int = 4
    commit_veto: Callable[[Mapping[str, str], Mapping[str, str]], str | None] | None = None

    def __post_init__(self) -> None:
        owner = "AggregatorConfig"
        check_real(self.false_accept_rate, "false_accept_rate", low=0.0, high=0.5, low_open=True, owner=owner,
                   hint="the stated rate of committing a candidate no better than the head")
        check_int(self.alpha_head, "alpha_head", low=0, owner=owner, hint="a version count")
        check_int(self.alpha_tail, "alpha_tail", low=0, owner=owner, hint="a version count")
        for name in ("trust_region_ops", "trust_region_chars", "cas_attempts", "evidence_pool_size"):
            check_int(getattr(self, name), name, low=1, owner=owner)
        check_bool(self.fusion_tournament, "fusion_tournament", owner=owner)
        check_int(self.max_regressions, "max_regressions", low=0, optional=True, owner=owner,
                  hint="None: no regression guard")
        check_bool(self.fusion_requires_evidence, "fusion_requires_evidence", owner=owner)
        check_int(self.pool_draw, "pool_draw", low=0, owner=owner, hint="0 turns drawing on the evidence pool off")
        check_int(self.pool_retries, "pool_retries", low=1, owner=owner,
                  hint="to never re-try pooled cards, set pool_draw=0")
        check_bool(self.sequential, "sequential", owner=owner)
        check_int(self.eval_batch, "eval_batch", low=1, owner=owner, hint="held-out tasks per look")
        check_fraction(self.random_share, "random_share", high_open=True, owner=owner)
        check_text(self.group_key, "group_key", optional=True, owner=owner, hint="a task.meta key")
        check_callable(self.relevance, "relevance", "relevance(diff, trajectory_tasks, task) -> float",
                       arity=3, optional=True, owner=owner)
        if self.rescore not in ("auto", "deterministic"):
            check_int(self.rescore, "rescore", low=0, high=20, owner=owner,
                      hint="'auto', 'deterministic', or extra draws per side of every discordant pair")
        check_int(self.noise_probe, "noise_probe", low=1, owner=owner)
        check_int(self.rescore_draws, "rescore_draws", low=1, high=20, owner=owner)
        check_int(self.coverage_sample, "coverage_sample", low=0, owner=owner)
        check_bool(self.self_verify_gate, "self_verify_gate", owner=owner)
        check_choice(self.rank_by, "rank_by", ("evidence", "cheap"), owner=owner)
        check_int(self.head_sample, "head_sample", low=1, owner=owner)
        check_int(self.futility_sample, "futility_sample", low=0, owner=owner)
        check_callable(self.commit_veto, "commit_veto", "commit_veto(head_state, candidate_state) -> str | None",
                       arity=2, optional=True, owner=owner)
