"""One driver of `bench/several_drivers.py`: an ``evolve()`` run on a shared ledger, timed, as a process or a Dask task.

Kept apart from the bench so a Dask worker that unpickles `drive` imports this small
module only. `drive` runs the offline router domain on one artifact of a ledger it opens
itself (a ``postgresql://`` DSN, a `PostgresLedger`, or a SQLite path, a `SqliteLedger`),
as the sharing driver ``run_id``, and returns what its result and its ledger calls say:
rounds, commits, tokens, the duration of every merge (the ledger's outermost ``atomic()``
block, in which a round is decided, committed and saved) and of its writing part (from the
block's first write, the commit or the save, to the block's commit: the ledger's own share). As a script it
takes its arguments as one JSON object and prints its answer as one JSON line, or the
error's type and message (exit 3 for a ledger error, so a killer can tell them apart).

    python -m bench._drivers '{"ledger": "postgresql://...", "run_id": "d0", "seed": 0, "rounds": 8}'
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentdescent import evolve  # noqa: E402
from agentdescent.domains.router import RouterDomain  # noqa: E402
from agentdescent.errors import LedgerError  # noqa: E402
from agentdescent.ledger import PostgresLedger, SqliteLedger  # noqa: E402
from agentdescent.ledger.dsn import is_dsn  # noqa: E402


def _timed(base: type) -> type:
    class Timed(base):  # type: ignore[misc, valid-type]
        """The ledger, timing each outermost block of writes (one merge) and the part of it that writes."""

        merges: list[float]
        writes: list[float]

        @contextmanager
        def atomic(self) -> Iterator[None]:
            depth = getattr(self._local, "bench_depth", 0)
            self._local.bench_depth = depth + 1
            started = time.perf_counter()
            try:
                with super().atomic():
                    yield
            finally:
                self._local.bench_depth = depth
                if depth == 0:
                    ended = time.perf_counter()
                    self.merges.append(ended - started)
                    first = getattr(self._local, "bench_first_write", None)
                    if first is not None:  # from the block's first write to its commit: the ledger's part
                        self.writes.append(ended - first)
                    self._local.bench_first_write = None

        def _mark(self) -> None:
            if getattr(self._local, "bench_depth", 0) and getattr(self._local, "bench_first_write", None) is None:
                self._local.bench_first_write = time.perf_counter()

        def commit(self, *args: Any, **kwargs: Any) -> int:
            self._mark()
            return super().commit(*args, **kwargs)

        def save_run_state(self, *args: Any, **kwargs: Any) -> None:
            self._mark()
            super().save_run_state(*args, **kwargs)

    Timed.__name__ = f"Timed{base.__name__}"
    return Timed


TimedPostgres = _timed(PostgresLedger)
TimedSqlite = _timed(SqliteLedger)


def open_ledger(where: str, run_id: str, **options: Any) -> Any:
    """A timed `PostgresLedger` (``where`` a DSN) or `SqliteLedger` (a path) for driver ``run_id``."""
    ledger = (TimedPostgres if is_dsn(where) else TimedSqlite)(where, run_id=run_id, **options)
    ledger.merges, ledger.writes = [], []
    return ledger


def drive(where: str, run_id: str, seed: int, rounds: int, latency: float = 0.002,
          retry_seconds: float | None = None, workers: int = 3) -> dict[str, Any]:
    """Run ``rounds`` rounds of the router domain as driver ``run_id`` on the ledger at ``where``; resume if saved.

    Returns:
        ``{"run_id", "rounds", "commits", "tokens", "merges": [seconds...], "writes": [seconds...],
        "seconds"}`` (``writes``: each merge's part from its first write to its commit), or
        ``{"run_id", "error": type name, "message", "outage_s"}`` when a ledger error ended the run
        (``outage_s``: for `LedgerUnavailable`, how long the server had been failing its calls).
    """
    options = {} if retry_seconds is None or not is_dsn(where) else {"retry_seconds": retry_seconds}
    started = time.monotonic()
    ledger = open_ledger(where, run_id, **options)
    try:
        result = evolve(**RouterDomain(seed=seed, latency=latency).evolve_kwargs(), rounds=rounds, seed=seed,
                        n_workers=workers, ledger=ledger, max_concurrency=workers)
    except LedgerError as exc:
        return {"run_id": run_id, "error": type(exc).__name__, "message": str(exc)[:600],
                "outage_s": getattr(exc, "seconds", None), "seconds": time.monotonic() - started,
                "merges": ledger.merges, "writes": ledger.writes}
    finally:
        ledger.close()
    return {"run_id": run_id, "rounds": len(result.history), "commits": sum(r.committed for r in result.history),
            "tokens": result.usage.total_tokens, "merges": ledger.merges, "writes": ledger.writes,
            "seconds": time.monotonic() - started}


def main() -> int:
    args = json.loads(sys.argv[1])
    out = drive(args["ledger"], args["run_id"], int(args["seed"]), int(args["rounds"]),
                float(args.get("latency", 0.002)), args.get("retry_seconds"), int(args.get("workers", 3)))
    print(json.dumps(out), flush=True)
    return 3 if "error" in out else 0


if __name__ == "__main__":
    raise SystemExit(main())
