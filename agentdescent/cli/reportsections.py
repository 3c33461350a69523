"""The run report's sections: settings, reward, commits, rejected candidates, tasks, cost, why.

This module owns each section of the page, built from the run's data
(`agentdescent.cli.reportdata`) with the report's building blocks
(`agentdescent.cli.reportparts`): the settings and the commands (secrets left out), the
held-out reward over rounds and over tokens with the test set (and the answers given on it) and the rounds table, every
commit with its decision, evidence and diff, every rejected candidate with its reason, the
per-task results and sample outputs at the start and at the end, the cost by phase, and,
when nothing was committed, why. Every field read from the run is escaped.

It must not read a file, call a model, write a file or print.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.answers import CONSTANT_SHARE, NAMES_NONE, NAMES_SEVERAL, AnswerDistribution
from ..engine.why import edit_refusals, fate_totals, fates_words
from .explain import estimate_note
from .reportdata import _k, _m, _num, _per_task, _time
from .reportparts import (
    NOT_RECORDED,
    _chart,
    _cut,
    _diff,
    _duration,
    _e,
    _f,
    _interval_svg,
    _n,
    _pairs,
    _plural,
    _table,
    _when,
)
from .runspec import proposal_mode

__all__: list[str] = []


def _settings(spec: Mapping[str, Any], counts: Sequence[int | None]) -> str:
    def secret(name: str) -> bool:
        n = name.lower()
        return name != "api_key_env" and any(w in n for w in ("key", "secret", "password", "auth"))

    labels = [("model", "model"), ("provider", "provider"), ("base_url", "server"),
              ("api_key_env", "API key read from the variable"), ("reward", "reward"), ("strategy", "strategy"),
              ("seed", "seed"), ("held_out_frac", "held-out fraction"), ("stratify", "held-out split by field"),
              ("false_accept_rate", "false-accept rate"), ("call_tokens", "tokens per call"),
              ("temperature", "temperature"), ("tasks", "tasks file"), ("test_tasks", "test set file"),
              ("run_rounds", "rounds (last run)"), ("run_workers", "workers (last run)"),
              ("run_max_tokens", "token budget (last run)"), ("run_async", "asynchronous (last run)"),
              ("run_patience", "patience (last run)"),
              ("created", "initialised"), ("version", "agentdescent version")]
    shown = {"format", "command", "run_command", "initial_text", "proposer", "proposal"}
    rows = []
    for key, label in labels:
        shown.add(key)
        value = spec.get(key)
        if key == "created":
            cell = _when(value)
        elif isinstance(value, bool):
            cell = "yes" if value else "no"
        elif value is None:
            cell = '<span class="nr">none</span>' if key in spec else NOT_RECORDED
        else:
            cell = f"<code>${_e(value)}</code>" if key == "api_key_env" else _e(value)
        rows.append((label, cell))
    rows.insert(1, ("proposal mode", _e(proposal_mode(dict(spec)))))
    for what, n in zip(("tasks", "test tasks"), counts):
        frac = _num(spec.get("held_out_frac"))
        held = f" (about {round(n * frac)} held out)" if what == "tasks" and n and frac is not None and \
            0 <= frac <= 1 else ""
        rows.append((what, f"{n}{held}" if n is not None else NOT_RECORDED + " (the file cannot be read)"))
    ledger = spec.get("ledger")
    if isinstance(ledger, Mapping):  # a database ledger (init --ledger; never a password in it)
        shared = f", run id <code>{_e(ledger.get('run_id'))}</code>" if ledger.get("run_id") else ""
        rows.append(("ledger", f"PostgreSQL <code>{_e(ledger.get('dsn'))}</code>, schema "
                               f"<code>{_e(ledger.get('schema'))}</code>{shared}"))
    shown.add("ledger")
    proposer = spec.get("proposer")
    if isinstance(proposer, Mapping):
        parts = [f"{_e(k)} <code>{_e(v)}</code>" for k, v in proposer.items() if not secret(str(k)) and v is not None]
        rows.append(("proposals written by", ", ".join(parts)))
    else:
        rows.append(("proposals written by", "the run's model"))
    rows += [(str(k), _e(v)) for k, v in sorted(spec.items()) if k not in shown and not secret(str(k))]
    half = (len(rows) + 1) // 2
    out = [f'<div class="cols">{_pairs(rows[:half])}{_pairs(rows[half:])}</div>']
    if spec.get("initial_text"):
        out.append(f'<h3>Starting artifact (--initial)</h3><pre class="art">{_e(spec["initial_text"])}</pre>')
    for key, what in (("command", "The command that made the run directory"),
                      ("run_command", "The last command that ran it")):
        cmd = spec.get(key)
        body = f'<pre class="cmd">{_e(_command(cmd))}</pre>' if cmd else f"<p>{NOT_RECORDED} (an older run directory)</p>"
        out.append(f"<h3>{what}</h3>{body}")
    return "".join(out)


def _command(cmd: Any) -> str:
    """A command line with each flag on a line of its own (shell continuations), or as it was when it does not split."""
    try:
        words = shlex.split(str(cmd))
    except ValueError:
        return str(cmd)
    lines: list[list[str]] = [[]]
    for word in words:
        if word.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(shlex.quote(word))
    return " \\\n    ".join(" ".join(line) for line in lines)


def _test_block(test: Mapping[str, Any] | None, has_test_set: bool) -> str:
    if not test and has_test_set:
        return "<p>The test set has not been scored yet: it is scored when the run ends.</p>"
    if not test:
        return "<p>This run has no test set (<code>init --test-tasks</code> adds one).</p>"
    diff = test.get("difference") if isinstance(test.get("difference"), Mapping) else {}
    out = [f'<p class="big">test set ({_n(test.get("tasks"))} tasks no decision saw): '
           f'{_f(test.get("initial"))} at the start → {_f(test.get("final"))} at the end</p>']
    mean, low, high = (_num(diff.get(k)) for k in ("mean", "low", "high"))
    if mean is None or low is None or high is None:
        out.append(f"<p>Difference and interval: {NOT_RECORDED}.</p>")
        return "".join(out) + _answers_block(test)
    verdict = ("the interval excludes 0: the test set tells the two versions apart" if diff.get("separated")
               else "the interval contains 0: these tasks cannot tell the two versions apart")
    out.append(f"<p>Difference (end minus start, paired by task): <b>{mean:+.3f}</b>, 95% interval "
               f"[{low:+.3f}, {high:+.3f}] over {_n(diff.get('tasks'))} tasks; {verdict}.</p>")
    out.append(_interval_svg(mean, low, high))
    return "".join(out) + _answers_block(test)


def _answers_block(test: Mapping[str, Any]) -> str:
    """The answers on the test set: each label's count at the start and at the end beside the gold counts, and the warning."""
    end, start = test.get("answers"), test.get("answers_initial")
    if not isinstance(end, AnswerDistribution):
        return ""
    out = ["<h4>Answers on the test set</h4>"]
    warning = end.warning()
    if warning:
        out.append(f'<p class="warn">Warning: {_e(warning)}.</p>')
    heads = [label for label in (*end.gold, *end.answers, *(start.answers if start else ()))]
    labels = sorted(dict.fromkeys(heads), key=lambda k: (-end.gold.get(k, 0), -end.answers.get(k, 0), k))
    body = [[_e(label), _n(end.gold.get(label, 0)) if end.gold else NOT_RECORDED]
            + ([_n(start.answers.get(label, 0))] if start else []) + [_n(end.answers.get(label, 0))]
            for label in labels]
    out.append(_table(["answer", "expected"] + (["given at the start"] if start else []) + ["given at the end"],
                      body, "num"))
    best = end.best_constant_accuracy
    note = (f" Always giving the most frequent expected answer would score {best:.3f}." if best is not None else "")
    out.append(f'<p class="note">Each reply is labelled by the choice it names (by its text when the task has no '
               f"choices; {_e(NAMES_NONE)}: it names none, {_e(NAMES_SEVERAL)}: several), on the first draw of "
               f"{_n(end.tasks)} tasks.{note} An artifact that gives one answer to {CONSTANT_SHARE:.0%} of the tasks "
               f"or more is flagged: its score says more about the labels' balance than about skill.</p>")
    return "".join(out)


