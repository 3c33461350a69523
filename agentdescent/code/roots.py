"""A sandbox run's root on disk: its name, its hand-over to the command, its removal, its control groups.

This module owns what outlives a run if nothing is done about it: the temporary root
(named after its owner, ``agentdescent-sandbox-<pid>-<start>-...``, so that the next
process can tell a dead owner's root from a live one's and sweep it, `_sweep_once`), the
control groups a run was limited by (`_remove_groups`), and a removal that holds against
whatever the command left (`_remove_tree`: any depth, no link followed, never raising).
It also readies a root for an unprivileged command (`_hand_over`) and reads what comes
back out of it: the output files, cut (`_clip_file`), and the read-back files, opened
without following any link the command planted (`_read_back`).

It must not remove anything not named like a sandbox root, nor anything whose owner is
alive, and must never follow a link out of a root.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading
import time
from typing import Any, BinaryIO

from ..processes import process_alive
from ..types import clip_middle
from .probe import _Platform
from .view import _inside

__all__: list[str] = []

_PREFIX = "agentdescent-sandbox-"
_PROJECT_PREFIX = "agentdescent-project-"  # a reward's copy of its project (`agentdescent.code.project`)
_READ_BACK_BYTES = 5 * 1024 * 1024
_EXACT_OUTPUT_BYTES = 8 * 1024 * 1024

def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _start_time(pid: int) -> str:
    """A process's start time (clock ticks since boot, from /proc), or "0" where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def _owner_prefix(prefix: str = _PREFIX) -> str:
    """The name a root starts with: ``prefix``, then its owner's process id and start time."""
    return f"{prefix}{os.getpid()}-{_start_time(os.getpid())}-"


def _owner_alive(name: str, prefix: str = _PREFIX) -> bool:
    """Is the process that made the root or group ``name`` still running? (Unknown names: yes.)"""
    parts = name[len(prefix):].split("-")
    if len(parts) < 3 or not parts[0].isdigit():
        return True  # not named by this version: not ours to judge
    pid, started = int(parts[0]), parts[1]
    if not process_alive(pid):
        return False
    now = _start_time(pid)
    return "0" in (started, now) or started == now  # a reused pid starts at another time


_swept = threading.Event()


def _sweep_once(here: _Platform) -> None:
    """Once per process: remove the roots, project copies and control groups whose owner is dead.

    A driver killed with SIGKILL takes its commands along (parent-death signal, PID
    namespace) but cannot remove their roots, nor its rewards' copies of their projects;
    the next process to run a sandbox does.
    """
    if _swept.is_set():
        return
    _swept.set()
    temporary = tempfile.gettempdir()
    places = [(temporary, _PREFIX, False), (temporary, _PROJECT_PREFIX, False)]
    places += [(os.path.join(base, "agentdescent"), _PREFIX, True) for base in here.cgroup]
    for folder, prefix, group in places:
        try:
            names = [n for n in os.listdir(folder) if n.startswith(prefix)]
        except OSError:
            continue
        for name in names:
            if not _owner_alive(name, prefix):
                path = os.path.join(folder, name)
                if group:
                    with contextlib.suppress(OSError):
                        os.rmdir(path)
                else:
                    _remove_tree(path)


def _remove_groups(groups: list[str], grace: float) -> None:
    """Remove a run's control groups, waiting up to ``grace`` for its last processes to be gone."""
    deadline = time.monotonic() + max(grace, 0.5)
    for group in groups:
        while True:
            try:
                os.rmdir(group)
                break
            except FileNotFoundError:
                break
            except OSError:  # still busy with a dying process
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)


