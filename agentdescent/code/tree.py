"""`FileTree`: a folder of source files as an evolving artifact, and the edits that change it.

This module owns the file-tree strategy: which files of a folder are the artifact
(include/exclude globs and size limits, `FileTree.load`), how a state is written back out
(`FileTree.materialize`), how it renders for a prompt and reads back from that rendering
(`FileTree.render`, `FileTree.parse`: lossless, because the engine hands the same text to
``run``), and how a code model's reply becomes a `agentdescent.types.Diff`
(`FileTree.to_diff`: search/replace blocks and whole-file replacements, parsed by
`agentdescent.code.edits`, applied exactly by `agentdescent.textedits`).

The state is the flat ``dict[str, str]`` contract: relative POSIX path -> file content.
Diffs write whole files and carry the edits that made them (`Diff.edits`), so edits to
different files fuse, and edits to one file fuse when their blocks are disjoint.

**Where an edit may write** is decided here, once, for every path a reply names
(`FileTree.check_path`, with the rules of `agentdescent.code.paths`; the docs page
"Evolving code", section "Edits a candidate may make", lists them): a file the state
tracks, or a new file the include globs allow and the exclude globs do not; never a hidden or ignored folder (caches, virtual environments,
installed packages, version control), a name that shadows the test runner, its
configuration or the interpreter's startup, a new top-level module named like a standard
or installed one, a name too long, a path through a file or over a folder, or through a
symlink of the project's folder (``FileTree.base``). Each refusal is an
`agentdescent.errors.EditRefused` with its own ``reason``, counted in `FileTree.refused`:
a proposal never raises anything else out of `to_diff`, so no proposal ends a run. The
Python a diff writes is scanned for code that reaches into the runner or the process's
exit (`agentdescent.code.machinery`, the ``machinery=`` knob).

It must not run code (that is `agentdescent.code.sandbox`), touch the ledger, or write
anywhere but the folder `materialize` is given; it reads the project's folder (``base``)
only to look at what a path would pass through.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from ..errors import EditRefused, InvalidArgument, InvalidArgumentType
from ..merge.strategies import Strategy
from ..textedits import apply_edits
from ..types import Diff, stable_hash
from ..validation import check_int
from . import paths
from .edits import FileEdit, parse_edits
from .machinery import Finding, new_findings
from .paths import IGNORED_DIRS, IGNORED_SUFFIXES, SKIPPED_DIRS

__all__ = ["FileTree"]

logger = logging.getLogger("agentdescent.code.tree")

#: What ``machinery=`` may be: refuse diffs with findings, accept and record them, or not scan.
MACHINERY = ("refuse", "flag", "allow")

#: Per-diff findings kept for `FileTree.flags` (the oldest are dropped beyond this).
MAX_FLAGGED_DIFFS = 4096

#: Findings listed in a refusal's message (the rest are counted).
_LISTED_FINDINGS = 12

#: The default evolvable files: Python sources that are not tests.
DEFAULT_INCLUDE = ("*.py",)
DEFAULT_EXCLUDE = ("test_*.py", "*_test.py", "conftest.py", "tests/**", "test/**")

_HEADER = "## "
_NO_NEWLINE = " (no newline at end of file)"


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex over relative POSIX paths: ``*`` within a folder, ``**`` across folders.

    A pattern without ``/`` matches a file's name in any folder; one with ``/`` matches
    the whole relative path (``tests/**`` is everything under ``tests``).
    """
    if "/" not in pattern:
        pattern = "**/" + pattern
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _check_patterns(patterns: object, knob: str) -> tuple[str, ...]:
    if isinstance(patterns, str):
        patterns = (patterns,)
    if not isinstance(patterns, Iterable):
        raise InvalidArgumentType(f"FileTree({knob}={patterns!r}): use a list of glob patterns such as ['*.py']")
    out = tuple(patterns)
    for p in out:
        if not isinstance(p, str) or not p or p.startswith("/"):
            raise InvalidArgument(f"FileTree({knob}=...): {p!r} is not a relative glob pattern such as 'src/*.py'")
    return out



