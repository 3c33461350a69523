"""A run that evolves code: the project's copy in the run directory, its tests, and a tree's export and eval.

``agentdescent init RUN_DIR --tree DIR`` copies the project into ``RUN_DIR/tree``
(`copy_project`: a snapshot, so later commands never read or write ``DIR``), finds its
tests there (`agentdescent.code.TestSuite`) and writes them as the run's tasks
(`init_tree`). ``run`` and ``resume`` build the same suite from the spec on that copy
(`open_suite`) and evolve with its keyword arguments (`evolve_kwargs`): the tests are
the tasks and the reward, the tree's files the artifact, and the model writes
search/replace edits. ``export`` writes a version's files into a folder (`write_tree`:
a new folder appears whole, an existing one gets each file replaced atomically; only the
paths the tree would write, `agentdescent.code.FileTree.refusals`) and ``eval`` runs the
suite on a version (`eval_tree`).

It owns what is particular to a tree run; the spec's parts are `agentdescent.cli.runspec`'s,
the run directory's files and the output rules `agentdescent.cli.rundir`'s, parsing and the
run's driving `agentdescent.cli.main`'s. It must not write into the user's folder, must not
write inside the run directory but its ``tree/`` (at ``init``; ``export`` only removes the
staging folders killed processes left there), and must not print secrets.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..code import FileTree, Sandbox, TestSuite
from ..code.tree import DEFAULT_EXCLUDE, DEFAULT_INCLUDE, SKIPPED_DIRS
from ..errors import InvalidArgument, UsageError
from ..processes import process_alive
from ..types import Task, one_line
from .rundir import (
    RunDir,
    atomic_write,
    check_output,
    is_inside,
    read_json,
    write_output,
    write_tasks,
)
from .runinputs import init_inputs
from .runlock import hold
from .runspec import make_strategy, spec_split, tree_entry

__all__ = ["DEFAULT_SUITE_TIMEOUT", "check_eval_flags", "check_flags", "copy_project", "eval_tree", "evolve_kwargs",
           "init_tree", "open_suite", "suite_line", "sweep_staging", "writable_state", "write_tree"]

#: Seconds one run of the whole suite may take (``init --suite-timeout``).
DEFAULT_SUITE_TIMEOUT = 60.0

#: init's flags a tree run does not take, and the flags only a tree run takes.
_NOT_WITH_TREE = (("tasks", "--tasks"), ("reward", "--reward"), ("strategy", "--strategy"), ("initial", "--initial"),
                  ("proposal", "--proposal"), ("test_tasks", "--test-tasks"))
_TREE_ONLY = (("test_cmd", "--test-cmd"), ("include", "--include"), ("exclude", "--exclude"),
              ("suite_timeout", "--suite-timeout"), ("pytest_plugins", "--pytest-plugins"))

#: The longest runner message kept in a one-line error.
_MESSAGE_CHARS = 600


def check_flags(args: argparse.Namespace) -> None:
    """Refuse init's flags that cannot go together with (or without) ``--tree``.

    Raises:
        UsageError: a task, reward or strategy flag with ``--tree``; a tree flag without it.
    """
    if args.tree is None:
        given = [flag for name, flag in _TREE_ONLY if getattr(args, name) is not None]
        if given:
            raise UsageError(f"{given[0]} needs --tree DIR (the project folder whose tests score its code)")
        return
    given = [flag for name, flag in _NOT_WITH_TREE if getattr(args, name) is not None]
    if given:
        raise UsageError(f"{', '.join(given)}: not with --tree; the project's tests are the tasks and the reward, "
                         "and its files the artifact (choose the files with --include/--exclude, the test command "
                         "with --test-cmd)")


# --------------------------------------------------------------------------- init


def _check_source(source: Path, run_dir: Path) -> None:
    if not source.is_dir():
        raise UsageError(f"--tree {source}: not a folder; give the project's folder (its code and its tests)")
    if is_inside(run_dir, source):
        raise UsageError(f"--tree {source}: the run directory {run_dir} is inside it; put the run directory "
                         "outside the project (init copies the project into it)")
    if is_inside(source, run_dir):
        raise UsageError(f"--tree {source}: inside the run directory {run_dir}; give the project's own folder")


def copy_project(source: Path, target: Path) -> tuple[int, int]:
    """Copy the project ``source`` to the new folder ``target``; return (files copied, entries left out).

    Left out: the folders and caches no run needs (``.git``, ``__pycache__``, ``.venv``,
    ``venv``, ``node_modules``, ``.pytest_cache`` and the others of
    `agentdescent.code.tree.SKIPPED_DIRS`, ``*.pyc``) and anything that is neither a
    regular file nor a folder (a symlink could point back into ``source``; a FIFO would
    block the copy).

    Raises:
        UsageError: a file cannot be read or written.
    """
    counts = {"files": 0, "left": 0}

    def ignore(folder: str, names: list[str]) -> set[str]:
        out = set()
        for name in names:
            try:
                mode = os.lstat(os.path.join(folder, name)).st_mode
            except OSError:
                mode = 0
            if name in SKIPPED_DIRS or name.endswith(".pyc"):
                out.add(name)
            elif not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                out.add(name)
                counts["left"] += 1
            elif stat.S_ISREG(mode):
                counts["files"] += 1
        return out

    try:
        shutil.copytree(source, target, symlinks=True, ignore=ignore)
    except (OSError, shutil.Error) as exc:
        raise UsageError(f"--tree {source}: cannot copy it into {target.parent} ({one_line(exc, 300)})") from None
    return counts["files"], counts["left"]


def _refusal(exc: Exception, where: str, folder: Path, shown: Path) -> UsageError:
    """The suite's message in one line, naming ``shown`` (the user's folder) where it named ``folder``."""
    text = str(exc).replace(str(folder.resolve()), str(shown)).replace(str(folder), str(shown))
    text = text.replace("give tree=FileTree(include=...)", "give --include GLOB (the files the run may change)")
    return UsageError(f"{where}: {one_line(text, _MESSAGE_CHARS)}")


def _plugins(args: argparse.Namespace) -> list[str] | None:
    """``--pytest-plugins``: None (every installed plugin), or the names to load alone."""
    raw = getattr(args, "pytest_plugins", None)
    if raw is None:
        return None
    if args.test_cmd is not None:
        raise UsageError("--pytest-plugins: only with pytest (not with --test-cmd, whose runner loads its own)")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    bad = next((n for n in names if not n.replace(".", "").replace("_", "").isalnum()), None)
    if bad is not None:
        raise UsageError(f"--pytest-plugins: {bad[:60]!r} is not a plugin module name (such as pytest_asyncio)")
    return names


def _make_suite(spec: dict[str, Any], folder: Path, where: str, shown: Path) -> TestSuite:
    entry = tree_entry(spec)
    try:
        return TestSuite(folder, command=entry["test_cmd"], timeout=entry["timeout"],
                         tree=make_strategy(spec, []), plugins=entry.get("plugins"))
    except InvalidArgument as exc:
        raise _refusal(exc, where, folder, shown) from None


def _discover(suite: TestSuite, where: str, shown: Path) -> list[Task]:
    try:
        return suite.tasks()
    except InvalidArgument as exc:
        raise _refusal(exc, where, suite.directory, shown) from None


def init_tree(args: argparse.Namespace, run: RunDir, common: dict[str, Any]) -> int:
    """``init RUN_DIR --tree DIR``: copy the project, find its tests, write the spec and the tasks.

    ``common`` holds the spec's fields every run has (the model, its provider and key
    variable, the proposer, the seed, the split, the command...). Nothing is left in the
    run directory when a check fails; with ``--force`` the old copy is replaced only
    once the new one has its tests.

    Raises:
        UsageError: a bad folder or flag, a folder with fewer than 4 tests or none of
            whose files the tree holds (the suite's message), a test without the
            ``--stratify`` field.
    """
    source = Path(args.tree)
    _check_source(source, run.path)
    if os.path.lexists(run.tree_dir) and not _was_tree(run):
        raise UsageError(f"{run.tree_dir}: exists, and {run.path} is not a tree run's directory, so it is not "
                         "replaced; pick a new RUN_DIR")
    where = f"--tree {source}"
    try:
        tree = FileTree(include=args.include or DEFAULT_INCLUDE, exclude=[*DEFAULT_EXCLUDE, *(args.exclude or ())])
    except InvalidArgument as exc:
        raise UsageError(f"--include/--exclude: {one_line(exc, _MESSAGE_CHARS)}") from None
    timeout = DEFAULT_SUITE_TIMEOUT if args.suite_timeout is None else args.suite_timeout
    spec = {**common, "tasks": "tasks.jsonl", "reward": "tests", "strategy": "tree", "proposal": "edit",
            "initial_text": None, "test_tasks": None, "stratify": args.stratify or "group",
            "tree": {"include": list(tree.include), "exclude": list(tree.exclude), "test_cmd": args.test_cmd,
                     "timeout": timeout, "plugins": _plugins(args)}}
    made = not run.path.exists()
    run.path.mkdir(parents=True, exist_ok=True)
    staging = run.path / f".tree.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        copied, left = copy_project(source, staging)
        suite = _make_suite(spec, staging, where, source)
        try:
            tasks = _discover(suite, where, source)
            files = len(suite.initial)
        finally:
            suite.close()
        if len(tasks) < 4:
            raise UsageError(f"{where}: {len(tasks)} test(s) found; a run needs at least 4 (some to propose from, "
                             "some held out to decide on)")
        missing = next((t.id for t in tasks if spec["stratify"] not in t.meta), None)
        if missing is not None:
            raise UsageError(f"--stratify {spec['stratify']}: the test {missing!r} has no such field; a test has "
                             "test, file and group (its class, or its file)")
        if run.spec_file.exists():  # --force: not under a run that is going on
            with hold(run.path, "init"):
                _write(run, staging, spec, tasks)
        else:
            _write(run, staging, spec, tasks)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if made:
            with contextlib.suppress(OSError):
                run.path.rmdir()  # only if nothing else is in it
        raise
    proposer = common.get("proposer")
    by = proposer or {"model": common["model"], "provider": common["provider"], "api_key_env": common["api_key_env"]}
    out = f" ({left} symlink(s) or special file(s) not copied)" if left else ""
    print(f"initialised {run.path}: {len(tasks)} tests are the tasks and the reward; the tree holds {files} "
          f"file(s) of the {copied} copied to {run.tree_dir}{out}; edits by {by['model']} ({by['provider']}), its "
          f"key read from ${by['api_key_env']} at run time; sandbox: {Sandbox().protections['filesystem']}")
    return 0


def _was_tree(run: RunDir) -> bool:
    """Was ``run`` made by ``init --tree``? Read leniently: ``--force`` replaces a spec a hand broke."""
    try:
        return read_json(run.spec_file, "spec.json").get("strategy") == "tree"
    except UsageError:
        return False


def _write(run: RunDir, staging: Path, spec: dict[str, Any], tasks: Sequence[Task]) -> None:
    old = run.path / f".tree.old-{os.getpid()}-{secrets.token_hex(4)}"
    if os.path.lexists(run.tree_dir):
        os.rename(run.tree_dir, old)
    os.rename(staging, run.tree_dir)
    shutil.rmtree(old, ignore_errors=True)
    spec["inputs"] = init_inputs(tasks)  # the tests found, as tasks.jsonl holds them
    write_tasks(run.tasks_file, tasks)
    with contextlib.suppress(FileNotFoundError):
        run.test_tasks_file.unlink()  # a --force re-init of a run that had a test set
    atomic_write(run.spec_file, json.dumps(spec, indent=2, sort_keys=True))


# --------------------------------------------------------------------------- run


def open_suite(spec: dict[str, Any], run: RunDir, tasks: Sequence[Task]) -> TestSuite:
    """The run's `TestSuite` on ``RUN_DIR/tree``, its tests found again and checked against ``tasks.jsonl``.

    Raises:
        UsageError: the copy is missing, or its tests are not the ones init found.
    """
    if not run.tree_dir.is_dir():
        raise UsageError(f"{run.tree_dir}: missing; it is the run's copy of the project, made by `agentdescent "
                         "init RUN_DIR --tree DIR` (run it again with --force to make it anew)")
    suite = _make_suite(spec, run.tree_dir, str(run.tree_dir), run.tree_dir)
    try:
        found = [t.id for t in _discover(suite, str(run.tree_dir), run.tree_dir)]
    except BaseException:
        suite.close()
        raise
    known = [t.id for t in tasks]
    if sorted(found) != sorted(known):
        suite.close()
        gone = sorted(set(known) - set(found))
        new = sorted(set(found) - set(known))
        said = (f"{len(gone)} of tasks.jsonl's are not found (first {gone[0]!r})" if gone else
                f"{len(new)} are not in tasks.jsonl (first {new[0]!r})")
        raise UsageError(f"{run.tree_dir}: its tests are not the ones init found: {said}; `agentdescent init "
                         f"{run.path} --tree DIR --force` makes the run anew")
    return suite


def evolve_kwargs(suite: TestSuite, agent: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """The suite's `evolve` keywords (`TestSuite.evolve_kwargs`), with the spec's false-accept rate."""
    kwargs = suite.evolve_kwargs(agent=agent)
    if spec.get("false_accept_rate"):
        kwargs["agg_config"] = dataclasses.replace(kwargs["agg_config"], false_accept_rate=spec["false_accept_rate"])
    return kwargs


def suite_line(suite: TestSuite) -> str:
    """``suite runs: 9 (0 killed at the timeout), 0.8 s in the sandbox each; 31 result(s) from the cache``."""
    s = suite.stats()
    each = s["sandbox_seconds"] / max(1, s["suite_runs"])
    return (f"suite runs: {s['suite_runs']:.0f} ({s['timeouts']:.0f} killed at the timeout, {s['crashes']:.0f} "
            f"crashed), {each:.1f} s in the sandbox each; {s['cache_hits']:.0f} result(s) from the cache")


# --------------------------------------------------------------------------- export and eval


#: A staging folder's name: its prefix, the pid of the process that made it, a random tail.
_STAGING = re.compile(r"(?P<pid>[0-9]+)-[0-9a-f]{8}\Z")


def sweep_staging(folder: Path, prefix: str) -> list[str]:
    """Remove the staging folders ``folder/PREFIX<pid>-<hex>`` whose process is gone; return their names.

    A process killed while it wrote a tree (``init``'s ``RUN/.tree.tmp-...``, ``export``'s
    ``.OUT.tmp-...`` beside its output) leaves its half-written folder behind; the next
    ``export`` removes it. A folder whose process is alive is left alone (it is still
    being written), and so is anything that is not a folder.
    """
    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in sorted(names):
        match = _STAGING.match(name[len(prefix):]) if name.startswith(prefix) else None
        if match is None or process_alive(int(match.group("pid"))):
            continue
        path = folder / name
        if path.is_symlink() or not path.is_dir():
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            removed.append(name)
    return removed


def writable_state(state: Mapping[str, str], tree: FileTree, run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The files of ``state`` export may write, and those it may not, each with why.

    The paths are checked as the tree checks an edit's (`agentdescent.code.FileTree.refusals`),
    against the files the run's copy of the project (``RUN_DIR/tree``) started with: a
    state stored by an older version may hold a path the tree now refuses (a hidden
    folder, a virtual environment, a name shadowing the runner or a module), which is
    never written.
    """
    copy = run_dir / "tree"
    initial: dict[str, str] | None = None
    if copy.is_dir():
        try:
            initial = tree.scan(copy)[0]
        except InvalidArgument:
            initial = None  # a copy the tree cannot read: every path is checked on its own
    refused = tree.refusals(state, initial=initial, base=copy if copy.is_dir() else None)
    good = {p: v for p, v in state.items() if p not in refused}
    return good, {p: f"{e.reason}: {one_line(e, 240)}" for p, e in refused.items()}


def write_tree(out: Path, state: Mapping[str, str], tree: FileTree, run_dir: Path, *, existed: bool) -> list[str]:
    """Write the tree ``state`` into the folder ``out`` (checked by `agentdescent.cli.rundir.check_output_dir`).

    A missing or empty folder gets every file at once: they are written into a new
    temporary folder beside it, which is then renamed into place. A folder with files in
    it (``--force``) gets each file replaced atomically (its permissions kept), the
    other files left as they are; a path there that is not a regular file, or that
    leads out of ``out`` or into the run directory, is refused before any file is
    replaced. A path the tree would not write (`writable_state`) is skipped, and said on
    standard output; it is never written. First, the staging folders killed processes
    left beside ``out`` and in the run directory are removed (`sweep_staging`).

    Returns:
        The relative paths written.

    Raises:
        UsageError: such a path, or the folder cannot be written.
    """
    out = Path(os.path.abspath(out))
    swept = sweep_staging(out.parent, f".{out.name}.tmp-")
    if (run_dir / "tree").is_dir():  # else a .tree.tmp- may be the only copy left: init's to sort out
        swept += sweep_staging(run_dir, ".tree.tmp-") + sweep_staging(run_dir, ".tree.old-")
    if swept:
        print(f"removed {len(swept)} staging folder(s) left by killed processes: {', '.join(swept[:3])}"
              + (f" and {len(swept) - 3} more" if len(swept) > 3 else ""))
    state, skipped = writable_state(state, tree, run_dir)
    for path, why in skipped.items():
        print(f"not written: {path[:200]!r} ({why})")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = _new_folder(out)
    except OSError as exc:
        raise UsageError(f"-o {out}: cannot write beside it ({exc.strerror or exc})") from None
    try:
        try:
            written = tree.materialize(state, staging)
        except InvalidArgument as exc:
            raise UsageError(f"-o {out}: {one_line(exc, _MESSAGE_CHARS)}") from None
        for rel in written:
            with open(staging / rel, "rb+") as handle:
                os.fsync(handle.fileno())
        empty = existed and not any(os.scandir(out))
        if not existed or empty:
            try:
                os.rename(staging, out)  # POSIX renames over an empty folder
            except OSError as exc:
                raise UsageError(f"-o {out}: cannot put the tree there ({exc.strerror or exc}); did something "
                                 "write into it meanwhile? Run export again") from None
            return written
        _replace_files(out, staging, written, run_dir)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _new_folder(out: Path) -> Path:
    while True:
        path = out.parent / f".{out.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def _replace_files(out: Path, staging: Path, written: Sequence[str], run_dir: Path) -> None:
    top = Path(os.path.realpath(out))
    for rel in written:  # every target checked before any is replaced
        target = out / rel
        parent = Path(os.path.realpath(target.parent))
        if parent != top and top not in parent.parents:
            raise UsageError(f"-o {out}: {rel} would be written through a symlink out of the folder; nothing written")
        if is_inside(target, run_dir):
            raise UsageError(f"-o {out}: {rel} would be written inside the run directory {run_dir}; nothing written")
        try:
            mode = os.lstat(target).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise UsageError(f"-o {out}: {rel} is there and is not a regular file, so it is not replaced; nothing "
                             "written")
    for rel in written:
        target = out / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.chmod(staging / rel, stat.S_IMODE(os.stat(target).st_mode))
            os.replace(staging / rel, target)
        except OSError as exc:
            raise UsageError(f"-o {out}: cannot write {rel} ({exc.strerror or exc})") from None


def check_eval_flags(args: argparse.Namespace) -> None:
    """Refuse ``eval``'s flags a tree run does not take (``--tasks``, ``--repeats``).

    Raises:
        UsageError: naming the flag.
    """
    if args.tasks is not None:
        raise UsageError("--tasks: not for a tree run; eval runs the run's own tests (its tasks) on the version")
    if args.repeats != 1:
        raise UsageError(f"--repeats {args.repeats}: a tree run's tests run once on a version (the result of a test "
                         "on one tree does not change)")


def eval_tree(run: RunDir, spec: dict[str, Any], tasks: Sequence[Task], state: Mapping[str, str], label: str,
              version: int, args: argparse.Namespace) -> int:
    """``eval`` on a tree run: the suite on one version, each test passed or not, held-out ones marked.

    Raises:
        UsageError: ``--tasks`` or ``--repeats`` (the tests are the run's), a bad
            ``--json`` path, or a copy whose tests changed.
    """
    check_eval_flags(args)
    out = Path(args.json) if args.json else None
    if out is not None:
        check_output(out, run.path, "--json", force=args.force)
    _, held = spec_split(spec, tasks)
    held_ids = {t.id for t in held}
    suite = open_suite(spec, run, tasks)
    try:
        result = suite.results(state)
    finally:
        suite.close()
    outcomes = result.outcomes
    passed = [t.id for t in tasks if outcomes[t.id].passed]
    held_passed = sum(1 for t in passed if t in held_ids)
    print(f"{label}: {len(passed)} of {len(tasks)} tests pass ({held_passed} of {len(held_ids)} held out); the "
          f"suite ran in {result.seconds:.1f} s in the sandbox ({result.sandbox.describe()})")
    width = max(len(o.outcome) for o in outcomes.values())
    for task in tasks:
        o = outcomes[task.id]
        mark = " (held out)" if task.id in held_ids else ""
        first = next((line.strip() for line in o.message.splitlines() if line.strip()), "")
        said = f"  {first[:117] + '...' if len(first) > 120 else first}" if first and not o.passed else ""
        print(f"  {o.outcome:<{width}}  {task.id}{mark}{said}")
    if out is not None:
        data = {"run_dir": str(run.path), "version": version, "passed": len(passed), "tests": len(tasks),
                "held_out_passed": held_passed, "held_out": len(held_ids),
                "outcomes": [{"id": t.id, "outcome": outcomes[t.id].outcome, "message": outcomes[t.id].message,
                              "held_out": t.id in held_ids} for t in tasks]}
        write_output(out, json.dumps(data, indent=2, sort_keys=True), "--json")
        print(f"wrote {out}")
    return 0
