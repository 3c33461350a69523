"""What a sandboxed command sees of the filesystem: the folders hidden from it, and those kept in view.

In a run's own mount namespace (`agentdescent/code/_jail.py` sets it up), the folders of
`_hidden_folders` (shared scratch, runtime sockets, the homes, the engine's temporary
folder) are covered by empty tmpfs, and `_kept_folders` (the interpreter, its packages,
the ``PATH`` and a version manager's root) are bound back, read-only.

It decides; it must not mount, and must never keep a folder that holds a hidden one
(that would undo the hiding).
"""

from __future__ import annotations

import os
import sys
import tempfile

__all__: list[str] = []


def _inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or below it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


_HOMES = ("/root", "/home")


def _hidden_folders() -> list[str]:
    """What a run's mount namespace covers with an empty tmpfs: shared scratch, sockets, homes."""
    found = ["/tmp", "/var/tmp", "/run", "/dev/mqueue", *_HOMES]
    for extra in (os.environ.get("HOME"), tempfile.gettempdir()):
        if extra and os.path.isabs(extra):
            real = os.path.realpath(extra)
            if real != "/" and not any(_inside(real, f) for f in found):
                found.append(real)
    return found


def _kept_folders(hidden: list[str]) -> list[str]:
    """What the command needs from under the hidden folders: the interpreter, its packages, PATH.

    A folder is kept only if it holds no hidden folder (keeping ``/root`` itself would
    undo the hiding); the launcher binds back only those under a hidden one.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    wanted = [os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable)),
              sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, here,
              *[p for p in sys.path if p and os.path.isabs(p)],
              *[p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p)]]
    for entry in list(wanted):
        managed = _version_manager(entry, hidden)
        if managed:
            wanted.append(managed)
    kept = []
    for path in wanted:
        for candidate in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
            if os.path.isdir(candidate) and not any(_inside(h, candidate) for h in hidden):
                kept.append(candidate)
    return list(dict.fromkeys(kept))


def _version_manager(path: str, hidden: list[str]) -> str | None:
    """The root of the version manager (pyenv, rbenv...) whose ``shims`` folder ``path`` is, if any.

    A shim is a script that runs the manager from its root (``libexec/``), so the shim's
    folder alone is not enough: the manager's root is kept whole (it holds installations,
    not secrets).
    """
    if os.path.basename(path.rstrip("/")) != "shims":
        return None
    folder = os.path.dirname(os.path.abspath(path))
    while folder not in ("/", "") and not any(folder == h for h in hidden):
        if os.path.isdir(os.path.join(folder, "libexec")):
            return folder
        folder = os.path.dirname(folder)
    return None
