"""Finding a sandboxed command's processes from the host, for the sandbox tests.

A sandboxed command sees its own PID namespace, so the ids it prints are not the host's:
its processes are found by a marker in their arguments instead.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path


def python(script: str) -> list[str]:
    """The command running ``script`` (dedented) with this interpreter."""
    return [sys.executable, "-c", textwrap.dedent(script)]


def running_with(marker: str) -> list[int]:
    """Host processes (not zombies) whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry))
    return found


def wait_until_gone(marker: str, seconds: float = 10.0) -> list[int]:
    """`running_with` once none is left, or after ``seconds`` (the kernel ends killed processes in its own time)."""
    deadline = time.monotonic() + seconds
    while (alive := running_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def sleeper(marker: str) -> str:
    """Python source starting a 300 s sleeper whose arguments carry ``marker``."""
    return f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}])"
