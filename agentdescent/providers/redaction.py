"""What of the wire may be shown: the key scrubbed from text, endpoints without credentials, a server's message.

This module owns `_Redactor` (a key, any 8+ character fragment of it, and masked echoes
of it removed from server text; the key alone, or words holding a fragment of it, from a
model's reply), `_display_endpoint` (a URL as it may appear in errors and logs: no
userinfo, query or fragment) and `_server_message` (the human message a server put in an
error body, cut short, not yet redacted).

It must not import a vendor SDK or log: it is text in, text out, and never puts the key
it holds into a ``repr`` or anything it returns.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

__all__: list[str] = []

_SERVER_MESSAGE_LIMIT = 300


def _display_endpoint(url: str) -> str:
    """The endpoint as it may appear in errors and logs: no userinfo, query or fragment."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable endpoint>"
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


class _Redactor:
    """Removes a secret, any 8+ character fragment of it, and masked key echoes from text.

    Servers echo keys back in error bodies (OpenAI: ``"Incorrect API key provided:
    sk-abc***wxyz"``), so text that came from the wire is scrubbed word by word before it
    goes into an exception or a log record. A model's reply can echo the key too (it may
    have been shown a config, a log, an environment); `reply` scrubs that text with the
    rules that cannot corrupt an ordinary reply.
    """

    _MASKED = re.compile(r"\S*(?:\*{3,}|\.{3,}|…)\S*")
    _WORD = re.compile(r"\S+")
    _GRAM = 8

    def __init__(self, secret: str | None) -> None:
        secret = secret or ""
        n = self._GRAM if len(secret) >= self._GRAM else len(secret)
        self._secret = secret
        self._grams = {secret[i : i + n] for i in range(len(secret) - n + 1)} if n else set()
        self._n = n

    def _leaks(self, word: str) -> bool:
        if not self._n or len(word) < self._n:
            return False
        return any(word[i : i + self._n] in self._grams for i in range(len(word) - self._n + 1))

    def _fragments(self, text: str) -> str:
        return self._WORD.sub(lambda m: "[redacted]" if self._leaks(m.group(0)) else m.group(0), text)

    def __call__(self, text: str) -> str:
        """Scrub server text (error bodies): the key, its fragments and masked echoes."""
        if self._secret:
            text = text.replace(self._secret, "[redacted]")
        text = self._MASKED.sub("[redacted]", text)
        return self._fragments(text)

    def reply(self, text: str, *, words: bool = True) -> str:
        """Scrub model output: the key and (with ``words``) any word holding a fragment of it.

        A masked echo is scrubbed only when what it shows is this key's own start and end
        (``...``, ``…`` and ``***`` are ordinary in replies). A key shorter than 8 characters is a placeholder (``"EMPTY"`` for a
        local server), not a credential, and scrubbing it would corrupt ordinary words,
        so such a key leaves replies alone. ``words=False`` replaces only the whole key,
        for structured text (tool-call arguments) that a word swap would break.
        """
        if len(self._secret) < self._GRAM:
            return text
        text = text.replace(self._secret, "[redacted]")
        if not words:
            return text
        return self._MASKED.sub(self._masked_echo, self._fragments(text))

    def _masked_echo(self, match: re.Match[str]) -> str:
        """A masked word that shows this key's own head and tail (``sk-tes***T123``) is the key: scrub it.

        The shown parts must be the key's own start and end and add up to 8 characters or
        more; any other masked word (``wait...``, ``***``, another key's echo) stays.
        """
        raw = match.group(0)
        word = raw.strip(_PUNCTUATION)
        head, tail = (re.split(r"\*{3,}|\.{3,}|…", word, maxsplit=1) + [""])[:2]
        if len(head) + len(tail) >= self._GRAM and self._secret.startswith(head) and self._secret.endswith(tail):
            start = raw.index(word)
            return raw[:start] + "[redacted]" + raw[start + len(word):]
        return raw


#: What may stand around a word in a reply without being part of it.
_PUNCTUATION = "\"'`.,;:!?()[]{}<>"


def _server_message(exc: Any) -> str:
    """The human message a server put in an error body, if any (not yet redacted)."""
    body = getattr(exc, "body", None)
    message = None
    if isinstance(body, Mapping):
        err = body.get("error", body)
        if isinstance(err, Mapping):
            message = err.get("message")
        elif isinstance(err, str):
            message = err
        message = message or body.get("message")
    elif isinstance(body, str):
        message = body
    if not isinstance(message, str) or not message.strip():
        message = getattr(exc, "message", None) or getattr(exc, "msg", None) or ""
    message = " ".join(str(message).split())
    if len(message) > _SERVER_MESSAGE_LIMIT:
        message = message[:_SERVER_MESSAGE_LIMIT] + "..."
    return message
