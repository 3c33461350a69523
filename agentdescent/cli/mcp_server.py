"""``agentdescent mcp [--root DIR]``: the command line as an MCP server over stdio.

An MCP client (an assistant, an IDE) drives runs through tools that mirror the commands:
``init``, ``plan``, ``run``, ``resume``, ``status``, ``show``, ``eval``, ``export`` and
``report``. A tool is a command line: its arguments become the command's flags, parsed by
the same parser and run by the same error boundary (`agentdescent.cli.main._main`, handed
in as ``call``), so a tool validates, answers and refuses exactly as the command does; a
refusal is the tool result ``isError`` with the command's one-line message. The commands
that call a model (``run``, ``resume``, ``eval``, ``plan --probe``) run as a child
``agentdescent`` process: a long ``run`` reports one MCP progress notification per round
(read off ``rounds.jsonl``), and the client's cancellation (or ``seconds`` running out)
sends the child SIGINT, which ends it as Ctrl-C does (progress saved, status
``interrupted``, resumable).

It owns the tools, the root every path argument must stay inside (no ``..``, no path
outside it, no symlink leading out) and the capture of each command's output. It must not
reimplement a command, import ``mcp`` anywhere but inside `serve` (the package imports
without the ``mcp`` extra), write to the process's stdout (the MCP wire) or return a
secret: keys stay in the environment, and every line returned is `redact`-ed again.
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations, and `Context`
# is imported inside `serve` only.
import contextlib
import inspect
import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._version import VERSION
from ..errors import UsageError
from .rundir import RunDir
from .runspec import redact

__all__ = ["INSTALL_HINT", "PATH_ARGUMENTS", "serve"]

#: What `agentdescent mcp` says when the extra is missing.
INSTALL_HINT = ("agentdescent mcp needs the MCP SDK: pip install -e \".[mcp]\" in a checkout of agentdescent "
                "(or pip install \"mcp==2.3.0\")")
#: The tool arguments that name a file or folder: each must stay inside the root.
PATH_ARGUMENTS = ("run_dir", "tasks", "test_tasks", "initial", "output", "json_file")
#: A tool argument whose flag is not ``--`` + its name with dashes.
_FLAGS = {"asynchronous": "--async", "json_file": "--json"}
#: Seconds between two looks at a running child's ``rounds.jsonl``.
_POLL = 0.1
#: Seconds a child stopped by SIGINT has to wind down before it is killed.
_WIND_DOWN = 60.0

Call = Callable[[list[str]], int]


class Refused(Exception):
    """A tool call refused before any command ran (a path outside the root); its text is the one line."""


def inside(root: Path, value: str, name: str) -> str:
    """``value`` (relative to ``root``, or absolute) as an absolute path inside ``root``, else `Refused`.

    ``..`` is refused outright, and so is a path that resolves outside the root (a symlink
    out included): only what lies under the root is reachable.
    """
    flag = "RUN_DIR" if name == "run_dir" else _flag(name)
    path = Path(value)
    if ".." in path.parts:
        raise Refused(f"{flag} {value}: '..' is refused; give a path inside the server's root {root}")
    full = path if path.is_absolute() else root / path
    real = full.resolve()
    if not real.is_relative_to(root.resolve()):
        how = f" (it leads to {real})" if full.absolute().is_relative_to(root) else ""
        raise Refused(f"{flag} {value}: outside the server's root {root}{how}; only paths under the root given "
                      "to `agentdescent mcp --root` are reachable")
    return str(full)


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def command_line(root: Path, command: str, run_dir: str, options: dict[str, Any]) -> list[str]:
    """The argv of ``agentdescent COMMAND RUN_DIR ...`` for a tool's arguments (None: the flag left out)."""
    argv = [command, inside(root, run_dir, "run_dir")]
    for name, value in options.items():
        if value is None or value is False:
            continue
        flag = _flag(name)
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *(str(v) for v in value)] if name == "diff" else \
                [part for v in value for part in (flag, str(v))]
        else:
            argv += [flag, inside(root, str(value), name) if name in PATH_ARGUMENTS else str(value)]
    return argv


