"""Mutation check of the summarizer-fork predicate: does tests/test_context.py notice?

The predicate lives in ``agentdescent/context/forkrule.py`` (the comparison, ``auto``'s
default ratio) and its counters in ``agentdescent/context/compaction.py``. Each mutant is one
plausible bug in one of them (the comparison flipped, ``auto`` losing its default ratio, the
decline and fallback counters swapped). The tool copies the package and the test file into
a temporary directory, applies one mutant to the copy, runs the tests there, and prints
whether the suite caught it. The repository's own files are never written.

    python tools/mutate_fork_predicate.py [--keep-going]

Exit status: 0 when the unmutated copy passes and every mutant is caught; 1 otherwise
(a surviving mutant, a failing baseline, or an anchor that no longer matches the source,
which means this tool needs updating alongside the predicate).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULE = Path("agentdescent") / "context" / "forkrule.py"
COUNTERS = Path("agentdescent") / "context" / "compaction.py"
TESTS = Path("tests") / "test_context.py"

#: (name, the file it mutates, [(anchor, replacement), ...]); every anchor must occur exactly once.
MUTANTS: list[tuple[str, Path, list[tuple[str, str]]]] = [
    ("flip `>=` to `<`", RULE, [("span_ratio is None or span_ratio >= min_ratio:",
                                 "span_ratio is None or span_ratio < min_ratio:")]),
    ("flip `>=` to `>`", RULE, [("span_ratio is None or span_ratio >= min_ratio:",
                                 "span_ratio is None or span_ratio > min_ratio:")]),
    ("drop auto's default ratio", RULE, [("return DEFAULT_FORK_MIN_SPAN_RATIO", "return None")]),
    (
        "swap the two counters",
        COUNTERS,
        [
            ("self.fork_fallbacks += 1", "self.__SWAP__ += 1"),
            ("self.fork_declines += 1", "self.fork_fallbacks += 1"),
            ("self.__SWAP__ += 1", "self.fork_declines += 1"),
        ],
    ),
]


def apply(source: str, edits: list[tuple[str, str]], target: Path = RULE) -> str:
    """Apply one mutant's edits in order to ``source`` (the text of ``target``).

    Raises:
        LookupError: an anchor is missing or ambiguous (the source changed shape).
    """
    for anchor, replacement in edits:
        count = source.count(anchor)
        if count != 1:
            raise LookupError(
                f"anchor {anchor!r} occurs {count} times in {target}; update MUTANTS in "
                f"{Path(__file__).name} to match the predicate's code"
            )
        source = source.replace(anchor, replacement)
    return source


def make_copy(workdir: Path, target: Path | None = None, source: str = "") -> None:
    """Lay out the package (with ``source`` as ``target``, when given) and the test file in ``workdir``."""
    shutil.copytree(ROOT / "agentdescent", workdir / "agentdescent",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (workdir / "tests").mkdir()
    for helper in ("__init__.py", "conftest.py"):
        shutil.copy2(ROOT / "tests" / helper, workdir / "tests" / helper)
    shutil.copy2(ROOT / TESTS, workdir / TESTS)
    shutil.copy2(ROOT / "pyproject.toml", workdir / "pyproject.toml")
    if target is not None:
        (workdir / target).write_text(source, encoding="utf-8")


def run_tests(workdir: Path, keep_going: bool) -> tuple[bool, str]:
    """Run the copied tests against the copied package; (passed, last output line)."""
    env = dict(os.environ, PYTHONPATH=str(workdir), PYTHONDONTWRITEBYTECODE="1")
    probe = subprocess.run(
        [sys.executable, "-c", "import agentdescent.context.compaction as c; print(c.__file__)"],
        cwd=workdir, env=env, capture_output=True, text=True,
    )
    imported = Path(probe.stdout.strip() or "?").resolve()
    if probe.returncode != 0 or workdir.resolve() not in imported.parents:
        raise RuntimeError(f"the copy imports agentdescent from {imported}, not from {workdir}: {probe.stderr}")
    cmd = [sys.executable, "-m", "pytest", str(TESTS), "-p", "no:cacheprovider"]
    if not keep_going:
        cmd.append("-x")
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode == 0, (lines[-1] if lines else proc.stderr.strip()[-200:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-going", action="store_true",
                        help="run every test for every mutant instead of stopping at the first failure")
    args = parser.parse_args(argv)
    originals = {t: (ROOT / t).read_text(encoding="utf-8") for t in (RULE, COUNTERS)}
    rows: list[tuple[str, str, str]] = []
    ok = True
    with tempfile.TemporaryDirectory(prefix="mutate-fork-") as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        make_copy(base)
        started = time.perf_counter()
        passed, summary = run_tests(base, keep_going=True)
        rows.append(("(baseline, unmutated)", "passes" if passed else "FAILS", summary))
        if not passed:
            ok = False
        for i, (name, target, edits) in enumerate(MUTANTS):
            try:
                mutated = apply(originals[target], edits, target)
            except LookupError as exc:
                rows.append((name, "NOT APPLIED", str(exc)))
                ok = False
                continue
            work = Path(tmp) / f"mutant{i}"
            work.mkdir()
            make_copy(work, target, mutated)
            passed, summary = run_tests(work, args.keep_going)
            rows.append((name, "no (SURVIVED)" if passed else "yes", summary))
            if passed:
                ok = False
        elapsed = time.perf_counter() - started
    if any((ROOT / t).read_text(encoding="utf-8") != text for t, text in originals.items()):  # pragma: no cover
        print("error: the predicate's files changed while the tool ran", file=sys.stderr)
        return 1
    print("| mutant | caught | tests |")
    print("|---|---|---|")
    for name, caught, summary in rows:
        print(f"| {name} | {caught} | {summary} |")
    print(f"\n{len(MUTANTS)} mutants in {elapsed:.1f} s: " + ("all caught" if ok else "NOT all caught"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
