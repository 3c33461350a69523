"""`RunCache`: one sandboxed run per key, kept, with every concurrent asker waiting for it.

This module owns how the code rewards avoid running the same thing twice: a bounded,
thread-safe, least-recently-used map from a key (a state's hash, or a state's and a task's)
to the result of one run, where a caller asking for a key that is being computed waits for
that computation instead of starting another. It must not run anything itself.
"""

from __future__ import annotations

import collections
import hashlib
import json
import threading
from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

__all__ = ["RunCache", "state_hash"]

T = TypeVar("T")


def state_hash(state: Mapping[str, str], *extra: str) -> str:
    """A stable hash of a state (and of ``extra`` strings, such as a task id)."""
    text = json.dumps([dict(state), list(extra)], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class RunCache(Generic[T]):
    """The results of up to ``size`` runs, by key; `get` computes a missing one once.

    Args:
        size: results kept (the least recently used goes first).
    """

    def __init__(self, size: int = 64) -> None:
        self.size = max(1, int(size))
        self._done: collections.OrderedDict[Hashable, T] = collections.OrderedDict()
        self._running: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()
        self.hits = 0

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The result for ``key``: kept, being computed (then waited for), or computed now.

        If ``compute`` raises, nothing is kept and the error reaches this caller; a caller
        that was waiting computes it again.
        """
        while True:
            with self._lock:
                if key in self._done:
                    self._done.move_to_end(key)
                    self.hits += 1
                    return self._done[key]
                waiting = self._running.get(key)
                if waiting is None:
                    self._running[key] = threading.Event()
                    break
            waiting.wait()
        try:
            result = compute()
            with self._lock:
                self._done[key] = result
                while len(self._done) > self.size:
                    self._done.popitem(last=False)
            return result
        finally:
            with self._lock:
                self._running.pop(key).set()

    def __getstate__(self) -> dict[str, object]:
        return {"size": self.size}  # a copy in another process starts empty

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(int(state["size"]))  # type: ignore[misc, arg-type]
