"""Evolve a small buggy module until the held-out part of its tests passes.

Run from the repository root (``-m``), or as a file from any directory::

    python -m examples.code_evolution
    python examples/code_evolution.py --base-url http://127.0.0.1:8090/v1 --model smollm2-135m --api-key local

The project is examples/code_project: ``textstats.py`` with five bugs and its twenty
tests, four per function (tests/test_textstats.py). The tests are the tasks and the
reward (`agentdescent.code.TestSuite`): each state of the module runs the whole suite once
in a sandbox (`agentdescent.code.Sandbox`), and every test's result is a task's score,
a failing test's assertion message its feedback. A seeded split holds out two tests of
every function (``stratify="group"``); the run never proposes from them, and a patch is
committed only when it passes more of them and breaks none.

Offline (the default), a scripted proposer writes the patches a code model would, read
off the failing test's function, and not all of them good: some are wrong (they fix
nothing), some fix one test and break another, one loops forever (the sandbox kills it
at its timeout), one writes outside its folder (under the real home and to an absolute
path: both refused), and one does not apply (its SEARCH text is not in the file:
refused and counted). With ``--base-url`` a real model writes them instead
(`agentdescent.LLMAgent` in ``proposal="edit"`` mode). The project folder itself is never
written: ``--out DIR`` writes the evolved tree there.
"""

from __future__ import annotations

import argparse
import os
import pwd
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import LLMAgent, Split, Task, evolve
from agentdescent.code import Sandbox, TestSuite
from agentdescent.ledger import MemoryLedger
from agentdescent.types import stable_hash

PROJECT = Path(__file__).resolve().parent / "code_project"
MODULE = "textstats.py"

#: Files the write-outside patch tries to create (checked after the run: none may exist).
ESCAPES = (Path(pwd.getpwuid(os.getuid()).pw_dir) / "agentdescent-escaped-home.txt",
           PROJECT / "agentdescent-escaped-repo.txt")


def _edit(search: str, replace: str) -> str:
    return f"{MODULE}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


#: Per group of tests (its class), the patches on offer: (kind, edit).
PATCHES: dict[str, list[tuple[str, str]]] = {
    "TestWordCount": [
        ("right", _edit('    return len(text.split(" "))\n', "    return len(text.split())\n")),
        ("wrong", _edit('    return len(text.split(" "))\n', '    return len(text.strip().split(" "))\n')),
        ("regressing", _edit('    return len(text.split(" "))\n', "    return len(text.split()) - 1 or 1\n")),
    ],
    "TestMedian": [
        ("right", _edit("    return ordered[middle]\n",
                        "    if len(ordered) % 2 == 0:\n"
                        "        return (ordered[middle - 1] + ordered[middle]) / 2\n"
                        "    return ordered[middle]\n")),
        ("regressing", _edit("    return ordered[middle]\n", "    return (ordered[middle - 1] + ordered[middle]) / 2\n")),
    ],
    "TestClamp": [
        ("right", _edit("    return max(low, min(x, low))\n", "    return max(low, min(x, high))\n")),
        ("wrong", _edit("    return max(low, min(x, low))\n", "    return min(low, max(x, high))\n")),
    ],
    "TestSlugify": [
        ("right", _edit('    return title.lower().replace(" ", "_")\n',
                        '    words = ("".join(c for c in w if c.isalnum()) for w in title.lower().split())\n'
                        '    return "-".join(w for w in words if w)\n')),
        ("wrong", _edit('    return title.lower().replace(" ", "_")\n', '    return title.replace(" ", "-")\n')),
    ],
    "TestPalindrome": [
        ("right", _edit("    letters = [c for c in text if c.isalnum()]\n",
                        "    letters = [c.lower() for c in text if c.isalnum()]\n")),
        ("wrong", _edit("    letters = [c for c in text if c.isalnum()]\n",
                        "    letters = [c for c in text.lower() if c.isalpha() and c != 'a']\n")),
    ],
}

#: The first proposal for these groups is the bad one named (then the rest as usual).
FIRST: dict[str, tuple[str, str]] = {
    "TestSlugify": ("loops forever", _edit('    return title.lower().replace(" ", "_")\n',
                                           "    while True:\n        pass\n")),
    "TestClamp": ("writes outside", _edit(
        "    return max(low, min(x, low))\n",
        "    import pwd, os\n"
        f"    for path in ({str(ESCAPES[0])!r}, {str(ESCAPES[1])!r},\n"
        "                 os.path.join(pwd.getpwuid(os.getuid()).pw_dir, 'agentdescent-escaped-home.txt')):\n"
        "        with open(path, 'w') as handle:\n"
        "            handle.write(os.environ.get('OPENAI_API_KEY', 'no key'))\n"
        "    return max(low, min(x, high))\n")),
    "TestPalindrome": ("does not apply", _edit("  letters = [c for c in text]\n",
                                               "  letters = [c.lower() for c in text]\n")),
}


