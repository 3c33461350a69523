"""`Counters`: the thread-safe tally every part of a run counts what it did into.

Workers, the call runner, the merge and the round recorder all count into one bag per
run (rollouts, proposals, backend failures, held-out tasks scored...), from any thread;
the result reports it as ``result.counters``. It must not hold anything but counts.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping

__all__ = ["Counters"]


class Counters:
    """A thread-safe bag of named integer counts (missing names read 0)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()

    def add(self, key: str, n: int = 1) -> None:
        """Add ``n`` to ``key``."""
        with self._lock:
            self._counts[key] += n

    def get(self, key: str) -> int:
        """The count of ``key`` (0 if never counted)."""
        with self._lock:
            return self._counts[key]

    def as_dict(self) -> dict[str, int]:
        """Every count, sorted by name (a copy)."""
        with self._lock:
            return dict(sorted(self._counts.items()))

    def update(self, counts: Mapping[str, int]) -> None:
        """Add saved counts (a resumed run's)."""
        with self._lock:
            self._counts.update({str(k): int(v) for k, v in counts.items()})

    def __repr__(self) -> str:
        return f"Counters({self.as_dict()!r})"
