"""tools/tutorial_on_a_real_model.py: the tutorial's code, with the stand-in's parts left out, for a real server."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "tutorial_on_a_real_model.py"


def _program() -> str:
    proc = subprocess.run([sys.executable, str(TOOL), "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                           "--api-key", "secret-key-value", "--print"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_program_keeps_the_tutorial_code_and_leaves_out_only_the_stand_in():
    code = _program()
    tree = ast.parse(code)  # it compiles
    assert not any(isinstance(n, ast.Assert) for n in ast.walk(tree))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"server", "proposer", "start_stand_in"}
    assert "BASE_URL, MODEL, API_KEY = ('http://127.0.0.1:9/v1', 'm', '***')" in code
    assert "secret-key-value" not in code  # --print never shows the key
    tutorial = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    for line in ("result = evolve(", "explained_run = evolve(", "read_tickets(TICKETS_FILE)"):
        assert line.replace("'", '"') in tutorial and line in code
    assert code.count("print('--- block ") == tutorial.count("```python\n")