class ScriptedProposer:
    """Writes the patch a code model might for the function a failing test exercises.

    The choice is seeded by the run's seed, the test and how many times that test has
    been proposed from, so a run repeats. Right half the time; otherwise wrong (fixes
    nothing) or regressing (fixes this test, breaks another) where such a patch exists.
    The first proposal for three of the groups is one of the bad ones in `FIRST`.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.attempts: dict[str, int] = {}
        self.proposed: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        group = str(task.meta["group"]).rsplit("::", 1)[-1]
        with self._lock:
            attempt = self.attempts.get(group, 0)
            self.attempts[group] = attempt + 1
        if attempt == 0 and group in FIRST:
            kind, patch = FIRST[group]
        else:
            rng = random.Random(stable_hash(self.seed, task.id, attempt))
            options = PATCHES[group]
            right = [p for p in options if p[0] == "right"]
            others = [p for p in options if p[0] != "right"]
            kind, patch = right[0] if rng.random() < 0.5 or not others else rng.choice(others)
        with self._lock:
            self.proposed[kind] = self.proposed.get(kind, 0) + 1
        return patch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--rounds", type=int, default=12, help="rounds at most")
    parser.add_argument("--workers", type=int, default=4, help="workers per round")
    parser.add_argument("--seed", type=int, default=0, help="seeds the split, the task walk and the proposer")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one run of the suite may take")
    parser.add_argument("--base-url", help="an OpenAI-compatible server: a real model writes the patches")
    parser.add_argument("--model", default="gpt-4o-mini", help="the model, with --base-url")
    parser.add_argument("--api-key", help="the key, with --base-url (default: $OPENAI_API_KEY; never printed)")
    parser.add_argument("--out", type=Path, help="write the evolved tree to this folder")
    args = parser.parse_args(argv)

    sandbox = Sandbox(timeout=args.timeout, grace=1.0, memory_mb=1024)
    suite = TestSuite(PROJECT, sandbox=sandbox, plugins=())
    split = Split(stratify="group")
    train, held_out = split.split(suite.tasks(), args.seed)
    print(f"{len(train) + len(held_out)} tests: {len(train)} train, {len(held_out)} held out; sandbox: "
          f"{sandbox.protections['filesystem']}")
    start = suite.evaluate(suite.initial)
    print(f"starting tree: {sum(start[t.id].passed for t in held_out)}/{len(held_out)} held-out tests pass")

    if args.base_url:
        from agentdescent.providers import openai_compatible

        key = args.api_key or os.environ.get("OPENAI_API_KEY")
        provider = openai_compatible(model=args.model, base_url=args.base_url, api_key=key)
        agent = LLMAgent(provider, proposal="edit", call_tokens=700)
        kwargs: dict[str, Any] = suite.evolve_kwargs(agent=agent)
        proposer = None
    else:
        agent = None
        proposer = ScriptedProposer(args.seed)
        kwargs = suite.evolve_kwargs(propose=proposer)

    started = time.monotonic()
    ledger = MemoryLedger()
    result = evolve(**kwargs, split=split, rounds=args.rounds, n_workers=args.workers, seed=args.seed,
                    target_reward=1.0, ledger=ledger)
    final = suite.evaluate(result.state)
    passing = sum(final[t.id].passed for t in held_out)
    print(f"\n{len(result.history)} rounds in {time.monotonic() - started:.1f} s, stop: {result.stop_reason}; "
          f"version {result.version}, {sum(r.committed for r in result.history)} commit(s)")
    if result.error:  # a run that ended in an error says which (a model server that refused, say)
        print(f"error: {result.error}")
    held = {t.id for t in held_out}
    broken_total = 0
    versions = ledger.history("artifact")
    for before, after in zip(versions, versions[1:]):
        old, new = suite.evaluate(before.state), suite.evaluate(after.state)
        gained = [n for n in new if new[n].passed and not old[n].passed]
        broken = [n for n in new if old[n].passed and not new[n].passed]
        broken_total += len(broken)
        files = ", ".join(sorted(k for k in after.state if after.state[k] != before.state.get(k)))
        print(f"  v{after.version}: {files} changed ({'fused, ' if after.meta.get('fused') else ''}"
              f"{len(after.meta.get('contributors', []))} proposal(s)); tests fixed: "
              f"{sum(n in held for n in gained)} held out, {sum(n not in held for n in gained)} train; "
              f"broken: {len(broken)}")
    print(f"final tree: {passing}/{len(held_out)} held-out tests pass, "
          f"{sum(o.passed for o in final.values())}/{len(final)} in all")
    refused = result.counters.get("edits_refused", 0)
    why = ", ".join(f"{k} {v}" for k, v in sorted(suite.tree.refused().items()))
    print(f"edits refused (did not apply): {refused}" + (f" ({why})" if why else ""))
    if agent is not None:
        counts = {k: v for k, v in agent.stats().items() if v}
        print("the model's replies: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if proposer is not None:
        print("patches proposed, by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(proposer.proposed.items())))
    stats = suite.stats()
    print(f"suite runs: {stats['suite_runs']} ({stats['timeouts']} killed at the timeout), "
          f"{stats['sandbox_seconds'] / max(1, stats['suite_runs']):.2f} sandbox s per run; "
          f"{stats['cache_hits']} scores from the cache")
    escaped = [str(p) for p in ESCAPES if p.exists()]
    print("writes outside the sandbox: " + (", ".join(escaped) if escaped else "none reached the home or the repository"))
    if args.out is not None:
        written = suite.tree.materialize(result.state, args.out)
        print(f"wrote {len(written)} file(s) to {args.out}")
    ok = passing == len(held_out) and not escaped and broken_total == 0
    return 0 if ok or args.base_url else 1


if __name__ == "__main__":
    raise SystemExit(main())
