"""Faults end runs fast and say why: both runtimes against a loopback server that fails on purpose.

A real OpenAI-compatible provider talks to a real ``ThreadingHTTPServer`` on 127.0.0.1
(agentdescent/testing/llmserver.py). Backoffs are shortened so nothing waits for long; what the tests
pin is the number of requests a failure costs and what the result says, never wall time.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agentdescent import AggregatorConfig, LLMAgent, SqliteLedger, Task, async_evolve, evolve
from agentdescent.engine.evaluation import look_width
from agentdescent.providers import openai_compatible
from agentdescent.testing.llmserver import LLMServer, Reply, openai_body

KEY = "sk-loopback-0123456789abcdef"
N_WORKERS = 4
ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("openai")


def tasks(n: int = 40) -> list[Task]:
    return [Task(f"q{i:02d}", f"What is {i} + {i}?", {"answer": str(2 * i)}) for i in range(n)]


def reward(task: Task, output: str) -> float:
    return 1.0 if task.meta["answer"] in output else 0.0


def agent_for(base_url: str, **provider_options: Any) -> LLMAgent:
    options = dict(initial_backoff=0.001, max_backoff=0.002)
    options.update(provider_options)
    return LLMAgent(openai_compatible("test-model", base_url=base_url, api_key=KEY, **options))


def run_engine(runtime: str, agent: LLMAgent, *, rounds: int = 10, **kwargs: Any):
    if runtime == "sync":
        return evolve(tasks(), reward, agent=agent, rounds=rounds, n_workers=N_WORKERS, **kwargs)
    return async_evolve(tasks(), reward, agent=agent, n_workers=N_WORKERS, max_seconds=30,
                        max_rollouts=rounds * N_WORKERS, **kwargs)


@pytest.fixture(params=["sync", "async"])
def runtime(request: pytest.FixtureRequest) -> str:
    return request.param


def in_flight(runtime: str) -> int:
    """Calls that may be on the wire at once: one per worker, and in async also the merger's pool (one look wide)."""
    return N_WORKERS if runtime == "sync" else N_WORKERS + max(N_WORKERS, look_width(AggregatorConfig()))


def test_a_rejected_key_ends_the_run_at_once(runtime):
    with LLMServer(responder=lambda path, body: Reply(401, {"error": {"message": f"bad key {KEY}"}})) as server:
        result = run_engine(runtime, agent_for(server.openai_base_url))
        sent = len(server.requests)
    assert result.stop_reason == "error"
    assert "ProviderAuthError" in result.error and server.openai_base_url.rstrip("/") in result.error
    assert KEY not in result.error
    # not retried by the provider nor by the engine: one request per thread that was already sending
    assert 1 <= sent <= in_flight(runtime)


def test_a_server_answering_500_gives_up_after_the_failure_limit(runtime):
    with LLMServer(responder=lambda path, body: Reply(500, {"error": {"message": "boom"}})) as server:
        result = run_engine(runtime, agent_for(server.openai_base_url, max_retries=2))
        sent = len(server.requests)
    assert result.stop_reason == "error" and "ProviderUnavailableError" in result.error
    assert re.search(r"\d+ evaluation call\(s\) in a row failed \(failure_limit=3\)", result.error)
    # failure_limit (3) evaluation calls, each max_retries + 1 requests; the engine adds none
    assert 3 * 3 <= sent <= 3 * 3 + in_flight(runtime) * 3


def test_an_unreachable_port_fails_fast(runtime):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_engine(runtime, agent_for(f"http://127.0.0.1:{port}/v1"))
    assert result.stop_reason == "error" and "ProviderConnectionError" in result.error
    assert f"127.0.0.1:{port}" in result.error


def test_a_slow_server_times_out_and_ends_with_an_error(runtime):
    with LLMServer(responder=lambda path, body: Reply(200, openai_body("2"), delay=0.3)) as server:
        result = run_engine(runtime, agent_for(server.openai_base_url, timeout=0.05, max_retries=1))
    assert result.stop_reason == "error" and "ProviderTimeoutError" in result.error


def test_a_reply_echoing_the_key_never_reaches_the_ledger(runtime, tmp_path):
    def respond(path: str, body: Any) -> Reply:
        prompt = body["messages"][-1]["content"]
        if "ONE general rule" in prompt:
            return Reply(200, openai_body(f"Always use the key {KEY} and answer \ud83d tersely."))
        return Reply(200, openai_body("no idea"))

    with LLMServer(responder=respond) as server:
        result = run_engine(runtime, agent_for(server.openai_base_url), ledger=tmp_path / "l.sqlite", rounds=3)
    assert result.error is None
    ledger = SqliteLedger(tmp_path / "l.sqlite")
    try:
        for version in ledger.history("artifact"):
            assert KEY not in repr(version)
    finally:
        ledger.close()
    assert KEY not in result.rendered


def test_ctrl_c_ends_the_process_promptly_with_the_ledger_whole(tmp_path):
    """A rollout hangs for minutes; SIGINT must end the process now, the ledger intact."""
    marker = tmp_path / "started"
    ledger_path = tmp_path / "ledger.sqlite"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from agentdescent import Task, evolve

        tasks = [Task(f"t{{i}}", f"p{{i}}") for i in range(10)]
        held = {{t.id for t in tasks[-4:]}}

        def run(rendered, task):
            if task.id not in held:
                Path({str(marker)!r}).write_text("x")
                time.sleep(600)
            return "unsolved"

        evolve(tasks, lambda t, o: 0.0, run=run, propose=lambda *a: None, rounds=3,
               ledger={str(ledger_path)!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the run never started its rollout"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)  # the hung rollout would hold it for 600 s
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code != 0 and b"KeyboardInterrupt" in proc.stderr.read()
    ledger = SqliteLedger(ledger_path)  # opens: the history check passes
    try:
        assert ledger.versions() == {"artifact": 1}
    finally:
        ledger.close()
