"""One conformance suite per seam: the behaviour the engines rely on, checkable against any implementation.

Each suite is a plain class whose ``test_*`` methods pytest collects when a test module
subclasses it (under a ``Test`` name) and supplies the factory the suite names
(``make_ledger``, ``make_strategy``, ``make_policy``, ``make_allocator``,
``make_evaluator``, ``make_provider``). The suites import nothing from pytest and raise
``AssertionError`` naming the rule that broke; each is meta-tested against a
deliberately broken implementation (``tests/test_conformance.py``).
"""

from __future__ import annotations

from .allocator import AllocatorConformance
from .evaluator import EvaluatorConformance
from .ledger import LedgerConformance
from .provider import ProviderConformance
from .run_state import RunStateConformance
from .staleness import StalenessConformance
from .strategy import StrategyConformance

__all__ = [
    "AllocatorConformance",
    "EvaluatorConformance",
    "LedgerConformance",
    "ProviderConformance",
    "RunStateConformance",
    "StalenessConformance",
    "StrategyConformance",
]
