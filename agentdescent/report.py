"""The run report: one self-contained HTML page about a run directory (``agentdescent report``).

It reads the run directory (spec, status, rounds, the ledger's versions) and writes
nothing; every field is escaped. It must not call a model.
"""

from __future__ import annotations

import difflib
import html

from .rundir import RunDir
from .runspec import load_versions

__all__ = ["build_report"]


def _svg(points: list[tuple[float, float]], width: int = 640, height: int = 240) -> str:
    if not points:
        return "<p>No rounds yet.</p>"
    xs = [p[0] for p in points]
    x0, x1 = min(xs), max(xs) or 1.0
    span = (x1 - x0) or 1.0
    pad = 36

    def px(x: float, y: float) -> str:
        return f"{pad + (x - x0) / span * (width - 2 * pad):.1f},{height - pad - y * (height - 2 * pad):.1f}"

    line = " ".join(px(x, y) for x, y in points)
    dots = "".join(f'<circle cx="{px(x, y).split(",")[0]}" cy="{px(x, y).split(",")[1]}" r="3"/>' for x, y in points)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="held-out reward against tokens">'
        f'<rect width="100%" height="100%" fill="#fff" stroke="#ccc"/>'
        f'<text x="{pad}" y="20" font-size="12">held-out reward (0-1) against tokens spent ({int(x0)}-{int(x1)})</text>'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
        f'<text x="{pad - 6}" y="{height - pad + 4}" font-size="11" text-anchor="end">0</text>'
        f'<text x="{pad - 6}" y="{pad + 4}" font-size="11" text-anchor="end">1</text>'
        f'<polyline fill="none" stroke="#1f6feb" stroke-width="2" points="{line}"/>'
        f'<g fill="#1f6feb">{dots}</g></svg>'
    )


def build_report(run: RunDir) -> str:
    """The report of the run in ``run``, as one self-contained HTML page (every field escaped)."""
    spec = run.spec()
    states, strategy = load_versions(run)
    rounds = run.rounds()
    status = run.status()
    first, last = min(states), max(states)
    points = [(0.0, status["initial_reward"])] if status.get("initial_reward") is not None else []
    points += [(float(r["tokens_total"]), float(r["held_out_reward"])) for r in rounds]
    rows = "".join(
        f"<tr><td>{r['round']}</td><td>{r['held_out_reward']:.3f}</td><td>{r['committed']}</td>"
        f"<td>{html.escape(', '.join(r['outcomes']) or '-')}</td><td>{r['tokens']}</td><td>{r['tokens_total']}</td></tr>"
        for r in rounds
    )
    diff = "\n".join(difflib.unified_diff(strategy.render(states[first]).splitlines(),
                                          strategy.render(states[last]).splitlines(), f"v{first}", f"v{last}",
                                          lineterm=""))
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentdescent run report: {html.escape(run.path.name)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.25rem .5rem;text-align:right}}
pre{{background:#f6f8fa;padding:1rem;overflow-x:auto;white-space:pre-wrap}}</style></head><body>
<h1>Run report: {html.escape(run.path.name)}</h1>
<p>Model <b>{html.escape(str(spec['model']))}</b> ({html.escape(spec['provider'])}), reward
<b>{html.escape(spec['reward'])}</b>, strategy <b>{html.escape(spec['strategy'])}</b>.
State <b>{html.escape(str(status.get('state')))}</b>, stop reason {html.escape(str(status.get('stop_reason')))},
head v{last}, {status.get('tokens', 0)} tokens.</p>
<h2>Held-out reward against tokens</h2>{_svg(points)}
<h2>Rounds</h2><table><tr><th>round</th><th>held-out</th><th>commits</th><th>merge outcomes</th>
<th>tokens</th><th>tokens in all</th></tr>{rows}</table>
<h2>Final artifact (v{last})</h2><pre>{html.escape(strategy.render(states[last]))}</pre>
<h2>Diff from the start (v{first} to v{last})</h2><pre>{html.escape(diff or '(no change)')}</pre>
</body></html>
"""
    return page
