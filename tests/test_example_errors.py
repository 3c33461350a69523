"""An example whose run ends in an error prints the error, not only ``stop: error``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _closed_port() -> int:
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_code_evolution_prints_why_its_run_ended_in_an_error() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "examples.code_evolution", "--base-url",
                           f"http://127.0.0.1:{_closed_port()}/v1", "--api-key", "local", "--rounds", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    out = proc.stdout
    assert "stop: error" in out, out[-2000:] + proc.stderr[-2000:]
    error = [line for line in out.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "could not be reached" in error[0]
