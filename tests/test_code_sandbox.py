"""The sandbox, with real processes: its folder, environment, limits, kills and isolation.

Every test here starts real commands (``python -c`` scripts) through `Sandbox.run`; the
isolation tests look for a real escape (a file written outside, a secret read, a
connection made, a signal received) and fail if they find one. Tests that need a
protection this machine does not offer are skipped, saying which.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from agentdescent.code import sandbox as sandbox_module
from agentdescent.code.sandbox import Sandbox, SandboxRun
from agentdescent.errors import InvalidArgument, InvalidArgumentType, SandboxUnavailable

from .sandbox_processes import python, running_with, sleeper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the sandbox's isolation tests need Linux (Landlock, namespaces)")

SECRET = "sk-test-SECRET-5f3a9c"


def landlock_abi() -> int:
    return sandbox_module._platform().landlock_abi


def test_runs_in_work_with_base_copied_tree_written_and_files_read_back(tmp_path: Path) -> None:
    base = tmp_path / "project"
    (base / "pkg").mkdir(parents=True)
    (base / "pkg" / "mod.py").write_text("VALUE = 'from base'\n")
    (base / "keep.txt").write_text("kept\n")
    (base / ".git").mkdir()
    (base / ".git" / "HEAD").write_text("ref\n")
    (base / "__pycache__").mkdir()
    (base / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (base / "link").symlink_to(tmp_path)  # copied as a link, never followed
    script = """
        import json, os, sys
        sys.path.insert(0, ".")
        from pkg import mod
        seen = {"cwd": os.getcwd(), "value": mod.VALUE, "new": open("pkg/new.txt").read(),
                "keep": open("keep.txt").read(), "git": os.path.exists(".git"),
                "pycache": os.path.exists("__pycache__"), "link": os.path.islink("link")}
        open("out/result.json", "w").write(json.dumps(seen))
        print(os.getcwd())
    """
    run = Sandbox(timeout=20).run(python(script), base=base,
                                  tree={"pkg/mod.py": "VALUE = 'from tree'\n", "pkg/new.txt": "new",
                                        "out/.keep": ""},
                                  read_back=["out/result.json", "missing.txt"])
    assert run.ok, run.stderr
    assert run.describe().startswith("exit 0 after ")
    seen = json.loads(run.files["out/result.json"])
    assert set(run.files) == {"out/result.json"}
    assert seen == {"cwd": run.stdout.strip(), "value": "from tree", "new": "new", "keep": "kept\n",
                    "git": False, "pycache": False, "link": True}
    work = Path(run.stdout.strip())
    assert work.name == "work" and work.parent.name.startswith("agentdescent-sandbox-")
    assert not work.parent.exists()  # the root is gone
    assert (base / "pkg" / "mod.py").read_text() == "VALUE = 'from base'\n"  # base untouched


def test_home_and_tmp_are_inside_and_writes_outside_fail(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    targets = [Path(pwd.getpwuid(os.getuid()).pw_dir) / f"agentdescent-escape-{tag}",
               tmp_path / f"escape-{tag}.txt",
               Path(__file__).parents[1] / f"escape-{tag}.txt",
               Path(tempfile.gettempdir()) / f"agentdescent-escape-{tag}.txt"]
    script = f"""
        import json, os, tempfile
        result = {{"home": os.path.expanduser("~"), "HOME": os.environ["HOME"],
                   "TMPDIR": os.environ["TMPDIR"], "tempdir": tempfile.gettempdir(), "cwd": os.getcwd()}}
        for target in {[str(t) for t in targets]!r}:
            try:
                with open(target, "w") as handle:
                    handle.write("escaped")
                result[target] = "WRITTEN"
            except OSError as exc:
                result[target] = f"refused: {{exc}}"
        with open(os.path.join(os.environ["TMPDIR"], "inside.txt"), "w") as handle:
            handle.write("fine")
        print(json.dumps(result))
    """
    try:
        run = Sandbox(timeout=20).run(python(script))
        assert run.ok, run.stderr
        result = json.loads(run.stdout)
        root = Path(result.pop("cwd")).parent
        for name in ("home", "HOME", "TMPDIR", "tempdir"):
            assert Path(result.pop(name)).parent == root, name
        assert all(outcome.startswith("refused") for outcome in result.values()), result
    finally:
        escaped = [t for t in targets if t.exists()]
        for target in escaped:
            target.unlink()
    assert not escaped, f"the sandbox wrote outside its folder: {escaped}"


def test_no_secret_reaches_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET + "-anthropic")
    # /proc/<pid>/environ shows the environment a process started with, so a process of the
    # engine's started now (not the test process itself) holds the secret there.
    holder = subprocess.Popen(["sleep", "60"])
    script = """
        import glob, os, sys
        print(dict(os.environ))
        found = []
        paths = [f"/proc/{sys.argv[1]}/environ", f"/proc/{os.getppid()}/environ", "/proc/1/environ",
                 "/proc/self/environ"]
        try:
            paths += glob.glob("/proc/*/environ") + [f"/proc/{p}/environ" for p in os.listdir("/proc")]
        except OSError as exc:
            print("listing /proc:", exc)
        for path in paths:
            try:
                found.append(open(path, "rb").read().decode("utf-8", "replace"))
                print("read", path)
            except OSError as exc:
                print("refused", path, exc)
        open("found.txt", "w").write("\\n".join(found))
    """
    try:
        for _ in range(100):  # its exec may not have filled in /proc/<pid>/environ yet
            if SECRET in Path(f"/proc/{holder.pid}/environ").read_text(errors="replace"):
                break
            time.sleep(0.02)
        else:
            pytest.fail("the holder process never showed the secret in its /proc entry")
        run = Sandbox(timeout=20).run([*python(script), str(holder.pid)], read_back=["found.txt"])
    finally:
        holder.kill()
        holder.wait()
    assert run.ok, run.stderr
    assert f"refused /proc/{holder.pid}/environ" in run.stdout
    assert "read /proc/self/environ" in run.stdout  # its own entry stays readable
    for text in (run.stdout, run.stderr, *run.files.values()):
        assert SECRET not in text


def test_an_infinite_loop_is_killed_with_its_whole_process_group() -> None:
    """Neither process would ever end by itself: their being gone when `run` returns is the kill.

    Order, not speed: the run lasted at least its timeout (not killed early) and lies within
    the caller's span; how long the kill takes on a busy machine is not this test's to bound.
    """
    marker = f"agentdescent-loop-{uuid.uuid4().hex}"
    script = f"""
        import os, subprocess, sys
        {sleeper(marker)}
        print("started", flush=True)
        while True:
            pass
    """
    start = time.monotonic()
    run = Sandbox(timeout=1.5, grace=0.5).run([*python(script), marker])
    took = time.monotonic() - start
    assert run.timed_out and run.returncode is None and run.signal == signal.SIGKILL
    assert not run.ok
    assert run.describe() == "killed after its 1.5 s timeout (+0.5 s grace)"
    assert 1.5 <= run.seconds <= took
    assert run.stdout.split() == ["started"]
    assert running_with(marker) == []  # the loop and its 300 s sleeper: the whole group, at the timeout


def test_a_stray_background_child_is_killed_after_a_normal_exit() -> None:
    marker = f"agentdescent-stray-{uuid.uuid4().hex}"
    run = Sandbox(timeout=20).run(python(f"import subprocess, sys; {sleeper(marker)}"))
    assert run.ok, run.stderr
    assert running_with(marker) == []


def test_stop_ends_a_run_on_another_thread_and_removes_its_root(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """What a caller giving up does (`TestSuite.close` after Ctrl-C): the run's group killed, its root gone."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the roots go here
    box = Sandbox(timeout=60)
    marker = f"agentdescent-stopped-{uuid.uuid4().hex}"
    script = f"""
        import os, subprocess, sys, time
        {sleeper(marker)}
        with open("pids", "w") as handle:
            handle.write("started")
        time.sleep(300)
    """
    runs: list[SandboxRun] = []
    thread = threading.Thread(target=lambda: runs.append(box.run([*python(script), marker], read_back=["pids"])),
                              daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not any(p.stat().st_size for p in tmp_path.glob("agentdescent-sandbox-*/work/pids")):
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    assert running_with(marker)  # the command and its sleeper, seen from the host
    assert Sandbox().stop() == 0  # another sandbox's runs are not its own
    assert box.stop() == 1
    thread.join(30)
    [run] = runs
    assert run.signal == signal.SIGKILL and not run.timed_out
    assert list(tmp_path.iterdir()) == []
    assert running_with(marker) == []
    assert box.stop() == 0


def test_a_memory_hog_fails_and_the_engine_is_fine() -> None:
    run = Sandbox(timeout=20, memory_mb=256).run(python("""
        data = bytearray(4 * 1024 ** 3)
        print("allocated", len(data))
    """))
    assert not run.ok
    assert "MemoryError" in run.stderr or run.signal is not None, run.describe()
    assert "allocated" not in run.stdout
    assert bytearray(64 * 1024 ** 2)  # this process still allocates freely


def test_cpu_limit_ends_a_busy_loop_with_sigxcpu() -> None:
    run = Sandbox(timeout=120, cpu_seconds=1).run(python("while True: pass"))
    # the CPU limit ended it, not the (far) wall-clock timeout; and a CPU second takes a wall second at least
    assert not run.timed_out and run.signal in (signal.SIGXCPU, signal.SIGKILL), run.describe()
    assert run.seconds >= 1.0
    assert "CPU limit" in run.describe() or "SIGKILL" in run.describe()


@pytest.fixture()
def server() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(10)
    yield listener
    listener.close()


CONNECT = """
    import socket, sys
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
        print("connected")
    except OSError as exc:
        print("refused:", exc)
"""


def test_the_network_is_cut_off(server: socket.socket) -> None:
    run = Sandbox(timeout=20).run([*python(CONNECT), str(server.getsockname()[1])])
    assert run.ok, run.stderr
    assert run.stdout.startswith("refused:"), run.stdout


def test_network_true_lets_the_command_connect(server: socket.socket) -> None:
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(server.accept()[0].close()))
    thread.start()
    run = Sandbox(timeout=20, network=True).run([*python(CONNECT), str(server.getsockname()[1])])
    thread.join(15)
    assert run.stdout.strip() == "connected", run.stdout + run.stderr
    assert accepted


