"""Is the evaluation stochastic? What the acceptance test learns about noise.

A cached score is one draw. When the model samples (temperature > 0) or the reward is
noisy, the acceptance test must draw both sides afresh (with replacement) instead of
taking a cached score as a fact; in a deterministic evaluation that would waste calls, so
`NoiseMonitor` learns which kind of evaluation this is — from a probe (the head drawn again
on tasks it was scored on), from repeated draws the noisy test makes anyway, and from the
re-draws that confirm a learned-deterministic candidate's gains — and how many extra draws
confirm a would-be regression. It also keeps the estimate of how often a second draw
disagrees with the first (the reported noise rate).

This module owns that state and its counters; it never calls an evaluator.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["NoiseMonitor"]


class NoiseMonitor:
    """Whether the evaluation is deterministic, noisy, or not known yet; and how many extra draws a pair gets.

    Evidence comes as re-draws: a score drawn again on the same state and task, compared
    with the earlier draw (`observe_redraw`; `observe_free` for a comparison made without
    a call). ``probe`` agreeing observations with no disagreement make the evaluation
    *deterministic*; the first disagreement makes it *noisy*, for good.

    With ``mode="auto"`` the state starts *unknown* (the measurement probes it once, with
    at most ``probe`` re-draws of the head); ``mode="deterministic"`` starts
    *deterministic* (``declared``: the user says so) and a disagreement still makes it
    noisy. An int mode never calls the evaluation deterministic: the test always draws
    afresh, and a would-be regression gets that many confirming draws per side (0: the
    scores count as they came, as facts). `extra_draws` is the number of confirming draws
    for a would-be regression in a noisy test: 1 while unknown, ``draws`` once noisy.

    Args:
        mode: ``"auto"``, ``"deterministic"``, or a fixed number of extra draws per side.
        probe: agreeing observations that make the evaluation deterministic.
        draws: extra draws per side once the evaluation is noisy.
    """

    def __init__(self, mode: str | int = "auto", probe: int = 16, draws: int = 2) -> None:
        self.mode = mode
        self.probe = probe
        self.draws = draws
        self._lock = threading.Lock()
        self.state = {"auto": "unknown", "deterministic": "deterministic"}.get(str(mode), "fixed")
        self._learns = mode in ("auto", "deterministic")
        self.agreements = 0
        self.free_probes = 0
        self.redraws = 0
        self.disagreements = 0

    @property
    def declared(self) -> bool:
        """The user declared the evaluation deterministic (``mode="deterministic"``, or 0) and nothing contradicted it."""
        with self._lock:
            if isinstance(self.mode, int) and not isinstance(self.mode, bool):
                return self.mode == 0
            return self.state == "deterministic" and self.mode == "deterministic"

    @property
    def deterministic(self) -> bool:
        """The evaluation reproduced ``probe`` times and never failed to."""
        with self._lock:
            return self.state == "deterministic"

    def extra_draws(self) -> int:
        """Draws per side that confirm a would-be regression in a noisy test."""
        with self._lock:
            if not self._learns:
                return int(self.mode)
            if self.state == "noisy":
                return self.draws
            if self.state == "unknown":
                return 1
            return 0

    def _seen(self, agree: bool) -> None:
        if agree:
            self.agreements += 1
            if self._learns and self.state == "unknown" and self.agreements >= self.probe:
                self.state = "deterministic"
        else:
            self.disagreements += 1
            if self._learns:
                self.state = "noisy"

    def observe_free(self, earlier: float, now: float) -> None:
        """A comparison that cost no call: a score against an earlier draw of the same state and task."""
        with self._lock:
            self.free_probes += 1
            self._seen(abs(earlier - now) <= 1e-9)

    def observe_redraw(self, first: float, again: float) -> None:
        """A score drawn again on the same state and task, against the earlier draw."""
        with self._lock:
            self.redraws += 1
            self._seen(abs(first - again) <= 1e-9)

    @property
    def disagreement_rate(self) -> float | None:
        """Share of probes and re-draws that differed from the earlier draw (None before any)."""
        with self._lock:
            seen = self.agreements + self.disagreements
            return self.disagreements / seen if seen else None

    def stats(self) -> dict[str, Any]:
        """The monitor's counters, JSON-ready (``result.counters["noise"]``)."""
        rate = self.disagreement_rate
        with self._lock:
            return {"state": self.state, "free_probes": self.free_probes, "redraws": self.redraws,
                    "agreements": self.agreements, "disagreements": self.disagreements,
                    "disagreement_rate": rate}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go on from saved `stats` (a resumed run keeps what it learned)."""
        with self._lock:
            self.state = str(state.get("state", self.state))
            for name in ("free_probes", "redraws", "agreements", "disagreements"):
                setattr(self, name, int(state.get(name, 0)))
