"""Token prices and the arithmetic of the summarizer fork: `RateCard`, `fork_break_even`.

This module owns what a provider charges (uncached, cached and output prices per million
tokens, and a cache-write multiplier), the card the measured break-even came from, and
the break-even span ratio itself: the share of a prefix a summarised span must reach for
a forked summary call to cost less than a standalone one. Pure arithmetic: it must not
call a provider or read the clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..validation import check_fraction, check_real

__all__ = ["MEASURED_CACHE_HIT_FRACTION", "MEASURED_RATE_CARD", "RateCard", "fork_break_even"]


@dataclass(frozen=True)
class RateCard:
    """A provider's token prices, the input to `fork_break_even` and the simulator.

    Whether a summary call should fork depends only on price ratios, so the card keeps
    the four numbers a provider publishes. Prices are in dollars per million tokens.

    Args:
        input_per_mtok: uncached input (prompt) price.
        cached_input_per_mtok: price of an input token read from the prompt cache.
        cache_write_multiplier: what a fork pays, relative to the uncached price, for
            the part of its prefix that missed the cache (it is written back): 1.0 for
            automatic caches with no write surcharge, 1.25 for a provider that charges
            for cache writes.
        output_per_mtok: output (completion) price; it does not move the break-even
            (a summary is the same length either way) but counts in totals.
        name: a label for tables and logs.

    Raises:
        InvalidArgument: a price is negative or not finite, or ``input_per_mtok`` is 0.
    """

    input_per_mtok: float
    cached_input_per_mtok: float
    cache_write_multiplier: float = 1.0
    output_per_mtok: float = 0.0
    name: str = ""

    def __post_init__(self) -> None:
        for field_name in ("input_per_mtok", "cached_input_per_mtok", "cache_write_multiplier", "output_per_mtok"):
            object.__setattr__(self, field_name, check_real(getattr(self, field_name), field_name, low=0.0, owner="RateCard"))
        if self.input_per_mtok == 0:
            raise InvalidArgument(
                "RateCard(input_per_mtok=0): the uncached input price must be positive, "
                "every ratio here is relative to it"
            )

    def cost(self, uncached_tokens: int, cached_tokens: int = 0, output_tokens: int = 0) -> float:
        """Dollars for one call's token counts.

        Args:
            uncached_tokens: prompt tokens charged at the uncached rate.
            cached_tokens: prompt tokens read from the cache.
            output_tokens: completion tokens.

        Returns:
            The cost in dollars.
        """
        return (
            uncached_tokens * self.input_per_mtok
            + cached_tokens * self.cached_input_per_mtok
            + output_tokens * self.output_per_mtok
        ) / 1_000_000

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RateCard:
        """Build a card from a config mapping with the field names as keys.

        Raises:
            InvalidArgument: an unknown key (named, with the known ones listed).
        """
        known = ("input_per_mtok", "cached_input_per_mtok", "cache_write_multiplier", "output_per_mtok", "name")
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise InvalidArgument(f"rate_card has unknown keys {unknown}; known keys: {list(known)}")
        return cls(**dict(data))


#: The provider behind the measured 0.22: $3.50/M uncached input, a 90% cache discount,
#: no write surcharge. At `MEASURED_CACHE_HIT_FRACTION` its break-even is 0.22.
MEASURED_RATE_CARD = RateCard(
    input_per_mtok=3.50, cached_input_per_mtok=0.35, cache_write_multiplier=1.0,
    output_per_mtok=14.0, name="measured",
)
#: The hit fraction that reconciles `MEASURED_RATE_CARD` with the measured rates:
#: ``0.00077 / 0.00350 = h * 0.1 + (1 - h)``, so ``h = 0.78 / 0.9`` (about 86.7%).
MEASURED_CACHE_HIT_FRACTION = 0.78 / 0.9


def fork_break_even(rate_card: RateCard, cache_hit_fraction: float = 1.0) -> float:
    """The span ratio ``S / P`` at and above which a forked summary call is the cheaper one.

    A standalone summary call pays the uncached rate ``u`` on the span ``S``. A fork
    re-reads the whole prefix ``P``: the hit fraction ``h`` at the cached rate ``c`` and
    the rest at ``u`` times the write multiplier ``w``. The instruction and the reply are
    the same size either way, so forking pays iff ``P * (h*c + (1-h)*u*w) <= S * u``::

        ratio = h * (c / u) + (1 - h) * w

    The measured provider (``c/u = 0.1``, ``w = 1``, ``h ≈ 0.867``) gives 0.22; a
    90%-discount provider with every fork hitting gives 0.1. A cold cache (``h = 0``) can
    never win, so it returns ``math.inf``: never fork.

    Args:
        rate_card: the provider's prices.
        cache_hit_fraction: the expected fraction of a fork's prefix found in the cache.

    Returns:
        The minimum span ratio for a fork (``math.inf`` for a cold cache).

    Raises:
        InvalidArgument: ``cache_hit_fraction`` is outside [0, 1].
    """
    if not isinstance(rate_card, RateCard):
        raise InvalidArgumentType(
            f"fork_break_even(rate_card={rate_card!r}): pass a RateCard (or RateCard.from_mapping(...))"
        )
    h = check_fraction(cache_hit_fraction, "cache_hit_fraction", hint="the expected fraction of a fork's prefix served from the cache")
    if h == 0.0:
        return math.inf
    u = rate_card.input_per_mtok
    return h * (rate_card.cached_input_per_mtok / u) + (1.0 - h) * rate_card.cache_write_multiplier

