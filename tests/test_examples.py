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
