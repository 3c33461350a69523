"""bench/real_data.py and bench/_counting_proxy.py: the parts that need no real model and no download.

A fake upstream (a real stdlib ``ThreadingHTTPServer`` on 127.0.0.1, not a mock object)
stands in for the model server. Every task here is invented in BIG-bench's JSON shape: no
BIG-bench data is ever part of this repository.
"""

from __future__ import annotations

import argparse
import io
import json
import tarfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentdescent import Task
from agentdescent.data.loader import bigbench_tasks
from agentdescent.engine.config import Split
from bench import real_data
from bench._counting_proxy import CountingProxy, delta

# --------------------------------------------------------------------------- a fake upstream


class FakeUpstream:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 that answers ``answer(last user message)``."""

    def __init__(self, answer: Callable[[str], str] = lambda _: "plausible", *, status: int = 200,
                 usage: bool = True) -> None:
        self.answer, self.status, self.usage = answer, status, usage
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
                body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "fake"}]})

            def do_POST(self) -> None:
                data = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with fake.lock:
                    fake.bodies.append(data)
                if fake.status != 200:
                    self._send(fake.status, {"error": {"message": "nope"}})
                    return
                user = [m for m in data.get("messages", []) if m.get("role") == "user"]
                text = fake.answer(str(user[-1]["content"]) if user else "")
                if data.get("stream"):
                    events = (f'data: {json.dumps({"choices": [{"delta": {"content": text}}]})}\n\n'
                              f'data: {json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}})}\n\n'
                              "data: [DONE]\n\n").encode()
                    self._send(200, events, "text/event-stream")
                    return
                reply: dict[str, Any] = {
                    "id": "x", "object": "chat.completion", "created": 0, "model": data.get("model", "fake"),
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": "stop"}]}
                if fake.usage:
                    reply["usage"] = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
                self._send(200, reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream()
    yield fake
    fake.close()


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}

# --------------------------------------------------------------------------- the counting proxy


def test_the_proxy_forwards_and_counts_calls_and_usage_tokens(upstream: FakeUpstream) -> None:
    with CountingProxy(upstream.base_url, keep=10) as proxy:
        assert proxy.base_url.startswith("http://127.0.0.1:") and proxy.base_url.endswith("/v1")
        status, reply = post(f"{proxy.base_url}/chat/completions", CHAT)
        assert status == 200 and reply["choices"][0]["message"]["content"] == "plausible"
        with urllib.request.urlopen(f"{proxy.base_url}/models", timeout=10) as response:
            assert json.loads(response.read())["data"][0]["id"] == "fake"
        counts = proxy.snapshot()
    assert counts == {"calls": 1, "ok": 1, "errors": 0, "prompt_tokens": 10, "completion_tokens": 3,
                      "total_tokens": 13, "without_usage": 0, "other_requests": 1}
    assert upstream.bodies == [CHAT]  # forwarded unchanged
    assert list(proxy.exchanges)[0]["request"]["max_tokens"] == 8
    assert list(proxy.exchanges)[0]["reply"] == "plausible"


def test_the_proxy_counts_exactly_under_concurrent_calls(upstream: FakeUpstream) -> None:
    with CountingProxy(upstream.base_url) as proxy:
        before = proxy.snapshot()
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: post(f"{proxy.base_url}/chat/completions", CHAT)[0], range(40)))
        spent = delta(proxy.snapshot(), before)
    assert statuses == [200] * 40
    assert spent["calls"] == 40 and spent["total_tokens"] == 40 * 13 and spent["prompt_tokens"] == 400


def test_the_proxy_counts_errors_and_replies_without_usage() -> None:
    failing, bare = FakeUpstream(status=500), FakeUpstream(usage=False)
    try:
        with CountingProxy(failing.base_url) as a, CountingProxy(bare.base_url) as b:
            assert post(f"{a.base_url}/chat/completions", CHAT)[0] == 500
            assert post(f"{b.base_url}/chat/completions", CHAT)[0] == 200
            assert a.snapshot()["errors"] == 1 and a.snapshot()["calls"] == 1 and a.snapshot()["total_tokens"] == 0
            assert b.snapshot()["without_usage"] == 1 and b.snapshot()["ok"] == 1
    finally:
        failing.close()
        bare.close()


def test_the_proxy_reads_the_usage_of_a_streamed_reply(upstream: FakeUpstream) -> None:
    with CountingProxy(upstream.base_url) as proxy:
        request = urllib.request.Request(f"{proxy.base_url}/chat/completions",
                                         data=json.dumps({**CHAT, "stream": True}).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert b"[DONE]" in response.read()
        assert proxy.snapshot()["total_tokens"] == 9


def test_an_unreachable_upstream_is_a_counted_502() -> None:
    dead = FakeUpstream()
    url = dead.base_url
    dead.close()
    with CountingProxy(url, timeout=2) as proxy:
        status, reply = post(f"{proxy.base_url}/chat/completions", CHAT)
        assert status == 502 and "counting proxy" in reply["error"]["message"]
        assert proxy.snapshot()["errors"] == 1


def test_the_proxy_refuses_a_url_that_is_not_http() -> None:
    with pytest.raises(ValueError, match="http"):
        CountingProxy("ftp://example.org/v1")


def test_our_provider_through_the_proxy_is_counted_at_the_wire(upstream: FakeUpstream) -> None:
    from agentdescent import LLMAgent
    from agentdescent.providers import openai_compatible

    with CountingProxy(upstream.base_url) as proxy:
        provider = openai_compatible("fake", base_url=proxy.base_url, api_key="local", timeout=10)
        agent = LLMAgent(provider, model="fake", temperature=0.0, call_tokens=5)
        assert agent.solve("", Task("t", "Is it?")) == "plausible"
        assert proxy.snapshot()["calls"] == 1 and proxy.snapshot()["total_tokens"] == 13
    assert upstream.bodies[0]["temperature"] == 0.0


# --------------------------------------------------------------------------- invented tasks


def invented(n: int = 40, kind: str = "multiple_choice") -> dict[str, Any]:
    """An invented BIG-bench-shaped task: n examples, about two thirds with the answer "plausible"."""
    examples = []
    for i in range(n):
        if kind == "multiple_choice":
            yes = i % 3 != 0
            examples.append({"input": f"Invented statement number {i} about a made-up game.",
                             "target_scores": {"plausible": int(yes), "implausible": int(not yes)}})
        else:
            examples.append({"input": f"I have {i % 5 + 1} invented widgets. How many widgets do I have?",
                             "target": [["one", "two", "three", "four", "five"][i % 5], str(i % 5 + 1)]})
    return {"name": f"invented_{kind}", "task_prefix": "Judge the invented statement.", "examples": examples}


def task_file(tmp_path: Path, data: dict[str, Any], name: str = "invented_mc") -> Path:
    path = tmp_path / "tasks" / name / "task.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.fixture
def mc_tasks(tmp_path: Path) -> list[Task]:
    return bigbench_tasks(task_file(tmp_path, invented()))


# --------------------------------------------------------------------------- splits


def test_splits_are_seeded_disjoint_and_the_engines_own(mc_tasks: list[Task]) -> None:
    a = real_data.make_splits(mc_tasks, 3, test_size=10, train_size=12, held_out_size=6)
    b = real_data.make_splits(mc_tasks, 3, test_size=10, train_size=12, held_out_size=6)
    c = real_data.make_splits(mc_tasks, 4, test_size=10, train_size=12, held_out_size=6)
    ids = lambda ts: [t.id for t in ts]  # noqa: E731
    assert ids(a.test) == ids(b.test) and ids(a.train) == ids(b.train) and ids(a.held_out) == ids(b.held_out)
    assert ids(a.test) != ids(c.test)
    assert (len(a.test), len(a.pool), len(a.train), len(a.held_out)) == (10, 18, 12, 6)
    assert not set(ids(a.test)) & set(ids(a.pool))
    assert set(ids(a.train)) | set(ids(a.held_out)) == set(ids(a.pool))
    assert not set(ids(a.train)) & set(ids(a.held_out))
    engine_train, engine_held = Split(held_out_frac=a.held_out_frac).split(a.pool, 3)
    assert ids(engine_train) == ids(a.train) and ids(engine_held) == ids(a.held_out)


def test_splits_refuse_sizes_the_task_cannot_fill(mc_tasks: list[Task]) -> None:
    with pytest.raises(SystemExit, match="40 distinct examples"):
        real_data.make_splits(mc_tasks, 0, test_size=30, train_size=10, held_out_size=5)
    with pytest.raises(SystemExit, match="at least 4"):
        real_data.make_splits(mc_tasks, 0, test_size=3, train_size=2, held_out_size=1)


def test_duplicate_prompts_are_dropped_before_the_split(tmp_path: Path) -> None:
    data = invented(6)
    data["examples"].append(dict(data["examples"][0]))
    tasks, dropped, kind = real_data.load_examples(task_file(tmp_path, data))
    assert (len(tasks), dropped, kind) == (6, 1, "multiple_choice")


# --------------------------------------------------------------------------- scoring


def test_the_constant_row_is_the_share_of_the_most_frequent_gold_answer(mc_tasks: list[Task]) -> None:
    accuracy, label = real_data.constant_accuracy(mc_tasks[:9])  # 3 implausible, 6 plausible
    assert (accuracy, label) == (6 / 9, "plausible")
    splits = real_data.make_splits(mc_tasks, 0, test_size=9, train_size=8, held_out_size=4)
    ctx = real_data.Context(argparse.Namespace(cache_dir=None), None, "t", "multiple_choice", 0, splits,
                            real_data.reward_for("multiple_choice"), 24)
    row = real_data.run_arm(ctx, "constant")
    assert row["status"] == "ok" and row["calls"] == 0
    assert row["accuracy"] == real_data.constant_accuracy(splits.test)[0]
    assert sum(row["per_task"].values()) / len(splits.test) == row["accuracy"]


def test_raw_text_is_scored_with_the_same_reward_and_well_formed(mc_tasks: list[Task]) -> None:
    yes, no = mc_tasks[1], mc_tasks[0]  # plausible, implausible
    replies = {yes.id: "Plausible.", no.id: "plausible or implausible"}
    scored = real_data.score_replies([yes, no], replies, real_data.reward_for("multiple_choice"))
    assert scored["per_task"] == {yes.id: 1.0, no.id: 0.0}
    assert scored["accuracy"] == 0.5 and scored["well_formed"] == 0.5
    assert scored["answers"] == {yes.id: "plausible", no.id: "(several)"}
    assert real_data.named_choices(["plausible", "implausible"], "IMPLAUSIBLE") == ["implausible"]
    assert real_data.answer_label(no, "no idea") == "(none)"
    assert real_data.well_formed(no, "implausible") and not real_data.well_formed(no, "")


def test_generative_replies_are_well_formed_when_they_hold_a_number(tmp_path: Path) -> None:
    tasks = bigbench_tasks(task_file(tmp_path, invented(5, "generative"), "gen"))
    three = tasks[2]  # "three" / "3"
    reward = real_data.reward_for("generative")
    assert float(reward(three, "You have 3 widgets.")) == 1.0 and float(reward(three, "Three")) == 1.0
    assert real_data.answer_label(three, "You have three.") == "3"
    assert real_data.answer_label(three, "I cannot say") == "(no number)"
    assert real_data.gold_label(three) == "3"
    assert real_data.well_formed(three, "about 7") and not real_data.well_formed(three, "many")


def test_answer_distributions_flag_a_degenerate_arm() -> None:
    d = real_data.distribution(["plausible"] * 9 + ["implausible"])
    assert d["top"] == "plausible" and d["top_share"] == 0.9 and d["degenerate"]
    assert not real_data.distribution(["a"] * 8 + ["b"] * 2)["degenerate"]
    assert real_data.distribution([])["top"] is None


def test_dspy_raw_text_is_read_from_the_first_history_entry() -> None:
    assert real_data._history_text([{"outputs": ["first"]}, {"outputs": ["json fallback"]}]) == "first"
    assert real_data._history_text([{"outputs": [{"text": "t"}]}]) == "t"
    assert real_data._history_text([]) == ""


# --------------------------------------------------------------------------- the leak check


def test_the_leak_check_finds_a_held_out_input_in_a_demonstration(mc_tasks: list[Task]) -> None:
    train, held, test = mc_tasks[:4], mc_tasks[4:6], mc_tasks[6:8]
    demo = json.dumps({"input": held[0].prompt, "output": "plausible", "source": held[0].id})
    clean = {"rules": "Answer with one word.", "demo:1": json.dumps({"input": train[0].prompt, "output": "x"})}
    leaky = {**clean, "demo:2": demo}
    assert real_data.find_leaks([clean], [*held, *test], train)["leaks"] == []
    found = real_data.find_leaks([clean, leaky], [*held, *test], train)
    assert found["leaks"] == [held[0].id] and found["states"] == 2 and found["checked"] == 4
    rule = {"rules": f"Remember: {test[1].meta['input']} is plausible."}
    assert real_data.find_leaks([rule], [*held, *test], train)["leaks"] == [test[1].id]


def test_an_input_inside_a_train_prompt_is_ambiguous_not_a_leak() -> None:
    train = [Task("a", "Count: 1 2 3 4", {"input": "Count: 1 2 3 4"})]
    held = [Task("b", "1 2 3", {"input": "1 2 3"})]
    found = real_data.find_leaks([{"demo:1": json.dumps({"input": train[0].prompt})}], held, train)
    assert found == {"states": 1, "checked": 0, "ambiguous": 1, "leaks": []}


def test_committed_states_read_the_ledger_the_final_state_and_the_committed_diffs() -> None:
    from types import SimpleNamespace

    from agentdescent.ledger import MemoryLedger

    ledger = MemoryLedger()
    ledger.register("art", {"rules": "v1"}, 0.2)
    report = SimpleNamespace(accepted=SimpleNamespace(ops={"demo:1": "diff text", "gone": None}))
    result = SimpleNamespace(state={"rules": "final"}, history=[SimpleNamespace(reports=[report])])
    states = real_data.committed_states(result, ledger, "art")
    assert {"rules": "v1"} in states and {"rules": "final"} in states and {"demo:1": "diff text"} in states


# --------------------------------------------------------------------------- data


def sdist(tmp_path: Path, names: list[str], *, evil: bool = False) -> Path:
    path = tmp_path / "dl" / real_data.SDIST
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        members = {real_data.MEMBER.format(name=n): json.dumps(invented(6)).encode() for n in names}
        if evil:
            members["bigbench-1.0.0/../../escaped.json"] = b"{}"
            members["/tmp/absolute-escape.json"] = b"{}"
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_only_the_asked_task_files_are_extracted_and_reused(tmp_path: Path) -> None:
    archive = sdist(tmp_path, ["alpha_task", "beta_task"], evil=True)
    out = tmp_path / "cache"
    paths = real_data.extract_tasks(archive, ["alpha_task"], out)
    assert paths["alpha_task"] == out / "tasks" / "alpha_task" / "task.json"
    assert json.loads(paths["alpha_task"].read_text())["name"] == "invented_multiple_choice"
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert written == ["tasks/alpha_task/task.json"]
    assert not (tmp_path / "escaped.json").exists()
    archive.unlink()  # reused from the cache: the sdist is not opened again
    assert real_data.extract_tasks(archive, ["alpha_task"], out) == paths


def test_a_task_the_sdist_lacks_is_refused_with_near_names(tmp_path: Path) -> None:
    archive = sdist(tmp_path, ["alpha_task"])
    with pytest.raises(SystemExit, match="no JSON task alpha_tusk.*near names: alpha_task"):
        real_data.extract_tasks(archive, ["alpha_tusk"], tmp_path / "cache")


@pytest.mark.parametrize("name", ["../etc", "a/b", "Sports", ""])
def test_task_names_cannot_hold_a_path(name: str) -> None:
    with pytest.raises(SystemExit, match="task name"):
        real_data.check_task_name(name)


def test_an_existing_sdist_is_not_downloaded_again(tmp_path: Path) -> None:
    archive = sdist(tmp_path, ["alpha_task"])
    assert real_data.ensure_sdist(archive.parent, python="/nonexistent/python") == archive


def test_the_data_folder_follows_the_cache_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTDESCENT_CACHE", str(tmp_path))
    assert real_data.data_folder() == tmp_path / "bigbench"
    assert real_data.data_folder(tmp_path / "x") == tmp_path / "x"


# --------------------------------------------------------------------------- the whole script


def test_main_runs_the_prompted_arms_and_writes_the_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   upstream: FakeUpstream) -> None:
    data = tmp_path / "bb"
    task_file(data, invented(20), "invented_mc")
    out = tmp_path / "out.json"
    code = real_data.main(["--base-url", upstream.base_url, "--model", "fake", "--tasks", "invented_mc",
                           "--seeds", "0,1", "--test-size", "6", "--train-size", "6", "--held-out-size", "4",
                           "--arms", "empty,format,constant", "--data-dir", str(data), "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| arm | task | seed | test accuracy |" in printed and "Per task, medians over seeds" in printed
    assert "Answer distributions" in printed and "Leak check over 0 agentdescent run(s)" in printed
    report = json.loads(out.read_text())
    assert [(r["arm"], r["seed"]) for r in report["rows"]] == [
        (a, s) for s in (0, 1) for a in ("empty", "format", "constant")]
    for row in report["rows"]:
        assert set(row) >= {"task", "seed", "arm", "accuracy", "well_formed", "calls", "tokens", "cache_hits"}
    empty = report["rows"][0]
    assert empty["calls"] == 6 and empty["tokens"] == 6 * 13 and empty["well_formed"] == 1.0
    assert set(empty["answers"].values()) == {"plausible"}
    assert report["rows"][2]["calls"] == 0
    flagged = [d for d in report["distributions"] if d["arm"] == "empty"]
    assert flagged[0]["degenerate"]
    assert report["summary"][0]["seeds"] == 2
    system = [m for m in upstream.bodies[6]["messages"] if m["role"] == "system"]
    assert system and system[0]["content"].startswith(real_data.FORMAT_INSTRUCTION["multiple_choice"])
    assert all(b["max_tokens"] == 24 for b in upstream.bodies)
    text = out.read_text()
    assert "Invented statement" not in text and "Invented statement" not in printed  # no prompt leaves the run


def test_help_states_the_command_the_docs_record(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        real_data.main(["--help"])
    assert "python bench/real_data.py --base-url http://127.0.0.1:8090/v1 --model smollm2-135m" in capsys.readouterr().out
