"""What a sandbox's isolation amounts to on this machine, said plainly, one sentence per aspect.

This module owns the sentences of `agentdescent.code.Sandbox.protections`: for each aspect
(filesystem, identity, secrets, network, limits, processes) what holds, given what the
platform probe found (`agentdescent.code.probe`) and the sandbox's knobs. It says what
holds and what does not, never more.

Each function takes the `Sandbox` (``box``: its knobs) and the platform (``here``). It
must not probe, run anything or change any state, nor import the sandbox module.
"""

from __future__ import annotations

import os
from typing import Any

from .probe import _Platform
from .roots import _is_root

__all__: list[str] = []


def filesystem_sentence(box: Any, here: _Platform) -> str:
    abi = here.landlock_abi
    parts = []
    if here.ns:
        kept = "root's, folders and files" if here.identity else "a read-only mount"
        parts.append("a mount namespace of its own: everything outside the sandbox's folder is read-only "
                     "(no write, rename, chmod, utime or attribute change outside it); /tmp, /var/tmp, /run "
                     "and the homes are empty there (the interpreter and its packages bound back, read-only), "
                     f"/sys is hidden; in work/ ({kept}) the command writes only its read-back files, "
                     "nothing it was given; "
                     f"HOME and TMPDIR are a private tmpfs of {box.disk_mb or 1024} MB")
    if abi:
        shm = ("a private /dev/shm of its own" if here.shm or here.ns else
               "not /dev/shm, so POSIX semaphores (multiprocessing locks) fail")
        parts.append(f"Landlock (ABI {abi}): writes only inside the sandbox's own folder (and to "
                     f"/dev/null, /dev/zero, /dev/full, /dev/tty and {shm}); everything else "
                     "read-only; /proc unreadable except the command's own entry (not its children's), "
                     "/sys and other sandboxes' folders unreadable")
    else:
        parts.append("no Landlock on this platform: a Python audit hook in Python commands refuses writes "
                     "outside the sandbox's folder and reads of other processes' /proc entries (best-effort: "
                     "a subprocess of another program, ctypes or python -I gets around it)")
        if here.nobody and not here.ns:
            parts[-1] += "; the command runs as the nobody user, so it writes only where anyone may"
    return "; ".join(parts)

def identity_sentence(box: Any, here: _Platform) -> str:
    caps = "; its capabilities are dropped (empty bounding, inheritable and ambient sets)" if here.caps else ""
    if here.identity:
        return (f"the command runs as user {here.identity[0]} (nobody), not root: root's private files "
                "(mode 600 keys, /etc/shadow) are unreadable and no file outside is its to change" + caps)
    if here.ns == "userns":
        return ("the command runs as your own user inside a user namespace: your files stay readable where "
                "the mount namespace does not hide them (the homes are hidden), none are writable" + caps)
    if here.nobody:
        return "the command runs as the nobody user (no Landlock here)" + caps
    if _is_root():
        return ("the command keeps full root (no mount namespace to drop it safely here): it can read any "
                "file, and " + ("only its capabilities are dropped" if here.caps else "keeps its capabilities")
                + "; use require_isolation=True to refuse")
    return f"the command runs as the engine's own user ({os.getuid()}), with its rights" + caps

def secrets_sentence(box: Any, here: _Platform) -> str:
    text = ("the environment is scrubbed (of the engine's variables only PATH, LANG, LC_ALL and "
            "TZ pass), so no API key variable reaches the command; ")
    if here.ns:
        text += "other processes are not in its /proc (a PID namespace of its own)"
    elif here.landlock_abi:
        text += "other processes' /proc/<pid>/environ is unreadable (Landlock)"
    else:
        text += ("other processes' /proc/<pid>/environ is hidden only by the best-effort guard"
                 + (" and the nobody user" if here.nobody else ""))
    if here.ns:
        text += "; the homes are hidden" + (", and root's private files unreadable to its user"
                                            if here.identity else "")
        text += "; files readable to any user elsewhere stay readable, so keep keys out of them"
    else:
        text += "; files on disk stay readable, so keep keys out of readable files"
    return text

def network_sentence(box: Any, here: _Platform) -> str:
    if box.network:
        return "not isolated: network=True lets the command reach anything the engine can"
    if here.seccomp and not box.unix_sockets:
        sockets = ("; no Unix socket that could connect to a name can be made (seccomp; socketpair works), "
                   "so no socket file on disk is reachable")
    elif here.ns:
        sockets = ("; named Unix sockets under /tmp, /run and the homes are hidden, those elsewhere on disk "
                   "are reachable where their mode lets its user in")
    else:
        sockets = " (named Unix sockets on disk are)"
    if here.net:
        how = "unshare(CLONE_NEWNET)" if here.net == "netns" else "a user and network namespace"
        return f"a network namespace of its own ({how}): only its own loopback, nothing outside is reachable{sockets}"
    if here.landlock_abi >= 4:
        return (f"Landlock (ABI {here.landlock_abi}): TCP connect and bind refused; UDP and Unix "
                "sockets still work")
    return ("not isolated: no network namespace and no Landlock network rules here; only the "
            "best-effort guard refuses non-Unix socket connects from Python commands")

def limits_sentence(box: Any, here: _Platform) -> str:
    wall = f"wall clock {box.timeout:g} s (+{box.grace:g} s grace) for the whole command"
    parts = {"AS": box.memory_mb and f"address space {box.memory_mb} MB",
             "CPU": f"CPU {box._cpu(box.timeout):g} s",
             "FSIZE": box.file_mb and f"files up to {box.file_mb} MB", "CORE": "no core dumps"}
    held = [text for name, text in parts.items() if text and name in here.rlimits]
    sentence = f"per process (setrlimit): {', '.join(held)}; {wall}" if held else f"no resource limits here; {wall}"
    whole = []
    if here.cgroup and here.ns:
        v2 = "/sys/fs/cgroup" in here.cgroup
        if box.memory_mb and (v2 or any(b.endswith("/memory") for b in here.cgroup)):
            whole.append(f"memory {box.memory_mb} MB")
        if box.max_processes and (v2 or any(b.endswith("/pids") for b in here.cgroup)):
            whole.append(f"at most {box.max_processes} processes and threads")
        if whole:
            whole[0] = f"for the whole sandbox (a control group, cgroup {'v2' if v2 else 'v1'}): {whole[0]}"
    else:
        whole.append("no control group here, so memory and processes are limited per process only")
    if here.ns:
        whole.append(f"scratch space (HOME and TMPDIR) {box.disk_mb or 1024} MB")
    return "; ".join([*whole, sentence])

def processes_sentence(box: Any, here: _Platform) -> str:
    if here.ns:
        sentence = ("a PID namespace of its own: when the command ends, times out or is killed, everything "
                    "it started ends with it (a setsid daemon included); a parent-death signal ties it to "
                    "the engine, so a driver killed even with SIGKILL takes its sandboxes along, and the "
                    "next run sweeps the roots of dead drivers")
    else:
        sentence = ("a process group of its own, killed whole (SIGKILL) on timeout and after the command "
                    "exits; a child that starts its own session escapes that kill")
    if here.landlock_abi >= 6:
        sentence += "; Landlock scopes signals and abstract Unix sockets, so it cannot signal or reach the engine"
    elif here.identity or here.nobody:
        sentence += "; it runs as another user, so it cannot signal the engine"
    elif not here.ns:
        sentence += "; it can still signal the engine and other processes of its user (no Landlock ABI 6)"
    if here.caps:
        sentence += "; run as root, its capabilities are dropped (empty bounding set)"
    return sentence
