"""A hostile command in `Sandbox.run`, class by class, on real processes: what it tries, and what holds.

Each test plays one class of attack the way a candidate would write it (the command is
arbitrary code): metadata changes outside its root, reading secrets, reaching named Unix
sockets, leaving processes behind (also after its driver is killed), exhausting memory,
processes or disk, and leaving a root no plain removal can remove. The protections these
tests rely on need Linux mount and PID namespaces (root, or unprivileged user namespaces);
where the platform has none, the test says so and skips.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from agentdescent.code import Sandbox
from agentdescent.code import probe as probe_module
from agentdescent.code import sandbox as sandbox_module

from .sandbox_processes import python, running_with, wait_until_gone

REPO = Path(__file__).resolve().parents[1]


def platform() -> sandbox_module._Platform:
    return sandbox_module._platform()


needs_ns = pytest.mark.skipif(not sys.platform.startswith("linux") or not platform().ns,
                              reason="needs Linux mount and PID namespaces")
needs_identity = pytest.mark.skipif(not platform().identity,
                                    reason="needs a root engine that drops the command to an unprivileged user")
needs_cgroup = pytest.mark.skipif(not platform().cgroup, reason="needs a control group the sandbox can make")


def _visible_place() -> Path:
    """A writable folder the sandbox does not hide (not under /tmp, /run, a home or TMPDIR)."""
    from agentdescent.code.view import _hidden_folders, _inside

    hidden = _hidden_folders()
    for place in ("/srv", "/opt", "/var/lib", "/mnt", str(REPO)):
        real = os.path.realpath(place)
        if os.path.isdir(real) and os.access(real, os.W_OK) and not any(_inside(real, h) for h in hidden):
            return Path(real)
    pytest.skip("no writable folder outside those the sandbox hides")


@pytest.fixture
def outside() -> Path:
    """A folder outside every folder the sandbox hides, so only its other protections stand in the way."""
    folder = Path(tempfile.mkdtemp(prefix=".agentdescent-hostile-", dir=_visible_place()))
    folder.chmod(0o755)  # open to anyone, so only the sandbox's own protections stand in the way
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


# --------------------------------------------------------------------------- metadata and files outside


@needs_ns
def test_nothing_outside_the_root_can_be_changed_not_even_its_metadata(outside: Path) -> None:
    victim = outside / "victim.txt"
    victim.write_text("untouched")
    os.chmod(victim, 0o644)
    before = os.stat(victim)
    run = Sandbox(timeout=20).run(python(f"""
        import os
        victim = {str(victim)!r}
        for name, attempt in [
            ("chmod", lambda: os.chmod(victim, 0o4777)),
            ("utime", lambda: os.utime(victim, (0, 0))),
            ("xattr", lambda: os.setxattr(victim, "user.mark", b"x")),
            ("write", lambda: open(victim, "a").write("changed")),
            ("rename", lambda: os.rename(victim, victim + ".moved")),
            ("chmod folder", lambda: os.chmod({str(outside)!r}, 0)),
            ("create beside", lambda: open({str(outside / "planted.txt")!r}, "w").write("x")),
        ]:
            try:
                attempt()
                print("DID", name)
            except OSError as exc:
                print("refused", name, exc.errno)
    """))
    assert run.ok, run.stderr
    assert "DID" not in run.stdout, run.stdout
    after = os.stat(victim)
    assert (after.st_mode, after.st_mtime_ns, after.st_uid) == (before.st_mode, before.st_mtime_ns, before.st_uid)
    assert victim.read_text() == "untouched" and os.listxattr(victim) == []
    assert sorted(p.name for p in outside.iterdir()) == ["victim.txt"]


@needs_ns
@pytest.mark.parametrize("landlock", [True, False], ids=["landlock", "no-landlock"])
def test_a_sandbox_cannot_see_a_sibling_sandbox(landlock: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs at once: neither finds the other's root beside its own, nor under the temporary folder."""
    real = probe_module._platform()
    monkeypatch.setattr(sandbox_module, "_platform",
                        lambda: real if landlock else dataclasses.replace(real, landlock_abi=0))
    box = Sandbox(timeout=30)
    script = """
        import os, tempfile, time
        root = os.path.dirname(os.getcwd())
        seen = set()
        for _ in range(40):
            for folder in {os.path.dirname(root), tempfile.gettempdir(), "/tmp"}:
                try:
                    seen |= {n for n in os.listdir(folder) if n.startswith("agentdescent-sandbox-")}
                except OSError:
                    pass
            time.sleep(0.02)
        print(len(seen - {os.path.basename(root)}))
    """
    import threading

    runs = []
    threads = [threading.Thread(target=lambda: runs.append(box.run(python(script)))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(runs) == 2
    for run in runs:
        assert run.ok, run.stderr
        assert run.stdout.split() == ["0"], run.stdout


@needs_ns
def test_the_given_files_cannot_be_changed_but_new_files_may_be_added() -> None:
    run = Sandbox(timeout=20).run(python("""
        import os
        for name, attempt in [("edit test", lambda: open("test_x.py", "a").write("#")),
                              ("remove test", lambda: os.remove("test_x.py")),
                              ("rename test", lambda: os.rename("test_x.py", "gone.py")),
                              ("chmod test", lambda: os.chmod("test_x.py", 0o777))]:
            try:
                attempt()
                print("DID", name)
            except OSError:
                print("refused", name)
        open("added.txt", "w").write("new")
    """), tree={"test_x.py": "def test_x():\n    assert False\n"}, read_back=["added.txt", "test_x.py"])
    assert run.ok, run.stderr
    assert "DID" not in run.stdout, run.stdout
    assert run.files == {"added.txt": "new", "test_x.py": "def test_x():\n    assert False\n"}


# --------------------------------------------------------------------------- secrets


@needs_ns
@needs_identity
def test_root_only_files_are_unreadable_and_the_homes_are_hidden(outside: Path) -> None:
    key = outside / "id_key"
    key.write_text("PRIVATE-KEY-MARKER")
    os.chmod(key, 0o600)
    home_secret = Path("/root", f".hostile-{uuid.uuid4().hex}")
    home_secret.write_text("HOME-SECRET-MARKER")
    os.chmod(home_secret, 0o644)  # even readable to all: the home itself is hidden
    try:
        run = Sandbox(timeout=20).run(python(f"""
            import os
            for path in [{str(key)!r}, {str(home_secret)!r}, "/etc/shadow"]:
                try:
                    print("READ", path, open(path).read()[:40])
                except OSError as exc:
                    print("refused", path, exc.strerror)
            print("uid", os.getuid(), os.geteuid())
        """))
    finally:
        home_secret.unlink()
    assert run.ok, run.stderr
    assert "READ" not in run.stdout, run.stdout
    assert "MARKER" not in run.stdout + run.stderr
    assert f"uid {platform().identity[0]} {platform().identity[0]}" in run.stdout
    status = Sandbox(timeout=20).run(["/bin/sh", "-c", "grep -E '^Cap(Eff|Prm|Bnd)' /proc/$$/status"])
    assert all(line.split()[1] == "0" * 16 for line in status.stdout.splitlines()), status.stdout + status.stderr


@needs_ns
def test_the_engines_environment_is_in_no_proc_entry_the_command_can_read(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"sk-hostile-{uuid.uuid4().hex}"
    monkeypatch.setenv("AGENTDESCENT_HOSTILE_KEY", marker)
    for abi in {platform().landlock_abi, 0}:  # with Landlock, and without it (the PID namespace alone)
        monkeypatch.setattr(sandbox_module, "_platform",
                            lambda abi=abi: dataclasses.replace(probe_module._platform(), landlock_abi=abi))
        run = Sandbox(timeout=20).run(python("""
            import glob, os
            for path in glob.glob("/proc/*/environ") + [f"/proc/{os.getppid()}/environ", "/proc/1/environ"]:
                try:
                    print(open(path, "rb").read().decode("utf-8", "replace"))
                except OSError:
                    pass
            try:
                print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
            except OSError:
                print("pids unlisted")
        """))
        assert run.ok, run.stderr
        assert marker not in run.stdout + run.stderr


# --------------------------------------------------------------------------- sockets


@needs_ns
@pytest.mark.parametrize("unix_sockets", [False, True], ids=["default", "unix_sockets=True"])
def test_named_unix_sockets_are_out_of_reach(unix_sockets: bool, tmp_path: Path, outside: Path) -> None:
    """By default no socket that could connect to a name can be made at all (seccomp); allowed,
    those under /tmp and /run are still hidden. A socket beside the repository, mode 777, is
    reachable only when allowed."""
    paths = [tmp_path / "engine.sock", outside / "visible.sock"]
    if os.access("/run", os.W_OK):
        paths.append(Path("/run", f"agentdescent-hostile-{uuid.uuid4().hex[:8]}.sock"))
    servers = []
    try:
        for path in paths:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            os.chmod(path, 0o777)
            server.listen(1)
            servers.append(server)
        run = Sandbox(timeout=20, unix_sockets=unix_sockets).run(python(f"""
            import socket
            a, b = socket.socketpair()  # a pair (asyncio, multiprocessing) always works
            a.sendall(b"x"); assert b.recv(1) == b"x"
            for path in {[str(p) for p in paths]!r}:
                try:
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.connect(path)
                    print("REACHED", path)
                except OSError as exc:
                    print("refused", path, exc.strerror)
        """))
    finally:
        for server in servers:
            server.close()
        for path in paths:
            path.unlink(missing_ok=True)
    assert run.ok, run.stderr
    reached = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("REACHED")]
    if unix_sockets or not platform().seccomp:
        assert reached == [str(outside / "visible.sock")], run.stdout  # the hidden ones stay hidden
    else:
        assert reached == [], run.stdout
        assert run.stdout.count("Permission denied") == len(paths)


# --------------------------------------------------------------------------- processes


@needs_ns
def test_daemons_spinners_and_shared_memory_end_with_the_run() -> None:
    marker = f"agentdescent-hostile-{uuid.uuid4().hex}"
    shm = f"agentdescent-hostile-{uuid.uuid4().hex}"
    run = Sandbox(timeout=20).run(python(f"""
        import os, subprocess, sys
        daemon = "import os, time\\nif os.fork(): os._exit(0)\\nos.setsid()\\ntime.sleep(300)"
        subprocess.Popen([sys.executable, "-c", daemon, {marker!r}], start_new_session=True)
        subprocess.Popen([sys.executable, "-c", "while True: pass", {marker!r}])
        holder = "import mmap, time; f = open('/dev/shm/{shm}', 'wb+'); f.truncate(1 << 20); time.sleep(300)"
        subprocess.Popen([sys.executable, "-c", holder, {marker!r}])
        import time; time.sleep(0.5)
        print("started")
    """))
    assert run.ok, run.stderr
    assert wait_until_gone(marker) == []
    assert not Path("/dev/shm", shm).exists()


@needs_ns
def test_a_driver_killed_with_sigkill_takes_its_sandboxes_along_and_the_next_run_sweeps_its_root(
        tmp_path: Path) -> None:
    marker = f"agentdescent-hostile-{uuid.uuid4().hex}"
    roots = tmp_path / "roots"
    roots.mkdir()
    driver = textwrap.dedent(f"""
        import sys, tempfile
        tempfile.tempdir = {str(roots)!r}
        from agentdescent.code import Sandbox
        Sandbox(timeout=120).run([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)",
                                  {marker!r}])
    """)
    for how in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen([sys.executable, "-c", driver], cwd=REPO)
        deadline = time.monotonic() + 30
        while not running_with(marker):
            assert time.monotonic() < deadline and proc.poll() is None, "the sandboxed command never started"
            time.sleep(0.05)
        proc.send_signal(how)
        proc.wait(30)
        assert wait_until_gone(marker) == [], f"the command outlived its driver killed by {how.name}"
    left = [p.name for p in roots.iterdir()]
    sweep = textwrap.dedent(f"""
        import tempfile
        tempfile.tempdir = {str(roots)!r}
        from agentdescent.code import Sandbox
        print(Sandbox(timeout=20).run(["true"]).ok)
    """)
    done = subprocess.run([sys.executable, "-c", sweep], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True"], done.stdout + done.stderr
    assert list(roots.iterdir()) == [], f"left by the killed drivers: {left}; after the sweep: {list(roots.iterdir())}"


def test_a_root_nested_thousands_deep_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where work/ is the command's (no namespaces: the older route), it can nest folders 1,500 deep there."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real = probe_module._platform()
    monkeypatch.setattr(sandbox_module, "_platform", lambda: dataclasses.replace(real, ns=None, identity=None))
    run = Sandbox(timeout=60).run(python("""
        import os
        fd = os.open(".", os.O_RDONLY)
        for _ in range(1500):
            os.mkdir("d", dir_fd=fd)
            fd = os.open("d", os.O_RDONLY, dir_fd=fd)
        print("deep")
    """))
    assert run.stdout.strip() == "deep", run.stderr
    assert list(tmp_path.iterdir()) == []


def test_removal_holds_against_depth_unreadable_folders_fifos_and_links(tmp_path: Path) -> None:
    from agentdescent.code.roots import _remove_tree

    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    root = tmp_path / "agentdescent-sandbox-left"
    fd = os.open(tmp_path, os.O_RDONLY)
    os.mkdir(root.name, dir_fd=fd)
    fd = os.open(root.name, os.O_RDONLY, dir_fd=fd)
    for depth in range(1500):
        os.mkdir("d", dir_fd=fd)
        if depth == 700:
            os.mkfifo("fifo", dir_fd=fd)
            os.symlink(str(victim), "link", dir_fd=fd)
        next_fd = os.open("d", os.O_RDONLY, dir_fd=fd)
        if depth % 300 == 0:
            os.chmod("d", 0, dir_fd=fd)
        os.close(fd)
        fd = next_fd
    os.close(fd)
    _remove_tree(str(root))
    assert not root.exists()
    assert victim.read_text() == "kept"


# --------------------------------------------------------------------------- limits for the whole sandbox


@needs_ns
@needs_cgroup
def test_memory_is_limited_for_the_whole_sandbox_not_per_process() -> None:
    """Four children of 400 MB each fit a 1,024 MB limit per process, not 1,024 MB for all."""
    run = Sandbox(timeout=60, memory_mb=1024).run(python("""
        import subprocess, sys
        child = "b = bytearray(400 * 1024 * 1024)\\nimport time; time.sleep(3)\\nprint('kept')"
        procs = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(4)]
        codes = [p.wait() for p in procs]
        print("codes", *codes)
    """))
    codes = [int(c) for c in run.stdout.split("codes", 1)[1].split()] if "codes" in run.stdout else []
    assert run.signal == signal.SIGKILL or any(c != 0 for c in codes), (run.stdout, run.stderr)


@needs_ns
@needs_cgroup
def test_processes_are_limited_for_the_whole_sandbox() -> None:
    run = Sandbox(timeout=60, max_processes=32).run(python("""
        import subprocess, sys
        started = []
        try:
            for _ in range(100):
                started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"]))
        except OSError as exc:
            print("stopped at", len(started), exc.errno)
        for p in started:
            p.kill()
    """))
    assert run.stdout.startswith("stopped at"), run.stdout + run.stderr
    assert int(run.stdout.split()[2]) < 32


@needs_ns
def test_scratch_space_is_limited() -> None:
    run = Sandbox(timeout=60, disk_mb=32, file_mb=None).run(python("""
        import os
        written = 0
        try:
            with open(os.path.join(os.environ["TMPDIR"], "big"), "wb") as handle:
                for _ in range(200):
                    handle.write(b"x" * (1 << 20))
                    handle.flush()
                    written += 1
        except OSError as exc:
            print("full after", written, exc.errno)
    """))
    assert run.stdout.startswith("full after"), run.stdout + run.stderr
    assert int(run.stdout.split()[2]) <= 32


# --------------------------------------------------------------------------- without Landlock


@needs_ns
@needs_identity
def test_without_landlock_the_identity_is_still_dropped_and_nothing_outside_written(
        outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = probe_module._platform()
    monkeypatch.setattr(sandbox_module, "_platform", lambda: dataclasses.replace(real, landlock_abi=0))
    box = Sandbox(timeout=20)
    assert "nobody" in box.protections["identity"]
    marker = f"hostile-{uuid.uuid4().hex}"
    run = box.run(["/bin/sh", "-c", f"id -u; grep '^CapEff' /proc/$$/status; echo x > /tmp/{marker} && echo WROTE-TMP;"
                                    f" echo x > {outside}/planted && echo WROTE-OUTSIDE; true"])
    assert run.ok, run.stderr
    lines = run.stdout.split("\n")
    assert lines[0] == str(real.identity[0])
    assert lines[1].split()[1] == "0" * 16
    assert "WROTE-OUTSIDE" not in run.stdout
    assert not Path("/tmp", marker).exists()  # a private /tmp: what it wrote there went with it
    assert list(outside.iterdir()) == []


def test_the_sweep_removes_what_dead_owners_left_and_nothing_else(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from agentdescent.code import roots

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(roots, "_swept", __import__("threading").Event())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(dead.stdout)
    left = [tmp_path / f"agentdescent-sandbox-{gone}-1-abc", tmp_path / f"agentdescent-project-{gone}-1-def"]
    kept = [tmp_path / f"{roots._owner_prefix()}live", tmp_path / f"{roots._owner_prefix(roots._PROJECT_PREFIX)}live",
            tmp_path / "agentdescent-sandbox-old-style", tmp_path / "unrelated"]
    for folder in left + kept:
        (folder / "sub").mkdir(parents=True)
    assert Sandbox(timeout=20).run(["true"]).ok
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in kept)
