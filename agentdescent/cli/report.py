"""The run report: one self-contained HTML page about a run directory (``agentdescent report``).

`build_report` reads a run directory (``spec.json``, ``status.json``, ``rounds.jsonl``,
``result.json``, the tasks files and the ledger's versions, through `agentdescent.cli.rundir`
and `agentdescent.cli.runspec`) and returns one HTML page: the settings and the commands, the
held-out reward over rounds and over tokens (inline SVG charts with labelled axes), the
test set's before and after with its interval, every commit with its diff, evidence and
time, every rejected candidate with its reason, per-task results and sample outputs at the
start and at the end, the cost by phase, and, when nothing was committed, why.

The page is self-contained: inline CSS and SVG, no script, no font, image or link outside
it. Every field read from the run is escaped with `html.escape` (a prompt, an output, a
rule or a model name may hold markup). A field an older run did not record is shown as
"not recorded"; the page still renders. This module owns the page only: it must not call
a model, write a file or print (the command line writes what it returns).
"""

from __future__ import annotations

import datetime
import difflib
import html
import math
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .rundir import RunDir, load_tasks, read_json
from .runspec import load_versions, proposal_mode

__all__ = ["build_report"]

NOT_RECORDED = '<span class="nr">not recorded</span>'
#: characters of an output or a prompt shown in a table cell
CUT = 300

# --------------------------------------------------------------------------- formatting (each returns safe HTML)


def _e(value: Any) -> str:
    """``value`` as escaped text."""
    return html.escape(str(value))


def _num(value: Any) -> float | None:
    """A finite real number, else None (bools, strings, NaN and missing values are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _k(value: Any) -> Any:
    """``value`` as a dict key: a list or a dict a hand put where a number goes becomes its text."""
    return value if value is None or isinstance(value, (str, int, float)) else repr(value)


def _m(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a mapping, else an empty one (a field of the wrong shape reads as missing)."""
    return value if isinstance(value, Mapping) else {}


def _f(value: Any, digits: int = 3, *, signed: bool = False) -> str:
    x = _num(value)
    if x is None:
        return NOT_RECORDED
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _n(value: Any) -> str:
    """An integer count with thousands separators."""
    x = _num(value)
    return NOT_RECORDED if x is None else f"{int(x):,}"


def _cut(text: Any, limit: int = CUT) -> str:
    s = str(text)
    return _e(s) if len(s) <= limit else _e(s[:limit]) + '<span class="nr">… (cut)</span>'


def _duration(seconds: Any) -> str:
    s = _num(seconds)
    if s is None:
        return NOT_RECORDED
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


