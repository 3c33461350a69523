"""The ledger seam: what a versioned store of artifact states must do, and the checks both ledgers share.

This module owns version numbering and the compare-and-swap (CAS) commit rule as a
contract (`Ledger`, with its optional run-state and grouping members), the value a version is
read back as (`LedgerEntry`), and the argument checks and JSON readers both shipped
ledgers (`agentdescent.ledger.MemoryLedger`, `agentdescent.ledger.SqliteLedger`) use.
It must not decide *what* gets committed (that is the aggregator's job), call a model,
or serialise state with ``pickle``.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import CASConflict, InvalidArgument, InvalidArgumentType, LedgerError
from ..seams import Seam
from ..validation import control_character

__all__ = ["SCHEMA", "SCHEMA_VERSION", "CASConflict", "Ledger", "LedgerEntry"]

logger = logging.getLogger("agentdescent.ledger")

#: The schema version this agentdescent writes, and the newest it reads. Version 2 added
#: the hash chain over versions and the per-artifact head pointer; a version 1 file is
#: upgraded in place on first open, a newer one is refused (`LedgerTooNew`).
SCHEMA_VERSION = 2

#: The value of the ``schema`` row in the ``meta`` table of a ledger file (the same
#: number is in SQLite's ``user_version``). A file holding any other marker was written by
#: something else and is refused, never migrated.
SCHEMA = f"agentdescent-ledger/{SCHEMA_VERSION}"

_MAX_LISTED_IDS = 10
_MAX_LISTED_PROBLEMS = 20

# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class LedgerEntry:
    """One version of one artifact, as `Ledger.history` returns it.

    Entries are snapshots: the dicts they hold are copies, so changing them never
    changes the ledger.

    Args:
        artifact_id: the artifact this version belongs to.
        version: the version number, 1 for the state given to ``register``.
        state: the artifact's full state at this version.
        meta: the small JSON audit record passed to ``commit`` (diff id, author...),
            ``{}`` when none was given.
    """

    artifact_id: str
    version: int
    state: dict[str, str]
    meta: dict[str, Any] = field(default_factory=dict)



# --------------------------------------------------------------------------- the seam


class Ledger(Seam):
    """A versioned store of artifact states with compare-and-swap commits.

    Who calls it: in a run, exactly one writer registers artifacts and commits (the
    aggregator, on the merger thread or at the sync round barrier); workers call
    `head` and `versions` from any thread to take snapshots, and governance
    reads `blast_radius`. No model call ever runs while a commit is in flight.

    Thread-safety: every method may be called from any thread at any time, including
    concurrently with a commit. Implementations serialise writes themselves.

    Consistency rules every implementation keeps (`agentdescent.testing.LedgerConformance`
    is the conformance suite; subclass it to check another implementation):

    - Versions of an artifact are contiguous: 1 (``register``) up to the head, each
      created by exactly one successful ``commit``. A version row is never rewritten.
    - ``commit(aid, state, base)`` is atomic: it succeeds, creating ``base + 1``, if and
      only if the head is ``base`` at that instant; otherwise it raises
      `CASConflict` and changes nothing. The caller re-reads the head and
      re-applies its diff; it never overwrites the winner.
    - ``head`` returns a version and the state *of that version* (never a torn pair),
      as a copy the caller may mutate.
    - ``register`` of a known id is a no-op (a resumed run keeps its history).

    The six methods above are required; ``save_run_state``/``load_run_state`` (a run's
    progress, for resume), ``atomic`` (writes that land together) and ``close`` are
    optional, with defaults that keep nothing and group nothing.
    Subclass `Ledger` to inherit them, or give any object with the six methods: the
    engines wrap it (`agentdescent.seams.adopt`).
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("register", "head", "versions", "commit", "history", "blast_radius")
    OPTIONAL: ClassVar[tuple[str, ...]] = ("save_run_state", "load_run_state", "atomic", "close")

    def register(self, artifact_id: str, state: Mapping[str, str], blast_radius: float) -> None:
        """Create ``artifact_id`` at version 1 with ``state``; a no-op if it already exists."""
        raise NotImplementedError

    def head(self, artifact_id: str) -> tuple[int, dict[str, str]]:
        """Return ``(version, state)`` of the artifact's head; the state is a copy."""
        raise NotImplementedError

    def versions(self) -> dict[str, int]:
        """Return artifact id -> head version for every registered artifact."""
        raise NotImplementedError

    def commit(
        self,
        artifact_id: str,
        new_state: Mapping[str, str],
        base_version: int,
        *,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Append ``new_state`` as version ``base_version + 1`` if the head is still ``base_version``."""
        raise NotImplementedError

    def history(self, artifact_id: str) -> list[LedgerEntry]:
        """Return every version of the artifact, oldest first."""
        raise NotImplementedError

    def blast_radius(self, artifact_id: str) -> float:
        """Return the blast radius given to ``register`` (governance classifies by it)."""
        raise NotImplementedError


    def save_run_state(self, run_id: str, state: Mapping[str, Any],
                       rounds: Sequence[Mapping[str, Any]] = ()) -> None:
        """Keep a run's progress (optional; the default keeps nothing, so a run cannot resume).

        The engines save one JSON object per run (keyed by the artifact id) and the
        rounds that are new since the last save, after every round or sweep, from the
        merging thread only, and read it back with `load_run_state` when a run opens on
        this ledger (`agentdescent.engine.progress`): round numbering, spend, stop-rule,
        allocator and task-order state then continue instead of starting over.

        ``state`` is a JSON-ready mapping; each of ``rounds`` is one round's JSON with an
        ``"index"``, stored under that index (a round saved again replaces its earlier
        copy). Rounds are kept apart from the state so that a long run saves only what is
        new, not its whole history, after every round. Both writes happen atomically.
        """

    def load_run_state(self, run_id: str) -> dict[str, Any] | None:
        """The run's saved progress with ``"history"`` (its rounds in index order), or None.

        Optional: the default (for a ledger that keeps no progress) is None. A ledger that
        persists progress where something else can change it must refuse what was changed
        (`agentdescent.errors.RunStateDamaged`) rather than hand it back: a resumed run
        trusts it. `agentdescent.ledger.SqliteLedger` checks each saved row against its
        digest; `agentdescent.testing.RunStateConformance` checks the rule.
        """
        return None

    def atomic(self) -> AbstractContextManager[None]:
        """A block whose writes from this thread (commits, run-state saves) land together.

        Optional. The engines merge a round and save its progress inside one block, so
        a process that dies between a round's commit and the save of that round loses
        both, and its resumed run replays the round from the progress saved before it,
        as if the round had never started. The default groups nothing (each write
        lands on its own; a commit made after the last save is then adopted on resume:
        `agentdescent.engine.progress.read_progress`).

        A write that fails inside the block is undone on its own; the writes before it
        still land when the block ends, whether it ends normally or by an exception.
        """
        return nullcontext()

    def close(self) -> None:
        """Release what the ledger holds open (optional; the default holds nothing)."""


# --------------------------------------------------------------------------- validation


def _check_artifact_id(artifact_id: object, *, writing: bool = False) -> str:
    """The artifact id both ledgers accept: a non-empty str that encodes as UTF-8.

    ``writing`` (``register`` and ``commit``) refuses a control character too (a NUL, a
    newline...: `agentdescent.validation.control_character`), so no new artifact or
    version is stored under one; the reads accept it, so an artifact an older agentdescent
    stored under such an id can still be read back (and salvaged).
    """
    if not isinstance(artifact_id, str) or not artifact_id:
        raise InvalidArgument(
            f"artifact_id={artifact_id!r}: an artifact id must be a non-empty str "
            "(for example 'artifact' or 'skill:router')"
        )
    try:
        artifact_id.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"artifact_id={artifact_id!r}: holds a lone surrogate, which no file or database "
            "can store; use an id that encodes as UTF-8 (agentdescent.types.sanitize_text "
            "cleans one)"
        ) from None
    control = control_character(artifact_id) if writing else None
    if control is not None:
        raise InvalidArgument(
            f"artifact_id={artifact_id!r}: holds the control character {control!r} (at position "
            f"{artifact_id.index(control)}); an artifact id names run directories, log lines and "
            "ledger rows, so it is refused: use printable text (for example 'artifact' or 'skill:router')"
        )
    return artifact_id


def _text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as a state key or value (a lone surrogate), or None."""
    if text.isascii():  # the fast path: ASCII always encodes
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone surrogate ({text[exc.start]!r} at position {exc.start})"
    return None


def _check_state(artifact_id: str, state: object, what: str = "state") -> dict[str, str]:
    """Validate a flat ``str -> str`` state and return a private copy of it."""
    if not isinstance(state, Mapping):
        raise InvalidArgumentType(
            f"{what} for artifact {artifact_id!r} must be a mapping of str to str, got "
            f"{type(state).__name__}; artifact state is always a flat dict[str, str]"
        )
    copy: dict[str, str] = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise InvalidArgumentType(
                f"{what} for artifact {artifact_id!r} has a {type(key).__name__} key {key!r}; "
                "keys must be str"
            )
        if not isinstance(value, str):
            raise InvalidArgumentType(
                f"{what} for artifact {artifact_id!r}: key {key!r} holds a "
                f"{type(value).__name__} value; values must be str (serialise it first)"
            )
        for part, text in (("key", key), ("value", value)):
            problem = _text_problem(text)
            if problem is not None:
                # JSON would escape it, but the text cannot be encoded as UTF-8: rendering the
                # artifact for a model, hashing it or writing it to a file would fail later.
                shown = f"key {key!r:.60}" if part == "key" else f"the value of key {key!r:.60}"
                raise InvalidArgument(
                    f"{what} for artifact {artifact_id!r}: {shown} holds {problem}, which cannot be "
                    "encoded as UTF-8 (a rendered prompt, a file or a hash of the artifact would "
                    "fail on it); nothing was written. Clean the text first "
                    "(agentdescent.types.sanitize_text replaces lone surrogates with U+FFFD)"
                )
        copy[key] = value
    return copy


def _check_blast_radius(artifact_id: str, blast_radius: object) -> float:
    if isinstance(blast_radius, bool) or not isinstance(blast_radius, (int, float)):
        raise InvalidArgumentType(
            f"blast_radius={blast_radius!r} for artifact {artifact_id!r}: expected a float "
            f"in [0, 1], got {type(blast_radius).__name__}"
        )
    value = float(blast_radius)
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidArgument(
            f"blast_radius={blast_radius!r} for artifact {artifact_id!r}: expected a finite "
            "float in [0, 1] (the share of the system a bad change can hurt; "
            "<= 0.30 is a fast L2 artifact)"
        )
    return value


def _check_base_version(artifact_id: str, base_version: object) -> int:
    if isinstance(base_version, bool) or not isinstance(base_version, int):
        raise InvalidArgumentType(
            f"base_version={base_version!r} for artifact {artifact_id!r}: expected the int "
            "version the new state was built on (the first element of head())"
        )
    if base_version < 1:
        raise InvalidArgument(
            f"base_version={base_version!r} for artifact {artifact_id!r}: versions start at 1; "
            "pass the version head() returned"
        )
    return base_version


def _meta_json(artifact_id: str, meta: object) -> str:
    """Validate the audit record and return it as JSON text."""
    if meta is None:
        return "{}"
    if not isinstance(meta, Mapping):
        raise InvalidArgumentType(
            f"meta for artifact {artifact_id!r} must be a mapping (a small JSON audit record "
            f"such as {{'diff_id': ..., 'author': ...}}), got {type(meta).__name__}"
        )
    try:
        # Strict JSON: NaN and the infinities are not JSON numbers, and a file holding
        # them cannot be read by other JSON tools.
        return json.dumps(dict(meta), sort_keys=True, allow_nan=False)
    except TypeError as exc:
        raise InvalidArgumentType(
            f"meta for artifact {artifact_id!r} is not JSON-serialisable ({exc}); keep it to "
            "str keys and str/number/bool/None/list/dict values"
        ) from exc
    except ValueError as exc:
        raise InvalidArgument(
            f"meta for artifact {artifact_id!r} cannot be stored as strict JSON ({exc}): it "
            "holds NaN or an infinity (or refers to itself); store None or a string such as "
            "'nan' instead of a non-finite number"
        ) from exc


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def _json_type(value: object) -> str:
    return _JSON_TYPES.get(type(value), "number")


def _parse_state(text: object) -> dict[str, str]:
    """Parse a stored state; raise ``ValueError`` saying what is wrong with it."""
    if not isinstance(text, str):
        raise InvalidArgument(f"a {type(text).__name__} value where JSON text belongs")
    state = json.loads(text)
    if not isinstance(state, dict):
        raise InvalidArgument(f"a JSON {_json_type(state)}, not an object")
    for key, value in state.items():
        if not isinstance(value, str):
            raise InvalidArgument(f"key {key!r} holds a JSON {_json_type(value)}, not a string")
    return state


def _parse_meta(text: object) -> dict[str, Any]:
    """Parse a stored audit record; raise ``ValueError`` saying what is wrong with it."""
    if not isinstance(text, str):
        raise InvalidArgument(f"a {type(text).__name__} value where JSON text belongs")
    meta = json.loads(text)
    if not isinstance(meta, dict):
        raise InvalidArgument(f"a JSON {_json_type(meta)}, not an object")
    return meta


def _unknown(artifact_id: str, known: list[str]) -> LedgerError:
    if not known:
        return LedgerError(
            f"unknown artifact {artifact_id!r}: no artifact is registered in this ledger; "
            "call register(artifact_id, state, blast_radius) first"
        )
    known = sorted(known)
    listed = ", ".join(repr(k) for k in known[:_MAX_LISTED_IDS])
    if len(known) > _MAX_LISTED_IDS:
        listed += f", ... ({len(known) - _MAX_LISTED_IDS} more)"
    return LedgerError(
        f"unknown artifact {artifact_id!r}: registered artifacts are {listed}; "
        "check the id or register it first"
    )


def _warn_blast_radius_mismatch(artifact_id: str, stored: float, given: float) -> None:
    if stored != given:
        logger.warning(
            "register(%r): blast_radius=%s differs from the stored %s; the artifact already "
            "exists, so the stored value is kept (a ledger never rewrites an artifact)",
            artifact_id,
            given,
            stored,
        )

