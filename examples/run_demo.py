"""The main demo: merging workers vs isolated forks on the offline router domain.

Run from the repository root (``-m``), or as a file from any directory
(``python path/to/examples/run_demo.py``); installed, ``agentdescent demo`` runs the same
code (`agentdescent.cli.demo`)::

    python -m examples.run_demo                 # temporary SQLite ledger
    python -m examples.run_demo --ledger run.db # keep the ledger; run again to resume
    python -m examples.run_demo --refresh-interval 4   # workers keep stale snapshots

Four workers evolve one routing skill together, merging every round through a SQLite
ledger (staleness filter, conflict resolution, fusion, a paired sequential acceptance
test, compare-and-swap commit). On the same worker budget, a fork baseline gives each worker
its own copy of the skill and keeps the best fork. No API key, no network.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a file (python examples/run_demo.py, from any directory): put the repository
    # root first on the path, so `agentdescent` imports without an install.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent.cli.demo import main

if __name__ == "__main__":
    raise SystemExit(main())