@pytest.mark.skipif(not sys.platform.startswith("linux") or landlock_abi() < 6,
                    reason="signal scoping needs Landlock ABI 6 (Linux 6.12 or later)")
def test_the_command_cannot_signal_the_engine() -> None:
    received = []
    previous = signal.signal(signal.SIGTERM, lambda *_: received.append(True))
    try:
        run = Sandbox(timeout=20).run(python("""
            import os, signal
            try:
                os.kill(os.getppid(), signal.SIGTERM)
                print("sent")
            except OSError as exc:
                print("refused:", exc)
        """))
        time.sleep(0.2)  # a signal that got through would have arrived by now
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not received
    assert run.stdout.startswith("refused:"), run.stdout


def test_capabilities_are_dropped_when_running_as_root() -> None:
    if not sandbox_module._platform().caps:
        pytest.skip("only root can empty the capability bounding set")
    run = Sandbox(timeout=20).run(python("""
        print([line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")][0])
    """))
    assert run.stdout.strip() == "0000000000000000", run.stdout + run.stderr


def test_multiprocessing_works_on_a_private_dev_shm() -> None:
    if not sandbox_module._platform().shm:
        pytest.skip("a private /dev/shm needs a mount namespace (root)")
    name = f"agentdescent-shm-{uuid.uuid4().hex}"
    run = Sandbox(timeout=20).run(python(f"""
        import multiprocessing
        with multiprocessing.Pool(2) as pool:
            print(pool.map(abs, [-1, -2]))
        open("/dev/shm/{name}", "w").write("x")
    """))
    leaked = Path("/dev/shm", name)
    if leaked.exists():
        leaked.unlink()
        pytest.fail("the sandbox's /dev/shm is the engine's")
    assert run.ok, run.stderr
    assert run.stdout.strip() == "[1, 2]"


