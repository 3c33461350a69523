"""`RunStateConformance`: the behaviour of a ledger's run-state pair (``save_run_state``/``load_run_state``).

A run resumes from what its ledger saved; a third-party ledger that keeps progress must
keep it exactly, and a persisted one must refuse progress changed behind its back rather
than hand it back altered. Subclass it under a ``Test`` name and define
``make_ledger(tmp_path)`` (and, for a persisted one, ``reopen(ledger, tmp_path)`` and
``damage_saved(ledger, tmp_path, run_id, index)``). Plain Python (no pytest import).
"""

from __future__ import annotations

from pathlib import Path

from ...errors import RunStateDamaged
from ...ledger import Ledger
from ._checks import check, expect_raises

__all__ = ["RunStateConformance"]


class RunStateConformance:
    """The rules of the run-state pair.

    The checks: nothing saved reads as None; what is saved reads back with its rounds, in
    index order, under ``"history"``; a round saved again replaces its earlier copy and
    new rounds add to the old ones (a save writes only what is new); runs are kept apart
    by id; what is read is a copy; for a persisted ledger (``reopen`` defined), it all
    survives a reopen; and, where the store can be changed outside the ledger
    (``damage_saved`` defined), a saved state or round changed there by one bit is
    refused on load with `agentdescent.errors.RunStateDamaged`, never returned altered.
    """

    def make_ledger(self, tmp_path: Path) -> Ledger:
        """Return a new, empty ledger that keeps run state.

        Raises:
            NotImplementedError: always, here; a subclass must override it.
        """
        raise NotImplementedError(f"{type(self).__name__}.make_ledger(self, tmp_path) is not defined")

    def reopen(self, ledger: Ledger, tmp_path: Path) -> Ledger | None:
        """Close ``ledger`` and open the same store again; None (the default) for an in-memory one."""
        return None

    def damage_saved(self, ledger: Ledger, tmp_path: Path, run_id: str, index: int | None) -> bool:
        """Flip one bit of what ``ledger`` stored for ``run_id``, behind its back; False (the default): cannot.

        Args:
            ledger: the ledger `make_ledger` returned, holding the progress just saved.
            tmp_path: the scratch folder it was made in.
            run_id: the run whose progress to damage.
            index: the saved round to damage, or None for the saved state.

        Returns:
            True once the stored text is changed (the check then expects `load_run_state`
            to refuse it); False for a store nothing outside the ledger can reach (in
            memory), which skips the check.
        """
        return False

    def test_nothing_saved_reads_as_none(self, tmp_path: Path) -> None:
        """``load_run_state`` of an unknown run is None."""
        ledger = self.make_ledger(tmp_path)
        check(ledger.load_run_state("never-saved") is None, "load_run_state of a run never saved must be None")

    def test_rounds_are_kept_apart_added_and_replaced(self, tmp_path: Path) -> None:
        """Rounds read back in index order; a round saved again replaces its copy."""
        ledger = self.make_ledger(tmp_path)
        ledger.save_run_state("run", {"step": 1}, [{"index": 1, "tokens": 5}, {"index": 2, "tokens": 7}])
        ledger.save_run_state("run", {"step": 2}, [{"index": 2, "tokens": 9}, {"index": 3, "tokens": 1}])
        state = ledger.load_run_state("run")
        check(state is not None and state.get("step") == 2, f"the state must be the last one saved, got {state!r:.80}")
        history = state.get("history")
        check(history == [{"index": 1, "tokens": 5}, {"index": 2, "tokens": 9}, {"index": 3, "tokens": 1}],
              f"rounds must read back in index order, a round saved again replacing its copy; got {history!r:.160}")
        again = self.reopen(ledger, tmp_path)
        if again is not None:
            check(again.load_run_state("run") == state, "the saved progress must survive a reopen")

    def test_runs_are_kept_apart_and_reads_are_copies(self, tmp_path: Path) -> None:
        """Two run ids never see each other's progress; mutating what was read changes nothing."""
        ledger = self.make_ledger(tmp_path)
        ledger.save_run_state("a", {"who": "a"}, [{"index": 1, "x": 1}])
        ledger.save_run_state("b", {"who": "b"}, [])
        a = ledger.load_run_state("a")
        b = ledger.load_run_state("b")
        check(a is not None and a.get("who") == "a" and b is not None and b.get("who") == "b"
              and b.get("history") == [], "run ids must be kept apart")
        a["who"] = "changed"
        a["history"].append({"index": 9})
        fresh = ledger.load_run_state("a")
        check(fresh is not None and fresh.get("who") == "a" and len(fresh["history"]) == 1,
              "load_run_state must return a copy the caller may change")

    def test_progress_changed_behind_the_ledgers_back_is_refused(self, tmp_path: Path) -> None:
        """A saved state or round changed outside the ledger (one bit) raises `RunStateDamaged` on load."""
        ledger = self.make_ledger(tmp_path)
        for run_id, index, what in (("state-damaged", None, "the saved state"), ("round-damaged", 2, "saved round 2")):
            ledger.save_run_state(run_id, {"rule": "account", "round_count": 2},
                                  [{"index": 1, "rule": "check the units"}, {"index": 2, "rule": "account"}])
            if not self.damage_saved(ledger, tmp_path, run_id, index):
                return  # the store cannot be changed outside the ledger: nothing to check
            expect_raises(RunStateDamaged, lambda run_id=run_id: ledger.load_run_state(run_id),
                          f"load_run_state after one bit of {what} was flipped outside the ledger (the damage "
                          "must be refused, never returned as progress)")
