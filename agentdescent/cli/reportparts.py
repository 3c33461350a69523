"""The run report's building blocks: escaped values, tables, diffs and inline SVG charts.

This module owns the pieces every section of the report is written with, each returning
safe HTML: a value escaped (`html.escape`), a number, a count, a duration or a time
formatted (or "not recorded"), text cut to a table cell, a table, a key/value table, a
unified diff, the line chart of held-out reward and the test set's interval on its axis
(inline SVG with labelled axes; no script, no font, no image).

It must not read the run directory, call a model, write a file or print.
"""

from __future__ import annotations

import datetime
import difflib
import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

from .reportdata import _num, _time

__all__: list[str] = []

NOT_RECORDED = '<span class="nr">not recorded</span>'
#: characters of an output or a prompt shown in a table cell
CUT = 300

# --------------------------------------------------------------------------- formatting (each returns safe HTML)


def _e(value: Any) -> str:
    """``value`` as escaped text."""
    return html.escape(str(value))


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
