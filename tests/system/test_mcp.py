"""`agentdescent mcp`, driven by the MCP SDK's own client over stdio, as an assistant would.

The server is the real console command in a subprocess (``agentdescent mcp --root TMP``);
the model is the loopback server of agentdescent/testing/llmserver.py, as in tests/system/test_cli.py.
One session goes through a whole run: init, run (a progress notification per round),
status, show, export (and a refused overwrite, in the command line's words), paths the
root does not reach, and a run the client cancels (then interrupted, and resumed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agentdescent.cli.parser import build_parser
from agentdescent.testing.llmserver import LLMServer

from .test_cli import KEY, ROOT, RULE, cli, responder, write_tasks

TOOLS = {"init", "plan", "run", "resume", "status", "show", "eval", "export", "report"}


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def _dests(command: str) -> set[str]:
    """The flags' destinations of a command's parser (what a tool's arguments must mirror)."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {a.dest for a in sub.choices[command]._actions if a.dest != "help"}


async def _session(root: Path, body: Any) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentdescent", "mcp", "--root", str(root)],
                                   env={**os.environ, "CLI_TEST_KEY": KEY, "PYTHONPATH": str(ROOT)})
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await body(session)


def test_a_whole_run_over_mcp(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    write_tasks(root / "tasks.jsonl")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    texts: list[str] = []

    async def body(session: ClientSession) -> None:
        async def call(name: str, **arguments: Any) -> Any:
            result = await session.call_tool(name, arguments)
            texts.append(_text(result))
            return result

        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        for name, tool in tools.items():  # every argument is the command's own flag (`seconds` aside)
            names = {"json" if n == "json_file" else n for n in tool.input_schema["properties"]} - {"seconds"}
            assert names <= _dests(name), name

        made = await call("init", run_dir="run", tasks="tasks.jsonl", model="test-model",
                          base_url=server.openai_base_url, api_key_env="CLI_TEST_KEY", reward="exact")
        assert not made.is_error, _text(made)
        assert (root / "run" / "spec.json").exists()

        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        ran = await session.call_tool("run", {"run_dir": "run", "rounds": 2, "workers": 2},
                                      progress_callback=on_progress)
        texts.append(_text(ran))
        assert not ran.is_error, _text(ran)
        assert [p[:2] for p in progress] == [(1.0, 2.0), (2.0, 2.0)]
        assert "state: finished" in _text(ran)

        status = await call("status", run_dir="run")
        assert "state: finished" in _text(status) and "round: 2 of 2" in _text(status)
        shown = await call("show", run_dir="run")
        assert RULE in _text(shown)
        assert "round 1" in _text(await call("show", run_dir="run", round=1)).lower()
        missing = await call("show", run_dir="run", version=99)
        assert missing.is_error and _text(missing).startswith("agentdescent show: --version 99: no such version")
        bad = await call("show", run_dir="run", version=0)  # refused by the command's own parser
        assert bad.is_error and "argument --version" in _text(bad)

        exported = await call("export", run_dir="run", output="out.md")
        assert not exported.is_error and RULE in (root / "out.md").read_text()
        again = await call("export", run_dir="run", output="out.md")
        by_cli = cli("export", str(root / "run"), "-o", str(root / "out.md"))
        assert again.is_error and by_cli.returncode == 2
        assert _text(again) == by_cli.stderr.strip()  # the command line's one line, word for word
        reported = await call("report", run_dir="run", output="report.html")
        assert not reported.is_error and (root / "report.html").exists()

        for arguments, words in (({"run_dir": "../elsewhere"}, "'..' is refused"),
                                 ({"run_dir": str(outside)}, "outside the server's root"),
                                 ({"run_dir": "link"}, "it leads to")):
            refused = await call("status", **arguments)
            assert refused.is_error and words in _text(refused), _text(refused)
        refused = await call("export", run_dir="run", output="link/out.md")
        assert refused.is_error and "outside the server's root" in _text(refused)
        assert not list(outside.iterdir())

    with LLMServer(responder=responder()) as server:
        anyio.run(_session, root, body)
    assert not any(KEY in text for text in texts)


def test_a_cancelled_run_is_interrupted_and_resumes(tmp_path: Path) -> None:
    write_tasks(tmp_path / "tasks.jsonl")
    states: list[str] = []

    async def body(session: ClientSession) -> None:
        made = await session.call_tool("init", {"run_dir": "slow", "tasks": "tasks.jsonl", "model": "test-model",
                                                "base_url": server.openai_base_url, "api_key_env": "CLI_TEST_KEY"})
        assert not made.is_error, _text(made)
        first_round = anyio.Event()

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            first_round.set()

        async with anyio.create_task_group() as tg:
            async def long_run() -> None:
                await session.call_tool("run", {"run_dir": "slow", "rounds": 500}, progress_callback=on_progress)

            tg.start_soon(long_run)
            await first_round.wait()
            tg.cancel_scope.cancel()  # the client gives up: the SDK sends notifications/cancelled

        for _ in range(600):  # the child winds down as after Ctrl-C
            text = _text(await session.call_tool("status", {"run_dir": "slow"}))
            if not text.startswith("state: running"):
                break
            await anyio.sleep(0.05)
        states.append(text)
        resumed = await session.call_tool("resume", {"run_dir": "slow", "rounds": 1})
        assert not resumed.is_error, _text(resumed)
        states.append(_text(resumed))

    with LLMServer(responder=responder(delay=0.02)) as server:
        anyio.run(_session, tmp_path, body)
    interrupted, resumed = states
    assert interrupted.startswith("state: interrupted (SIGINT)") and "agentdescent resume" in interrupted
    assert "state: finished" in resumed


def test_without_the_extra_the_command_says_how_to_install_it() -> None:
    code = "import sys; sys.modules['mcp'] = None; from agentdescent.cli import main; sys.exit(main(['mcp']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and 'pip install -e ".[mcp]"' in proc.stderr
