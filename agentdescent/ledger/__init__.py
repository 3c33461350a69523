"""The versioned store of artifact states: the `Ledger` seam and its two implementations.

`Ledger` (the contract: version numbering, compare-and-swap commits, and the optional
run-state pair a run resumes from) is in `agentdescent.ledger.base`; `MemoryLedger` (for
tests and throwaway runs) in `agentdescent.ledger.memory`; `SqliteLedger` (the embedded
default for persisted runs) in `agentdescent.ledger.sqlite`, with the digest chain and the
open-time check that make damage to its file visible in `agentdescent.ledger.integrity`.
`CASConflict` is importable from here too (SPEC §3).

It imports only the ground floor (errors, seams, validation); it must not import the merge,
the engine or anything above: every layer that commits or reads a head calls down into it.
"""

from __future__ import annotations

from .base import SCHEMA, SCHEMA_VERSION, CASConflict, Ledger, LedgerEntry
from .memory import MemoryLedger
from .postgres import PostgresLedger
from .sqlite import SqliteLedger

__all__ = ["SCHEMA", "SCHEMA_VERSION", "CASConflict", "Ledger", "LedgerEntry", "MemoryLedger", "PostgresLedger",
           "SqliteLedger"]
