"""One conformance suite per seam: the behaviour the engines rely on, checkable against any implementation.

Each suite is a plain class whose ``test_*`` methods pytest collects when a test module
subclasses it and supplies the factory the suite names (``make_ledger``, ``make_strategy``,
...). The suites are meta-tested: each fails on a deliberately broken implementation.
"""

from __future__ import annotations

from .ledger import LedgerConformance

__all__ = ["LedgerConformance"]
