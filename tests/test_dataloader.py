"""The dataloader against a real HTTP server on 127.0.0.1 (stdlib ``http.server`` in a thread).

Every test runs with the cache root in a temporary folder, both endpoint variables
pointing at a closed local port (so nothing can reach the internet by accident) and the
retry sleep replaced by a recorder (so retries cost no wall-clock time).
"""

from __future__ import annotations

import json
import pickle
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from agentdescent import dataloader
from agentdescent.clock import MonotonicClock
from agentdescent.data.loader import (
    DataLoadError,
    cache_root,
    hf_rows,
    hf_rows_modelscope,
    normalize_hotpotqa_row,
)
from agentdescent.errors import AgentDescentError

# --------------------------------------------------------------------------- the server


@dataclass
class Request:
    path: str
    query: dict[str, str]


Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Server:
    url: str
    requests: list[Request] = field(default_factory=list)
    # (path, query, number of this request) -> (status, headers, body)
    handler: Callable[[str, dict[str, str], int], Reply] = lambda p, q, n: (404, {}, b"")


def _json(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    return (
        status,
        {"Content-Type": "application/json", **(headers or {})},
        json.dumps(payload).encode(),
    )


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            with lock:
                state.requests.append(Request(parts.path, query))
                number = len(state.requests)
            status, headers, body = state.handler(parts.path, query, number)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    # A short poll interval: shutdown() waits for the next poll, 0.5 s by default.
    thread = threading.Thread(target=httpd.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[float]:
    """Cache in tmp, endpoints on a dead port, retry sleeps recorded instead of slept."""
    monkeypatch.setenv("AGENTDESCENT_CACHE", str(tmp_path / "cache"))
    dead = _closed_port_url()
    monkeypatch.setenv("AGENTDESCENT_HF_ENDPOINT", dead)
    monkeypatch.setenv("AGENTDESCENT_MODELSCOPE_ENDPOINT", dead)
    sleeps: list[float] = []
    # every wait goes through the clock seam: record the real clock's sleeps instead of sleeping
    monkeypatch.setattr(MonotonicClock, "sleep", lambda self, seconds: sleeps.append(seconds))
    return sleeps


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def hf_pages(total: int, tag: str = "v1") -> Callable[[str, dict[str, str], int], Reply]:
    """A datasets-server /rows endpoint over ``total`` rows ``{"i": n, "tag": tag}``."""

    def handle(path: str, query: dict[str, str], number: int) -> Reply:
        assert path == "/rows"
        offset, length = int(query["offset"]), int(query["length"])
        assert 1 <= length <= 100
        rows = [
            {"row_idx": i, "row": {"i": i, "tag": tag}, "truncated_cells": []}
            for i in range(offset, min(total, offset + length))
        ]
        return _json(200, {"features": [], "rows": rows, "num_rows_total": total, "partial": False})

    return handle


RAW_HOTPOT = [
    {
        "_id": "q1",
        "question": "Which band came first?",
        "answer": "Alpha",
        "context": [
            ["Alpha", ["Alpha formed in 1970.", "They split."]],
            ["Beta", ["Beta formed in 1980."]],
        ],
        "supporting_facts": [["Alpha", 0], ["Beta", 0]],
    },
    {
        "_id": "q2",
        "question": "Who?",
        "answer": "Gamma",
        "context": [["Gamma", ["Gamma is a person."]]],
        "supporting_facts": [["Gamma", 0]],
    },
]

NORMALISED_Q1_CONTEXT = {
    "title": ["Alpha", "Beta"],
    "sentences": [["Alpha formed in 1970.", "They split."], ["Beta formed in 1980."]],
}


def modelscope_file(body: bytes) -> Callable[[str, dict[str, str], int], Reply]:
    def handle(path: str, query: dict[str, str], number: int) -> Reply:
        assert path.startswith("/api/v1/datasets/") and path.endswith("/repo")
        return 200, {"Content-Type": "application/octet-stream"}, body

    return handle


# --------------------------------------------------------------------------- hf_rows


def test_hf_rows_pages_by_100(server: Server) -> None:
    server.handler = hf_pages(1000)
    rows = hf_rows("org/data", "train", limit=250, endpoint=server.url)
    assert [r["i"] for r in rows] == list(range(250))
    assert [(r.query["offset"], r.query["length"]) for r in server.requests] == [
        ("0", "100"),
        ("100", "100"),
        ("200", "50"),
    ]
    assert {r.query["dataset"] for r in server.requests} == {"org/data"}
    assert {r.query["config"] for r in server.requests} == {"default"}
    assert {r.query["split"] for r in server.requests} == {"train"}


def test_hf_rows_stops_at_num_rows_total(server: Server) -> None:
    server.handler = hf_pages(130)
    rows = hf_rows("d", "train", limit=1000, endpoint=server.url)
    assert len(rows) == 130
    assert [r.query["offset"] for r in server.requests] == ["0", "100"]


def test_hf_rows_stops_on_a_short_page_without_total(server: Server) -> None:
    def handle(path: str, query: dict[str, str], number: int) -> Reply:
        offset = int(query["offset"])
        n = 100 if offset == 0 else 7
        return _json(200, {"rows": [{"row": {"i": offset + i}} for i in range(n)]})

    server.handler = handle
    rows = hf_rows("d", "train", limit=500, endpoint=server.url)
    assert len(rows) == 107 and len(server.requests) == 2


def test_second_call_is_served_from_the_cache(server: Server, tmp_path: Path) -> None:
    server.handler = hf_pages(1000)
    first = hf_rows("d", "train", limit=120, endpoint=server.url)
    assert len(server.requests) == 2
    files = _files(tmp_path / "cache")
    assert len(files) == 1 and files[0].suffix == ".json"
    json.loads(files[0].read_text())  # JSON, not pickle

    server.handler = hf_pages(1000, tag="changed")
    assert hf_rows("d", "train", limit=120, endpoint=server.url) == first
    assert len(server.requests) == 2

    # Every part of the key matters: another limit, split or config is another request.
    hf_rows("d", "train", limit=5, endpoint=server.url)
    hf_rows("d", "test", limit=120, endpoint=server.url)
    hf_rows("d", "train", config="other", limit=120, endpoint=server.url)
    assert len(server.requests) == 2 + 1 + 2 + 2
    assert len(_files(tmp_path / "cache")) == 4


def _snapshot(root: Path) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in _files(root)}


def test_hf_rows_cache_false_neither_reads_nor_writes(server: Server, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    server.handler = hf_pages(10, tag="v1")
    assert hf_rows("d", "train", limit=10, cache=False, endpoint=server.url)[0]["tag"] == "v1"
    assert _files(root) == []  # nothing written

    hf_rows("d", "train", limit=10, endpoint=server.url)  # now cache v1
    before = _snapshot(root)
    assert len(before) == 1

    server.handler = hf_pages(10, tag="v2")
    fresh = hf_rows("d", "train", limit=10, cache=False, endpoint=server.url)
    assert {r["tag"] for r in fresh} == {"v2"}  # not read from the cache
    assert _snapshot(root) == before  # not overwritten (bytes and mtime)
    assert {r["tag"] for r in hf_rows("d", "train", limit=10, endpoint=server.url)} == {"v1"}
    assert len(server.requests) == 3


def test_modelscope_cache_false_neither_reads_nor_writes(server: Server, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    server.handler = modelscope_file(b'{"v": 1}\n{"v": 1}\n')
    assert hf_rows_modelscope("o/d", "f.jsonl", cache=False, endpoint=server.url) == [{"v": 1}] * 2
    assert _files(root) == []

    hf_rows_modelscope("o/d", "f.jsonl", endpoint=server.url)
    before = _snapshot(root)
    assert len(before) == 1

    server.handler = modelscope_file(b'[{"v": 2}]')
    assert hf_rows_modelscope("o/d", "f.jsonl", cache=False, endpoint=server.url) == [{"v": 2}]
    assert _snapshot(root) == before
    assert hf_rows_modelscope("o/d", "f.jsonl", endpoint=server.url) == [{"v": 1}] * 2
    assert len(server.requests) == 3


# --------------------------------------------------------------------------- failures


def test_http_500_names_url_and_status_and_leaves_no_file(
    server: Server, tmp_path: Path, offline: list[float]
) -> None:
    server.handler = lambda p, q, n: (500, {}, b"boom")
    with pytest.raises(DataLoadError) as info:
        hf_rows("org/data", "train", limit=10, endpoint=server.url)
    err = info.value
    assert isinstance(err, AgentDescentError)
    assert err.status == 500
    assert err.url is not None and err.url.startswith(f"{server.url}/rows?dataset=org%2Fdata")
    assert err.url in str(err) and "HTTP 500" in str(err) and "boom" in str(err)
    assert len(server.requests) == dataloader._MAX_ATTEMPTS  # bounded retries
    assert offline == [0.5, 1.0, 2.0]  # exponential backoff between them
    assert _files(tmp_path / "cache") == []  # no cache file, no temp file


def test_a_failure_on_a_later_page_leaves_no_file(server: Server, tmp_path: Path) -> None:
    good = hf_pages(1000)

    def handle(path: str, query: dict[str, str], number: int) -> Reply:
        return good(path, query, number) if query["offset"] == "0" else (503, {}, b"")

    server.handler = handle
    with pytest.raises(DataLoadError, match="HTTP 503") as info:
        hf_rows("d", "train", limit=150, endpoint=server.url)
    assert "offset=100" in str(info.value)
    assert _files(tmp_path / "cache") == []


def offset_ignored(
    total: int, *, row_idx: bool = True
) -> Callable[[str, dict[str, str], int], Reply]:
    """A broken mirror: /rows answers every request with the first rows, whatever the offset."""

    def handle(path: str, query: dict[str, str], number: int) -> Reply:
        length = int(query["length"])
        rows = [
            {"row_idx": i, "row": {"i": i}} if row_idx else {"row": {"i": i}}
            for i in range(min(total, length))
        ]
        return _json(200, {"rows": rows, "num_rows_total": total})

    return handle


def test_a_mirror_that_ignores_offset_is_refused_not_duplicated(
    server: Server, tmp_path: Path
) -> None:
    server.handler = offset_ignored(1000)
    with pytest.raises(DataLoadError) as info:
        hf_rows("org/data", "train", limit=250, endpoint=server.url)
    err, message = info.value, str(info.value)
    assert err.url is not None and "offset=100&" in err.url and err.url in message
    assert err.status == 200
    assert "asked for offset=100" in message
    assert "row_idx 0-99 (first returned at offset=0)" in message
    assert "does not honour offset" in message
    assert "endpoint=" in message and "AGENTDESCENT_HF_ENDPOINT" in message
    assert len(server.requests) == 2  # stopped at the first repeated page
    assert _files(tmp_path / "cache") == []  # nothing duplicated got cached


def test_a_repeated_page_without_row_idx_is_refused(server: Server, tmp_path: Path) -> None:
    server.handler = offset_ignored(1000, row_idx=False)
    with pytest.raises(DataLoadError) as info:
        hf_rows("d", "train", limit=300, endpoint=server.url)
    message = str(info.value)
    assert "asked for offset=100" in message
    assert "the same 100 rows as the page at offset=0" in message
    assert "AGENTDESCENT_HF_ENDPOINT" in message
    assert _files(tmp_path / "cache") == []


def test_one_page_from_a_mirror_that_ignores_offset_is_fine(server: Server) -> None:
    # The advice in the error: limit <= 100 is one request at offset=0, correct anywhere.
    server.handler = offset_ignored(1000)
    assert [r["i"] for r in hf_rows("d", "train", limit=100, endpoint=server.url)] == list(
        range(100)
    )
    assert len(server.requests) == 1


def test_row_idx_numbered_per_page_is_not_mistaken_for_a_repeat(server: Server) -> None:
    # A mirror that pages correctly but restarts row_idx on each page sends the same
    # row_idx with different rows: that is not the offset bug.
    def handle(path: str, query: dict[str, str], number: int) -> Reply:
        offset, length = int(query["offset"]), int(query["length"])
        rows = [{"row_idx": i, "row": {"i": offset + i}} for i in range(min(length, 250 - offset))]
        return _json(200, {"rows": rows, "num_rows_total": 250})

    server.handler = handle
    rows = hf_rows("d", "train", limit=250, endpoint=server.url)
    assert [r["i"] for r in rows] == list(range(250))


def test_modelscope_500_names_url_and_status(server: Server, tmp_path: Path) -> None:
    server.handler = lambda p, q, n: (500, {}, b"")
    with pytest.raises(DataLoadError) as info:
        hf_rows_modelscope("owner/name", "dev.json", endpoint=server.url)
    assert info.value.status == 500
    expected = f"{server.url}/api/v1/datasets/owner/name/repo?Revision=master&FilePath=dev.json"
    assert info.value.url == expected and expected in str(info.value)
    assert _files(tmp_path / "cache") == []


def test_404_is_not_retried_and_says_what_to_check(server: Server, offline: list[float]) -> None:
    server.handler = lambda p, q, n: _json(404, {"error": "no such dataset"})
    with pytest.raises(DataLoadError, match="HTTP 404") as info:
        hf_rows("nope", "train", endpoint=server.url)
    assert len(server.requests) == 1 and offline == []
    assert "dataset='nope'" in str(info.value) and "/splits?dataset=nope" in str(info.value)


def test_429_then_success_honours_retry_after(server: Server, offline: list[float]) -> None:
    good = hf_pages(3)

    def handle(path: str, query: dict[str, str], number: int) -> Reply:
        if number == 1:
            return _json(429, {"error": "slow down"}, {"Retry-After": "2"})
        return good(path, query, number)

    server.handler = handle
    assert len(hf_rows("d", "train", limit=3, endpoint=server.url)) == 3
    assert len(server.requests) == 2
    assert offline == [2.0]


def test_connection_error_is_retried_then_reported(tmp_path: Path, offline: list[float]) -> None:
    dead = _closed_port_url()
    with pytest.raises(DataLoadError, match="no HTTP status") as info:
        hf_rows_modelscope("o/d", "f.json", endpoint=dead)
    assert info.value.status is None
    assert info.value.url is not None and info.value.url.startswith(dead)
    assert info.value.url in str(info.value)
    assert len(offline) == dataloader._MAX_ATTEMPTS - 1
    assert _files(tmp_path / "cache") == []


def test_a_body_that_is_not_a_rows_page_is_an_error(server: Server) -> None:
    server.handler = lambda p, q, n: (200, {}, b"<html>login</html>")
    with pytest.raises(DataLoadError, match="not JSON") as info:
        hf_rows("d", "train", endpoint=server.url)
    assert info.value.url is not None and info.value.url in str(info.value)
    server.handler = lambda p, q, n: _json(200, {"error": "x"})
    with pytest.raises(DataLoadError, match="/rows"):
        hf_rows("d", "train", endpoint=server.url)


def test_a_modelscope_file_that_is_not_json_names_the_line(server: Server, tmp_path: Path) -> None:
    server.handler = modelscope_file(b'{"a": 1}\nnot json\n')
    with pytest.raises(DataLoadError, match="line 2"):
        hf_rows_modelscope("o/d", "f.jsonl", endpoint=server.url)
    server.handler = modelscope_file(b"[1, 2]")
    with pytest.raises(DataLoadError, match="record 0"):
        hf_rows_modelscope("o/d", "f.json", endpoint=server.url)
    server.handler = modelscope_file(
        b'{"Code": 10010205, "Message": "not found", "Success": false}'
    )
    with pytest.raises(DataLoadError, match="not found"):
        hf_rows_modelscope("o/d", "f.json", endpoint=server.url)
    assert _files(tmp_path / "cache") == []


def test_data_load_error_survives_pickling() -> None:
    err = pickle.loads(pickle.dumps(DataLoadError("GET u failed", url="u", status=503)))
    assert (str(err), err.url, err.status) == ("GET u failed", "u", 503)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: hf_rows("", "train"), "dataset"),
        (lambda: hf_rows("d", " "), "split"),
        (lambda: hf_rows("d", "train", limit=0), "limit"),
        (lambda: hf_rows("d", "train", limit=True), "limit"),
        (lambda: hf_rows("d", "train", timeout=0), "timeout"),
        (lambda: hf_rows("d", "train", endpoint="ftp://x"), "endpoint"),
        (lambda: hf_rows_modelscope("", "f.json"), "dataset"),
        (lambda: hf_rows_modelscope("o/d", ""), "file"),
        (lambda: hf_rows_modelscope("o/d", "f.json", limit=-1), "limit"),
    ],
)
def test_bad_arguments_are_value_errors_naming_the_argument(
    call: Callable[[], object], name: str
) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_missing_httpx_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(ImportError, match=r'pip install -e "\.\[hf\]"'):
        hf_rows("d", "train", cache=False)


