"""bench/sample_efficiency.py on a tiny configuration, so the benchmark cannot rot unnoticed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import sample_efficiency  # noqa: E402


def test_tiny_run_writes_consistent_json(tmp_path: Path, capsys) -> None:
    """One seed, three rounds, every arm: the JSON adds up and the audit agrees with the run.

    The arms are the library's defaults on both engines, on a flipping (noisy) reward, and
    with a junk proposer (rules that change nothing) on the flipping reward; the rewritten
    bench compares them with a noise-free full evaluation of every measured candidate.
    """
    out = tmp_path / "se.json"
    code = sample_efficiency.main(["--seeds", "0", "--rounds", "3", "--workloads", "router-0.25,valuesim",
                                   "--json", str(out), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "| metric | " + " | ".join(sample_efficiency.ARMS) + " |" in printed  # router: every arm
    assert "| metric | sync | async | flip-0.1 | flip-0.2 |" in printed  # valuesim: no junk arms
    assert "false accepts" in printed
    payload = json.loads(out.read_text(encoding="utf-8"))
    assert payload["arguments"]["seeds"] == [0] and payload["gepa"] == []
    rows = payload["rows"]
    expected = [("router-0.25", a) for a in sample_efficiency.ARMS]
    expected += [("valuesim", a) for a in sample_efficiency.ARMS if not a.startswith("junk")]
    assert sorted((r["workload"], r["arm"]) for r in rows) == sorted(expected)
    for row in rows:
        assert sum(row["calls_by_phase"].values()) == row["calls"] > 0
        candidates = row["candidates"]
        assert candidates, row["arm"]
        # the audit saw every measured candidate: its tasks are the run's held-out spend
        assert sum(c["scored"] for c in candidates) == row["held_out_tasks_scored"]
        assert sum(c["committed"] for c in candidates) == row["commits"]
        for c in candidates:
            assert 0 < c["scored"] <= c["n"] and c["early"] == (c["scored"] < c["n"])
            assert c["accept"] or not c["committed"]
            assert "E=" in c["reason"]
        if row["arm"] in ("sync", "async"):
            assert row["noise"]["state"] != "noisy"  # a noise-free reward is never taken for noise
            assert not any(c["accept"] and not c["full_accept"] for c in candidates)
        else:
            assert row["noise"]["state"] == "noisy"  # the flipping reward is seen for what it is
        if row["arm"].startswith("junk"):
            assert row["commits"] == 0  # a rule that changes nothing never commits
    for summary in payload["summaries"]:
        names = [t[0] for t in summary["targets"]]
        assert "sync: held-out evaluation below half of all calls (every run)" in names
        for arm, numbers in summary["arms"].items():
            assert numbers["false_accepts"] == 0, (summary["workload"], arm)
            if arm.startswith(("flip", "junk")):
                assert any(n.startswith(f"{arm}: ") and "within the stated rate 0.05" in n for n in names)
    for workload in ("router-0.25", "valuesim"):
        assert f"{workload}: sync: held-out evaluation below half of all calls" in printed


def test_unknown_knob_is_a_usage_error(capsys) -> None:
    assert sample_efficiency.main(["--set", "no_such_knob=1"]) == 2
    assert "AggregatorConfig field" in capsys.readouterr().err
