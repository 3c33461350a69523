"""The public surface: every name of the contract imports from the package root."""

from __future__ import annotations

import agentdescent

SPEC_NAMES = {
    # data model and errors
    "Task", "Diff", "EvidenceCard", "vv_staleness", "MergeOutcome", "MergeReport",
    "CardFate", "FateKind",
    "AgentDescentError", "ContractError", "RewardContractError", "ProposalContractError",
    "LedgerError", "CASConflict", "GovernanceError", "ProviderError", "stable_hash",
    # strategies, ledger, governance, staleness
    "Strategy", "AppendRules", "KeyedRules", "SingleSlot",
    "Ledger", "MemoryLedger", "SqliteLedger",
    "Layer", "FAST_MAX", "classify",
    "StaleAction", "StalenessPolicy", "FullStaleness", "GuardedStaleness", "ReflectiveStaleness",
    "get_policy",
    # merge, budget, allocation
    "Aggregator", "AggregatorConfig", "BudgetGovernor",
    "AllocatorContext", "AllocateDecision", "AllocatorPolicy", "LearningValueModel",
    "ValueBudgetAllocator",
    # engines and agents
    "evolve", "async_evolve", "EvolutionResult", "RoundInfo",
    "Usage", "Completion", "Provider", "CommandAgent",
    # data
    "hf_rows", "hf_rows_modelscope",
}


def test_contract_names_are_exported() -> None:
    missing = sorted(n for n in SPEC_NAMES if not hasattr(agentdescent, n))
    assert not missing, f"missing from agentdescent: {missing}"
    not_listed = sorted(n for n in SPEC_NAMES if n not in agentdescent.__all__)
    assert not not_listed, f"importable but not in __all__: {not_listed}"


def test_all_is_exact_and_documented() -> None:
    for name in agentdescent.__all__:
        obj = getattr(agentdescent, name)
        if callable(obj) or isinstance(obj, type):
            assert (obj.__doc__ or "").strip(), f"{name} has no docstring"
    assert len(set(agentdescent.__all__)) == len(agentdescent.__all__)


def test_cas_conflict_also_from_ledger() -> None:
    from agentdescent.ledger import CASConflict

    assert CASConflict is agentdescent.CASConflict
    assert issubclass(CASConflict, agentdescent.LedgerError)
