"""`MemoryLedger`: the ledger held in a dict behind one lock, for tests and throwaway runs.

It keeps the `agentdescent.ledger.Ledger` contract exactly (the conformance suite runs on
it) and a run's progress as JSON text, so what comes back is always a copy. Nothing
survives the process.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CASConflict
from .base import (
    Ledger,
    LedgerEntry,
    _check_artifact_id,
    _check_base_version,
    _check_blast_radius,
    _check_state,
    _meta_json,
    _unknown,
    _warn_blast_radius_mismatch,
)

__all__ = ["MemoryLedger"]

logger = logging.getLogger("agentdescent.ledger")


@dataclass
class _Record:
    blast_radius: float
    entries: list[LedgerEntry]



class MemoryLedger(Ledger):
    """A `Ledger` held in a dict behind one lock, for tests and throwaway runs.

    Nothing survives the process; use `SqliteLedger` to persist or resume a run.
    Every method takes the same lock, so reads and commits from any thread see whole
    commits only.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self._run_states: dict[str, str] = {}
        self._run_rounds: dict[str, dict[int, str]] = {}

    def save_run_state(self, run_id: str, state: Mapping[str, Any],
                       rounds: Sequence[Mapping[str, Any]] = ()) -> None:
        """Keep the run's progress and rounds (as JSON text, so what comes back is a copy)."""
        text = json.dumps(dict(state), sort_keys=True)
        stored = {int(r["index"]): json.dumps(dict(r), sort_keys=True) for r in rounds}
        with self._lock:
            self._run_states[run_id] = text
            self._run_rounds.setdefault(run_id, {}).update(stored)

    def load_run_state(self, run_id: str) -> dict[str, Any] | None:
        """The run's saved progress with its rounds as ``"history"``, or None."""
        with self._lock:
            text = self._run_states.get(run_id)
            rounds = dict(self._run_rounds.get(run_id, {}))
        if text is None:
            return None
        state = json.loads(text)
        state["history"] = [json.loads(rounds[i]) for i in sorted(rounds)]
        return state

    def __repr__(self) -> str:
        return f"MemoryLedger(artifacts={len(self._records)})"

    def _record(self, artifact_id: str) -> _Record:
        # Caller holds the lock.
        _check_artifact_id(artifact_id)
        try:
            return self._records[artifact_id]
        except KeyError:
            raise _unknown(artifact_id, list(self._records)) from None

    def register(self, artifact_id: str, state: Mapping[str, str], blast_radius: float) -> None:
        """Create ``artifact_id`` at version 1 with ``state``; a no-op if it already exists.

        Args:
            artifact_id: a non-empty id.
            state: the initial flat ``str -> str`` state.
            blast_radius: in [0, 1]; governance classifies the artifact by it.

        Raises:
            ContractError: an empty id, an id holding a lone surrogate or a control character,
                a state key or value holding a lone surrogate, or a blast radius outside
                [0, 1] (a ``ValueError``).
            TypeError: a state key or value that is not a str.
        """
        _check_artifact_id(artifact_id, writing=True)
        copy = _check_state(artifact_id, state)
        radius = _check_blast_radius(artifact_id, blast_radius)
        with self._lock:
            existing = self._records.get(artifact_id)
            if existing is not None:
                _warn_blast_radius_mismatch(artifact_id, existing.blast_radius, radius)
                return
            self._records[artifact_id] = _Record(radius, [LedgerEntry(artifact_id, 1, copy, {})])

    def head(self, artifact_id: str) -> tuple[int, dict[str, str]]:
        """Return ``(version, state)`` of the head; the state is a copy.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
        """
        with self._lock:
            entry = self._record(artifact_id).entries[-1]
            return entry.version, dict(entry.state)

    def versions(self) -> dict[str, int]:
        """Return artifact id -> head version for every registered artifact."""
        with self._lock:
            return {aid: rec.entries[-1].version for aid, rec in self._records.items()}

    def commit(
        self,
        artifact_id: str,
        new_state: Mapping[str, str],
        base_version: int,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Append ``new_state`` as ``base_version + 1`` if the head is still ``base_version``.

        Args:
            artifact_id: a registered artifact.
            new_state: the full new state (not a diff).
            base_version: the head version the new state was built on.
            meta: a small JSON audit record stored with the version.

        Returns:
            The new head version, ``base_version + 1``.

        Raises:
            CASConflict: the head is not ``base_version``; nothing was written.
            LedgerError: ``artifact_id`` was never registered.
            InvalidArgument: ``meta`` holds NaN or an infinity, the id a control character,
                or a state key or value a lone surrogate.
            TypeError: a bad state, base version or meta.
        """
        _check_artifact_id(artifact_id, writing=True)
        copy = _check_state(artifact_id, new_state, "new_state")
        base = _check_base_version(artifact_id, base_version)
        meta_copy = json.loads(_meta_json(artifact_id, meta))
        with self._lock:
            record = self._record(artifact_id)
            head = record.entries[-1].version
            if head != base:
                raise CASConflict(artifact_id, base, head)
            record.entries.append(LedgerEntry(artifact_id, base + 1, copy, meta_copy))
        logger.debug(
            "commit %r: version %d -> %d (%d keys)", artifact_id, base, base + 1, len(copy)
        )
        return base + 1

    def history(self, artifact_id: str) -> list[LedgerEntry]:
        """Return every version of the artifact, oldest first, as copies.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
        """
        with self._lock:
            entries = list(self._record(artifact_id).entries)
        return [
            LedgerEntry(e.artifact_id, e.version, dict(e.state), json.loads(json.dumps(e.meta)))
            for e in entries
        ]

    def blast_radius(self, artifact_id: str) -> float:
        """Return the blast radius given to ``register``.

        Raises:
            LedgerError: ``artifact_id`` was never registered.
        """
        with self._lock:
            return self._record(artifact_id).blast_radius