def _time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def _when(value: Any) -> str:
    when = _time(value)
    if when is None:
        return NOT_RECORDED if value in (None, "") else _e(value)
    return _e(when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    """A table from cells that are already HTML."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    heads = "".join(f"<th>{h}</th>" for h in head)
    return f'<table class="{cls}"><thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table>'


def _pairs(rows: Iterable[tuple[str, str]]) -> str:
    """A two-column key/value table (keys plain text, values HTML)."""
    return '<table class="kv"><tbody>' + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + \
        "</tbody></table>"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# --------------------------------------------------------------------------- the run's data


def _result(run: RunDir) -> tuple[dict[str, Any] | None, str]:
    """result.json, or None with the reason it is not there."""
    if not run.result_file.exists():
        return None, "the run has not finished yet: there is no result.json"
    try:
        return read_json(run.result_file, "result.json"), ""
    except ValueError as exc:
        return None, f"result.json cannot be read ({exc})"


def _prompts(run: RunDir, spec: Mapping[str, Any]) -> tuple[dict[str, str], list[int | None]]:
    """Task id -> prompt from the tasks and test set files, and each file's task count (None: unreadable)."""
    prompts: dict[str, str] = {}
    counts: list[int | None] = []
    files = [(run.tasks_file, 4)] + ([(run.test_tasks_file, 1)] if spec.get("test_tasks") else [])
    for path, minimum in files:
        try:
            tasks = load_tasks(path, minimum=minimum)
        except ValueError:
            counts.append(None)
            continue
        prompts.update({t.id: t.prompt for t in tasks})
        counts.append(len(tasks))
    return prompts, counts


def _candidate_lines(candidate: Any) -> list[str]:
    """The lines a candidate adds: a list of lines, or a diff's ``ops`` (as result.json holds them)."""
    if isinstance(candidate, list):
        return [str(line) for line in candidate]
    if isinstance(candidate, Mapping) and isinstance(candidate.get("ops"), Mapping):
        return [line for v in candidate["ops"].values() if isinstance(v, str) for line in v.splitlines()]
    return []


def _decisions(rows: Sequence[Mapping[str, Any]], result: Mapping[str, Any] | None) -> tuple[list[dict], set[int]]:
    """Every merge decision, with its round; and the rounds whose decisions were not recorded.

    A round's ``decisions`` come from its rounds.jsonl row; an older row without them falls
    back on result.json's history (its merge reports hold the same numbers).
    """
    listed_history = (result or {}).get("history")
    history = {_k(h.get("index")): h for h in listed_history if isinstance(h, Mapping)} \
        if isinstance(listed_history, list) else {}
    found: list[dict] = []
    missing: set[int] = set()
    for row in rows:
        number = _k(row.get("round"))
        listed = row.get("decisions")
        if not isinstance(listed, list):
            listed = _m(history.get(number)).get("reports")
        if not isinstance(listed, list):
            if row.get("committed") or row.get("outcomes"):
                missing.add(number)
            continue
        for d in listed:
            if isinstance(d, Mapping):
                found.append({**d, "round": number, "row": row, "lines": _candidate_lines(d.get("candidate"))})
    return found, missing


def _per_task(evaluation: Any) -> dict[str, float]:
    """Task id -> mean score of a test-set evaluation (its ``per_task``, else the mean of its ``draws``)."""
    if not isinstance(evaluation, Mapping):
        return {}
    given = evaluation.get("per_task")
    if isinstance(given, Mapping):
        return {str(k): float(v) for k, v in given.items() if _num(v) is not None}
    draws = evaluation.get("draws") if isinstance(evaluation.get("draws"), Mapping) else {}
    out = {}
    for task, values in draws.items():
        scores = [float(v) for v in values if _num(v) is not None] if isinstance(values, list) else []
        if scores:
            out[str(task)] = sum(scores) / len(scores)
    return out


# --------------------------------------------------------------------------- charts


def _ticks(high: float, integer: bool) -> list[float]:
    """Round tick values from 0 to at least ``high`` (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / 5
    magnitude = 10 ** math.floor(math.log10(raw))
    steps = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(m * magnitude for m in steps if m * magnitude >= raw)
    if integer:
        step = max(1.0, round(step))
    ticks = [0.0]
    while ticks[-1] < high - 1e-9:
        ticks.append(ticks[-1] + step)
    return ticks


def _tick_label(value: float) -> str:
    if value >= 10000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def _chart(points: Sequence[tuple[float, float, str, bool]], *, title: str, xlabel: str, integer_x: bool) -> str:
    """A line chart of held-out reward (0-1) against ``xlabel``; each point (x, y, tooltip, committed)."""
    if not points:
        return '<p class="nr">No held-out reward recorded yet: no round has ended.</p>'
    width, height, left, right, top, bottom = 480, 290, 60, 20, 46, 50
    xticks = _ticks(max(p[0] for p in points), integer_x)
    xmax = xticks[-1] or 1.0

    def sx(x: float) -> float:
        return left + x / xmax * (width - left - right)

    def sy(y: float) -> float:
        return top + (1 - min(1.0, max(0.0, y))) * (height - top - bottom)

    out = [f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
           f'aria-label="{_e(title)}"><title>{_e(title)}</title>',
           f'<text class="ct" x="{width / 2:.0f}" y="20" text-anchor="middle">{_e(title)}</text>']
    for v in (0.0, 0.25, 0.5, 0.75, 1.0):
        out.append(f'<line class="grid" x1="{left}" y1="{sy(v):.1f}" x2="{width - right}" y2="{sy(v):.1f}"/>'
                   f'<text class="tick" x="{left - 6}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    for t in xticks:
        out.append(f'<line class="axis" x1="{sx(t):.1f}" y1="{height - bottom}" x2="{sx(t):.1f}" '
                   f'y2="{height - bottom + 5}"/><text class="tick" x="{sx(t):.1f}" y="{height - bottom + 18}" '
                   f'text-anchor="middle">{_e(_tick_label(t))}</text>')
    out.append(f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}"/>'
               f'<line class="axis" x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}"/>')
    out.append(f'<text class="al" x="{(left + width - right) / 2:.0f}" y="{height - 10}" '
               f'text-anchor="middle">{_e(xlabel)}</text>')
    mid = (top + height - bottom) / 2
    out.append(f'<text class="al" x="16" y="{mid:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 16 {mid:.0f})">held-out reward (0–1)</text>')
    line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _, _ in points)
    out.append(f'<polyline class="line" points="{line}"/>')
    for x, y, tip, committed in points:
        cls, r = ("dot commit", 5.5) if committed else ("dot", 3.5)
        out.append(f'<circle class="{cls}" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="{r}"><title>{_e(tip)}</title>'
                   "</circle>")
    if any(p[3] for p in points):
        out.append(f'<circle class="dot commit" cx="{width - right - 62}" cy="{top - 12}" r="5"/>'
                   f'<text class="tick" x="{width - right - 52}" y="{top - 8}">a commit</text>')
    out.append("</svg>")
    return "".join(out)


def _interval_svg(mean: float, low: float, high: float) -> str:
    """The test set's difference (end minus start) and its interval on a -1..+1 axis."""
    width, height, pad = 480, 64, 30

    def sx(v: float) -> float:
        return pad + (min(1.0, max(-1.0, v)) + 1) / 2 * (width - 2 * pad)

    ticks = "".join(f'<line class="axis" x1="{sx(v):.1f}" y1="36" x2="{sx(v):.1f}" y2="41"/>'
                    f'<text class="tick" x="{sx(v):.1f}" y="55" text-anchor="middle">{v:+g}</text>'
                    for v in (-1.0, -0.5, 0.0, 0.5, 1.0))
    return (f'<svg class="chart" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="test-set difference and its 95% interval"><title>test-set difference (end minus start) '
            f'and its 95% interval</title><line class="axis" x1="{pad}" y1="36" x2="{width - pad}" y2="36"/>{ticks}'
            f'<line class="zero" x1="{sx(0):.1f}" y1="16" x2="{sx(0):.1f}" y2="36"/>'
            f'<line class="ci" x1="{sx(low):.1f}" y1="21" x2="{sx(high):.1f}" y2="21"/>'
            f'<circle class="dot commit" cx="{sx(mean):.1f}" cy="21" r="5"/>'
            f'<text class="tick" x="{pad}" y="12">difference (end − start) and its 95% interval</text></svg>')


# --------------------------------------------------------------------------- sections


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


def _test_summary(status: Mapping[str, Any], result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    test = status.get("test")
    if isinstance(test, Mapping):
        return dict(test)
    full = (result or {}).get("test")
    if not isinstance(full, Mapping):
        return None
    initial, final = _m(full.get("initial")), _m(full.get("final"))
    listed = initial.get("tasks") or final.get("tasks")
    return {"initial": initial.get("mean"), "final": final.get("mean"),
            "tasks": len(listed) if isinstance(listed, list) else None, "difference": full.get("difference")}


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
        return "".join(out)
    verdict = ("the interval excludes 0: the test set tells the two versions apart" if diff.get("separated")
               else "the interval contains 0: these tasks cannot tell the two versions apart")
    out.append(f"<p>Difference (end minus start, paired by task): <b>{mean:+.3f}</b>, 95% interval "
               f"[{low:+.3f}, {high:+.3f}] over {_n(diff.get('tasks'))} tasks; {verdict}.</p>")
    out.append(_interval_svg(mean, low, high))
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
    if "cards" in p:
        parts.append(f"{_n(p.get('cards'))} became cards")
    return ", ".join(parts)


def _rounds_table(rows: Sequence[Mapping[str, Any]], status: Mapping[str, Any]) -> str:
    body = [["start", "", "", _f(status.get("initial_reward")), "v1", "", "", "", "", ""]]
    for r in rows:
        outcomes = r.get("outcomes") if isinstance(r.get("outcomes"), list) else []
        body.append([_e(r.get("round", "?")), _when(r.get("ended")), _duration(r.get("seconds")),
                     _f(r.get("held_out_reward")), f"v{_e(r.get('head_version', '?'))}", _n(r.get("committed", 0)),
                     _e(", ".join(str(o) for o in outcomes)) or '<span class="nr">no decision</span>',
                     _proposals_cell(r.get("proposals")), _n(r.get("tokens")), _n(r.get("tokens_total"))])
    return _table(["round", "ended", "took", "held-out", "head", "commits", "merge outcomes", "proposals",
                   "tokens", "tokens in all"], body, "num")


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
        tip = f"round {n:g}: held-out {y:.3f}" + (f", {spent:,.0f} tokens spent" if spent is not None else "") + \
            (", a commit" if committed else "")
        by_round.append((n, y, tip, committed))
        if spent is not None:
            by_tokens.append((spent, y, tip, committed))
    charts = (_chart(by_round, title="Held-out reward over rounds", xlabel="round", integer_x=True) +
              _chart(by_tokens, title="Held-out reward over tokens", xlabel="tokens spent", integer_x=False))
    return (f'<div class="charts">{charts}</div><p class="note">Round 0 is the starting artifact; a green dot is '
            f"a round that committed. The held-out reward is the head's mean on the held-out tasks.{unit}</p>"
            f"<h3>Test set</h3>{_test_block(test, has_test_set)}<h3>Rounds</h3>{_rounds_table(rows, status)}")


def _evidence(ev: Any) -> str:
    if not isinstance(ev, Mapping):
        return NOT_RECORDED
    return (f"scored {_n(ev.get('scored'))} of {_n(ev.get('held_out'))} held-out tasks; "
            f"{_n(ev.get('gains'))} gains, {_n(ev.get('losses'))} losses, {_n(ev.get('regressions'))} regressions; "
            f"E = {_f(ev.get('e_value'), 1)} against the threshold {_f(ev.get('threshold'), 1)}; "
            f"candidate {_f(ev.get('candidate_mean'))} vs head {_f(ev.get('head_mean'))}")


def _feedback(items: Any) -> str:
    if not isinstance(items, list) or not items:
        return ""
    lis = "".join(f"<li>{_cut(f)}</li>" for f in items[:5])
    more = f'<li class="nr">and {len(items) - 5} more</li>' if len(items) > 5 else ""
    return f'<div class="fb">The reward\'s feedback that prompted it:<ul>{lis}{more}</ul></div>'


def _diff(old: str, new: str, a: str, b: str) -> str:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), a, b, lineterm=""))
    if not lines:
        return '<pre class="diff"><span class="nr">(no change)</span></pre>'
    out = []
    for line in lines:
        cls = ("dh" if line.startswith(("---", "+++")) else "hunk" if line.startswith("@@")
               else "add" if line.startswith("+") else "del" if line.startswith("-") else "ctx")
        out.append(f'<span class="{cls}">{_e(line)}\n</span>')
    return '<pre class="diff">' + "".join(out) + "</pre>"


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


