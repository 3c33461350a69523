"""bench/acceptance_audit.py on two small conditions, so the audit cannot rot unnoticed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import acceptance_audit  # noqa: E402


def test_clopper_pearson_known_values() -> None:
    """The exact interval matches its textbook values (and its closed forms at 0 and n)."""
    low, high = acceptance_audit.clopper_pearson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.3085, abs=1e-3)
    assert high == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-9)
    low, high = acceptance_audit.clopper_pearson(5, 10)
    assert low == pytest.approx(0.1871, abs=1e-3) and high == pytest.approx(0.8129, abs=1e-3)
    low, high = acceptance_audit.clopper_pearson(10, 10)
    assert high == 1.0 and low == pytest.approx(0.025 ** (1 / 10), abs=1e-9)
    low, high = acceptance_audit.clopper_pearson(3, 1000)
    assert 0.0006 < low < 0.0007 and 0.0087 < high < 0.0088


def test_two_conditions_write_consistent_json(tmp_path: Path, capsys) -> None:
    """30 decisions of one null and one power condition: counts, rates and intervals add up."""
    out = tmp_path / "audit.json"
    names = ["det-swap-k1-n24", "power-det-hit-g2-n24"]
    code = acceptance_audit.main(["--conditions", ",".join(names), "--decisions", "30", "--json", str(out),
                                  "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| condition | unit | n | accepted | rate | 95% CI |" in printed
    payload = json.loads(out.read_text(encoding="utf-8"))
    results = {r["name"]: r for r in payload["conditions"]}
    assert sorted(results) == sorted(["det-swap-k1-n24", "auto-det-swap-k1-n24", "power-det-hit-g2-n24"])
    for name, r in results.items():
        assert r["skipped"] is None, name
        assert r["decisions"] == 30 and 0 <= r["accepted"] <= 30
        assert 0.0 <= r["rate"] <= 1.0 and r["rate"] == r["accepted"] / 30
        low, high = r["interval"]
        assert low <= r["rate"] <= high
        assert r["calls_per_unit"] > 0 and r["ms_per_step"] >= 0
        assert name in printed
    assert results["det-swap-k1-n24"]["verdict"] in ("PASS", "FAIL")
    assert results["power-det-hit-g2-n24"]["verdict"] == "power"


def test_unknown_knob_and_filter_are_usage_errors(capsys) -> None:
    assert acceptance_audit.main(["--set", "no_such_knob=1"]) == 2
    assert acceptance_audit.main(["--conditions", "no-such-condition"]) == 2
    assert "no-such-condition" in capsys.readouterr().err


def test_run_level_errors_counts_runs_with_a_commit_through_both_engines(tmp_path: Path, capsys) -> None:
    """bench/run_level_errors.py on two short runs per row: every row is written and adds up."""
    import run_level_errors

    out = tmp_path / "runs.json"
    assert run_level_errors.main(["--runs", "2", "--rounds", "6", "--arms", "junk-0.2,async-junk-0.2",
                                  "--quiet", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["engine"], r["error_control"]) for r in rows] == [
        ("sync", "per_decision"), ("sync", "per_run"), ("async", "per_decision"), ("async", "per_run")]
    for r in rows:
        assert r["runs"] == 2 and r["runs_with_commit"] <= min(r["runs"], r["commits"])
        assert r["interval"][0] <= r["rate"] <= r["interval"][1] and r["decisions"] > 0
    assert "| sync | 0.2 | per_run |" in capsys.readouterr().out
    assert run_level_errors.main(["--arms", "junk-0.5"]) == 2
