"""The sandbox's launcher: sets up isolation in a fresh process, then becomes the command.

`agentdescent.code.sandbox` starts this file as a plain script,
``python -I _jail.py CONFIG -- COMMAND...``, in a new session. A fresh interpreter has
no other threads, so it may change process-wide state (``unshare``, Landlock, user ids,
resource limits) that must never be touched in the engine's own process. It applies what
the JSON ``CONFIG`` asks for, in this order: the Python guard, a private /dev/shm, the
network namespace, dropping to another user, Landlock, dropping capabilities, resource
limits; then it ``exec``s the command, which keeps this process's id and process group. ``python -I _jail.py --probe``
prints, as JSON, which of those steps work on this machine (the probe runs in a
throwaway process, since the steps cannot be undone).

It owns the system calls and nothing else: the decision of *what* to apply is the
parent's. It must not import anything from agentdescent (it runs outside the package, by
path), must not run the command when a step the config asks for fails (it prints one line,
``agentdescent sandbox: ...``, to stderr and exits 126), and must not start threads.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import stat
import sys

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
_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x40000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 0x1, 0x2, 0x4, 0x8, 0x20
_MS_NOATIME, _MS_NODIRATIME, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x400, 0x800, 0x1000, 0x4000, 0x40000
_MS_RELATIME, _MS_STRICTATIME = 1 << 21, 1 << 24
# A mount's flags as /proc/self/mountinfo spells them: a read-only remount must keep them
# (inside a user namespace the locked ones may not be dropped).
_KEPT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": _MS_NOATIME,
               "nodiratime": _MS_NODIRATIME, "relatime": _MS_RELATIME, "strictatime": _MS_STRICTATIME}

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


class Refused(Exception):
    """A step the config asks for failed: the command must not run."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _fail(what: str) -> Refused:
    err = ctypes.get_errno()
    return Refused(f"{what}: {os.strerror(err)} (errno {err})")


# --------------------------------------------------------------------------- Landlock


