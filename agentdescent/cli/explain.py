"""Why a run went as it did: each round's record in words, and the likely cause when nothing committed.

A round's record (a line of a run directory's ``rounds.jsonl``, `round_record`) holds what
became of its proposals (made, refused by kind with one example reply each, turned into
cards) and every merge decision with its numbers (`decision_record`: held-out tasks
scored, gains and losses, the paired test's e-value against its bound, the reason in
words). `round_lines` prints one record for ``agentdescent status --verbose`` and ``show
--round``; `likely_cause` reads a run's records and names, in plain words, the most
likely reason nothing was committed, with what to change. Pure functions over JSON-ready
dicts: it must not run, read or write anything. The readers take a record as a hand may
have left it: a field of the wrong type reads as missing, never as a crash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..code.machinery import new_findings, scan
from ..engine.result import RoundInfo
from ..errors import InvalidArgument
from ..merge.demonstrations import DEMO_KEY_PREFIX, Demonstration, is_demo_key
from ..types import MergeOutcome, MergeReport

__all__ = ["KIND_WORDS", "decision_record", "estimate_note", "likely_cause", "round_lines", "round_record"]

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


def _op_line(key: str, value: str | None) -> str:
    """One write of a candidate as the report shows it: a rule's text, or a demonstration in one line."""
    if value is None:
        return f"(removes {key})"
    if is_demo_key(key):
        try:
            return f"demonstration {key[len(DEMO_KEY_PREFIX):]}: {Demonstration.from_value(value).describe()}"
        except InvalidArgument:
            pass
    return _text(value, 300)


def _machinery_lines(diff: Any) -> list[str]:
    """What a code diff's Python edits add that reaches into the test runner (`agentdescent.code.machinery`).

    An edited file's findings are those it has that the file before its edits had not (the
    file before is the written one with each replacement undone); a new or wholly replaced
    file's are all of its own. Empty for any other artifact.
    """
    lines = []
    for key, value in sorted(diff.ops.items()):
        if not (isinstance(key, str) and key.endswith(".py") and isinstance(value, str)):
            continue
        pairs = (getattr(diff, "edits", None) or {}).get(key)
        if pairs:  # the file before: each replacement undone, last first
            before = value
            for search, replace in reversed(pairs):
                before = before.replace(replace, search, 1)
            found = new_findings(value, before)
        else:
            found = scan(value)
        lines += [f"{key} {finding}" for finding in found]
    return lines


def decision_record(report: MergeReport) -> dict[str, Any]:
    """One merge decision, JSON-ready: outcome, reason, the candidate's text and the paired test's numbers.

    A code candidate whose edits reach into the test runner (a tree with
    ``machinery="flag"`` accepts them) also carries ``"machinery"``: one line per finding.
    """
    candidate: list[str] = []
    machinery: list[str] = []
    if report.accepted is not None:
        for key, value in sorted(report.accepted.ops.items()):
            candidate.append(_op_line(key, value))
        machinery = _machinery_lines(report.accepted)
    return {
        "artifact_id": report.artifact_id, "outcome": report.outcome.value, "reason": report.reason,
        "fused": report.fused, "considered": report.considered, "candidate": candidate,
        "committed_version": report.committed_version, "feedback": list(report.feedback),
        "evidence": dict(report.evidence) if report.evidence is not None else None,
        **({"machinery": machinery} if machinery else {}),
    }


def round_record(info: RoundInfo, tokens_total: int) -> dict[str, Any]:
    """A round as one JSON-ready record (a line of ``rounds.jsonl``)."""
    return {
        "round": info.index, "held_out_reward": info.held_out_reward, "head_version": info.head_version,
        "tokens": info.tokens, "tokens_total": tokens_total, "committed": info.committed,
        "fused": info.fused, "rollouts": info.rollouts, "cards": info.cards,
        "discarded_stale": info.discarded_stale, "backend_failures": info.backend_failures,
        "outcomes": [r.outcome.value for r in info.reports], "seconds": info.elapsed,
        "proposals": info.proposals, "decisions": [decision_record(r) for r in info.reports],
        "measured_share": info.measured_share,
    }


