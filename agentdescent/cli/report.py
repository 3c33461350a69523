"""The run report: one self-contained HTML page about a run directory (``agentdescent report``).

`build_report` reads a run directory (``spec.json``, ``status.json``, ``rounds.jsonl``,
``result.json``, the tasks files and the ledger's versions, through `agentdescent.cli.rundir`,
`agentdescent.cli.runledger` and `agentdescent.cli.runspec`) and returns one HTML page: the settings and the commands, the
held-out reward over rounds and over tokens (inline SVG charts with labelled axes), the
test set's before and after with its interval and the answers given on it (a warning when
the final artifact gives nearly one answer to every test task), every commit with its diff, evidence and
time, every rejected candidate with its reason, per-task results and sample outputs at the
start and at the end, the cost by phase, and, when nothing was committed, why.

The page is self-contained: inline CSS and SVG, no script, no font, image or link outside
it. Every field read from the run is escaped with `html.escape` (a prompt, an output, a
rule or a model name may hold markup). A field an older run did not record is shown as
"not recorded"; the page still renders. This module owns the page only: its style sheet,
the figures at a glance and the order of the sections, put together from the run's data
(`agentdescent.cli.reportdata`), the sections (`agentdescent.cli.reportsections`) and their
building blocks (`agentdescent.cli.reportparts`). It must not call a model, write a file or
print (the command line writes what it returns).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..engine.answers import AnswerDistribution
from .reportdata import _candidate_lines as _candidate_lines
from .reportdata import _decisions, _prompts, _result, _test_summary
from .reportdata import _k as _k
from .reportdata import _m as _m
from .reportdata import _num as _num
from .reportdata import _per_task as _per_task
from .reportdata import _time as _time
from .reportparts import CUT as CUT
from .reportparts import NOT_RECORDED as NOT_RECORDED
from .reportparts import _chart as _chart
from .reportparts import _cut, _diff, _e, _f, _n, _plural
from .reportparts import _duration as _duration
from .reportparts import _interval_svg as _interval_svg
from .reportparts import _pairs as _pairs
from .reportparts import _table as _table
from .reportparts import _tick_label as _tick_label
from .reportparts import _ticks as _ticks
from .reportparts import _when as _when
from .reportsections import _command as _command
from .reportsections import _commits, _cost, _rejected, _reward, _samples, _settings, _why
from .reportsections import _evidence as _evidence
from .reportsections import _feedback as _feedback
from .reportsections import _proposals_cell as _proposals_cell
from .reportsections import _rounds_table as _rounds_table
from .reportsections import _task as _task
from .reportsections import _test_block as _test_block
from .rundir import RunDir
from .runledger import has_ledger
from .runspec import load_versions

__all__ = ["build_report"]


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
.glance span{color:#57606a;font-size:.85rem}.error{color:#cf222e;font-weight:600}.warn{color:#9a6700;font-weight:600}
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
    answers = (test or {}).get("answers")
    warning = answers.warning() if isinstance(answers, AnswerDistribution) else None
    if warning:
        out += f'<p class="warn">Warning: {_e(warning)} (see <a href="#reward">the test set</a>).</p>'
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
    if has_ledger(run, spec):
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
