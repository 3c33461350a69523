"""bench/sample_efficiency.py on a tiny configuration, so the benchmark cannot rot unnoticed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import sample_efficiency  # noqa: E402


def test_tiny_run_writes_consistent_json(tmp_path: Path, capsys) -> None:
    out = tmp_path / "se.json"
    code = sample_efficiency.main(["--seeds", "0", "--rounds", "3", "--workloads", "router-0.25,valuesim",
                                   "--json", str(out), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| metric | today" in printed and "false accepts" in printed
    payload = json.loads(out.read_text(encoding="utf-8"))
    rows = payload["rows"]
    assert sorted((r["workload"], r["arm"]) for r in rows) == sorted(
        (w, a) for w in ("router-0.25", "valuesim") for a in sample_efficiency.ARMS
    )
    for row in rows:
        assert sum(row["calls_by_phase"].values()) == row["calls"]
        assert all(c["scored"] == c["n"] for c in row["candidates"] if c["accept"])  # no early acceptance
    for summary in payload["summaries"]:
        agreement = summary["agreement"]
        assert agreement["false_accepts"] == 0
        assert agreement["same_trajectory"] == agreement["seeds"] == 1  # the audit pass changes no decision
        assert {t[0] for t in summary["targets"]} >= {"held-out evaluation below half of all calls"}
    today = next(r for r in rows if r["arm"] == "today" and r["workload"] == "router-0.25")
    assert today["held_out_tasks_saved"] == 0  # the old configuration scores every task
    assert sample_efficiency.main(["--compare", str(out)]) == 0
    assert "| se.json | (defaults), --rounds 3 | router-0.25 |" in capsys.readouterr().out


def test_unknown_knob_is_a_usage_error(capsys) -> None:
    assert sample_efficiency.main(["--set", "no_such_knob=1"]) == 2
    assert "AggregatorConfig field" in capsys.readouterr().err
