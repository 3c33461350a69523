"""`RunStateConformance`: the behaviour of a ledger's run-state pair (``save_run_state``/``load_run_state``).

A run resumes from what its ledger saved; a third-party ledger that keeps progress must
keep it exactly. Subclass it under a ``Test`` name and define ``make_ledger(tmp_path)``
(and ``reopen(ledger, tmp_path)`` for a persisted one). Plain Python (no pytest import).
"""

from __future__ import annotations

from pathlib import Path

from ...ledger import Ledger
from ._checks import check

__all__ = ["RunStateConformance"]


class RunStateConformance:
    """The rules of the run-state pair.

    The checks: nothing saved reads as None; what is saved reads back with its rounds, in
    index order, under ``"history"``; a round saved again replaces its earlier copy and
    new rounds add to the old ones (a save writes only what is new); runs are kept apart
    by id; what is read is a copy; and, for a persisted ledger (``reopen`` defined), it
    all survives a reopen.
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
