"""`LLMServer`: a scripted loopback HTTP server that speaks the OpenAI and Anthropic chat APIs, for tests.

The provider SDKs (openai 3.x, anthropic 2.x) are built on ``httpx2``, which ``respx``
cannot intercept, so the adapters are tested against this real server on 127.0.0.1:
real sockets, real SDK request building and response parsing. Each test scripts the
replies it wants (status, headers, body, delay, or a dropped connection) in a queue; the
server records every request (path, headers, JSON body, arrival time) so tests can
assert on what the SDK sent and when.

It serves ``POST /v1/chat/completions`` (OpenAI chat completions; point the SDK at
``server.openai_base_url``) and ``POST /v1/messages`` (Anthropic messages; point the
SDK at ``server.base_url``). When the queue is empty it answers 599 with a message
saying so, so a test that under-scripts fails loudly instead of hanging. It listens on
127.0.0.1 only, and is never used by the engines (the test suite, the benches and
`agentdescent.testing.standin` start it).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "LLMServer",
    "RecordedRequest",
    "Reply",
    "anthropic_body",
    "openai_body",
]


@dataclass
class Reply:
    """One scripted response.

    Args:
        status: HTTP status code.
        body: a JSON-serialisable object, or ``bytes``/``str`` sent verbatim (for
            malformed-body tests).
        headers: extra response headers (``Retry-After`` and friends).
        delay: seconds to wait before answering (to provoke client timeouts).
        drop: close the connection without answering (a server that accepted the
            connection and then died), after ``delay``.
    """

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False


@dataclass
class RecordedRequest:
    """What the server received: method, path, headers (lower-cased names), JSON body, and when.

    ``at`` is the arrival time on `time.monotonic` (read when the request line and body
    were in), so a test can tell requests sent before a call returned from those after.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


def openai_body(
    text: str = "ok",
    *,
    prompt_tokens: int = 10,
    completion_tokens: int = 2,
    cached_tokens: int | None = None,
    model: str = "test-model",
    finish_reason: str = "stop",
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A minimal valid OpenAI chat-completions response body.

    ``tool_calls`` are added to the message as given (``[{"id", "type": "function",
    "function": {"name", "arguments"}}]``).
    """
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage,
    }


def anthropic_body(
    text: str = "ok",
    *,
    input_tokens: int = 10,
    output_tokens: int = 2,
    cache_read_input_tokens: int | None = None,
    cache_creation_input_tokens: int | None = None,
    model: str = "test-model",
    stop_reason: str = "end_turn",
    tool_uses: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A minimal valid Anthropic messages response body.

    ``tool_uses`` are appended to the content as ``tool_use`` blocks
    (``[{"id", "name", "input"}]``).
    """
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    if cache_read_input_tokens is not None:
        usage["cache_read_input_tokens"] = cache_read_input_tokens
    if cache_creation_input_tokens is not None:
        usage["cache_creation_input_tokens"] = cache_creation_input_tokens
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [
            {"type": "text", "text": text},
            *({"type": "tool_use", **use} for use in tool_uses or ()),
        ],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


class LLMServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 (an ephemeral port) with scripted replies.

    Use as a context manager (or call :meth:`close`). Thread-safe: the SDK may send
    requests from several threads; replies are popped from one queue in arrival order.
    """

    def __init__(self, responder: Any = None) -> None:
        """Args: responder: optional ``responder(path, body) -> Reply`` used when no scripted reply is queued."""
        self._responder = responder
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._stop = threading.Event()
        self.requests: list[RecordedRequest] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest output clean

            def do_POST(self) -> None:  # http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    parsed: Any = json.loads(raw) if raw else None
                except ValueError:
                    parsed = raw.decode("utf-8", "replace")
                headers = {k.lower(): v for k, v in self.headers.items()}
                with owner._lock:
                    owner.requests.append(RecordedRequest("POST", self.path, headers, parsed))
                    reply = owner._queue.popleft() if owner._queue else None
                if reply is None and owner._responder is not None:
                    reply = owner._responder(self.path, parsed)
                if reply is None:
                    reply = Reply(599, {"error": {"message": "LLMServer: no scripted reply left"}})
                if reply.delay and owner._stop.wait(reply.delay):
                    return  # server shutting down: drop the connection
                if reply.drop:
                    self.close_connection = True
                    return  # no status line at all: the client sees a dropped connection
                if isinstance(reply.body, bytes):
                    payload = reply.body
                elif isinstance(reply.body, str):
                    payload = reply.body.encode("utf-8")
                else:
                    payload = json.dumps(reply.body).encode("utf-8")
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` (the Anthropic SDK's base-url form)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` (the OpenAI SDK's base-url form)."""
        return f"{self.base_url}/v1"

    def push(
        self,
        body: Any = None,
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        drop: bool = False,
    ) -> None:
        """Queue one reply (``drop=True``: close the connection without answering)."""
        with self._lock:
            self._queue.append(Reply(status, body, dict(headers or {}), delay, drop))

    def pending(self) -> int:
        """Replies still queued."""
        with self._lock:
            return len(self._queue)

    def close(self) -> None:
        """Stop serving and release the port (delayed handlers are woken and dropped)."""
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LLMServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
