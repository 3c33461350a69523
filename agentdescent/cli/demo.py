"""The main demo: merging workers vs isolated forks on the offline router domain.

Installed with the package, so it runs anywhere::

    agentdescent demo                           # temporary SQLite ledger
    agentdescent demo --ledger run.db           # keep the ledger; run again to resume
    agentdescent demo --refresh-interval 4      # workers keep stale snapshots

(``python -m examples.run_demo`` in a checkout runs the same code.)

Four workers evolve one routing skill together, merging every round through a SQLite
ledger (staleness filter, conflict resolution, fusion, paired sequential acceptance,
compare-and-swap commit). On the same worker budget, a fork baseline gives each worker
its own copy of the skill and keeps the best fork. No API key, no network.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ..domains.router import RouterDomain
from ..engine.entry import evolve
from .parser import OneLineParser
from .runspec import knob_default

__all__ = ["KNOB_FLAGS", "demo_parser", "main"]


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([line, sep, *body])


#: The demo's flags that mirror an engine knob -> that knob (their defaults are the engines': `knob_default`).
KNOB_FLAGS = {"--seed": "seed", "--rounds": "rounds", "--workers": "n_workers", "--refresh-interval": "refresh_interval"}


def demo_parser() -> argparse.ArgumentParser:
    """``agentdescent demo``'s argument parser."""
    parser = OneLineParser(prog="agentdescent demo", description=__doc__.split("\n\n")[0])
    knob = {flag: knob_default(name) for flag, name in KNOB_FLAGS.items()}
    parser.add_argument("--ledger", type=Path, default=None,
                        help="SQLite ledger file to keep (a second run resumes it); default: a temporary one")
    parser.add_argument("--seed", type=int, default=knob["--seed"],
                        help=f"seed of the domain and the run (default {knob['--seed']})")
    parser.add_argument("--rounds", type=int, default=knob["--rounds"], help=f"sync rounds (default {knob['--rounds']})")
    parser.add_argument("--workers", type=int, default=knob["--workers"], help=f"workers (default {knob['--workers']})")
    parser.add_argument("--refresh-interval", type=int, default=knob["--refresh-interval"],
                        help="rounds a worker keeps its snapshot; above 1 diffs can be stale "
                        f"(default {knob['--refresh-interval']})")
    parser.add_argument("--noise", type=float, default=0.25,
                        help="probability that a proposal names a wrong label (default 0.25)")
    parser.add_argument("--progress", action="store_true", help="show progress bars")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    parser = demo_parser()
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.workers < 1 or args.refresh_interval < 1:
        parser.error("--rounds, --workers and --refresh-interval must be at least 1")

    with tempfile.TemporaryDirectory(prefix="agentdescent-demo-") as tmp:
        ledger_path = args.ledger if args.ledger is not None else Path(tmp) / "ledger.sqlite"
        domain = RouterDomain(seed=args.seed, noise=args.noise)
        where = str(ledger_path) if args.ledger is not None else "a temporary SQLite file, deleted at exit (--ledger FILE keeps it)"
        print(f"ledger: {where}  ({len(domain.tasks)} routing tasks, "
              f"{args.workers} workers x {args.rounds} rounds, noise {args.noise})")

        merged = evolve(
            **domain.evolve_kwargs(), artifact_id="router", rounds=args.rounds,
            n_workers=args.workers, seed=args.seed, ledger=ledger_path, progress=args.progress,
            refresh_interval=args.refresh_interval,
        )
        rows = [
            [h.index, f"{h.held_out_reward:.3f}", h.committed, h.fused, h.discarded_stale,
             h.conflicts_dropped, h.tokens]
            for h in merged.history
        ]
        print("\nMerging workers (one shared skill):")
        print(_table(rows, ["round", "held-out", "commits", "fusions", "stale", "conflicts", "tokens"]))

        forks = []
        for w in range(args.workers):
            fork_domain = RouterDomain(seed=args.seed, noise=args.noise)
            forks.append(evolve(
                **fork_domain.evolve_kwargs(), artifact_id=f"router-fork-{w}", rounds=args.rounds,
                n_workers=1, seed=args.seed + 1000 + w, ledger=ledger_path,
            ))
        best = max(range(args.workers), key=lambda i: forks[i].final_reward)

    print("\nSame worker budget, compared:")
    fork_tokens = sum(f.usage.total_tokens for f in forks)
    print(_table(
        [
            ["merging workers", f"{merged.final_reward:.3f}", merged.rollouts, merged.committed,
             merged.version, merged.usage.total_tokens],
            [f"best of {args.workers} forks (fork {best})", f"{forks[best].final_reward:.3f}",
             sum(f.rollouts for f in forks), sum(f.committed for f in forks),
             forks[best].version, fork_tokens],
        ],
        ["run", "final held-out", "rollouts", "commits", "head version", "tokens"],
    ))
    print(f"\nmerge outcomes: {merged.outcomes()}")
    print(f"stop reason: {merged.stop_reason}; final skill:\n{merged.rendered}")
    if merged.error:
        print(f"error: {merged.error}", file=sys.stderr)
        return 1
    return 0