def _proposals_cell(p: Any) -> str:
    if not isinstance(p, Mapping):
        return NOT_RECORDED
    refused = p.get("refused") if isinstance(p.get("refused"), Mapping) else {}
    parts = [f"{_n(p.get('made'))} made"]
    if "rules" in p:
        parts.append(f"{_n(p.get('rules'))} rules")
    if _num(p.get("declined")):
        parts.append(f"{_n(p.get('declined'))} declined")
    parts += [f"{_n(v)} refused as {_e(k)}" for k, v in refused.items()]
    if edit_refusals(p):
        parts.append(_e(edit_refusals(p)))
    if "cards" in p:
        parts.append(f"{_n(p.get('cards'))} became cards")
    return ", ".join(parts)


def _fates_cell(record: Mapping[str, Any]) -> str:
    fates = record.get("fates")
    if not isinstance(fates, Mapping):
        return NOT_RECORDED
    return _e(fates_words(fates)) or '<span class="nr">none</span>'


def _estimate_mark(record: Mapping[str, Any]) -> str:
    """A ``*`` after a round's held-out reward that is an estimate (partly inherited), with its share as a tooltip."""
    note = estimate_note(record)
    return f' <span class="nr" title="{_e(note.strip(" ()"))}">*</span>' if note else ""


