"""The equal-budget A/B harness (SPEC §11): it must be impossible to report a win that did not happen."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import ab_allocator  # noqa: E402
from ab_allocator import ABReport, ABRow, run_ab  # noqa: E402

from agentdescent import Usage  # noqa: E402
from agentdescent.domains.router import RouterDomain  # noqa: E402


class RouterWorkload:
    """A small real workload: the router domain, two rounds."""

    def __init__(self, seed: int, *, fail_evolve: bool = False, fail_score: bool = False) -> None:
        self.domain = RouterDomain(seed=seed)
        self.fail_evolve = fail_evolve
        self.fail_score = fail_score

    @property
    def usage(self) -> Usage:
        return self.domain.usage

    @usage.setter
    def usage(self, meter: Usage) -> None:
        self.domain.usage = meter

    def evolve_kwargs(self) -> dict[str, Any]:
        kwargs = dict(self.domain.evolve_kwargs(), rounds=2, n_workers=2)
        if self.fail_evolve:
            inner = self.domain.run

            def run(rendered: str, task: Any) -> Any:
                out = inner(rendered, task)  # spend tokens first, then break the contract
                return 42 if task.id.endswith("-03") else out

            kwargs["run"] = run
        return kwargs

    def score(self, result: Any) -> float:
        if self.fail_score:
            raise RuntimeError("scorer down")
        return result.final_reward


def test_rows_for_every_planned_run_and_seed_reaches_the_on_arm() -> None:
    report = run_ab(RouterWorkload, seeds=[0, 1], max_tokens=10**9)
    assert [(r.seed, r.arm) for r in report.rows] == [(0, "off"), (0, "on"), (1, "off"), (1, "on")]
    for r in report.rows:
        assert r.status == "ok" and r.tokens > 0 and r.test is not None
        assert r.allocator_seed == (r.seed if r.arm == "on" else None)
        assert (r.n_observed is None) == (r.arm == "off")
    assert report.complete_pairs == [0, 1]
    assert report.summary()["verdict"] == "too few to compare"


def test_evolve_failure_keeps_its_row_and_its_spend() -> None:
    def make(seed: int) -> RouterWorkload:
        return RouterWorkload(seed, fail_evolve=(seed == 1))

    report = run_ab(make, seeds=[0, 1, 2], max_tokens=10**9)
    failed = [r for r in report.rows if r.seed == 1]
    assert all(r.status == "evolve-failed" for r in failed)
    assert all(r.tokens > 0 and "str" in (r.error or "") for r in failed)
    assert report.complete_pairs == [0, 2]
    summary = report.summary()
    assert summary["incomplete_pairs"] == [1]
    assert summary["comparison_complete"] is False
    assert summary["failed_run_tokens"] == sum(r.tokens for r in failed)
    assert "INCOMPLETE" in ab_allocator.render_markdown(report)


def test_score_failure_marks_the_row_and_drops_the_pair() -> None:
    calls = {"n": 0}

    def make(seed: int) -> RouterWorkload:
        calls["n"] += 1
        return RouterWorkload(seed, fail_score=(calls["n"] == 2))  # seed 0, on arm

    report = run_ab(make, seeds=[0, 1], max_tokens=10**9)
    assert report.row(0, "on").status == "score-failed"
    assert report.row(0, "on").test is None
    assert report.row(0, "off").status == "ok"
    assert report.complete_pairs == [1]


def test_build_failure() -> None:
    def make(seed: int) -> RouterWorkload:
        if seed == 0:
            raise OSError("dataset unavailable")
        return RouterWorkload(seed)

    report = run_ab(make, seeds=[0, 1], max_tokens=10**9)
    assert report.row(0, "off").status == "build-failed"
    assert report.row(0, "on").status == "build-failed"
    assert "dataset unavailable" in (report.row(0, "on").error or "")
    assert report.row(0, "on").tokens == 0


def _report(rows: list[ABRow]) -> ABReport:
    return ABReport(rows=rows, max_tokens=1000, seeds=sorted({r.seed for r in rows}))


def _pair(seed: int, off: float, on: float, skips: int, cf: int = 0) -> list[ABRow]:
    return [
        ABRow(seed=seed, arm="off", test=off, tokens=100, self_verify_tokens=10),
        ABRow(seed=seed, arm="on", test=on, tokens=90, self_verify_tokens=5, n_skipped=skips,
              n_counterfactual=cf, n_observed=10, allocator_seed=seed),
    ]


def test_counterfactual_only_runs_are_not_fired() -> None:
    report = _report(_pair(0, 0.5, 0.9, skips=0, cf=7) + _pair(1, 0.5, 0.9, 0, 3) + _pair(2, 0.5, 0.9, 0, 1))
    summary = report.summary()
    assert summary["fired"] == 0
    assert summary["counterfactual_explorations"] == 11
    assert summary["verdict"] == "control-vs-control"
    assert "quality_delta" not in summary
    text = ab_allocator.render_markdown(report)
    assert "CONTROL-VS-CONTROL" in text and "Test quality" not in text


@pytest.mark.parametrize(
    ("tests", "verdict"),
    [
        ([(0.5, 0.6), (0.5, 0.7), (0.4, 0.41)], "above the control on every pair"),
        ([(0.5, 0.4), (0.5, 0.3), (0.4, 0.39)], "below the control on every pair"),
        ([(0.5, 0.6), (0.5, 0.5), (0.4, 0.3)], "overlapping"),
    ],
)
def test_verdicts(tests: list[tuple[float, float]], verdict: str) -> None:
    rows = [row for i, (off, on) in enumerate(tests) for row in _pair(i, off, on, skips=2)]
    summary = _report(rows).summary()
    assert summary["verdict"] == verdict
    assert summary["self_verify_saving"] == pytest.approx(0.5)


def test_json_schema(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    code = ab_allocator.main(["--max-tokens", "60000", "--seeds", "0,1,2", "--json", str(out)])
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data) == {"arguments", "rows", "summary"}
    assert data["arguments"]["max_tokens"] == 60000 and data["arguments"]["seeds"] == [0, 1, 2]
    expected = {"seed", "arm", "status", "test", "dev", "tokens", "n_observed", "n_skipped",
                "n_counterfactual", "allocator_seed", "error"}
    assert len(data["rows"]) == 6
    for row in data["rows"]:
        assert expected <= set(row)
    assert {"complete_pairs", "verdict", "fired", "failed_run_tokens"} <= set(data["summary"])


def test_cli_refuses_without_max_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    assert ab_allocator.main([]) == 2
    err = capsys.readouterr().err
    assert "--max-tokens" in err and "same run" in err


@pytest.mark.parametrize("seeds", ["a,b", "1,1", ""])
def test_cli_refuses_bad_seeds(seeds: str) -> None:
    assert ab_allocator.main(["--max-tokens", "1000", "--seeds", seeds]) == 2


def test_cli_real_source_without_provider_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert ab_allocator.main(["--max-tokens", "1000", "--source", "hf"]) == 2
    assert "--provider" in capsys.readouterr().err


def test_every_arm_failed_exits_4(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(seed: int, n_workers: int = 2) -> Any:
        raise RuntimeError("no workload")

    monkeypatch.setattr(ab_allocator, "SimWorkload", broken)
    assert ab_allocator.main(["--max-tokens", "1000", "--seeds", "0,1"]) == 4


def test_small_offline_cli_run_with_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "ab.png"
    code = ab_allocator.main(["--max-tokens", "80000", "--seeds", "0,1,2", "--plot", str(plot)])
    assert code == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "| arm |" in out and "Fired (real skips)" in out


# --------------------------------------------------------------------------- --source jsonl


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_jsonl_reads_questions_answers_and_optional_ids(tmp_path: Path) -> None:
    rows = [json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": i + 1}) for i in range(7)]
    rows.insert(3, "")  # blank lines are skipped
    rows.append(json.dumps({"question": "Name a primary colour.", "answer": ["red", "blue"], "level": 2}))
    tasks = ab_allocator.load_jsonl(_write(tmp_path / "qa.jsonl", rows))
    assert [t.id for t in tasks] == [f"q{i}" for i in range(7)] + ["row-9"]
    assert tasks[0].prompt == "What is 0 + 1?" and tasks[0].meta == {"answer": "1"}
    assert tasks[-1].meta == {"answer": ["red", "blue"], "level": 2}
    assert ab_allocator.contains_answer(tasks[-1], "Blue, of course.") == 1.0
    assert ab_allocator.exact_match(tasks[-1], "Blue.") == 1.0
    assert ab_allocator.contains_answer(tasks[0], "It is 11.") == 0.0  # whole words only
    twelve = [json.dumps({"question": f"Q{i}?", "answer": "A"}) for i in range(12)]
    assert len(ab_allocator.load_jsonl(_write(tmp_path / "more.jsonl", twelve), limit=9)) == 9


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", "line 2: not JSON"),
        ('["a list"]', "line 2: expected an object"),
        ('{"answer": "x"}', "line 2: no question"),
        ('{"question": "Why?"}', "line 2: no answer"),
        ('{"question": "Why?", "answer": ""}', "line 2: no answer"),
        ('{"id": "a", "question": "Again?", "answer": "x"}', "line 2: id 'a' appears twice"),
    ],
)
def test_load_jsonl_names_the_file_and_the_line(tmp_path: Path, line: str, match: str) -> None:
    good = [json.dumps({"id": "a", "question": "Q?", "answer": "A"})]
    more = [json.dumps({"question": f"Q{i}?", "answer": "A"}) for i in range(10)]
    path = _write(tmp_path / "bad.jsonl", [*good, line, *more])
    with pytest.raises(ValueError, match=match) as info:
        ab_allocator.load_jsonl(path)
    assert str(path) in str(info.value)


def test_load_jsonl_refuses_too_few_rows(tmp_path: Path) -> None:
    path = _write(tmp_path / "few.jsonl", [json.dumps({"question": "Q?", "answer": "A"})] * 3)
    with pytest.raises(ValueError, match="at least 8"):
        ab_allocator.load_jsonl(path)


def test_the_shipped_question_set_loads() -> None:
    tasks = ab_allocator.load_jsonl(ROOT / "bench" / "data" / "ab_qa.jsonl")
    assert len(tasks) == 60 and len({t.id for t in tasks}) == 60


def test_cli_jsonl_needs_data_and_a_provider(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert ab_allocator.main(["--max-tokens", "1000", "--source", "jsonl"]) == 2
    assert "--data FILE" in capsys.readouterr().err
    data = str(ROOT / "bench" / "data" / "ab_qa.jsonl")
    assert ab_allocator.main(["--max-tokens", "1000", "--source", "jsonl", "--data", data]) == 2
    assert "--provider" in capsys.readouterr().err
    bad = _write(tmp_path / "bad.jsonl", ["{}"])
    assert ab_allocator.main(["--max-tokens", "1000", "--source", "jsonl", "--data", str(bad),
                              "--provider", "openai", "--model", "m"]) == 2
    assert "line 1: no question" in capsys.readouterr().err
    assert ab_allocator.main(["--max-tokens", "1000", "--call-tokens", "0"]) == 2
    assert "per-call limit" in capsys.readouterr().err


def test_the_command_line_in_the_json_hides_the_key() -> None:
    assert ab_allocator._redact_key(["--api-key", "sk-123", "--api-key=sk-9", "--model", "m"]) == [
        "--api-key", "[redacted]", "--api-key=[redacted]", "--model", "m"]


def test_plot_titles_tell_two_ab_runs_apart() -> None:
    default = ABReport(rows=[], max_tokens=300000, seeds=[0, 1, 2])
    tuned = ABReport(rows=[], max_tokens=300000, seeds=[0, 1, 2], allocator_kwargs={"budget_start": 0.9})
    assert ab_allocator.plot_title(default, "sim", 2) != ab_allocator.plot_title(tuned, "sim", 1)
    assert "budget_start=0.9" in ab_allocator.plot_title(tuned, "sim", 1)
    assert "jsonl" in ab_allocator.plot_title(default, "jsonl", 2)


def test_a_real_model_arm_counts_each_call_once() -> None:
    from agentdescent import Completion, Task
    from agentdescent.testing import FakeProvider

    tasks = [Task(f"q{i}", f"What is {i} + {i}?", {"answer": str(2 * i)}) for i in range(12)]

    def handler(messages: Any, **options: Any) -> Completion:
        user = messages[-1]["content"]
        text = "Reply with the number only." if "Current playbook" in user else "The answer is 4."
        return Completion(text, Usage(1, 0, 0, 1))  # one token per call

    provider = FakeProvider(handler)
    made: list[Any] = []

    def make(seed: int) -> Any:
        made.append(ab_allocator.JsonlWorkload(tasks, provider, seed, n_workers=2, rounds=3))
        return made[-1]

    report = run_ab(make, seeds=[0], max_tokens=10**6)
    scoring = sum(len(w.test_tasks) for w in made)  # test scoring is outside the arms' spend
    assert sum(r.tokens for r in report.rows) == provider.usage.total_tokens - scoring
