"""A run's wiring: open it, measure its start, drive a scheduler, record each round, finish.

Both engines run through here, differing only in their scheduler
(`agentdescent.engine.sync_scheduler`, `agentdescent.engine.async_scheduler`): `open_run` builds one
run's environment (`RunEnv`) from a validated `agentdescent.engine.config.RunConfig` — the
train/held-out split, the ledger, the run meter and the budget governor bound to it, the
call runner, the evaluator, the aggregator, the stop rules, the task walk, and the saved
progress of a run it resumes — `drive` measures the starting head and runs the
scheduler until it names a stop reason, and `RunEnv.merge_and_record` merges, records the
round (`agentdescent.engine.recorder.RoundRecorder`) and saves progress in one block of the
ledger's writes. How the run ends and its result is assembled is
`agentdescent.engine.ending`'s.

Where the rules live: the failure rule in `agentdescent.failures` (applied by
`agentdescent.engine.executors.CallRunner`), the stop rules in `agentdescent.engine.stopping`, the worker
step in `agentdescent.engine.worker`, saving and restoring in `agentdescent.engine.progress`.

It must not commit except through the aggregator, print unless asked, read the wall clock
except through the run's clock, or use the global RNG.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..budget.allocator import AllocatorPolicy
from ..budget.governor import BudgetGovernor
from ..errors import BackendFailure, InvalidArgumentType, RunFailed, RunTimeout
from ..fate import FateLog
from ..ledger import Ledger, MemoryLedger, PostgresLedger, SqliteLedger
from ..ledger.dsn import is_dsn
from ..merge.aggregator import Aggregator, AggregatorConfig, Evaluator
from ..merge.demonstrations import demo_slots
from ..merge.relevance import Relevance
from ..merge.staleness import StalenessPolicy
from ..merge.strategies import AppendRules, Strategy
from ..types import MergeOutcome, MergeReport, Task
from ..usage import Usage
from .config import RunConfig, budget_keyword
from .counters import Counters
from .demos import DemoChooser, PromptGuard
from .evaluation import RolloutEvaluator
from .executors import CallRunner, DaemonPool, check_travel, runs_in_process
from .fullscore import confirm_target
from .progress import ProgressStore, capture, restore
from .recorder import RoundRecorder
from .reservations import BudgetGate
from .result import RoundInfo
from .stopping import StopRules
from .testset import Evaluation, score_on
from .why import round_notes
from .worker import FailureBuffer, GroupTracker, TaskWalk

__all__ = ["AggregatorFactory", "RunEnv", "close_run", "drive", "idle_reason", "open_run"]

logger = logging.getLogger("agentdescent.runtime")


class AggregatorFactory(Protocol):
    """Builds the run's merger: ``factory(ledger, evaluator, config, staleness_policy, allocator, *, budget)``.

    Called once per run, from the calling thread, before any work starts. It must return
    an `Aggregator` (a subclass is how to change a step of the pipeline); ``budget`` is the
    run's `agentdescent.BudgetGovernor`, the merge's one budget input, and should be passed
    on. A factory written for the older ``tournament_gate=`` keyword (and no ``budget``) is
    given the governor's ``allow_fusion_tournament`` there instead.
    """

    def __call__(self, ledger: Ledger, evaluator: Evaluator, config: AggregatorConfig,
                 staleness_policy: StalenessPolicy | None, allocator: AllocatorPolicy | None, *,
                 budget: BudgetGovernor) -> Aggregator:
        """Build the aggregator."""
        ...


@dataclass
class RunEnv:
    """One run's parts: what a worker step, a merge and the schedulers need (built by `open_run`).

    Not part of the public API; the schedulers drive it. Every field is a part with its own
    owner module; `RunEnv` only holds them together, and no function writes a part's
    private state.
    """

    config: RunConfig
    train: list[Task]
    held_out: list[Task]
    strategy: Strategy
    propose: Callable[..., str | None]
    usage: Usage
    ledger: Ledger
    owns_ledger: bool
    runner: CallRunner
    owns_executor: bool
    blast_radius: float
    governor: BudgetGovernor
    stops: StopRules
    evaluator: RolloutEvaluator
    aggregator: Aggregator
    cycle: TaskWalk
    progress: ProgressStore
    recorder: RoundRecorder
    counters: Counters
    chooser: DemoChooser | None = None  # what a worker proposes after a rollout (set by open_run)
    guard: PromptGuard | None = None  # keeps held-out and test prompts out of the artifact
    failures: FailureBuffer | None = None  # each worker's latest failures, for reflect_on > 1
    explain_proposal: Callable[..., Any] | None = None  # the agent's, when it says why it proposed nothing
    refusals: FateLog = field(default_factory=FateLog)  # proposals that never became cards, until recorded
    groups: GroupTracker = field(default_factory=GroupTracker)
    initial_reward: float | None = None
    last_reward: float | None = None
    test_initial: Evaluation | None = None  # the starting head on the test set (kept across a resume)
    ran: bool = False  # drive ran the scheduler (False: the call had nothing to run)
    settle_by: float | None = None  # until when the end of the run waits for calls still running
    merge_mark: int = 0  # evaluation tokens in the run meter when the scheduler started

    @property
    def artifact_id(self) -> str:
        """The evolved artifact's id."""
        return self.config.artifact_id

    @property
    def n_workers(self) -> int:
        """Workers of the run."""
        return self.config.schedule.n_workers

    @property
    def self_verify(self) -> bool:
        """Whether workers self-verify their diffs."""
        return self.config.self_verify

    @property
    def allocator(self) -> AllocatorPolicy | None:
        """The run's allocator, if any."""
        return self.config.allocator

    @property
    def history(self) -> list[RoundInfo]:
        """Every round recorded so far (a resumed run's earlier rounds included)."""
        return self.recorder.history

    # ----------------------------------------------------------------- the test set

    def score_test(self, state: Mapping[str, str]) -> Evaluation | None:
        """Score ``state`` on the run's test tasks (phase ``test``), or None without a test set.

        Each task is drawn ``test_repeats`` times, on the run's pool, under the failure rule
        like every call; a task that fails for good leaves the evaluation out (None, with a
        warning), and a run that cannot go on raises as usual.

        Raises:
            RunFailed, RunTimeout, ContractError: as any call of the run.
        """
        tasks = self.config.split.test_tasks
        if not tasks:
            return None
        rendered = self.strategy.render(state)

        def one(task: Task, draw: int) -> tuple[str, Any]:
            return self.runner.solve_and_score(rendered, task, what=f"test draw {draw + 1} of task {task.id!r}",
                                               phase="test")

        try:
            evaluation = score_on(one, list(tasks), self.config.split.test_repeats,
                                  lambda fn, jobs: self.runner.map(fn, jobs, stop_on_failure=True))
        except BackendFailure as exc:
            logger.warning("the test set could not be scored (%s); the result has no test score for it", exc)
            return None
        self.counters.add("test_calls", len(tasks) * self.config.split.test_repeats)
        return evaluation

    # ----------------------------------------------------------------- merging

    def head_reward(self) -> float:
        """The current head's held-out reward, as far as it was measured (no spend).

        Measured on the head where a candidate's evaluation (or the starting sample) scored
        it, inherited from the version it was committed on elsewhere: see
        `agentdescent.merge.scoreboard`. ``RoundInfo.held_out_reward`` reports this.
        """
        return self.aggregator.head_estimate(self.artifact_id).reward

    def measure_initial(self) -> float | None:
        """The starting head's held-out reward, under the failure rule like every evaluation.

        A failed attempt is tried again (only the tasks that failed re-run: the others are
        cached) until ``failure_limit`` evaluation calls in a row have failed; nothing can
        be compared without it, so no work starts before it succeeds.

        A budget spent before it succeeds ends the attempts (the reward stays None; the
        scheduler then admits nothing and stops with ``"max_tokens"``).

        Raises:
            RunFailed: too many evaluation failures in a row.
        """
        while True:
            try:
                self.last_reward = self.aggregator.measure_head(
                    self.artifact_id, self.config.aggregator_config().head_sample).reward
            except BackendFailure:
                if self.governor.over_budget():
                    return self.last_reward
                continue
            if self.initial_reward is None:  # a resumed run keeps its first measurement
                self.initial_reward = self.last_reward
            return self.last_reward

    def merge(self) -> tuple[list[MergeReport], float]:
        """One aggregator step and the head's held-out reward.

        A held-out evaluation that fails (a `BackendFailure`) leaves the cards queued for
        the next merge (scores that succeeded stay cached, so the retry re-runs only what
        failed); the failure rule decides when failures end the run.
        """
        try:
            reports = self.aggregator.step()
            held = self.head_reward()
        except BackendFailure:
            # a spent budget refused the evaluation's calls: the run stops, nothing failed
            self.counters.add("merges_cut_by_budget" if self.governor.over_budget() else "merge_failures")
            return [], self.last_reward if self.last_reward is not None else 0.0
        self.last_reward = held
        return reports, held

    def admission_check(self, admitted: int, projected_tokens: float) -> str | None:
        """Whether more work may start now: the stop reason if not.

        Args:
            admitted: rollouts admitted so far.
            projected_tokens: the expected spend of the work about to start plus the work
                still in flight (a sync round: the mean round so far; an async rollout:
                `step_cost` times the rollouts in flight plus one).
        """
        return self.stops.before_admission(admitted, projected_tokens)

    def step_cost(self) -> float:
        """Mean tokens of one worker step so far (rollout, proposal, self-verify)."""
        steps = self.counters.get("rollouts")
        return self.counters.get("step_tokens") / steps if steps else 0.0

    def merge_cost(self, merged: int) -> float:
        """Mean held-out evaluation tokens per merged rollout since the scheduler started (0.0 before a merge).

        The share of a merge's evaluation each admitted rollout brings: the async admission
        projects it for every rollout admitted and not yet merged.

        Args:
            merged: rollouts the merges have taken in so far.
        """
        if merged <= 0:
            return 0.0
        spent = self.usage.by_phase().get("evaluation", 0) - self.merge_mark
        return max(0, spent) / merged

    def merge_and_record(self, *, rollouts: int, cards: Sequence[Any]) -> RoundInfo:
        """Merge ``cards`` (one aggregator step) and record the round (see `RoundRecorder`).

        The merge's commit and the round's saved progress land in one block of the
        ledger's writes (`agentdescent.ledger.Ledger.atomic`): a process killed between
        them leaves neither, and its resumed run replays the round from the progress
        saved before it. Only in-memory work runs between the commit and the save; the
        user's ``on_round`` and the bar come after the save.

        Raises:
            LedgerBusy: the run's lease was lost (its commit or its save found another
                driver had taken the artifact over); nothing of this round was written.
        """
        for card in cards:
            self.aggregator.ingest(card)
        noise_before = self.aggregator.noise.state
        with self.ledger.atomic():
            reports, held = self.merge()
            for report in reports:
                if report.outcome is MergeOutcome.COMMITTED and report.accepted is not None:
                    self.cycle.note_commit(report.accepted, report.trajectory)
            version = self.aggregator.head_version(self.artifact_id)
            estimate = self.aggregator.head_estimate(self.artifact_id)  # no spend: what is known of the head
            share = estimate.measured / estimate.tasks if estimate.tasks else None
            info = self.recorder.record(reports, held, rollouts=rollouts, cards=len(cards), head_version=version,
                                        measured_share=share, notes=round_notes(
                                            noise_before, self.aggregator.noise.state, self.aggregator.noise.stats(),
                                            self.cycle.stats(), held))
            self.save_progress(version)
        if confirm_target(self, info):
            self.save_progress(info.head_version)
        self.recorder.announce(info)
        return info

    def save_progress(self, head_version: int | None = None) -> None:
        """Save the run's progress in its ledger (see `agentdescent.engine.progress`).

        Args:
            head_version: the head the progress is saved at (a merge passes the version its
                one read of the head found); None reads it.
        """
        if self.progress.enabled:
            version = head_version if head_version is not None else self.ledger.head(self.artifact_id)[0]
            self.progress.save(capture(self, version), self.history)


