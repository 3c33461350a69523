"""Why a run went as it did, in plain words: the likely cause when nothing committed, from its rounds' facts.

A round's facts (`round_facts`: its commits, rollouts, cards, failed calls, what became of
its proposals, and each merge decision's outcome, reason and paired-test numbers from
`decision_facts`) are what the run's records say; `likely_cause` reads them, in the order a
proposal travels, and names the most likely reason nothing was committed with what to
change. `agentdescent.engine.result.EvolutionResult.explain` and the command line's
``status`` and ``run`` (`agentdescent.cli.explain`, whose round records add the candidates'
text to these facts) say the same sentence. Pure functions over JSON-ready dicts, which
read a record as a hand may have left it (a field of the wrong type reads as missing); it
must not run, read or write anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..fate import CardFate, FateKind, count_fates
from ..types import MergeOutcome, MergeReport

__all__ = ["EDIT_WORDS", "KIND_WORDS", "decision_facts", "edit_refusals", "fate_totals", "fates_words",
           "likely_cause", "round_facts", "round_notes"]

#: A refusal kind (`agentdescent.agents.proposals.REFUSAL_KINDS`) in words.
KIND_WORDS = {
    "truncated": "cut off by the per-call limit",
    "empty": "empty",
    "restated": "restated the artifact",
    "echoed": "echoed the task",
    "too_long": "too long",
    "not_a_rule": "not a rule",
}


def _text(value: str, limit: int) -> str:
    flat = " ".join(str(value).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _n(value: Any) -> float:
    """A count or a score as a number: anything that is not a real number (a bool, a string) is 0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value else 0.0


def _i(value: Any) -> int:
    return int(_n(value)) if abs(_n(value)) < 1e18 else 0


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


#: The card fates whose numbers are the decision's paired test (kept once, as the decision's ``evidence``).
_MEASURED = {FateKind.BELOW_TEST, FateKind.ORACLE_REJECTED, FateKind.COMMITTED, FateKind.CAS_LOST, FateKind.VETOED}


def _fate_record(fate: CardFate, report: MergeReport) -> dict[str, Any]:
    """A card's fate as a decision record keeps it: what the decision's own fields do not repeat."""
    data = fate.to_json()
    if data.get("reason") == report.reason:
        del data["reason"]  # the decision's reason
    if fate.kind in _MEASURED and data.get("numbers") == (report.evidence or {}):
        data.pop("numbers", None)  # the decision's evidence
    return data


def decision_facts(report: MergeReport) -> dict[str, Any]:
    """One merge decision's facts, JSON-ready: its artifact, outcome and reason, the paired test's numbers,
    and the fate of each card it ended (``fates``: kind, diff, author, and the reason and numbers where
    they are not the decision's own)."""
    return {
        "artifact_id": report.artifact_id, "outcome": report.outcome.value, "reason": report.reason,
        "fused": report.fused, "considered": report.considered, "discarded_stale": report.discarded_stale,
        "committed_version": report.committed_version, "feedback": list(report.feedback),
        "evidence": dict(report.evidence) if report.evidence is not None else None,
        "fates": [_fate_record(f, report) for f in report.fates],
    }


