"""A run directory's files: the tasks files, the JSON files, and `RunDir`.

A run directory (made by ``agentdescent init``; see `agentdescent.cli`) holds
``spec.json``, ``tasks.jsonl``, ``test_tasks.jsonl`` (with a test set), ``ledger.sqlite``,
``rounds.jsonl``, ``status.json`` and ``result.json``. This module reads and writes them:
`load_tasks` / `write_tasks` for the tasks files (one JSON object per line), and `RunDir`
for the rest, every JSON file replaced atomically. It must not start a run or print.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import UsageError
from .types import Task

__all__ = ["SPEC_FORMAT", "RunDir", "atomic_write", "load_tasks", "now", "read_json", "write_tasks"]

SPEC_FORMAT = "agentdescent-run/1"


# --------------------------------------------------------------------------- files


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path`` (``what`` names the file in messages).

    Raises:
        UsageError: missing, unreadable, or not a JSON object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: no {what} here; is this a run directory made by `agentdescent init`?") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable {what} ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: the {what} must be a JSON object")
    return data


def load_tasks(path: Path, flag: str = "--tasks", minimum: int = 4) -> list[Task]:
    """Read a tasks file: one JSON object per line with ``prompt``, optional ``id`` and ``answer``.

    ``flag`` names the file in messages; a run needs ``minimum`` = 4 tasks (some train,
    some held out), a test set or an ``eval`` file one.

    Raises:
        UsageError: the file is missing, or a line is malformed (the message names the line).
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{flag} {path}: a directory, not a tasks file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{flag} {path}: cannot read it ({exc})") from None
    tasks: list[Task] = []
    seen: set[str] = set()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise UsageError(f"{path}, line {n}: not JSON ({exc.args[0]})") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise UsageError(f'{path}, line {n}: each line must be a JSON object with a non-empty "prompt" string')
        task_id = str(row.get("id", f"task-{n}"))
        if task_id in seen:
            raise UsageError(f"{path}, line {n}: duplicate id {task_id!r}; ids must be unique")
        seen.add(task_id)
        meta = {k: v for k, v in row.items() if k not in ("id", "prompt")}
        tasks.append(Task(task_id, row["prompt"], meta))
    if len(tasks) < minimum:
        if minimum == 1:
            raise UsageError(f"{flag} {path}: no task in it; give at least one line")
        raise UsageError(f"{path}: {len(tasks)} task(s); give at least {minimum} (some train, some held out)")
    return tasks


def write_tasks(path: Path, tasks: Sequence[Task]) -> None:
    """Write ``tasks`` as a tasks file (what `load_tasks` reads back)."""
    with path.open("w", encoding="utf-8") as f:
        for t in tasks:
            f.write(json.dumps({"id": t.id, "prompt": t.prompt, **dict(t.meta)}, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------- run directory


class RunDir:
    """The files of one run directory (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    spec_file = property(lambda self: self.path / "spec.json")
    tasks_file = property(lambda self: self.path / "tasks.jsonl")
    ledger_file = property(lambda self: self.path / "ledger.sqlite")
    rounds_file = property(lambda self: self.path / "rounds.jsonl")
    status_file = property(lambda self: self.path / "status.json")
    result_file = property(lambda self: self.path / "result.json")
    test_tasks_file = property(lambda self: self.path / "test_tasks.jsonl")

    def spec(self) -> dict[str, Any]:
        """The run's spec.

        Raises:
            UsageError: no spec here, or one this version cannot read.
        """
        spec = read_json(self.spec_file, "spec.json")
        if spec.get("format") != SPEC_FORMAT:
            raise UsageError(f"{self.spec_file}: format {spec.get('format')!r}, expected {SPEC_FORMAT!r}")
        return spec

    def rounds(self) -> list[dict[str, Any]]:
        """Every round written so far (a torn last line, from a kill mid-write, is skipped)."""
        if not self.rounds_file.exists():
            return []
        rows = []
        for line in self.rounds_file.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
        return rows

    def append_round(self, row: dict[str, Any]) -> None:
        """Append one round's line and flush it to disk."""
        with self.rounds_file.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_status(self, status: dict[str, Any]) -> None:
        """Replace ``status.json`` atomically."""
        atomic_write(self.status_file, json.dumps(status, indent=2, sort_keys=True))

    def status(self) -> dict[str, Any]:
        """The status, with a run whose process died without finishing reported as ``interrupted``."""
        if not self.status_file.exists():
            return {"state": "initialised", "round": 0}
        status = read_json(self.status_file, "status.json")
        if status.get("state") == "running" and not _alive(status.get("pid")):
            status["state"] = "interrupted"
        return status


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def now() -> str:
    """The current UTC time, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
