"""A run directory's files: the tasks files, the JSON files, and `RunDir`.

A run directory (made by ``agentdescent init``; see `agentdescent.cli.main`) holds
``spec.json``, ``tasks.jsonl``, ``test_tasks.jsonl`` (with a test set), ``tree/`` (a
tree run's copy of the project), ``ledger.sqlite``,
``rounds.jsonl``, ``status.json`` and ``result.json``. This module reads and writes them:
`load_tasks` / `write_tasks` for the tasks files (one JSON object per line, split on
``"\n"`` only, so a prompt holding U+2028, U+2029 or U+0085 reads back as it was
written), and `RunDir` for the rest, every JSON file replaced atomically
(`atomic_write`). `check_output` / `write_output` guard what a command writes at a path
the user names (``export -o``, ``report -o``, ``eval --json``): never inside the run
directory, never over anything but a regular file, over an existing file only when
forced; `check_output_dir` does the same for a folder (``export -o`` of a tree run:
missing or empty, or forced). It must not start a run or print.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import json
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..processes import process_alive
from ..types import Task
from ..validation import is_int, is_real
from .diskfull import no_space
from .runlock import LOCK_NAME, holder
from .specvalues import check_spec

__all__ = ["MAX_DEPTH", "SPEC_FORMAT", "STOPPED", "RunDir", "atomic_write", "check_output", "check_output_dir", "is_inside", "jsonl_lines",
           "load_tasks", "now", "read_json", "tasks_text", "write_output", "write_tasks"]

SPEC_FORMAT = "agentdescent-run/1"
#: The deepest nesting of lists and objects a task line may hold (deeper is refused, naming the line).
MAX_DEPTH = 64

#: The states of a run stopped before its end, that ``resume`` goes on with: ``interrupted`` (Ctrl-C, or a
#: process that died without a word), ``terminated`` (SIGTERM, SIGHUP, SIGQUIT; ``status.json``'s
#: ``signal`` names it).
STOPPED = ("interrupted", "terminated")


# --------------------------------------------------------------------------- files


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a new temporary file beside it, flushed to disk, then a rename.

    The temporary file is created afresh (never opened through an existing name or a
    symlink); an existing regular file's permissions are kept. On any failure the
    temporary file is removed and ``path`` is as it was.

    Raises:
        OSError: the file cannot be written (the directory is missing or read-only, the
            disk is full, ``path`` is a directory).
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        with contextlib.suppress(OSError):
            before = os.lstat(path)
            if stat.S_ISREG(before.st_mode):
                os.chmod(tmp, stat.S_IMODE(before.st_mode))
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno is not None and exc.filename is None:  # name the file
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _inside(path: Path, directory: Path) -> bool:
    real, top = Path(os.path.realpath(path)), Path(os.path.realpath(directory))
    return real == top or top in real.parents


def check_output(path: Path, run_dir: Path, flag: str, *, force: bool, allowed: Path | None = None) -> None:
    """Refuse an output path that would destroy an input, before anything is computed or written.

    Refused: a path inside ``run_dir`` (after following symlinks), except ``allowed``
    (``report``'s own ``RUN/report.html``, replaced freely); anything there but a regular
    file (a directory, a symlink, a FIFO, a device, a socket), even with ``force``; an
    existing file without ``force``.

    Raises:
        UsageError: naming the flag, the path and what is there.
    """
    own = allowed is not None and os.path.realpath(path) == os.path.realpath(allowed)
    if _inside(path, run_dir) and not own:
        also = f" ({allowed} is the one file written there)" if allowed is not None else ""
        raise UsageError(f"{flag} {path}: inside the run directory {run_dir}, whose files are the run's; "
                         f"pick a path outside it{also}")
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot look at it ({exc.strerror or exc})") from None
    if not stat.S_ISREG(found.st_mode):
        kind = next((name for test, name in _KINDS if test(found.st_mode)), "something else")
        raise UsageError(f"{flag} {path}: {kind}, not a regular file; only a regular file is written (or "
                         "replaced), so pick another path")
    if not force and not own:
        raise UsageError(f"{flag} {path}: exists; pass --force to replace it")


def check_output_dir(path: Path, run_dir: Path, flag: str, *, force: bool) -> bool:
    """Refuse an output folder that would destroy an input, before anything is written; True if it exists.

    The folder must not be inside ``run_dir`` (after following symlinks); it may be
    missing or an empty folder, or, with ``force``, a folder with files in it (then the
    files written replace those of the same paths, the others are kept: the writer
    refuses a file that would land inside ``run_dir``, when the folder holds it).
    Anything there but a folder (a file, a symlink, a FIFO...) is refused, even with
    ``force``.

    Raises:
        UsageError: naming the flag, the path and what is there.
    """
    if _inside(path, run_dir):
        raise UsageError(f"{flag} {path}: inside the run directory {run_dir}, whose files are the run's; "
                         "pick a folder outside it")
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot look at it ({exc.strerror or exc})") from None
    if not stat.S_ISDIR(found.st_mode):
        kind = "a regular file" if stat.S_ISREG(found.st_mode) else next(
            (name for test, name in _KINDS if test(found.st_mode)), "something else")
        raise UsageError(f"{flag} {path}: {kind}, not a folder; a tree is written into a folder, so pick another "
                         "path")
    try:
        empty = not any(os.scandir(path))
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot list it ({exc.strerror or exc})") from None
    if not empty and not force:
        raise UsageError(f"{flag} {path}: a folder with files in it; pass --force to write into it (files of "
                         "the same paths are replaced, the others kept), or pick a new or empty folder")
    return True


def is_inside(path: Path, directory: Path) -> bool:
    """Is ``path`` ``directory`` or inside it, after following symlinks (neither needs to exist)?"""
    return _inside(path, directory)


def write_output(path: Path, text: str, flag: str) -> None:
    """Write a command's output file atomically (`atomic_write`), making its folder; nothing is left on failure.

    Raises:
        UsageError: it cannot be written (the message names the flag, the path and why).
    """
    try:
        if not path.parent.exists():
            path.parent.mkdir(parents=True)
        atomic_write(path, text)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL text, split on ``"\\n"`` only.

    Not `str.splitlines`, which also splits at U+2028, U+2029, U+0085 and other characters
    a JSON string may hold raw: a line that ``json.dumps(..., ensure_ascii=False)`` wrote
    reads back whole. A ``"\\r"`` before the ``"\\n"`` is JSON whitespace.
    """
    return text.split("\n")


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
    except RecursionError:
        raise UsageError(f"{path}: not a readable {what} (nested too deeply to read)") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: the {what} must be a JSON object")
    return data


class _NotFinite(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a line: Python's JSON reads them, JSON has no such numbers."""


def _not_finite(name: str) -> Any:
    raise _NotFinite(name)


def _deeper_than(value: Any, limit: int) -> bool:
    """Does ``value`` nest lists and objects more than ``limit`` levels deep (walked without recursion)?"""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _kind(value: Any) -> str:
    """A JSON value's kind, for a message: ``null``, ``true``, ``the number 18``, ``an object``..."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    return "an empty string" if value == "" else "a blank string"


def _task_row(line: str, path: Path, n: int) -> dict[str, Any]:
    """Line ``n`` of a tasks file, parsed strictly: an object with a non-empty ``prompt``, an ``id`` that is a
    non-empty string or an integer, an ``answer`` that is a string, no NaN or Infinity, at most `MAX_DEPTH` deep."""
    where = f"{path}, line {n}"
    too_deep = (f"{where}: nested more than {MAX_DEPTH} levels deep (lists and objects); a task line is an object "
                "of a prompt, an id, an answer and flat fields")
    try:
        row = json.loads(line, parse_constant=_not_finite)
    except _NotFinite as exc:
        raise UsageError(f"{where}: {exc.args[0]} is not a JSON number (JSON has no NaN or Infinity); write a "
                         "finite number, or text in quotes") from None
    except RecursionError:
        raise UsageError(too_deep) from None
    except ValueError as exc:
        raise UsageError(f"{where}: not JSON ({exc.args[0]})") from None
    if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
        raise UsageError(f'{where}: each line must be a JSON object with a non-empty "prompt" string')
    if _deeper_than(row, MAX_DEPTH):
        raise UsageError(too_deep)
    task_id = row.get("id", "")
    if "id" in row and not (is_int(task_id) or (isinstance(task_id, str) and task_id.strip())):
        raise UsageError(f'{where}: "id" is {_kind(task_id)}; an id is a non-empty string or an integer (or leave '
                         f'"id" out, and the task is named task-{n})')
    answer = row.get("answer")
    if "answer" in row and not isinstance(answer, str):
        fix = f"write it in quotes, {json.dumps(json.dumps(answer))}" if is_real(answer) else (
            'leave "answer" out for a task without one' if answer is None else "give the answer as text")
        raise UsageError(f'{where}: "answer" is {_kind(answer)}; an answer is a string: {fix}')
    return row


def load_tasks(path: Path, flag: str = "--tasks", minimum: int = 4) -> list[Task]:
    """Read a tasks file: one JSON object per line with ``prompt``, optional ``id`` and ``answer``.

    ``flag`` names the file in messages; a run needs ``minimum`` = 4 tasks (some train,
    some held out), a test set or an ``eval`` file one. Each line is read strictly
    (`_task_row`): an ``id`` is a non-empty string or an integer (``null`` is not made
    ``"None"``), an ``answer`` a string; NaN and Infinity, which JSON does not have, and
    nesting deeper than `MAX_DEPTH` are refused, naming the line.

    Raises:
        UsageError: the file is missing, or a line is malformed (the message names the line).
    """
    try:
        lines = jsonl_lines(path.read_text(encoding="utf-8"))
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
        row = _task_row(line, path, n)
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


def tasks_text(tasks: Sequence[Task]) -> str:
    """The text of a tasks file holding ``tasks`` (what `write_tasks` writes and `load_tasks` reads back)."""
    return "".join(json.dumps({"id": t.id, "prompt": t.prompt, **dict(t.meta)}, ensure_ascii=False) + "\n"
                   for t in tasks)


def write_tasks(path: Path, tasks: Sequence[Task]) -> None:
    """Write ``tasks`` as a tasks file (`tasks_text`), atomically."""
    atomic_write(path, tasks_text(tasks))


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
    tree_dir = property(lambda self: self.path / "tree")
    lock_file = property(lambda self: self.path / LOCK_NAME)
    report_file = property(lambda self: self.path / "report.html")

    def spec(self) -> dict[str, Any]:
        """The run's spec, every value checked as the flag that set it is (`agentdescent.cli.specvalues.check_spec`).

        Every command that opens a run directory reads it here, so a value a hand edited
        (``"seed": "x"``, ``"provider": "cohere"``, no ``"model"``) is refused in one line
        naming the file, the key, the value and the fix, before anything uses it.

        Raises:
            UsageError: no spec here, one this version cannot read, or a bad value in it.
        """
        spec = read_json(self.spec_file, "spec.json")
        if spec.get("format") != SPEC_FORMAT:
            raise UsageError(f"{self.spec_file}: format {spec.get('format')!r}, expected {SPEC_FORMAT!r}")
        check_spec(spec, self.spec_file)
        return spec

    def rounds(self) -> list[dict[str, Any]]:
        """Every round written so far: each line that is a JSON object (a torn last line, from a kill mid-write, is skipped)."""
        if not self.rounds_file.exists():
            return []
        rows = []
        try:
            text = self.rounds_file.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise UsageError(f"{self.rounds_file}: not a readable rounds.jsonl ({exc})") from None
        for line in jsonl_lines(text):
            with contextlib.suppress(ValueError, RecursionError):
                row = json.loads(line)
                if isinstance(row, dict):
                    rows.append(row)
        return rows

    def append_round(self, row: dict[str, Any]) -> None:
        """Append one round's line and flush it to disk."""
        with self.rounds_file.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_status(self, status: dict[str, Any]) -> None:
        """Replace ``status.json`` atomically; on a full disk, write it over the old file's own bytes.

        A full disk has no room for the new file `atomic_write` makes, and a status left
        ``running`` would read as ``interrupted``: the run's end (``failed: disk full``) is
        then written in place (`_rewrite_in_place`), when it fits the blocks the file has.

        Raises:
            OSError: it cannot be written either way.
        """
        text = json.dumps(status, indent=2, sort_keys=True)
        try:
            atomic_write(self.status_file, text)
        except OSError as exc:
            if not no_space(exc):
                raise
            try:
                _rewrite_in_place(self.status_file, text)
            except OSError:
                raise exc from None

    def status(self) -> dict[str, Any]:
        """The status: ``running`` (with the ``pid`` and ``since`` of the lock's holder) while a
        process holds the run directory's lock (`agentdescent.cli.runlock`), and a run whose process
        died without finishing reported as ``interrupted``. A run a signal stopped says so itself
        (``interrupted`` or ``terminated``, with the ``signal``; `STOPPED`)."""
        status = read_json(self.status_file, "status.json") if self.status_file.exists() else {
            "state": "initialised", "round": 0}
        held = holder(self.path)
        if held is not None:
            status.update(state="running", pid=held.pid or status.get("pid"), since=held.since)
        elif status.get("state") == "running" and (self.lock_file.exists() or not process_alive(status.get("pid"))):
            status["state"] = "interrupted"  # nobody holds the lock (or, before the lock, the pid is gone)
        return status


def _rewrite_in_place(path: Path, text: str) -> None:
    """Write ``text`` over the bytes of the existing file ``path``, needing no new block of the disk.

    Only when ``text`` fits in the blocks the file already holds (a status fits one), so the
    write allocates nothing and lands in one ``pwrite``; padded with spaces (JSON whitespace)
    to the old length, so no old byte is left past its end. Not atomic against a power cut,
    which is why it is only the fallback of a full disk.

    Raises:
        OSError: no such regular file, or ``text`` needs more room than it holds.
    """
    fd = os.open(path, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        found = os.fstat(fd)
        data = text.encode("utf-8")
        if not stat.S_ISREG(found.st_mode) or len(data) > found.st_blocks * 512:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        data = data.ljust(found.st_size, b" ")
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        os.fsync(fd)
    finally:
        os.close(fd)


def now() -> str:
    """The current UTC time, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
