"""What makes damage to a ledger file visible: the digest chain over versions, the open-time check, the run-state digests.

This module owns `version_digest` (each version row's digest covers its artifact id, its
number, its state, its audit record and its parent's digest, so a changed, replaced or
re-inserted row breaks the chain), `run_state_digest` and `round_digest` (each row of a
run's saved progress carries a digest of its run id, its round number and its JSON text,
checked by `run_state_problems` when the progress is read back), `HistoryCheck` (the
problems found in a stream of version rows read in ``(artifact_id, version)`` order, and
in each artifact's head pointer and blast radius), `head_problem` (the same rules for one head, in O(1), for a
commit), `chain` (the digests a schema-1 file is upgraded with), and the `LedgerCorrupted`
errors that name what is wrong with the way to salvage (a damaged history, a damaged row,
an empty or truncated file). It runs no SQL (`agentdescent.ledger.sqlite` reads the rows
and writes the digests) and must not write anything.

The digest is a check against accidents and hand edits (a deleted row, an edited state,
a file restored half way), not against a forger: anyone who can write the file can also
recompute the chain.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import LedgerCorrupted
from .base import (
    _MAX_LISTED_PROBLEMS,
    _check_artifact_id,
    _check_base_version,
    _check_blast_radius,
    _check_state,
    _meta_json,
    _parse_meta,
    _parse_state,
)
from .dsn import is_dsn

__all__ = ["HistoryCheck", "Pointer", "chain", "commit_row", "head_problem", "history_error", "place", "registration_row", "round_digest",
           "run_state_digest", "run_state_problems", "saved_progress", "stored_text", "version_digest"]

#: The parent digest of version 1: the chain starts at registration.
ROOT_DIGEST = ""

_SQLITE_MAGIC = b"SQLite format 3\x00"


def version_digest(artifact_id: object, version: object, parent: object, state_json: object,
                   meta_json: object) -> str:
    """The digest of one version row (blake2b-128, hex): its id, number, state, audit record, parent.

    Each part is length-prefixed, so no two different rows hash alike by moving text from
    one field to the next. A value that is not text (a damaged row) is hashed by its
    ``repr``, so a damaged row still gets a digest, never an exception.
    """
    return _digest(b"agentdescent-v2", (artifact_id, version, parent, state_json, meta_json))


def _digest(person: bytes, parts: Iterable[object]) -> str:
    h = hashlib.blake2b(digest_size=16, person=person)
    for part in parts:
        text = part if isinstance(part, str) else repr(part)
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()


#: The digest of a run-state row saved before run state had digests: not yet covered.
UNCOVERED = ""

_RUN_PERSON = b"agentdescent-run"


def registration_row(artifact_id: str, state: Mapping[str, str],
                     blast_radius: float) -> tuple[dict[str, str], float, str, str]:
    """What a persisted ledger stores for ``register``, checked: ``(state copy, radius, state JSON, digest)``.

    Raises:
        ContractError, TypeError: a bad id, state or blast radius (named).
    """
    _check_artifact_id(artifact_id, writing=True)
    copy = _check_state(artifact_id, state)
    radius = _check_blast_radius(artifact_id, blast_radius)
    state_json = json.dumps(copy, sort_keys=True)
    return copy, radius, state_json, version_digest(artifact_id, 1, ROOT_DIGEST, state_json, "{}")


def commit_row(artifact_id: str, new_state: Mapping[str, str], base_version: int,
               meta: Mapping[str, Any] | None) -> tuple[dict[str, str], int, str, str]:
    """What a persisted ledger stores for ``commit``, checked: ``(state copy, base, state JSON, meta JSON)``.

    ``meta`` is the audit record as it is stored (a leased driver's already signed).

    Raises:
        InvalidArgument, TypeError: a bad id, state, base version or ``meta`` (named).
    """
    _check_artifact_id(artifact_id, writing=True)
    copy = _check_state(artifact_id, new_state, "new_state")
    base = _check_base_version(artifact_id, base_version)
    return copy, base, json.dumps(copy, sort_keys=True), _meta_json(artifact_id, meta)


def run_state_digest(run_id: object, state_json: object) -> str:
    """The digest of a run's saved state row (blake2b-128, hex): its run id and its JSON text.

    Length-prefixed like `version_digest`, under another personalisation, so no run-state
    row can pass for a version row or a round row (the first part says which it is).
    """
    return _digest(_RUN_PERSON, ("state", run_id, state_json))


def round_digest(run_id: object, index: object, round_json: object) -> str:
    """The digest of one saved round row (blake2b-128, hex): its run id, its round number, its JSON text.

    The number is covered, so a round moved to another index (or another run) does not
    match its digest either.
    """
    return _digest(_RUN_PERSON, ("round", run_id, index, round_json))


def stored_text(raw: object) -> str | None:
    """A JSON column read as bytes (``CAST(... AS BLOB)``) as text; None when it is not UTF-8.

    Reading the bytes keeps a flipped bit that breaks the UTF-8 encoding a named damage
    (`run_state_problems`) instead of sqlite3's "Could not decode to UTF-8" error.
    """
    if isinstance(raw, (bytes, bytearray, memoryview)):
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return raw if isinstance(raw, str) else None


def run_state_problems(run_id: str, state: tuple[str | None, object] | None,
                       rounds: Iterable[tuple[object, str | None, object]]) -> list[str]:
    """What is wrong with a run's saved rows by their digests, one line each (empty: nothing found).

    A row whose digest is `UNCOVERED` (saved by an agentdescent before run state had
    digests) is not yet covered and is not checked here (its JSON still is, when it is
    parsed); every save covers the rows of its run (`agentdescent.ledger.sqlite`).

    Args:
        run_id: the run.
        state: its ``run_state`` row as ``(text, digest)`` (text None: not UTF-8), or None.
        rounds: its ``run_rounds`` rows as ``(index, text, digest)``.
    """
    problems: list[str] = []
    if state is not None:
        text, digest = state
        if text is None:
            problems.append("its saved state is not UTF-8 text (a flipped bit, or bytes written outside "
                            "agentdescent)")
        elif digest != UNCOVERED and digest != run_state_digest(run_id, text):
            problems.append("its saved state does not match its digest: it was changed outside "
                            "agentdescent (a flipped bit, or a hand edit)")
    unreadable, altered = [], []
    for index, text, digest in rounds:
        if text is None:
            unreadable.append(str(index))
        elif digest != UNCOVERED and digest != round_digest(run_id, index, text):
            altered.append(str(index))
    if unreadable:
        problems.append(f"saved round(s) {', '.join(unreadable)} are not UTF-8 text")
    if altered:
        problems.append(f"saved round(s) {', '.join(altered)} do not match their digests: changed outside "
                        "agentdescent (a flipped bit, or a hand edit)")
    return problems


def saved_progress(run_id: str, state: tuple[str | None, object] | None,
                   rounds: list[tuple[object, str | None, object]],
                   damaged: Callable[[str, str], Exception], problems: Iterable[str] = ()) -> dict[str, Any] | None:
    """A run's saved progress from its stored rows, checked (both ledgers' ``load_run_state``).

    Args:
        run_id: the run.
        state: its ``run_state`` row as ``(text, digest)`` (text None: not UTF-8), or None.
        rounds: its ``run_rounds`` rows as ``(index, text, digest)``, in index order.
        damaged: makes the ledger's `RunStateDamaged` from ``(run_id, what)``.
        problems: what the ledger found wrong itself (a row with no digest where every row has one).

    Returns:
        The saved state with its rounds under ``"history"``, or None when nothing was saved.

    Raises:
        RunStateDamaged: (from ``damaged``) a row does not match its digest or is not UTF-8, rounds
            are stored without their state, the state is not a JSON object, or a round is not JSON.
    """
    found = [*problems, *run_state_problems(run_id, state, rounds)]
    if found:
        raise damaged(run_id, "; ".join(found))
    if state is None:
        if rounds:
            raise damaged(run_id, f"{len(rounds)} saved round(s) are stored but the run's saved state (its row in "
                          "the run_state table) is missing, so its counters, spend and stop rules are lost")
        return None
    try:
        loaded: Any = json.loads(state[0])  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        loaded = exc
    if not isinstance(loaded, dict):
        raise damaged(run_id, f"its saved state is not a JSON object ({loaded})")
    try:
        loaded["history"] = [json.loads(text) for _, text, _ in rounds]  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise damaged(run_id, f"a saved round is not JSON ({exc})") from None
    return loaded


@dataclass(frozen=True)
class Pointer:
    """An artifact's row in the ``artifacts`` table: its blast radius and head pointer.

    ``head_version`` and ``head_digest`` are None for a schema-1 file, which has no
    pointer (its history is checked for gaps and unreadable rows only).
    """

    blast_radius: object
    head_version: object = None
    head_digest: object = None


def _is_version(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _spans(versions: list[list[int]]) -> str:
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in versions)


def _missing(spans: list[list[int]], head: int) -> tuple[list[str], int]:
    """The gaps of ``spans`` (runs of stored versions) within 1..head, and how many versions they hold."""
    gaps, count, previous = [], 0, 0
    for first, last in [*spans, [head + 1, head + 1]]:
        if first > previous + 1:
            lo, hi = previous + 1, min(first - 1, head)
            if lo <= hi:
                gaps.append(str(lo) if lo == hi else f"{lo}-{hi}")
                count += hi - lo + 1
        previous = max(previous, last)
    return gaps, count


def _radius_problem(radius: object) -> str | None:
    if isinstance(radius, bool) or not isinstance(radius, (int, float)) or not math.isfinite(radius) \
            or not 0.0 <= radius <= 1.0:
        return f"its blast radius {radius!r} is not a number in [0, 1]"
    return None


@dataclass
class _Seen:
    spans: list[list[int]] = field(default_factory=list)  # runs of consecutive stored versions
    problems: list[str] = field(default_factory=list)  # problems of single rows, in version order
    last: tuple[int, object] = (0, ROOT_DIGEST)  # the last stored version and its stored digest


class HistoryCheck:
    """The problems of a ledger's version rows, fed one row at a time in ``(artifact_id, version)`` order.

    Memory grows with the artifacts and the problems found, not with the history: each
    row is checked against the row before it and forgotten.

    Args:
        registered: artifact id -> its `Pointer`, for every row of the ``artifacts`` table.
        chained: the rows carry digests (schema 2); False for a schema-1 file.
    """

    def __init__(self, registered: Mapping[str, Pointer], chained: bool) -> None:
        self.registered = dict(registered)
        self.chained = chained
        self.rows_seen = 0
        self._seen: dict[str, _Seen] = {}

    def row(self, artifact_id: str, version: object, state_json: object, meta_json: object,
            parent: object = None, digest: object = None) -> None:
        """Check one version row against its own digest and the row before it."""
        self.rows_seen += 1
        seen = self._seen.setdefault(artifact_id, _Seen())
        if not _is_version(version):
            seen.problems.append(f"a row has version {version!r}; versions are integers from 1")
            return
        version = int(version)
        if seen.spans and seen.spans[-1][1] + 1 == version:
            seen.spans[-1][1] = version
        else:
            seen.spans.append([version, version])
        readable = True
        try:
            _parse_state(state_json)
        except (TypeError, ValueError) as exc:
            readable = False
            seen.problems.append(
                f"version {version} holds unreadable state ({exc}); expected a JSON object of str -> str"
            )
        try:
            _parse_meta(meta_json)
        except (TypeError, ValueError) as exc:
            readable = False
            seen.problems.append(
                f"version {version} holds an unreadable audit record ({exc}); expected a JSON object"
            )
        if self.chained:
            previous, previous_digest = seen.last
            if version == 1 and parent != ROOT_DIGEST:
                seen.problems.append("version 1 does not start the chain: its parent digest is not empty")
            elif version > 1 and previous + 1 == version and parent != previous_digest:
                seen.problems.append(
                    f"version {version} does not follow version {version - 1}: its parent digest is "
                    f"not version {version - 1}'s (a version was replaced or re-inserted outside "
                    "agentdescent)"
                )
            # An unreadable row cannot match its digest either; the line above says enough.
            if readable and digest != version_digest(artifact_id, version, parent, state_json, meta_json):
                seen.problems.append(
                    f"version {version} does not match its digest: its state or audit record was "
                    "changed outside agentdescent"
                )
        seen.last = (version, digest)

    def problems(self) -> list[str]:
        """Every problem found, one line each, artifact by artifact (structural problems first)."""
        problems: list[str] = []
        for artifact_id in sorted(set(self.registered) | set(self._seen), key=str):
            seen = self._seen.get(artifact_id, _Seen())
            pointer = self.registered.get(artifact_id)
            found: list[str] = []
            stored = _spans(seen.spans)
            last = seen.spans[-1][1] if seen.spans else 0
            if pointer is None:
                what = f"versions {stored} are" if seen.spans else "rows are"
                found.append(
                    f"{what} stored but the artifact is not registered (its row in the "
                    "artifacts table is missing)"
                )
            else:
                radius = _radius_problem(pointer.blast_radius)
                if radius:
                    found.append(radius)
            head = last
            if pointer is not None and self.chained:
                if not _is_version(pointer.head_version):
                    found.append(f"its head pointer is missing or unreadable (head_version="
                                 f"{pointer.head_version!r}); the head cannot be told")
                else:
                    said = int(pointer.head_version)
                    head = max(last, said)
                    if said < last:
                        over = f"version {last} is" if said + 1 == last else f"versions {said + 1}-{last} are"
                        found.append(
                            f"{over} stored beyond its head (the head pointer says version {said}): "
                            "written outside agentdescent"
                        )
                    elif said == last and seen.last[1] != pointer.head_digest:
                        found.append(
                            f"its head pointer's digest does not match version {last}: the head row "
                            "was replaced outside agentdescent"
                        )
            if pointer is not None and not seen.spans:
                found.append("no version is stored (version 1 is missing)")
            elif seen.spans and seen.spans != [[1, head]]:
                gaps, count = _missing(seen.spans, head)
                many = "versions" if count > 1 else "version"
                text = (f"{many} {', '.join(gaps)} missing from its history (stored: {stored}; every "
                        f"version from 1 to the head {head} must exist)")
                if head > last:
                    text += (f"; version {head} is its head (the head pointer says so), so its last "
                             "commit was deleted and a resumed run would write another version "
                             f"{last + 1} in its place")
                found.append(text)
            found += seen.problems
            problems += [f"artifact {artifact_id!r}: {problem}" for problem in found]
        return problems


def head_problem(artifact_id: str, pointer_version: object, pointer_digest: object,
                 row: tuple[object, object, object, object] | None, *, verify: bool = True) -> str | None:
    """What is wrong with an artifact's head, or None: the same rules as `HistoryCheck`, for one row.

    Args:
        artifact_id: the artifact.
        pointer_version: ``head_version`` of its ``artifacts`` row.
        pointer_digest: ``head_digest`` of its ``artifacts`` row.
        row: the version row the pointer names, as ``(parent_digest, state_json,
            meta_json, digest)``, or None when there is no such row.
        verify: also recompute the row's digest (False: only the pointer and the row's
            presence, for a plain read).
    """
    if not _is_version(pointer_version):
        return f"its head pointer is missing or unreadable (head_version={pointer_version!r})"
    if row is None:
        return (f"version {pointer_version}, its head, is missing (the head pointer says version "
                f"{pointer_version}): its last commit was deleted")
    if not verify:
        return None
    parent, state_json, meta_json, digest = row
    if digest != pointer_digest:
        return (f"its head pointer's digest does not match version {pointer_version}: the head row "
                "was replaced outside agentdescent")
    if digest != version_digest(artifact_id, pointer_version, parent, state_json, meta_json):
        return (f"version {pointer_version}, its head, does not match its digest: its state or audit "
                "record was changed outside agentdescent")
    return None


def history_error(path: str, problems: list[str], *, schema: str | None = None) -> LedgerCorrupted:
    """The error for a ledger that failed its history check on open: every problem, and the ways on.

    ``path`` is a file, or a database's DSN (without its password) with the ``schema`` its
    tables are in.
    """
    shown = problems[:_MAX_LISTED_PROBLEMS]
    lines = "".join(f"\n  - {p}" for p in shown)
    if len(problems) > len(shown):
        lines += f"\n  - ... ({len(problems) - len(shown)} more)"
    count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
    if schema is None:
        where, what = place(path), "file"
        fresh, salvage = "open a new path", f"SqliteLedger({path!r}, check_history=False)"
    else:
        where, what = f"{place(path)} (schema {schema!r})", "database"
        fresh, salvage = "give a new schema", "PostgresLedger(dsn, check_history=False)"
    return LedgerCorrupted(
        f"{where} failed its history check on open ({count}):{lines}\n"
        f"The {what} was edited or damaged outside agentdescent; the ledger was not "
        f"modified. Restore the {what} from a backup, or {fresh} to start a fresh "
        f"run. To read the intact artifacts, open {salvage}; do not resume a run on it.",
        path=path, problems=tuple(problems),
    )


def place(path: str) -> str:
    """How an error names a ledger: ``ledger file '...'``, or ``ledger database '...'`` for a DSN
    (given without its password)."""
    return f"ledger database {path!r}" if is_dsn(path) else f"ledger file {path!r}"


def row_error(path: str, artifact_id: str, problem: str, salvage: str = "") -> LedgerCorrupted:
    """The error for one damaged head or row met after open (a commit or a read); nothing was written."""
    what, fresh = ("database", "a new schema") if is_dsn(path) else ("file", "a new path")
    return LedgerCorrupted(
        f"{place(path)}: artifact {artifact_id!r}: {problem}. The {what} was edited or "
        f"damaged outside agentdescent; nothing was written. Restore the {what} from a backup, or "
        f"open {fresh} to start a fresh run{salvage}.",
        path=path, problems=(f"artifact {artifact_id!r}: {problem}",),
    )


def chain(artifact_id: str, rows: Iterable[tuple[Any, Any, Any]]
          ) -> tuple[list[tuple[str, str, str, Any]], tuple[Any, str]]:
    """The chain over one artifact's stored rows, for the upgrade of a schema-1 file.

    Args:
        artifact_id: the artifact.
        rows: its ``(version, state_json, meta_json)`` rows in version order.

    Returns:
        ``(parent_digest, digest, artifact_id, version)`` per row, and the last version with
        its digest (the head pointer). A row after a gap (a damaged file opened with
        ``check_history=False``) gets no parent, so the gap stays visible and is not papered
        over.
    """
    updates: list[tuple[str, str, str, Any]] = []
    last: tuple[Any, str] = (0, ROOT_DIGEST)
    for version, state_json, meta_json in rows:
        follows = _is_version(version) and version == last[0] + 1
        parent = last[1] if follows else ROOT_DIGEST
        digest = version_digest(artifact_id, version, parent, state_json, meta_json)
        updates.append((parent, digest, artifact_id, version))
        if _is_version(version):
            last = (version, digest)
    return updates, last


def empty_file_error(path: str) -> LedgerCorrupted:
    """A 0-byte ledger file: refused, never taken for a new ledger."""
    return LedgerCorrupted(
        f"ledger file {path!r} is empty (0 bytes): a ledger file always holds its tables, so this "
        "one was truncated or is not a ledger, and it is not taken for a new one. Restore it from "
        "a backup; or delete it, or pick another path, to start a new ledger",
        path=path, problems=("the file is empty (0 bytes)",),
    )


def undecodable_text_error(path: str, what: str, exc: BaseException) -> LedgerCorrupted:
    """A text column that is not valid UTF-8 (a byte flipped, or bytes written by something else): damaged."""
    return LedgerCorrupted(
        f"ledger file {path!r} is damaged: {what} failed because a stored text is not valid UTF-8 "
        f"({exc}). The ledger writes only UTF-8, so a byte of the file was changed. Restore it from a "
        "backup, or pick another path to start a new ledger; the sqlite3 command line's '.recover' may "
        "save what is left of it",
        path=path, problems=(f"SQLite: {exc}",),
    )


def damaged_file_error(path: str, what: str, exc: BaseException) -> LedgerCorrupted | None:
    """A file SQLite calls malformed (or not a database) that begins as a SQLite file: truncated or damaged.

    Returns None when the file does not begin with SQLite's header (some other file).
    """
    try:
        with open(path, "rb") as handle:
            start = handle.read(len(_SQLITE_MAGIC))
        size = os.path.getsize(path)
    except OSError:
        return None
    if not start or not (_SQLITE_MAGIC.startswith(start) if len(start) < len(_SQLITE_MAGIC)
                         else start == _SQLITE_MAGIC):
        return None
    return LedgerCorrupted(
        f"ledger file {path!r} is damaged or truncated: {what} failed ({exc}; the file is {size} "
        "bytes). It is not taken for a new ledger. Restore it from a backup, or pick another path "
        "to start a new ledger; the sqlite3 command line's '.recover' may save what is left of it",
        path=path, problems=(f"SQLite: {exc}",),
    )
