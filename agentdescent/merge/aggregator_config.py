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
    check_int,
    check_real,
    check_text,
)
from .relevance import EvidenceGroups, RelevanceHook

__all__ = ["AggregatorConfig"]


@dataclass(frozen=True)
class AggregatorConfig:
    """Knobs of the merge pipeline.

    Args:
        false_accept_rate: the acceptance test's stated rate of committing a candidate
            whose mean over the whole held-out set is no better than the head's, at every
            version, however often the evaluation looks
            (`agentdescent.merge.acceptance.PairedTest`): per decision, or per run with
            ``error_control="per_run"``.
        error_control: ``"per_decision"`` (default): every decision is tested at
            ``false_accept_rate``; ``"per_run"``: decision ``j`` of the run is tested at
            ``false_accept_rate / (j (j + 1))`` (`agentdescent.merge.acceptance.run_level`),
            so the chance that the run ever commits a candidate no better than its head
            is at most ``false_accept_rate``.
        acceptance_null: ``"full"`` (default): the null is the full held-out mean.
            ``"local"`` (opt-in, deterministic evaluations; a noisy one keeps the full
            null): accept when the tasks the diff plausibly changes gain and a uniform
            sample of the other units, sized by ``local_regression_share``, shows no loss.
        local_regression_share: the local null's bound: when at least this share of the
            other units lose, the sample shows a loss with probability at least
            ``1 - false_accept_rate``.
        evidence_groups: how held-out tasks group into units of evidence (correlated
            tasks count as one): None (tasks with the same prompt only), a ``task.meta``
            key (tasks with the same value are one unit), or ``fn(task) -> hashable`` (None:
            the task is its own unit).
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
        group_key: a ``task.meta`` key: held-out tasks in the same group as a card's
            trajectory tasks count as affected (the engines use the run's ``stratify`` key
            when this is None).
        relevance: ``relevance(diff, trajectory_tasks, task) -> float``: a user ranking of
            the held-out tasks (higher first) that replaces the built-in one
            (`agentdescent.merge.relevance.Relevance`).
        rescore: noise handling (`agentdescent.merge.noise.NoiseMonitor`). ``"auto"`` learns
            whether the evaluation reproduces: once, the head is drawn again on up to
            ``noise_probe`` tasks it was scored on; all agreeing makes it deterministic
            (scores are facts: sampling without replacement, each task scored once per
            state; an accepted candidate's gains are drawn again before it commits, and a
            disagreement sends it back to the noisy test), the first disagreement makes it
            noisy for good (units drawn with replacement, both sides scored afresh; a
            would-be regression is drawn ``rescore_draws`` more times before it counts).
            ``"deterministic"`` declares it (a table, a cached reward: nothing to learn, no
            confirming draws); a disagreement still makes it noisy. An int ``k`` always
            tests with fresh draws and confirms a would-be regression with ``k`` draws; 0
            takes every score as it came (a fact).
        noise_probe: agreeing re-draws before the evaluation counts as deterministic.
        rescore_draws: draws per side that confirm a would-be regression once noise is seen.
        self_verify_gate: drop a candidate before any held-out call when every card behind
            it self-verified and none improved the task it was proposed from (a minibatch
            gate; the self-verify never counts as acceptance evidence).
        rank_by: how contradictions and fusion choices are ranked: ``"evidence"`` (the
            self-verify delta, then arrival: no evaluation spent) or ``"cheap"`` (the cheap
            subset's score first, the rule before issue 19; with a union that does not beat
            the head on it, the best single goes forward instead).
        futility_sample: reject (the cards pooled if they gained) once the affected units
            and this many others (or, noisy, this many draws) are scored and the net gain
            is not positive (0: never; only exact curtailment stops early). A rejection
            never raises the false-accept rate; it costs power, which
            ``bench/acceptance_audit.py`` measures.
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
    error_control: str = "per_decision"
    acceptance_null: str = "full"
    local_regression_share: float = 0.3
    evidence_groups: EvidenceGroups = None
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
    group_key: str | None = None
    relevance: RelevanceHook | None = None
    rescore: str | int = "auto"
    noise_probe: int = 16
    rescore_draws: int = 2
    self_verify_gate: bool = True
    rank_by: str = "evidence"
    head_sample: int = 16
    futility_sample: int = 8
    commit_veto: Callable[[Mapping[str, str], Mapping[str, str]], str | None] | None = None

    def __post_init__(self) -> None:
        owner = "AggregatorConfig"
        check_real(self.false_accept_rate, "false_accept_rate", low=0.0, high=0.5, low_open=True, owner=owner,
                   hint="the stated rate of committing a candidate no better than the head")
        check_choice(self.error_control, "error_control", ("per_decision", "per_run"), owner=owner)
        check_choice(self.acceptance_null, "acceptance_null", ("full", "local"), owner=owner)
        check_real(self.local_regression_share, "local_regression_share", low=0.0, high=1.0, low_open=True,
                   owner=owner, hint="the share of other units a local-null acceptance bounds the losses to")
        if self.evidence_groups is not None and not callable(self.evidence_groups):
            check_text(self.evidence_groups, "evidence_groups", owner=owner,
                       hint="None, a task.meta key, or fn(task) -> hashable")
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
        check_text(self.group_key, "group_key", optional=True, owner=owner, hint="a task.meta key")
        check_callable(self.relevance, "relevance", "relevance(diff, trajectory_tasks, task) -> float",
                       arity=3, optional=True, owner=owner)
        if self.rescore not in ("auto", "deterministic"):
            check_int(self.rescore, "rescore", low=0, high=20, owner=owner,
                      hint="'auto', 'deterministic', or draws per side confirming a would-be regression (0: scores are facts)")
        check_int(self.noise_probe, "noise_probe", low=1, owner=owner)
        check_int(self.rescore_draws, "rescore_draws", low=1, high=20, owner=owner)
        check_bool(self.self_verify_gate, "self_verify_gate", owner=owner)
        check_choice(self.rank_by, "rank_by", ("evidence", "cheap"), owner=owner)
        check_int(self.head_sample, "head_sample", low=1, owner=owner)
        check_int(self.futility_sample, "futility_sample", low=0, owner=owner)
        check_callable(self.commit_veto, "commit_veto", "commit_veto(head_state, candidate_state) -> str | None",
                       arity=2, optional=True, owner=owner)
