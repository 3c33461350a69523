"""The run report (`agentdescent.cli.report.build_report`), read back as a browser would parse it.

Each test writes a real run directory: spec.json, the tasks files, a real SQLite ledger
whose versions are real commits, rounds.jsonl, status.json and result.json (in the
shapes the command line writes, new fields and old). The page is parsed with
`html.parser.HTMLParser`: its tags must nest and close, it must reference nothing
outside itself, each section must hold the run's numbers, and markup in any field must
come out as text.
"""

from __future__ import annotations

import importlib.util
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from agentdescent.cli.main import main as cli_main
from agentdescent.cli.report import build_report
from agentdescent.cli.rundir import SPEC_FORMAT, RunDir
from agentdescent.ledger import SqliteLedger

ROOT = Path(__file__).resolve().parents[1]
XSS = "<script>alert(1)</script>"
#: tags that break the text (a cell, a paragraph, a chart's label); inline ones (b, code, span) do not
BREAKS = {"td", "th", "tr", "p", "li", "ul", "div", "pre", "h1", "h2", "h3", "text", "title", "section", "nav", "a"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
RULE_1 = "Reply with the label only."
RULE_2 = "Never explain the answer."


class Page(HTMLParser):
    """Tags as they open and close, every attribute, and the text of each section and each SVG."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str, str | None]] = []
        self.sections: dict[str, list[str]] = {}
        self.svgs: list[list[str]] = []
        self.text: list[str] = []
        self._section: str | None = None
        self.feed(text)
        self.close()

    def _open(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._break(tag)
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]
        if tag == "section":
            self._section = dict(attrs)["id"]
            self.sections[self._section] = []
        if tag == "svg":
            self.svgs.append([])

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open(tag, attrs)

    def _break(self, tag: str) -> None:
        if tag in BREAKS:
            self.handle_data(" ")

    def handle_endtag(self, tag: str) -> None:
        self._break(tag)
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()
        if tag == "section":
            self._section = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._section is not None:
            self.sections[self._section].append(data)
        if "svg" in self.stack and self.svgs:
            self.svgs[-1].append(data)

    def section(self, key: str) -> str:
        return " ".join("".join(self.sections[key]).split())

    def all_text(self) -> str:
        return "".join(self.text)


def parse(page: str) -> Page:
    parsed = Page(page)
    assert parsed.errors == [], parsed.errors[:5]
    assert parsed.stack == [], f"left open: {parsed.stack}"
    return parsed


# --------------------------------------------------------------------------- run directories


def _spec(**extra: Any) -> dict[str, Any]:
    spec = {"format": SPEC_FORMAT, "tasks": "tasks.jsonl", "test_tasks": "test_tasks.jsonl", "model": "small-model",
            "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "MY_KEY", "reward": "exact",
            "strategy": "append", "initial_text": None, "seed": 0, "held_out_frac": 0.4, "call_tokens": 64,
            "temperature": 0.0, "proposer": None, "run_rounds": 3, "run_workers": 2, "run_max_tokens": None,
            "run_async": False, "created": "2026-12-01T14:00:00+00:00", "version": "0.1.0"}
    spec.update(extra)
    return spec


def write_run(path: Path, *, rows: list[dict[str, Any]], status: dict[str, Any], result: dict[str, Any] | None,
              versions: list[dict[str, str]], spec: dict[str, Any] | None = None, prompt: str = "What is 1 + 1?") -> RunDir:
    """A run directory with a real ledger: v1 is ``{}``, each of ``versions`` a commit on the one before."""
    path.mkdir()
    (path / "spec.json").write_text(json.dumps(spec or _spec()))
    tasks = [{"id": f"q{i:02d}", "prompt": prompt if i == 0 else f"What is {i} + {i}?", "answer": str(2 * i)}
             for i in range(8)]
    (path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    (path / "test_tasks.jsonl").write_text("".join(json.dumps({"id": f"t{i}", "prompt": f"What is {i} + {i}?",
                                                               "answer": str(2 * i)}) + "\n" for i in range(2)))
    ledger = SqliteLedger(path / "ledger.sqlite")
    ledger.register("artifact", {}, 0.5)
    for base, state in enumerate(versions, start=1):
        ledger.commit("artifact", state, base)
    ledger.close()
    (path / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "status.json").write_text(json.dumps(status))
    if result is not None:
        (path / "result.json").write_text(json.dumps(result))
    return RunDir(path)


def _evidence(gains: int, e_value: float, candidate: float, head: float) -> dict[str, Any]:
    return {"scored": 8, "held_out": 8, "gains": gains, "losses": 0, "regressions": 0, "e_value": e_value,
            "threshold": 20.0, "candidate_mean": candidate, "head_mean": head}


def _decision(outcome: str, lines: list[str], version: int | None, reason: str, evidence: Any) -> dict[str, Any]:
    return {"artifact_id": "artifact", "outcome": outcome, "reason": reason, "fused": False, "considered": 2,
            "candidate": lines, "committed_version": version, "feedback": ["expected '4'; the reply was 'four'"],
            "evidence": evidence}


def _evaluation(scores: dict[str, float], outputs: dict[str, str]) -> dict[str, Any]:
    return {"tasks": list(scores), "draws": {t: [s] for t, s in scores.items()},
            "feedback": {t: f"feedback on {t}" for t in scores}, "outputs": outputs, "repeats": 1,
            "mean": sum(scores.values()) / len(scores), "interval": [0.0, 1.0]}


def new_run(path: Path, xss: str = "") -> RunDir:
    """Three rounds with every new field: two commits, one rejection, a test set and held-out samples."""
    proposals = {"made": 4, "rules": 2, "declined": 1, "refused": {"not_a_rule": 1},
                 "examples": {"not_a_rule": f"The answer is 17 because...{xss}"}}
    rows = [
        {"round": 1, "held_out_reward": 0.5, "head_version": 2, "tokens": 1200, "tokens_total": 1200,
         "committed": 1, "fused": 0, "rollouts": 4, "cards": 2, "outcomes": ["committed"], "seconds": 12.5,
         "ended": "2026-12-01T14:20:03Z", "proposals": proposals,
         "decisions": [_decision("committed", [f"- {RULE_1}"], 2, f"paired test passed{xss}",
                                 _evidence(3, 27.3, 0.9, 0.5))]},
        {"round": 2, "held_out_reward": 0.5, "head_version": 2, "tokens": 900, "tokens_total": 2100,
         "committed": 0, "fused": 0, "rollouts": 4, "cards": 1, "outcomes": ["below-threshold"], "seconds": 10.0,
         "ended": "2026-12-01T14:20:13Z", "proposals": proposals,
         "decisions": [_decision("below-threshold", [f"- Always guess 7.{xss}"], None,
                                 "E=1.5 below the threshold 20", _evidence(1, 1.5, 0.55, 0.5))]},
        {"round": 3, "held_out_reward": 0.875, "head_version": 3, "tokens": 3200, "tokens_total": 5300,
         "committed": 1, "fused": 0, "rollouts": 4, "cards": 2, "outcomes": ["committed"], "seconds": 15.0,
         "ended": "2026-12-01T14:20:28Z", "proposals": proposals,
         "decisions": [_decision("committed", [f"- {RULE_2}"], 3, "paired test passed again",
                                 _evidence(4, 41.0, 0.875, 0.5))]},
    ]
    status = {"state": "finished", "round": 3, "head_version": 3, "held_out_reward": 0.875, "initial_reward": 0.25,
              "tokens": 5600, "stop_reason": "rounds", "error": None, "started": "2026-12-01T14:19:50+00:00",
              "finished": "2026-12-01T14:20:40+00:00",
              "test": {"initial": 0.4, "final": 0.65, "tasks": 2,
                       "difference": {"mean": 0.25, "low": 0.1, "high": 0.4, "tasks": 2, "separated": True}}}
    result = {
        "format": "agentdescent-result/1", "history": [], "version": 3, "error": None,
        "usage": {"prompt_tokens": 4000, "completion_tokens": 1600, "cached_tokens": 0, "cache_write_tokens": 0,
                  "calls": 77, "total_tokens": 5600,
                  "phases": {"evaluation": 2500, "rollout": 1800, "proposal": 700, "test": 600}},
        "counters": {"test_calls": 4, "proposals": 12},
        "test": {"initial": _evaluation({"t0": 0.3, "t1": 0.5}, {"t0": f"zero{xss}", "t1": "two-ish"}),
                 "final": _evaluation({"t0": 0.8, "t1": 0.5}, {"t0": "0", "t1": "2"}),
                 "difference": {"mean": 0.25, "low": 0.1, "high": 0.4, "tasks": 2, "separated": True}},
        "held_out_samples": {
            "initial": {"version": 1, "tasks": {"q00": {"score": 0.0, "output": f"I think it is 0.{xss}",
                                                        "feedback": "expected exactly '0'"}}},
            "final": {"version": 3, "tasks": {"q00": {"score": 1.0, "output": "0", "feedback": "correct"},
                                              "q05": {"score": 1.0, "output": "10", "feedback": "correct"}}}},
    }
    spec = _spec(model=f"small-model{xss}",
                 command=f"agentdescent init run --tasks tasks.jsonl --model small-model{xss}",
                 run_command="agentdescent run run --rounds 3 --workers 2", api_key="sk-never-shown-1",
                 proposer={"model": "big-model", "provider": "openai", "base_url": None, "api_key_env": "BIG_KEY",
                           "api_key": "sk-never-shown-2"})
    return write_run(path, rows=rows, status=status, result=result, spec=spec, prompt=f"What is 0 + 0?{xss}",
                     versions=[{"rule-a": RULE_1}, {"rule-a": RULE_1, "rule-b": RULE_2}])


# --------------------------------------------------------------------------- the page


def test_the_page_nests_and_closes_and_references_nothing_outside_itself(tmp_path):
    page = build_report(new_run(tmp_path / "run"))
    parsed = parse(page)
    assert parsed.tags[0] == "html" and "style" in parsed.tags and parsed.tags.count("svg") == 3
    assert "script" not in parsed.tags and "link" not in parsed.tags and "img" not in parsed.tags
    for tag, name, value in parsed.attrs:
        assert name != "src", (tag, value)
        if name == "href":
            assert value and value.startswith("#"), value
        assert "http" not in (value or "") and "url(" not in (value or ""), (tag, name, value)
    style = page[page.index("<style>"):page.index("</style>")]
    assert "url(" not in style and "@import" not in style and "@font-face" not in style
    anchors = {v[1:] for _, k, v in parsed.attrs if k == "href"}
    assert anchors == set(parsed.sections) >= {"settings", "reward", "commits", "rejected", "tasks", "cost",
                                               "artifact"}


def test_markup_in_any_field_appears_only_escaped(tmp_path):
    page = build_report(new_run(tmp_path / "run", xss=XSS))
    parsed = parse(page)
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    text = parsed.all_text()
    # the model name (title, header, settings, command), the prompt, a reason, a candidate, outputs, an example reply
    assert text.count(XSS) >= 8
    for key in ("settings", "commits", "rejected", "tasks"):
        assert XSS in parsed.section(key), key


def test_settings_show_the_spec_and_the_commands_but_no_key(tmp_path):
    parsed = parse(build_report(new_run(tmp_path / "run")))
    settings = parsed.section("settings")
    for expected in ("small-model", "exact", "append", "$MY_KEY", "tasks 8 (about 3 held out)", "test tasks 2",
                     "agentdescent init run \\ --tasks tasks.jsonl \\ --model small-model",
                     "agentdescent run run \\ --rounds 3 \\ --workers 2", "big-model", "BIG_KEY", "2026-12-01 14:00:00 UTC"):
        assert expected in settings, expected
    assert "sk-never-shown" not in parsed.all_text() and "sk-never-shown" not in str(parsed.attrs)


def test_charts_have_titles_labelled_axes_ticks_and_the_test_interval(tmp_path):
    parsed = parse(build_report(new_run(tmp_path / "run")))
    by_round, by_tokens, interval = ("".join(s) for s in parsed.svgs)
    for chart, xlabel in ((by_round, "round"), (by_tokens, "tokens spent")):
        assert "held-out reward (0–1)" in chart and xlabel in chart
        assert all(tick in chart.split() for tick in ("0", "0.25", "0.5", "0.75", "1"))
    assert "Held-out reward over rounds" in by_round and "Held-out reward over tokens" in by_tokens
    assert {"1", "2", "3"} <= set(by_round.split())
    assert "round 3: held-out 0.875, 5,300 tokens spent, a commit" in by_tokens
    assert "start: held-out 0.250" in by_round
    assert "95% interval" in interval
    reward = parsed.section("reward")
    assert "0.400 at the start → 0.650 at the end" in reward
    assert "+0.250, 95% interval [+0.100, +0.400] over 2 tasks; the interval excludes 0" in reward
    # the rounds table: time, seconds, proposals
    assert "2026-12-01 14:20:28 UTC 15.0 s 0.875 v3 1 committed 4 made, 2 rules, 1 declined, 1 refused as " \
           "not_a_rule not recorded 3,200 5,300" in reward  # a row saved before fates were kept


def test_every_commit_has_its_diff_evidence_and_time(tmp_path):
    parsed = parse(build_report(new_run(tmp_path / "run")))
    commits = parsed.section("commits")
    assert "2 commits" in commits
    first, second = commits.split("v1 → v2")[1].split("v2 → v3")
    assert "round 1" in first and "2026-12-01 14:20:03 UTC" in first and "12.5 s" in first
    assert "E = 27.3 against the threshold 20.0" in first and "3 gains" in first
    assert "candidate 0.900 vs head 0.500" in first and "paired test passed" in first
    assert f"+- {RULE_1}" in first and f"- {RULE_2}" not in first
    assert "--- v1 +++ v2" in first and "expected '4'; the reply was 'four'" in first
    assert "round 3" in second and "15.0 s" in second and "E = 41.0" in second
    assert f" - {RULE_1} +- {RULE_2}" in second  # the context line, then the added one
    artifact = parsed.section("artifact")
    assert "Diff from the start (v1 to v3)" in artifact and f"+- {RULE_1} +- {RULE_2}" in artifact


def test_rejected_candidates_with_reason_text_and_numbers(tmp_path):
    parsed = parse(build_report(new_run(tmp_path / "run")))
    rejected = parsed.section("rejected")
    assert "Rejected candidates (1)" in rejected and "1 decision did not commit: below-threshold 1" in rejected
    assert "2 below-threshold E=1.5 below the threshold 20 - Always guess 7." in rejected
    assert "candidate 0.550 vs head 0.500" in rejected and RULE_1 not in rejected
    assert "why" not in parsed.sections  # there were commits


def test_per_task_results_and_samples_at_the_start_and_the_end(tmp_path):
    parsed = parse(build_report(new_run(tmp_path / "run")))
    tasks = parsed.section("tasks")
    held, test = tasks.split("Test set")
    assert "2 held-out tasks" in held and "start v1" in held and "end v3" in held
    assert "q00 What is 0 + 0? 0.000 1.000 I think it is 0. expected exactly '0' 0 correct" in held
    assert "q05 What is 5 + 5? not scored 1.000" in held
    assert "t0 What is 0 + 0? 0.300 0.800 +0.500 zero feedback on t0 0 feedback on t0" in test
    assert "t1 What is 1 + 1? 0.500 0.500 +0.000" in test


def test_cost_by_phase_calls_and_wall_time(tmp_path):
    parsed = parse(build_report(new_run(tmp_path / "run")))
    cost = parsed.section("cost")
    assert "evaluation 2,500 44.6%" in cost and "test 600 10.7%" in cost and "all 5,600 100%" in cost
    assert cost.index("evaluation") < cost.index("rollout") < cost.index("proposal")  # biggest first
    assert "model calls 77" in cost and "test-set calls 4" in cost
    assert "wall time of the rounds 37.5 s" in cost and "start to finish (to the second) 50.0 s" in cost


def test_old_rows_without_the_new_fields_still_render_saying_not_recorded(tmp_path):
    rows = [{"round": 1, "held_out_reward": 1.0, "head_version": 2, "tokens": 480, "tokens_total": 480,
             "committed": 1, "fused": 1, "rollouts": 2, "cards": 2, "outcomes": ["committed"]},
            {"round": 2, "held_out_reward": 1.0, "head_version": 2, "tokens": 24, "tokens_total": 504,
             "committed": 0, "fused": 0, "rollouts": 2, "cards": 0, "outcomes": []}]
    report = {"artifact_id": "artifact", "outcome": "committed", "committed_version": 2, "considered": 2,
              "fused": True, "reason": "paired test passed: 6 gain(s)", "feedback": [],
              "candidate": {"diff_id": "u1", "target": "artifact", "ops": {"rule-a": RULE_1}},
              "evidence": _evidence(6, 33.5, 1.0, 0.0)}
    result = {"format": "agentdescent-result/1", "history": [{"index": 1, "reports": [report]}],
              "usage": {"prompt_tokens": 400, "completion_tokens": 104, "cached_tokens": 0, "calls": 40,
                        "total_tokens": 504, "phases": {"rollout": 504}}, "test": None}
    status = {"state": "finished", "head_version": 2, "held_out_reward": 1.0, "initial_reward": 0.0, "tokens": 504,
              "stop_reason": "rounds", "test": None, "started": "2026-12-01T14:14:23+00:00"}
    spec = _spec(test_tasks=None)
    run = write_run(tmp_path / "old", rows=rows, status=status, result=result, spec=spec,
                    versions=[{"rule-a": RULE_1}])
    parsed = parse(build_report(run))
    settings = parsed.section("settings")
    assert "The command that made the run directory not recorded" in settings
    commits = parsed.section("commits")
    # the decision comes from result.json's history; the time was not recorded
    assert "ended not recorded round took not recorded" in commits and "E = 33.5" in commits
    assert f"+- {RULE_1}" in commits
    reward = parsed.section("reward")
    assert "1 not recorded not recorded 1.000 v2 1 committed not recorded not recorded 480 480" in reward
    assert "This run has no test set" in reward
    assert "Held-out samples: not recorded; result.json does not hold them" in parsed.section("tasks")
    cost = parsed.section("cost")
    assert "wall time of the rounds not recorded" in cost and "finished not recorded" in cost


def test_a_run_without_commits_says_why_with_the_refusals(tmp_path):
    refused = {"made": 2, "rules": 0, "declined": 0, "refused": {"not_a_rule": 1, "too_long": 1},
               "examples": {"not_a_rule": "The answer is 17 because I added.", "too_long": "Rule one. Rule two."}}
    rows = [{"round": n, "held_out_reward": 0.25, "head_version": 1, "tokens": 100, "tokens_total": 100 * n,
             "committed": 0, "fused": 0, "rollouts": 2, "cards": 0, "outcomes": [], "proposals": refused,
             "decisions": [], "seconds": 2.0, "ended": "2026-12-01T15:00:00Z"} for n in (1, 2)]
    rows.append({"round": 3, "held_out_reward": 0.25, "head_version": 1, "tokens": 100, "tokens_total": 300,
                 "committed": 0, "outcomes": []})  # an old row in the same file
    status = {"state": "finished", "head_version": 1, "held_out_reward": 0.25, "initial_reward": 0.25,
              "tokens": 300, "stop_reason": "rounds",
              "why": "no proposal was a usable rule: every reply was refused (not_a_rule 2, too_long 2)"}
    run = write_run(tmp_path / "flat", rows=rows, status=status, result=None, versions=[])
    parsed = parse(build_report(run))
    assert list(parsed.sections)[:3] == ["settings", "reward", "why"]
    why = parsed.section("why")
    assert "no proposal was a usable rule: every reply was refused (not_a_rule 2, too_long 2)" in why
    assert "1 0.250 2 made, 0 rules, 1 refused as not_a_rule, 1 refused as too_long" in why
    assert "not_a_rule: 1 too_long: 1" in why and "not_a_rule: The answer is 17 because I added." in why
    assert "3 0.250 not recorded" in why
    assert "Merge decisions: none; no candidate reached a decision." in why
    assert "No commit: the artifact is still its starting version, v1." in parsed.section("commits")
    assert "no result.json" in parsed.section("tasks") and "no result.json" in parsed.section("cost")
    assert "Diff from the start (v1 to v1)" in parsed.section("artifact")
    reward = parsed.section("reward")
    assert "The test set has not been scored yet" in reward and "a commit" not in " ".join(parsed.svgs[0])


def test_an_initialised_run_renders_before_it_has_run(tmp_path):
    path = tmp_path / "fresh"
    path.mkdir()
    (path / "spec.json").write_text(json.dumps(_spec(test_tasks=None)))
    (path / "tasks.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "prompt": "p", "answer": "a"}) + "\n"
                                              for i in range(4)))
    parsed = parse(build_report(RunDir(path)))
    assert "The run has no ledger yet" in parsed.section("commits")
    assert "No held-out reward recorded yet" in parsed.section("reward")
    assert "initialised" in parsed.all_text()


def test_the_command_writes_the_page(tmp_path):
    run = new_run(tmp_path / "run")
    out = tmp_path / "out" / "page.html"
    out.parent.mkdir()
    assert cli_main(["report", str(run.path), "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == build_report(run)


def test_a_real_run_against_a_loopback_model(tmp_path, monkeypatch):
    """`agentdescent init` and `run` in this process against the scripted server of tests/system/test_cli.py."""
    from agentdescent.testing.llmserver import LLMServer

    from .system.test_cli import KEY, RULE, responder, write_rows, write_tasks

    tasks = write_tasks(tmp_path / "tasks.jsonl")
    test = write_rows(tmp_path / "test.jsonl", [{"id": f"t{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)}
                                                for i in range(20, 24)])
    monkeypatch.setenv("CLI_TEST_KEY", KEY)
    run_dir = tmp_path / "real"
    with LLMServer(responder=responder()) as server:
        assert cli_main(["init", str(run_dir), "--tasks", str(tasks), "--test-tasks", str(test), "--model",
                         "test-model", "--base-url", server.openai_base_url, "--api-key-env", "CLI_TEST_KEY",
                         "--reward", "exact"]) == 0
        assert cli_main(["run", str(run_dir), "--rounds", "2", "--workers", "2"]) == 0
    status = json.loads((run_dir / "status.json").read_text())
    result = json.loads((run_dir / "result.json").read_text())
    page = build_report(RunDir(run_dir))
    parsed = parse(page)
    assert KEY not in page
    commits = parsed.section("commits")
    assert "v1 → v2 · round 1" in commits and f"+- {RULE}" in commits and "the full held-out mean is better for certain" in commits
    rows = [json.loads(line) for line in (run_dir / "rounds.jsonl").read_text().splitlines()]
    evidence = [d["evidence"] for r in rows for d in r.get("decisions") or [] if d.get("evidence")] or \
        [x["evidence"] for h in result["history"] for x in h["reports"] if x.get("evidence")]
    if evidence:  # the paired test's numbers, as the engine records them
        assert f"E = {evidence[0]['e_value']:.1f} against the threshold {evidence[0]['threshold']:.1f}" in commits
    else:  # an engine that does not record them
        assert "evidence not recorded" in commits
    assert f"test set (4 tasks no decision saw): {status['test']['initial']:.3f} at the start" in parsed.section("reward")
    cost = parsed.section("cost")
    assert f"all {status['tokens']:,} 100%" in cost and f"model calls {result['usage']['calls']:,}" in cost
    for phase, tokens in result["usage"]["phases"].items():
        assert f"{phase} {tokens:,}" in cost
    assert "t20 What is 20 + 20?" in parsed.section("tasks")


def _screenshot_tool() -> Any:
    spec = importlib.util.spec_from_file_location("screenshot_report", ROOT / "tools" / "screenshot_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_screenshot_tool_without_chromium_exits_2_saying_how_to_install_it(tmp_path, monkeypatch, capsys):
    page = tmp_path / "report.html"
    page.write_text("<!doctype html><p>x</p>")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _screenshot_tool().main([str(page), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "apt-get install chromium" in err


@pytest.mark.parametrize("bad", ["not a report", "1,2,3"])
def test_the_screenshot_tool_refuses_a_bad_size(tmp_path, bad):
    page = tmp_path / "report.html"
    page.write_text("<p>x</p>")
    with pytest.raises(SystemExit) as exc:
        _screenshot_tool().main([str(page), "--size", bad])
    assert exc.value.code == 2