def _open_ledger(ledger: Any, run_id: str | None = None) -> tuple[Ledger, bool]:
    if ledger is None:
        return MemoryLedger(), True
    if is_dsn(ledger):
        return PostgresLedger(ledger, run_id=run_id), True
    if isinstance(ledger, (str, os.PathLike)):
        return SqliteLedger(ledger, run_id=run_id), True
    return ledger, False


def open_run(config: RunConfig, *, unit: str = "round", pool_threads: int | None = None) -> RunEnv:
    """Build the run from a validated ``config`` (its ledger, meter, runner, evaluator, aggregator).

    Close it with `close_run` (the engines do, in a ``finally``).

    Args:
        config: the run's configuration (validated when it was built).
        unit: ``"round"`` (sync) or ``"sweep"`` (async), for logs and the bar.
        pool_threads: threads of the default call pool, or of the driver threads that wait on
            another executor (None: ``max_concurrency``, or ``n_workers`` for another executor).

    Raises:
        ContractError: a callable or a task that must travel to the executor does not pickle.
        InvalidArgumentType: the aggregator factory returned something else than an `Aggregator`.
        LedgerError: the ledger cannot be opened.
    """
    executor = config.executor
    remote = executor is not None and not runs_in_process(executor)
    if remote:
        check_travel(config.travelling(), config.tasks, executor)  # before anything is opened or submitted
    strategy = config.strategy if config.strategy is not None else AppendRules()
    train, held_out = config.split.split(config.tasks, config.seed)
    cheap_tasks = config.split.cheap_subset(held_out, config.seed)

    led, owns_ledger = _open_ledger(config.ledger, config.run_id)
    try:
        state0 = dict(config.initial_state) if config.initial_state is not None else strategy.initial()
        led.register(config.artifact_id, state0, config.blast_radius)
        stored_blast = led.blast_radius(config.artifact_id)  # a resumed artifact keeps its own
        # A ledger the run made for itself (ledger=None) dies with it: nothing could resume.
        progress = ProgressStore(led, config.artifact_id, enabled=config.resume and config.ledger is not None)
        saved = progress.load()
    except BaseException:
        if owns_ledger:
            led.close()
        raise
    usage = saved.usage if saved is not None else Usage()
    meters = (usage,) if config.usage is None else (usage, config.usage)
    governor = BudgetGovernor(max_tokens=config.limits.max_tokens, allocator=config.allocator,
                              stop_on_diminishing=config.limits.stop_on_diminishing_returns)
    outside_budget = () if config.limits.test_in_budget else ("test",)
    governor.bind(usage, exclude_phases=outside_budget)
    clock = config.clock
    stops = StopRules(config.limits, config.schedule.n_workers, governor, clock)
    owns_executor = executor is None
    if executor is None:
        executor = DaemonPool(pool_threads or config.schedule.max_concurrency)
    counters = Counters()
    runner = CallRunner(
        executor=executor, remote=remote,
        pool=DaemonPool(pool_threads or config.schedule.n_workers, name="agentdescent-driver") if remote else executor,
        solve=config.solve_fn, reward=config.reward, meters=meters, counters=counters, clock=clock,
        deadline=stops.hard_deadline(), call_attempts=config.retry.call_attempts,
        failure_limit=config.retry.failure_limit, max_seconds=config.limits.max_seconds,
        grace_seconds=config.limits.grace_seconds,
        budget_spent=None if governor.max_tokens is None else (
            lambda phase: phase not in outside_budget and governor.over_budget()),
        call_cache=config.call_cache,
        gate=None if governor.max_tokens is None else BudgetGate(
            lambda: governor.spent, governor.max_tokens, lambda phase: phase not in outside_budget),
    )
    evaluator = RolloutEvaluator(runner, strategy, counters, held_out, cheap_tasks)
    factory = config.aggregator_factory if config.aggregator_factory is not None else Aggregator
    agg_config = config.aggregator_config()
    aggregator = factory(led, evaluator, agg_config, config.staleness_policy, config.allocator,
                         **budget_keyword(factory, governor))
    if not isinstance(aggregator, Aggregator):
        runner.close()
        if owns_ledger:
            led.close()
        raise InvalidArgumentType(
            f"aggregator_factory returned a {type(aggregator).__name__}; it must return an "
            "agentdescent.Aggregator (subclass it to change a step of the pipeline)"
        )
    refusals = FateLog()
    recorder = RoundRecorder(usage, counters, governor, config.on_round, unit,
                             saved.rounds if saved is not None else (), clock=clock, refusals=refusals)
    env = RunEnv(
        config=config, train=train, held_out=held_out, strategy=strategy, propose=config.propose_fn,
        usage=usage, ledger=led, owns_ledger=owns_ledger, runner=runner, owns_executor=owns_executor,
        blast_radius=stored_blast, governor=governor, stops=stops, evaluator=evaluator,
        aggregator=aggregator, progress=progress, recorder=recorder,
        cycle=TaskWalk(train, config.seed, relevance=Relevance(train, agg_config.group_key, agg_config.relevance)),
        counters=counters,
        chooser=DemoChooser(config.proposal, strategy, config.reward, config.seed),
        guard=PromptGuard([*held_out, *(config.split.test_tasks or ())]) if demo_slots(strategy) else None,
        failures=FailureBuffer.for_agent(config.agent), explain_proposal=config.explain_fn,
        refusals=refusals,
    )
    if saved is not None:
        version, state = led.head(config.artifact_id)
        head_scores = restore(env, saved, {t.id: t for t in config.tasks}, version)
        recorder.rebase()  # the restored counters are not this run's first round
        if head_scores:
            indices = sorted(head_scores)
            evaluator.remember(state, [held_out[i] for i in indices], [head_scores[i] for i in indices])
        logger.info("resuming run %r after %d round(s): %d token(s) already spent",
                    config.artifact_id, len(saved.rounds), usage.total_tokens)
    return env