def fate_totals(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The card fates of several round records (their ``fates`` counts) added up, every kind a key."""
    totals = {k.value: 0 for k in FateKind}
    for record in records:
        for kind, n in _map(record.get("fates")).items():
            if kind in totals:
                totals[kind] += _i(n)
    return totals


#: A card fate's kind in words, where the value alone would not say it.
_FATE_WORDS = {
    "not-allocated": "not allocated (budget)", "already-in-head": "already in the head",
    "conflict-lost": "lost a conflict", "set-aside": "set aside by fusion", "gated": "gated (self-verify)",
    "below-test": "below the acceptance test", "oracle-rejected": "rejected by the L1 oracle",
    "cas-lost": "lost the compare-and-swap", "vetoed": "vetoed (commit_veto)",
}


def fates_words(counts: Mapping[str, Any]) -> str:
    """``"2 committed, 1 set aside by fusion, 3 refused"``: the non-zero fate counts, in the order a card travels."""
    return ", ".join(f"{_i(counts.get(k.value))} {_FATE_WORDS.get(k.value, k.value)}" for k in FateKind
                     if _i(counts.get(k.value)))


def round_facts(info: Any) -> dict[str, Any]:
    """One round's facts, JSON-ready, as `likely_cause` reads them (``info``: an
    `agentdescent.engine.result.RoundInfo`, which imports this module)."""
    return {
        "round": info.index, "held_out_reward": info.held_out_reward, "head_version": info.head_version,
        "committed": info.committed, "fused": info.fused, "rollouts": info.rollouts, "cards": info.cards,
        "calls": info.calls,
        "discarded_stale": info.discarded_stale, "backend_failures": info.backend_failures,
        "proposals": info.proposals, "decisions": [decision_facts(r) for r in info.reports],
        "measured_share": info.measured_share, "notes": list(info.notes),
        "fates": {k: n for k, n in count_fates(info.fates).items() if n},
        "refusals": [f.to_json() for f in info.refusals],
    }


def round_notes(noise_before: str, noise_now: str, noise: Mapping[str, Any], walk: Mapping[str, Any],
                held: float) -> list[str]:
    """What changed in how the run decides, or why it stood idle, in a round (`RoundInfo.notes`).

    Args:
        noise_before: the noise monitor's state before the round's merge (``"unknown"``...).
        noise_now: its state after it.
        noise: its counts (`agentdescent.merge.noise.NoiseMonitor.stats`).
        walk: the task walk's counts (``walk_open``: training tasks not yet seen solved).
        held: the head's held-out reward after the merge.
    """
    notes = []
    if noise_now != noise_before and noise_now == "deterministic":
        notes.append(f"the held-out evaluation was found deterministic ({_i(noise.get('agreements'))} re-draws of "
                     "the head agreed): from now on a score is a fact, scored once, and a decision may rest on "
                     "fewer tasks than before")
    elif noise_now != noise_before and noise_now == "noisy":
        notes.append(f"the held-out evaluation was found noisy ({_i(noise.get('disagreements'))} re-draw(s) of the "
                     "head disagreed): from now on tasks are drawn again on both sides, and a decision needs more "
                     "evidence than before")
    if walk.get("walk_open") == 0 and held < 1.0:
        notes.append("every training task is solved, or presumed solved by a commit, as far as the rollouts have "
                     f"seen, while the head's held-out reward is {held:.3f}: the failing held-out tasks are never "
                     "shown to a worker, so only a rollout that fails again (an exploration draw) can bring a "
                     "proposal; more training tasks, or a larger share of them (held_out_frac), help")
    return notes


def _refusals(refused: Mapping[str, Any]) -> str:
    return ", ".join(f"{_i(n)} {KIND_WORDS.get(kind, kind)}"
                     for kind, n in sorted(refused.items(), key=lambda kv: -_n(kv[1])))


#: An edit refusal's reason (`agentdescent.errors.EditRefused.reason`) in words, where it needs them.
EDIT_WORDS = {
    "not_found": "search block not in the file",
    "ambiguous": "search block found more than once",
    "outside": "a path outside the tree",
    "excluded": "a path the tree excludes",
    "malformed": "malformed",
    "no_edit": "no edit in the reply",
    "too_big": "too big",
    "machinery": "reaches into the test runner",
}


def edit_refusals(proposals: Mapping[str, Any]) -> str:
    """``2 edit(s) refused (1 search block not in the file, 1 a path the tree excludes)``, or nothing."""
    n = _i(proposals.get("edits_refused"))
    if not n:
        return ""
    kinds = _map(proposals.get("edits_refused_kinds"))
    said = ", ".join(f"{_i(k)} {EDIT_WORDS.get(kind, kind.replace('_', ' '))}"
                     for kind, k in sorted(kinds.items(), key=lambda kv: -_n(kv[1])))
    return f"{n} edit(s) refused" + (f" ({said})" if said else "")


def _proposal_fix(refused: Mapping[str, int], declined: float, made: float) -> str | None:
    """What to change when the proposals themselves are the loss (half of them or more refused or NONE)."""
    total = sum(refused.values())
    if total and 2 * total >= made:
        if max(refused, key=lambda kind: refused[kind]) == "truncated":
            return "raise --call-tokens (the per-call limit) or use a stronger proposer (init --proposer-model M)"
        return "the model explains instead of writing a rule: use a stronger proposer (init --proposer-model M)"
    if declined and 2 * declined >= made:
        return ("the model saw no rule to write: a reward with feedback (what was expected) or a stronger "
                "proposer (init --proposer-model M) gives it more to go on")
    return None


def likely_cause(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The most likely reason a run committed nothing, in plain words with what to change; None if it committed.

    Read in the order a proposal travels: what became of the proposals (refused by kind,
    declined), then where the candidates stopped (no card, the self-verify gate, the
    budget, the paired test, staleness), then what to change for the larger loss.
    """
    records = [r for r in records if isinstance(r, Mapping)]
    if not records or any(r.get("committed") for r in records):
        return None
    head = f"nothing committed in {len(records)} round(s)"
    failures = _i(sum(_n(r.get("backend_failures")) for r in records))
    props = [_map(r.get("proposals")) for r in records]
    made = _i(sum(_n(p.get("made", 0)) for p in props)) if any(props) else None
    cards = _i(sum(_n(r.get("cards")) for r in records))
    rollouts = _i(sum(_n(r.get("rollouts")) for r in records))
    if not made and rollouts == 0 and failures:
        return (f"{head}: {failures} model call(s) failed and no rollout finished; check the server, the model "
                "name and the key (`agentdescent status` shows the error)")
    idle = any(str(n).startswith("every training task is solved") for r in records for n in _list(r.get("notes")))
    if made == 0 and idle:
        return (f"{head}: no proposal was asked for: every training task is solved as far as the {rollouts} "
                "rollout(s) have seen, while held-out tasks still fail, and no worker is ever shown those (a "
                "proposal follows a failed rollout); more training tasks (a smaller held_out_frac), or tasks like "
                "the failing ones among the training tasks, help")
    if made == 0:
        return (f"{head}: no proposal was asked for, because every one of the {rollouts} rollout(s) scored 1 (a "
                "proposal follows a failure); the tasks may be too easy for the model, or the reward too lenient: "
                "check it on a wrong answer")
    counted = [p for p in props if p and "rules" in p]
    fixes: list[str] = []
    if counted and made:
        rules = _i(sum(_n(p["rules"]) for p in counted))
        declined = _i(sum(_n(p.get("declined", 0)) for p in counted))
        refused: dict[str, int] = {}
        for p in counted:
            for kind, k in _map(p.get("refused")).items():
                refused[str(kind)] = refused.get(str(kind), 0) + _i(k)
        summary = f"{made} proposal(s): {rules} rule(s), {declined} NONE, {sum(refused.values())} refused"
        if refused:
            summary += f" ({_refusals(refused)})"
        fix = _proposal_fix(refused, declined, made)
        if fix:
            fixes.append(fix)
    else:
        summary = f"{made} proposal(s), {cards} card(s)" if made is not None else f"{cards} card(s)"
    edits = {"edits_refused": sum(_n(p.get("edits_refused")) for p in props), "edits_refused_kinds": {}}
    for p in props:
        for kind, k in _map(p.get("edits_refused_kinds")).items():
            edits["edits_refused_kinds"][str(kind)] = edits["edits_refused_kinds"].get(str(kind), 0) + _i(k)
    if edits["edits_refused"]:
        summary += f"; {edit_refusals(edits)}"
        if made and 2 * edits["edits_refused"] >= made:
            fixes.append("the model's code edits do not apply to the files (`status --verbose` shows each kind): a "
                         "stronger code model, or a tree that includes the files it edits")
    decisions = [d for r in records for d in _list(r.get("decisions")) if isinstance(d, Mapping)]
    measured = [d for d in decisions if _map(d.get("evidence"))]
    gated = [d for d in decisions if str(d.get("reason", "")).startswith("self-verify gate")]
    skipped = [d for d in decisions if str(d.get("reason", "")).startswith("not evaluated")]
    stale = [d for d in decisions if d.get("outcome") == MergeOutcome.ALL_STALE.value]
    if cards == 0:
        stage = "none became a card"
    elif not decisions:
        stage = f"{cards} card(s), and no merge decision was reached"
    elif measured:
        gains = _i(sum(_n(d["evidence"].get("gains")) for d in measured))
        losses = _i(sum(_n(d["evidence"].get("losses")) for d in measured))
        scored = _i(sum(_n(d["evidence"].get("scored")) for d in measured))
        stage = (f"{len(measured)} candidate(s) measured on held-out tasks, none passed the paired test ({scored} "
                 f"task(s) scored in all: {gains} gained, {losses} lost)")
        if gated:
            stage += f", {len(gated)} more stopped at the self-verify gate"
        fixes.append("the rules did not help on tasks they were not written for: read them (`status --verbose`) "
                     "and try a stronger proposer")
    elif gated and len(gated) >= len(skipped):
        stage = (f"{len(gated)} candidate(s), each stopped at the self-verify gate: no proposed rule changed the "
                 "answer on the task it was written for")
        fixes.append("the model does not follow the rules it writes: a stronger model may")
    elif skipped:
        stage = f"{len(skipped)} candidate(s) not evaluated because the budget ran short"
        fixes.append("raise --max-tokens")
    elif stale and any(d.get("discarded_stale") is None or _n(d.get("discarded_stale")) for d in stale):
        stage = "every card was stale by the time it was merged"
        fixes.append("fewer workers, or the sync runtime")
    elif stale:  # "all-stale" by outcome, none stale: every diff was already in the head
        stage = "no card was stale: every proposed change was already in the head"
        fixes.append("the proposer repeats what the artifact holds: show it the failing tasks' feedback, or a "
                     "stronger proposer")
    else:
        stage = _text(decisions[-1].get("reason") or "no decision committed", 300)
    return f"{head}: {summary}; {stage}" + (f". What to change: {'; '.join(fixes)}" if fixes else "")
