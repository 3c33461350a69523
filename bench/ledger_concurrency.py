"""Several ``evolve()`` processes on one SQLite ledger and artifact: what each is told, and what the ledger records.

Starts N driver processes at once on the offline router domain, each ``--rounds`` rounds
with its own seed, on one new ledger file: unshared (``ledger=path``: the lease lets one
drive, the others are refused with ``LedgerBusy``) or sharing (``ledger=SqliteLedger(path,
run_id=f"d{i}")``: each saves its own progress). Prints, per configuration, how many
finished and how many were refused (and how fast), the rounds and tokens the drivers spent
(their results) against what the ledger's progress records (`read_all_progress`, summed),
and the commits the records hold against the ledger's versions.

    python bench/ledger_concurrency.py --rounds 10 --json /tmp/ledger_concurrency.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent import SqliteLedger  # noqa: E402
from agentdescent.engine.progress import read_all_progress  # noqa: E402
from bench.jsonout import write_json  # noqa: E402

CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from agentdescent import LedgerBusy, SqliteLedger, evolve
from agentdescent.domains.router import RouterDomain
start = time.monotonic()
ledger = SqliteLedger({path!r}, run_id={run_id!r}) if {run_id!r} else {path!r}
try:
    r = evolve(**RouterDomain(seed={seed}, latency={latency}).evolve_kwargs(), rounds={rounds}, seed={seed},
               ledger=ledger, max_concurrency=4)
except LedgerBusy as err:
    print(json.dumps({{"busy": str(err), "seconds": time.monotonic() - start}}))
else:
    print(json.dumps({{"rounds": len(r.history), "tokens": r.usage.total_tokens,
                      "commits": sum(h.committed for h in r.history)}}))
"""


def probe(drivers: int, shared: bool, rounds: int, latency: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.sqlite"
        SqliteLedger(path).close()  # made once, so the drivers do not race to create it
        procs = [subprocess.Popen([sys.executable, "-c", CHILD.format(
            root=str(ROOT), path=str(path), run_id=f"d{i}" if shared else "", seed=i, latency=latency,
            rounds=rounds)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(drivers)]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        with SqliteLedger(path) as led:
            saved = read_all_progress(led, "artifact")
            versions = led.head("artifact")[0]
    done = [o for o in outs if "busy" not in o]
    busy = [o for o in outs if "busy" in o]
    return {
        "drivers": drivers, "shared": shared, "finished": len(done), "refused": len(busy),
        "refused_within_s": round(max((o["seconds"] for o in busy), default=0.0), 2),
        "rounds_spent": sum(o["rounds"] for o in done), "rounds_recorded": sum(len(p.rounds) for p in saved.values()),
        "tokens_spent": sum(o["tokens"] for o in done), "tokens_recorded": sum(p.tokens for p in saved.values()),
        "records": len(saved), "commits_recorded": sum(p.commits for p in saved.values()),
        "commits_in_ledger": versions - 1,
        "example_refusal": busy[0]["busy"] if busy else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--latency", type=float, default=0.01, help="median simulated rollout latency (s)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    started = time.monotonic()
    rows = [probe(n, shared, args.rounds, args.latency) for n in (2, 4) for shared in (False, True)]
    print("| drivers | shared | finished / refused (refused within) | progress records | rounds spent / "
          "recorded | tokens spent / recorded | commits recorded / in the ledger |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        refused = f"{r['refused']} ({r['refused_within_s']:.1f} s)" if r["refused"] else "0"
        print(f"| {r['drivers']} | {'yes' if r['shared'] else 'no'} | {r['finished']} / {refused} | {r['records']} | "
              f"{r['rounds_spent']} / {r['rounds_recorded']} | {r['tokens_spent']:,} / {r['tokens_recorded']:,} | "
              f"{r['commits_recorded']} / {r['commits_in_ledger']} |")
    print(f"({time.monotonic() - started:.1f} s)", file=sys.stderr)
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