def test_other_sandboxes_folders_are_unreadable() -> None:
    if not landlock_abi():
        pytest.skip("only Landlock hides other sandboxes' folders")
    other = Path(tempfile.mkdtemp(prefix="agentdescent-sandbox-"))
    try:
        (other / "state.py").write_text("another candidate's code")
        run = Sandbox(timeout=20).run(python(f"""
            try:
                print(open({str(other / "state.py")!r}).read())
            except OSError as exc:
                print("refused:", exc)
        """))
    finally:
        (other / "state.py").unlink()
        other.rmdir()
    assert run.stdout.startswith("refused:"), run.stdout


def test_read_back_does_not_follow_a_link_out_of_the_tree(tmp_path: Path) -> None:
    outside = tmp_path / "private.txt"
    outside.write_text("not for the sandbox")
    run = Sandbox(timeout=20).run(python(f"""
        import contextlib, os
        with contextlib.suppress(OSError):  # where work/ is not the command's, it cannot even try
            os.remove("leak.txt")
            os.symlink({str(outside)!r}, "leak.txt")
    """), read_back=["leak.txt"])
    assert run.ok, run.stderr
    assert run.files == {}


def test_output_and_read_back_never_follow_links_the_command_planted(tmp_path: Path) -> None:
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "note.txt").write_text("PRIVATE-MARKER")
    run = Sandbox(timeout=20).run(python(f"""
        import contextlib, os
        print("printed")
        with contextlib.suppress(OSError):  # where the command is not the root's owner, it cannot even try
            os.remove("../stdout")
            os.symlink({str(outside / "note.txt")!r}, "../stdout")
        with contextlib.suppress(OSError):
            os.symlink({str(outside)!r}, "linked")
    """), read_back=["linked/note.txt"])
    assert run.ok, run.stderr
    assert run.stdout == "printed\n"
    assert run.files == {}


