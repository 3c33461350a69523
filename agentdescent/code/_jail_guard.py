"""The sandbox's Python guard, installed as ``sitecustomize`` where there is no Landlock: best-effort.

The launcher (`agentdescent/code/_jail.py`, ``install_guard``) copies this file as
``sitecustomize.py`` into a folder of the run's root and puts that folder first on
``PYTHONPATH``; every Python the command starts (unless with -I or -S) then imports it
first. It installs an audit hook refusing writes outside the root, reads of other
processes' /proc entries and, with the network off, connects to anything but a Unix
socket; then it runs the ``sitecustomize`` it shadows. It reads its settings from two
variables the launcher sets (children inherit them).

Imported under any other name (by the package, or a linter) it does nothing: it must
never install its hook in the engine's own process.
"""

import os
import socket
import sys

_ROOT = os.path.realpath(os.environ.get("AGENTDESCENT_SANDBOX_ROOT", "/nonexistent"))
_NETWORK = os.environ.get("AGENTDESCENT_SANDBOX_NETWORK", "") == "1"
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_busy = []


def _resolve(path, dir_fd=None):
    if isinstance(path, int):
        return None  # an open descriptor: checked when it was opened
    path = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(path):
        try:
            folder = os.readlink(f"/proc/self/fd/{dir_fd}")
        except OSError:
            import fcntl
            folder = fcntl.fcntl(dir_fd, getattr(fcntl, "F_GETPATH", 50), bytes(1024)).rstrip(b"\0").decode()
        path = os.path.join(folder, path)
    return os.path.realpath(path)


def _check_write(path, dir_fd=None):
    full = _resolve(path, dir_fd)
    if full is None or full in _DEVICES or full == _ROOT or full.startswith(_ROOT + os.sep):
        return
    raise PermissionError(f"agentdescent sandbox: writing outside the sandbox is refused: {full}")


def _check_read(path):
    if isinstance(path, int):
        return
    for full in (os.path.normpath(os.path.abspath(os.fsdecode(path))), _resolve(path)):
        parts = full.split(os.sep)
        if len(parts) > 2 and parts[1] == "proc" and parts[2].isdigit() and int(parts[2]) != os.getpid():
            raise PermissionError(f"agentdescent sandbox: reading another process's /proc entry is refused: {full}")


_PATH_EVENTS = {"os.remove": (0, 1), "os.rmdir": (0, 1), "os.mkdir": (0, 2), "os.chmod": (0, 2),
                "os.chown": (0, 3), "os.utime": (0, 4), "os.truncate": (0, None),
                "os.symlink": (1, 2), "os.link": (1, 3), "os.rename": (0, 2)}


def _hook(event, args):
    if _busy:
        return
    _busy.append(1)
    try:
        if event == "open":
            path, mode, flags = args
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writing:
                _check_write(path)
            else:
                _check_read(path)
        elif event in _PATH_EVENTS:
            at, fd_at = _PATH_EVENTS[event]
            dir_fd = args[fd_at] if fd_at is not None and len(args) > fd_at else None
            _check_write(args[at], dir_fd if isinstance(dir_fd, int) else None)
            if event == "os.rename":
                _check_write(args[1], args[3] if isinstance(args[3], int) else None)
        elif event in ("socket.connect", "socket.sendto") and not _NETWORK:
            sock, address = args[0], args[-1]
            if sock.family != getattr(socket, "AF_UNIX", None):
                raise PermissionError(f"agentdescent sandbox: network=False refuses connecting to {address!r}")
    finally:
        _busy.pop()




def _chain():
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":  # only as the installed copy, never in the engine
    sys.addaudithook(_hook)
    _chain()