def _remove_tree(path: str) -> None:
    """Remove a folder and everything in it, at any depth, following no link, never raising.

    No recursion (a command may leave folders nested thousands deep): folders are walked
    with a stack of descriptors, and a folder deeper than 64 is first moved up to the top,
    so neither the stack nor the open descriptors grow with the depth. Folders the command
    made unreadable are given back their owner's rights first.
    """
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return
    stack: list[tuple[int, str]] = [(top, "")]  # (descriptor, its name in the folder above)
    moved = 0
    try:
        while stack:
            fd, _ = stack[-1]
            descend = None
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            descend = descend or entry.name
                        else:
                            with contextlib.suppress(OSError):
                                os.unlink(entry.name, dir_fd=fd)
            except OSError:
                pass
            if descend is not None and len(stack) > 64:  # move it up: the depth never grows
                moved += 1
                try:
                    os.rename(descend, f".deep-{moved}", src_dir_fd=fd, dst_dir_fd=top)
                    continue
                except OSError:
                    pass
            if descend is not None:
                with contextlib.suppress(OSError):
                    os.chmod(descend, stat.S_IRWXU, dir_fd=fd, follow_symlinks=False)
                try:
                    stack.append((os.open(descend, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd), descend))
                    continue
                except OSError:
                    with contextlib.suppress(OSError):
                        os.rmdir(descend, dir_fd=fd)
                    with contextlib.suppress(OSError):
                        os.unlink(descend, dir_fd=fd)
                    if os.path.lexists(f"/proc/self/fd/{fd}/{descend}"):
                        break  # cannot be removed: give up rather than loop
                    continue
            done, name = stack.pop()
            os.close(done)
            if stack:
                with contextlib.suppress(OSError):
                    os.rmdir(name, dir_fd=stack[-1][0])
    finally:
        for fd, _ in stack:
            with contextlib.suppress(OSError):
                os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _placeholders(work: str, wanted: Any, owner: tuple[int, int] | None) -> dict[str, int]:
    """Make an empty file for each read-back path the run was not given; return them (path -> mtime_ns).

    Where the command may change nothing it was given, these are the only files of
    ``work/`` it may write: each is made now (its folders root's), given to ``owner`` (the
    unprivileged user; None: left the engine's user's, for a read-only mount to open up).
    One still empty and untouched after the run was never written, and reads back as missing.
    """
    made: dict[str, int] = {}
    real_work = os.path.realpath(work)
    for rel in wanted:
        path = os.path.join(work, rel)
        if os.path.lexists(path) or not _inside(os.path.realpath(path), real_work):
            continue  # given (the command may not change it), or through a link out of the tree
        try:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError:
            continue
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            made[path] = os.fstat(fd).st_mtime_ns
        finally:
            os.close(fd)
    return made


def _hand_over(root: str, work: str) -> None:
    """Ready a root for an unprivileged command: the root passable, ``work/`` root's and read-only to it.

    Every folder of ``work/`` gets mode 755 and every file is root's and readable (755 if
    it was executable, else 644), so the command can read what it was given and change,
    add, rename or remove nothing there; its read-back files (`_placeholders`) are its own.
    """
    os.chmod(root, 0o711)
    for folder, _, files in os.walk(work):
        os.chmod(folder, 0o755)
        for name in files:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                mode = os.lstat(path).st_mode
                if stat.S_ISREG(mode):
                    os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)


# --------------------------------------------------------------------------- what comes back out


def _clip_file(handle: BinaryIO, limit: int) -> str:
    """A command's output file, decoded with errors replaced and cut to ``limit`` characters.

    Past 8 MB only the two ends are read and decoded; the marker then counts bytes.
    """
    try:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(0)
        if size <= _EXACT_OUTPUT_BYTES:
            return clip_middle(handle.read().decode("utf-8", errors="replace"), limit)
        head = handle.read(4 * limit).decode("utf-8", errors="replace")[: limit // 2]
        handle.seek(size - 4 * limit)
        tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    tail = tail[len(tail) - (limit - limit // 2):]
    cut = size - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}\n[... about {cut} bytes cut ...]\n{tail}"


def _read_back(work: str, wanted: dict[str, str], untouched: dict[str, int] | None = None) -> dict[str, str]:
    """The wanted files (as asked -> normalised) that are regular files inside ``work``.

    Each is opened one component at a time, following no link: the engine, unconfined,
    must never read a file of the command's choosing (a key file, the engine's own /proc
    entry) on its behalf, even if a straggler swaps a folder for a link meanwhile. A
    placeholder of `_placeholders` (``untouched``: path -> its mtime) still empty and
    unmodified was never written: it is missing.
    """
    found = {}
    untouched = untouched or {}
    for asked, rel in wanted.items():
        fd = None
        try:
            fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            *folders, name = rel.split("/")
            for folder in folders:
                fd, parent = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd), fd
                os.close(parent)
            fd, parent = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd), fd
            os.close(parent)
            info = os.fstat(fd)
            made = untouched.get(os.path.join(work, rel))
            if made is not None and info.st_size == 0 and info.st_mtime_ns == made:
                continue  # a placeholder the command never wrote
            if stat.S_ISREG(info.st_mode):
                with os.fdopen(fd, "rb") as handle:
                    fd = None
                    found[asked] = handle.read(_READ_BACK_BYTES).decode("utf-8", errors="replace")
        except OSError:
            pass  # missing, a link, or not a file
        finally:
            if fd is not None:
                os.close(fd)
    return found
