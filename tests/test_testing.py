"""Tests for agentdescent.testing's LedgerConformance: the suite must fail a broken ledger.

tests/test_ledger.py shows that both shipped ledgers pass it; here each broken ledger
(a MemoryLedger with one rule of the contract removed) must fail the check for that
rule, with a message that names the rule. A suite that passes everything proves nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import agentdescent.testing
from agentdescent.ledger import Ledger, LedgerEntry, MemoryLedger
from agentdescent.testing import LedgerConformance

REPO = Path(__file__).resolve().parents[1]


class NoCASLedger(MemoryLedger):
    """Commits on whatever the head is: last writer wins, updates get lost."""

    def commit(self, artifact_id, new_state, base_version, *, meta=None):
        time.sleep(0.001)  # a slow store: other writers get in between read and write
        head, _ = self.head(artifact_id)
        return super().commit(artifact_id, new_state, head, meta=meta)


class AliasingLedger(MemoryLedger):
    """Hands out its own stored dict from head(), so callers can rewrite history."""

    def head(self, artifact_id):
        with self._lock:
            entry = self._record(artifact_id).entries[-1]
            return entry.version, entry.state


class KeyErrorLedger(MemoryLedger):
    """Lets a bare KeyError escape for an unknown artifact."""

    def head(self, artifact_id):
        if artifact_id not in self.versions():
            raise KeyError(artifact_id)
        return super().head(artifact_id)


class ResettingLedger(MemoryLedger):
    """Treats register of a known id as 'start over', losing the run being resumed."""

    def register(self, artifact_id, state, blast_radius):
        with self._lock:
            self._records.pop(artifact_id, None)
        super().register(artifact_id, state, blast_radius)


class OffByOneLedger(MemoryLedger):
    """Stores the right version but returns the base instead of the new version."""

    def commit(self, artifact_id, new_state, base_version, *, meta=None):
        return super().commit(artifact_id, new_state, base_version, meta=meta) - 1


class NulStrippingLedger(MemoryLedger):
    """Drops NUL characters, as a text column in some databases would."""

    def register(self, artifact_id: str, state: Mapping[str, str], blast_radius: float) -> None:
        clean = {k.replace("\x00", ""): v.replace("\x00", "") for k, v in state.items()}
        super().register(artifact_id, clean, blast_radius)


class RoundingLedger(MemoryLedger):
    """Keeps blast radii to two decimals."""

    def blast_radius(self, artifact_id: str) -> float:
        return round(super().blast_radius(artifact_id), 2)


class ShortHistoryLedger(MemoryLedger):
    """Forgets the audit record of every version."""

    def history(self, artifact_id: str) -> list[LedgerEntry]:
        return [
            LedgerEntry(e.artifact_id, e.version, e.state, {}) for e in super().history(artifact_id)
        ]


def _suite(ledger_type: type[Ledger]) -> LedgerConformance:
    class Suite(LedgerConformance):
        commits_per_thread = 10

        def make_ledger(self, tmp_path: Path) -> Ledger:
            return ledger_type()

    return Suite()


@pytest.mark.parametrize(
    ("ledger_type", "check", "says"),
    [
        (
            NoCASLedger,
            "test_stale_or_future_base_raises_cas_conflict_and_changes_nothing",
            "a commit on base 1 while the head is 2: expected CASConflict, nothing was raised",
        ),
        (NoCASLedger, "test_artifacts_are_independent", "expected CASConflict"),
        (AliasingLedger, "test_head_and_history_return_copies", "head returns a copy"),
        (
            KeyErrorLedger,
            "test_unknown_artifact_raises_ledger_error",
            "head('gamma') on an empty ledger: expected LedgerError, got KeyError",
        ),
        (
            ResettingLedger,
            "test_register_of_a_known_artifact_is_a_noop",
            "register of a known artifact is a no-op",
        ),
        (OffByOneLedger, "test_commit_returns_base_plus_one", "commit returns base + 1"),
        (NulStrippingLedger, "test_any_text_round_trips", "state text round-trips exactly"),
        (RoundingLedger, "test_blast_radius_round_trips", "registered 0.123456789 for 'odd'"),
        (ShortHistoryLedger, "test_head_versions_and_history_agree", "keeps each commit's meta"),
    ],
)
def test_a_broken_ledger_fails_the_check_for_the_rule_it_breaks(tmp_path, ledger_type, check, says):
    with pytest.raises(AssertionError) as info:
        getattr(_suite(ledger_type), check)(tmp_path)
    assert says in str(info.value)


def test_last_writer_wins_is_caught_by_the_thread_race(tmp_path):
    # Without CAS every thread's commit lands, but on top of whatever head it finds,
    # so keys added by the others since its read are lost.
    suite = _suite(NoCASLedger)
    suite.threads, suite.commits_per_thread = 8, 50
    with pytest.raises(AssertionError, match="concurrent commits"):
        suite.test_concurrent_commits_lose_and_duplicate_nothing(tmp_path)


def test_the_suite_has_a_check_for_every_rule_and_each_gets_a_fresh_ledger(tmp_path):
    made: list[MemoryLedger] = []
    closed: list[MemoryLedger] = []

    class Counting(LedgerConformance):
        commits_per_thread = 5

        def make_ledger(self, tmp_path: Path) -> Ledger:
            made.append(MemoryLedger())
            return made[-1]

        def close_ledger(self, ledger: Ledger) -> None:
            closed.append(ledger)

    suite = Counting()
    checks = sorted(name for name in dir(suite) if name.startswith("test_"))
    assert len(checks) >= 14
    for i, name in enumerate(checks):
        getattr(suite, name)(tmp_path / str(i))
    assert len(made) == len(checks) and len({id(led) for led in made}) == len(checks)
    assert closed == made


def test_a_subclass_without_make_ledger_is_told_what_to_define(tmp_path):
    class Forgot(LedgerConformance):
        pass

    with pytest.raises(NotImplementedError, match=r"Forgot\.make_ledger\(self, tmp_path\)"):
        Forgot().test_register_creates_version_one(tmp_path)


def test_the_base_class_is_not_collected_and_is_exported():
    assert "LedgerConformance" in agentdescent.testing.__all__
    assert not LedgerConformance.__name__.startswith("Test")  # pytest collects only Test*


def test_the_suite_imports_without_pytest_and_still_fails_under_python_o():
    # testing.py must import without the dev extras, and its checks must not be
    # asserts that ``python -O`` compiles away.
    script = """
import json, sys
from agentdescent.ledger import MemoryLedger
from agentdescent.testing import LedgerConformance

class Broken(MemoryLedger):
    def commit(self, artifact_id, new_state, base_version, *, meta=None):
        return super().commit(artifact_id, new_state, base_version, meta=meta) - 1

class Suite(LedgerConformance):
    def make_ledger(self, tmp_path):
        return Broken()

try:
    Suite().test_commit_returns_base_plus_one(None)
    outcome = "passed"
except AssertionError as exc:
    outcome = str(exc)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pytest", "_pytest", "hypothesis"))
print(json.dumps({"outcome": outcome, "loaded": loaded}))
"""
    done = subprocess.run(
        [sys.executable, "-O", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["loaded"] == []
    assert "commit returns base + 1" in report["outcome"]