def test_a_corrupt_cache_file_is_refetched(server: Server, tmp_path: Path) -> None:
    server.handler = hf_pages(5)
    hf_rows("d", "train", limit=5, endpoint=server.url)
    (path,) = _files(tmp_path / "cache")
    path.write_text("{truncated")
    assert len(hf_rows("d", "train", limit=5, endpoint=server.url)) == 5
    assert len(server.requests) == 2
    assert json.loads(path.read_text())["rows"][0] == {"i": 0, "tag": "v1"}


# --------------------------------------------------------------------------- HotpotQA


def test_modelscope_json_array_is_normalised(server: Server) -> None:
    server.handler = modelscope_file(json.dumps(RAW_HOTPOT).encode())
    rows = hf_rows_modelscope("o/hotpot", "dev.json", endpoint=server.url)
    assert rows[0]["context"] == NORMALISED_Q1_CONTEXT
    assert rows[0]["supporting_facts"] == {"title": ["Alpha", "Beta"], "sent_id": [0, 0]}
    assert rows[1]["context"] == {"title": ["Gamma"], "sentences": [["Gamma is a person."]]}
    assert [r["answer"] for r in rows] == ["Alpha", "Gamma"]


def test_modelscope_jsonl_is_normalised_and_limited(server: Server) -> None:
    body = "\ufeff" + "\n".join(json.dumps(r) for r in RAW_HOTPOT) + "\n\n"
    server.handler = modelscope_file(body.encode())
    rows = hf_rows_modelscope("o/hotpot", "dev.jsonl", limit=1, endpoint=server.url)
    assert len(rows) == 1 and rows[0]["context"] == NORMALISED_Q1_CONTEXT
    assert server.requests[0].query == {"Revision": "master", "FilePath": "dev.jsonl"}


