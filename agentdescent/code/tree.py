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

It must not run code (that is `agentdescent.code.sandbox`), touch the ledger, or write
anywhere but the folder `materialize` is given.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from ..errors import EditRefused, InvalidArgument, InvalidArgumentType
from ..merge.strategies import Strategy
from ..textedits import apply_edits
from ..types import Diff, stable_hash
from ..validation import check_int
from .edits import parse_edits

__all__ = ["FileTree"]

#: Folders never read as part of a tree.
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                          ".tox", ".venv", "venv", "node_modules", ".agentdescent"})

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

    The rendering is the whole tree, every file in full: the engine gives the same text
    to ``run``, which rebuilds the tree from it (`parse`), so nothing may be cut from it.
    What bounds a prompt is what `load` admits: the limits above.

    Raises:
        InvalidArgument, InvalidArgumentType: a bad pattern or limit.
    """

    #: The proposals it reads: code edits (an `agentdescent.LLMAgent` must be in
    #: ``proposal="edit"`` mode; the engines refuse another).
    proposal_mode = "edit"

    def __init__(self, include: Iterable[str] | str = DEFAULT_INCLUDE, exclude: Iterable[str] | str = DEFAULT_EXCLUDE,
                 max_file_bytes: int = 200_000, *, max_files: int = 200, max_total_bytes: int = 1_000_000) -> None:
        self.include = _check_patterns(include, "include")
        self.exclude = _check_patterns(exclude, "exclude")
        if not self.include:
            raise InvalidArgument("FileTree(include=[]): give at least one pattern, such as '*.py'")
        self.max_file_bytes = check_int(max_file_bytes, "max_file_bytes", low=1, owner="FileTree")
        self.max_files = check_int(max_files, "max_files", low=1, owner="FileTree")
        self.max_total_bytes = check_int(max_total_bytes, "max_total_bytes", low=1, owner="FileTree")
        self._include = [_glob_regex(p) for p in self.include]
        self._exclude = [_glob_regex(p) for p in self.exclude]
        self._lock = threading.Lock()
        self._refused: dict[str, int] = {}

    # ----------------------------------------------------------------- which files

    def matches(self, path: str) -> bool:
        """Is the relative POSIX ``path`` part of the artifact (included, not excluded)?"""
        return any(r.match(path) for r in self._include) and not any(r.match(path) for r in self._exclude)

    def scan(self, directory: str | os.PathLike[str]) -> tuple[dict[str, str], dict[str, str]]:
        """The artifact state of ``directory`` and the matching files left out, with why.

        Files are read as UTF-8 with their newlines as they are. Symlinks, files over
        ``max_file_bytes``, files that are not UTF-8 text and the folders in
        ``SKIPPED_DIRS`` (``.git``, ``__pycache__``, virtual environments...) are left out.

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
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not os.path.islink(os.path.join(folder, d)))
            for name in sorted(files):
                full = Path(folder, name)
                rel = full.relative_to(root).as_posix()
                if not self.matches(rel):
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

        Other files in ``directory`` are left as they are. A path that is absolute, climbs
        out with ``..``, or would be written through a symlink out of ``directory`` is refused
        before anything is written.

        Raises:
            InvalidArgument: such a path.
        """
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        real_root = root.resolve()
        targets = []
        contents: dict[str, str] = {}
        for rel in sorted(state):
            clean = self.clean_path(rel)
            contents[clean] = state[rel]
            target = root / clean
            parent = target.parent.resolve()
            if parent != real_root and real_root not in parent.parents:
                raise InvalidArgument(f"FileTree.materialize: {rel!r} would be written outside {str(root)!r}")
            if target.is_symlink():
                raise InvalidArgument(f"FileTree.materialize: {rel!r} is a symlink in {str(root)!r}; not written")
            targets.append((clean, target))
        for clean, target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "w", encoding="utf-8", newline="") as handle:
                handle.write(contents[clean])
        return [c for c, _ in targets]

    @staticmethod
    def clean_path(path: str) -> str:
        """``path`` as a relative POSIX path inside the tree (``./`` dropped).

        Raises:
            EditRefused: the path is empty, absolute, climbs out with ``..``, or holds a
                backslash, a NUL or a line break (``reason="outside"``).
        """
        text = path.strip()
        while text.startswith("./"):
            text = text[2:]
        bad = (not text or text.startswith("/") or "\\" in text or "\0" in text or "\n" in text
               or re.match(r"^[A-Za-z]:", text) is not None)
        parts = PurePosixPath(text).parts if not bad else ()
        if bad or any(p in ("..", "") for p in parts):
            raise EditRefused(f"the path {path!r} is not a relative path inside the tree; give it as the tree "
                              "lists it, such as 'src/module.py'", path=path, reason="outside")
        return PurePosixPath(*parts).as_posix()

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

        Every block must apply (`agentdescent.textedits.apply_edits`: each search found
        exactly once, in order) to a path the tree may hold (`matches`); a new file is
        created by an empty search part or a whole-file replacement. Anything else refuses
        the whole reply, counted in `refused`.

        Raises:
            EditRefused: the reply holds no edit, a malformed block, a path outside the
                tree or excluded from it, an edit that does not apply, or a file over
                ``max_file_bytes``.
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
        ops: dict[str, str | None] = {}
        edits: dict[str, tuple[tuple[str, str], ...]] = {}
        for change in parse_edits(proposal):
            path = self.clean_path(change.path)
            if path not in state and not self.matches(path):
                raise EditRefused(
                    f"the edit of {path!r} is refused: that path is not part of the artifact (include="
                    f"{list(self.include)}, exclude={list(self.exclude)}); edit only the files the tree lists",
                    path=path, reason="excluded")
            current = state.get(path)
            if change.content is not None:
                new = change.content
            else:
                new = apply_edits(current if current is not None else "", change.edits, path=path)
            if len(new.encode("utf-8")) > self.max_file_bytes:
                raise EditRefused(f"the edit makes {path!r} {len(new.encode('utf-8'))} bytes, over "
                                  f"max_file_bytes={self.max_file_bytes}", path=path, reason="too_big")
            if new == current:
                continue
            ops[path] = new
            if change.content is None and current is not None:
                edits[path] = tuple(change.edits)
        if not ops:
            return None
        payload = sorted((k, v) for k, v in ops.items())
        diff_id = f"d{stable_hash(target, author, base_version, payload):016x}"
        return Diff(diff_id, target, ops, author=author, edits=edits)

    def refused(self) -> dict[str, int]:
        """Replies refused so far, by `agentdescent.errors.EditRefused` reason."""
        with self._lock:
            return dict(self._refused)

    def __repr__(self) -> str:
        return (f"FileTree(include={list(self.include)!r}, exclude={list(self.exclude)!r}, "
                f"max_file_bytes={self.max_file_bytes})")

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _language(path: str) -> str:
    return {".py": "python", ".js": "javascript", ".ts": "typescript", ".md": "markdown", ".toml": "toml",
            ".json": "json", ".sh": "bash", ".yaml": "yaml", ".yml": "yaml", ".txt": "text"}.get(
        PurePosixPath(path).suffix, "")