def _rounds_table(rows: Sequence[Mapping[str, Any]], status: Mapping[str, Any]) -> str:
    body = [["start", "", "", _f(status.get("initial_reward")), "v1", "", "", "", "", "", ""]]
    for r in rows:
        outcomes = r.get("outcomes") if isinstance(r.get("outcomes"), list) else []
        body.append([_e(r.get("round", "?")), _when(r.get("ended")), _duration(r.get("seconds")),
                     _f(r.get("held_out_reward")) + _estimate_mark(r), f"v{_e(r.get('head_version', '?'))}",
                     _n(r.get("committed", 0)),
                     (_e(", ".join(str(o) for o in outcomes)) or '<span class="nr">no decision</span>') + "".join(
                         f'<br><span class="nr">{_e(str(n))}</span>' for n in (r.get("notes") or [])
                         if isinstance(r.get("notes"), list)),
                     _proposals_cell(r.get("proposals")), _fates_cell(r), _n(r.get("tokens")),
                     _n(r.get("tokens_total"))])
    return _table(["round", "ended", "took", "held-out", "head", "commits", "merge outcomes", "proposals",
                   "fates (proposals and cards)", "tokens", "tokens in all"], body, "num")


def _reward(rows: Sequence[Mapping[str, Any]], status: Mapping[str, Any], test: Mapping[str, Any] | None,
            has_test_set: bool) -> str:
    unit = (" This run was asynchronous: each round is one merger sweep." if status.get("unit") == "merge" else "")
    start = _num(status.get("initial_reward"))
    by_round, by_tokens = [], []
    if start is not None:
        by_round.append((0.0, start, f"start: held-out {start:.3f}", False))
        by_tokens.append((0.0, start, f"start: held-out {start:.3f}", False))
    for r in rows:
        y, n, spent = _num(r.get("held_out_reward")), _num(r.get("round")), _num(r.get("tokens_total"))
        if y is None or n is None:
            continue
        committed = bool(_num(r.get("committed")))
        tip = f"round {n:g}: held-out {y:.3f}{estimate_note(r)}" + (
            f", {spent:,.0f} tokens spent" if spent is not None else "") + (", a commit" if committed else "")
        by_round.append((n, y, tip, committed))
        if spent is not None:
            by_tokens.append((spent, y, tip, committed))
    charts = (_chart(by_round, title="Held-out reward over rounds", xlabel="round", integer_x=True) +
              _chart(by_tokens, title="Held-out reward over tokens", xlabel="tokens spent", integer_x=False))
    return (f'<div class="charts">{charts}</div><p class="note">Round 0 is the starting artifact; a green dot is '
            f"a round that committed. The held-out reward is the head's mean on the held-out tasks; a * marks a "
            f"round's reward that is an estimate (some tasks' scores inherited from the versions before; its "
            f"tooltip says how much was measured). The run's final reward is measured on every task.{unit}</p>"
            f"<h3>Test set</h3>{_test_block(test, has_test_set)}<h3>Rounds</h3>{_rounds_table(rows, status)}")


def _evidence(ev: Any) -> str:
    if not isinstance(ev, Mapping):
        return NOT_RECORDED
    return (f"scored {_n(ev.get('scored'))} of {_n(ev.get('held_out'))} held-out tasks; "
            f"{_n(ev.get('gains'))} gains, {_n(ev.get('losses'))} losses, {_n(ev.get('regressions'))} regressions; "
            f"E = {_f(ev.get('e_value'), 1)} against the threshold {_f(ev.get('threshold'), 1)}; "
            f"candidate {_f(ev.get('candidate_mean'))} vs head {_f(ev.get('head_mean'))}"
            + _task_list("fixed", ev.get("fixed")) + _task_list("broke", ev.get("broke")))


