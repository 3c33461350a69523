"""`SandboxedReward`: what the code rewards share — a project read once, a sandbox, one run per key, counts.

This module owns the common body of `agentdescent.code.TestSuite` and
`agentdescent.code.CommandReward`: checking the timeout, the sandbox and the tree; reading
the project once (`agentdescent.code.project.ProjectCopy`); the run cache
(`agentdescent.code.cache.RunCache`); the counts `stats` reports; how an ``agent=``
override becomes the engine's ``propose``; and pickling without the lock. It must not
decide what a run means (each reward does).
"""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from ..errors import InvalidArgument, InvalidArgumentType
from ..validation import check_real
from .cache import RunCache
from .project import ProjectCopy
from .sandbox import Sandbox
from .tree import FileTree

__all__ = ["SandboxedReward", "split_command"]

T = TypeVar("T")


def split_command(command: object, owner: str, example: str) -> list[str]:
    """``command`` as an argument list (a string is split like a shell would).

    Raises:
        InvalidArgument: an empty command or an argument that is not a non-empty string.
    """
    parts = shlex.split(command) if isinstance(command, str) else list(command) if isinstance(command, (list, tuple)) else []
    if not parts or not all(isinstance(p, str) and p for p in parts):
        raise InvalidArgument(f"{owner}(command={command!r:.120}): give the command as a list of strings or one "
                              f"string, such as {example!r}")
    return parts


class SandboxedReward(Generic[T]):
    """The shared body of the sandboxed rewards (see the module docstring).

    Args:
        directory: the project folder.
        timeout: seconds one run may take.
        sandbox: where runs happen (default ``Sandbox(timeout=timeout)``).
        tree: which files are the artifact (default `FileTree`).
        cache_size: runs kept.
        counts: the names `stats` counts, besides ``cache_hits`` and ``sandbox_seconds``.
    """

    def __init__(self, directory: str | os.PathLike[str], timeout: float, sandbox: Sandbox | None,
                 tree: FileTree | None, cache_size: int, counts: tuple[str, ...]) -> None:
        owner = type(self).__name__
        self.timeout = check_real(timeout, "timeout", low=0.0, low_open=True, owner=owner)
        if sandbox is not None and not isinstance(sandbox, Sandbox):
            raise InvalidArgumentType(f"{owner}(sandbox={sandbox!r:.80}): give an agentdescent.code.Sandbox")
        self.sandbox = sandbox if sandbox is not None else Sandbox(timeout=self.timeout)
        if tree is not None and not isinstance(tree, FileTree):
            raise InvalidArgumentType(f"{owner}(tree={tree!r:.80}): give an agentdescent.code.FileTree")
        self.tree = tree if tree is not None else FileTree()
        self.project = ProjectCopy(directory, self.tree, owner)
        self._cache: RunCache[T] = RunCache(cache_size)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(counts, 0)
        self._seconds = 0.0

    @property
    def directory(self) -> Path:
        """The project folder, resolved."""
        return self.project.directory

    @property
    def initial(self) -> dict[str, str]:
        """The tree's state as the project folder holds it (the starting state)."""
        return self.project.initial

    @property
    def skipped(self) -> dict[str, str]:
        """Files the tree matched but left out, with why (`FileTree.scan`)."""
        return self.project.skipped

    def _count(self, seconds: float, **flags: bool) -> None:
        """Count one run: its seconds, and each of ``flags`` that is true."""
        with self._lock:
            self._seconds += seconds
            for name, on in flags.items():
                self._counts[name] += int(on)

    def stats(self) -> dict[str, float]:
        """The runs counted so far, ``cache_hits`` and ``sandbox_seconds``."""
        with self._lock:
            return {**self._counts, "cache_hits": self._cache.hits, "sandbox_seconds": round(self._seconds, 3)}

    def _engine_kwargs(self, kwargs: dict[str, Any], overrides: dict[str, Any],
                       check_agent: Callable[[Any], None] | None = None) -> dict[str, Any]:
        """``kwargs`` updated with ``overrides``, an ``agent=`` override turned into ``propose``."""
        agent = overrides.pop("agent", None)
        if agent is not None:
            if "propose" in overrides:
                raise InvalidArgument(f"{type(self).__name__}.evolve_kwargs: give agent= or propose=, not both")
            if check_agent is not None:
                check_agent(agent)
            kwargs["propose"] = agent.propose
        kwargs.update(overrides)
        return kwargs

    def close(self) -> None:
        """Remove the temporary copy of the project (also done when the object is collected), and end the
        runs of its sandbox still going (`Sandbox.stop`): a run given up on, on another thread, leaves nothing."""
        self.project.close()  # first: a run not yet set up then fails to copy it, instead of starting
        self.sandbox.stop()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