# --------------------------------------------------------------------------- the page

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;background:#fff;margin:0}
main{max-width:66rem;margin:0 auto;padding:1.2rem 1.4rem 3rem}
h1{font-size:1.6rem;margin:.2rem 0}h2{font-size:1.25rem;margin:2rem 0 .6rem;padding-bottom:.3rem;
border-bottom:2px solid #d0d7de}h3{font-size:1.02rem;margin:1.2rem 0 .4rem}
.sub{color:#57606a;margin:.2rem 0 .8rem}nav{margin:.6rem 0 1rem;font-size:.92rem}
nav a{margin-right:.9rem;color:#0969da;text-decoration:none}
.glance{display:flex;flex-wrap:wrap;gap:.6rem}.glance div{border:1px solid #d0d7de;border-radius:8px;
padding:.5rem .8rem;min-width:9rem;background:#f6f8fa}.glance b{display:block;font-size:1.15rem}
.glance span{color:#57606a;font-size:.85rem}.error{color:#cf222e;font-weight:600}
table{border-collapse:collapse;margin:.4rem 0 .8rem;font-size:.9rem}
th,td{border:1px solid #d0d7de;padding:.28rem .55rem;vertical-align:top;text-align:left}
thead th{background:#f6f8fa}table.kv th{background:#f6f8fa;font-weight:500;width:12rem}
table.num td{text-align:right;white-space:nowrap}table.num td:nth-child(7),table.num td:nth-child(8){
text-align:left;white-space:normal}
table.wide{width:100%}table.cost td:first-child{text-align:left}table.cost td:last-child{width:14rem}
.cols{display:flex;flex-wrap:wrap;gap:0 1.2rem;align-items:flex-start}.cols>table.kv{flex:1 1 24rem}.up{color:#1a7f37;font-weight:600}
.down{color:#cf222e;font-weight:600}.same{color:#8c959f}pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.6rem .8rem;
overflow-x:auto;white-space:pre-wrap;word-break:break-word;font-size:.85rem;margin:.4rem 0}
td pre{margin:0;padding:.3rem .4rem}code{font-size:.88em}.cmd{background:#1f2328;color:#f0f3f6}
.diff span{display:block}.diff .add{color:#116329;background:#dafbe1}.diff .del{color:#82071e;
background:#ffebe9}.diff .dh{color:#57606a}.diff .hunk{color:#8250df}.cand{color:#116329;background:#f0fff4}
.card{border:1px solid #d0d7de;border-radius:8px;padding:.2rem .9rem .6rem;margin:.8rem 0}
.nr{color:#8c959f;font-style:italic}.note{color:#57606a;font-size:.88rem}.big{font-size:1.05rem}
.charts{display:flex;flex-wrap:wrap;gap:1rem}.chart{background:#fff;border:1px solid #d0d7de;border-radius:6px}
.chart .grid{stroke:#eaeef2}.chart .axis{stroke:#57606a}.chart .zero{stroke:#cf222e;stroke-dasharray:3 3}
.chart .line{fill:none;stroke:#0969da;stroke-width:2}.chart .dot{fill:#0969da}.chart .commit{fill:#1a7f37}
.chart .ci{stroke:#1a7f37;stroke-width:4}.chart text{font:12px system-ui,sans-serif;fill:#1f2328}
.chart .ct{font-size:14px;font-weight:600}.chart .al{font-size:13px}.chart .tick{fill:#57606a}
.out{font-family:ui-monospace,monospace;font-size:.82rem;white-space:pre-wrap;word-break:break-word}
.fbl{color:#57606a;font-size:.82rem;margin-top:.2rem}.prompt{color:#57606a;font-size:.8rem}
.fb{font-size:.85rem;color:#57606a}.fb ul{margin:.2rem 0}.bar{background:#0969da;height:.7rem;min-width:1px}
td ul{margin:0;padding-left:1.1rem}.out-below-threshold,.out-oracle-rejected{color:#9a6700}
footer{margin-top:2.5rem;color:#8c959f;font-size:.8rem}
"""


def _glance(status: Mapping[str, Any], result: Mapping[str, Any] | None,
            head: int, test: Mapping[str, Any] | None) -> str:
    final = status.get("held_out_reward")
    cards = [(f"{_f(status.get('initial_reward'))} → {_f(final)}", "held-out reward, start → end"),
             (f"v{head}", f"head ({_plural(head - 1, 'commit')})"),
             (_n(status.get("tokens")), "tokens spent"),
             (f"{_e(status.get('state', '?'))}", f"stop reason: {_e(status.get('stop_reason') or 'none')}")]
    if test:
        cards.append((f"{_f(test.get('initial'))} → {_f(test.get('final'))}", "test set, start → end"))
    out = '<div class="glance">' + "".join(f"<div><b>{a}</b><span>{b}</span></div>" for a, b in cards) + "</div>"
    error = status.get("error") or (result or {}).get("error")
    if error:
        out += f'<p class="error">The run failed: {_cut(error, 600)}</p>'
    return out


def build_report(run: RunDir) -> str:
    """The report of the run in ``run``, as one self-contained HTML page (every field escaped).

    It reads the run directory and writes nothing; a field an older run did not record is
    shown as "not recorded".

    Raises:
        UsageError: ``run`` is not a run directory (no readable spec.json).
    """
    spec = run.spec()
    status = run.status()
    rows = [r for r in run.rounds() if isinstance(r, Mapping)]
    result, result_problem = _result(run)
    prompts, counts = _prompts(run, spec)
    if run.ledger_file.exists():
        states, strategy = load_versions(run)
    else:
        states, strategy = {}, None
    decisions, missing = _decisions(rows, result)
    test = _test_summary(status, result)
    versions = sorted(states)
    head = versions[-1] if versions else 1
    committed = len(versions) > 1 or any(d.get("outcome") == "committed" for d in decisions)
    name = _e(run.path.name)
    sections = [("settings", "Settings and the command", _settings(spec, counts)),
                ("reward", "Reward over rounds and over tokens", _reward(rows, status, test, bool(spec.get("test_tasks"))))]
    if not committed:
        sections.append(("why", "Why nothing improved", _why(rows, status, decisions)))
    if strategy is not None:
        sections.append(("commits", f"Commits ({len(versions) - 1})", _commits(states, strategy, decisions, rows,
                                                                              missing)))
    else:
        sections.append(("commits", "Commits", "<p>The run has no ledger yet: it has not run.</p>"))
    n_rejected = sum(1 for d in decisions if d.get("outcome") != "committed")
    sections += [("rejected", f"Rejected candidates ({n_rejected})", _rejected(decisions, missing)),
                 ("tasks", "Per-task results at the start and at the end", _samples(result, result_problem, prompts)),
                 ("cost", "Cost", _cost(rows, status, result))]
    if strategy is not None:
        first, last = versions[0], versions[-1]
        final = strategy.render(states[last])
        sections.append(("artifact", f"Final artifact (v{last})",
                         f'<pre class="art">{_e(final)}</pre><h3>Diff from the start (v{first} to v{last})</h3>'
                         + _diff(strategy.render(states[first]), final, f"v{first}", f"v{last}")))
    nav = "".join(f'<a href="#{key}">{_e(title)}</a>' for key, title, _ in sections)
    body = "".join(f'<section id="{key}"><h2>{_e(title)}</h2>{content}</section>' for key, title, content in sections)
    model = _e(spec.get("model", "?"))
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>agentdescent run report: {name}</title><style>{CSS}</style></head><body><main>"
            f"<h1>Run report: {name}</h1>"
            f'<p class="sub">model <b>{model}</b> ({_e(spec.get("provider", "?"))}), reward '
            f'<b>{_e(spec.get("reward", "?"))}</b>, strategy <b>{_e(spec.get("strategy", "?"))}</b>; '
            f"{_plural(len(rows), 'round')} recorded</p>"
            f"<nav>{nav}</nav>{_glance(status, result, head, test)}{body}"
            f"<footer>Written by <code>agentdescent report</code> from the files of the run directory "
            f"{name}; it calls no model and needs no network.</footer></main></body></html>\n")
