"""The sandbox launcher's primitives: the C library, the refusal, and the constants of its system calls.

Shared by the launcher (`agentdescent/code/_jail.py`) and its namespaces
(`agentdescent/code/_jail_ns.py`). Like them it runs outside the package, by path, in a
fresh interpreter: it must not import anything from agentdescent and must not start threads.
"""

from __future__ import annotations

import ctypes
import os

_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x40000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
_MS_NOATIME, _MS_NODIRATIME, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x400, 0x800, 0x1000, 0x4000, 0x40000
_MS_RELATIME, _MS_STRICTATIME = 1 << 21, 1 << 24
# A mount's flags as /proc/self/mountinfo spells them: a read-only remount must keep them
# (inside a user namespace the locked ones may not be dropped).
_KEPT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": _MS_NOATIME,
               "nodiratime": _MS_NODIRATIME, "relatime": _MS_RELATIME, "strictatime": _MS_STRICTATIME}


class Refused(Exception):
    """A step the config asks for failed: the command must not run."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _fail(what: str) -> Refused:
    err = ctypes.get_errno()
    return Refused(f"{what}: {os.strerror(err)} (errno {err})")


def _unshare(libc: ctypes.CDLL, flags: int) -> bool:
    return libc.unshare(ctypes.c_int(flags)) == 0


def _loopback_up() -> None:
    import fcntl  # only here: the probe also runs where fcntl's ioctls mean nothing
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            reply = fcntl.ioctl(sock, siocgifflags, struct.pack("16sh22x", b"lo", 0))
            flags = struct.unpack("16sh", reply[:18])[1]
            fcntl.ioctl(sock, siocsifflags, struct.pack("16sh22x", b"lo", flags | iff_up))
    except OSError:
        pass  # without loopback the command just cannot talk to itself over TCP
