"""Kill-and-resume cycles against one uninterrupted run: does a resumed run lose progress?

Runs ``evolve`` on the offline router domain (simulated latency, so rounds take time) in a
child process on a SQLite ledger, kills it with SIGKILL after a random delay, and starts
it again on the same ledger — the library resumes from the progress saved in the ledger —
until it has done ``--rounds`` rounds. The same seed runs once uninterrupted. Prints, per
round, the held-out reward of both, and the tokens each spent; a resumed run that replayed
its task order or restarted its counters would fall behind or repeat.

    python bench/resume_cycles.py --rounds 15 --seeds 0,1,2 --json bench/results/resume_cycles.json

With ``--between-commit-and-save`` every kill lands in the one window a timer rarely hits:
the child kills itself (SIGKILL, through a hook on the progress save) right after a round
that committed, before that round's progress is saved, ``--kills`` times per seed. The
commit and the save land together (`agentdescent.ledger.Ledger.atomic`), so the kill
leaves neither and the resumed run replays the round; the table compares the rounds, the
commits the progress records with the ledger's, and any orphan commit adopted
(`agentdescent.engine.progress.read_progress`: none, unless a ledger groups nothing).

    python bench/resume_cycles.py --rounds 15 --seeds 0,1,2 --between-commit-and-save --json /tmp/resume_between.json
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentdescent import SqliteLedger  # noqa: E402
from agentdescent.engine.progress import read_progress  # noqa: E402
from bench.jsonout import write_json  # noqa: E402

CHILD = """
import sys
sys.path.insert(0, {root!r})
from agentdescent import evolve
from agentdescent.domains.router import RouterDomain
done = {done}
if {hook}:
    import os, signal
    from agentdescent.engine.progress import ProgressStore
    save = ProgressStore.save
    def dying_save(self, state, history):  # die after a committed round (not the first) of this process, before its save
        if len(history) > done + 1 and history[-1].committed:
            os.kill(os.getpid(), signal.SIGKILL)
        save(self, state, history)
    ProgressStore.save = dying_save
evolve(**RouterDomain(seed={seed}, latency={latency}).evolve_kwargs(), rounds={rounds} - done, seed={seed},
       ledger={ledger!r}, max_concurrency=4)
"""


def rounds_done(ledger: Path) -> tuple[int, list[float], int]:
    if not ledger.exists():
        return 0, [], 0
    with SqliteLedger(ledger) as led:
        progress = read_progress(led, "artifact")  # with any commit made after the last save adopted
    if progress is None:
        return 0, [], 0
    return len(progress.rounds), [r.held_out_reward for r in progress.rounds], progress.tokens


def commits(ledger: Path) -> tuple[int, int, int]:
    """(commits the progress records, commits in the ledger, commits adopted after a kill)."""
    with SqliteLedger(ledger) as led:
        progress = read_progress(led, "artifact")
        in_ledger = led.head("artifact")[0] - 1
    assert progress is not None
    return progress.commits, in_ledger, int(progress.state.get("counters", {}).get("orphan_commits_adopted", 0))


def run_child(ledger: Path, seed: int, rounds: int, latency: float, kill_after: float | None,
              hook: bool = False) -> bool:
    done, _, _ = rounds_done(ledger)
    code = CHILD.format(root=str(ROOT), seed=seed, latency=latency, rounds=rounds, ledger=str(ledger), done=done,
                        hook=hook)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if kill_after is None:
        proc.wait()
        return proc.returncode == -signal.SIGKILL
    try:
        proc.wait(timeout=kill_after)
        return False
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--latency", type=float, default=0.01, help="median simulated rollout latency (s)")
    parser.add_argument("--kill-after", type=float, nargs=2, default=(0.8, 2.5), metavar=("MIN", "MAX"),
                        help="seconds before each kill, drawn uniformly (default 0.8 2.5)")
    parser.add_argument("--between-commit-and-save", action="store_true",
                        help="kill each child right after a committed round, before its save (a hook)")
    parser.add_argument("--kills", type=int, default=3, help="kills per seed with --between-commit-and-save")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = random.Random(0)
    rows = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            whole, parts = Path(tmp) / "whole.sqlite", Path(tmp) / "parts.sqlite"
            start = time.monotonic()
            run_child(whole, seed, args.rounds, args.latency, None)
            whole_seconds = time.monotonic() - start
            kills = 0
            start = time.monotonic()
            while rounds_done(parts)[0] < args.rounds:
                if args.between_commit_and_save:
                    kills += run_child(parts, seed, args.rounds, args.latency, None, hook=kills < args.kills)
                else:
                    kills += run_child(parts, seed, args.rounds, args.latency, rng.uniform(*args.kill_after))
            parts_seconds = time.monotonic() - start
            n_w, rewards_w, tokens_w = rounds_done(whole)
            n_p, rewards_p, tokens_p = rounds_done(parts)
            recorded_w, ledger_w, _ = commits(whole)
            recorded_p, ledger_p, adopted = commits(parts)
        rows.append({
            "commits_uninterrupted": [recorded_w, ledger_w], "commits_resumed": [recorded_p, ledger_p],
            "adopted": adopted,
            "seed": seed, "kills": kills, "rounds": [n_w, n_p], "rewards_uninterrupted": rewards_w,
            "rewards_resumed": rewards_p, "identical_rewards": rewards_w == rewards_p,
            "tokens": [tokens_w, tokens_p], "seconds": [round(whole_seconds, 1), round(parts_seconds, 1)],
        })
        print(f"  seed {seed}: {kills} kill(s), rewards identical: {rewards_w == rewards_p}", file=sys.stderr)
    if args.between_commit_and_save:
        print("| seed | kills between commit and save | rounds (uninterrupted / resumed) | commits recorded / in "
              "the ledger, uninterrupted | commits recorded / in the ledger, resumed | orphan commits adopted (commits recorded without them) | "
              "final held-out (uninterrupted / resumed) |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            (cw, lw), (cp, lp) = r["commits_uninterrupted"], r["commits_resumed"]
            print(f"| {r['seed']} | {r['kills']} | {r['rounds'][0]} / {r['rounds'][1]} | {cw} / {lw} | {cp} / {lp} | "
                  f"{r['adopted']} ({cp - r['adopted']}) | {r['rewards_uninterrupted'][-1]:.3f} / {r['rewards_resumed'][-1]:.3f} |")
    else:
        print("| seed | kills | rounds (uninterrupted / resumed) | held-out per round identical | final held-out | "
              "tokens resumed / uninterrupted |")
        print("|---|---|---|---|---|---|")
    for r in ([] if args.between_commit_and_save else rows):
        print(f"| {r['seed']} | {r['kills']} | {r['rounds'][0]} / {r['rounds'][1]} | {'yes' if r['identical_rewards'] else 'NO'} | "
              f"{r['rewards_uninterrupted'][-1]:.3f} / {r['rewards_resumed'][-1]:.3f} | {r['tokens'][1] / r['tokens'][0]:.3f} |")
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
