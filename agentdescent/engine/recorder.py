"""Each merge of a run as one `agentdescent.engine.result.RoundInfo`: `RoundRecorder`.

This module owns what a round is measured from (the run meter's total, the backend
failures, the proposal calls and the clock at the previous round's end), the run's
history of rounds, ``on_round`` and the progress bar. What became of the round's
proposals (`RoundInfo.proposals`) is counted from its card fates (`agentdescent.fate`):
the reports' and those of the proposals the workers refused, drained from the run's
`agentdescent.fate.FateLog`. Both schedulers record through it
(by way of `agentdescent.engine.runtime.RunEnv.merge_and_record`). It must not merge,
commit, save progress or call a model.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from ..budget.governor import BudgetGovernor
from ..clock import Clock
from ..fate import CardFate, FateKind, FateLog
from ..types import MergeOutcome, MergeReport
from ..usage import Usage
from .counters import Counters
from .result import RoundInfo

__all__ = ["RoundRecorder", "proposal_summary", "summarize"]

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
        clock: the run's clock (each round's ``elapsed``).
        refusals: the log the workers record refused and declined proposals in (each
            round takes what was recorded since the last).
    """

    def __init__(self, usage: Usage, counters: Counters, governor: BudgetGovernor,
                 on_round: Callable[[RoundInfo], None] | None, unit: str = "round",
                 history: Sequence[RoundInfo] = (), clock: Clock | None = None,
                 refusals: FateLog | None = None) -> None:
        self.usage = usage
        self.counters = counters
        self.governor = governor
        self.on_round = on_round
        self.unit = unit
        self.history: list[RoundInfo] = list(history)
        self.resumed_rounds = len(self.history)
        self._tokens_mark = usage.total_tokens
        self._calls_mark = usage.calls
        self._spent_mark = governor.spent  # the budget's view: without the phases it leaves out
        self._failures_mark = counters.get("backend_failures")
        self.bar: Any = None
        self._bar_rollouts = False
        self.clock = clock
        self._time_mark = clock.now() if clock is not None else 0.0
        self.refusals = refusals if refusals is not None else FateLog()
        self._proposal_mark = self.counters.get("proposals")

    def rebase(self) -> None:
        """Count from where the run stands now: a resumed run restores its counters and meter after the
        recorder is made, and its first round must show only what it did itself (not the restored totals)."""
        self._tokens_mark = self.usage.total_tokens
        self._calls_mark = self.usage.calls
        self._spent_mark = self.governor.spent
        self._failures_mark = self.counters.get("backend_failures")
        self._proposal_mark = self.counters.get("proposals")

    def _proposals(self, reports: Sequence[MergeReport], refusals: Sequence[CardFate]) -> dict[str, Any]:
        """What became of the proposals since the last round (`RoundInfo.proposals`), from their fates."""
        made = self.counters.get("proposals")
        delta, self._proposal_mark = made - self._proposal_mark, made
        return proposal_summary(delta, reports, refusals)

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
        total, calls, failures = self.usage.total_tokens, self.usage.calls, self.counters.get("backend_failures")
        refused = self.refusals.drain()
        moment = self.clock.now() if self.clock is not None else 0.0
        info = RoundInfo(
            index=len(self.history) + 1, held_out_reward=held, tokens=total - self._tokens_mark,
            calls=calls - self._calls_mark,
            reports=reports, rollouts=rollouts, cards=cards,
            backend_failures=failures - self._failures_mark, head_version=head_version,
            proposals=self._proposals(reports, refused), refusals=refused,
            elapsed=round(moment - self._time_mark, 3),
            measured_share=measured_share, notes=list(notes or []), **summarize(reports),
        )
        self._time_mark = moment
        self._tokens_mark, self._calls_mark, self._failures_mark = total, calls, failures
        self.history.append(info)
        spent = self.governor.spent
        self.governor.end_round(spent - self._spent_mark)  # the projection excludes what the budget does
        self._spent_mark = spent
        logger.info("%s %d: held-out %.3f, %d commit(s), %d token(s)", self.unit, info.index, held,
                    info.committed, info.tokens)
        return info

    def announce(self, info: RoundInfo) -> None:
        """Pass a recorded round to the budget governor, ``on_round`` and the bar (after its progress is saved).

        The governor learns the round's held-out reward here (its diminishing-returns rule
        reads it), as it learned the round's spend in `record`: the recorder is the one
        writer of what a round did into it.
        """
        self.governor.observe(info.held_out_reward)
        if self.on_round is not None:
            self.on_round(info)
        if self.bar is not None:
            self.bar.update(info.rollouts if self._bar_rollouts else 1)
            self.bar.set_postfix(reward=f"{info.held_out_reward:.3f}", commits=sum(h.committed for h in self.history))

    def settle_tokens(self) -> None:
        """Count tokens (and calls) recorded after the last round (work in flight at the stop) in the last round."""
        total, calls = self.usage.total_tokens, self.usage.calls
        if self.history and total > self._tokens_mark:
            self.history[-1].tokens += total - self._tokens_mark
            self._tokens_mark = total
        if self.history and calls > self._calls_mark:
            self.history[-1].calls += calls - self._calls_mark
            self._calls_mark = calls

    def settle_refusals(self) -> None:
        """Put the proposals refused after the last round (work in flight at the stop) in the last round."""
        late = self.refusals.drain()
        if self.history and late:
            last = self.history[-1]
            last.refusals.extend(late)
            last.proposals = proposal_summary((last.proposals or {}).get("made", 0), last.reports, last.refusals)

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


def proposal_summary(made: int, reports: Sequence[MergeReport], refusals: Sequence[CardFate]) -> dict[str, Any]:
    """A round's `RoundInfo.proposals`, counted from its fates (never from a counter of its own).

    Args:
        made: the proposal calls that returned in the round.
        reports: the round's merge reports (each card's first fate counts once in ``cards``).
        refusals: the round's proposals that never became cards (``refused``, ``declined``).
    """
    cards = sum(1 for r in reports for f in r.fates if not f.retried)
    by: dict[str, dict[str, int]] = {"agent": {}, "edit": {}, "guard": {}}
    examples: dict[str, str] = {}
    declined = 0
    for fate in refusals:
        if fate.kind is FateKind.DECLINED:
            declined += 1
            continue
        source, kind = str(fate.numbers.get("by", "agent")), str(fate.numbers.get("kind", "other"))
        counts = by.setdefault(source, {})
        counts[kind] = counts.get(kind, 0) + 1
        if source == "agent" and fate.numbers.get("example"):
            examples.setdefault(kind, str(fate.numbers["example"]))
    refused = dict(sorted(by["agent"].items()))
    out: dict[str, Any] = {"made": made, "cards": cards, "rules": max(0, made - declined - sum(refused.values())),
                           "declined": declined, "refused": refused, "examples": examples}
    if by["edit"]:
        out["edits_refused"] = sum(by["edit"].values())  # edits that did not apply (a code strategy)
        out["edits_refused_kinds"] = dict(sorted(by["edit"].items()))
    if by["guard"]:
        out["demos_refused"] = sum(by["guard"].values())
    return out