def _task_list(what: str, ids: Any) -> str:
    """``; fixed 3 held-out tasks: a, b, c`` (the first 12), or nothing."""
    if not isinstance(ids, list) or not ids:
        return ""
    shown = ", ".join(_e(str(i)) for i in ids[:12]) + (f" and {len(ids) - 12} more" if len(ids) > 12 else "")
    return f"; {what} {_plural(len(ids), 'held-out task')}: {shown}"


def _feedback(items: Any) -> str:
    if not isinstance(items, list) or not items:
        return ""
    lis = "".join(f"<li>{_cut(f)}</li>" for f in items[:5])
    more = f'<li class="nr">and {len(items) - 5} more</li>' if len(items) > 5 else ""
    return f'<div class="fb">The reward\'s feedback that prompted it:<ul>{lis}{more}</ul></div>'


def _commits(states: Mapping[int, Mapping[str, str]], strategy: Any, decisions: Sequence[Mapping[str, Any]],
             rows: Sequence[Mapping[str, Any]], missing: set[int]) -> str:
    versions = sorted(states)
    if len(versions) < 2:
        return "<p>No commit: the artifact is still its starting version, v1.</p>"
    by_version = {_k(d.get("committed_version")): d for d in decisions if d.get("committed_version") is not None}
    out = [f"<p>{_plural(len(versions) - 1, 'commit')}; each diff is from the version before to the version "
           "it made.</p>"]
    for before, v in zip(versions, versions[1:]):
        d = by_version.get(v)
        row = d["row"] if d else next((r for r in rows if (_num(r.get("head_version")) or 0) >= v), None)
        head = [f"v{before} → v{v}"]
        if row is not None:
            head.append(f"round {_e(row.get('round', '?'))}")
        meta = [("ended", _when((row or {}).get("ended"))), ("round took", _duration((row or {}).get("seconds")))]
        if d:
            added = [str(line) for line in d.get("candidate") or [] if isinstance(line, str)]
            if added:
                meta.append(("what it wrote", "<br>".join(_e(line) for line in added[:12])))
            reached = [str(line) for line in d.get("machinery") or [] if isinstance(line, str)]
            if reached:
                meta.append(("reaches the test runner", "<br>".join(_e(line) for line in reached[:12])))
            meta += [("reason", _e(d.get("reason") or "") or NOT_RECORDED), ("evidence", _evidence(d.get("evidence"))),
                     ("cards considered", _n(d.get("considered"))), ("fused", "yes" if d.get("fused") else "no")]
        else:
            why = "the rounds of this run did not record it" if missing or not rows else "no decision names it"
            meta.append(("decision", f"{NOT_RECORDED} ({_e(why)})"))
        out.append(f'<div class="card"><h3>{" · ".join(head)}</h3>{_pairs(meta)}'
                   f"{_feedback(d.get('feedback') if d else None)}"
                   f"{_diff(strategy.render(states[before]), strategy.render(states[v]), f'v{before}', f'v{v}')}"
                   "</div>")
    return "".join(out)


def _rejected(decisions: Sequence[Mapping[str, Any]], missing: set[int]) -> str:
    rejected = [d for d in decisions if d.get("outcome") != "committed"]
    note = (f"<p>Decisions {NOT_RECORDED} for {_plural(len(missing), 'round')} "
            f"({_e(', '.join(str(m) for m in sorted(missing, key=str)))}).</p>" if missing else "")
    if not rejected:
        return note + "<p>No candidate was rejected.</p>"
    counts: dict[str, int] = {}
    for d in rejected:
        counts[str(d.get("outcome"))] = counts.get(str(d.get("outcome")), 0) + 1
    summary = ", ".join(f"{_e(k)} {v}" for k, v in sorted(counts.items()))
    body = []
    for d in rejected:
        lines = d["lines"]
        text = (f'<pre class="cand">{_e(chr(10).join(lines))}</pre>' if lines
                else '<span class="nr">no candidate text</span>')
        body.append([_e(d.get("round", "?")), f'<span class="out-{_e(d.get("outcome"))}">{_e(d.get("outcome"))}</span>',
                     _e(d.get("reason") or "") or NOT_RECORDED, text, _evidence(d.get("evidence"))])
    return (f"{note}<p>{_plural(len(rejected), 'decision')} did not commit: {summary}.</p>"
            + _table(["round", "outcome", "reason", "candidate (the lines it adds)", "numbers"], body, "wide"))


