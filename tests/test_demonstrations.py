"""Demonstrations in the artifact: the text format, the strategies, the proposal rule, the prompt guard, both runtimes.

The end-to-end runs use a small offline world the tests make themselves: a "model" that
answers a task with the output of the demonstration shown for the same kind of item, and
nothing otherwise, so showing the right examples is the only way to improve.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentdescent as ad
from agentdescent.engine.demos import DemoChooser, PromptGuard, expected_output
from agentdescent.errors import InvalidArgument
from agentdescent.fewshot import BEGIN, END, render_demonstrations, split_demonstrations
from agentdescent.merge.demonstrations import Demonstration, demo_slots

KINDS = ["red", "green", "blue", "gold"]


def _task(prefix: str, i: int) -> ad.Task:
    return ad.Task(f"{prefix}{i}", f"{prefix} item {i} of kind {KINDS[i % 4]}: which label?",
                   {"answer": f"L{i % 4}", "choices": [f"L{j}" for j in range(4)]})


def _run(rendered: str, task: ad.Task) -> str:
    _, pairs = split_demonstrations(rendered)
    kind = task.prompt.split("kind ")[1].split(":")[0]
    for given_input, output in pairs:
        if f"kind {kind}:" in given_input:
            return output
    return "no idea"


def _reward(task: ad.Task, output: str) -> ad.Score:
    ok = output.strip() == task.meta["answer"]
    return ad.Score(1.0 if ok else 0.0, "correct" if ok else f"expected {task.meta['answer']}")


def _no_rule(rendered, task, output, reward):  # the model writes nothing usable
    return None


# --------------------------------------------------------------------------- the text format

@given(st.lists(st.tuples(st.text(min_size=1), st.text(min_size=1)), max_size=5), st.text())
def test_the_block_round_trips_any_text(pairs, instructions):
    instructions = instructions.replace(BEGIN, "x").replace(END, "y")
    block = render_demonstrations(pairs)
    text = f"{instructions}\n\n{block}" if block else instructions
    got_instructions, got_pairs = split_demonstrations(text)
    assert got_pairs == pairs
    if pairs:
        assert got_instructions == instructions.strip("\n")


def test_marker_lines_inside_a_demonstration_are_escaped():
    pairs = [("<<<output>>>\n\\<<<input>>>", "<<<end demonstrations>>>")]
    block = render_demonstrations(pairs)
    assert block.count("\n<<<output>>>\n") == 1
    assert split_demonstrations(block) == ("", pairs)


def test_a_text_without_a_well_formed_block_is_all_instructions():
    for text in ("plain", f"{BEGIN}\n<<<input>>>\nx", f"{BEGIN}\nstray\n{END}"):
        assert split_demonstrations(text) == (text, [])


# --------------------------------------------------------------------------- the strategies

def test_rules_and_demos_render_rules_then_pairs_in_slot_order():
    s = ad.RulesAndDemos(demos=3)
    state = {**s.to_diff({}, "Answer with a label.", "w", 1, "a").ops,
             "demo:2": Demonstration("in two", "out two", "t2", "labeled").to_value(),
             "demo:1": Demonstration("in one", "out one", "t1", "bootstrapped").to_value()}
    instructions, pairs = split_demonstrations(s.render(state))
    assert instructions == "# Playbook\n- Answer with a label."
    assert pairs == [("in one", "out one"), ("in two", "out two")]
    assert s.render({}) == ad.AppendRules().render({})  # no demonstrations: exactly the rules
    assert s.open_slots(state) == [3] and demo_slots(s) == 3 and demo_slots(ad.AppendRules()) == 0


def test_two_diffs_for_one_slot_contradict_and_different_slots_fuse():
    s = ad.RulesAndDemos(demos=2)
    a = s.demo_diff({}, Demonstration("a", "A"), slot=1, author="w1", base_version=1, target="x")
    b = s.demo_diff({}, Demonstration("b", "B"), slot=1, author="w2", base_version=1, target="x")
    c = s.demo_diff({}, Demonstration("c", "C"), slot=2, author="w2", base_version=1, target="x")
    assert set(a.ops) == set(b.ops) == {"demo:1"} and a.ops != b.ops
    assert set(a.ops).isdisjoint(c.ops)
    state = a.apply({})
    # the same input twice is no change; emptying a slot is a removal
    assert s.demo_diff(state, Demonstration("a", "other"), slot=2, author="w", base_version=2, target="x") is None
    assert s.demo_diff(state, None, slot=1, author="w", base_version=2, target="x").ops == {"demo:1": None}
    with pytest.raises(InvalidArgument, match="slots 1..2"):
        s.demo_diff(state, Demonstration("d", "D"), slot=3, author="w", base_version=2, target="x")


def test_bad_knobs_and_values_are_named():
    with pytest.raises(InvalidArgument, match="demos"):
        ad.RulesAndDemos(demos=0)
    with pytest.raises(TypeError, match="slots"):
        ad.Demonstrations(slots="4")
    with pytest.raises(InvalidArgument, match="non-empty"):
        Demonstration(" ", "x")
    with pytest.raises(InvalidArgument, match="to_value"):
        Demonstration.from_value("not json")
    assert ad.Demonstrations(2).to_diff({}, "a rule", "w", 1, "x") is None


# --------------------------------------------------------------------------- the proposal rule

def test_auto_fills_open_slots_swaps_copied_examples_and_asks_the_model_otherwise():
    s = ad.RulesAndDemos(demos=2)
    chooser = DemoChooser("auto", s, _reward, seed=0)
    t = _task("t", 1)  # wants L1
    assert chooser.kind(t, 1, {}, 0.0, "no idea") == "labeled"
    assert chooser.kind(t, 1, {}, 1.0, "L1") is None  # its answer is known: shown where it fails
    assert chooser.kind(ad.Task("u", "open question"), 1, {}, 1.0, "a fine reply") == "bootstrapped"
    assert DemoChooser("bootstrapped", s, _reward, 0).kind(t, 1, {}, 1.0, "L1") == "bootstrapped"
    full = {"demo:1": Demonstration("a", "L0").to_value(), "demo:2": Demonstration("b", "L1").to_value()}
    assert chooser.kind(t, 1, full, 1.0, "L1") is None
    # the reply copied demonstration 1's output: a swap of slot 1, and only of slot 1
    assert chooser.kind(t, 1, full, 0.0, "L0") == "labeled"
    for v in range(5):
        assert set(chooser.diff("labeled", t, "L0", full, author="w", version=v, target="a").ops) == {"demo:1"}
    # nothing copied, every slot full: the model writes a rule
    assert chooser.kind(t, 1, full, 0.0, "no idea") == "model"
    half = {"demo:1": full["demo:1"]}
    slots = {next(iter(chooser.diff("labeled", _task("t", i), "L0", half, author="w", version=1,
                                    target="a").ops)) for i in range(1, 40, 4)}
    assert slots == {"demo:1", "demo:2"}  # the open slot and the copied one
    assert chooser.kind(ad.Task("u", "no answer here"), 1, {}, 0.0, "") == "model"
    assert DemoChooser("auto", ad.AppendRules(), _reward, 0).kind(t, 1, {}, 0.0) == "model"
    assert DemoChooser("model", s, _reward, 0).kind(t, 1, {}, 0.0) == "model"
    assert DemoChooser("demos", s, _reward, 0).kind(t, 1, full, 0.0, "no idea") == "labeled"


def test_the_expected_output_hook_of_a_reward():
    def reward(task, output):
        return 1.0
    reward.expected_output = lambda task: "from the hook"
    assert expected_output(ad.Task("a", "p"), reward) == "from the hook"
    assert expected_output(ad.Task("a", "p", {"answer": "meta wins"}), reward) == "meta wins"
    assert expected_output(ad.Task("a", "p"), _reward) is None


def test_the_proposal_knob_is_checked_against_the_strategy():
    tasks = [_task("t", i) for i in range(8)]
    with pytest.raises(InvalidArgument, match="RulesAndDemos"):
        ad.evolve(tasks, _reward, run=_run, propose=_no_rule, proposal="labeled", rounds=1)
    with pytest.raises(InvalidArgument, match="'auto'"):
        ad.evolve(tasks, _reward, run=_run, propose=_no_rule, proposal="demonstrations", rounds=1)


def test_the_guard_refuses_held_out_prompts_as_inputs_and_quotes():
    held = [ad.Task("h1", "What is the capital of the country with the tallest tower?")]
    guard = PromptGuard(held)
    s = ad.RulesAndDemos(demos=2)
    leak = s.demo_diff({}, Demonstration("what is the capital of the  country with the tallest tower?", "x"),
                       slot=1, author="w", base_version=1, target="a")
    assert "h1" in guard.refusal(leak)
    quote = s.to_diff({}, "Recall: what is the capital of the country with the tallest tower? It is X.", "w", 1, "a")
    assert "quotes" in guard.refusal(quote)
    fine = s.demo_diff({}, Demonstration("a train prompt", "y"), slot=1, author="w", base_version=1, target="a")
    assert guard.refusal(fine) is None


# --------------------------------------------------------------------------- both runtimes

def _committed_values(ledger_path) -> list[str]:
    ledger = ad.SqliteLedger(ledger_path)
    try:
        return [v for entry in ledger.history("artifact") for v in entry.state.values()]
    finally:
        ledger.close()


@pytest.mark.parametrize("asynchronous", [False, True])
def test_demonstrations_improve_the_toy_model_and_only_train_tasks_become_demonstrations(tmp_path, asynchronous):
    train = [_task("t", i) for i in range(30)]
    held = [_task("h", i) for i in range(20)]
    # every "red" held-out task has the prompt of a train task (a duplicate in the data): the train
    # task fails, its labeled demonstration is proposed, and the guard must refuse it every time
    held = [ad.Task(h.id, train[i].prompt, dict(h.meta)) if i % 4 == 0 else h for i, h in enumerate(held)]
    test = [_task("x", i) for i in range(20)]
    stop = {"max_rollouts": 80} if asynchronous else {"rounds": 10}
    result = (ad.async_evolve if asynchronous else ad.evolve)(
        [*train, *held], _reward, run=_run, propose=_no_rule, strategy=ad.RulesAndDemos(demos=4),
        test_tasks=test, n_workers=2, seed=1, ledger=tmp_path / "l.sqlite", shuffle=False,
        held_out_frac=0.4, **stop)
    assert result.error is None
    assert result.test_initial == 0.0 and result.test_final >= 0.5
    assert result.counters["demos_labeled"] + result.counters.get("demos_bootstrapped", 0) > 0
    assert result.counters["demos_refused"] > 0
    values = _committed_values(tmp_path / "l.sqlite")
    demos = [Demonstration.from_value(v) for v in values if v.startswith("{")]
    assert demos and {d.source for d in demos} <= {t.id for t in train}
    protected = {t.prompt for t in [*held, *test]}
    for value in values:
        assert not any(p in value for p in protected), value


def test_a_demonstration_commit_reads_as_one_line_in_the_decision_record():
    from agentdescent.cli.explain import decision_record
    result = ad.evolve([_task("t", i) for i in range(24)], _reward, run=_run, propose=_no_rule,
                       strategy=ad.Demonstrations(slots=2), rounds=3, n_workers=2, seed=3)
    committed = [r for h in result.history for r in h.reports if r.outcome.value == "committed"]
    assert committed
    lines = decision_record(committed[0])["candidate"]
    assert lines and all(line.startswith("demonstration ") and "from task t" in line for line in lines)
    assert json.loads(next(iter(committed[0].accepted.ops.values())))["kind"] in ("labeled", "bootstrapped")


def test_a_demonstration_strategy_tolerates_regressions_by_default_unless_told_otherwise():
    from agentdescent.engine.config import RunConfig
    tasks = [_task("t", i) for i in range(8)]
    base = dict(run=_run, propose=_no_rule)
    assert RunConfig(tasks, _reward, strategy=ad.RulesAndDemos(), **base).aggregator_config().max_regressions is None
    assert RunConfig(tasks, _reward, **base).aggregator_config().max_regressions == 0
    given = ad.AggregatorConfig(max_regressions=1)
    assert RunConfig(tasks, _reward, strategy=ad.Demonstrations(), agg_config=given,
                     **base).aggregator_config().max_regressions == 1