def test_a_tree_path_through_a_link_in_base_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / "out").symlink_to(tmp_path)
    with pytest.raises(InvalidArgument, match="leads outside"):
        Sandbox().run(["true"], base=base, tree={"out/planted.txt": "x"})
    assert not (tmp_path / "planted.txt").exists()


def test_long_output_keeps_head_and_tail() -> None:
    run = Sandbox(timeout=20, max_output_chars=1000).run(python("""
        import sys
        print("HEAD" + "x" * 50_000 + "TAIL")
        sys.stderr.write("short")
    """))
    assert run.stdout.startswith("HEAD") and run.stdout.rstrip().endswith("TAIL")
    assert "[... 49009 characters cut ...]" in run.stdout
    assert len(run.stdout) < 1100
    assert run.stderr == "short"


def test_runs_from_many_threads_at_once() -> None:
    box = Sandbox(timeout=20)
    results: dict[int, SandboxRun] = {}

    def one(i: int) -> None:
        results[i] = box.run(python("import sys; print(open('n.txt').read())"), tree={"n.txt": str(i)})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert {i: r.stdout.strip() for i, r in results.items()} == {i: str(i) for i in range(6)}


def test_a_missing_program_and_a_failing_launcher_step_are_reported() -> None:
    run = Sandbox(timeout=20).run(["agentdescent-no-such-program"])
    assert run.returncode == 127 and "cannot run 'agentdescent-no-such-program'" in run.stderr
    assert "(agentdescent sandbox: cannot run" in run.describe()
    config = {"landlock": {"abi": max(landlock_abi(), 1), "root": "/nonexistent-agentdescent", "prefix": "x"}}
    done = subprocess.run([sys.executable, "-I", sandbox_module._JAIL, json.dumps(config), "--", "true"],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 126
    assert done.stderr.startswith("agentdescent sandbox: "), done.stderr


def test_without_landlock_the_python_guard_refuses_writes_outside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = sandbox_module._platform()
    weak = dataclasses.replace(real, landlock_abi=0, caps=False, nobody=None)
    monkeypatch.setattr(sandbox_module, "_platform", lambda: weak)
    box = Sandbox(timeout=20)
    assert "best-effort" in box.protections["filesystem"]
    target = tmp_path / "escape.txt"
    run = box.run(python(f"""
        import os
        open("inside.txt", "w").write("fine")
        for attempt in (lambda: open({str(target)!r}, "w"), lambda: os.mkdir({str(tmp_path / "d")!r}),
                        lambda: open("/proc/1/environ").read()):
            try:
                attempt()
                print("ALLOWED")
            except PermissionError as exc:
                print("refused:", exc)
    """), read_back=["inside.txt"])
    assert run.ok, run.stderr
    assert run.files == {"inside.txt": "fine"}
    assert run.stdout.count("refused: agentdescent sandbox:") == 3, run.stdout
    assert not target.exists() and not (tmp_path / "d").exists()


WRITE_OUTSIDE = """
    import sys
    try:
        open(sys.argv[1], "w").write("escaped")
        print("WRITTEN")
    except OSError as exc:
        print("refused:", exc)
"""


@pytest.mark.parametrize("abi", [1, 2, 3, 4, 5, 6])
def test_older_landlock_abis_still_confine_writes(abi: int, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    real = sandbox_module._platform()
    if real.landlock_abi < abi:
        pytest.skip(f"this kernel offers Landlock ABI {real.landlock_abi}, not {abi}")
    monkeypatch.setattr(sandbox_module, "_platform", lambda: dataclasses.replace(real, landlock_abi=abi))
    target = tmp_path / "escape.txt"
    run = Sandbox(timeout=20).run([*python(WRITE_OUTSIDE), str(target)])
    assert run.stdout.startswith("refused:"), run.stdout + run.stderr
    assert not target.exists()


def test_without_a_network_namespace_landlock_refuses_tcp(server: socket.socket,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    real = sandbox_module._platform()
    if real.landlock_abi < 4:
        pytest.skip("Landlock network rules need ABI 4 (Linux 6.7 or later)")
    monkeypatch.setattr(sandbox_module, "_platform", lambda: dataclasses.replace(real, net=None))
    box = Sandbox(timeout=20)
    assert box.protections["network"].startswith("Landlock")
    run = box.run([*python(CONNECT), str(server.getsockname()[1])])
    assert run.stdout.startswith("refused:"), run.stdout + run.stderr


def test_the_user_namespace_route_cuts_the_network_off(server: socket.socket,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = sandbox_module._platform()
    if not real.net:
        pytest.skip("no network namespace can be had here")
    monkeypatch.setattr(sandbox_module, "_platform", lambda: dataclasses.replace(real, net="userns"))
    run = Sandbox(timeout=20).run([*python(CONNECT), str(server.getsockname()[1])])
    if run.returncode == 126 and "user namespace" in run.stderr:
        pytest.skip(f"user namespaces are not allowed here: {run.stderr.strip()}")
    assert run.stdout.startswith("refused:"), run.stdout + run.stderr


def test_without_landlock_root_drops_to_nobody(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no nobody user here")
    if os.geteuid() != 0:
        pytest.skip("only root can drop to another user")
    real = sandbox_module._platform()
    weak = dataclasses.replace(real, landlock_abi=0, caps=False, nobody=(nobody.pw_uid, nobody.pw_gid),
                               ns=None, identity=None)  # neither Landlock nor namespaces: the old fallback
    monkeypatch.setattr(sandbox_module, "_platform", lambda: weak)
    box = Sandbox(timeout=20)
    assert "nobody" in box.protections["filesystem"]
    target = tmp_path / "escape.txt"  # tmp_path is root's: nobody cannot write there
    run = box.run(["/bin/sh", "-c", f'id -u; echo fine > "$TMPDIR/x" && echo ok; echo no > "{target}"'])
    assert run.stdout.split() == [str(nobody.pw_uid), "ok"], run.stdout + run.stderr
    assert not target.exists()


def test_require_isolation_refuses_a_platform_without_landlock(monkeypatch: pytest.MonkeyPatch) -> None:
    if landlock_abi():
        Sandbox(require_isolation=True)  # this machine has it: no error
    bare = sandbox_module._Platform(system="Linux", posix=True, rlimits=("AS",))
    monkeypatch.setattr(sandbox_module, "_platform", lambda: bare)
    with pytest.raises(SandboxUnavailable, match="Landlock") as caught:
        Sandbox(require_isolation=True)
    assert "network" in str(caught.value) and "require_isolation=False" in str(caught.value)
    assert "not isolated" in Sandbox().protections["network"]


def test_protections_name_landlock_on_this_machine() -> None:
    if not landlock_abi():
        pytest.skip("this machine has no Landlock")
    protections = Sandbox().protections
    assert set(protections) == {"filesystem", "identity", "secrets", "network", "limits", "processes",
                                "environment"}
    assert f"Landlock (ABI {landlock_abi()})" in protections["filesystem"]
    assert "not isolated" in Sandbox(network=True).protections["network"]


@pytest.mark.parametrize(("kwargs", "error", "text"), [
    ({"timeout": 0}, InvalidArgument, "timeout=0"),
    ({"timeout": "5"}, InvalidArgumentType, "timeout='5'"),
    ({"grace": -1}, InvalidArgument, "grace=-1"),
    ({"memory_mb": 32}, InvalidArgument, "memory_mb=32"),
    ({"memory_mb": True}, InvalidArgumentType, "memory_mb=True"),
    ({"cpu_seconds": 0}, InvalidArgument, "cpu_seconds=0"),
    ({"max_output_chars": 10}, InvalidArgument, "max_output_chars=10"),
    ({"network": 1}, InvalidArgumentType, "network=1"),
    ({"env": {"HOME": "/root"}}, InvalidArgument, "HOME always points inside"),
    ({"env": {"1BAD": "x"}}, InvalidArgument, "not a variable name"),
])
def test_bad_knobs_are_refused(kwargs: dict, error: type, text: str) -> None:
    with pytest.raises(error, match=text.replace("(", r"\(")):
        Sandbox(**kwargs)


@pytest.mark.parametrize("env", [{"OPENAI_API_KEY": "plain-value-123"}, {"MY_TOKEN": "plain-value-123"},
                                 {"DB_PASSWORD": "plain-value-123"}, {"HARMLESS": SECRET}])
def test_env_that_looks_like_a_secret_is_refused_without_echoing_it(env: dict) -> None:
    with pytest.raises(InvalidArgument, match="looks like a secret") as caught:
        Sandbox(env=env)
    value = next(iter(env.values()))
    assert value not in str(caught.value) and "5f3a9c" not in str(caught.value)


def test_extra_env_reaches_the_command() -> None:
    run = Sandbox(timeout=20, env={"MODE": "ci"}).run(python("import os; print(os.environ['MODE'])"))
    assert run.stdout.strip() == "ci"


@pytest.mark.parametrize("path", ["../up.txt", "/etc/passwd", "a/../../b", "", "."])
def test_bad_tree_and_read_back_paths_are_refused(path: str) -> None:
    with pytest.raises(InvalidArgument, match="relative path"):
        Sandbox().run(["true"], tree={path: "x"})
    with pytest.raises(InvalidArgument, match="relative path"):
        Sandbox().run(["true"], read_back=[path])


def test_bad_run_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentType):
        Sandbox().run("echo hi")
    with pytest.raises(InvalidArgument):
        Sandbox().run([])
    with pytest.raises(InvalidArgumentType):
        Sandbox().run(["true"], tree={"a.txt": b"bytes"})
    with pytest.raises(InvalidArgument, match="not a directory"):
        Sandbox().run(["true"], base=tmp_path / "missing")
    with pytest.raises(InvalidArgument, match="timeout"):
        Sandbox().run(["true"], timeout=-1)


def test_describe_names_the_limit_a_signal_suggests() -> None:
    limits = {"timeout": 2.0, "grace": 1.0, "memory_mb": 512, "cpu_seconds": 3, "file_mb": 64}
    killed = SandboxRun(returncode=-9, timed_out=False, seconds=3.1, stdout="", stderr="", files={},
                        signal=signal.SIGKILL, limits=limits)
    assert killed.describe() == "killed by SIGKILL after 3.1 s (over the 512 MB memory limit?)"
    failed = SandboxRun(returncode=1, timed_out=False, seconds=0.5, stdout="", stderr="", files={})
    assert failed.describe() == "exit 1 after 0.5 s" and not failed.ok
    assert "Sandbox(timeout=5" in repr(Sandbox(timeout=5, env={"MODE": "x"})) and "MODE" in repr(Sandbox(env={"MODE": "x"}))
