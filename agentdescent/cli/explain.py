"""Why a run went as it did: each round's record in words, and the likely cause when nothing committed.

A round's record (a line of a run directory's ``rounds.jsonl``, `round_record`) holds what
became of its proposals (made, refused by kind with one example reply each, turned into
cards) and every merge decision with its numbers (`decision_record`: held-out tasks
scored, gains and losses, the paired test's e-value against its bound, the reason in
words). `round_lines` prints one record for ``agentdescent status --verbose`` and ``show
--round``; `likely_cause` (`agentdescent.engine.why`, named here too) reads a run's records
and names, in plain words, the most likely reason nothing was committed, with what to
change: the same sentence as ``result.explain()``. Pure functions over JSON-ready
dicts: it must not run, read or write anything. The readers take a record as a hand may
have left it: a field of the wrong type reads as missing, never as a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..code.machinery import new_findings, scan
from ..engine.result import RoundInfo
from ..engine.why import (
    KIND_WORDS,
    _i,
    _list,
    _map,
    _n,
    _refusals,
    _text,
    decision_facts,
    edit_refusals,
    fate_totals,
    fates_words,
    likely_cause,
    round_facts,
)
from ..errors import InvalidArgument
from ..merge.demonstrations import DEMO_KEY_PREFIX, Demonstration, is_demo_key
from ..types import MergeReport

__all__ = ["KIND_WORDS", "decision_record", "estimate_note", "fate_totals", "fates_words", "likely_cause", "round_lines",
           "round_record"]

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
    return {**decision_facts(report), "candidate": candidate, **({"machinery": machinery} if machinery else {})}


def round_record(info: RoundInfo, tokens_total: int) -> dict[str, Any]:
    """A round as one JSON-ready record (a line of ``rounds.jsonl``): its facts (`round_facts`), its
    tokens and time, and each decision with its candidate's text (`decision_record`)."""
    return {**round_facts(info), "tokens": info.tokens, "tokens_total": tokens_total,
            "outcomes": [r.outcome.value for r in info.reports], "seconds": info.elapsed,
            "decisions": [decision_record(r) for r in info.reports]}


def estimate_note(record: Mapping[str, Any]) -> str:
    """`` (an estimate: 80% of the held-out tasks measured on this head)`` for a round whose reward is
    partly inherited, or nothing (all measured, or a record that does not say)."""
    share = record.get("measured_share")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or share >= 1.0:
        return ""
    return f" (an estimate: {share:.0%} of the held-out tasks measured on this head)"


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
        if edit_refusals(proposals):
            line += f"; {edit_refusals(proposals)}"
        lines.append(line)
        for kind, example in sorted(_map(proposals.get("examples")).items()):
            lines.append(f"    e.g. {KIND_WORDS.get(kind, kind)}: {_text(example, 160)!r}")
    if isinstance(record.get("fates"), Mapping):
        lines.append(f"  fates: {fates_words(record['fates']) or 'none (no proposal, no card)'}")
    for note in _list(record.get("notes")):
        lines.append(f"  note: {_text(note, 400)}")
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


