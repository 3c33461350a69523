"""The A/B CLI's real-data path end to end, offline: HotpotQA rows from a loopback
datasets-server, answered by an OpenAI-compatible loopback server."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import ab_allocator  # noqa: E402

from agentdescent.testing.llmserver import LLMServer, Reply, openai_body  # noqa: E402

ROWS = [
    {
        "id": f"q{i}",
        "question": f"Which city hosts landmark number {i}?",
        "answer": ["Paris", "Rome", "Oslo", "Lima"][i % 4],
        "context": {"title": [f"Landmark {i}"],
                    "sentences": [[f"Landmark {i} stands in {['Paris', 'Rome', 'Oslo', 'Lima'][i % 4]}."]]},
    }
    for i in range(24)
]


class _RowsServer:
    """A datasets-server stand-in: GET /rows with offset/length paging."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # http.server's naming
                query = parse_qs(urlparse(self.path).query)
                offset, length = int(query["offset"][0]), int(query["length"][0])
                page = [{"row_idx": i, "row": ROWS[i]} for i in range(offset, min(len(ROWS), offset + length))]
                body = json.dumps({"rows": page, "num_rows_total": len(ROWS)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _model(path: str, body: dict) -> Reply:
    """Answers with the city from the passage; in a sentence unless the skill asks for brevity."""
    messages = body["messages"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system").lower()
    user = messages[-1]["content"]
    if "playbook" in user.lower():
        text = "Answer with the bare name only, no sentence."
    else:
        city = next(c for c in ("Paris", "Rome", "Oslo", "Lima") if f"stands in {c}" in user)
        text = city if "bare name" in system else f"It is {city}, I think."
    return Reply(200, openai_body(text, prompt_tokens=len(user) // 4 + 1, completion_tokens=5), {}, 0.0)


def test_cli_source_hf_with_a_real_provider_runs_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rows_server = _RowsServer()
    monkeypatch.setenv("AGENTDESCENT_HF_ENDPOINT", rows_server.url)
    monkeypatch.setenv("AGENTDESCENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-test-key")
    out = tmp_path / "ab.json"
    try:
        with LLMServer(responder=_model) as llm:
            code = ab_allocator.main([
                "--max-tokens", "6000", "--seeds", "0,1,2", "--source", "hf", "--rows", "24",
                "--provider", "openai", "--model", "test-model", "--base-url", llm.openai_base_url,
                "--workers", "2", "--rounds", "4", "--json", str(out),
            ])
    finally:
        rows_server.close()
    assert code == 0
    data = json.loads(out.read_text())
    assert [r["status"] for r in data["rows"]] == ["ok"] * 6
    assert all(r["tokens"] > 0 for r in data["rows"])
    assert all(r["test"] == pytest.approx(1.0) for r in data["rows"])  # the skill learned brevity
    assert data["arguments"]["source"] == "hf"
    assert "sk-loopback-test-key" not in out.read_text() + capsys.readouterr().out


def _arithmetic_model(path: str, body: dict) -> Reply:
    """Answers 'The answer is N.' unless the skill asks for the number only; proposes that rule."""
    messages = body["messages"]
    system = " ".join(m["content"] for m in messages if m["role"] == "system").lower()
    user = messages[-1]["content"]
    if "playbook" in user.lower():
        text = "Reply with the number only, no sentence."
    else:
        a, b = (int(x) for x in user.removeprefix("What is ").removesuffix("?").split(" + "))
        text = str(a + b) if "number only" in system else f"The answer is {a + b}."
    return Reply(200, openai_body(text, prompt_tokens=len(user) // 4 + 1, completion_tokens=4), {}, 0.0)


def test_cli_source_jsonl_with_a_real_provider_runs_offline(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "sums.jsonl"
    data.write_text("".join(json.dumps({"id": f"s{i}", "question": f"What is {i} + {i + 3}?",
                                        "answer": str(2 * i + 3)}) + "\n" for i in range(30)))
    out = tmp_path / "ab.json"
    with LLMServer(responder=_arithmetic_model) as llm:
        code = ab_allocator.main([
            "--max-tokens", "4000", "--seeds", "0,1,2", "--source", "jsonl", "--data", str(data),
            "--provider", "openai", "--model", "test-model", "--base-url", llm.openai_base_url,
            "--api-key", "sk-jsonl-secret-key", "--metric", "exact", "--call-tokens", "12",
            "--workers", "2", "--rounds", "4", "--json", str(out),
        ])
        bodies = [r.body for r in llm.requests]
    assert code == 0
    data_out = json.loads(out.read_text())
    assert [r["status"] for r in data_out["rows"]] == ["ok"] * 6
    assert all(r["test"] == pytest.approx(1.0) for r in data_out["rows"])  # the skill learned the form
    assert data_out["arguments"]["source"] == "jsonl"
    assert all(b["max_tokens"] == 12 for b in bodies)
    assert "sk-jsonl-secret-key" not in out.read_text() + capsys.readouterr().out