def _samples(result: Mapping[str, Any] | None, reason: str, prompts: Mapping[str, str]) -> str:
    out = ["<h3>Held-out tasks</h3>"]
    samples = (result or {}).get("held_out_samples")
    if not isinstance(samples, Mapping):
        why = reason or "result.json does not hold them (runs before this version did not keep them)"
        out.append(f"<p>Held-out samples: {NOT_RECORDED}; {_e(why)}.</p>")
    else:
        sides = [samples.get(k) if isinstance(samples.get(k), Mapping) else {} for k in ("initial", "final")]
        tasks = [s.get("tasks") if isinstance(s.get("tasks"), Mapping) else {} for s in sides]
        ids = sorted(set(tasks[0]) | set(tasks[1]), key=str)
        labels = [f"v{_e(s.get('version', '?'))}" for s in sides]

        def cell(task: Any) -> tuple[str, str]:
            if not isinstance(task, Mapping):
                return '<span class="nr">not scored</span>', ""
            text = f'<div class="out">{_cut(task.get("output", ""))}</div>'
            if task.get("feedback"):
                text += f'<div class="fbl">{_cut(task["feedback"])}</div>'
            return _f(task.get("score")), text

        body = []
        for t in ids:
            (s0, o0), (s1, o1) = cell(tasks[0].get(t)), cell(tasks[1].get(t))
            body.append([_task(t, prompts), s0, s1, o0, o1])
        out.append(f"<p>{len(ids)} held-out tasks; the head at the start ({labels[0]}) and at the end "
                   f"({labels[1]}).</p>" + _table(["task", f"start {labels[0]}", f"end {labels[1]}",
                                                   "sample output at the start", "sample output at the end"],
                                                  body, "wide"))
    out.append("<h3>Test set</h3>")
    test = (result or {}).get("test")
    if not isinstance(test, Mapping):
        out.append(f"<p>{_e(reason) + '.' if reason else 'This run has no test set.'}</p>")
        return "".join(out)
    start, end = test.get("initial"), test.get("final")
    scores = [_per_task(start), _per_task(end)]
    listed = _m(start).get("tasks") or _m(end).get("tasks")
    ids = [str(t) for t in (listed if isinstance(listed, list) else sorted(set(scores[0]) | set(scores[1])))]

    def text(evaluation: Any, task: str) -> str:
        if not isinstance(evaluation, Mapping):
            return '<span class="nr">not scored</span>'
        outputs, feedback = _m(evaluation.get("outputs")), _m(evaluation.get("feedback"))
        cell = f'<div class="out">{_cut(outputs.get(task, ""))}</div>'
        return cell + (f'<div class="fbl">{_cut(feedback[task])}</div>' if feedback.get(task) else "")

    body = []
    for t in ids:
        a, b = scores[0].get(t), scores[1].get(t)
        change = ""
        if a is not None and b is not None:
            change = f'<span class="{"up" if b > a else "down" if b < a else "same"}">{_f(b - a, signed=True)}</span>'
        body.append([_task(t, prompts), _f(a), _f(b), change, text(start, t), text(end, t)])
    out.append(_table(["task", "start", "end", "change", "first output at the start", "first output at the end"],
                      body, "wide"))
    return "".join(out)


def _task(task_id: Any, prompts: Mapping[str, str]) -> str:
    prompt = prompts.get(str(task_id))
    return f"<code>{_e(task_id)}</code>" + (f'<div class="prompt">{_cut(prompt, 160)}</div>' if prompt else "")


