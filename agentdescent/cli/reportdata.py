"""The run report's data: what the run directory holds, read leniently (``agentdescent report``).

This module owns the reading half of the report: ``result.json`` (or why it is not there),
the prompts of the tasks files, every merge decision with its round (from ``rounds.jsonl``,
else from ``result.json``'s history), the per-task scores of a test-set evaluation, the
test set's summary (with the answers the heads gave on it), and the coercions that make a field of the wrong shape read as missing
(a number, a key, a mapping, a time). A field an older run did not record comes back as
None or empty, never as an error.

It must not build HTML, call a model, write a file or print.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..engine.answers import AnswerDistribution
from .rundir import RunDir, load_tasks, read_json

__all__: list[str] = []


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


def _time(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


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


def _answers(result: Mapping[str, Any] | None, key: str) -> AnswerDistribution | None:
    """result.json's ``test_answers`` (or ``test_answers_initial``), None when absent or of the wrong shape."""
    data = (result or {}).get(key)
    try:
        return AnswerDistribution.from_dict(data) if data is not None else None
    except ValueError:
        return None


def _test_summary(status: Mapping[str, Any], result: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The test set's summary (status.json's, else result.json's), with the answers from result.json."""
    answers = {"answers": _answers(result, "test_answers"), "answers_initial": _answers(result, "test_answers_initial")}
    test = status.get("test")
    if isinstance(test, Mapping):
        return {**test, **answers}
    full = (result or {}).get("test")
    if not isinstance(full, Mapping):
        return None
    initial, final = _m(full.get("initial")), _m(full.get("final"))
    listed = initial.get("tasks") or final.get("tasks")
    return {"initial": initial.get("mean"), "final": final.get("mean"),
            "tasks": len(listed) if isinstance(listed, list) else None, "difference": full.get("difference"),
            **answers}
