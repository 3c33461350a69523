"""`ProjectCopy`: the part of a project every sandboxed run shares, copied once.

This module owns the one read of a user's project folder that the code rewards make: the
tree's files are loaded as the starting state (`agentdescent.code.FileTree.scan`) and
everything else (the tests, data, configuration) is copied once into a temporary folder,
which each sandboxed run then copies again with a state's files written over it. The
user's folder is never written. The copy is removed by `ProjectCopy.close`, or when the
object is collected; it is named after its owner process, so that if the owner is killed
the next process to run a sandbox sweeps it (`agentdescent.code.roots`).

The tree is told where its files are written over (``FileTree.base``, the copy), so an
edit that would pass through a symlink of the project, through one of its files, or over
one of its folders is refused when it is proposed, not when a sandbox writes it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from pathlib import Path

from ..errors import InvalidArgument
from .roots import _PROJECT_PREFIX, _owner_prefix, _remove_tree
from .tree import SKIPPED_DIRS, FileTree

__all__ = ["ProjectCopy"]


class ProjectCopy:
    """A project folder read once: its tree's starting state, and a copy of the rest.

    Args:
        directory: the project folder.
        tree: which of its files are the artifact.
        owner: the class asking, for messages.

    Attributes:
        directory: the project folder, resolved.
        initial: the tree's state as the folder holds it.
        skipped: files the tree matched but left out, with why (`FileTree.scan`).
        base: the copy without the tree's files (give it as ``Sandbox.run(base=...)``);
            also set as ``tree.base``, what the tree's edits are checked against (a tree
            given to a second project is checked against the later one's copy).

    Raises:
        InvalidArgument: ``directory`` is not a folder, or none of its files is in the tree.
    """

    def __init__(self, directory: str | os.PathLike[str], tree: FileTree, owner: str) -> None:
        self.directory = Path(directory).resolve()
        if not self.directory.is_dir():
            raise InvalidArgument(f"{owner}({str(directory)!r}): not a folder; give the project's folder")
        self.initial, self.skipped = tree.scan(self.directory)
        if not self.initial:
            raise InvalidArgument(
                f"{owner}({str(self.directory)!r}): no file of the folder matches the tree (include="
                f"{list(tree.include)}, exclude={list(tree.exclude)}); give tree=FileTree(include=...)")
        root = Path(tempfile.mkdtemp(prefix=_owner_prefix(_PROJECT_PREFIX)))  # swept if its owner dies
        self._finalizer = weakref.finalize(self, _remove_tree, str(root))
        evolving = set(self.initial)

        def ignore(folder: str, names: list[str]) -> set[str]:
            rel = Path(folder).relative_to(self.directory)
            return {n for n in names if n in SKIPPED_DIRS or (rel / n).as_posix() in evolving}

        self.base = root / "project"
        shutil.copytree(self.directory, self.base, symlinks=True, ignore=ignore)
        tree.base = self.base

    def close(self) -> None:
        """Remove the copy (also done when the object is collected)."""
        self._finalizer()

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state.pop("_finalizer", None)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._finalizer = weakref.finalize(self, lambda: None)  # the copy belongs to the original
