"""BIG-bench JSON tasks as `agentdescent.Task` lists: `bigbench_tasks`.

A BIG-bench JSON task (``benchmark_tasks/NAME/task.json`` in the ``bigbench`` package) is
one JSON object with ``examples``; each example has an ``input`` and either
``target_scores`` (``{choice: score}``: a multiple-choice question) or ``target`` (a string
or a list of strings: a generative one). The file may also carry ``task_prefix`` (text put
before every input), ``example_input_prefix`` / ``example_output_prefix`` (what BIG-bench
wraps around an input for a completion model) and ``name``.

This module reads one such file from the local disk (it never downloads: fetching the
``bigbench`` package into a user cache is the benchmark's job, see ``bench/real_data.py``)
and turns each example into a task whose ``meta`` holds the expected output, so the
built-in rewards (`agentdescent.rewards.builtin.one_of` with no choices, and
`agentdescent.rewards.builtin.any_target`) score it. It must not import the engine, must
not write anything, and must never unpickle: the file is parsed as JSON only. No
BIG-bench text ships with the package: its tasks carry a canary string meant to keep them
out of training corpora.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import DataLoadError, InvalidArgument, InvalidArgumentType
from ..types import Task

__all__ = ["bigbench_tasks"]

#: What `bigbench_tasks` puts between the parts of a prompt.
_PART_GAP = "\n\n"


def bigbench_tasks(task_json_path: str | os.PathLike[str], *, limit: int | None = None,
                   show_choices: bool = True, id_prefix: str | None = None,
                   prefixes: bool = False) -> list[Task]:
    """The examples of one BIG-bench JSON task file, as tasks with their expected output in ``meta``.

    Each example becomes ``Task(id, prompt, meta)``, in file order:

    - ``id`` is ``"{name}-{index}"``: ``name`` is ``id_prefix`` if given, else the file's
      ``name`` field, else the folder the file is in; ``index`` is the example's position
      in the file (from 0), so ids are unique and stay the same with any ``limit``.
    - ``prompt`` is built from parts joined by a blank line (``"\\n\\n"``): the file's
      ``task_prefix``, stripped, when it is not empty; the example's ``input``, stripped
      (with ``prefixes=True``: ``example_input_prefix + input + example_output_prefix``,
      stripped, as BIG-bench shows it to a completion model); and, for a multiple-choice
      example with ``show_choices=True``, one line ``"Options: A, B, C"`` listing the
      choices in the file's order, separated by ``", "`` (by ``"; "`` when a choice itself
      holds a comma). BIG-bench shuffles the choices; this loader keeps the file's order,
      so a prompt is the same on every run.
    - ``meta`` holds ``"task"`` (the name), ``"index"``, ``"input"`` (the raw input),
      ``"kind"`` (``"multiple_choice"`` or ``"generative"``), ``"answer"`` (the expected
      output) and ``"targets"`` (every acceptable output). For a multiple-choice example
      ``"choices"`` lists the choices, ``"answer"`` is the choice with the highest score
      (the first of them on a tie) and ``"targets"`` every choice with that score; for a
      generative one ``"answer"`` is the shortest target (the first of the shortest: ``"3"``
      of ``["three", "3"]``, the form a labeled demonstration shows, which a small model
      copies best) and ``"targets"`` all of them, in the file's order.

    Score multiple-choice tasks with ``one_of()`` (it reads each task's choices) and
    generative ones with ``any_target`` (any target, as a whole word).

    Args:
        task_json_path: the ``task.json`` file of one BIG-bench task, on the local disk.
        limit: keep only the first ``limit`` examples (None: all).
        show_choices: add the ``Options:`` line to multiple-choice prompts.
        id_prefix: the name the ids start with (default: the task's name).
        prefixes: wrap each input in the file's ``example_input_prefix`` and
            ``example_output_prefix`` (default False: the input alone, for a chat model).

    Returns:
        The tasks, one per example, in file order.

    Raises:
        DataLoadError: the file is missing or unreadable, is not JSON (it is never
            unpickled), holds no ``examples``, or has an example without an ``input`` or
            without targets (``target_scores`` or ``target``), or with fewer than two choices;
            the message names the file (and the example) and the fix.
        InvalidArgument: ``limit`` below 1, or an ``id_prefix`` that is empty.
        InvalidArgumentType: an argument of the wrong type.
    """
    path = _check_path(task_json_path)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise InvalidArgumentType(f"bigbench_tasks(limit={limit!r}): give a whole number >= 1, or None for all")
    if limit is not None and limit < 1:
        raise InvalidArgument(f"bigbench_tasks(limit={limit!r}): give a whole number >= 1, or None for all")
    for knob, value in (("show_choices", show_choices), ("prefixes", prefixes)):
        if not isinstance(value, bool):
            raise InvalidArgumentType(f"bigbench_tasks({knob}={value!r}): give True or False")
    if id_prefix is not None and (not isinstance(id_prefix, str) or not id_prefix.strip()):
        raise InvalidArgument(f"bigbench_tasks(id_prefix={id_prefix!r}): give a non-empty name, or None for "
                              "the task's own name")
    data = _read_json(path)
    examples = data.get("examples")
    if not isinstance(examples, list) or not examples:
        raise DataLoadError(f"{path}: no 'examples' list (or an empty one); a BIG-bench JSON task holds "
                            "{'examples': [{'input': ..., 'target_scores': {...}} or {'input': ..., "
                            "'target': ...}, ...]}: point bigbench_tasks at a benchmark_tasks/NAME/task.json")
    name = (id_prefix or _text(data.get("name")) or path.parent.name or path.stem).strip()
    task_prefix = _text(data.get("task_prefix")).strip()
    input_prefix = _text(data.get("example_input_prefix")) if prefixes else ""
    output_prefix = _text(data.get("example_output_prefix")) if prefixes else ""
    tasks = []
    for index, example in enumerate(examples[:limit] if limit else examples):
        where = f"{path}: example {index}"
        if not isinstance(example, dict):
            raise DataLoadError(f"{where} is {type(example).__name__}, not an object with 'input' and targets; "
                                "fix or drop it")
        raw = example.get("input")
        if not isinstance(raw, str) or not raw.strip():
            raise DataLoadError(f"{where} has no 'input' text; give it one, or drop the example")
        meta: dict[str, Any] = {"task": name, "index": index, "input": raw}
        parts = [task_prefix] if task_prefix else []
        parts.append((input_prefix + raw + output_prefix).strip())
        if "target_scores" in example:
            choices, best = _choices(example["target_scores"], where)
            meta.update(kind="multiple_choice", choices=choices, answer=best[0], targets=best)
            if show_choices:
                gap = "; " if any("," in c for c in choices) else ", "
                parts.append("Options: " + gap.join(choices))
        elif "target" in example:
            targets = _targets(example["target"], where)
            # the shortest target is the answer a demonstration shows: "3" rather than "three"
            meta.update(kind="generative", answer=min(targets, key=len), targets=targets)
        else:
            raise DataLoadError(f"{where} has neither 'target_scores' (multiple choice) nor 'target' (generative); "
                                "give it its expected output, or drop the example")
        tasks.append(Task(f"{name}-{index}", _PART_GAP.join(parts), meta))
    return tasks


def _check_path(value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise InvalidArgumentType(f"bigbench_tasks(task_json_path={value!r:.80}): give the path of a task.json")
    path = Path(value).expanduser()
    if not path.is_file():
        raise DataLoadError(
            f"{path}: no such file; give the path of a BIG-bench JSON task "
            "(bigbench-1.0.0/bigbench/benchmark_tasks/NAME/task.json in the bigbench sdist, "
            "e.g. fetched by `python bench/real_data.py`)"
        )
    return path


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataLoadError(f"{path}: cannot be read as UTF-8 text ({exc}); check the file and its permissions") \
            from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise DataLoadError(f"{path}: not valid JSON ({exc}); BIG-bench JSON tasks are JSON objects: fetch the "
                            "file again, or fix it") from None
    if not isinstance(data, dict):
        raise DataLoadError(f"{path}: holds a JSON {type(data).__name__}, not an object with 'examples'; point "
                            "bigbench_tasks at a benchmark_tasks/NAME/task.json")
    return data


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _choices(scores: Any, where: str) -> tuple[list[str], list[str]]:
    """The choices in file order, and the ones with the highest score (at least one)."""
    if not isinstance(scores, dict) or not scores:
        raise DataLoadError(f"{where}: 'target_scores' must be a non-empty object {{choice: score}}; fix it")
    choices: list[str] = []
    values: list[float] = []
    for choice, score in scores.items():
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise DataLoadError(f"{where}: the score of choice {choice!r:.60} is {score!r:.40}, not a number; fix it")
        label = re.sub(r"\s+", " ", choice).strip()
        if not label:
            raise DataLoadError(f"{where}: a choice is empty; give every choice some text")
        choices.append(label)
        values.append(float(score))
    if len({c.lower() for c in choices}) < 2:
        raise DataLoadError(f"{where}: 'target_scores' has fewer than two distinct choices {choices!r:.120}; a "
                            "multiple-choice example needs at least two")
    top = max(values)
    return choices, [c for c, v in zip(choices, values) if v == top]


def _targets(target: Any, where: str) -> list[str]:
    items = [target] if isinstance(target, str) else target
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
        raise DataLoadError(f"{where}: 'target' must be a string or a list of strings, not {target!r:.80}; fix it")
    targets = [t.strip() for t in items if t.strip()]
    if not targets:
        raise DataLoadError(f"{where}: 'target' is empty; give the expected output, or drop the example")
    return targets
