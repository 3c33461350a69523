"""Bad API inputs are refused at the boundary, by name: a clock, an artifact id, an allocator context, a diff, a state.

Each case used to crash far from its cause (a bare ``ValueError`` from ``float("now")``) or
pass silently (a NUL in an artifact id, a negative diff size, an empty diff, a lone
surrogate committed into a state); each now raises an `InvalidArgument` (or its
`InvalidArgumentType` twin) naming the value, the knob and the fix, before anything is
written. What must keep working beside each refusal is checked with it.
"""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from agentdescent import (
    Diff,
    EvidenceCard,
    InvalidArgument,
    InvalidArgumentType,
    MemoryLedger,
    SqliteLedger,
    Task,
    evolve,
)
from agentdescent.budget.allocator import AllocatorContext, pre_spend_context
from agentdescent.clock import Clock, as_clock
from agentdescent.domains.router import RouterDomain
from agentdescent.engine.progress import read_progress
from agentdescent.ledger.integrity import ROOT_DIGEST, version_digest
from agentdescent.merge.fusion import union_diff
from agentdescent.testing import ManualClock
from agentdescent.types import MergeOutcome, MergeReport


def tasks() -> list[Task]:
    return [Task(f"t{i}", f"prompt {i}") for i in range(6)]


def quiet_run(**kwargs):
    """A one-round run whose proposer never proposes; returns its result and the rollout calls made."""
    calls: list[str] = []
    result = evolve(tasks(), lambda task, output: 1.0, run=lambda r, t: calls.append(t.id) or "",
                    propose=lambda *a: None, rounds=1, **kwargs)
    return result, calls


def ledgers(tmp_path):
    return [MemoryLedger(), SqliteLedger(tmp_path / "l.sqlite")]


# --------------------------------------------------------------------------- the clock


@pytest.mark.parametrize("reading", ["now", math.nan, math.inf, None, True, "12.5", [1.0]])
def test_a_clock_that_does_not_tell_the_time_is_refused_before_the_run_naming_what_it_returned(reading, tmp_path):
    path = tmp_path / "run.sqlite"
    calls: list[str] = []
    with pytest.raises(InvalidArgumentType) as info:
        evolve(tasks(), lambda task, output: 1.0, run=lambda r, t: calls.append(t.id) or "",
               propose=lambda *a: None, rounds=1, ledger=path, clock=lambda: reading)
    message = str(info.value)
    assert message.startswith("clock=") and f"its now() returned {reading!r}" in message
    assert "finite real number of seconds" in message
    assert calls == [] and not path.exists()  # nothing ran, no ledger was made


def test_a_clock_object_is_read_once_when_it_is_adopted_and_a_broken_one_is_named():
    class Broken(Clock):
        def now(self):
            return "noon"

    class Raising:
        def now(self):
            raise OSError("no clock here")

    with pytest.raises(InvalidArgumentType, match=r"its now\(\) returned 'noon' \(a str\)"):
        as_clock(Broken())
    with pytest.raises(InvalidArgumentType, match=r"its now\(\) raised OSError: no clock here") as info:
        as_clock(Raising(), "clock")
    assert isinstance(info.value.__cause__, OSError)


def test_a_function_clock_is_checked_at_every_reading_and_good_clocks_still_pass():
    readings = iter([1.0, 2.0, float("nan")])
    clock = as_clock(lambda: next(readings))
    assert clock.now() == 2.0  # as_clock took the first reading
    with pytest.raises(InvalidArgumentType, match=r"returned nan"):
        clock.now()
    manual = ManualClock()
    assert as_clock(manual) is manual and as_clock(lambda: 3).now() == 3.0
    result, calls = quiet_run(clock=ManualClock(autojump=True))
    assert result is not None and calls


# --------------------------------------------------------------------------- the artifact id


@pytest.mark.parametrize("bad", ["a\x00b", "line\nbreak", "tab\there", "del\x7f", "c1\x85"])
def test_an_artifact_id_with_a_control_character_is_refused_by_the_run(bad):
    with pytest.raises(InvalidArgument) as info:
        quiet_run(artifact_id=bad)
    message = str(info.value)
    assert message.startswith(f"artifact_id={bad!r}") and "control character" in message
    assert "use printable text" in message


@pytest.mark.parametrize("bad", ["a\x00b", "line\nbreak", "esc\x1b[31m"])
def test_an_artifact_id_with_a_control_character_is_refused_by_both_ledgers_and_nothing_is_written(bad, tmp_path):
    for led in ledgers(tmp_path):
        try:
            led.register("ok", {}, 0.2)
            with pytest.raises(InvalidArgument, match=r"holds the control character"):
                led.register(bad, {}, 0.2)
            with pytest.raises(InvalidArgument, match=r"holds the control character .* \(at position \d+\)"):
                led.commit(bad, {"k": "v"}, 1)
            assert led.versions() == {"ok": 1}
            led.register("ünïcödé id", {}, 0.2)  # printable text of any script is fine
            assert led.versions() == {"ok": 1, "ünïcödé id": 1}
        finally:
            led.close()


def test_an_artifact_an_older_agentdescent_stored_under_a_control_character_still_reads(tmp_path):
    path = tmp_path / "old.sqlite"
    SqliteLedger(path).close()
    aid = "old\tid"
    digest = version_digest(aid, 1, ROOT_DIGEST, '{"k": "v"}', "{}")
    raw = sqlite3.connect(path)
    raw.execute("INSERT INTO artifacts VALUES (?, 0.2, 0, 1, ?)", (aid, digest))
    raw.execute("INSERT INTO versions VALUES (?, 1, '{\"k\": \"v\"}', '{}', 0, ?, ?)", (aid, ROOT_DIGEST, digest))
    raw.commit()
    raw.close()
    with SqliteLedger(path) as led:  # reads (and salvage) keep working; a new version is refused
        assert led.head(aid) == (1, {"k": "v"}) and [e.version for e in led.history(aid)] == [1]
        with pytest.raises(InvalidArgument, match="control character"):
            led.commit(aid, {"k": "w"}, 1)


