"""The sandbox's launcher: sets up isolation in a fresh process, then becomes the command.

`agentdescent.code.sandbox` starts this file as a plain script,
``python -I _jail.py CONFIG -- COMMAND...``, in a new session. A fresh interpreter has
no other threads, so it may change process-wide state (``unshare``, Landlock, user ids,
resource limits) that must never be touched in the engine's own process. It applies what
the JSON ``CONFIG`` asks for, in this order: a parent-death signal, the Python guard, a
control group, then either mount and PID namespaces (with the network's, as asked: its
sibling `_jail_ns` forks process 1 of the new PID namespace, which sets up the mounts and
forks the command) or the older route (a private /dev/shm, the network namespace); in
the process that becomes the command: dropping capabilities, becoming the unprivileged
user, Landlock, resource limits; then it ``exec``s the command. ``python -I _jail.py
--probe`` prints, as JSON, which of those steps work on this machine (the probe runs in
a throwaway process, since the steps cannot be undone).

It owns the system calls and nothing else: the decision of *what* to apply is the
parent's. It must not import anything from agentdescent but its siblings `_jail_sys`
and `_jail_ns` (it runs outside the package, by path), must not run the command when a
step the config asks for fails (it prints one line, ``agentdescent sandbox: ...``, to
stderr and exits 126), and must not start threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import stat
import sys

if __package__:  # imported as part of agentdescent.code (tests, docs)
    from . import _jail_ns as namespaces
    from . import _jail_sys as sysc
else:  # run by path as the launcher: its siblings sit beside it, ahead of anything else
    _HERE = os.path.dirname(os.path.realpath(__file__))
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    import _jail_ns as namespaces  # type: ignore[no-redef]
    import _jail_sys as sysc  # type: ignore[no-redef]

try:
    import resource
except ImportError:  # not POSIX: the parent refuses to run there
    resource = None  # type: ignore[assignment]

# Landlock's system calls: the same numbers on every architecture with the generic table
# (x86_64, aarch64, riscv64...), since they came after the numbering was unified.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4

# Filesystem rights, with the ABI that introduced each.
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_WRITES = {  # name: (bit, ABI)
    "WRITE_FILE": (1 << 1, 1), "REMOVE_DIR": (1 << 4, 1), "REMOVE_FILE": (1 << 5, 1),
    "MAKE_CHAR": (1 << 6, 1), "MAKE_DIR": (1 << 7, 1), "MAKE_REG": (1 << 8, 1),
    "MAKE_SOCK": (1 << 9, 1), "MAKE_FIFO": (1 << 10, 1), "MAKE_BLOCK": (1 << 11, 1),
    "MAKE_SYM": (1 << 12, 1), "REFER": (1 << 13, 2), "TRUNCATE": (1 << 14, 3),
    "IOCTL_DEV": (1 << 15, 5),
}
_TRUNCATE, _IOCTL_DEV = 1 << 14, 1 << 15
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty")
_UNREADABLE = ("proc", "sys")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


# --------------------------------------------------------------------------- Landlock


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers, 0 when there is none (or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = sysc._libc()
        abi = libc.syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                           ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(abi), 0)


def _handled(abi: int) -> int:
    """The filesystem rights a ruleset handles: every write-ish right the ABI knows, and reads."""
    rights = _READ_FILE | _READ_DIR
    for bit, since in _WRITES.values():
        if abi >= since:
            rights |= bit
    return rights


def _readable_paths(root: str, prefix: str) -> list[str]:
    """What the command may read: all of ``/`` but /proc, /sys and the other sandboxes.

    Landlock only grants, so the holes are made by granting the siblings of every folder
    on the way from ``/`` down to the sandbox root's parent, and, there, every entry but
    those named like a sandbox root (other runs' files stay unreadable).
    """
    parent = os.path.dirname(os.path.realpath(root))
    chain = ["/"]
    for part in [p for p in parent.split("/") if p]:
        chain.append(os.path.join(chain[-1], part))
    paths = []
    for depth, folder in enumerate(chain):
        below = chain[depth + 1] if depth + 1 < len(chain) else None
        try:
            entries = sorted(entry.name for entry in os.scandir(folder))
        except OSError:
            continue
        for name in entries:
            full = os.path.join(folder, name)
            if folder == "/" and name in _UNREADABLE:
                continue
            if full == below or (folder == parent and name.startswith(prefix)):
                continue
            real = os.path.realpath(full)
            if parent == real or parent.startswith(real.rstrip("/") + "/"):
                continue  # a link to a folder on the chain would grant all of it
            paths.append(full)
    return paths


def _add_rule(libc: ctypes.CDLL, ruleset: int, path: str, rights: int, *, must: bool) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        if must:
            raise sysc.Refused(f"Landlock: cannot open {path!r} for its rule: {exc.strerror}") from None
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # a file's rule may carry only file rights
            rights &= _FILE_RIGHTS
        attr = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        done = libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset),
                            ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0))
        if done != 0 and must:
            raise sysc._fail(f"Landlock refused the rule for {path!r}")
    finally:
        os.close(fd)


def apply_landlock(spec: dict) -> None:
    """Restrict this process (and everything it execs or forks) with one Landlock ruleset.

    Writes only under ``spec["root"]`` (and the harmless devices); reads everywhere but
    /proc (except this process's own entry), /sys and other sandboxes; with ``net``, no TCP
    bind or connect; with ABI 6 or later no signal or abstract Unix socket leaves the domain.
    """
    abi, root = int(spec["abi"]), spec["root"]
    libc = sysc._libc()
    handled = _handled(abi)
    attr = _RulesetAttr(handled_access_fs=handled)
    size = 8
    if spec.get("net"):
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = _SCOPE_SIGNAL | _SCOPE_ABSTRACT_UNIX_SOCKET
        size = 24
    elif abi >= 4:
        size = 16
    ruleset = libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise sysc._fail("Landlock refused the ruleset")
    try:
        _add_rule(libc, ruleset, root, handled, must=True)
        for path in spec.get("writable", ()):
            _add_rule(libc, ruleset, path, handled, must=True)
        for path in _readable_paths(root, spec["prefix"]):
            _add_rule(libc, ruleset, path, _READ_FILE | _READ_DIR, must=False)
        _add_rule(libc, ruleset, "/proc/self", _READ_FILE | _READ_DIR, must=False)
        for device in _DEVICES:
            if os.path.exists(device):
                _add_rule(libc, ruleset, device, _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0), must=False)
        if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
            raise sysc._fail("prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise sysc._fail("Landlock refused to restrict the process")
    finally:
        os.close(ruleset)


# --------------------------------------------------------------------------- the network


def isolate_network(how: str) -> None:
    """Move this process into a network namespace of its own (``how``: netns or userns).

    The new namespace has only a loopback interface, brought up (best-effort) so that the
    command can still talk to itself on 127.0.0.1.
    """
    namespaces.enter_namespaces(sysc._CLONE_NEWNET, userns=how != "netns")
    sysc._loopback_up()


def private_shm(size_mb: int) -> None:
    """Give the command a /dev/shm of its own: a fresh tmpfs in a mount namespace of its own.

    POSIX semaphores and shared memory (``multiprocessing``'s locks and queues) live there;
    a private one lets them work without a folder shared with other runs, and it vanishes
    with the command's last process. The root mount is made private first, so the new
    mount never propagates back to the engine's namespace.
    """
    libc = sysc._libc()
    if libc.unshare(ctypes.c_int(sysc._CLONE_NEWNS)) != 0:
        raise sysc._fail("unshare(CLONE_NEWNS) failed")
    if libc.mount(b"none", b"/", None, ctypes.c_ulong(sysc._MS_REC | sysc._MS_PRIVATE), None) != 0:
        raise sysc._fail("cannot make the mounts private")
    options = f"size={int(size_mb)}m,mode=1777".encode()
    if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", ctypes.c_ulong(sysc._MS_NOSUID | sysc._MS_NODEV), options) != 0:
        raise sysc._fail("cannot mount a private /dev/shm")


# --------------------------------------------------------------------------- users and limits


def drop_user(spec: dict) -> None:
    """Hand the sandbox root to ``spec["uid"]``/``spec["gid"]``, then become that user."""
    uid, gid, root = int(spec["uid"]), int(spec["gid"]), spec["root"]
    try:
        os.chown(root, uid, gid, follow_symlinks=False)
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                os.chown(os.path.join(folder, name), uid, gid, follow_symlinks=False)
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError as exc:
        raise sysc.Refused(f"cannot drop to user {uid}: {exc}") from None


def become(spec: dict) -> None:
    """Become ``spec["uid"]``/``spec["gid"]`` with no supplementary group (the root was prepared for it)."""
    uid, gid = int(spec["uid"]), int(spec["gid"])
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError as exc:
        raise sysc.Refused(f"cannot become user {uid}: {exc}") from None
    if os.getuid() != uid or os.geteuid() != uid:
        raise sysc.Refused(f"still running as user {os.geteuid()} after dropping to {uid}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Empty the capability bounding, inheritable and ambient sets: root's exec then gains none.

    A root process's capabilities after ``execve`` are (inheritable | bounding) plus ambient,
    so with all three empty the command runs as uid 0 with no capability at all (no
    reading other users' files, no ptrace, no module loading, no raising its limits).
    """
    libc = sysc._libc()
    header, data = _CapHeader(version=0x20080522, pid=0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise sysc._fail("capget failed")
    for half in data:
        half.inheritable = 0
    if libc.capset(ctypes.byref(header), data) != 0:
        raise sysc._fail("capset (clearing the inheritable set) failed")
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            last = int(handle.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        if libc.prctl(ctypes.c_int(_PR_CAPBSET_DROP), ctypes.c_ulong(cap), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0 and ctypes.get_errno() != 22:
            raise sysc._fail(f"prctl(PR_CAPBSET_DROP, {cap}) failed")
    libc.prctl(ctypes.c_int(_PR_CAP_AMBIENT), ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL),
               ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


# The architectures whose socket(2) number is known: (AUDIT_ARCH_..., the syscall number).
_SOCKET_SYSCALL = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198), "riscv64": (0xC00000F3, 198)}


def refuse_unix_sockets() -> None:
    """A seccomp filter: ``socket(AF_UNIX, ...)`` fails with EACCES; everything else is allowed.

    Named Unix sockets are the one way out of a network namespace (a socket file on a
    shared disk, such as a database's or a container engine's). Pairs made by
    ``socketpair`` (asyncio, multiprocessing pipes) still work: only a socket that could
    connect to a name is refused. A system call of another architecture (a 32-bit program)
    is refused outright, since its numbers differ.
    """
    machine = platform.machine()
    if machine not in _SOCKET_SYSCALL:
        raise sysc.Refused(f"no seccomp filter for socket(2) on {machine}")
    arch, number = _SOCKET_SYSCALL[machine]
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    allow, refuse = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EACCES
    program = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, refuse),  # the architecture
               (ld, 0, 0, 0), (jeq, 0, 3, number),  # socket(2)?
               (ld, 0, 0, 16), (jeq, 0, 1, 1),  # its domain (the first argument's low word): AF_UNIX?
               (ret, 0, 0, refuse), (ret, 0, 0, allow)]
    filters = (_SockFilter * len(program))(*[_SockFilter(*step) for step in program])
    prog = _SockFprog(len(program), ctypes.cast(filters, ctypes.POINTER(_SockFilter)))
    libc = sysc._libc()
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise sysc._fail("prctl(PR_SET_NO_NEW_PRIVS) failed")
    if libc.prctl(ctypes.c_int(22), ctypes.c_ulong(2), ctypes.byref(prog), ctypes.c_ulong(0),
                  ctypes.c_ulong(0)) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise sysc._fail("the seccomp filter was refused")


def set_limits(limits: dict) -> None:
    """Lower the resource limits named in ``limits`` (RLIMIT_ name without prefix -> value)."""
    for name, value in limits.items():
        which = getattr(resource, f"RLIMIT_{name}")
        soft, hard = int(value), int(value) + (1 if name == "CPU" else 0)
        _, old_hard = resource.getrlimit(which)
        if old_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, old_hard), min(hard, old_hard)
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError) as exc:
            raise sysc.Refused(f"setrlimit(RLIMIT_{name}, {soft}) failed: {exc}") from None


