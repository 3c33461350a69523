"""agentdescent: parallel, asynchronous self-evolution of LLM agent artifacts.

Workers propose diffs to a shared, versioned artifact; an aggregator merges them
(staleness filter, conflict resolution, fusion, Beta-posterior acceptance,
compare-and-swap commit); a budget governor decides which candidates still get
expensive evaluation as tokens run out.
"""

from .agents import Agent, Completion, Provider, Usage
from .governance import FAST_MAX, Layer, classify
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

__all__ = [
    "FAST_MAX",
    "Agent",
    "AgentDescentError",
    "AppendRules",
    "CASConflict",
    "Completion",
    "ContractError",
    "Diff",
    "EvidenceCard",
    "FullStaleness",
    "GovernanceError",
    "GuardedStaleness",
    "KeyedRules",
    "Layer",
    "LedgerError",
    "MergeOutcome",
    "MergeReport",
    "ProposalContractError",
    "Provider",
    "ProviderError",
    "ReflectiveStaleness",
    "RewardContractError",
    "SingleSlot",
    "StaleAction",
    "StalenessPolicy",
    "Strategy",
    "Task",
    "Usage",
    "classify",
    "get_policy",
    "stable_hash",
    "vv_staleness",
]
