"""The sandbox launcher's namespaces: the engine's death, a control group, mounts, and process 1.

The launcher (`agentdescent/code/_jail.py`) calls these, in a fresh process, before it
becomes the command: `tie_to_parent` (a parent-death signal), `join_cgroup` (limits for
the whole run), `enter_namespaces` (mount, PID and, as asked, user and network
namespaces) and `run_as_init`, which forks process 1 of the new PID namespace; that
process sets up the mounts (`set_up_mounts`: everything outside the root read-only, shared
scratch and homes hidden, /proc fresh) and reaps until the command ends. The probe's
checks of the same steps (`probe_namespaces`, `probe_cgroups`) live here too.

Like the launcher it runs outside the package, by path: it must not import anything from
agentdescent but its sibling `_jail_sys`, must not start threads, and must never let a
mount propagate back to the engine's namespace.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable

if __package__:  # imported as part of agentdescent.code (tests, docs)
    from . import _jail_sys as sysc
else:  # run by path as the launcher: its siblings sit beside it, ahead of anything else
    _HERE = os.path.dirname(os.path.realpath(__file__))
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    import _jail_sys as sysc  # type: ignore[no-redef]

# --------------------------------------------------------------------------- the engine's death


def tie_to_parent(parent: int) -> None:
    """Die (SIGKILL) when the process that started this one dies; refuse if it is already gone.

    The parent-death signal survives ``exec``, so the command itself dies with its launcher,
    and the launcher with the engine: a driver killed with SIGKILL takes its sandboxes along.
    """
    libc = sysc._libc()
    if libc.prctl(ctypes.c_int(sysc._PR_SET_PDEATHSIG), ctypes.c_ulong(9), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        raise sysc._fail("prctl(PR_SET_PDEATHSIG) failed")
    if parent and os.getppid() != parent:
        raise sysc.Refused("the engine that started this sandbox is gone")


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
                raise sysc.Refused(f"the control group {folder!r} offers none of the limits asked for")
            with open(os.path.join(folder, "cgroup.procs"), "w") as handle:
                handle.write(str(os.getpid()))
        except OSError as exc:
            raise sysc.Refused(f"cannot join the control group {folder!r}: {exc.strerror or exc}") from None


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
        raise sysc._fail(f"mount of {target!r} failed")


def _mount_points() -> list[tuple[str, int]]:
    """Each mount point of this namespace (deepest last) with the flags a remount must keep."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split()
            target = fields[4].encode().decode("unicode_escape")  # \\040 for a space...
            flags = 0
            for option in fields[5].split(","):
                flags |= sysc._KEPT_FLAGS.get(option, 0)
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
    touched or given an attribute. ``work/`` is bound back on a mount of its own; with
    ``work_readonly`` (the command is the files' owner, so their modes cannot protect
    them) it is read-only but for the ``writable`` files (the command's read-back files,
    each bound writable). Run as root, the engine gave ``work/`` to root instead (folders
    755, files 644) and the read-back files to the command's user.
    """
    libc = sysc._libc()
    root, uid, gid = spec["root"], int(spec["uid"]), int(spec["gid"])
    _mount(libc, None, "/", None, sysc._MS_REC | sysc._MS_PRIVATE)
    keep = [p for p in dict.fromkeys([root, *spec.get("keep", ())]) if os.path.isdir(p)]
    held = {path: os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for path in keep}
    try:
        hidden = [h for h in dict.fromkeys(spec.get("hide", ())) if os.path.isdir(h) and not os.path.islink(h)]
        for folder in sorted(hidden, key=len):
            if any(_under(folder, other) for other in hidden if other != folder):
                continue  # already under a hidden folder
            _mount(libc, "tmpfs", folder, "tmpfs", sysc._MS_NOSUID | sysc._MS_NODEV, "size=1m,mode=0755")
        bound: list[str] = []
        for path, fd in sorted(held.items(), key=lambda item: len(item[0])):
            if any(_under(path, b) for b in bound):
                continue  # inside a folder bound back already
            if any(_under(path, h) for h in hidden):
                bound.append(path)
                os.makedirs(path, mode=0o755, exist_ok=True)
                _mount(libc, f"/proc/self/fd/{fd}", path, None, sysc._MS_BIND | sysc._MS_REC)
    finally:
        for fd in held.values():
            os.close(fd)
    if os.path.isdir("/sys"):
        _mount(libc, "tmpfs", "/sys", "tmpfs", sysc._MS_NOSUID | sysc._MS_NODEV | sysc._MS_NOEXEC, "size=4k,mode=0555")
    _mount(libc, "proc", "/proc", "proc", sysc._MS_NOSUID | sysc._MS_NODEV | sysc._MS_NOEXEC)
    if spec.get("shm") and os.path.isdir("/dev/shm"):
        _mount(libc, "tmpfs", "/dev/shm", "tmpfs", sysc._MS_NOSUID | sysc._MS_NODEV,
               f"size={int(spec['shm'])}m,mode=1777")
    scratch, home = os.path.join(root, "tmp"), os.path.join(root, "home")
    _mount(libc, "tmpfs", scratch, "tmpfs", sysc._MS_NOSUID | sysc._MS_NODEV,
           f"size={int(spec['tmp_mb'])}m,mode=0700,uid={uid},gid={gid}")
    inner_home = os.path.join(scratch, ".home")
    os.mkdir(inner_home, 0o700)
    os.chown(inner_home, uid, gid)
    _mount(libc, inner_home, home, None, sysc._MS_BIND)
    work = os.path.join(root, "work")
    folders = [f for f in spec.get("writable", ()) if os.path.exists(f) and not os.path.islink(f)]
    readonly = bool(spec.get("work_readonly"))
    _mount(libc, work, work, None, sysc._MS_BIND)  # a mount of its own, before the rest turns read-only
    for folder in folders if readonly else ():
        _mount(libc, folder, folder, None, sysc._MS_BIND)
    writable = {scratch, home, "/dev/shm", work, *(folders if readonly else ())}
    for target, flags in _mount_points():
        if target in writable or _under(target, "/proc") or _under(target, "/dev"):
            continue
        if libc.mount(None, target.encode(), None,
                      ctypes.c_ulong(sysc._MS_REMOUNT | sysc._MS_BIND | sysc._MS_RDONLY | flags), None) != 0:
            err = ctypes.get_errno()
            if target == "/" or _under(root, target):
                raise sysc.Refused(f"cannot make {target!r} read-only: {os.strerror(err)} (errno {err})")
    if readonly:  # the same user as the files: only a read-only mount protects them
        _mount(libc, None, work, None, sysc._MS_REMOUNT | sysc._MS_BIND | sysc._MS_RDONLY | sysc._MS_NOSUID | sysc._MS_NODEV)
    os.chdir(os.getcwd())  # the working folder was taken before the mounts: take it again, through them


def enter_namespaces(flags: int, userns: bool) -> None:
    """unshare(2) into new namespaces; with ``userns``, a user namespace mapping this user to itself."""
    libc = sysc._libc()
    uid, gid = os.getuid(), os.getgid()
    if userns:
        flags |= sysc._CLONE_NEWUSER
    if not sysc._unshare(libc, flags):
        raise sysc._fail(f"unshare({flags:#x}) failed")
    if userns:
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                               ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
        except OSError as exc:
            raise sysc.Refused(f"cannot map the user ids of the new user namespace: {exc}") from None


def _report(status_fd: int, status: int) -> None:
    with contextlib.suppress(OSError):
        os.write(status_fd, f"{status}\n".encode())


def run_as_init(config: dict, command: list[str], become_command: Callable[[dict, list[str]], int]) -> int:
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
                sysc._loopback_up()
            pid = os.fork()
            if pid == 0:
                os.close(write_end)
                os._exit(become_command(config, command))
            while True:
                try:
                    done, status = os.wait()
                except ChildProcessError:
                    break
                if done == pid:
                    _report(write_end, status)
                    code = 0
                    break
        except sysc.Refused as exc:
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


# --------------------------------------------------------------------------- the probe's checks


def probe_namespaces() -> str | None:
    """Whether a mount and PID namespace with fresh mounts can be had: "root", "userns" or None.

    Tried in a forked child (the steps cannot be undone), exactly as a run would: unshare,
    then a grandchild (process 1 of the new namespace) mounts a tmpfs and a fresh /proc.
    """
    userns = os.geteuid() != 0
    child = os.fork()
    if child == 0:
        try:
            enter_namespaces(sysc._CLONE_NEWNS | sysc._CLONE_NEWPID, userns=userns)
            inner = os.fork()
            if inner == 0:
                try:
                    libc = sysc._libc()
                    _mount(libc, None, "/", None, sysc._MS_REC | sysc._MS_PRIVATE)
                    _mount(libc, "tmpfs", "/tmp", "tmpfs", sysc._MS_NOSUID | sysc._MS_NODEV, "size=1m")
                    _mount(libc, "proc", "/proc", "proc", sysc._MS_NOSUID | sysc._MS_NODEV | sysc._MS_NOEXEC)
                    _mount(libc, None, "/tmp", None, sysc._MS_REMOUNT | sysc._MS_BIND | sysc._MS_RDONLY | sysc._MS_NOSUID | sysc._MS_NODEV)
                    os._exit(0 if os.getpid() == 1 else 1)
                except (sysc.Refused, OSError):
                    os._exit(1)
            _, status = os.waitpid(inner, 0)
            os._exit(0 if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1)
        except (sysc.Refused, OSError):
            os._exit(1)
    _, status = os.waitpid(child, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return "userns" if userns else "root"
    return None


def probe_cgroups() -> list[str]:
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
