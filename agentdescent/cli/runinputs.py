"""The checksums of the inputs a run was made from, recorded in its spec at ``init``, and the check against them.

A run is made from its tasks (``tasks.jsonl``), its test set (``test_tasks.jsonl``) and
its starting artifact (``--initial``, kept in the spec as ``initial_text``). ``init``
records in ``spec["inputs"]`` the SHA-256 of each (`init_inputs`) and, for a tasks file,
each task's id and a short digest of its prompt, its answer and its other fields, in
order. ``run`` and ``resume`` compare the files with them (`check_inputs`): a file whose
bytes differ is read again and the difference said in words (tasks lost or added, an id,
an answer, a prompt or another field changed, the order changed), and refused, unless
``--accept-changed-tasks``, which adopts the file as it is and appends the change, with
the old and the new checksums, to ``spec["input_changes"]``. A file that reads as the same
tasks (only its spacing changed) is no change. A spec without an entry (a run directory
made before checksums were kept) gets it recorded from the file as it is, with a note.

It owns the checksums and the words for a change; it must not write a file (the caller
writes the spec it changed) nor print (it returns its notes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..errors import UsageError
from ..types import Task
from .rundir import RunDir, load_tasks, now, tasks_text

__all__ = ["ACCEPT_FLAG", "check_inputs", "init_inputs", "tasks_input"]

#: The flag of ``run`` and ``resume`` that adopts a changed input.
ACCEPT_FLAG = "--accept-changed-tasks"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _digest(value: Any) -> str:
    return hashlib.blake2b(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8"),
                           digest_size=4).hexdigest()


def _task_digest(task: Task) -> str:
    """``"PROMPT ANSWER OTHER"``: 8 hex digits each, to say which part of a task changed."""
    meta = dict(task.meta)
    answer = meta.pop("answer", None)
    return f"{_digest(task.prompt)} {_digest(answer)} {_digest(meta)}"


def tasks_input(tasks: Sequence[Task], sha256: str | None = None) -> dict[str, Any]:
    """The entry of a tasks file: its SHA-256 (of `tasks_text` unless given) and each task's id and digest, in order."""
    return {"sha256": sha256 or _sha256(tasks_text(tasks).encode("utf-8")), "ids": [t.id for t in tasks],
            "digests": [_task_digest(t) for t in tasks]}


def init_inputs(tasks: Sequence[Task], test_tasks: Sequence[Task] | None = None, initial_text: str | None = None,
                initial_from: str | None = None) -> dict[str, Any]:
    """``spec["inputs"]`` at ``init``: the tasks, the test set and the starting artifact, as they are written."""
    inputs: dict[str, Any] = {"tasks.jsonl": tasks_input(tasks)}
    if test_tasks:
        inputs["test_tasks.jsonl"] = tasks_input(test_tasks)
    if initial_text is not None:
        inputs["initial_text"] = {"sha256": _sha256(initial_text.encode("utf-8")), "from": initial_from}
    return inputs