# --------------------------------------------------------------------------- the allocator context


@pytest.mark.parametrize(("kwargs", "error", "says"), [
    ({"size": -1}, InvalidArgument, r"AllocatorContext\(size=-1\): use an integer >= 0"),
    ({"size": 1.5}, InvalidArgumentType, r"AllocatorContext\(size=1.5\)"),
    ({"size": True}, InvalidArgumentType, r"AllocatorContext\(size=True\)"),
    ({"blast_radius": 5}, InvalidArgument, r"AllocatorContext\(blast_radius=5\): use a number in \[0, 1\]"),
    ({"blast_radius": -0.1}, InvalidArgument, r"blast_radius=-0.1"),
    ({"blast_radius": math.nan}, InvalidArgument, r"blast_radius=nan"),
    ({"blast_radius": "0.2"}, InvalidArgumentType, r"blast_radius='0.2'"),
])
def test_an_allocator_context_no_card_can_have_is_refused(kwargs, error, says):
    with pytest.raises(error, match=says):
        AllocatorContext(**kwargs)


def test_the_contexts_the_engines_build_still_pass():
    card = EvidenceCard(Diff("d", "a", {"k": "v"}), {"a": 1}, None, 0.4)
    assert pre_spend_context(card, 1.0).features()[2] == 1.0
    assert AllocatorContext(size=0, blast_radius=0.0).features() == (0.0, 0.0, 0.0)


# --------------------------------------------------------------------------- the diff


def test_an_empty_diff_is_refused_when_built_and_says_to_return_none():
    with pytest.raises(InvalidArgument) as info:
        Diff("d1", "artifact", {})
    message = str(info.value)
    assert "Diff 'd1': ops={} changes nothing" in message and "return None from Strategy.to_diff" in message
    assert not isinstance(info.value, TypeError)


def test_a_stored_empty_diff_still_loads_and_the_merge_skips_it():
    stored = {"diff_id": "old", "target": "p", "ops": {}, "contract_breaking": False, "author": "w0"}
    diff = Diff.from_json(stored)
    assert diff.size() == 0 and diff.is_noop({"k": "v"})
    report = MergeReport.from_json({"artifact_id": "p", "outcome": "below-threshold", "candidate": stored})
    assert report.accepted == diff
    card = EvidenceCard.from_json({"diff": stored, "base_version": {"p": 1}, "before_after_delta": 0.0,
                                   "advantage": None, "trajectory_refs": [], "cost_tokens": 0,
                                   "self_verified": False, "allocated": True}, {})
    assert card.diff.size() == 0
    with pytest.raises(InvalidArgument):  # the way back in is from_json only
        Diff("again", "p", {})
    # The fusion of non-empty diffs is never empty (the one place the package builds a diff from others).
    assert union_diff([Diff("a", "p", {"x": "1"}), Diff("b", "p", {"x": "1"})], "p").ops == {"x": "1"}


def test_an_old_ledger_whose_saved_round_holds_an_empty_diff_still_resumes(tmp_path):
    path = tmp_path / "old.sqlite"
    domain = RouterDomain(seed=0, noise=0.25)
    first = evolve(**domain.evolve_kwargs(), rounds=2, ledger=path, artifact_id="router", shuffle=False)
    raw = sqlite3.connect(path)
    text = raw.execute("SELECT round_json FROM run_rounds WHERE run_id = 'router' AND idx = 1").fetchone()[0]
    saved = json.loads(text)
    saved["reports"] = [{"artifact_id": "router", "outcome": MergeOutcome.BELOW_THRESHOLD.value,
                         "candidate": {"diff_id": "old", "target": "router", "ops": {}}}]
    # written as an agentdescent before the run-state digests would have: no digest
    raw.execute("UPDATE run_rounds SET round_json = ?, digest = '' WHERE run_id = 'router' AND idx = 1",
                (json.dumps(saved, sort_keys=True),))
    raw.commit()
    raw.close()
    with SqliteLedger(path) as led:
        progress = read_progress(led, "router")
        assert progress is not None and progress.rounds[0].reports[0].accepted.size() == 0
    again = evolve(**domain.evolve_kwargs(), rounds=1, ledger=path, artifact_id="router", shuffle=False)
    assert [h.index for h in again.history] == [1, 2, 3] and again.version >= first.version


# --------------------------------------------------------------------------- a lone surrogate in a state


@pytest.mark.parametrize(("state", "says"), [
    ({"k\ud800": "v"}, r"key 'k\\ud800' holds a lone surrogate \('\\ud800' at position 1\)"),
    ({"k": "v\udc00w"}, r"the value of key 'k' holds a lone surrogate \('\\udc00' at position 1\)"),
])
def test_a_state_holding_a_lone_surrogate_is_refused_at_register_and_commit_in_both_ledgers(state, says, tmp_path):
    for led in ledgers(tmp_path):
        try:
            with pytest.raises(InvalidArgument, match=says) as info:
                led.register("fresh", state, 0.2)
            assert "cannot be encoded as UTF-8" in str(info.value) and "sanitize_text" in str(info.value)
            led.register("a", {"ok": "é and 😀 are fine"}, 0.2)
            with pytest.raises(InvalidArgument, match=says):
                led.commit("a", state, 1)
            assert led.versions() == {"a": 1} and led.head("a") == (1, {"ok": "é and 😀 are fine"})
        finally:
            led.close()
