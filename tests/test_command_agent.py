"""`CommandAgent`: a command-line program as the model, with replies parsed as `LLMAgent` parses them.

Each test writes a small Python program and runs it with ``sys.executable``. The one test that
needs the local model server (``local_llm``) is skipped unless 127.0.0.1:8090 answers.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from agentdescent import CommandAgent, Task, evolve
from agentdescent.agents import CommandProvider
from agentdescent.code import FileTree
from agentdescent.domains.router import KEYWORDS, RouterDomain
from agentdescent.errors import (
    InvalidArgument,
    InvalidArgumentType,
    ProviderDependencyError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)

TASK = Task(id="t1", prompt="Route: my invoice is wrong", meta={"label": "billing"})


def program(tmp_path: Path, body: str, name: str = "prog.py") -> list[str]:
    """The argv of a Python program whose source is ``body``."""
    path = tmp_path / name
    path.write_text("import json, os, sys\n" + textwrap.dedent(body), encoding="utf-8")
    return [sys.executable, str(path)]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for a reaper counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


# --------------------------------------------------------------------------- replies


def test_a_rule_a_rewrite_and_the_prompt_the_program_read_on_stdin(tmp_path):
    seen = tmp_path / "seen.txt"
    argv = program(tmp_path, f"""
        text = sys.stdin.read()
        open({str(seen)!r}, "w").write(text)
        print("Always look for the keyword first." if "ONE general rule" in text or "Rewrite" in text
              else "billing")
    """)
    agent = CommandAgent(argv)
    assert agent.solve("# Skill\n- invoice: billing", TASK) == "billing\n"
    # the prompt format: the messages' contents joined by a blank line (system first)
    assert seen.read_text() == "# Skill\n- invoice: billing\n\nRoute: my invoice is wrong"
    assert agent.propose("# Skill", TASK, "unknown", 0.0) == "Always look for the keyword first."
    assert "Score: 0.00 out of 1." in seen.read_text()
    rewrite = CommandAgent(argv, proposal="rewrite")
    assert rewrite.propose("Be brief.", TASK, "unknown", 0.0) == "Always look for the keyword first."
    stats = agent.stats()
    assert stats["solves"] == 1 and stats["rules"] == 1 and stats["command_calls"] == 2


def test_prompt_placeholder_and_system_placeholder_go_in_argv(tmp_path):
    argv = program(tmp_path, """
        assert sys.stdin.read() == ""
        print(json.dumps({"system": sys.argv[2], "prompt": sys.argv[4]}))
    """)
    agent = CommandAgent([*argv, "-s", "{system}", "-p", "{prompt}"], prompt="{prompt}")
    got = json.loads(agent.solve("# Skill\n- a: b", TASK))
    assert got == {"system": "# Skill\n- a: b", "prompt": "Route: my invoice is wrong"}


def test_prompt_mode_and_argv_must_agree():
    with pytest.raises(InvalidArgument, match=r"no argument holds \{prompt\}"):
        CommandAgent(["prog"], prompt="{prompt}")
    with pytest.raises(InvalidArgument, match="prompt='stdin'"):
        CommandAgent(["prog", "{prompt}"])
    with pytest.raises(InvalidArgument, match="use 'stdin'"):
        CommandAgent(["prog"], prompt="argv")
    with pytest.raises(InvalidArgumentType, match="list of str"):
        CommandAgent("llm -m x")
    with pytest.raises(InvalidArgument, match="HOME always points inside"):
        CommandAgent(["prog"], env=["HOME"])


def test_an_option_goes_through_its_placeholder_and_is_never_dropped(tmp_path):
    argv = program(tmp_path, "print('cap ' + sys.argv[1])")
    assert CommandAgent([*argv, "{max_tokens}"], call_tokens=64).solve("", TASK) == "cap 64\n"
    with pytest.raises(InvalidArgumentType, match=r"no \{max_tokens\}"):
        CommandAgent(argv, call_tokens=64).solve("", TASK)


def test_an_edit_printed_by_the_program_and_one_made_in_the_tree_copy_both_come_back_as_edits(tmp_path):
    tree = FileTree()
    state = {"calc.py": "def add(a, b):\n    return a - b\n", "README.md": "calc\n"}
    rendered = tree.render(state)
    printed = program(tmp_path, """
        sys.stdin.read()
        print("calc.py\\n<<<<<<< SEARCH\\n    return a - b\\n=======\\n    return a + b\\n>>>>>>> REPLACE")
    """, "printer.py")
    agent = CommandAgent(printed, proposal="edit")
    diff = tree.to_diff(state, agent.propose(rendered, TASK, "assert 1 == 3", 0.0), "w", 0, "code")
    assert diff is not None and "return a + b" in json.dumps(diff.ops)
    # a program that edits the files it finds in its working folder (a copy of the tree)
    editor = program(tmp_path, """
        sys.stdin.read()
        assert sorted(os.listdir(".")) == ["README.md", "calc.py"], os.listdir(".")
        src = open("calc.py").read()
        open("calc.py", "w").write(src.replace("a - b", "a + b"))
        print("I fixed calc.py")
    """, "editor.py")
    agent = CommandAgent(editor, proposal="edit", tree=tree)
    proposal = agent.propose(rendered, TASK, "assert 1 == 3", 0.0)
    diff = tree.to_diff(state, proposal, "w", 0, "code")
    assert diff is not None and "return a + b" in json.dumps(diff.ops)
    assert agent.stats()["tree_edits"] == 1
    with pytest.raises(InvalidArgumentType, match="a tree needs"):
        CommandAgent(editor, proposal="edit", tree=object())


# --------------------------------------------------------------------------- failures


def test_a_timeout_kills_the_child_and_its_grandchild(tmp_path):
    pids = tmp_path / "pids.json"
    argv = program(tmp_path, f"""
        import subprocess, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pids)!r} + ".tmp", "w").write(json.dumps([os.getpid(), child.pid]))
        os.replace({str(pids)!r} + ".tmp", {str(pids)!r})
        time.sleep(600)
    """)
    agent = CommandAgent(argv, timeout=5.0)
    with pytest.raises(ProviderTimeoutError, match="process group was killed") as info:
        agent.solve("", TASK)
    assert info.value.retryable
    for pid in json.loads(pids.read_text()):
        for _ in range(100):  # the grandchild is reaped by whoever adopted it
            if not alive(pid):
                break
            time.sleep(0.05)
        assert not alive(pid), f"process {pid} outlived the timeout"
    assert agent.stats()["command_timeouts"] == 1 and agent.stats()["command_failures"] == 1


def test_non_zero_exits_are_typed_failures(tmp_path):
    fails = program(tmp_path, "sys.stderr.write('Error: unknown model x\\n'); sys.exit(2)")
    with pytest.raises(ProviderResponseError, match="exited with status 2.*unknown model x") as info:
        CommandAgent(fails).solve("", TASK)
    assert not info.value.retryable
    tempfail = program(tmp_path, "sys.exit(75)", "tempfail.py")
    with pytest.raises(ProviderUnavailableError, match="status 75") as info:
        CommandAgent(tempfail).solve("", TASK)
    assert info.value.retryable
    killed = program(tmp_path, "import signal; os.kill(os.getpid(), signal.SIGKILL)", "killed.py")
    with pytest.raises(ProviderUnavailableError, match="killed by signal 9"):
        CommandAgent(killed).solve("", TASK)


def test_a_missing_program_names_itself(tmp_path):
    with pytest.raises(ProviderDependencyError, match="no-such-model-cli"):
        CommandAgent(["no-such-model-cli", "-m", "x"]).solve("", TASK)
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(ProviderDependencyError, match="not-executable"):
        CommandAgent([str(script)]).solve("", TASK)


def test_an_empty_reply_is_an_empty_provider_reply(tmp_path):
    agent = CommandAgent(program(tmp_path, "sys.stdin.read()"))
    assert agent.solve("# Skill", TASK) == ""
    assert agent.propose("# Skill", TASK, "", 0.0) is None
    assert agent.stats()["empty"] == 1 and agent.empty_replies == 1


def test_a_huge_output_is_cut_at_the_byte_limit(tmp_path):
    argv = program(tmp_path, """
        chunk = "x" * 65536
        for _ in range(160):  # 10 MB, more than any pipe buffer
            sys.stdout.write(chunk)
        sys.stderr.write("e" * 3_000_000)
    """)
    agent = CommandAgent(argv, max_output_bytes=1000)
    assert agent.solve("", TASK) == "x" * 1000
    assert agent.stats()["solves_truncated"] == 1 and agent.stats()["command_cut"] == 1
    assert agent.propose("# Skill", TASK, "x", 0.0) is None
    assert agent.stats()["truncated"] == 1  # a cut reply is a reply cut off by the limit


def test_the_environment_is_scrubbed_and_env_passes_chosen_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTDESCENT_TEST_API_KEY", "sk-secret-value")
    monkeypatch.setenv("AGENTDESCENT_OTHER", "visible-only-if-asked")
    argv = program(tmp_path, "print(json.dumps(dict(os.environ)))")
    env = json.loads(CommandAgent(argv).solve("", TASK))
    assert "AGENTDESCENT_TEST_API_KEY" not in env and "sk-secret-value" not in json.dumps(env)
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "TZ", "HOME", "TMPDIR", "TMP", "TEMP", "LC_CTYPE"}  # LC_CTYPE: PEP 538
    assert env["HOME"] != os.environ.get("HOME") and not os.path.exists(env["HOME"])  # removed after the call
    chosen = json.loads(CommandAgent(argv, env=["AGENTDESCENT_TEST_API_KEY"]).solve("", TASK))
    assert chosen["AGENTDESCENT_TEST_API_KEY"] == "sk-secret-value" and "AGENTDESCENT_OTHER" not in chosen
    assert json.loads(CommandAgent(argv, env={"MODE": "x"}).solve("", TASK))["MODE"] == "x"


# --------------------------------------------------------------------------- usage


def test_usage_reported_on_stderr_in_json_or_estimated(tmp_path):
    llm_style = program(tmp_path, "sys.stdin.read(); print('billing'); "
                                  "sys.stderr.write('Token usage: 1,234 input, 56 output\\n')", "a.py")
    agent = CommandAgent(llm_style)
    agent.solve("# Skill", TASK)
    assert (agent.usage.prompt_tokens, agent.usage.completion_tokens, agent.usage.calls) == (1234, 56, 1)
    as_json = program(tmp_path, "sys.stdin.read(); print(json.dumps({'text': 'billing', 'usage': "
                                "{'prompt_tokens': 7, 'completion_tokens': 2}}))", "b.py")
    agent = CommandAgent(as_json, reply="json")
    assert agent.solve("# Skill", TASK) == "billing"
    assert (agent.usage.prompt_tokens, agent.usage.completion_tokens) == (7, 2)
    assert agent.stats()["usage_reported"] == 1 and agent.stats()["usage_estimated"] == 0
    silent = program(tmp_path, "sys.stdin.read(); print('billing')", "c.py")
    agent = CommandAgent(silent)
    agent.solve("# Skill", TASK)
    assert agent.stats()["usage_estimated"] == 1 and agent.usage.total_tokens > 0
    with pytest.raises(ProviderResponseError, match="not one JSON object"):
        CommandAgent(silent, reply="json").solve("", TASK)


# --------------------------------------------------------------------------- a run


def test_a_router_run_with_a_command_agent_commits(tmp_path):
    argv = program(tmp_path, f"""
        keywords = {json.dumps(KEYWORDS)}
        text = sys.stdin.read()
        task = text.split("Task:", 1)[1].split("The assistant's answer:", 1)[0].lower()
        hits = [k for k in keywords if k in task]
        print(f"{{hits[0]}}: {{keywords[hits[0]]}}" if hits else "NONE")
    """)
    domain = RouterDomain(seed=0, noise=0.0)
    agent = CommandAgent(argv, timeout=60.0)
    result = evolve(tasks=domain.tasks[:48], reward=domain.reward, run=domain.run, agent=agent,
                    strategy=domain.strategy, rounds=2, n_workers=2, shuffle=False)
    assert result.version >= 1
    assert any(line.startswith("- ") for line in domain.strategy.render(result.state).splitlines())
    assert agent.stats()["rules"] >= 1 and agent.stats()["command_failures"] == 0


# --------------------------------------------------------------------------- a real program


def _server_answers() -> bool:
    try:
        with urllib.request.urlopen("http://127.0.0.1:8090/v1/models", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.local_llm
@pytest.mark.skipif(shutil.which("llm", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
                    is None, reason="needs the `llm` command line (pip install llm)")
def test_llm_command_line_against_the_local_model(tmp_path):
    """Needs the local model server on 127.0.0.1:8090 (`/work/shared/local-llm/serve.sh`)."""
    if not _server_answers():
        pytest.skip("needs the local model server on 127.0.0.1:8090")
    (tmp_path / "extra-openai-models.yaml").write_text(
        "- model_id: smollm2-135m\n  model_name: smollm2-135m\n  api_base: http://127.0.0.1:8090/v1\n")
    llm = shutil.which("llm", path=os.path.dirname(sys.executable)) or "llm"
    agent = CommandAgent([llm, "-m", "smollm2-135m", "--no-log", "--no-stream", "-u", "-o", "max_tokens", "{max_tokens}"],
                         env={"LLM_USER_PATH": str(tmp_path), "OPENAI_API_KEY": "local"}, timeout=120.0,
                         call_tokens=48)
    answer = agent.solve("Answer with one word.", Task(id="q", prompt="What color is the sky?"))
    assert isinstance(answer, str)
    assert agent.stats()["usage_reported"] == 1 and agent.usage.prompt_tokens > 0


def test_command_provider_is_a_provider(tmp_path):
    provider = CommandProvider(program(tmp_path, "print(sys.stdin.read().upper())"))
    reply = provider.complete([{"role": "user", "content": "hi"}])
    assert reply.text == "HI\n" and reply.usage is not None and provider.usage.calls == 1