def close_run(env: RunEnv) -> None:
    """Release what the run opened itself: its pools (running calls are abandoned), its lease, its ledger, its bar.

    Calls still waited for on another executor are cancelled there by their waiting
    threads; the caller's executor itself is left open.
    """
    runner = env.runner
    runner.close()
    if env.owns_executor:
        runner.executor.shutdown(wait=False, cancel_futures=True)
    if runner.pool is not runner.executor:
        runner.pool.shutdown(wait=False, cancel_futures=True)
    env.progress.close()  # the run's lease on the artifact, also on a ledger you passed (it stays open)
    if env.owns_ledger:
        env.ledger.close()
    env.recorder.close()


def drive(env: RunEnv, scheduler: Callable[[], str], *, idle: str | None = None) -> tuple[str, str | None]:
    """Measure the starting head, run ``scheduler`` until it returns a stop reason, map the ends.

    Both runtimes run through here, so a time stop and a failed run end the same way:
    a `RunTimeout` is ``("max_seconds", None)``, a `RunFailed` is ``("error", message)``.
    Contract errors, a lost lease (`LedgerBusy`: another driver took the artifact over, so
    this one must write nothing more; docs/ledger.md says why it is raised, not returned)
    and ``KeyboardInterrupt`` propagate, and nothing waits for the calls still running.
    However it ends, the run's work is over then (`CallRunner.end_work`): no call still
    running makes a new attempt, and no worker starts a call.

    Args:
        env: the run.
        scheduler: runs the run's work and returns its stop reason.
        idle: the stop reason of a call that has nothing to run (``rounds=0``,
            ``max_rollouts=0``): nothing is measured or called, the result is the saved run's.

    Returns:
        ``(stop_reason, error)``.
    """
    if idle is not None:
        logger.info("nothing to run (%s); the result is the saved run's", idle)
        return idle, None
    env.ran = True
    interrupted = False
    try:
        env.measure_initial()
        if env.config.split.test_tasks and env.test_initial is None:
            env.test_initial = env.score_test(env.ledger.head(env.artifact_id)[1])
        env.merge_mark = env.usage.by_phase().get("evaluation", 0)
        return scheduler(), None
    except RunTimeout as exc:
        logger.warning("%s; stopping", exc)
        return "max_seconds", None
    except RunFailed as exc:
        unit = env.recorder.unit
        where = f"{unit} {len(env.history) + 1}" if env.initial_reward is not None else "the first evaluation"
        logger.error("the run cannot go on (%s): %s", where, exc)
        return "error", f"{where}: {exc}"
    except BaseException:
        interrupted = True  # Ctrl-C: nothing waits
        raise
    finally:
        env.runner.end_work()
        now = env.stops.clock.now()
        hard = env.stops.hard_deadline()
        env.settle_by = now if interrupted else min(now + env.config.limits.grace_seconds,
                                                    hard if hard is not None else math.inf)


def idle_reason(limits: Any, *, sync: bool) -> str | None:
    """The stop reason of a call with nothing to run (``rounds=0`` for `evolve`, ``max_rollouts=0``), or None."""
    if sync and limits.rounds == 0:
        return "rounds"
    if limits.max_rollouts == 0:
        return "max_rollouts"
    return None