def test_rows_already_in_the_datasets_server_shape_are_left_alone(server: Server) -> None:
    row = {"question": "q", "context": NORMALISED_Q1_CONTEXT, "answer": "a"}
    assert normalize_hotpotqa_row(row) is row
    other = {"context": "plain text", "supporting_facts": []}
    assert normalize_hotpotqa_row(other) is other
    raw = json.loads(json.dumps(RAW_HOTPOT[0]))
    normalize_hotpotqa_row(raw)
    assert raw == RAW_HOTPOT[0]  # the input is not mutated

    server.handler = lambda p, q, n: _json(200, {"rows": [{"row": row}], "num_rows_total": 1})
    assert hf_rows(
        "hotpotqa/hotpot_qa", "validation", config="distractor", endpoint=server.url
    ) == [row]


# --------------------------------------------------------------------------- cache paths


@pytest.mark.parametrize(
    "dataset",
    ["../../escape", "a/../../../b", "/etc/passwd", "..", "we ird\x00/名前?*:|<>"],
)
def test_names_cannot_escape_the_cache_root(dataset: str, server: Server, tmp_path: Path) -> None:
    server.handler = hf_pages(2)
    hf_rows(dataset, "../..", config="../../x", limit=2, endpoint=server.url)
    server.handler = modelscope_file(b'[{"a": 1}]')
    ms_dataset = "owner/" + dataset.replace(".", "x").strip("/").replace("/", "-")
    hf_rows_modelscope(ms_dataset, "../../../../etc/passwd", revision="..", endpoint=server.url)

    root = (tmp_path / "cache").resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # nothing beside the root
    files = _files(root)
    assert len(files) == 2
    for path in files:
        assert path.resolve().is_relative_to(root)
        assert path.parent == root / "datasets"
        assert not path.name.startswith(".")  # no temp file left behind
    # ...and both are real cache hits afterwards.
    before = len(server.requests)
    hf_rows(dataset, "../..", config="../../x", limit=2, endpoint=server.url)
    hf_rows_modelscope(ms_dataset, "../../../../etc/passwd", revision="..", endpoint=server.url)
    assert len(server.requests) == before
    assert server.requests[-1].query["FilePath"] == "../../../../etc/passwd"  # sent verbatim


