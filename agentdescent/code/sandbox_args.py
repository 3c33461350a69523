"""What a sandbox is given, checked: the extra environment (no secrets), the command, the tree, the paths.

This module owns the argument checks of `agentdescent.code.sandbox.Sandbox` and
``Sandbox.run``: an ``env`` mapping of variable names to str that holds nothing that looks
like a secret (a name with KEY, TOKEN, SECRET or PASSWORD, a value starting ``sk-``) and
nothing that moves HOME or TMPDIR, a command as a non-empty list of str, tree and
``read_back`` paths that are relative POSIX paths staying below ``work/``, and a ``base``
that is a directory. Each error names the argument and the fix.

It must not run anything or write anything; it reads the file system only to see that
``base`` is a directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

from ..errors import InvalidArgument, InvalidArgumentType
from ..processes import FIXED_VARIABLES as _FIXED

__all__: list[str] = []

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise InvalidArgumentType(f"Sandbox(env={type(env).__name__}): use a mapping of names to str, or None")
    checked = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise InvalidArgument(f"Sandbox(env=...): {name!r} is not a variable name; use letters, "
                                  "digits and _ (not starting with a digit)")
        if not isinstance(value, str):
            raise InvalidArgumentType(f"Sandbox(env={{{name!r}: {type(value).__name__}}}): use a str value")
        if "\0" in value:
            raise InvalidArgument(f"Sandbox(env=...): the value of {name} holds a NUL character")
        if _SECRET_NAME.search(name) or value.startswith("sk-"):
            raise InvalidArgument(f"Sandbox(env=...): {name} looks like a secret (its name holds KEY, TOKEN, "
                                  "SECRET or PASSWORD, or its value starts with 'sk-'); sandboxed code must "
                                  "never see API keys, so leave it out (or rename the variable if it is no secret)")
        if name in _FIXED:
            raise InvalidArgument(f"Sandbox(env=...): {name} always points inside the sandbox; leave it out")
        checked[name] = value
    return checked


def _check_strings(values: Sequence[str], name: str) -> list[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) \
            or not all(isinstance(value, str) for value in values):
        raise InvalidArgumentType(f"Sandbox.run({name}={values!r:.200}): use a list of str")
    return list(values)


def _check_command(command: Sequence[str]) -> list[str]:
    argv = _check_strings(command, "command")
    if not argv or not argv[0]:
        raise InvalidArgument(f"Sandbox.run(command={command!r}): give the program and its arguments, "
                              "e.g. [sys.executable, '-m', 'pytest']")
    if any("\0" in arg for arg in argv):
        raise InvalidArgument("Sandbox.run(command=...): an argument holds a NUL character")
    return argv


def _check_relative(path: str, name: str) -> str:
    """``path`` if it is a relative POSIX path that stays below its folder."""
    parts = PurePosixPath(path).parts if path else ()
    if not parts or "\0" in path or path.startswith("/") or ".." in parts:
        raise InvalidArgument(f"Sandbox.run({name}=...): {path!r} is not a relative path inside the "
                              "work/ folder; use a path like 'src/app.py' (no leading /, no ..)")
    return str(PurePosixPath(path))


def _check_tree(tree: Mapping[str, str] | None) -> dict[str, str]:
    if tree is None:
        return {}
    if not isinstance(tree, Mapping):
        raise InvalidArgumentType(f"Sandbox.run(tree={type(tree).__name__}): use a mapping of relative "
                                  "path to text, or None")
    files = {}
    for path, text in tree.items():
        if not isinstance(path, str):
            raise InvalidArgumentType(f"Sandbox.run(tree=...): the path {path!r} must be a str")
        if not isinstance(text, str):
            raise InvalidArgumentType(f"Sandbox.run(tree=...): the content of {path!r} is a "
                                      f"{type(text).__name__}; use str")
        files[_check_relative(path, "tree")] = text
    return files


def _check_base(base: str | os.PathLike[str] | None) -> str | None:
    if base is None:
        return None
    if not isinstance(base, (str, os.PathLike)):
        raise InvalidArgumentType(f"Sandbox.run(base={base!r}): use a path (str or os.PathLike) or None")
    path = os.fspath(base)
    if not os.path.isdir(path):
        raise InvalidArgument(f"Sandbox.run(base={path!r}): not a directory; pass the folder to copy")
    return path