def _counted(items: Sequence[Any], noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'}"


def _what_changed(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The difference between two tasks entries in words ("" when every task reads the same, in the same order)."""
    if "ids" not in old:
        return "its SHA-256 is not the one recorded"
    old_ids, new_ids = old["ids"], new["ids"]
    before, after = dict(zip(old_ids, old["digests"])), dict(zip(new_ids, new["digests"]))
    gone = [i for i in old_ids if i not in after]
    added = [i for i in new_ids if i not in before]
    renamed = []
    for task_id in list(gone):  # a task whose id changed keeps its prompt
        match = next((j for j in added if after[j].split()[0] == before[task_id].split()[0]), None)
        if match is not None:
            renamed.append((task_id, match))
            gone.remove(task_id)
            added.remove(match)
    line = {task_id: n for n, task_id in enumerate(old_ids, start=1)}
    said = []
    if gone:
        said.append(f"{_counted(gone, 'task')} lost (first {gone[0]!r}, line {line[gone[0]]} at init)")
    if renamed:
        said.append(f"{_counted(renamed, 'id')} changed (first {renamed[0][0]!r}, now {renamed[0][1]!r})")
    if added:
        said.append(f"{_counted(added, 'task')} added (first {added[0]!r})")
    for part, noun in ((1, "answer"), (0, "prompt"), (2, "task's other fields")):
        changed = [i for i in old_ids if i in after and before[i].split()[part] != after[i].split()[part]]
        if changed:
            said.append(f"{_counted(changed, noun) if part < 2 else noun} changed (task {changed[0]!r}"
                        + (f" and {len(changed) - 1} more)" if len(changed) > 1 else ")"))
    if not said and old_ids != new_ids:
        said.append("the tasks are in another order (the split follows it)")
    return ", ".join(said)


def _current(run: RunDir, spec: dict[str, Any], name: str) -> tuple[str, dict[str, Any] | None]:
    """``(where, its entry now)`` for the input ``name``; None when there is nothing to check.

    A tasks file is read again (`load_tasks`) only when its bytes are not the recorded ones.
    """
    if name == "initial_text":
        text = spec.get("initial_text")
        return f'{run.spec_file} "initial_text"', {"sha256": _sha256(text.encode("utf-8"))} if isinstance(
            text, str) else None
    test = name == "test_tasks.jsonl"
    path = run.test_tasks_file if test else run.tasks_file
    if test and not spec.get("test_tasks"):
        return str(path), None
    try:
        sha = _sha256(path.read_bytes())
    except OSError:
        return str(path), None  # missing or unreadable: reading the tasks says so, naming the file
    old = (spec.get("inputs") or {}).get(name) if isinstance(spec.get("inputs"), dict) else None
    if isinstance(old, dict) and old.get("sha256") == sha:
        return str(path), {"sha256": sha}
    tasks = load_tasks(path, "--test-tasks" if test else "--tasks", minimum=1 if test else 4)
    return str(path), tasks_input(tasks, sha)


def check_inputs(run: RunDir, spec: dict[str, Any], *, accept: bool, command: str) -> tuple[list[str], bool]:
    """Compare the run's inputs with the checksums ``init`` recorded; returns ``(notes, spec changed)``.

    A changed input is refused unless ``accept`` (``--accept-changed-tasks``): then its new
    checksums replace the old in ``spec["inputs"]`` and the change is appended to
    ``spec["input_changes"]`` (the input, what changed, both SHA-256s, when, the command).
    An input without an entry is recorded as it is, with a note. The caller writes the spec.

    Raises:
        UsageError: an input changed (naming the file and what changed, and the flag), or
            a tasks file that no longer reads (naming the line).
    """
    legacy = not isinstance(spec.get("inputs"), dict)
    inputs: dict[str, Any] = {} if legacy else dict(spec["inputs"])
    notes: list[str] = []
    changes: list[dict[str, Any]] = []
    for name in ("tasks.jsonl", "test_tasks.jsonl", "initial_text"):
        where, entry = _current(run, spec, name)
        old = inputs.get(name)
        if entry is None or (old is not None and old["sha256"] == entry["sha256"]):
            continue
        if old is None:
            inputs[name] = entry
            if not legacy:
                notes.append(f"note: {where}: spec.json held no checksum of it; recorded it as it is")
            continue
        said = _what_changed(old, entry) if "ids" in entry else "its text is not the one init recorded"
        if not said:
            continue  # the same tasks in the same order: only the spacing changed
        if not accept:
            raise UsageError(f"{where}: changed since init: {said}; the run was made from it as it was (SHA-256 "
                             f"{old['sha256'][:12]}..., now {entry['sha256'][:12]}...): put it back, or pass "
                             f"{ACCEPT_FLAG} to go on with it as it is (the change is recorded in spec.json)")
        inputs[name] = {**entry, **({"from": old["from"]} if old.get("from") else {})}
        changes.append({"input": name, "change": said, "old_sha256": old["sha256"], "new_sha256": entry["sha256"],
                        "at": now(), "command": command})
        notes.append(f"note: {where}: changed since init: {said}; going on with it as it is ({ACCEPT_FLAG}), "
                     'recorded in spec.json\'s "input_changes"')
    if legacy and inputs:
        notes.append(f"note: {run.spec_file} held no checksums of the run's inputs (made before agentdescent kept "
                     "them); recorded them from the files as they are, so a later change is refused")
    changed = inputs != (spec.get("inputs") if not legacy else {})
    if changed:
        spec["inputs"] = inputs
    if changes:
        spec["input_changes"] = [*(spec.get("input_changes") or []), *changes]
    return notes, changed or bool(changes)
