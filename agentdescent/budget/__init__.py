"""The budget: what optional spend a candidate still gets as tokens run out.

Owns `BudgetGovernor` (`governor`, bound to the run meter), the learning allocator and its seam
(`allocator`) and token prices (`pricing`). Imports only the ground floor (the `Usage` meter and
the token estimate live there, since every layer records into them); it must not import the
merge, the engine, `context` or anything above.
"""

from .allocator import (
    AllocateDecision,
    AllocatorContext,
    AllocatorPolicy,
    LearningValueModel,
    ValueBudgetAllocator,
    pre_spend_context,
)
from .governor import (
    BudgetGovernor,
)
from .pricing import (
    MEASURED_CACHE_HIT_FRACTION,
    MEASURED_RATE_CARD,
    RateCard,
    fork_break_even,
)

__all__ = [
    "AllocateDecision",
    "AllocatorContext",
    "AllocatorPolicy",
    "BudgetGovernor",
    "fork_break_even",
    "LearningValueModel",
    "MEASURED_CACHE_HIT_FRACTION",
    "MEASURED_RATE_CARD",
    "pre_spend_context",
    "RateCard",
    "ValueBudgetAllocator",
]