def _cost(rows: Sequence[Mapping[str, Any]], status: Mapping[str, Any], result: Mapping[str, Any] | None) -> str:
    usage = (result or {}).get("usage") if isinstance((result or {}).get("usage"), Mapping) else None
    out = []
    if usage is None:
        out.append(f"<p>Tokens by phase: {NOT_RECORDED} (no result.json yet); tokens spent so far: "
                   f"{_n(status.get('tokens'))}.</p>")
    else:
        phases = usage.get("phases") if isinstance(usage.get("phases"), Mapping) else {}
        total = _num(usage.get("total_tokens")) or sum(_num(v) or 0 for v in phases.values()) or 1
        body = [[_e(k), _n(v), f"{100 * (_num(v) or 0) / total:.1f}%",
                 f'<div class="bar" style="width:{min(100.0, 100 * (_num(v) or 0) / total):.1f}%"></div>']
                for k, v in sorted(phases.items(), key=lambda kv: -(_num(kv[1]) or 0))]
        body.append(["<b>all</b>", f"<b>{_n(usage.get('total_tokens'))}</b>", "100%", ""])
        out.append('<div class="cols">' + _table(["phase", "tokens", "share", ""], body, "num cost"))
        counters = (result or {}).get("counters") if isinstance((result or {}).get("counters"), Mapping) else {}
        calls = [("model calls", _n(usage.get("calls"))), ("prompt tokens", _n(usage.get("prompt_tokens"))),
                 ("completion tokens", _n(usage.get("completion_tokens"))),
                 ("cached prompt tokens", _n(usage.get("cached_tokens")))]
        for key, label in (("rollouts", "rollouts"), ("proposals", "proposals"), ("eval_rollouts",
                           "held-out scorings"), ("self_verify_rollouts", "self-verify rollouts"),
                           ("test_calls", "test-set calls")):
            if key in counters:
                calls.append((label, _n(counters.get(key))))
        out.append(_pairs(calls) + "</div>")
    seconds = [s for s in (_num(r.get("seconds")) for r in rows) if s is not None]
    if not rows:
        wall = '<span class="nr">no round yet</span>'
    elif not seconds:
        wall = NOT_RECORDED
    else:
        gaps = len(rows) - len(seconds)
        wall = _duration(sum(seconds)) + (f" ({_plural(gaps, 'round')} {NOT_RECORDED})" if gaps else "")
    started, finished = _time(status.get("started")), _time(status.get("finished"))
    elapsed = _duration((finished - started).total_seconds()) if started and finished else NOT_RECORDED
    out.append(_pairs([("wall time of the rounds", wall), ("last run started", _when(status.get("started"))),
                       ("finished", _when(status.get("finished"))), ("start to finish (to the second)", elapsed)]))
    return "".join(out)


def _why(rows: Sequence[Mapping[str, Any]], status: Mapping[str, Any], decisions: Sequence[Mapping[str, Any]]) -> str:
    why = status.get("why")
    out = [f'<p class="big">{_e(why)}</p>' if why else f"<p>The run's own summary (status <code>why</code>): "
           f"{NOT_RECORDED}.</p>"]
    counts: dict[str, int] = {}
    for d in decisions:
        counts[str(d.get("outcome"))] = counts.get(str(d.get("outcome")), 0) + 1
    out.append("<p>Merge decisions: " + (", ".join(f"{_e(k)} {v}" for k, v in sorted(counts.items()))
                                         or "none; no candidate reached a decision") + ".</p>")
    if any(isinstance(r.get("fates"), Mapping) for r in rows):
        out.append("<p>What became of the proposals and cards: "
                   + (_e(fates_words(fate_totals(rows))) or "no proposal, no card") + ".</p>")
    body = []
    for r in rows:
        p = r.get("proposals")
        if not isinstance(p, Mapping):
            body.append([_e(r.get("round", "?")), _f(r.get("held_out_reward")), NOT_RECORDED, "", ""])
            continue
        refused = p.get("refused") if isinstance(p.get("refused"), Mapping) else {}
        examples = p.get("examples") if isinstance(p.get("examples"), Mapping) else {}
        kinds = "".join(f"<li>{_e(k)}: {_n(v)}</li>" for k, v in refused.items())
        samples = "".join(f'<li><b>{_e(k)}</b>: <span class="out">{_cut(v, 240)}</span></li>'
                          for k, v in examples.items())
        body.append([_e(r.get("round", "?")), _f(r.get("held_out_reward")), _proposals_cell(p),
                     f"<ul>{kinds}</ul>" if kinds else "none", f"<ul>{samples}</ul>" if samples else ""])
    if body:
        out.append(_table(["round", "held-out", "proposals", "refused, by kind", "one reply of each kind"], body,
                          "wide"))
    else:
        out.append("<p>No round has ended.</p>")
    return "".join(out)