def landlock_abi() -> int:
    """The Landlock ABI version the kernel offers, 0 when there is none (or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = _libc()
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
            raise Refused(f"Landlock: cannot open {path!r} for its rule: {exc.strerror}") from None
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):  # a file's rule may carry only file rights
            rights &= _FILE_RIGHTS
        attr = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        done = libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset),
                            ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0))
        if done != 0 and must:
            raise _fail(f"Landlock refused the rule for {path!r}")
    finally:
        os.close(fd)


def apply_landlock(spec: dict) -> None:
    """Restrict this process (and everything it execs or forks) with one Landlock ruleset.

    Writes only under ``spec["root"]`` (and the harmless devices); reads everywhere but
    /proc (except this process's own entry), /sys and other sandboxes; with ``net``, no TCP
    bind or connect; with ABI 6 or later no signal or abstract Unix socket leaves the domain.
    """
    abi, root = int(spec["abi"]), spec["root"]
    libc = _libc()
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
        raise _fail("Landlock refused the ruleset")
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
            raise _fail("prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise _fail("Landlock refused to restrict the process")
    finally:
        os.close(ruleset)


# --------------------------------------------------------------------------- the network


def _unshare(libc: ctypes.CDLL, flags: int) -> bool:
    return libc.unshare(ctypes.c_int(flags)) == 0


def isolate_network(how: str) -> None:
    """Move this process into a network namespace of its own (``how``: netns or userns).

    The new namespace has only a loopback interface, brought up (best-effort) so that the
    command can still talk to itself on 127.0.0.1.
    """
    libc = _libc()
    if how == "netns":
        if not _unshare(libc, _CLONE_NEWNET):
            raise _fail("unshare(CLONE_NEWNET) failed")
    else:
        uid, gid = os.getuid(), os.getgid()
        if not _unshare(libc, _CLONE_NEWUSER | _CLONE_NEWNET):
            raise _fail("unshare(CLONE_NEWUSER | CLONE_NEWNET) failed")
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                               ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
        except OSError as exc:
            raise Refused(f"cannot map the user ids of the new user namespace: {exc}") from None
    _loopback_up()


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


def private_shm(size_mb: int) -> None:
    """Give the command a /dev/shm of its own: a fresh tmpfs in a mount namespace of its own.

    POSIX semaphores and shared memory (``multiprocessing``'s locks and queues) live there;
    a private one lets them work without a folder shared with other runs, and it vanishes
    with the command's last process. The root mount is made private first, so the new
    mount never propagates back to the engine's namespace.
    """
    libc = _libc()
    if libc.unshare(ctypes.c_int(_CLONE_NEWNS)) != 0:
        raise _fail("unshare(CLONE_NEWNS) failed")
    if libc.mount(b"none", b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None) != 0:
        raise _fail("cannot make the mounts private")
    options = f"size={int(size_mb)}m,mode=1777".encode()
    if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), options) != 0:
        raise _fail("cannot mount a private /dev/shm")


# --------------------------------------------------------------------------- the engine's death


def tie_to_parent(parent: int) -> None:
    """Die (SIGKILL) when the process that started this one dies; refuse if it is already gone.

    The parent-death signal survives ``exec``, so the command itself dies with its launcher,
    and the launcher with the engine: a driver killed with SIGKILL takes its sandboxes along.
    """
    libc = _libc()
    if libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(9), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise _fail("prctl(PR_SET_PDEATHSIG) failed")
    if parent and os.getppid() != parent:
        raise Refused("the engine that started this sandbox is gone")


# --------------------------------------------------------------------------- a control group


def join_cgroup(spec: dict) -> None:
    """Make a control group per controller folder in ``spec["dirs"]``, set its limits, move in.

    ``spec``: ``dirs`` (the group's folders, one per hierarchy: cgroup v1 has one per
    controller, v2 one for all), ``memory`` (bytes for the whole sandbox, swap included
    where the kernel counts it) and ``pids`` (the most processes and threads at once).
    Every process the command starts is in the group, so the limits are the sandbox's, not
    each process's; the engine removes the folders after the run.
    """
    memory, pids = spec.get("memory"), spec.get("pids")
    for folder in spec["dirs"]:
        try:
            _enable_controllers(os.path.dirname(folder))
            os.makedirs(folder, mode=0o755, exist_ok=True)
            wrote = False
            for name, value in (("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory),
                                ("memory.max", memory), ("memory.swap.max", 0 if memory else None),
                                ("pids.max", pids)):
                path = os.path.join(folder, name)
                if value is not None and os.path.exists(path):
                    with open(path, "w") as handle:
                        handle.write(str(int(value)))
                    wrote = True
            if not wrote:
                raise Refused(f"the control group {folder!r} offers none of the limits asked for")
            with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as exc:
            raise Refused(f"cannot join the control group {folder!r}: {exc.strerror or exc}") from None


def _enable_controllers(parent: str) -> None:
    """cgroup v2: let the groups made under ``parent`` have memory and pids limits (v1: nothing to do).

    A v2 group offers a controller's files only if its parent enables it for its children,
    and the parent's parent for it; the sandboxes' common folder is made and enabled here.
    """
    top = os.path.dirname(parent)
    if not os.path.exists(os.path.join(top, "cgroup.controllers")):
        return
    os.makedirs(parent, mode=0o755, exist_ok=True)
    for folder in (top, parent):
        for controller in ("memory", "pids"):
            with contextlib.suppress(OSError), open(os.path.join(folder, "cgroup.subtree_control"), "w") as handle:
                handle.write(f"+{controller}")


# --------------------------------------------------------------------------- namespaces and mounts


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int,
           options: str | None = None) -> None:
    done = libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), options.encode() if options else None)
    if done != 0:
        raise _fail(f"mount of {target!r} failed")


def _mount_points() -> list[tuple[str, int]]:
    """Each mount point of this namespace (deepest last) with the flags a remount must keep."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split()
            target = fields[4].encode().decode("unicode_escape")  # \\040 for a space...
            flags = 0
            for option in fields[5].split(","):
                flags |= _KEPT_FLAGS.get(option, 0)
            found.append((target, flags))
    return found


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def set_up_mounts(spec: dict) -> None:
    """Give the command a view of the filesystem it can change nothing in but its own scratch.

    In this process's own mount namespace (made private first, so nothing propagates back):
    ``hide`` folders (/tmp, /run, the homes...) are covered by empty tmpfs, and what the
    command needs from under them (``keep``: the interpreter, the sandbox root) is bound
    back; /sys is hidden, /proc is mounted fresh (only this PID namespace's processes);
    /dev/shm and the root's ``tmp/`` are fresh, size-limited tmpfs (``tmp_mb``; HOME lives
    in it too); then every mount but those, /proc and /dev is made read-only — so no file
    outside, the sandbox's own ``work/`` included, can be written, renamed, chmod-ed,
    touched or given an attribute. ``work/`` is bound back writable; with ``work_readonly``
    (the command is the files' owner, so their modes cannot protect them) it is read-only
    too, but for the ``writable`` folders (where a command's read-back files go). Run as
    root, the engine gave ``work/``'s files to root and its folders the sticky bit instead,
    so the unprivileged command may add files but not change those it was given.
    """
    libc = _libc()
    root, uid, gid = spec["root"], int(spec["uid"]), int(spec["gid"])
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
    keep = [p for p in dict.fromkeys([root, *spec.get("keep", ())]) if os.path.isdir(p)]
    held = {path: os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for path in keep}
    try:
        hidden = [h for h in dict.fromkeys(spec.get("hide", ())) if os.path.isdir(h) and not os.path.islink(h)]
        for folder in sorted(hidden, key=len):
            if any(_under(folder, other) for other in hidden if other != folder):
                continue  # already under a hidden folder
            _mount(libc, "tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
        bound: list[str] = []
        for path, fd in sorted(held.items(), key=lambda item: len(item[0])):
            if any(_under(path, b) for b in bound):
                continue  # inside a folder bound back already
            if any(_under(path, h) for h in hidden):
                bound.append(path)
                os.makedirs(path, mode=0o755, exist_ok=True)
                _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
    finally:
        for fd in held.values():
            os.close(fd)
    if os.path.isdir("/sys"):
        _mount(libc, "tmpfs", "/sys", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, "size=4k,mode=0555")
    _mount(libc, "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    if spec.get("shm") and os.path.isdir("/dev/shm"):
        _mount(libc, "tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV,
               f"size={int(spec['shm'])}m,mode=1777")
    scratch, home = os.path.join(root, "tmp"), os.path.join(root, "home")
    _mount(libc, "tmpfs", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={int(spec['tmp_mb'])}m,mode=0700,uid={uid},gid={gid}")
    inner_home = os.path.join(scratch, ".home")
    os.mkdir(inner_home, 0o700)
    os.chown(inner_home, uid, gid)
    _mount(libc, inner_home, home, None, _MS_BIND)
    work = os.path.join(root, "work")
    folders = [f for f in spec.get("writable", ()) if os.path.isdir(f) and not os.path.islink(f)]
    readonly = bool(spec.get("work_readonly"))
    _mount(libc, work, work, None, _MS_BIND)  # a mount of its own, before the rest turns read-only
    for folder in folders if readonly else ():
        _mount(libc, folder, folder, None, _MS_BIND)
    writable = {scratch, home, "/dev/shm", work, *(folders if readonly else ())}
    for target, flags in _mount_points():
        if target in writable or _under(target, "/proc") or _under(target, "/dev"):
            continue
        if libc.mount(None, target.encode(), None,
                      ctypes.c_ulong(_MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags), None) != 0:
            err = ctypes.get_errno()
            if target == "/" or _under(root, target):
                raise Refused(f"cannot make {target!r} read-only: {os.strerror(err)} (errno {err})")
    if readonly:  # the same user as the files: only a read-only mount protects them
        _mount(libc, None, work, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir(os.getcwd())  # the working folder was taken before the mounts: take it again, through them


def enter_namespaces(flags: int, userns: bool) -> None:
    """unshare(2) into new namespaces; with ``userns``, a user namespace mapping this user to itself."""
    libc = _libc()
    uid, gid = os.getuid(), os.getgid()
    if userns:
        flags |= _CLONE_NEWUSER
    if not _unshare(libc, flags):
        raise _fail(f"unshare({flags:#x}) failed")
    if userns:
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                               ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
        except OSError as exc:
            raise Refused(f"cannot map the user ids of the new user namespace: {exc}") from None


def _report(status_fd: int, status: int) -> None:
    with contextlib.suppress(OSError):
        os.write(status_fd, f"{status}\n".encode())


def run_as_init(config: dict, command: list[str]) -> int:
    """Be the launcher of a PID namespace: fork its init, wait, and end as the command ended.

    After ``unshare(CLONE_NEWPID)`` the next child is process 1 of the new namespace: it
    sets up the mounts, forks the command and reaps every orphan until the command ends.
    When it exits the kernel kills everything left in the namespace (a ``setsid`` daemon,
    a spinner), so nothing the command started outlives it. The command's wait status
    comes back on a pipe, and this process ends the same way (exit code, or the signal).
    """
    ns = config["ns"]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # process 1 of the new PID namespace
        os.close(read_end)
        code = 126
        try:
            tie_to_parent(0)
            set_up_mounts(ns)
            if config.get("net") in ("netns", "userns"):
                _loopback_up()
            pid = os.fork()
            if pid == 0:
                os.close(write_end)
                os._exit(_become_command(config, command))
            while True:
                try:
                    done, status = os.wait()
                except ChildProcessError:
                    break
                if done == pid:
                    _report(write_end, status)
                    code = 0
                    break
        except Refused as exc:
            sys.stderr.write(f"agentdescent sandbox: {exc}\n")
        except OSError as exc:
            sys.stderr.write(f"agentdescent sandbox: setting up the sandbox failed: {exc}\n")
        os._exit(code)  # the namespace's other processes are killed as this one ends
    os.close(write_end)
    _, status = os.waitpid(child, 0)
    reported = b""
    while chunk := os.read(read_end, 64):
        reported += chunk
    os.close(read_end)
    if not reported.strip():
        return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 126
    code = os.waitstatus_to_exitcode(int(reported))
    if code < 0:  # killed by a signal: end the same way, so the engine sees it
        import signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


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
        raise Refused(f"cannot drop to user {uid}: {exc}") from None


def become(spec: dict) -> None:
    """Become ``spec["uid"]``/``spec["gid"]`` with no supplementary group (the root was prepared for it)."""
    uid, gid = int(spec["uid"]), int(spec["gid"])
    try:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    except OSError as exc:
        raise Refused(f"cannot become user {uid}: {exc}") from None
    if os.getuid() != uid or os.geteuid() != uid:
        raise Refused(f"still running as user {os.geteuid()} after dropping to {uid}")


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
    libc = _libc()
    header, data = _CapHeader(version=0x20080522, pid=0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise _fail("capget failed")
    for half in data:
        half.inheritable = 0
    if libc.capset(ctypes.byref(header), data) != 0:
        raise _fail("capset (clearing the inheritable set) failed")
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            last = int(handle.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        if libc.prctl(ctypes.c_int(_PR_CAPBSET_DROP), ctypes.c_ulong(cap), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0 and ctypes.get_errno() != 22:
            raise _fail(f"prctl(PR_CAPBSET_DROP, {cap}) failed")
    libc.prctl(ctypes.c_int(_PR_CAP_AMBIENT), ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL),
               ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))


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
            raise Refused(f"setrlimit(RLIMIT_{name}, {soft}) failed: {exc}") from None


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
        with open(os.path.join(folder, "sitecustomize.py"), "w", encoding="utf-8") as handle:
            handle.write(_GUARD)
    except OSError as exc:
        raise Refused(f"cannot write the Python guard: {exc}") from None
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH")) if p)
    os.environ["AGENTDESCENT_SANDBOX_ROOT"] = spec["root"]
    os.environ["AGENTDESCENT_SANDBOX_NETWORK"] = "1" if spec["network"] else ""


# A sitecustomize.py that installs the audit hook, then runs the sitecustomize it shadows.
# It reads its settings from two variables the launcher sets (children inherit them).
_GUARD = r'''"""agentdescent sandbox guard: best-effort, for platforms without Landlock."""
import os, socket, sys

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


sys.addaudithook(_hook)


def _chain():
    import importlib.machinery, importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
'''


# --------------------------------------------------------------------------- the probe


def _probe_namespaces() -> str | None:
    """Whether a mount and PID namespace with fresh mounts can be had: "root", "userns" or None.

    Tried in a forked child (the steps cannot be undone), exactly as a run would: unshare,
    then a grandchild (process 1 of the new namespace) mounts a tmpfs and a fresh /proc.
    """
    userns = os.geteuid() != 0
    child = os.fork()
    if child == 0:
        try:
            enter_namespaces(_CLONE_NEWNS | _CLONE_NEWPID, userns=userns)
            inner = os.fork()
            if inner == 0:
                try:
                    libc = _libc()
                    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
                    _mount(libc, "tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m")
                    _mount(libc, "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
                    _mount(libc, None, "/tmp", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
                    os._exit(0 if os.getpid() == 1 else 1)
                except (Refused, OSError):
                    os._exit(1)
            _, status = os.waitpid(inner, 0)
            os._exit(0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1)
        except (Refused, OSError):
            os._exit(1)
    _, status = os.waitpid(child, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return "userns" if userns else "root"
    return None


def _probe_cgroups() -> list[str]:
    """The control-group folders a sandbox can make groups under (with memory or pids limits)."""
    bases = []
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        bases.append("/sys/fs/cgroup")  # cgroup v2, one hierarchy
    else:
        bases += [f"/sys/fs/cgroup/{name}" for name in ("memory", "pids")]  # cgroup v1
    working = []
    for base in bases:
        folder = os.path.join(base, "agentdescent", f"probe-{os.getpid()}")
        try:
            _enable_controllers(os.path.dirname(folder))
            os.makedirs(folder, mode=0o755, exist_ok=True)
            try:
                names = [n for n in ("memory.limit_in_bytes", "memory.max", "pids.max")
                         if os.path.exists(os.path.join(folder, n))]
                if names:
                    with open(os.path.join(folder, names[0]), "w") as handle:
                        handle.write(str(1 << 30) if names[0].startswith("memory") else "64")
                    working.append(base)
            finally:
                os.rmdir(folder)
        except OSError:
            continue
    return working


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
    libc = _libc()
    with contextlib.suppress(OSError):
        found["ns"] = _probe_namespaces()
    if found["euid"] == 0:
        found["cgroup"] = _probe_cgroups()
    try:  # first, while nothing else has changed: it needs privilege of its own
        if os.path.isdir("/dev/shm"):
            private_shm(16)
            found["shm"] = True
    except Refused:
        pass
    for how in ("netns", "userns"):
        try:
            isolate_network(how)
            found["net"] = how
            break
        except Refused:
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
        set_limits(config.get("rlimits", {}))
    except Refused as exc:
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
            tie_to_parent(int(config["parent"]))
        if config.get("guard"):
            install_guard(config["guard"])
        if config.get("cgroup"):
            join_cgroup(config["cgroup"])
        if config.get("ns"):
            net = config.get("net") in ("netns", "userns")
            enter_namespaces(_CLONE_NEWNS | _CLONE_NEWPID | (_CLONE_NEWNET if net else 0),
                             userns=bool(config["ns"].get("userns")))
            if config.get("parent"):
                tie_to_parent(int(config["parent"]))  # a new user namespace clears the setting
        else:
            if config.get("shm"):
                private_shm(config["shm"])
            if config.get("net") in ("netns", "userns"):
                isolate_network(config["net"])
    except Refused as exc:
        sys.stderr.write(f"agentdescent sandbox: {exc}\n")
        return 126
    if config.get("ns"):
        return run_as_init(config, command)
    return _become_command(config, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
