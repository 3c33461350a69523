"""agentdescent: parallel, asynchronous self-evolution of LLM agent artifacts.

Workers propose diffs to a shared, versioned artifact; an aggregator merges them
(staleness filter, conflict resolution, fusion, Beta-posterior acceptance,
compare-and-swap commit); a budget governor decides which candidates still get
expensive evaluation as tokens run out.
"""

import logging

from .agents import Agent, Completion, LLMAgent, Provider, Usage, usage_phase
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
from .context import (
    DEFAULT_FORK_MIN_SPAN_RATIO,
    ContextManager,
    RateCard,
    TokenCounter,
    fork_break_even,
)
from .dataloader import DataLoadError, hf_rows, hf_rows_modelscope
from .evolution import evolve
from .governance import FAST_MAX, Layer, classify
from .ledger import Ledger, LedgerEntry, MemoryLedger, SqliteLedger
from .providers import (
    ProviderAuthError,
    ProviderBadRequestError,
    ProviderConnectionError,
    ProviderRateLimitError,
    ProviderResponseError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    from_callable,
    openai_compatible,
)
from .result import EvolutionResult, RoundInfo
from .staleness import (
    FullStaleness,
    GuardedStaleness,
    ReflectiveStaleness,
    StaleAction,
    StalenessPolicy,
    get_policy,
)
from .strategies import AppendRules, KeyedRules, SingleSlot, Strategy
from .types import (
    AgentDescentError,
    CASConflict,
    ContractError,
    Diff,
    EvidenceCard,
    GovernanceError,
    LedgerError,
    MergeOutcome,
    MergeReport,
    ProposalContractError,
    ProviderError,
    RewardContractError,
    Task,
    stable_hash,
    vv_staleness,
)

__version__ = "0.1.0"

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
    "BudgetGovernor",
    "CASConflict",
    "Completion",
    "ContextManager",
    "ContractError",
    "DataLoadError",
    "Diff",
    "Evaluator",
    "EvidenceCard",
    "EvolutionResult",
    "FullStaleness",
    "GovernanceError",
    "GuardedStaleness",
    "KeyedRules",
    "LLMAgent",
    "Layer",
    "LearningValueModel",
    "Ledger",
    "LedgerEntry",
    "LedgerError",
    "MemoryLedger",
    "MergeOutcome",
    "MergeReport",
    "ProposalContractError",
    "Provider",
    "ProviderAuthError",
    "ProviderBadRequestError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderResponseError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RateCard",
    "ReflectiveStaleness",
    "RewardContractError",
    "RoundInfo",
    "SingleSlot",
    "SqliteLedger",
    "StaleAction",
    "StalenessPolicy",
    "Strategy",
    "Task",
    "TokenCounter",
    "Usage",
    "ValueBudgetAllocator",
    "async_evolve",
    "classify",
    "evolve",
    "fork_break_even",
    "from_callable",
    "get_policy",
    "hf_rows",
    "hf_rows_modelscope",
    "openai_compatible",
    "stable_hash",
    "usage_phase",
    "vv_staleness",
]