class FileTree(Strategy):
    """A folder's source files as the artifact: ``{relative path: content}``.

    Args:
        include: globs of the files that are the artifact (a pattern without ``/``
            matches the file name in any folder; ``**`` crosses folders). Default: every
            ``*.py``.
        exclude: globs left out even when included. Default: tests (``test_*.py``,
            ``*_test.py``, ``conftest.py``, ``tests/**``, ``test/**``), so a proposal can
            never change the tests that score it: an edit to an excluded path is refused.
        max_file_bytes: a file larger than this is left out of the artifact (listed by
            `scan`), and an edit that makes a file larger is refused.
        max_files: most files the artifact may hold; a folder with more is refused.
        max_total_bytes: most bytes the artifact may hold; a larger one is refused,
            naming its biggest files (narrow ``include``).
        machinery: what to do with a diff whose Python code reaches into the test runner
            or the process's exit (`agentdescent.code.machinery`: ``os._exit``, ``atexit``,
            frames, ``gc``, ``ctypes``, pytest's modules...; only what the edit adds, in
            every Python file but a test module the state already tracks): ``"refuse"`` (the default: `EditRefused`,
            ``reason="machinery"``, the findings and their lines in the message),
            ``"flag"`` (accepted; the findings are kept, `flags`), or ``"allow"`` (not
            scanned). Findings are counted either way (`findings`).
        base: the project's folder the tree's files are written over (None: only the
            state is looked at). An edit may not pass through a symlink there, nor a
            file, nor name a folder or a file of it the tree does not track. A sandboxed
            reward sets it to its copy of the project (`agentdescent.code.project.ProjectCopy`).

    The rendering is the whole tree, every file in full: the engine gives the same text
    to ``run``, which rebuilds the tree from it (`parse`), so nothing may be cut from it.
    What bounds a prompt is what `load` admits: the limits above.

    Raises:
        InvalidArgument, InvalidArgumentType: a bad pattern, limit or ``machinery``.
    """

    #: The proposals it reads: code edits (an `agentdescent.LLMAgent` must be in
    #: ``proposal="edit"`` mode; the engines refuse another).
    proposal_mode = "edit"

    def __init__(self, include: Iterable[str] | str = DEFAULT_INCLUDE, exclude: Iterable[str] | str = DEFAULT_EXCLUDE,
                 max_file_bytes: int = 200_000, *, max_files: int = 200, max_total_bytes: int = 1_000_000,
                 machinery: str = "refuse", base: str | os.PathLike[str] | None = None) -> None:
        self.include = _check_patterns(include, "include")
        self.exclude = _check_patterns(exclude, "exclude")
        if not self.include:
            raise InvalidArgument("FileTree(include=[]): give at least one pattern, such as '*.py'")
        self.max_file_bytes = check_int(max_file_bytes, "max_file_bytes", low=1, owner="FileTree")
        self.max_files = check_int(max_files, "max_files", low=1, owner="FileTree")
        self.max_total_bytes = check_int(max_total_bytes, "max_total_bytes", low=1, owner="FileTree")
        if machinery not in MACHINERY:
            raise InvalidArgument(f"FileTree(machinery={machinery!r:.60}): give one of {', '.join(map(repr, MACHINERY))} "
                                  "(refuse diffs whose code reaches into the test runner, accept and record them, or "
                                  "do not scan)")
        self.machinery = machinery
        if base is not None and not isinstance(base, (str, os.PathLike)):
            raise InvalidArgumentType(f"FileTree(base={base!r:.80}): give the project's folder as a path, or None")
        #: The project's folder the tree's files are written over, or None (see the class docstring).
        self.base: Path | None = None if base is None else Path(base)
        self._include = [_glob_regex(p) for p in self.include]
        self._exclude = [_glob_regex(p) for p in self.exclude]
        self._lock = threading.Lock()
        self._refused: dict[str, int] = {}
        self._findings: Counter[str] = Counter()
        self._flags: dict[str, dict[str, tuple[Finding, ...]]] = {}

    # ----------------------------------------------------------------- which files

    def matches(self, path: str) -> bool:
        """Is the relative POSIX ``path`` part of the artifact (included, not excluded)?"""
        return any(r.match(path) for r in self._include) and not any(r.match(path) for r in self._exclude)

    def scan(self, directory: str | os.PathLike[str]) -> tuple[dict[str, str], dict[str, str]]:
        """The artifact state of ``directory`` and the matching files left out, with why.

        Files are read as UTF-8 with their newlines as they are. Symlinks, files over
        ``max_file_bytes``, files that are not UTF-8 text and files whose path no edit
        could write (`check_path`'s rules that hold whatever the state: a hidden name,
        the runner's names...) are left out; the folders in ``SKIPPED_DIRS`` (``.git``,
        ``__pycache__``, virtual environments...), hidden folders, the ``IGNORED_DIRS``
        and symlinked folders are not read.

        Raises:
            InvalidArgument: ``directory`` is not a folder, or the artifact would hold more
                than ``max_files`` files or ``max_total_bytes`` bytes.
        """
        root = Path(directory)
        if not root.is_dir():
            raise InvalidArgument(f"FileTree.load({str(directory)!r}): not a folder; give the project's folder")
        state: dict[str, str] = {}
        skipped: dict[str, str] = {}
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")
                             and d.casefold() not in IGNORED_DIRS and not d.casefold().endswith(IGNORED_SUFFIXES)
                             and not os.path.islink(os.path.join(folder, d)))
            for name in sorted(files):
                full = Path(folder, name)
                rel = full.relative_to(root).as_posix()
                if not self.matches(rel):
                    continue
                try:
                    self.clean_path(rel)
                except EditRefused as refused:
                    skipped[rel] = f"no edit may write it ({refused.reason})"
                    continue
                if full.is_symlink() or not full.is_file():
                    skipped[rel] = "not a regular file"
                    continue
                size = full.stat().st_size
                if size > self.max_file_bytes:
                    skipped[rel] = f"{size} bytes, over max_file_bytes={self.max_file_bytes}"
                    continue
                try:
                    with open(full, encoding="utf-8", newline="") as handle:
                        state[rel] = handle.read()
                except UnicodeDecodeError:
                    skipped[rel] = "not UTF-8 text"
        self._check_size(state, f"FileTree.load({str(directory)!r})")
        return state, skipped

    def load(self, directory: str | os.PathLike[str]) -> dict[str, str]:
        """The artifact state of ``directory`` (see `scan` for what is left out)."""
        return self.scan(directory)[0]

    def _check_size(self, state: Mapping[str, str], what: str) -> None:
        if len(state) > self.max_files:
            raise InvalidArgument(f"{what}: {len(state)} files match, over max_files={self.max_files}; narrow "
                                  "include= or raise max_files")
        total = sum(len(v.encode("utf-8")) for v in state.values())
        if total > self.max_total_bytes:
            biggest = sorted(state, key=lambda p: -len(state[p]))[:3]
            raise InvalidArgument(f"{what}: {total} bytes, over max_total_bytes={self.max_total_bytes} (biggest: "
                                  f"{', '.join(biggest)}); narrow include= or raise max_total_bytes")

    def materialize(self, state: Mapping[str, str], directory: str | os.PathLike[str]) -> list[str]:
        """Write every file of ``state`` under ``directory`` (created if needed); return the paths written.

        Other files in ``directory`` are left as they are. Every path must pass the rules
        an edit's path does (`refusals`: not absolute, no ``..``, no hidden or ignored
        folder, none of the runner's names, not too long, not through another file of the
        state), and none may be written through a symlink out of ``directory``: one that
        does not refuses the whole state before anything is written (to write the rest,
        drop the paths `refusals` lists).

        Raises:
            EditRefused: a path the rules refuse (its ``reason`` says which).
            InvalidArgument: a path that would be written through a symlink.
        """
        refused = self.refusals(state, base=None)
        if refused:
            path, first = next(iter(refused.items()))
            raise EditRefused(f"FileTree.materialize: {first}" + (f" (and {len(refused) - 1} more path(s))"
                                                                  if len(refused) > 1 else ""),
                              path=path, reason=first.reason)
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        real_root = root.resolve()
        targets = []
        for rel in sorted(state):
            target = root / rel
            parent = target.parent.resolve()
            if parent != real_root and real_root not in parent.parents:
                raise InvalidArgument(f"FileTree.materialize: {rel!r} would be written outside {str(root)!r}")
            if target.is_symlink():
                raise InvalidArgument(f"FileTree.materialize: {rel!r} is a symlink in {str(root)!r}; not written")
            targets.append((rel, target))
        for rel, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "w", encoding="utf-8", newline="") as handle:
                handle.write(state[rel])
        return [c for c, _ in targets]

    def refusals(self, state: Mapping[str, str], *, initial: Mapping[str, str] | None = None,
                 base: str | os.PathLike[str] | None = None) -> dict[str, EditRefused]:
        """The paths of ``state`` the tree would not write, each with its refusal (empty: every path is fine).

        For a state that did not come through `to_diff` (one stored by an older version,
        or built by hand). Every path must be in the form the tree writes (`clean_path`)
        and pass the rules that hold whatever the state; no path may lie inside another
        file of the state or name a folder of it. With ``initial`` (the state the run
        started from), the paths it does not hold are checked as new files (included, not
        excluded, not shadowing a module); with ``base``, against that folder as
        `check_path` does with ``FileTree.base``.

        Args:
            state: the state to check.
            initial: the files the run started from (tracked), or None.
            base: the project's folder, or None (not the tree's own ``base``: give it).
        """
        root = None if base is None else Path(base)
        known = set(state)
        tracked = known if initial is None else set(initial)
        kept = known & tracked  # a tracked file is checked against the tracked files only: a new one is at fault
        out: dict[str, EditRefused] = {}
        for raw in sorted(state):
            try:
                clean = self.clean_path(raw) if isinstance(raw, str) else None
                if clean != raw:
                    raise EditRefused(f"the path {raw!r} is not in the form the tree writes paths"
                                      + (f" ({clean!r})" if clean else ""), path=str(raw), reason="outside")
                self._check_place(clean, tracked, kept if clean in tracked else known, root)
            except EditRefused as refused:
                out[str(raw)] = refused
        return out

    def check_path(self, path: str, state: Mapping[str, str], *, others: Iterable[str] = ()) -> str:
        """``path`` as the tree writes it, if an edit of ``state`` may write there.

        Allowed: a file ``state`` tracks, or a new file ``include`` allows and ``exclude``
        does not. Always refused, each with its ``reason``: a path that is not relative
        or holds ``..``, a backslash or a drive (``outside``); a control character, NUL
        or line break (``control``); a part over 255 bytes or a path over 1024
        characters (``too_long``); a part starting with ``.`` (``hidden``); a cache,
        virtual environment, installed packages, package metadata or compiled file
        (``ignored``: ``__pycache__``, ``node_modules``, ``venv``, ``site-packages``,
        ``*.egg-info``, ``*.pyc``...); the runner's modules (``pytest``, ``_pytest``,
        ``pluggy``, ``py.py``), the interpreter's startup (``sitecustomize.py``,
        ``usercustomize.py``, ``*.pth``), ``conftest.py``, the runner's configuration at
        the top (``pytest.ini``, ``tox.ini``, ``setup.cfg``, ``pyproject.toml``), and a
        new module or folder named like a standard-library or installed one where it
        would be imported as that (at the top, in ``src/``, or in a folder of tests that
        is not a package) (``shadowing``); a path inside a file of the state or of the reply, or naming one
        of their folders (``through_file``, ``names_folder``). With ``FileTree.base`` set,
        also a path through a symlink there (``symlink``), through one of its files or
        over one of its folders, and a file there the tree does not track
        (``untracked``).

        Args:
            path: the path as a reply names it.
            state: the state the edit is of (its keys are the tracked files).
            others: the other (clean) paths the same reply writes.

        Raises:
            EditRefused: the path is refused (the message names it and what to do instead).
        """
        clean = self.clean_path(path)
        self._check_place(clean, state.keys(), set(state) | set(others) | {clean}, self.base)
        return clean

    def _check_place(self, path: str, tracked: Iterable[str], known: set[str], base: Path | None) -> None:
        """The rules of a clean ``path`` that depend on the state (``tracked``), the reply (``known``) and ``base``."""
        tracked = tracked if isinstance(tracked, (set, frozenset)) else set(tracked)
        paths.check_structure(path, known)
        new = path not in tracked
        if new and not self.matches(path):
            raise EditRefused(f"the edit of {path!r} is refused: that path is not part of the artifact (include="
                              f"{list(self.include)}, exclude={list(self.exclude)}); edit only the files the tree "
                              "lists, or new files include allows", path=path, reason="excluded")
        if base is not None:
            paths.check_base(path, tracked, base)
        if new:
            paths.check_shadowing(path, tracked, known, base)

    @staticmethod
    def clean_path(path: str) -> str:
        """``path`` as a relative POSIX path inside the tree, if its name may be written: `agentdescent.code.paths.clean_path`.

        The rules that hold whatever the state (`check_path` has the rest); raises
        `agentdescent.errors.EditRefused` with the reasons that function lists.
        """
        return paths.clean_path(path)

    # ----------------------------------------------------------------- the strategy

    def initial(self) -> dict[str, str]:
        """An empty tree (give ``initial_state=tree.load(folder)`` to start from a folder)."""
        return {}

    def render(self, state: Mapping[str, str]) -> str:
        """Every file in full, in path order: a ``## path`` line and the content in a fence.

        The fence is longer than any run of backticks in the file, so `parse` reads it back
        exactly; a file without a final newline says so on its path line.
        """
        parts = [f"# File tree: {len(state)} file(s)"]
        for path in sorted(state):
            content = state[path]
            longest = max((len(m) for m in re.findall(r"`+", content)), default=0)
            fence = "`" * max(3, longest + 1)
            ending = content.endswith("\n") or content == ""
            body = content if ending else content + "\n"
            parts.append(f"{_HEADER}{path}{'' if ending else _NO_NEWLINE}\n{fence}{_language(path)}\n{body}{fence}")
        return "\n\n".join(parts) + "\n"

    def parse(self, rendered: str) -> dict[str, str]:
        """The state `render` made ``rendered`` from (its exact inverse).

        Raises:
            InvalidArgument: ``rendered`` is not a `render` of a tree.
        """
        lines = rendered.split("\n")
        state: dict[str, str] = {}
        i = 1 if lines and lines[0].startswith("# File tree:") else 0
        while i < len(lines):
            line = lines[i]
            if not line.startswith(_HEADER):
                if line.strip():
                    raise InvalidArgument(f"FileTree.parse: line {i + 1} is neither a '## path' line nor blank: "
                                          f"{line[:80]!r}; give the text FileTree.render made")
                i += 1
                continue
            path = line[len(_HEADER):]
            no_newline = path.endswith(_NO_NEWLINE)
            if no_newline:
                path = path[: -len(_NO_NEWLINE)]
            opening = lines[i + 1] if i + 1 < len(lines) else ""
            fence = opening[: len(opening) - len(opening.lstrip("`"))]
            if len(fence) < 3:
                raise InvalidArgument(f"FileTree.parse: the file {path!r} has no opening fence on line {i + 2}")
            try:
                end = lines.index(fence, i + 2)
            except ValueError:
                raise InvalidArgument(f"FileTree.parse: the fence of {path!r} is never closed") from None
            body = "".join(x + "\n" for x in lines[i + 2:end])
            state[path] = body[:-1] if no_newline else body
            i = end + 1
        return state

    def to_diff(self, state: Mapping[str, str], proposal: str, author: str, base_version: int,
                target: str) -> Diff | None:
        """The diff a reply's edits make (None when they change nothing).

        Every path must be one the tree may write (`check_path`: a tracked file, or a new
        file ``include`` allows, and none of the places always refused), and every block
        must apply (`agentdescent.textedits.apply_edits`: each search found exactly once,
        in order); a new file is created by an empty search part or a whole-file
        replacement. The Python files written are then scanned for code reaching into the
        runner (``machinery=``). Anything refused refuses the whole reply, counted in
        `refused`; nothing but `EditRefused` comes out of a reply, so no reply ends a run.

        Raises:
            EditRefused: the reply holds no edit or a malformed block (or names one file
                twice), a path `check_path` refuses, an edit that does not apply, a file
                over ``max_file_bytes`` or not Unicode text, or (``machinery="refuse"``)
                code reaching into the runner (``reason="machinery"``).
            InvalidArgumentType: ``proposal`` is not a str (the engine checks that first).
        """
        if not isinstance(proposal, str):
            raise InvalidArgumentType(f"a proposal must be a str, got {type(proposal).__name__}")
        try:
            return self._to_diff(state, proposal, author, base_version, target)
        except EditRefused as refused:
            with self._lock:
                self._refused[refused.reason] = self._refused.get(refused.reason, 0) + 1
            raise

    def _to_diff(self, state: Mapping[str, str], proposal: str, author: str, base_version: int,
                 target: str) -> Diff | None:
        changes: dict[str, FileEdit] = {}
        for change in parse_edits(proposal):
            path = self.clean_path(change.path)
            if path in changes:
                raise EditRefused(f"the reply edits {path!r} twice (as {changes[path].path!r} and {change.path!r}); "
                                  "give each file's blocks under one path line", path=path, reason="malformed")
            changes[path] = change
        known = set(state) | set(changes)
        for path in changes:
            self._check_place(path, state.keys(), known, self.base)
        ops: dict[str, str | None] = {}
        edits: dict[str, tuple[tuple[str, str], ...]] = {}
        found: dict[str, tuple[Finding, ...]] = {}
        own = {p.split("/", 1)[0].split(".", 1)[0] for p in state}  # the project's top-level modules
        for path, change in changes.items():
            current = state.get(path)
            if change.content is not None:
                new = change.content
            else:
                new = apply_edits(current if current is not None else "", change.edits, path=path)
            try:
                size = len(new.encode("utf-8"))
            except UnicodeEncodeError:
                raise EditRefused(f"the edit of {path!r} holds text that is not Unicode (a lone surrogate); write "
                                  "plain text", path=path, reason="malformed") from None
            if size > self.max_file_bytes:
                raise EditRefused(f"the edit makes {path!r} {size} bytes, over max_file_bytes={self.max_file_bytes}",
                                  path=path, reason="too_big")
            if new == current:
                continue
            ops[path] = new
            if change.content is None and current is not None:
                edits[path] = tuple(change.edits)
            # a test module the state already holds (a tree given its tests on purpose) is the tests' own to
            # write; a new one is scanned: pytest would collect and run it
            tests_own = current is not None and paths.is_test_module(path)
            if self.machinery != "allow" and path.endswith((".py", ".pyw")) and not tests_own:
                findings = new_findings(new, current, own)
                if findings:
                    found[path] = tuple(findings)
        if found:
            with self._lock:
                self._findings.update(f.what for fs in found.values() for f in fs)
            if self.machinery == "refuse":
                raise _machinery_refusal(found)
        if not ops:
            return None
        payload = sorted((k, v) for k, v in ops.items())
        diff_id = f"d{stable_hash(target, author, base_version, payload):016x}"
        diff = Diff(diff_id, target, ops, author=author, edits=edits)
        if found:
            with self._lock:
                self._flags.pop(diff_id, None)
                self._flags[diff_id] = found
                while len(self._flags) > MAX_FLAGGED_DIFFS:
                    del self._flags[next(iter(self._flags))]
            logger.info("diff %s by %s accepted with runner machinery flagged: %s", diff_id, author,
                        "; ".join(f"{p} {f}" for p, fs in found.items() for f in fs)[:2000])
        return diff

    def refused(self) -> dict[str, int]:
        """Replies refused so far, by `agentdescent.errors.EditRefused` reason."""
        with self._lock:
            return dict(self._refused)

    def findings(self) -> dict[str, int]:
        """Machinery findings so far (`agentdescent.code.machinery`), by what was found, in refused and flagged diffs."""
        with self._lock:
            return dict(self._findings)

    def flags(self, diff_id: str) -> dict[str, tuple[Finding, ...]]:
        """The findings of an accepted diff (``machinery="flag"``), by path; empty for a diff without any.

        Kept for the last `MAX_FLAGGED_DIFFS` flagged diffs of this tree object (in this
        process): a report reads them while the run is going, or right after it.
        """
        with self._lock:
            return dict(self._flags.get(diff_id, {}))

    def __repr__(self) -> str:
        more = "" if self.machinery == "refuse" else f", machinery={self.machinery!r}"
        return (f"FileTree(include={list(self.include)!r}, exclude={list(self.exclude)!r}, "
                f"max_file_bytes={self.max_file_bytes}{more})")

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        defaults = {"machinery": "refuse", "base": None, "_findings": Counter(), "_flags": {}}  # an older pickle
        self.__dict__.update({**defaults, **state})
        self._lock = threading.Lock()


def _machinery_refusal(found: Mapping[str, tuple[Finding, ...]]) -> EditRefused:
    listed = [f"{path} {f}" for path, fs in found.items() for f in fs]
    shown = "; ".join(listed[:_LISTED_FINDINGS]) + (f"; and {len(listed) - _LISTED_FINDINGS} more"
                                                    if len(listed) > _LISTED_FINDINGS else "")
    return EditRefused(
        f"the diff is refused: its code reaches into the test runner or the process's exit ({shown}); fix the code "
        "without these (an honest fix needs none of them), or, if the project's own code needs them, build the tree "
        "with FileTree(machinery='flag') to accept and record them, or machinery='allow'",
        path=next(iter(found)), reason="machinery")


def _language(path: str) -> str:
    return {".py": "python", ".js": "javascript", ".ts": "typescript", ".md": "markdown", ".toml": "toml",
            ".json": "json", ".sh": "bash", ".yaml": "yaml", ".yml": "yaml", ".txt": "text"}.get(
        PurePosixPath(path).suffix, "")
