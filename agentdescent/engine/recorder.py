"""Each merge of a run as one `agentdescent.engine.result.RoundInfo`: `RoundRecorder`.

This module owns what a round is measured from (the run meter's total, the backend
failures, the agent's reply counts and the clock at the previous round's end), the run's
history of rounds, ``on_round`` and the progress bar. Both schedulers record through it
(by way of `agentdescent.engine.runtime.RunEnv.merge_and_record`). It must not merge,
commit, save progress or call a model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..agents.proposals import REFUSAL_KINDS
from ..budget.governor import BudgetGovernor
from ..clock import Clock
from ..types import MergeOutcome, MergeReport
from ..usage import Usage
from .counters import Counters
from .result import RoundInfo

__all__ = ["RoundRecorder", "summarize"]

logger = logging.getLogger("agentdescent.runtime")


class RoundRecorder:
    """Turns each merge into one `RoundInfo`: its tokens and failures since the last, the bar, ``on_round``.

    It owns the marks a round is measured from (the run meter's total and the backend
    failures at the previous round's end), the history, and the progress bar.

    Args:
        usage: the run meter.
        counters: the run's counters.
        governor: the run's budget governor (it learns each round's spend).
        on_round: the user's callback, or None.
        unit: ``"round"`` or ``"sweep"``, for logs and the bar.
        history: the rounds of a resumed run.
        agent: the run's agent; when it counts its replies (``stats()``, as
            `agentdescent.LLMAgent`), each round's `RoundInfo.proposals` says what became
            of them.
        clock: the run's clock (each round's ``elapsed``).
    """

    def __init__(self, usage: Usage, counters: Counters, governor: BudgetGovernor,
                 on_round: Callable[[RoundInfo], None] | None, unit: str = "round",
                 history: Sequence[RoundInfo] = (), agent: Any = None, clock: Clock | None = None) -> None:
        self.usage = usage
        self.counters = counters
        self.governor = governor
        self.on_round = on_round
        self.unit = unit
        self.history: list[RoundInfo] = list(history)
        self.resumed_rounds = len(self.history)
        self._tokens_mark = usage.total_tokens
        self._spent_mark = governor.spent  # the budget's view: without the phases it leaves out
        self._failures_mark = counters.get("backend_failures")
        self.bar: Any = None
        self._bar_rollouts = False
        self.clock = clock
        self._time_mark = clock.now() if clock is not None else 0.0
        stats = getattr(agent, "stats", None)
        self._agent_stats = stats if callable(stats) else None
        examples = getattr(agent, "refusal_examples", None)
        self._agent_examples = examples if callable(examples) else None
        self._proposal_mark = self._proposal_counts()

    def rebase(self) -> None:
        """Count from where the run stands now: a resumed run restores its counters and meter after the
        recorder is made, and its first round must show only what it did itself (not the restored totals)."""
        self._tokens_mark = self.usage.total_tokens
        self._spent_mark = self.governor.spent
        self._failures_mark = self.counters.get("backend_failures")
        self._proposal_mark = self._proposal_counts()

    def _proposal_counts(self) -> dict[str, int]:
        counts = {"made": self.counters.get("proposals"), "cards": self.counters.get("cards"),
                  "edits_refused": self.counters.get("edits_refused")}
        counts.update({k: v for k, v in self.counters.as_dict().items()
                       if k.startswith("edits_refused_") and isinstance(v, int)})
        if self._agent_stats is not None:
            counts.update({f"agent_{k}": int(v) for k, v in self._agent_stats().items() if isinstance(v, int)})
        return counts

    def _proposals(self) -> dict[str, Any] | None:
        """What became of the proposals since the last round (`RoundInfo.proposals`)."""
        now = self._proposal_counts()
        delta = {k: v - self._proposal_mark.get(k, 0) for k, v in now.items()}
        self._proposal_mark = now
        out: dict[str, Any] = {"made": delta["made"], "cards": delta["cards"]}
        if delta["edits_refused"]:
            out["edits_refused"] = delta["edits_refused"]  # edits that did not apply (a code strategy)
            out["edits_refused_kinds"] = {k[len("edits_refused_"):]: n for k, n in sorted(delta.items())
                                          if k.startswith("edits_refused_") and n}
        if self._agent_stats is not None and delta.get("agent_proposals", 0) == delta["made"]:
            # the agent saw these calls itself (not a copy in another process)
            refused = {k: delta[f"agent_{k}"] for k in REFUSAL_KINDS if delta.get(f"agent_{k}", 0)}
            examples = self._agent_examples() if self._agent_examples is not None else {}
            out.update(rules=delta.get("agent_rules", 0), declined=delta.get("agent_declined", 0), refused=refused,
                       examples={k: examples[k] for k in refused if k in examples})
        return out

    def open_bar(self, total: int | None, desc: str, *, rollouts: bool = False) -> None:
        """Show a progress bar counting the whole run (a resumed run's rounds included).

        With ``rollouts`` the bar counts this call's rollouts instead of rounds (the async
        runtime, whose merges have no planned number: ``total`` is then the rollout cap,
        which counts this call's rollouts, or None).
        """
        from tqdm.auto import tqdm

        self._bar_rollouts = rollouts
        done = 0 if rollouts else self.resumed_rounds
        self.bar = tqdm(desc=desc, unit="rollout" if rollouts else self.unit, total=total, initial=done)

    def record(self, reports: list[MergeReport], held: float, *, rollouts: int, cards: int,
               head_version: int | None = None, measured_share: float | None = None,
               notes: list[str] | None = None) -> RoundInfo:
        """The `RoundInfo` of the merge just made, logged; `announce` shows it and passes it to ``on_round``."""
        total, failures = self.usage.total_tokens, self.counters.get("backend_failures")
        moment = self.clock.now() if self.clock is not None else 0.0
        info = RoundInfo(
            index=len(self.history) + 1, held_out_reward=held, tokens=total - self._tokens_mark,
            reports=reports, rollouts=rollouts, cards=cards,
            backend_failures=failures - self._failures_mark, head_version=head_version,
            proposals=self._proposals(), elapsed=round(moment - self._time_mark, 3),
            measured_share=measured_share, notes=list(notes or []), **summarize(reports),
        )
        self._time_mark = moment
        self._tokens_mark, self._failures_mark = total, failures
        self.history.append(info)
        spent = self.governor.spent
        self.governor.end_round(spent - self._spent_mark)  # the projection excludes what the budget does
        self._spent_mark = spent
        logger.info("%s %d: held-out %.3f, %d commit(s), %d token(s)", self.unit, info.index, held,
                    info.committed, info.tokens)
        return info

    def announce(self, info: RoundInfo) -> None:
        """Pass a recorded round to ``on_round`` and the bar (after its progress is saved)."""
        if self.on_round is not None:
            self.on_round(info)
        if self.bar is not None:
            self.bar.update(info.rollouts if self._bar_rollouts else 1)
            self.bar.set_postfix(reward=f"{info.held_out_reward:.3f}", commits=sum(h.committed for h in self.history))

    def settle_tokens(self) -> None:
        """Count tokens recorded after the last round (work in flight at the stop) in the last round."""
        total = self.usage.total_tokens
        if self.history and total > self._tokens_mark:
            self.history[-1].tokens += total - self._tokens_mark
            self._tokens_mark = total

    def close(self) -> None:
        """Close the progress bar."""
        if self.bar is not None:
            self.bar.close()


def summarize(reports: Sequence[MergeReport]) -> dict[str, int]:
    """A round's counts of its merge reports: commits, fused commits, stale cards, conflicts."""
    return {
        "committed": sum(r.outcome is MergeOutcome.COMMITTED for r in reports),
        "fused": sum(r.outcome is MergeOutcome.COMMITTED and r.fused for r in reports),
        "discarded_stale": sum(r.discarded_stale for r in reports),
        "conflicts_dropped": sum(r.conflicts_dropped for r in reports),
    }