def in_process(call: Call, argv: list[str]) -> tuple[int, str, str]:
    """Run one quick command here (it never calls a model), its stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = call(argv)
    return code, out.getvalue(), err.getvalue()


def last_line(text: str) -> str:
    """The command's one-line message: its last non-empty stderr line (a progress bar's carriage returns cut)."""
    lines = [line.rsplit("\r", 1)[-1].strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    return lines[-1] if lines else "the command failed without a message"


def notes(text: str) -> str:
    """The stderr lines worth returning with a result (a progress bar's lines left out)."""
    kept = [line for line in text.splitlines() if "\r" not in line and "it/s]" not in line and line.strip()]
    return "\n".join(kept)


def serve(root: str, call: Call) -> int:
    """Serve the tools over stdio until the client closes the connection; returns the exit code.

    Args:
        root: the folder every path argument must stay inside.
        call: the command line's boundary (argv -> exit code, one line on stderr on failure).

    Raises:
        UsageError: the ``mcp`` extra is not installed, or ``root`` is not a folder.
    """
    try:
        import anyio
        from mcp.server.mcpserver import Context, MCPServer
        from mcp_types import CallToolResult, TextContent
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    base = Path(root).absolute()
    if not base.is_dir():
        raise UsageError(f"--root {root}: not a folder; give the folder whose run directories the server may reach")

    def result(text: str, error: bool = False) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text=redact(text.strip()) or "(no output)")],
                              is_error=error)

    def quick(command: str, run_dir: str, **options: Any) -> CallToolResult:
        try:
            argv = command_line(base, command, run_dir, options)
        except Refused as exc:
            return result(str(exc), error=True)
        code, out, err = in_process(call, argv)
        if code != 0:
            return result(last_line(err), error=True)
        return result("\n".join(part for part in (notes(err), out) if part.strip()))

    async def child(command: str, run_dir: str, ctx: Context | None, seconds: float | None,
                    **options: Any) -> CallToolResult:
        """Run a command that calls a model as a child process: progress per round, SIGINT on cancel."""
        try:
            argv = command_line(base, command, run_dir, options)
        except Refused as exc:
            return result(str(exc), error=True)
        run = RunDir(argv[1])
        seen = set() if options.get("restart") else _rounds(run)
        process = await anyio.open_process([sys.executable, "-m", "agentdescent", *argv], stdin=subprocess.DEVNULL,
                                           cwd=str(base), env={**os.environ, "PYTHONUNBUFFERED": "1"})
        out, err = bytearray(), bytearray()
        stopped_at: list[float] = []

        async def drain(stream: Any, into: bytearray) -> None:
            async for chunk in stream:
                into.extend(chunk)

        async def report() -> None:
            for row in sorted((r for r in run.rounds() if r.get("round") not in seen),
                              key=lambda r: r.get("round") or 0):
                seen.add(row.get("round"))
                if ctx is not None:
                    planned = _status(run).get("rounds_planned")
                    reward = row.get("held_out_reward")
                    shown = f"{reward:.3f}" if isinstance(reward, (int, float)) else "?"
                    await ctx.report_progress(float(row.get("round") or 0), float(planned) if planned else None,
                                              f"round {row.get('round')}: head v{row.get('head_version')}, "
                                              f"held-out {shown}, {row.get('committed', 0)} commit(s)")

        async def watch() -> None:
            start = time.monotonic()
            while process.returncode is None:
                with contextlib.suppress(UsageError, OSError, ValueError):
                    await report()
                if seconds is not None and not stopped_at and time.monotonic() - start >= seconds:
                    stopped_at.append(time.monotonic())
                    process.send_signal(signal.SIGINT)  # the run ends as after Ctrl-C: interrupted, resumable
                await anyio.sleep(_POLL)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain, process.stdout, out)
                tg.start_soon(drain, process.stderr, err)
                tg.start_soon(watch)
                await process.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):  # the client cancelled: Ctrl-C, then wait for the wind-down
                if process.returncode is None:
                    process.send_signal(signal.SIGINT)
                with anyio.move_on_after(_WIND_DOWN):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            raise
        with contextlib.suppress(UsageError, OSError, ValueError):
            await report()
        code, stdout, stderr = process.returncode, out.decode(errors="replace"), err.decode(errors="replace")
        if code == 130 and stopped_at:  # `seconds` ran out: not a failure
            stdout += "\n" + last_line(stderr)
        elif code != 0:
            return result(last_line(stderr), error=True)
        if command in ("run", "resume"):
            _, status, _ = in_process(call, ["status", argv[1]])
            stdout = stdout.rstrip() + "\n\n" + status
        return result("\n".join(part for part in (notes(stderr) if command == "eval" else "", stdout)
                                if part.strip()))

    server = MCPServer(name="agentdescent", version=VERSION, instructions=(
        "Each tool is the agentdescent command of its name (see `agentdescent COMMAND --help`); paths are "
        f"relative to the server's root, {base}. `run` runs a bounded number of rounds (or seconds) and returns the "
        "status; `resume` goes on with an interrupted or finished run."))

    @server.tool()
    def init(run_dir: str, model: str, tasks: str | None = None, reward: str | None = None,
             strategy: str | None = None, initial: str | None = None, test_tasks: str | None = None,
             proposal: str | None = None, provider: str | None = None, base_url: str | None = None,
             api_key_env: str | None = None, proposer_model: str | None = None,
             proposer_provider: str | None = None, proposer_base_url: str | None = None,
             proposer_api_key_env: str | None = None, seed: int | None = None,
             held_out_frac: float | None = None, stratify: str | None = None,
             false_accept_rate: float | None = None, call_tokens: int | None = None,
             temperature: float | None = None, ledger: str | None = None, ledger_schema: str | None = None,
             run_id: str | None = None, force: bool = False) -> CallToolResult:
        """Make a run directory (`agentdescent init`): spec.json and a copy of the tasks. The API key is never
        given here: name the environment variable holding it (api_key_env). ledger: a postgresql:// DSN
        without a password (the server's PGPASSWORD or PGPASSFILE holds it), with ledger_schema and run_id."""
        given = locals()
        return quick("init", run_dir, **{name: given[name] for name in inspect.signature(init).parameters
                                         if name != "run_dir"})

    @server.tool()
    async def plan(run_dir: str, rounds: int | None = None, workers: int | None = None,
                   max_tokens: int | None = None, probe: bool = False) -> CallToolResult:
        """The calls and tokens a round and the run cost at most (`agentdescent plan`), and what a budget of
        max_tokens covers (a warning when it cannot pay for the starting evaluation); probe spends one call."""
        if probe:
            return await child("plan", run_dir, None, None, rounds=rounds, workers=workers, max_tokens=max_tokens,
                               probe=True)
        return quick("plan", run_dir, rounds=rounds, workers=workers, max_tokens=max_tokens)

    @server.tool()
    async def run(run_dir: str, ctx: Context, rounds: int | None = None, workers: int | None = None,
                  max_tokens: int | None = None, patience: int | None = None, asynchronous: bool = False,
                  restart: bool = False, accept_changed_tasks: bool = False,
                  seconds: float | None = None) -> CallToolResult:
        """Run it (`agentdescent run`) for `rounds` rounds, or until `seconds` pass (then it stops as after Ctrl-C,
        resumable), reporting progress once per round; returns the run's last lines and its status. Cancelling
        the call stops the run as Ctrl-C does: progress saved, status interrupted."""
        if seconds is not None and seconds <= 0:
            return result(f"seconds {seconds}: give a positive number of seconds, or leave it out", error=True)
        return await child("run", run_dir, ctx, seconds, rounds=rounds, workers=workers, max_tokens=max_tokens,
                           patience=patience, asynchronous=asynchronous, restart=restart,
                           accept_changed_tasks=accept_changed_tasks)

    @server.tool()
    async def resume(run_dir: str, ctx: Context, rounds: int | None = None, accept_changed_tasks: bool = False,
                     seconds: float | None = None) -> CallToolResult:
        """Go on with an interrupted, terminated or finished run (`agentdescent resume`), as `run` does."""
        if seconds is not None and seconds <= 0:
            return result(f"seconds {seconds}: give a positive number of seconds, or leave it out", error=True)
        return await child("resume", run_dir, ctx, seconds, rounds=rounds, accept_changed_tasks=accept_changed_tasks)

    @server.tool()
    def status(run_dir: str, verbose: bool = False) -> CallToolResult:
        """running / finished / failed / interrupted / terminated, with progress and the `why` (`agentdescent
        status`); verbose: every round's proposals and decisions."""
        return quick("status", run_dir, verbose=verbose)

    @server.tool()
    def show(run_dir: str, version: int | None = None, diff: list[int] | None = None,
             round: int | None = None) -> CallToolResult:
        """The artifact at a version (default: the head), the diff between two versions [A, B], or round N's
        proposals, decisions and commits (`agentdescent show`)."""
        return quick("show", run_dir, version=version, diff=diff, round=round)

    @server.tool()
    async def eval(run_dir: str, tasks: str | None = None, version: int | None = None, repeats: int | None = None,
                   workers: int | None = None, json_file: str | None = None,
                   force: bool = False) -> CallToolResult:
        """Score a version on tasks the run never saw (`agentdescent eval`); json_file: also write it as JSON,
        outside the run directory."""
        return await child("eval", run_dir, None, None, tasks=tasks, version=version, repeats=repeats,
                           workers=workers, json_file=json_file, force=force)

    @server.tool()
    def export(run_dir: str, output: str, version: int | None = None, force: bool = False) -> CallToolResult:
        """Write the rendered artifact to a file outside the run directory (`agentdescent export -o`); an existing
        file is replaced only with force."""
        return quick("export", run_dir, output=output, version=version, force=force)

    @server.tool()
    def report(run_dir: str, output: str | None = None, force: bool = False) -> CallToolResult:
        """Write one self-contained HTML page about the run (`agentdescent report`) and say where: outside the run
        directory, or its own RUN_DIR/report.html (the default)."""
        return quick("report", run_dir, output=output, force=force)

    server.run("stdio")
    return 0


def _rounds(run: RunDir) -> set[Any]:
    try:
        return {row.get("round") for row in run.rounds()}
    except (UsageError, OSError):
        return set()


def _status(run: RunDir) -> dict[str, Any]:
    try:
        return run.status()
    except (UsageError, OSError, ValueError):
        return {}