def estimate_note(record: Mapping[str, Any]) -> str:
    """`` (an estimate: 80% of the held-out tasks measured on this head)`` for a round whose reward is
    partly inherited, or nothing (all measured, or a record that does not say)."""
    share = record.get("measured_share")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or share >= 1.0:
        return ""
    return f" (an estimate: {share:.0%} of the held-out tasks measured on this head)"


def _refusals(refused: Mapping[str, Any]) -> str:
    return ", ".join(f"{_i(n)} {KIND_WORDS.get(kind, kind)}"
                     for kind, n in sorted(refused.items(), key=lambda kv: -_n(kv[1])))


def _evidence_words(evidence: Mapping[str, Any]) -> str:
    e = {k: _n(evidence.get(k)) for k in ("scored", "held_out", "gains", "losses", "regressions", "candidate_mean",
                                          "head_mean", "e_value", "threshold")}
    return (f"scored {e['scored']:.0f} of {e['held_out']:.0f} held-out task(s): {e['gains']:.0f} gained, "
            f"{e['losses']:.0f} lost ({e['regressions']:.0f} regression(s)); candidate "
            f"{e['candidate_mean']:.3f} against the head's {e['head_mean']:.3f}; "
            f"e-value {e['e_value']:.2f} against {e['threshold']:.0f}")


def round_lines(record: Mapping[str, Any]) -> list[str]:
    """One round's record in words: a heading line, then its proposals and each decision, indented."""
    reward = record.get("held_out_reward")
    head = (f"round {record.get('round')}: held-out {reward:.3f}{estimate_note(record)}"
            if _n(reward) == reward and reward is not None else f"round {record.get('round')}")
    head += f", {_i(record.get('committed', 0))} commit(s), {_i(record.get('tokens', 0)):,} tokens"
    if _n(record.get("seconds")):
        head += f", {_n(record['seconds']):.1f} s"
    lines = [head]
    proposals = record.get("proposals")
    if not isinstance(proposals, Mapping):
        lines.append(f"  proposals: not recorded ({_i(record.get('cards', 0))} card(s))")
    else:
        line = f"  proposals: {_i(proposals.get('made', 0))} made, {_i(proposals.get('cards', 0))} became card(s)"
        if "rules" in proposals:
            line += f"; {_i(proposals['rules'])} rule(s), {_i(proposals.get('declined', 0))} NONE"
            if _map(proposals.get("refused")):
                line += f", refused: {_refusals(_map(proposals['refused']))}"
        lines.append(line)
        for kind, example in sorted(_map(proposals.get("examples")).items()):
            lines.append(f"    e.g. {KIND_WORDS.get(kind, kind)}: {_text(example, 160)!r}")
    decisions = record.get("decisions")
    if not isinstance(decisions, list):  # a record written before decisions were kept
        decisions = [{"outcome": o, "reason": ""} for o in _list(record.get("outcomes"))]
    if not decisions:
        lines.append("  no merge decision (no card reached the aggregator)")
    for d in (d for d in decisions if isinstance(d, Mapping)):
        rule = "; ".join(str(c) for c in _list(d.get("candidate"))) or "(no candidate)"
        lines.append(f"  {d.get('outcome')}: {_text(rule, 160)}")
        if _map(d.get("evidence")):
            lines.append(f"    {_evidence_words(d['evidence'])}")
        if d.get("reason"):
            lines.append(f"    why: {_text(d['reason'], 400)}")
    return lines


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
    elif stale:
        stage = "every card was stale by the time it was merged"
        fixes.append("fewer workers, or the sync runtime")
    else:
        stage = _text(decisions[-1].get("reason") or "no decision committed", 300)
    return f"{head}: {summary}; {stage}" + (f". What to change: {'; '.join(fixes)}" if fixes else "")