@pytest.mark.parametrize("dataset", ["../x", "o/../../x", "/o/d", "o//d", "o/."])
def test_modelscope_ids_with_dot_or_empty_segments_are_refused(dataset: str) -> None:
    # The id is a URL path, where ".." would be resolved into another API route.
    with pytest.raises(ValueError, match=r"dataset=.*'owner/name'"):
        hf_rows_modelscope(dataset, "f.json")


def test_names_that_slug_alike_do_not_collide(server: Server, tmp_path: Path) -> None:
    server.handler = lambda p, q, n: _json(200, {"rows": [{"row": {"d": q["dataset"]}}]})
    assert hf_rows("a/b", "s", endpoint=server.url) == [{"d": "a/b"}]
    assert hf_rows("a?b", "s", endpoint=server.url) == [{"d": "a?b"}]
    assert hf_rows("a/b", "s", endpoint=server.url) == [{"d": "a/b"}]
    assert len(server.requests) == 2 and len(_files(tmp_path / "cache")) == 2


# --------------------------------------------------------------------------- environment


def test_cache_root_is_read_at_call_time(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.handler = hf_pages(3)
    for name in ("one", "two"):
        monkeypatch.setenv("AGENTDESCENT_CACHE", str(tmp_path / name))
        assert cache_root() == tmp_path / name
        hf_rows("d", "train", limit=3, endpoint=server.url)
        assert len(_files(tmp_path / name)) == 1
    assert len(server.requests) == 2  # the second root had no cache yet


def test_default_cache_root_is_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTDESCENT_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "agentdescent"


def test_endpoints_come_from_the_environment_at_call_time(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.handler = lambda p, q, n: (
        _json(200, {"rows": [{"row": {"src": "hf"}}], "num_rows_total": 1})
        if p == "/rows"
        else (200, {}, b'{"src": "ms"}\n')
    )
    monkeypatch.setenv("AGENTDESCENT_HF_ENDPOINT", server.url + "/")
    monkeypatch.setenv("AGENTDESCENT_MODELSCOPE_ENDPOINT", server.url)
    assert hf_rows("d", "train") == [{"src": "hf"}]
    assert hf_rows_modelscope("o/d", "f.jsonl") == [{"src": "ms"}]
    assert [r.path for r in server.requests] == ["/rows", "/api/v1/datasets/o/d/repo"]


def test_public_endpoints_are_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTDESCENT_HF_ENDPOINT")
    monkeypatch.delenv("AGENTDESCENT_MODELSCOPE_ENDPOINT")
    resolve = dataloader._resolve_endpoint
    assert resolve(None, "AGENTDESCENT_HF_ENDPOINT", dataloader.DEFAULT_HF_ENDPOINT, "f") == (
        "https://datasets-server.huggingface.co"
    )
    assert resolve(
        None, "AGENTDESCENT_MODELSCOPE_ENDPOINT", dataloader.DEFAULT_MODELSCOPE_ENDPOINT, "f"
    ) == ("https://www.modelscope.cn")
