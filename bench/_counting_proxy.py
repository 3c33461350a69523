"""A counting proxy: every model call of every arm, counted the same way, at the wire.

`CountingProxy(upstream)` is a small stdlib ``ThreadingHTTPServer`` on 127.0.0.1 (a free
port) that forwards every request, unchanged, to an upstream OpenAI-compatible base URL
and sends the upstream's reply back. On the way it counts, thread-safely, the
chat-completion calls (``POST .../chat/completions``; the legacy ``.../completions`` too)
and the ``usage`` the upstream put in each reply (``prompt_tokens``, ``completion_tokens``;
for a streamed reply, the last ``usage`` in the event stream). Point each client at
`CountingProxy.base_url` instead of the upstream: our engine's provider and DSPy's LM are
then counted by one meter that depends on neither of them, and a call served from a
client's own cache never reaches it.

``snapshot()`` gives the counts so far; the difference of two snapshots (`delta`) is what
one arm spent. With ``keep=N`` the proxy also keeps the last N request bodies and reply
texts (`CountingProxy.exchanges`), to check what a client actually sent (``max_tokens``,
``temperature``) and what it got back.
"""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["CountingProxy", "delta"]

#: Headers that belong to one connection, not to the message: not forwarded either way.
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
        "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding"}

#: The counters of a snapshot.
FIELDS = ("calls", "ok", "errors", "prompt_tokens", "completion_tokens", "total_tokens", "without_usage",
          "other_requests")


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """What was counted between two `CountingProxy.snapshot` results."""
    return {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in FIELDS}


def _usage_of(body: bytes) -> dict[str, Any] | None:
    """The ``usage`` object of a JSON reply, or the last one of a server-sent event stream."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        usage = data.get("usage")
        return usage if isinstance(usage, dict) else None
    found = None
    for line in body.decode("utf-8", "replace").splitlines():
        if line.startswith("data:") and line[5:].strip() not in ("", "[DONE]"):
            try:
                event = json.loads(line[5:])
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("usage"), dict):
                found = event["usage"]
    return found


def _reply_text(body: bytes) -> str:
    """The first choice's text of a JSON chat (or legacy) completion, '' when there is none."""
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        message = choice.get("message") or {}
        return str(message.get("content") if message.get("content") is not None else choice.get("text") or "")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""


class CountingProxy:
    """Forward every request to ``upstream`` and count the chat-completion calls and their tokens.

    Args:
        upstream: the upstream base URL, including its version segment
            (``"http://127.0.0.1:8090/v1"``); http or https.
        timeout: seconds to wait for the upstream on one request.
        keep: how many recent exchanges (request body, reply text, status) to keep (0: none).

    Use as a context manager, or call `start` and `close`. ``base_url`` is the proxy's own
    base URL with the upstream's path (``http://127.0.0.1:PORT/v1``): give it to clients.
    """

    def __init__(self, upstream: str, *, timeout: float = 600.0, keep: int = 0) -> None:
        parts = urllib.parse.urlsplit(upstream.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"CountingProxy(upstream={upstream!r}): give an http(s):// base URL")
        self.upstream = upstream.rstrip("/")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._path = parts.path
        self.timeout = float(timeout)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(FIELDS, 0)
        self.exchanges: deque[dict[str, Any]] = deque(maxlen=max(0, int(keep)) or None)
        self._keep = int(keep) > 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ life

    def start(self) -> CountingProxy:
        """Bind 127.0.0.1 on a free port and serve in a daemon thread; returns self."""
        if self._server is not None:
            return self
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _forward(self) -> None:
                proxy._handle(self)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _forward

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-proxy", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> CountingProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The port the proxy listens on (after `start`)."""
        if self._server is None:
            raise RuntimeError("CountingProxy: call start() first")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """The proxy's base URL with the upstream's path: what a client is pointed at."""
        return f"http://127.0.0.1:{self.port}{self._path}"

    # ------------------------------------------------------------------ counts

    def snapshot(self) -> dict[str, int]:
        """The counts so far: calls (chat completions), ok / errors, tokens, replies without usage, other requests."""
        with self._lock:
            return dict(self._counts)

    def _count(self, is_call: bool, status: int, body: bytes, request: bytes) -> None:
        usage = _usage_of(body) if is_call and status == 200 else None
        with self._lock:
            if not is_call:
                self._counts["other_requests"] += 1
                return
            self._counts["calls"] += 1
            if status != 200:
                self._counts["errors"] += 1
            else:
                self._counts["ok"] += 1
                if usage is None:
                    self._counts["without_usage"] += 1
                else:
                    prompt = int(usage.get("prompt_tokens") or 0)
                    completion = int(usage.get("completion_tokens") or 0)
                    self._counts["prompt_tokens"] += prompt
                    self._counts["completion_tokens"] += completion
                    self._counts["total_tokens"] += int(usage.get("total_tokens") or prompt + completion)
            if self._keep:
                try:
                    sent = json.loads(request) if request else None
                except ValueError:
                    sent = None
                self.exchanges.append({"status": status, "request": sent, "reply": _reply_text(body),
                                       "usage": usage})

    # ------------------------------------------------------------------ forwarding

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        request = handler.rfile.read(length) if length > 0 else b""
        path = handler.path
        is_call = handler.command == "POST" and path.split("?", 1)[0].rstrip("/").endswith("/completions")
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP}
        connection_class = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        connection = connection_class(self._host, self._port, timeout=self.timeout)
        try:
            connection.request(handler.command, path, body=request if request else None, headers=headers)
            response = connection.getresponse()
            status, reason = response.status, response.reason
            body = response.read()
            reply_headers = [(k, v) for k, v in response.getheaders() if k.lower() not in _HOP]
        except (OSError, http.client.HTTPException) as exc:
            status, reason = 502, "Bad Gateway"
            body = json.dumps({"error": {"message": f"counting proxy: upstream {self.upstream} failed: "
                                                    f"{type(exc).__name__}: {exc}", "type": "proxy_error"}}).encode()
            reply_headers = [("Content-Type", "application/json")]
        finally:
            connection.close()
        self._count(is_call, status, body, request)
        try:
            handler.send_response(status, reason)
            for key, value in reply_headers:
                handler.send_header(key, value)
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(body)
        except OSError:  # the client went away; the call is still counted
            pass