# --------------------------------------------------------------------------- the Python guard


def install_guard(spec: dict) -> None:
    """Put the audit-hook guard first on PYTHONPATH (for platforms without Landlock).

    Every Python the command starts (unless with -I or -S) then refuses writes outside the
    root, reads of other processes' /proc entries and, with ``network`` false, connects
    to anything but a Unix socket. Best-effort: other programs and ctypes ignore it.
    """
    folder = os.path.join(spec["root"], "guard")
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(os.path.dirname(os.path.realpath(__file__)), "_jail_guard.py"),
                  encoding="utf-8") as source, \
                open(os.path.join(folder, "sitecustomize.py"), "w", encoding="utf-8") as handle:
            handle.write(source.read())
    except OSError as exc:
        raise sysc.Refused(f"cannot write the Python guard: {exc}") from None
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)
    os.environ["AGENTDESCENT_SANDBOX_ROOT"] = spec["root"]
    os.environ["AGENTDESCENT_SANDBOX_NETWORK"] = "1" if spec["network"] else ""


# --------------------------------------------------------------------------- the probe


def _probe_seccomp() -> bool:
    """Whether the Unix-socket filter can be had, tried in a forked child: socket(AF_UNIX) must then fail."""
    import socket

    child = os.fork()
    if child == 0:
        try:
            refuse_unix_sockets()
            try:
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
                os._exit(1)
            except PermissionError:
                socket.socketpair()[0].close()
                os._exit(0)
        except (sysc.Refused, OSError):
            os._exit(1)
    _, status = os.waitpid(child, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def probe() -> dict:
    """Which steps work on this machine, tried for real in this (throwaway) process."""
    found: dict = {"system": platform.system(), "euid": os.geteuid() if hasattr(os, "geteuid") else -1,
                   "landlock_abi": 0, "net": None, "caps": False, "shm": False, "rlimits": [],
                   "ns": None, "cgroup": []}
    if resource is not None:  # lower each soft limit to a plausible value, as a run would
        for name, value in (("AS", 8 << 30), ("CPU", 3600), ("FSIZE", 1 << 30), ("CORE", 0)):
            which = getattr(resource, f"RLIMIT_{name}", None)
            try:
                _, hard = resource.getrlimit(which)
                resource.setrlimit(which, (value if hard == resource.RLIM_INFINITY else min(value, hard), hard))
                found["rlimits"].append(name)
            except (TypeError, OSError, ValueError):
                pass
    if not sys.platform.startswith("linux"):
        return found
    libc = sysc._libc()
    with contextlib.suppress(OSError):
        found["ns"] = namespaces.probe_namespaces()
    if found["euid"] == 0:
        found["cgroup"] = namespaces.probe_cgroups()
    try:  # first, while nothing else has changed: it needs privilege of its own
        if os.path.isdir("/dev/shm"):
            private_shm(16)
            found["shm"] = True
    except sysc.Refused:
        pass
    for how in ("netns", "userns"):
        try:
            isolate_network(how)
            found["net"] = how
            break
        except sysc.Refused:
            if how == "netns" and ctypes.get_errno() != 1:  # only EPERM says "try a user namespace"
                break
    abi = landlock_abi()
    if abi:
        attr = _RulesetAttr(handled_access_fs=_READ_FILE)
        ruleset = libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(8),
                               ctypes.c_uint32(0))
        if ruleset >= 0:
            os.close(ruleset)
            found["landlock_abi"] = abi
    found["seccomp"] = _probe_seccomp()
    if found["euid"] == 0:
        found["caps"] = libc.prctl(ctypes.c_int(_PR_CAPBSET_DROP), ctypes.c_ulong(0), ctypes.c_ulong(0),
                                   ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0
    return found


def _become_command(config: dict, command: list[str]) -> int:
    """The last steps, in the process that becomes the command: identity, Landlock, limits, exec."""
    try:
        if config.get("drop_caps"):  # first: emptying the bounding set needs root's CAP_SETPCAP
            drop_capabilities()
        if config.get("identity"):
            become(config["identity"])
        elif config.get("user"):
            drop_user(config["user"])
        if config.get("landlock"):
            apply_landlock(config["landlock"])
        if config.get("unix_sockets") is False:
            refuse_unix_sockets()
        set_limits(config.get("rlimits", {}))
    except sysc.Refused as exc:
        sys.stderr.write(f"agentdescent sandbox: {exc}\n")
        return 126
    try:
        os.execvpe(command[0], command, os.environ)
    except OSError as exc:
        sys.stderr.write(f"agentdescent sandbox: cannot run {command[0]!r}: {exc.strerror}\n")
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 126  # not reached: exec replaced this process


def main(argv: list[str]) -> int:
    """Apply the config in ``argv[1]`` and exec the command after ``--`` (or run the probe)."""
    if argv[1:] == ["--probe"]:
        print(json.dumps(probe()))
        return 0
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("agentdescent sandbox: usage: _jail.py CONFIG -- COMMAND...\n")
        return 126
    config, command = json.loads(argv[1]), argv[3:]
    try:
        if config.get("parent"):
            namespaces.tie_to_parent(int(config["parent"]))
        if config.get("guard"):
            install_guard(config["guard"])
        if config.get("cgroup"):
            namespaces.join_cgroup(config["cgroup"])
        if config.get("ns"):
            net = config.get("net") in ("netns", "userns")
            namespaces.enter_namespaces(sysc._CLONE_NEWNS | sysc._CLONE_NEWPID | (sysc._CLONE_NEWNET if net else 0),
                             userns=bool(config["ns"].get("userns")))
            if config.get("parent"):
                namespaces.tie_to_parent(int(config["parent"]))  # a new user namespace clears the setting
        else:
            if config.get("shm"):
                private_shm(config["shm"])
            if config.get("net") in ("netns", "userns"):
                isolate_network(config["net"])
    except sysc.Refused as exc:
        sys.stderr.write(f"agentdescent sandbox: {exc}\n")
        return 126
    if config.get("ns"):
        return namespaces.run_as_init(config, command, _become_command)
    return _become_command(config, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
