"""A run's saved progress: what is saved after every round, how a run resumes from it, and the one reader.

This module owns the format of a run's progress in its ledger (``agentdescent-run-state/1``:
one JSON object per run, keyed by the artifact id, and the rounds stored apart so a save
writes only what is new), `ProgressStore` (saving it after every round, and loading it
when a run opens), `capture`/`restore` (what of a run's parts goes in and comes back),
and `read_progress`: the one public reader of saved progress, which the command line uses
instead of reaching into the format. It refuses progress it cannot resume from as is
(`RunStateDamaged`): the rounds must be exactly 1..N, N as the state recorded it
(``round_count``), so a lost round row is never reused by the next round.

What is saved: every `agentdescent.engine.result.RoundInfo`, the run meter, the first and last
held-out rewards, the stop rules' best and patience count, the task walk, the governor's
and the allocator's learned state, the counters, the evidence pool, the advantage
groups, and the head's per-task held-out scores (so a resumed run does not pay to
evaluate its head again). It must not decide anything about the run.

Who a run is: one (ledger, artifact) pair is driven by one driver, held by the ledger's
lease (`agentdescent.ledger.lease`), which `ProgressStore.load` takes and every save
renews. Drivers that share an artifact each give the ledger their own run id
(``SqliteLedger(path, run_id=...)``); each then saves under ``ARTIFACT@RUN_ID``
(`progress_key`), and `read_all_progress` lists them all. A commit made after the last
save (the driver died between its commit and its save) is adopted on reading: one round
per such version, counted in ``orphan_commits_adopted`` (see `read_progress`). The
engines save a round inside the same `agentdescent.ledger.Ledger.atomic` block as its
commit, so on a ledger that groups its writes (`agentdescent.ledger.SqliteLedger`) there
is nothing to adopt: a kill between them leaves neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import LedgerError, RunStateDamaged
from ..ledger import Ledger
from ..types import number_spans
from ..usage import Usage
from .result import RoundInfo
from .testset import Evaluation

__all__ = ["RUN_STATE_FORMAT", "ProgressStore", "SavedProgress", "capture", "progress_key", "read_all_progress",
           "read_progress", "restore"]

#: The format marker of a run's saved progress.
RUN_STATE_FORMAT = "agentdescent-run-state/1"


@dataclass
class SavedProgress:
    """A run's progress as its ledger holds it (what `read_progress` returns).

    Args:
        rounds: every round recorded, in order.
        usage: the run meter's counts at the last save.
        initial_reward: the starting head's held-out reward.
        last_reward: the head's held-out reward at the last save.
        head_version: the head version the saved scores belong to.
        state: everything else the run saved (its parts' own state, by name).
        adopted: rounds added on reading for commits made after the last save (their
            versions), each with ``committed=1`` and no tokens (see `read_progress`).
    """

    rounds: list[RoundInfo]
    usage: Usage
    initial_reward: float | None
    last_reward: float | None
    head_version: int | None
    state: dict[str, Any] = field(default_factory=dict)
    adopted: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        """Tokens the run has spent."""
        return self.usage.total_tokens

    @property
    def calls(self) -> int:
        """Model calls the run has made."""
        return self.usage.calls

    @property
    def commits(self) -> int:
        """Commits over the saved rounds."""
        return sum(r.committed for r in self.rounds)


def _parse(saved: Mapping[str, Any], run_id: str) -> SavedProgress:
    try:
        head = saved.get("head") or {}
        return SavedProgress(
            rounds=[RoundInfo.from_json(h) for h in saved["history"]],
            usage=Usage.from_json(saved["usage"]),
            initial_reward=saved.get("initial_reward"),
            last_reward=saved.get("last_reward"),
            head_version=head.get("version"),
            state=dict(saved),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RunStateDamaged(
            f"the saved progress of run {run_id!r} is damaged ({type(exc).__name__}: {exc}); "
            "start the run over with resume=False, or restore the ledger from a backup",
            problems=(f"run {run_id!r}: {type(exc).__name__}: {exc}",),
        ) from None


def _check_rounds(saved: Mapping[str, Any], run_id: str, path: str | None) -> None:
    """Refuse saved progress whose rounds are not exactly 1..N (N as the state recorded it).

    A round row lost from the ledger would otherwise let the next round take its number
    and overwrite another round's record, and the counters would not add up.
    """
    history = saved.get("history")
    if not isinstance(history, list):
        return  # _parse reports it
    indices = [h.get("index") if isinstance(h, Mapping) else None for h in history]
    if any(isinstance(i, bool) or not isinstance(i, int) for i in indices):
        return  # _parse reports it
    recorded = saved.get("round_count")
    count = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else max(indices, default=0)
    if indices == list(range(1, count + 1)):
        return
    missing = sorted(set(range(1, count + 1)) - set(indices))
    said = f"the state records {count}" if recorded is not None else f"the last is round {count}"
    what = []
    if missing:
        what.append(f"round(s) {number_spans(missing)} missing (stored: {number_spans(indices)}; {said})")
    extra = sorted(i for i in indices if not 1 <= i <= count)
    if extra:
        what.append(f"round(s) {number_spans(extra)} stored beyond the {count} the state records")
    if len(set(indices)) < len(indices):
        what.append("a round is stored twice")
    where = f"ledger file {path!r}: " if path is not None else ""
    raise RunStateDamaged(
        f"{where}the saved progress of run {run_id!r} is damaged: {'; '.join(what)}. The run cannot "
        "resume as is: its next round would take the number of a missing one and overwrite "
        "another round's record, and its counters would not add up. The artifact's versions "
        "are intact: start over with resume=False (a new run on the same head, its counters "
        "from zero; it saves no progress of its own), or use a new ledger, or restore the "
        "ledger from a backup",
        path=path,
        problems=tuple(f"run {run_id!r}: {w}" for w in what),
    )


def progress_key(artifact_id: str, driver: str | None = None) -> str:
    """The run-state key a driver saves under: the artifact id, or ``ARTIFACT@DRIVER`` for a sharing driver."""
    return artifact_id if driver is None else f"{artifact_id}@{driver}"


def _adopt(ledger: Ledger, artifact_id: str, driver: str | None, progress: SavedProgress) -> None:
    """Add one round per commit of this driver above the saved head (made after the last save)."""
    saved_head = progress.head_version
    if not isinstance(saved_head, int) or isinstance(saved_head, bool):
        return
    head = ledger.versions().get(artifact_id)
    if head is None or head <= saved_head:
        return  # the common case: nothing was committed after the save, no history read
    holders = progress.state.get("holders")
    mine = set(holders) if isinstance(holders, list) else None  # the processes that drove this record
    orphans = [e for e in ledger.history(artifact_id) if e.version > saved_head and "diff_id" in e.meta
               and e.meta.get("driver") == driver
               and (mine is None or "holder" not in e.meta or e.meta["holder"] in mine)]
    reward = progress.last_reward if progress.last_reward is not None else (
        progress.rounds[-1].held_out_reward if progress.rounds else 0.0)
    for entry in orphans:
        progress.rounds.append(RoundInfo(index=len(progress.rounds) + 1, held_out_reward=float(reward), committed=1,
                                         fused=int(bool(entry.meta.get("fused"))), head_version=entry.version))
        progress.adopted.append(entry.version)
    if orphans:
        counters = dict(progress.state.get("counters") or {})
        counters["orphan_commits_adopted"] = int(counters.get("orphan_commits_adopted", 0)) + len(orphans)
        progress.state["counters"] = counters


def read_progress(ledger: Ledger, run_id: str, *, driver: str | None = None) -> SavedProgress | None:
    """The progress a run saved in ``ledger`` (its id is the artifact id), or None if none.

    Commits the driver made after its last save (it was killed between a commit and the
    save) are adopted: each version above the head the save recorded whose audit record
    is the engine's (it has a ``diff_id``) and the driver's (``"driver"`` is ``driver``,
    absent for an unshared one; ``"holder"``, when there, one of the processes that drove
    the record, so a ``resume=False`` run's commits are never taken for its own) becomes one more round (``committed=1``, no tokens: what
    that round spent was never saved; its held-out reward repeats the last saved one), and
    ``orphan_commits_adopted`` in the counters counts them. So the rounds' commits equal the
    ledger's. A resumed run continues after them.

    Args:
        ledger: the ledger.
        run_id: the artifact id.
        driver: the sharing driver's run id (``SqliteLedger(run_id=...)``), None for an
            unshared driver's record.

    Raises:
        RunStateDamaged: the saved progress is damaged: a saved round is missing (a gap in
            the round numbers, or fewer rounds than the state recorded), or the ledger
            found rounds without their state.
        LedgerError: the saved progress is of an unknown format.
    """
    artifact_id, run_id = run_id, progress_key(run_id, driver)
    saved = ledger.load_run_state(run_id)
    if saved is None:
        return None
    if saved.get("format") != RUN_STATE_FORMAT:
        raise LedgerError(
            f"the saved progress of run {run_id!r} has format {saved.get('format')!r}, not "
            f"{RUN_STATE_FORMAT!r}: it was written by another version; start over with resume=False"
        )
    path = getattr(ledger, "path", None)
    _check_rounds(saved, run_id, str(path) if path is not None else None)
    progress = _parse(saved, run_id)
    _adopt(ledger, artifact_id, driver, progress)
    return progress


def read_all_progress(ledger: Ledger, artifact_id: str) -> dict[str | None, SavedProgress]:
    """Every driver's saved progress on ``artifact_id``: None for the unshared record, else each run id.

    Sum ``tokens``, ``commits`` or ``len(rounds)`` over the values for the artifact's whole
    spend. A ledger that cannot list its saved runs (``saved_runs``) gives the unshared
    record only.

    Raises:
        RunStateDamaged, LedgerError: as `read_progress`, for any of them.
    """
    out: dict[str | None, SavedProgress] = {}
    own = read_progress(ledger, artifact_id)
    if own is not None:
        out[None] = own
    listing = getattr(ledger, "saved_runs", None)
    prefix = f"{artifact_id}@"
    for key in (listing() if callable(listing) else []):
        if key.startswith(prefix):
            found = read_progress(ledger, artifact_id, driver=key[len(prefix):])
            if found is not None:
                out[key[len(prefix):]] = found
    return out


class ProgressStore:
    """Saves one run's progress in its ledger after every round, writing only what is new.

    It also holds the run's lease on the artifact, on a ledger that has one
    (`agentdescent.ledger.SqliteLedger`): taken by `load` (a second unshared driver is
    refused with `LedgerBusy` before anything is read), renewed at every save, released by
    `close` or when the ledger closes. The driver is the ledger's ``run_id`` (None:
    unshared); a sharing driver's progress is saved under ``ARTIFACT@RUN_ID``.

    Args:
        ledger: the run's ledger (one without the run-state pair keeps nothing).
        run_id: the run's id (the artifact id).
        enabled: False for a run nothing could resume (its own in-memory ledger).
    """

    def __init__(self, ledger: Ledger, run_id: str, enabled: bool) -> None:
        self.ledger = ledger
        self.artifact_id = run_id
        driver = getattr(ledger, "run_id", None)
        self.driver: str | None = driver if isinstance(driver, str) else None
        self.run_id = progress_key(run_id, self.driver)
        self.enabled = enabled
        self._rounds_saved = 0
        self._holders: list[str] = []  # the processes that drove this record (their commits are signed)

    def _lease(self, member: str) -> None:
        method = getattr(self.ledger, member, None)
        if callable(method):
            method(self.artifact_id)

    def load(self) -> SavedProgress | None:
        """Take the run's lease, then return its saved progress, or None (nothing saved, or saving is off).

        Raises:
            LedgerBusy: another live driver holds the artifact (see `ProgressStore`).
            RunStateDamaged, LedgerError: as `read_progress`.
        """
        self._lease("acquire_lease")
        if not self.enabled:
            return None
        saved = read_progress(self.ledger, self.artifact_id, driver=self.driver)
        holder = getattr(self.ledger, "holder", None)
        if saved is not None:
            self._rounds_saved = len(saved.rounds) - len(saved.adopted)  # adopted rounds are not stored yet
            known = saved.state.get("holders")
            self._holders = [h for h in known if isinstance(h, str)] if isinstance(known, list) else []
            if isinstance(holder, str) and holder not in self._holders:
                # This process joins the record's drivers now, so a commit of its first round
                # is adopted too if it dies before that round's save.
                self._holders.append(holder)
                stored = self.ledger.load_run_state(self.run_id) or {}
                stored.pop("history", None)
                self.ledger.save_run_state(self.run_id, {**stored, "holders": self._holders}, [])
        else:
            # A start record (no rounds, the head the run starts on), so that a commit of its
            # first round is adopted too if the run dies before that round's save.
            self._holders = [holder] if isinstance(holder, str) else []
            self.ledger.save_run_state(self.run_id, {
                "format": RUN_STATE_FORMAT, "usage": Usage().to_json(), "initial_reward": None,
                "last_reward": None, "head": {"version": self.ledger.head(self.artifact_id)[0]},
                "holders": self._holders, "round_count": 0})
        return saved

    def close(self) -> None:
        """Release the run's lease (the ledger's ``close`` releases it too)."""
        self._lease("release_lease")

    def save(self, state: Mapping[str, Any], history: list[RoundInfo]) -> None:
        """Save ``state`` and the rounds of ``history`` not saved yet (and the last saved one again:
        the run's end adds the tokens of work abandoned at the stop to the last round).

        The lease is renewed in the same block of writes as the save, so a driver whose lease
        was taken over never saves over the taker's progress.

        Raises:
            LedgerBusy: the run's lease was lost (another driver took it over, and may have
                released it since); nothing was saved.
        """
        with self.ledger.atomic():
            self._lease("renew_lease")
            if not self.enabled:
                return
            new_rounds = [h.to_json() for h in history[max(0, self._rounds_saved - 1):]]
            # round_count lets a load tell a lost last round from a run that did not get further.
            self.ledger.save_run_state(self.run_id, {"format": RUN_STATE_FORMAT, **state, "holders": self._holders,
                                                     "round_count": len(history)}, new_rounds)
        self._rounds_saved = len(history)


class RunParts(Protocol):
    """What of a run `capture` saves and `restore` puts back (the run's environment provides it)."""

    usage: Usage
    initial_reward: float | None
    last_reward: float | None
    stops: Any
    cycle: Any
    governor: Any
    allocator: Any
    counters: Any
    aggregator: Any
    groups: Any
    artifact_id: str
    held_out: list[Any]
    test_initial: Any  # an agentdescent.engine.testset.Evaluation, or None


def capture(run: RunParts, head_version: int) -> dict[str, Any]:
    """The JSON-ready state of ``run``'s parts (everything but the rounds)."""
    return {
        "usage": run.usage.to_json(),
        "initial_reward": run.initial_reward,
        "last_reward": run.last_reward,
        "stop": run.stops.state_dict(),
        "cycle": run.cycle.state_dict(),
        "governor": run.governor.state_dict(),
        "allocator": run.allocator.state_dict() if run.allocator is not None else None,
        "counters": run.counters.as_dict(),
        "merge_counters": dict(run.aggregator.counters),
        "eta_histogram": {str(k): v for k, v in run.aggregator.eta_histogram.items()},
        "pool": run.aggregator.pool_state(),
        "groups": run.groups.state_dict(),
        "head": {"version": head_version, "held_out": [t.id for t in run.held_out],
                 "scores": run.aggregator.head_state_dict(run.artifact_id, head_version)},
        "noise": run.aggregator.noise.stats(),
        "memory": run.aggregator.memory_state_dict(),
        "test_initial": run.test_initial.to_json() if run.test_initial is not None else None,
    }


def restore(run: RunParts, saved: SavedProgress, tasks: Mapping[str, Any], head_version: int) -> dict[int, float] | None:
    """Put ``saved`` back into ``run``'s parts; return the head's measured held-out scores if still valid.

    The scores come back only when they belong to the current head version and the same
    held-out tasks (the aggregator's scoreboard gets them back here; the caller seeds the
    evaluator's cache with the measured ones).
    """
    state = saved.state
    run.counters.update(state.get("counters", {}))
    # Rollouts the stopped process finished and never merged (in flight at its last save) are
    # in its counters but in no saved round: count them as cut off, so the totals add up.
    cut_off = (run.counters.get("rollouts") - sum(r.rollouts for r in saved.rounds)
               - run.counters.get("rollouts_cut_off"))  # those of an earlier resume are counted already
    if cut_off > 0:
        run.counters.add("rollouts_cut_off", cut_off)
    run.aggregator.counters.update(state.get("merge_counters", {}))
    run.aggregator.eta_histogram.update({int(k): int(v) for k, v in state.get("eta_histogram", {}).items()})
    run.aggregator.restore_pool(state.get("pool", []), tasks)
    run.groups.load_state_dict(state.get("groups", {}))
    run.initial_reward, run.last_reward = saved.initial_reward, saved.last_reward
    run.stops.load_state_dict(state.get("stop") or {})
    if state.get("cycle"):
        run.cycle.load_state_dict(state["cycle"])
    run.governor.load_state_dict(state.get("governor") or {})
    if run.allocator is not None and state.get("allocator") is not None:
        run.allocator.load_state_dict(state["allocator"])
    if state.get("noise"):
        run.aggregator.noise.load_state_dict(state["noise"])
    if state.get("memory"):
        run.aggregator.load_memory_state_dict(state["memory"], tasks)
    if state.get("test_initial"):
        run.test_initial = Evaluation.from_json(state["test_initial"])
    head = state.get("head") or {}
    scores = head.get("scores")
    if (isinstance(scores, Mapping) and head.get("version") == head_version
            and head.get("held_out") == [t.id for t in run.held_out]):
        run.aggregator.load_head_state_dict(run.artifact_id, head_version, scores)
        return {int(i): float(s) for i, s in scores.get("measured", {}).items()}
    return None
