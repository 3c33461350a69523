"""agentdescent: parallel, asynchronous self-evolution of LLM agent artifacts.

Workers propose diffs to a shared, versioned artifact; an aggregator merges them
(staleness filter, conflict resolution, fusion, paired sequential acceptance,
compare-and-swap commit); a budget governor decides which candidates still get
expensive evaluation as tokens run out.
"""

import logging

from ._version import VERSION
from .agents import LLMAgent
from .aggregator import Aggregator, AggregatorConfig, Evaluator
from .allocator import (
    AllocateDecision,
    AllocatorContext,
    AllocatorPolicy,
    LearningValueModel,
    ValueBudgetAllocator,
)
from .async_evolve import async_evolve
from .budget import BudgetGovernor
from .clock import Clock, MonotonicClock
from .compaction import ContextManager
from .config import Limits, Retry, RunConfig, Schedule, Split
from .dataloader import hf_rows, hf_rows_modelscope
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
from .evolution import evolve
from .forkrule import DEFAULT_FORK_MIN_SPAN_RATIO
from .governance import FAST_MAX, Layer, classify
from .judge import judge
from .ledger import Ledger, LedgerEntry, MemoryLedger, SqliteLedger
from .model import Agent, Completion, Provider
from .pricing import RateCard, fork_break_even
from .providers import from_callable, openai_compatible
from .result import AsyncStats, EvolutionResult, RoundInfo
from .rewards import Score
from .staleness import (
    FullStaleness,
    GuardedStaleness,
    ReflectiveStaleness,
    StaleAction,
    StalenessPolicy,
    get_policy,
)
from .strategies import AppendRules, KeyedRules, SingleSlot, Strategy
from .testset import evaluate
from .tokens import TokenCounter
from .types import Diff, EvidenceCard, MergeOutcome, MergeReport, Task, stable_hash, vv_staleness
from .usage import Usage, usage_phase

__version__ = VERSION

# A library never prints unless asked: records go nowhere until the application
# configures logging.
logging.getLogger("agentdescent").addHandler(logging.NullHandler())

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
    "AsyncStats",
    "BackendFailure",
    "BudgetGovernor",
    "CASConflict",
    "Clock",
    "Completion",
    "ContextManager",
    "ContractError",
    "DataLoadError",
    "EditRefused",
    "Diff",
    "Evaluator",
    "EvidenceCard",
    "EvolutionResult",
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
    "Limits",
    "MemoryLedger",
    "MergeOutcome",
    "MergeReport",
    "MonotonicClock",
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
