"""A run's configuration: every knob of `evolve` and `async_evolve`, declared, defaulted and documented once.

This module owns `RunConfig`, composed of four knob families — `Split`, `Limits`, `Retry`
and `Schedule`, in `agentdescent.engine.families` and re-exported here — each a small
frozen value that validates itself when it is built, so a bad knob raises an
`agentdescent.errors.InvalidArgument` naming it before anything runs. The engines'
keyword arguments are these fields: `RunConfig.from_keywords` routes each flat keyword
(``rounds=``, ``held_out_frac=``...) to its family, and `engine_signature` writes the
engines' signatures from the same fields, so a default lives in exactly one place.

It must not open a ledger, start a thread or call anything the user passed, but for one
reading of the clock (`agentdescent.clock.as_clock` refuses a clock that does not tell the time
before the run starts).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import difflib
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..budget.allocator import AllocatorPolicy
from ..clock import Clock, as_clock
from ..errors import GovernanceError, InvalidArgument, InvalidArgumentType
from ..ledger import Ledger
from ..merge.aggregator import AggregatorConfig
from ..merge.demonstrations import demo_slots
from ..merge.governance import ArtifactInfo, Layer, classify
from ..merge.staleness import StalenessPolicy, get_policy
from ..merge.strategies import Strategy
from ..model import Agent
from ..seams import adopt, unwrap
from ..types import Task
from ..usage import Usage
from ..validation import (
    check_bool,
    check_callable,
    check_fraction,
    check_text,
    is_int,
)
from .demos import check_proposal_rule
from .families import (
    _ASYNC,
    ASYNC_DEFAULTS,
    ASYNC_ENGINE,
    FAMILIES,
    MAX_WORKERS,
    SYNC_ENGINE,
    Limits,
    Retry,
    Schedule,
    Split,
)

__all__ = [
    "ASYNC_DEFAULTS",
    "ASYNC_ENGINE",
    "MAX_WORKERS",
    "SYNC_ENGINE",
    "Limits",
    "Retry",
    "RunConfig",
    "Schedule",
    "Split",
    "budget_keyword",
    "engine_signature",
]

@dataclass(frozen=True)
class RunConfig:
    """Everything one run is told: what to evolve, on what, how, and the four knob families.

    Built by the engines from their keywords (`from_keywords`), or by hand and passed as
    ``evolve(tasks, reward, config=...)``. Building one validates every knob (and adopts
    duck-typed seams: an allocator with ``decide``/``observe``, an agent with
    ``solve``/``propose``), so a bad one raises before anything runs.

    Args:
        tasks: at least 4 tasks with unique ids; split into train and held-out by ``split``.
        reward: ``reward(task, output) -> float | Score`` in [0, 1] (`agentdescent.Score`:
            a float with feedback, which reaches the proposer).
        agent: an object with ``solve(rendered, task)`` and ``propose(rendered, task,
            output, reward)`` (alternative to ``run``/``propose``); its meter, if any, is
            forwarded into the run's. With ``run`` too, the agent only proposes and ``run``
            solves (a code suite: `agentdescent.code.TestSuite`); a strategy that names the
            proposals it reads (``proposal_mode``, ``"edit"`` for `agentdescent.code.FileTree`)
            refuses an agent in another mode.
        run: ``run(rendered, task) -> str``.
        propose: ``propose(rendered, task, output, reward) -> str | None``.
        strategy: what the artifact is (default `agentdescent.merge.strategies.AppendRules`).
        initial_state: the starting state (default ``strategy.initial()``); ignored when
            the ledger already holds the artifact (resume).
        blast_radius: in [0, 1]; above 0.30 the artifact is slow (L1, oracle-gated).
        artifact_id: the artifact's id in the ledger (reserved ids, and ids holding a
            control character, are refused).
        seed: seeds the task order, the split, the cheap subset and every decision's order.
        self_verify: re-run the proposing task on the patched artifact before merging.
        proposal: what workers propose (`agentdescent.engine.demos`): ``"auto"`` (the
            default: with a strategy that holds demonstration slots, such as
            `agentdescent.RulesAndDemos`, train tasks become demonstrations while slots are
            open, then swaps alternate with the agent's proposals; otherwise the agent's
            proposals only), ``"model"`` (the agent's rules, rewrites or edits only),
            ``"labeled"``, ``"bootstrapped"`` or ``"demos"`` (demonstrations only).
        call_cache: an on-disk cache of model calls (`agentdescent.CallCache` or a folder
            path): temperature-0 calls already made are served from disk, charged 0 tokens
            and counted in ``result.counters["cache_hits"]``. None: no cache.
        staleness_policy: a `agentdescent.merge.staleness.StalenessPolicy` or its name (default
            ``"guarded"``).
        agg_config: aggregator knobs (`agentdescent.merge.aggregator.AggregatorConfig`).
        aggregator_factory: builds the aggregator (see `agentdescent.engine.runtime.AggregatorFactory`).
        fusion_tournament: overrides ``agg_config.fusion_tournament``.
        allocator: a learning allocator the budget governor consults (an
            `agentdescent.budget.allocator.AllocatorPolicy`, or any object with ``decide`` and
            ``observe``).
        ledger: a path (a `agentdescent.ledger.SqliteLedger`, resumed if it holds this
            run: see ``resume``), a ``postgresql://`` DSN (a `agentdescent.ledger.PostgresLedger`
            in its default schema, resumed alike; the password from ``PGPASSWORD`` or a
            ``PGPASSFILE``), a `agentdescent.ledger.Ledger`, or None (in memory).
        usage: a meter that also receives every token the run records (``result.usage``
            is the run's own meter, counting this run only).
        executor: a ``concurrent.futures.Executor`` for the run's calls (default: a pool of
            daemon threads): a thread pool, a ``ProcessPoolExecutor``, or Dask's
            ``Client(...).get_executor()``. On anything but a thread pool the callables
            and the tasks are pickled first: what does not pickle is a `ContractError`.
        on_round: called with each `agentdescent.engine.result.RoundInfo`.
        progress: show a progress bar.
        clock: the time source for every deadline and wait (default real time;
            `agentdescent.testing.ManualClock` in tests): a `agentdescent.clock.Clock`, or a
            ``() -> float`` function of real-time seconds. It is read once here: one whose
            ``now()`` is not a finite real number is refused.
        resume: on a ledger that holds this run's saved progress, continue it (round
            numbering, spend, history, counters, stop-rule, allocator and task-order
            state); False starts the counters over on the same artifact head.
        run_id: this driver's run id, to share the artifact with other drivers on one
            ledger file (each with its own): the run keeps its own progress and signs its
            commits (see `agentdescent.ledger.SqliteLedger`'s ``run_id``). None (the
            default): the run holds the artifact alone, and a second unshared run on it
            while this one runs is refused with `agentdescent.errors.LedgerBusy`.
        split: how the tasks split (`Split`; its fields are also keywords of the engines).
        limits: when the run stops (`Limits`; likewise).
        retry: how failures are retried (`Retry`; likewise).
        schedule: how work is scheduled (`Schedule`; likewise).

    Raises:
        InvalidArgument: a bad knob (named, with the accepted values).
        InvalidArgumentType: a knob or callable of the wrong type or shape.
        GovernanceError: a reserved (frozen) artifact id.
    """

    tasks: Sequence[Task]
    reward: Callable[[Task, str], Any]
    agent: Any = None
    run: Callable[[str, Task], str] | None = None
    propose: Callable[..., str | None] | None = None
    strategy: Strategy | None = None
    initial_state: Mapping[str, str] | None = None
    blast_radius: float = 0.2
    artifact_id: str = "artifact"
    seed: int = 0
    self_verify: bool = True
    proposal: str = "auto"
    call_cache: Any = None
    staleness_policy: StalenessPolicy | str | None = None
    agg_config: AggregatorConfig | None = None
    aggregator_factory: Callable[..., Any] | None = None
    fusion_tournament: bool | None = None
    allocator: Any = None
    ledger: Ledger | str | os.PathLike[str] | None = None
    usage: Usage | None = None
    executor: concurrent.futures.Executor | None = None
    on_round: Callable[..., None] | None = None
    progress: bool = False
    clock: Clock | Callable[[], float] | None = None
    resume: bool = True
    run_id: str | None = None
    split: Split = field(default_factory=Split)
    limits: Limits = field(default_factory=Limits)
    retry: Retry = field(default_factory=Retry)
    schedule: Schedule = field(default_factory=Schedule)

    def _check_run_id(self) -> None:
        if self.run_id is None:
            return
        if not isinstance(self.run_id, str) or not self.run_id.strip():
            raise InvalidArgument(f"run_id={self.run_id!r}: give a non-empty str naming this driver (e.g. "
                                  "'driver-1'), or None for a run that holds the artifact alone")
        if self.ledger is None:
            raise InvalidArgument(f"run_id={self.run_id!r} shares a ledger file, but ledger=None is the run's own "
                                  "in-memory ledger; pass ledger=PATH, or drop run_id")
        if not isinstance(self.ledger, (str, os.PathLike)) and getattr(self.ledger, "run_id", None) != self.run_id:
            raise InvalidArgument(
                f"run_id={self.run_id!r} with a ledger object whose run id is "
                f"{getattr(self.ledger, 'run_id', None)!r}: pass ledger=PATH with run_id, or give the run id to "
                f"the ledger itself (SqliteLedger(path, run_id={self.run_id!r}) or PostgresLedger(dsn, "
                f"run_id={self.run_id!r})) and leave run_id out")

    def __post_init__(self) -> None:
        tasks = self.tasks
        if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Sequence):
            raise InvalidArgumentType(f"tasks must be a sequence of Task, got {type(tasks).__name__}")
        bad = [t for t in tasks if not isinstance(t, Task)]
        if bad:
            raise InvalidArgumentType(
                f"tasks must all be agentdescent.Task; got {type(bad[0]).__name__} ({bad[0]!r:.60})"
            )
        if len(tasks) < 4:
            raise InvalidArgument(f"tasks has {len(tasks)} task(s): give at least 4 (some train, some held out)")
        seen: set[str] = set()
        for t in tasks:
            if t.id in seen:
                raise InvalidArgument(f"duplicate task id {t.id!r}: task ids must be unique")
            seen.add(t.id)
        check_callable(self.reward, "reward", "reward(task, output) -> float | Score", arity=2)
        clash = sorted({t.id for t in self.split.test_tasks or ()} & seen)
        if clash:
            raise InvalidArgument(
                f"test_tasks: {len(clash)} test task(s) are also run tasks ({clash[0]!r}...): a test set "
                "holds tasks the run never uses for a decision; take them out of tasks"
            )
        check_text(self.artifact_id, "artifact_id", hint="the artifact's id in the ledger", identifier=True)
        check_fraction(self.blast_radius, "blast_radius", hint="above 0.30 the artifact is slow (L1)")
        if not is_int(self.seed):
            raise InvalidArgumentType(f"seed={self.seed!r}: use an int")
        check_bool(self.self_verify, "self_verify")
        check_proposal_rule(self.proposal, self.strategy)
        if self.call_cache is not None and not isinstance(self.call_cache, (str, os.PathLike)) and not callable(
                getattr(self.call_cache, "get", None)):
            raise InvalidArgumentType(f"call_cache={self.call_cache!r:.80}: pass an agentdescent.CallCache, a folder "
                                      "path, or None")
        check_bool(self.fusion_tournament, "fusion_tournament", optional=True)
        check_bool(self.progress, "progress")
        check_bool(self.resume, "resume")
        self._check_run_id()
        for name, family in FAMILIES.items():
            if not isinstance(getattr(self, name), family):
                raise InvalidArgumentType(f"{name}={getattr(self, name)!r:.80}: pass an agentdescent.{family.__name__}")
        if self.strategy is not None:
            object.__setattr__(self, "strategy", adopt(self.strategy, Strategy, "strategy"))
        if self.initial_state is not None and (not isinstance(self.initial_state, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.initial_state.items()
        )):
            raise InvalidArgumentType(
                f"initial_state={self.initial_state!r:.80}: an artifact state is a flat dict of str to str"
            )
        policy = self.staleness_policy
        if isinstance(policy, str):
            object.__setattr__(self, "staleness_policy", get_policy(policy))
        elif policy is not None:
            object.__setattr__(self, "staleness_policy", adopt(policy, StalenessPolicy, "staleness_policy"))
        if self.agg_config is not None and not isinstance(self.agg_config, AggregatorConfig):
            raise InvalidArgumentType(f"agg_config={self.agg_config!r:.80}: pass an agentdescent.AggregatorConfig")
        check_callable(self.aggregator_factory, "aggregator_factory", "see agentdescent.engine.runtime.AggregatorFactory",
                       optional=True)
        if self.allocator is not None:
            object.__setattr__(self, "allocator", adopt(self.allocator, AllocatorPolicy, "allocator"))
        if self.ledger is not None and not isinstance(self.ledger, (str, os.PathLike)):
            object.__setattr__(self, "ledger", adopt(
                self.ledger, Ledger, "ledger", fix="pass a path (a SqliteLedger file), a 'postgresql://...' DSN (a PostgresLedger), or None (in memory)"))
        if self.usage is not None and not isinstance(self.usage, Usage):
            raise InvalidArgumentType(f"usage={self.usage!r}: pass an agentdescent.Usage meter or None")
        if self.executor is not None and not isinstance(self.executor, concurrent.futures.Executor):
            raise InvalidArgumentType(f"executor={self.executor!r}: pass a concurrent.futures.Executor or None")
        check_callable(self.on_round, "on_round", "on_round(round_info)", arity=1, optional=True)
        object.__setattr__(self, "clock", as_clock(self.clock))
        self._check_callables()
        if classify(ArtifactInfo(self.artifact_id, self.blast_radius)) is Layer.L0_FROZEN:
            raise GovernanceError(f"artifact_id={self.artifact_id!r} is reserved and frozen (L0); choose another id")

    def _check_callables(self) -> None:
        agent, run, propose = self.agent, self.run, self.propose
        if agent is not None:
            if propose is not None:
                raise InvalidArgument("pass either agent= or propose=, not both (agent= proposes)")
            if run is not None:
                # the agent proposes, run= solves (a code suite runs the tests itself)
                check_callable(run, "run", "run(rendered, task) -> str", arity=2)
            object.__setattr__(self, "agent", adopt(agent, Agent, "agent"))
            wanted = getattr(self.strategy, "proposal_mode", None)
            mode = getattr(unwrap(self.agent), "proposal", None)
            if isinstance(wanted, str) and isinstance(mode, str) and mode != wanted:
                raise InvalidArgument(
                    f"agent= proposes in {mode!r} mode, but strategy={self.strategy!r:.80} reads {wanted!r} "
                    f"proposals; give LLMAgent(..., proposal={wanted!r})")
            return
        if run is None or propose is None:
            missing = [n for n, v in (("run", run), ("propose", propose)) if v is None]
            raise InvalidArgument(
                f"missing {' and '.join(missing)}: pass run(rendered, task) and "
                "propose(rendered, task, output, reward), or an agent= with solve() and propose()"
            )
        check_callable(run, "run", "run(rendered, task) -> str", arity=2)
        check_callable(propose, "propose", "propose(rendered, task, output, reward) -> str | None", arity=4)

    # ----------------------------------------------------------------- what the run uses

    @property
    def solve_fn(self) -> Callable[[str, Task], str]:
        """The run's ``solve(rendered, task)``: ``run`` when given, else the agent's."""
        return self.run if self.run is not None else self.agent.solve  # type: ignore[return-value]

    @property
    def propose_fn(self) -> Callable[..., str | None]:
        """The run's ``propose(rendered, task, output, reward)``: the agent's, or ``propose``."""
        return self.agent.propose if self.agent is not None else self.propose  # type: ignore[return-value]

    @property
    def explain_fn(self) -> Callable[..., Any] | None:
        """The agent's ``explain_proposal`` (`agentdescent.LLMAgent.explain_proposal`), or None.

        With it a worker learns why a proposal came back as no change (the model's NONE, or a
        refused reply and its kind), recorded as the proposal's `agentdescent.fate.CardFate`.
        An agent whose class overrides ``propose`` below the class that defines
        ``explain_proposal`` (a subclass that logs or rewrites proposals) is asked through
        ``propose``, so its override runs.
        """
        agent = unwrap(self.agent) if self.agent is not None else None
        explain = getattr(agent, "explain_proposal", None)
        if not callable(explain):
            return None
        mro = type(agent).__mro__
        owner = {name: next((c for c in mro if name in vars(c)), None) for name in ("propose", "explain_proposal")}
        if owner["propose"] is not None and owner["explain_proposal"] is not None and not issubclass(
                owner["explain_proposal"], owner["propose"]):
            return None
        return explain

    def travelling(self) -> list[tuple[str, Any]]:
        """The callables a remote executor must receive, by argument name."""
        named = ([("agent", unwrap(self.agent))] if self.agent is not None else [("propose", self.propose)])
        if self.run is not None:
            named.insert(0, ("run", self.run))
        return [*named, ("reward", self.reward)]

    def aggregator_config(self) -> AggregatorConfig:
        """``agg_config`` with ``fusion_tournament`` applied, and the split's ``stratify`` key as its ``group_key``.

        Without an ``agg_config``, a strategy that holds demonstrations gets
        ``max_regressions=None``: one new example moves many answers at once (a model that
        gave every question one label gives another), so a candidate that fixes more
        held-out tasks than it breaks must be able to pass; the paired test on the full
        held-out mean still decides, at its stated rate.
        """
        if self.agg_config is not None:
            cfg = self.agg_config
        else:
            cfg = AggregatorConfig(max_regressions=None) if demo_slots(self.strategy) else AggregatorConfig()
        if self.fusion_tournament is not None:
            cfg = dataclasses.replace(cfg, fusion_tournament=self.fusion_tournament)
        if cfg.group_key is None and self.split.stratify is not None:
            cfg = dataclasses.replace(cfg, group_key=self.split.stratify)
        return cfg

    # ----------------------------------------------------------------- from keywords

    @classmethod
    def from_keywords(cls, tasks: Sequence[Task], reward: Callable[[Task, str], Any], *, engine: str,
                      **keywords: Any) -> RunConfig:
        """The config of one engine call: each keyword to its field, or to its family's field.

        Args:
            tasks: the tasks.
            reward: the reward.
            engine: ``"sync"`` (`evolve`) or ``"async"`` (`async_evolve`); a family knob
                that only the other engine reads is refused.
            **keywords: the engine's keyword arguments.

        Raises:
            InvalidArgument: an unknown keyword (with the closest known one), a knob the
                engine cannot apply, or a family given both whole and by its fields.
            InvalidArgumentType: see `RunConfig`.
        """
        top = {f.name for f in dataclasses.fields(cls)} - {"tasks", "reward"}
        flat = _flat_fields()
        direct: dict[str, Any] = {}
        by_family: dict[str, dict[str, Any]] = {name: {} for name in FAMILIES}
        for name, value in keywords.items():
            if name in FAMILIES and value is None:
                continue  # the signature's default: the family's fields decide
            if name in top:
                direct[name] = value
            elif name in flat:
                family, fld = flat[name]
                only = fld.metadata.get("engine")
                if only is not None and only != engine:
                    raise InvalidArgument(_not_for(name, engine))
                by_family[family][name] = value
            else:
                known = sorted(top | set(flat))
                close = difflib.get_close_matches(name, known, n=1)
                raise InvalidArgumentType(
                    f"unknown keyword {name}={value!r:.60}" + (f"; did you mean {close[0]}=?" if close else "")
                    + " (every keyword is a field of RunConfig, Split, Limits, Retry or Schedule)"
                )
        if engine == _ASYNC and "limits" not in direct:
            for name, default in ASYNC_DEFAULTS.items():
                by_family["limits"].setdefault(name, default)
        for family, values in by_family.items():
            if not values:
                continue
            if family in direct:
                raise InvalidArgument(
                    f"{family}= and {', '.join(f'{k}=' for k in values)} both given: pass the "
                    f"{FAMILIES[family].__name__} whole, or its fields as keywords, not both"
                )
            direct[family] = FAMILIES[family](**values)
        config = cls(tasks, reward, **direct)
        if engine == _ASYNC:
            config.limits.check_async_stop_rule()
        return config


def _flat_fields() -> dict[str, tuple[str, dataclasses.Field[Any]]]:
    """Each family field's name -> (its family's keyword, the field)."""
    out: dict[str, tuple[str, dataclasses.Field[Any]]] = {}
    for family, cls in FAMILIES.items():
        for fld in dataclasses.fields(cls):
            out[fld.name] = (family, fld)
    return out


def _not_for(name: str, engine: str) -> str:
    if engine == _ASYNC:
        return (
            f"{name}= cannot apply to an asynchronous run: async workers are n_workers threads whose "
            "calls run on executor=, staleness is bounded by async_ratio, and the run stops on "
            "max_seconds/max_rollouts/target_reward/patience/max_tokens; drop it"
        )
    return f"{name}= applies to async_evolve (or evolve(asynchronous=True)) only; drop it, or run asynchronously"


def engine_signature(engine: str, extras: Sequence[inspect.Parameter] = ()) -> inspect.Signature:
    """The signature of an engine, written from the config's fields (the one home of every default).

    ``tasks`` and ``reward`` come first; then, keyword-only, every field of `RunConfig`,
    every field of its families that applies to ``engine`` (with `ASYNC_DEFAULTS` for the
    async engine), and ``extras``.
    """
    params = [
        inspect.Parameter("tasks", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="Sequence[Task]"),
        inspect.Parameter("reward", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="Callable[[Task, str], float]"),
    ]
    kw = inspect.Parameter.KEYWORD_ONLY
    for fld in dataclasses.fields(RunConfig):
        if fld.name in ("tasks", "reward") or fld.name in FAMILIES:
            continue
        params.append(inspect.Parameter(fld.name, kw, default=fld.default, annotation=fld.type))
    for _, (_, fld) in _flat_fields().items():
        only = fld.metadata.get("engine")
        if only is not None and only != engine:
            continue
        default = ASYNC_DEFAULTS.get(fld.name, fld.default) if engine == _ASYNC else fld.default
        params.append(inspect.Parameter(fld.name, kw, default=default, annotation=fld.type))
    for name in FAMILIES:
        params.append(inspect.Parameter(name, kw, default=None, annotation=FAMILIES[name].__name__))
    params += list(extras)
    return inspect.Signature(params, return_annotation="EvolutionResult")


def budget_keyword(factory: Any, governor: Any) -> dict[str, Any]:
    """The budget keyword of an ``aggregator_factory`` call: ``budget=governor`` for a factory that takes it
    (`agentdescent.engine.runtime.AggregatorFactory`), ``tournament_gate=`` for one written before it."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a callable without a signature: the current keyword
        return {"budget": governor}
    if any(p.name == "budget" or p.kind is p.VAR_KEYWORD for p in params):
        return {"budget": governor}
    return {"tournament_gate": governor.allow_fusion_tournament}
