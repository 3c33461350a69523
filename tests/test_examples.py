"""Every example runs from any directory: as a file from elsewhere, and with -m from the root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py") if p.stem != "__init__")

#: Arguments that make each example quick; the heavy ones only show that they import.
QUICK = {
    "run_demo": ["--rounds", "2", "--workers", "2"],
    "skill_evolution": ["--dry-run", "--rounds", "2", "--no-progress"],
    "run_async": ["--help"],
    "rq2_staleness": ["--help"],
    "ticket_routing": ["--dry-run", "--rounds", "2", "--no-progress"],
    "code_evolution": ["--help"],  # the whole offline run is test_code_evolution_reaches_every_held_out_test
}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_every_example_has_quick_arguments() -> None:
    assert set(EXAMPLES) == set(QUICK)


@pytest.mark.parametrize("name", EXAMPLES)
def test_an_example_runs_as_a_file_from_another_directory(name: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), *QUICK[name]],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()
    assert list(tmp_path.iterdir()) == []  # nothing written into the caller's directory


@pytest.mark.parametrize("name", EXAMPLES)
def test_an_example_runs_as_a_module_from_the_root(name: str) -> None:
    proc = subprocess.run([sys.executable, "-m", f"examples.{name}", *QUICK[name]],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()


def test_code_evolution_reaches_every_held_out_test_and_never_commits_a_regression() -> None:
    """The offline run: every held-out test passes at the end, no commit breaks a test, the looping
    patch is killed at its timeout, and the patch writing outside reaches neither the home nor the repository
    (the example exits 1 otherwise)."""
    proc = subprocess.run([sys.executable, "-m", "examples.code_evolution"], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "final tree: 10/10 held-out tests pass" in out
    assert "broken: 0" in out and "broken: 1" not in out
    assert "(1 killed at the timeout)" in out and "loops forever 1" in out and "writes outside 1" in out
    assert "edits refused (did not apply): 1 (not_found 1)" in out
    assert "writes outside the sandbox: none reached the home or the repository" in out


def _table_rows(out: str) -> list[list[str]]:
    """The body rows of every markdown table in ``out``, as lists of cells."""
    lines = [line for line in out.splitlines() if line.startswith("|")]
    body = [line for i, line in enumerate(lines)
            if not line.startswith("|---") and not (i + 1 < len(lines) and lines[i + 1].startswith("|---"))]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in body]


@pytest.mark.parametrize("policy", ["guarded", "reflective"])
def test_rq2_staleness_runs_only_the_policy_it_is_given(policy: str) -> None:
    intervals, alphas = ["1", "2"], ["0", "1"]
    proc = subprocess.run([sys.executable, "-m", "examples.rq2_staleness", "--policy", policy, "--workers", "2",
                           "--rounds", "2", "--intervals", ",".join(intervals), "--alphas", ",".join(alphas)],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    rows = _table_rows(out)
    assert f"policy {policy} only" in out and "The three policies" not in out
    if policy == "guarded":  # the alpha sweep alone (its alpha 1 rows are guarded's default-alpha runs)
        assert "Guarded policy, alpha swept" in out
        assert [row[:2] for row in rows] == [[ri, alpha] for ri in intervals for alpha in alphas]
    else:  # no alpha sweep (it is guarded's); this policy's rows at alpha 1, one per interval
        assert "alpha swept" not in out
        assert [row[:2] for row in rows] == [[ri, policy] for ri in intervals]
    assert not any(other in row for row in rows for other in ("full", "guarded", "reflective") if other != policy)
