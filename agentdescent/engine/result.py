"""What a run returns: `EvolutionResult` and its per-round `RoundInfo`, with a JSON round trip.

This module owns the result types both runtimes return and their file format
(``agentdescent-result/1``). It holds values only: it must not run, evaluate or commit
anything.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AgentDescentError
from ..fate import CardFate, count_fates
from ..types import MergeOutcome, MergeReport
from ..usage import Usage
from .answers import AnswerDistribution
from .why import likely_cause, round_facts

__all__ = ["AsyncStats", "EvolutionResult", "RoundInfo"]


@dataclass
class RoundInfo:
    """What one sync round (or one async merger sweep) did.

    Args:
        index: 1-based round (or sweep) number.
        held_out_reward: mean held-out reward of the head after the merge.
        committed: commits in this round.
        fused: commits of fused candidates in this round.
        discarded_stale: cards dropped by the staleness policy.
        conflicts_dropped: cards dropped as the weaker side of a contradiction.
        tokens: tokens recorded on the run's meter during the round.
        calls: model calls recorded on the run's meter during the round (``usage.calls``): the
            rounds' calls add up to ``result.usage.calls`` as their tokens add up to its tokens.
        reports: the merge reports.
        rollouts: rollouts finished in the round.
        cards: evidence cards merged in the round.
        backend_failures: backend calls that failed even after retries.
        head_version: the head version after the merge.
        proposals: what became of the round's proposals, counted from its fates (the
            reports' `agentdescent.fate.CardFate` records and ``refusals``), or None in a record
            saved before they were kept: ``made`` (proposal calls that returned), ``cards``
            (evidence cards that reached the merge: one first fate each), ``rules`` (replies
            returned as a change), ``declined`` (no change: NONE, or None), ``refused`` (kind
            -> count, the kinds that occurred, for an agent that says why:
            ``explain_proposal``, as `agentdescent.LLMAgent`) and ``examples`` (kind -> one
            refused reply, cut short); ``edits_refused`` (proposals whose code edits did not
            apply, `agentdescent.errors.EditRefused`) and ``edits_refused_kinds`` (its reason
            -> count), and ``demos_refused`` (changes that would show an evaluation prompt),
            when there were any.
        refusals: the fates of the round's proposals that never became cards (kinds
            ``refused`` and ``declined``), as the workers recorded them.
        elapsed: seconds the round took, on the run's clock (the only field that does not
            repeat between two identical runs).
        measured_share: the share of the held-out tasks whose score in ``held_out_reward``
            was measured on this head itself (1.0: the reward is a measurement; below it, an
            estimate whose other tasks' scores are inherited from the versions before the
            head's commit, or imputed); None in a record saved before it was kept.
        notes: what changed in how the run decides, or why it stood idle, in words: the
            held-out evaluation found deterministic or noisy (later decisions weigh the same
            evidence differently), or every training task solved as far as the rollouts have
            seen while held-out tasks still fail (no worker is shown those).
    """

    index: int
    held_out_reward: float
    committed: int = 0
    fused: int = 0
    discarded_stale: int = 0
    conflicts_dropped: int = 0
    tokens: int = 0
    calls: int = 0
    reports: list[MergeReport] = field(default_factory=list)
    rollouts: int = 0
    cards: int = 0
    backend_failures: int = 0
    head_version: int | None = None
    proposals: dict[str, Any] | None = None
    refusals: list[CardFate] = field(default_factory=list)
    elapsed: float = 0.0
    measured_share: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def measured(self) -> bool:
        """Whether ``held_out_reward`` is a measurement (``measured_share`` 1.0, or not known), not an estimate."""
        return self.measured_share in (None, 1.0)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = {k: getattr(self, k) for k in (
            "index", "held_out_reward", "committed", "fused", "discarded_stale",
            "conflicts_dropped", "tokens", "calls", "rollouts", "cards", "backend_failures", "head_version",
            "proposals", "elapsed", "measured_share", "notes",
        )}
        data["reports"] = [r.to_json() for r in self.reports]
        data["refusals"] = [f.to_json() for f in self.refusals]
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RoundInfo:
        """Rebuild from `to_json` output."""
        kwargs = dict(data)
        kwargs["reports"] = [MergeReport.from_json(r) for r in data.get("reports", [])]
        kwargs["refusals"] = [CardFate.from_json(f) for f in data.get("refusals", [])]
        return cls(**kwargs)

    @property
    def fates(self) -> list[CardFate]:
        """Every fate the round recorded: its proposals' that never became cards, then each report's cards'."""
        return [*self.refusals, *(f for r in self.reports for f in r.fates)]


@dataclass
class AsyncStats:
    """What the barrier-free runtime counted: ``result.async_stats`` of an `async_evolve` run.

    Args:
        sweeps: merger sweeps (each one `RoundInfo`).
        admitted: rollouts admitted.
        discarded_stale: evidence cards the staleness policy dropped (their diffs built on
            a head too old; each a rollout whose proposal was wasted): the ``stale`` first
            fates of the sweeps' cards (`EvolutionResult.fates`). Not the same as
            ``result.outcomes()["all-stale"]``, which counts merge *decisions* in which no
            card survived the staleness filter: one such decision can drop several cards,
            or none (every diff already in the head, ``counters["merge_already_in_head"]``:
            its reason then reads "nothing new to merge, none stale").
        forced_refreshes: resyncs the stall guard forced.
        resyncs: snapshot refreshes in all (forced or because the head moved on).
        stragglers: the run's calls (and worker threads) still running when the call
            returned: on the wire, or in a callable of yours. None of them makes another
            attempt; their results are dropped. The same count is
            ``result.counters["stragglers"]``, in both runtimes.
        late_results_dropped: finished rollouts the stop left unmerged: arrived after it,
            queued at it, in a sweep it cut off, or in a worker step it ended. With the
            sweeps' rollouts they add up to every rollout the run counts:
            ``result.rollouts == sum(h.rollouts for h in history) + late_results_dropped``
            (after a resume, plus ``counters["rollouts_cut_off"]``: the rollouts a stopped
            process finished and never merged, in flight at its last save).
        pacing_waits: times admission pacing held a worker.
        backpressure_waits: times a full queue held a worker.
    """

    sweeps: int = 0
    admitted: int = 0
    discarded_stale: int = 0
    forced_refreshes: int = 0
    resyncs: int = 0
    stragglers: int = 0
    late_results_dropped: int = 0
    pacing_waits: int = 0
    backpressure_waits: int = 0

    def to_json(self) -> dict[str, int]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AsyncStats:
        """Rebuild from `to_json` output."""
        return cls(**{k: int(v) for k, v in data.items()})


@dataclass
class EvolutionResult:
    """The outcome of a run.

    Args:
        state: the final artifact state (the ledger head).
        rendered: the final state rendered by the strategy.
        final_reward: mean held-out reward of the final state (NaN when no held-out
            evaluation ever succeeded: ``stop_reason`` and ``error`` say why).
        error: why the run could not continue, or None.
        stop_reason: ``"rounds"``, ``"target_reward"``, ``"patience"``, ``"max_seconds"``,
            ``"max_rollouts"``, ``"max_tokens"``, ``"diminishing_returns"``
            or ``"error"``.
        history: one `RoundInfo` per round (or merger sweep).
        forced_refreshes: resyncs the async stall guard forced.
        usage: the run's token meter.
        budget: the budget governor's summary, or None without a budget.
        artifact_id: the evolved artifact.
        version: the final head version.
        initial_reward: held-out reward of the starting state.
        rollouts: rollouts finished (self-verify re-runs not included).
        counters: everything else the run counted (backend failures, self-verify skips,
            async sweeps, the eta histogram, stragglers...).
        async_stats: what the barrier-free runtime counted (`AsyncStats`), or None for a
            sync run.
        test_initial: the starting head's mean score on the test set (``test_tasks=``), or None.
        test_final: the final head's mean score on the test set, or None (no test set, or
            the run failed or ran out of time before it could be scored).
        test: the test set's report, JSON-ready: ``initial`` and ``final`` (each an
            `agentdescent.engine.testset.Evaluation` as JSON: the draws and feedback per task, the
            mean and its 95 % interval) and ``difference`` (final − initial, task by task,
            with its interval and ``separated``: whether the interval excludes 0).
        held_out_samples: the head's per-task held-out results at the start and at the end,
            JSON-ready, or None: ``{"initial": {"version", "tasks"}, "final": {...}}``,
            ``tasks`` mapping each task scored on that version to ``{"score", "output",
            "feedback"}`` (output and feedback cut short; None for a score measured in an
            earlier process). Tasks the paired test never needed are absent.
        test_answers: what the final head's test score is made of
            (`agentdescent.engine.answers.AnswerDistribution`): the labels its first reply
            to each test task gives beside the gold answers, and ``constant`` when it gives
            (nearly) one answer to every task; None without a scored final head.
        test_answers_initial: the same for the starting head, or None.
    """

    state: dict[str, str]
    rendered: str
    final_reward: float
    error: str | None
    stop_reason: str
    history: list[RoundInfo] = field(default_factory=list)
    forced_refreshes: int = 0
    usage: Usage = field(default_factory=Usage)
    budget: dict[str, Any] | None = None
    artifact_id: str = "artifact"
    version: int = 1
    initial_reward: float | None = None
    rollouts: int = 0
    counters: dict[str, Any] = field(default_factory=dict)
    async_stats: AsyncStats | None = None
    test_initial: float | None = None
    test_final: float | None = None
    test: dict[str, Any] | None = None
    held_out_samples: dict[str, Any] | None = None
    test_answers: AnswerDistribution | None = None
    test_answers_initial: AnswerDistribution | None = None

    def outcomes(self) -> dict[str, int]:
        """How many merge decisions ended each way, keyed by `MergeOutcome` value.

        ``"all-stale"`` counts decisions in which no card survived the staleness filter,
        not the cards it dropped: those are ``sum(h.discarded_stale for h in history)``
        (and ``async_stats.discarded_stale`` in an async run). A decision whose diffs were
        all already in the head (or vetoed) ends ``"all-stale"`` too, with none stale: its
        reason says so, and ``counters["merge_already_in_head"]`` counts those diffs.
        """
        counts = {o.value: 0 for o in MergeOutcome}
        for info in self.history:
            for report in info.reports:
                counts[report.outcome.value] += 1
        return counts

    def fates(self, *, retried: bool = False) -> dict[str, int]:
        """How many proposals and cards ended each way, keyed by `agentdescent.fate.FateKind` value.

        Counted from the one record of each (`agentdescent.fate.CardFate`, kept on each round's
        reports and ``refusals``), as ``RoundInfo.proposals``, ``async_stats``, ``agentdescent
        status`` and the report count them. Each card counts once, by the fate its first
        decision gave it; with ``retried`` the fates of the cards drawn again from the
        evidence pool count too. Where `outcomes` counts decisions, this counts cards:
        ``fates()["stale"] == sum(h.discarded_stale for h in history)``.
        """
        return count_fates((f for info in self.history for f in info.fates), retried=retried)

    @property
    def committed(self) -> int:
        """Commits over the whole run."""
        return sum(info.committed for info in self.history)

    def explain(self) -> str:
        """How the run went and why, in plain words: the same "why" as ``agentdescent status``.

        The first line says how it ended (the stop reason, the rounds, the commits, the held-out
        reward from the start to the end and how much of the final one is measured, the tokens);
        then the error, if any; then, when nothing was committed, the likely cause with what to
        change (`agentdescent.engine.why.likely_cause`). Nothing is printed: the library prints
        nothing unless asked (``progress=True`` shows a bar while it runs).

        Examples:
            >>> from agentdescent import evolve
            >>> from agentdescent.domains.router import RouterDomain
            >>> print(evolve(**RouterDomain(seed=0).evolve_kwargs(), rounds=2).explain())  # doctest: +SKIP
            rounds after 2 round(s): 2 commit(s); held-out 0.000 -> 0.113 (measured on all 115 held-out tasks); head v3; 9,142 tokens in all
        """
        unit = "sweep" if self.async_stats is not None else "round"
        start = "none" if self.initial_reward is None else f"{self.initial_reward:.3f}"
        end = "none" if math.isnan(self.final_reward) else f"{self.final_reward:.3f}"
        measured = int(self.counters.get("final_reward_measured", 0) or 0)
        tasks = measured + int(self.counters.get("final_reward_inherited", 0) or 0)
        if math.isnan(self.final_reward):
            how = ""
        elif tasks and measured == tasks:
            how = f" (measured on all {tasks} held-out tasks)"
        elif tasks:
            how = f" (an estimate: {measured} of {tasks} held-out tasks measured on the final head)"
        else:
            how = ""
        lines = [f"{self.stop_reason} after {len(self.history)} {unit}(s): {self.committed} commit(s); held-out "
                 f"{start} -> {end}{how}; head v{self.version}; {self.usage.total_tokens:,} tokens in all"]
        if self.error:
            lines.append(f"error: {self.error}")
        why = likely_cause([round_facts(info) for info in self.history])
        if why:
            lines.append(f"why: {why}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the usage meter as its snapshot)."""
        return {
            "format": "agentdescent-result/1",
            "state": dict(self.state),
            "rendered": self.rendered,
            "final_reward": self.final_reward,
            "error": self.error,
            "stop_reason": self.stop_reason,
            "history": [h.to_json() for h in self.history],
            "forced_refreshes": self.forced_refreshes,
            "usage": self.usage.to_json(),
            "budget": self.budget,
            "artifact_id": self.artifact_id,
            "version": self.version,
            "initial_reward": self.initial_reward,
            "rollouts": self.rollouts,
            "counters": self.counters,
            "async_stats": self.async_stats.to_json() if self.async_stats is not None else None,
            "test_initial": self.test_initial,
            "test_final": self.test_final,
            "test": self.test,
            "held_out_samples": self.held_out_samples,
            "test_answers": self.test_answers.to_dict() if self.test_answers is not None else None,
            "test_answers_initial": (self.test_answers_initial.to_dict() if self.test_answers_initial is not None
                                     else None),
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the result as JSON (atomically) and return the path."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True), encoding="utf-8")
        os.replace(tmp, target)
        return target

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> EvolutionResult:
        """Read a result written by `save`.

        Raises:
            AgentDescentError: the file is not a saved result.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError(f"the JSON is a {type(data).__name__}, not an object")
            if data.get("format") != "agentdescent-result/1":
                raise ValueError(f"format marker is {data.get('format')!r}")
            usage = Usage.from_json(data["usage"])
            return cls(
                state=dict(data["state"]),
                rendered=data["rendered"],
                final_reward=float(data["final_reward"]),
                error=data["error"],
                stop_reason=data["stop_reason"],
                history=[RoundInfo.from_json(h) for h in data["history"]],
                forced_refreshes=int(data["forced_refreshes"]),
                usage=usage,
                budget=data["budget"],
                artifact_id=data["artifact_id"],
                version=int(data["version"]),
                initial_reward=data["initial_reward"],
                rollouts=int(data["rollouts"]),
                counters=dict(data["counters"]),
                async_stats=AsyncStats.from_json(data["async_stats"]) if data.get("async_stats") else None,
                test_initial=data.get("test_initial"),
                test_final=data.get("test_final"),
                test=data.get("test"),
                held_out_samples=data.get("held_out_samples"),
                test_answers=_answers(data.get("test_answers")),
                test_answers_initial=_answers(data.get("test_answers_initial")),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise AgentDescentError(
                f"{os.fspath(path)!r} is not a saved agentdescent result "
                f"(expected JSON written by EvolutionResult.save): {exc}"
            ) from exc


def _answers(data: Any) -> AnswerDistribution | None:
    """An `AnswerDistribution` from a result file, None when absent (a result saved before it existed)."""
    return AnswerDistribution.from_dict(data) if data is not None else None
