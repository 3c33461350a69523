"""Is the evaluation stochastic? What the acceptance test learns, mostly for free, about noise.

A cached score is one draw. When the model samples (temperature > 0) or the reward is
noisy, a discordant pair — a task the candidate gains or loses — may be noise, so before
it counts it is scored again on both sides and counts with the means. Doing that in a
deterministic run would waste calls, so `NoiseMonitor` learns which kind of evaluation
this is, from comparisons the run makes anyway where it can (free probes), and decides
how many extra draws a discordant pair gets. It also keeps the estimate of how often a
second draw disagrees with the first (the reported noise rate).

This module owns that state and its counters; it never calls an evaluator.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["NoiseMonitor"]


class NoiseMonitor:
    """Whether the evaluation is deterministic, noisy, or not known yet; and how many extra draws a pair gets.

    Evidence comes two ways. **Free probes**: when the head is scored on a task whose score
    it inherited from an earlier version (one that no commit since plausibly affected on that
    task), the two scores must be equal in a deterministic evaluation; the comparison costs
    nothing, since the head had to be scored anyway. **Re-draws**: a discordant pair scored
    again on both sides. ``probe`` agreeing observations with no disagreement make the
    evaluation *deterministic*; the first disagreement makes it *noisy*, for good (a commit
    that changed a task the relevance ranking called unaffected looks like noise too: the
    safe side).

    With ``mode="auto"``: while *unknown*, every discordant pair is drawn once more on both
    sides and counts with its means (a cached head score may be one unlucky draw, and
    re-drawing gains and losses alike keeps the test unbiased); once *deterministic*,
    nothing is drawn again; when *noisy*, every discordant pair gets ``draws`` more draws
    per side. A deterministic run pays for the unknown phase once: about ``probe / 2``
    pairs. ``mode="deterministic"`` starts
    *deterministic* (the user says so) and otherwise behaves as ``"auto"``: a disagreement
    still makes it noisy. An int mode re-draws every discordant pair that many times and
    never calls the evaluation deterministic (0: never re-draws).

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
        self.rescored_pairs = 0
        self.overturned = 0

    @property
    def deterministic(self) -> bool:
        """The evaluation reproduced ``probe`` times and never failed to."""
        with self._lock:
            return self.state == "deterministic"

    def extra_draws(self) -> int:
        """Extra draws per side for the next discordant pair."""
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
        """A free probe: a task scored on a version that should not have changed it, against its earlier score."""
        with self._lock:
            self.free_probes += 1
            self._seen(abs(earlier - now) <= 1e-9)

    def observe_redraw(self, first: float, again: float) -> None:
        """One side of a task drawn again outside a discordant pair (the probe that settles the state)."""
        with self._lock:
            self.redraws += 1
            self._seen(abs(first - again) <= 1e-9)

    def observe(self, first: Sequence[float], redraws: Sequence[Sequence[float]], overturned: bool) -> None:
        """A re-scored pair: each side's first draw and its re-draws, and whether the means undid the pair."""
        with self._lock:
            self.rescored_pairs += 1
            self.overturned += overturned
            for f, again in zip(first, redraws):
                for x in again:
                    self.redraws += 1
                    self._seen(abs(x - f) <= 1e-9)

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
                    "disagreement_rate": rate, "rescored_pairs": self.rescored_pairs,
                    "overturned": self.overturned}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go on from saved `stats` (a resumed run keeps what it learned)."""
        with self._lock:
            self.state = str(state.get("state", self.state))
            for name in ("free_probes", "redraws", "agreements", "disagreements", "rescored_pairs", "overturned"):
                setattr(self, name, int(state.get(name, 0)))
