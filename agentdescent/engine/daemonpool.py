"""The engines' default executor: `DaemonPool`, a pool of daemon threads, and `runs_in_process`.

This module owns the pool every run's calls run on unless the user passes an executor of
their own. Its threads are daemons, so a hung call never keeps the process alive. It
knows nothing of calls, budgets or runs.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["DaemonPool", "runs_in_process"]


class DaemonPool(concurrent.futures.Executor):
    """A fixed pool of *daemon* threads: the engines' default executor.

    Unlike `concurrent.futures.ThreadPoolExecutor`, whose threads the interpreter joins at
    exit, a hung call on this pool never keeps the process alive: after Ctrl-C or a time
    stop the engine returns and the process can exit at once.

    Args:
        threads: worker threads (started lazily, up to this many).
        name: thread name prefix.
    """

    def __init__(self, threads: int, name: str = "agentdescent") -> None:
        self._threads = threads
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._started: list[threading.Thread] = []
        self._idle = 0
        self._lock = threading.Lock()
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        """Schedule ``fn(*args, **kwargs)``; returns its future."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("DaemonPool: submit after shutdown")  # the executor protocol's own error
            self._queue.put((future, fn, args, kwargs))
            if self._idle == 0 and len(self._started) < self._threads:
                thread = threading.Thread(target=self._work, name=f"{self._name}-{len(self._started)}", daemon=True)
                self._started.append(thread)
                thread.start()
            else:
                self._idle -= 1 if self._idle else 0
        return future

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:  # the future carries it to the waiter
                    future.set_exception(exc)
            del item, future
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; with ``cancel_futures`` cancel what has not started."""
        with self._lock:
            self._closed = True
            if cancel_futures:
                while True:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is not None:
                        item[0].cancel()
            for _ in self._started:
                self._queue.put(None)
        if wait:
            for thread in self._started:
                thread.join()


def runs_in_process(executor: concurrent.futures.Executor) -> bool:
    """True for the executors whose calls run in this process's threads (nothing is pickled)."""
    return isinstance(executor, (DaemonPool, concurrent.futures.ThreadPoolExecutor))
