"""The SQLite ledger's rows read back: a stored state, audit record, head or blast radius, checked.

`RowReader` is a mixin of `agentdescent.ledger.sqlite.SqliteLedger`: given a connection
(the ledger's ``_conn``), it reads an artifact's head through its head pointer in one
SELECT (``_head_row``, checked by `agentdescent.ledger.integrity.head_problem`), lists the
known ids for the error on an unknown one (``_known_ids``), parses a stored state,
audit record or blast radius (``_load_state``, ``_load_meta``, ``_radius``) and a history's
rows, each checked against its digest (``_entries``), refusing a
damaged one with `LedgerCorrupted` naming the file, the artifact and the version. It uses
the ledger's ``_path``.

It must not write anything, nor open a connection or a transaction of its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .base import LedgerEntry, _parse_meta, _parse_state, _unknown
from .integrity import head_problem, row_error, version_digest

__all__ = ["RowReader"]


_HEAD_SQL = (
    "SELECT a.head_version, a.head_digest, v.version, v.parent_digest, v.state_json,"
    " v.meta_json, v.digest FROM artifacts a LEFT JOIN versions v"
    " ON v.artifact_id = a.artifact_id AND v.version = a.head_version WHERE a.artifact_id = ?"
)


class RowReader:
    """The row readers of `agentdescent.ledger.SqliteLedger` (mixed in; the ledger gives ``_path``)."""

    _path: Path

    def _known_ids(self, conn: sqlite3.Connection) -> list[str]:
        return [row[0] for row in conn.execute("SELECT artifact_id FROM artifacts")]

    def _load_state(self, artifact_id: str, version: int, text: str) -> dict[str, str]:
        try:
            return _parse_state(text)
        except (TypeError, ValueError) as exc:
            raise row_error(
                str(self._path), artifact_id,
                f"version {version} holds corrupt state ({exc}); expected a JSON object of str -> str",
            ) from exc

    def _load_meta(self, artifact_id: str, version: int, text: str) -> dict[str, Any]:
        try:
            return _parse_meta(text)
        except (TypeError, ValueError) as exc:
            raise row_error(
                str(self._path), artifact_id,
                f"version {version} holds a corrupt audit record ({exc}); expected a JSON object",
            ) from exc

    def _head_row(self, conn: sqlite3.Connection, artifact_id: str, *, verify: bool) -> tuple[int, Any, Any]:
        """``(head version, head digest, state_json)`` through the head pointer; raise if it is damaged.

        ``verify`` recomputes the head row's digest (a commit, which builds on it); without
        it only the pointer and the row's presence are checked (a read: O(1) either way).
        """
        row = conn.execute(_HEAD_SQL, (artifact_id,)).fetchone()
        if row is None:
            raise _unknown(artifact_id, self._known_ids(conn))
        pointer, pointer_digest, found, parent, state_json, meta_json, digest = row
        stored = None if found is None else (parent, state_json, meta_json, digest)
        problem = head_problem(artifact_id, pointer, pointer_digest, stored, verify=verify)
        if problem:
            raise row_error(str(self._path), artifact_id, problem,
                            f"; history({artifact_id!r}) still reads the versions that survive")
        return int(pointer), pointer_digest, state_json

    def _entries(self, artifact_id: str, rows: Iterable[tuple[Any, Any, Any, Any, Any]]) -> list[LedgerEntry]:
        """``history``'s entries from ``(version, state_json, meta_json, parent_digest, digest)`` rows,
        each parsed and checked against its digest; raise `LedgerCorrupted` for the first that is not."""
        entries = []
        for version, state_json, meta_json, parent, digest in rows:
            if isinstance(version, bool) or not isinstance(version, int):
                raise row_error(str(self._path), artifact_id,
                                f"a row has version {version!r}; versions are integers from 1")
            state = self._load_state(artifact_id, version, state_json)
            audit = self._load_meta(artifact_id, version, meta_json)
            if digest != version_digest(artifact_id, version, parent, state_json, meta_json):
                raise row_error(str(self._path), artifact_id,
                                f"version {version} does not match its digest: its state or audit "
                                "record was changed outside agentdescent")
            entries.append(LedgerEntry(artifact_id, version, state, audit))
        return entries

    def _radius(self, artifact_id: str, value: Any) -> float:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise row_error(str(self._path), artifact_id,
                            f"its blast radius {value!r} is not a number in [0, 1]") from None
