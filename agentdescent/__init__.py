"""agentdescent: parallel, asynchronous self-evolution of LLM agent artifacts.

Workers propose diffs to a shared, versioned artifact; an aggregator merges them
(staleness filter, conflict resolution, fusion, paired sequential acceptance,
compare-and-swap commit); a budget governor decides which candidates still get
expensive evaluation as tokens run out.
"""

import importlib
import logging
import sys

from ._version import VERSION
from .agents.callcache import CallCache
from .agents.command import CommandAgent
from .agents.llm import LLMAgent
from .budget.allocator import (
    AllocateDecision,
    AllocatorContext,
    AllocatorPolicy,
    LearningValueModel,
    ValueBudgetAllocator,
)
from .budget.governor import BudgetGovernor
from .budget.pricing import RateCard, fork_break_even
from .clock import Clock, MonotonicClock
from .context.compaction import ContextManager
from .context.forkrule import DEFAULT_FORK_MIN_SPAN_RATIO
from .data.loader import hf_rows, hf_rows_modelscope
from .engine.config import Limits, Retry, RunConfig, Schedule, Split
from .engine.entry import async_evolve, evolve
from .engine.result import AsyncStats, EvolutionResult, RoundInfo
from .engine.testset import evaluate
from .errors import (
    AgentDescentError,
    BackendFailure,
    CASConflict,
    ContractError,
    DataLoadError,
    EditRefused,
    GovernanceError,
    InvalidArgument,
    InvalidArgumentType,
    LedgerBusy,
    LedgerCorrupted,
    LedgerError,
    LedgerTooNew,
    LedgerUnavailable,
    ProposalContractError,
    ProviderAuthError,
    ProviderBadRequestError,
    ProviderConnectionError,
    ProviderDependencyError,
    ProviderError,
    ProviderRateLimitError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RewardContractError,
    RunError,
    RunFailed,
    RunStateDamaged,
    RunTimeout,
    SandboxUnavailable,
    UsageError,
)
from .fate import CardFate, FateKind
from .ledger import Ledger, LedgerEntry, MemoryLedger, PostgresLedger, SqliteLedger
from .merge.aggregator import Aggregator, AggregatorConfig, Evaluator
from .merge.demonstrations import Demonstration, Demonstrations, RulesAndDemos
from .merge.governance import FAST_MAX, Layer, classify
from .merge.staleness import (
    FullStaleness,
    GuardedStaleness,
    ReflectiveStaleness,
    StaleAction,
    StalenessPolicy,
    get_policy,
)
from .merge.strategies import AppendRules, KeyedRules, SingleSlot, Strategy
from .model import Agent, Completion, Provider
from .providers import from_callable, openai_compatible
from .rewards.builtin import Score
from .rewards.judge import judge
from .tokens import TokenCounter
from .types import Diff, EvidenceCard, MergeOutcome, MergeReport, Task, stable_hash, vv_staleness
from .usage import Usage, usage_phase

__version__ = VERSION

# A library never prints unless asked: records go nowhere until the application
# configures logging.
logging.getLogger("agentdescent").addHandler(logging.NullHandler())

#: The module names SPEC.md gives, for modules that now live in a layer's subpackage:
#: ``import agentdescent.staleness`` and ``from agentdescent.aggregator import ...`` keep
#: working and give the module itself (not a copy). The package's own code imports the
#: new paths.
SPEC_MODULES = {
    "aggregator": "merge.aggregator",
    "allocator": "budget.allocator",
    "async_evolve": "engine.entry",
    "dataloader": "data.loader",
    "evolution": "engine.entry",
    "governance": "merge.governance",
    "staleness": "merge.staleness",
    "strategies": "merge.strategies",
}
for _name, _home in SPEC_MODULES.items():
    _module = importlib.import_module(f".{_home}", __name__)
    sys.modules[f"{__name__}.{_name}"] = _module
    # ``agentdescent.async_evolve`` stays the function (SPEC §7); the rest name the module.
    globals().setdefault(_name, _module)
del _name, _home, _module

__all__ = [
    "DEFAULT_FORK_MIN_SPAN_RATIO",
    "FAST_MAX",
    "Agent",
    "AgentDescentError",
    "Aggregator",
    "AggregatorConfig",
    "AllocateDecision",
    "AllocatorContext",
    "AllocatorPolicy",
    "AppendRules",
    "Demonstration",
    "Demonstrations",
    "AsyncStats",
    "BackendFailure",
    "BudgetGovernor",
    "CallCache",
    "CASConflict",
    "Clock",
    "CommandAgent",
    "Completion",
    "ContextManager",
    "ContractError",
    "DataLoadError",
    "EditRefused",
    "CardFate",
    "Diff",
    "Evaluator",
    "EvidenceCard",
    "EvolutionResult",
    "FateKind",
    "FullStaleness",
    "GovernanceError",
    "GuardedStaleness",
    "InvalidArgument",
    "InvalidArgumentType",
    "KeyedRules",
    "LLMAgent",
    "Layer",
    "LearningValueModel",
    "Ledger",
    "LedgerBusy",
    "LedgerCorrupted",
    "LedgerEntry",
    "LedgerError",
    "LedgerTooNew",
    "LedgerUnavailable",
    "Limits",
    "MemoryLedger",
    "MergeOutcome",
    "MergeReport",
    "MonotonicClock",
    "PostgresLedger",
    "ProposalContractError",
    "Provider",
    "ProviderAuthError",
    "ProviderBadRequestError",
    "ProviderConnectionError",
    "ProviderDependencyError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderResponseError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateCard",
    "ReflectiveStaleness",
    "Retry",
    "RewardContractError",
    "RoundInfo",
    "RunConfig",
    "RunError",
    "RunFailed",
    "RunStateDamaged",
    "RunTimeout",
    "SandboxUnavailable",
    "Schedule",
    "Score",
    "RulesAndDemos",
    "SingleSlot",
    "Split",
    "SqliteLedger",
    "StaleAction",
    "StalenessPolicy",
    "Strategy",
    "Task",
    "TokenCounter",
    "Usage",
    "UsageError",
    "ValueBudgetAllocator",
    "async_evolve",
    "classify",
    "evaluate",
    "evolve",
    "fork_break_even",
    "from_callable",
    "get_policy",
    "hf_rows",
    "hf_rows_modelscope",
    "judge",
    "openai_compatible",
    "stable_hash",
    "usage_phase",
    "vv_staleness",
]
