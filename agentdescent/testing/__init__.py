"""Test doubles, simulators and conformance suites users can build their own tests on.

- `FakeProvider` (a handler-backed `agentdescent.model.Provider`, like httpx's
  ``MockTransport``) and `ManualClock` (virtual time that jumps by itself on request):
  `agentdescent.testing.fakes`.
- `CachingProviderSim` (a provider priced like a prefix cache) and `SimCall`:
  `agentdescent.testing.simulators`.
- `LLMServer`, a scripted loopback server speaking the OpenAI and Anthropic chat APIs on
  127.0.0.1 (`agentdescent.testing.llmserver`), and the tutorial's stand-in model built on
  it, with the tickets it knows (`agentdescent.testing.standin`): imported from there.
- `PostgresCluster`, a throwaway PostgreSQL server in a temporary folder (``initdb`` and
  ``pg_ctl``; it starts, stops, restarts and removes it) for testing and benchmarking
  `agentdescent.ledger.PostgresLedger` against a real server: `agentdescent.testing.pgcluster`
  (imported from there, not here: it starts processes).
- One conformance suite per seam (`LedgerConformance`, `StrategyConformance`,
  `StalenessConformance`, `AllocatorConformance`, `EvaluatorConformance`,
  `ProviderConformance`, `RunStateConformance`): `agentdescent.testing.conformance`.

Nothing here is used by the engines themselves, nothing imported here opens a network connection,
and nothing here imports pytest: the suites raise ``AssertionError``, so the package
imports without the dev extras.

It may import the seams it fakes or checks (the ground floor, `budget`, `context`, `ledger`,
`merge`); it must not import the engine or the command line.
"""

from __future__ import annotations

from .conformance import (
    AllocatorConformance,
    EvaluatorConformance,
    LedgerConformance,
    ProviderConformance,
    RunStateConformance,
    StalenessConformance,
    StrategyConformance,
)
from .fakes import FakeProvider, ManualClock
from .simulators import CachingProviderSim, SimCall

__all__ = [
    "AllocatorConformance",
    "CachingProviderSim",
    "EvaluatorConformance",
    "FakeProvider",
    "LedgerConformance",
    "ManualClock",
    "ProviderConformance",
    "RunStateConformance",
    "SimCall",
    "StalenessConformance",
    "StrategyConformance",
]
