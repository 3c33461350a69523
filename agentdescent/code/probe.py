"""What isolation this machine offers: the platform probe, run once per process in a throwaway launcher.

This module owns `_Platform` (the Landlock ABI, how a network namespace can be had, the
capability drop, a private /dev/shm, the resource limits that hold, a mount and PID
namespace of its own, the control groups a sandbox can limit itself with, the unprivileged
user a root engine's commands run as, the ``nobody`` user to drop to where none of that is had) and `_platform`, which finds it by running the
launcher ``agentdescent/code/_jail.py`` with ``--probe`` in a process of its own and caches
the answer for the process. `agentdescent.code.sandbox` reads it to say what holds
(`Sandbox.protections`), to refuse (``require_isolation=True``) and to configure a run.

It must not change the state of the engine's own process (the probe runs in a child
with nothing of the environment but ``PATH``), and must not run a command of a caller.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__: list[str] = []

_JAIL = str(Path(__file__).with_name("_jail.py"))


@dataclass(frozen=True)
class _Platform:
    """What isolation this machine offers, as the launcher's probe found it."""

    system: str
    posix: bool
    landlock_abi: int = 0
    net: str | None = None  # "netns" or "userns": how a network namespace can be had
    caps: bool = False  # running as root, and the capability bounding set can be emptied
    shm: bool = False  # a private /dev/shm (a mount namespace with its own tmpfs) can be had
    rlimits: tuple[str, ...] = ()
    nobody: tuple[int, int] | None = None  # uid, gid to drop to, when root and it can run Python
    ns: str | None = None  # "root" or "userns": a mount and PID namespace of its own can be had
    cgroup: tuple[str, ...] = ()  # control-group folders a sandbox can make its group under
    identity: tuple[int, int] | None = None  # uid, gid a root engine's commands run as (in the namespaces)
    seccomp: bool = False  # a seccomp filter refusing socket(AF_UNIX) can be had


@functools.cache
def _platform() -> _Platform:
    """Probe once per process, in a throwaway launcher process, which isolation works here."""
    system = sys.platform
    if os.name != "posix":
        return _Platform(system=system, posix=False)
    try:
        done = subprocess.run([sys.executable, "-I", _JAIL, "--probe"], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL, env={"PATH": os.defpath})
        found = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.SubprocessError):
        return _Platform(system=system, posix=True)
    abi = int(found.get("landlock_abi") or 0)
    return _Platform(system=str(found.get("system", system)), posix=True, landlock_abi=abi,
                     net=found.get("net"), caps=bool(found.get("caps")), shm=bool(found.get("shm")),
                     rlimits=tuple(found.get("rlimits", ())),
                     nobody=_nobody() if found.get("euid") == 0 and not abi and not found.get("ns") else None,
                     ns=found.get("ns"), cgroup=tuple(found.get("cgroup") or ()),
                     identity=_unprivileged() if found.get("euid") == 0 and found.get("ns") else None,
                     seccomp=bool(found.get("seccomp")))


def _unprivileged() -> tuple[int, int]:
    """The ids a root engine's commands drop to: the ``nobody`` user's, else 65534.

    In the sandbox's own mount namespace the interpreter is bound back where it can be
    reached, so unlike `_nobody` this needs no readable path to it on the host.
    """
    import pwd  # POSIX only; the module itself must import everywhere

    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


def _nobody() -> tuple[int, int] | None:
    """The ``nobody`` user's ids, if it exists and can run this interpreter."""
    import pwd  # POSIX only; the module itself must import everywhere

    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return None
    for path in {os.path.abspath(sys.executable), os.path.realpath(sys.executable)}:
        for part in (path, *map(str, Path(path).parents)):  # every folder on the way must let it through
            try:
                if not os.stat(part).st_mode & stat.S_IXOTH:
                    return None
            except OSError:
                return None
    return entry.pw_uid, entry.pw_gid
