"""Where an edit may write: the rules every path a proposal names must pass, in one place.

This module owns the path rules of `agentdescent.code.FileTree` (which calls them from
``clean_path``, ``check_path``, ``to_diff``, ``refusals`` and ``scan``): the form of a path
(`clean_path`: relative, no ``..``, no control character, not too long), the names no edit
may write whatever the state (hidden and ignored parts, the test runner's modules and
configuration, the interpreter's startup files), and the rules that look at the state, the
reply and the project's folder: a path through a file or over a folder (`check_structure`),
through a symlink of the project or onto a file of it the tree does not track
(`check_base`), and a new module that would shadow a standard-library or installed one
(`check_shadowing`). Every refusal is an `agentdescent.errors.EditRefused` with its own
``reason``, naming the path and what to do instead.

It must not write anything; it reads the project's folder only with ``lstat`` and
``listdir``, never a file's content.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import logging
import os
import stat
import sys
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from ..errors import EditRefused

__all__ = ["IGNORED_DIRS", "IGNORED_SUFFIXES", "MAX_NAME_BYTES", "MAX_PATH_CHARS", "RUNNER_CONFIG", "RUNNER_FILES",
           "RUNNER_NAMES", "SKIPPED_DIRS", "check_base", "check_shadowing", "check_structure", "clean_path",
           "is_test_module", "shadowed_modules"]

logger = logging.getLogger("agentdescent.code.paths")

#: Folders never read as part of a tree, and never copied with a project.
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                          ".tox", ".venv", "venv", "node_modules", ".agentdescent"})

#: Folder names no edit path may pass through (as every hidden name, starting with '.'):
#: caches, virtual environments, installed packages. ``build`` and ``dist`` are not among
#: them: honest packages have modules of those names (``mytool/build.py``), and nothing
#: imports a build output by itself.
IGNORED_DIRS = SKIPPED_DIRS | {"site-packages", "dist-packages", "__pypackages__"}

#: Name endings no edit path may have in any part: package metadata (read for entry
#: points, so for pytest plugins) and compiled modules (never source).
IGNORED_SUFFIXES = (".egg-info", ".dist-info", ".egg-link", ".egg", ".pyc", ".pyo", ".so", ".pyd")

#: Modules no edit may create, as a file or a folder, at any depth: the test runner's.
RUNNER_NAMES = frozenset({"pytest", "_pytest", "pluggy"})

#: Module files no edit may create at any depth: ``py`` (pytest's), the interpreter's
#: startup hooks, and pytest's per-folder configuration.
RUNNER_FILES = frozenset({"py", "sitecustomize", "usercustomize", "conftest"})

#: Files no edit may write at the top of the tree: they configure the test runner.
RUNNER_CONFIG = frozenset({"pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})

#: File endings a Python import reads (the stem of such a file is a module name).
MODULE_SUFFIXES = (".py", ".pyw", ".pyc", ".pyo", ".so", ".pyd")

#: The longest part of a path (bytes, UTF-8) and the longest path (characters) an edit may name.
MAX_NAME_BYTES = 255
MAX_PATH_CHARS = 1024


def _is_test_name(name: str) -> bool:
    """Does the file name look like a test module (``test_*.py``, ``*_test.py``)?"""
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def is_test_module(path: str) -> bool:
    """Is ``path`` named like a test module (``test_*.py``, ``*_test.py``), as pytest collects them?"""
    return _is_test_name(path.rsplit("/", 1)[-1])


def _module_name(part: str, last: bool) -> str | None:
    """The module a path part would be imported as: a folder's name, a module file's stem; None for another file."""
    if not last:
        return part
    if part.endswith(MODULE_SUFFIXES):
        return part.split(".", 1)[0]
    return None


@functools.lru_cache(maxsize=1)
def shadowed_modules() -> frozenset[str]:
    """Names a new top-level module may not take: the standard library's, the installed distributions', the runner's.

    The installed ones are `importlib.metadata.packages_distributions` of this
    interpreter (the one the sandbox runs), read once per process.
    """
    try:
        installed = set(importlib.metadata.packages_distributions())
    except Exception as exc:  # broken metadata must not refuse every edit; it is said
        logger.warning("the installed distributions cannot be listed (%s); new top-level modules are checked "
                       "against the standard library's names only", exc)
        installed = set()
    return frozenset(sys.stdlib_module_names) | installed | RUNNER_NAMES | RUNNER_FILES


def _refused(path: str, reason: str, why: str) -> EditRefused:
    return EditRefused(f"the edit of {path!r} is refused: {why}", path=path, reason=reason)


def _name_rules(path: str) -> None:
    """The rules a clean ``path`` must pass whatever the state: length, hidden and ignored parts, the runner's names.

    Raises:
        EditRefused: ``too_long``, ``hidden``, ``ignored`` or ``shadowing``.
    """
    if len(path) > MAX_PATH_CHARS:
        raise _refused(path[:80] + "...", "too_long", f"the path is {len(path)} characters, over {MAX_PATH_CHARS}; "
                       "give the file a shorter path")
    parts = path.split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if len(part.encode("utf-8")) > MAX_NAME_BYTES:
            raise _refused(path[:80] + "...", "too_long", f"a part of the path is {len(part.encode('utf-8'))} bytes, "
                           f"over {MAX_NAME_BYTES} (no file system takes it); give the file a shorter name")
        if part.startswith("."):
            raise _refused(path, "hidden", f"{part!r} is a hidden name (it starts with '.'), and the tree never holds "
                           "hidden files or folders; put the code in a module the tree lists")
        low = part.casefold()
        if low in IGNORED_DIRS or low.endswith(IGNORED_SUFFIXES):
            raise _refused(path, "ignored", f"{part!r} is a cache, a virtual environment, installed packages, package "
                           "metadata or a compiled file, none of which the tree holds; edit the project's own source")
        name = _module_name(low, last)
        if name in RUNNER_NAMES:
            raise _refused(path, "shadowing", f"{part!r} would shadow the test runner's module {name!r}; give the "
                           "module another name")
        if last and name in RUNNER_FILES:
            what = ("pytest's configuration of the tests around it" if name == "conftest" else
                    "run by the interpreter at every start" if name.endswith("customize") else "pytest's own module")
            raise _refused(path, "shadowing", f"a {name!r} module is {what}, which a candidate may not write; put "
                           "the code in a module of another name")
        if last and low.endswith(".pth"):
            raise _refused(path, "shadowing", "a .pth file is run by the interpreter at every start; a candidate may "
                           "not write one")
        if last and i == 0 and low in RUNNER_CONFIG:
            raise _refused(path, "shadowing", f"{part!r} configures the test runner, which a candidate may not "
                           "change; edit the project's source")


def check_base(path: str, tracked: Iterable[str], base: Path) -> None:
    """Refuse ``path`` if, in the project's folder ``base``, it passes through a symlink or a file, or names a folder
    or a file the tree does not track (``tracked``: the state's paths).

    Raises:
        EditRefused: ``symlink``, ``through_file``, ``names_folder``, ``untracked``, or
            ``unchecked`` (the folder cannot be looked at there).
    """
    parts = path.split("/")
    here = base
    for i, part in enumerate(parts):
        here = here / part
        try:
            mode = os.lstat(here).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return  # nothing of the project is there: a new place
        except OSError as exc:
            raise _refused(path, "unchecked", f"the project's folder cannot be looked at there ({exc.strerror or exc}); "
                           "edit a file the tree lists") from None
        shown = "/".join(parts[:i + 1])
        if stat.S_ISLNK(mode):
            raise _refused(path, "symlink", f"{shown!r} is a symlink in the project's folder, which the tree never "
                           "writes through; edit the files the tree lists")
        if i < len(parts) - 1 and not stat.S_ISDIR(mode):
            raise _refused(path, "through_file", f"{shown!r} is a file of the project, so nothing can be inside it; "
                           "put the new file in a folder, or beside it")
        if i == len(parts) - 1:
            if stat.S_ISDIR(mode):
                raise _refused(path, "names_folder", f"{shown!r} is a folder of the project; a file cannot replace "
                               "it: give the file another name")
            if path not in tracked:
                raise _refused(path, "untracked", "that file is in the project but not part of the tree (a test, a "
                               "file too big, not text, or not included); edit only the files the tree lists")


def _siblings(folder: str, paths: Iterable[str], base: Path | None) -> set[str]:
    """The names directly in ``folder`` ('' for the top) among ``paths`` and in ``base``."""
    prefix = f"{folder}/" if folder else ""
    names = {p[len(prefix):].split("/", 1)[0] for p in paths if p.startswith(prefix)}
    if base is not None:
        with contextlib.suppress(OSError):  # no such folder there: nothing of the project's
            names.update(os.listdir(base / folder if folder else base))
    return names


def _sibling_module(name: str) -> str | None:
    """The module a name in a folder is: a module file's stem, a name without a dot (a folder); else None."""
    if name.endswith(MODULE_SUFFIXES):
        return name.split(".", 1)[0]
    return name if "." not in name else None


def check_shadowing(path: str, tracked: Iterable[str], known: Iterable[str], base: Path | None) -> None:
    """Refuse a new ``path`` that makes a module named like a standard-library or installed one where it is imported
    under that name: at the top, in ``src/``, or in a folder of tests that is not a package.

    ``tracked`` are the state's paths (a module of the project's own may keep its name),
    ``known`` those and the reply's (a folder the reply makes a package is one).

    Raises:
        EditRefused: ``shadowing``.
    """
    parts = path.split("/")
    shadowed = shadowed_modules()
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        name = _module_name(part, last)
        if name is None or name not in shadowed:
            continue
        folder = "/".join(parts[:i])
        if any(_sibling_module(n) == name for n in _siblings(folder, tracked, None)):
            continue  # the project's own module of that name (the tree tracks it)
        everything = _siblings(folder, known, base)
        on_path = not folder or ("__init__.py" not in everything
                                 and (folder == "src" or any(_is_test_name(n) for n in everything)))
        if on_path:
            where = "at the top of the tree" if not folder else f"in {folder + '/'!r} (a folder on sys.path)"
            raise _refused(path, "shadowing", f"a new module {name!r} {where} would shadow the standard library's or "
                           f"an installed {name!r}; give the module another name, or put it inside a package")



def clean_path(path: str) -> str:
    """``path`` as a relative POSIX path inside the tree (``./`` and empty parts dropped), if its name may be written.

    The rules that hold whatever the state (`agentdescent.code.FileTree.check_path` has
    the rest).

    Raises:
        EditRefused: the path is empty, absolute, climbs out with ``..``, or holds a
            backslash or a drive (``outside``); holds a control character, NUL or line
            break (``control``); is too long (``too_long``); has a hidden part
            (``hidden``), an ignored one (``ignored``), or one of the runner's or the
            interpreter's startup names (``shadowing``).
    """
    if not isinstance(path, str):
        raise EditRefused(f"a path must be a str, got {type(path).__name__}", reason="outside")
    text = path.strip()
    bad = next((c for c in text if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")
                or (c.isspace() and c != " ")), None)
    if bad is not None:
        raise EditRefused(f"the path {path[:120]!r} holds the control character {bad!r}; give a plain relative "
                          "path such as 'src/module.py'", path=path, reason="control")
    while text.startswith("./"):
        text = text[2:]
    bad_form = not text or text.startswith("/") or "\\" in text or (len(text) > 1 and text[1] == ":"
                                                                    and text[0].isascii() and text[0].isalpha())
    parts = [p for p in text.split("/") if p not in ("", ".")] if not bad_form else []
    if bad_form or not parts or ".." in parts:
        raise EditRefused(f"the path {path[:120]!r} is not a relative path inside the tree; give it as the tree "
                          "lists it, such as 'src/module.py'", path=path, reason="outside")
    out = "/".join(parts)
    _name_rules(out)
    return out


def check_structure(path: str, known: Iterable[str]) -> None:
    """Refuse ``path`` if it lies inside another file of ``known`` (the state and the reply's paths) or names a
    folder of theirs.

    Raises:
        EditRefused: ``through_file`` or ``names_folder``.
    """
    known = known if isinstance(known, (set, frozenset)) else set(known)
    parts = path.split("/")
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i])
        if prefix in known:
            raise _refused(path, "through_file", f"{prefix!r} is a file, so nothing can be inside it; put the "
                           "new file in a folder, or beside it")
    below = path + "/"
    inside = next((k for k in known if k.startswith(below)), None)
    if inside is not None:
        raise _refused(path, "names_folder", f"{path!r} is a folder (it holds {inside!r}); a file cannot replace "
                       "it: give the file another name")

