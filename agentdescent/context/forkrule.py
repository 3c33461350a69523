"""The summarizer-fork rule: how a summary call may be sent, and when forking it pays.

This module owns the pure part of the decision `agentdescent.context.compaction.ContextManager`
makes before each summary call: the summary call modes (`SUMMARY_CALL_MODES`), what a
``summary_fork_min_span_ratio`` value means (unset, off, invalid, armed), the ratio the
predicate compares against (`min_span_ratio`: the knob, or in ``"auto"`` mode the measured
`DEFAULT_FORK_MIN_SPAN_RATIO` or the break-even of a rate card), the warning a knob that
cannot do what it seems to ask deserves (`ratio_warning`), and the verdict on one aligned
fork (`fork_verdict`: fork iff the span is at least that share of the cached prefix).

Pure: it must not log, count, hold state, or call a model (the manager does those).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..budget.pricing import RateCard, fork_break_even
from ..errors import InvalidArgument

__all__ = ["DEFAULT_FORK_MIN_SPAN_RATIO", "SUMMARY_CALL_MODES", "canonical_mode", "classify_ratio",
           "fork_verdict", "min_span_ratio", "ratio_warning"]

#: The measured break-even span ratio: a forked summary call cost $0.00077 per 1k of its
#: own prompt tokens, a standalone one $0.00350, so forking pays iff
#: ``P * 0.00077 <= S * 0.00350``, i.e. ``S / P >= 0.00077 / 0.00350 = 0.22``.
DEFAULT_FORK_MIN_SPAN_RATIO = 0.22

#: Accepted values of ``summary_call_mode``; ``"inline"`` is an alias of ``"standalone"``.
SUMMARY_CALL_MODES = ("standalone", "inline", "fork", "auto")
_MODE_ALIASES = {"inline": "standalone"}


def canonical_mode(value: Any) -> str:
    """``value`` as a summary call mode (``"inline"`` becomes ``"standalone"``).

    Raises:
        InvalidArgument: not one of `SUMMARY_CALL_MODES`.
    """
    if not isinstance(value, str) or value not in SUMMARY_CALL_MODES:
        raise InvalidArgument(
            f"summary_call_mode={value!r} is not a summary call mode; use one of "
            f"{list(SUMMARY_CALL_MODES)} ('inline' is an alias of 'standalone')"
        )
    return _MODE_ALIASES.get(value, value)


def classify_ratio(value: Any) -> tuple[str, float | None]:
    """Sort a ``summary_fork_min_span_ratio`` value: ``"unset"``, ``"off"``, ``"invalid"`` or ``"armed"`` (with its number)."""
    if value is None:
        return "unset", None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return "invalid", None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return "invalid", None
    if not math.isfinite(number) or number < 0:
        return "invalid", None
    if number == 0:
        return "off", None
    return "armed", number


def min_span_ratio(value: Any, mode: str, rate_card: RateCard | None, cache_hit_fraction: float) -> float | None:
    """The ratio the predicate compares against, or None when the predicate is off."""
    kind, number = classify_ratio(value)
    if kind == "armed":
        return number
    if kind == "unset" and mode == "auto":
        if rate_card is not None:
            return fork_break_even(rate_card, cache_hit_fraction)
        return DEFAULT_FORK_MIN_SPAN_RATIO
    return None


def ratio_warning(value: Any, mode: str) -> str | None:
    """What to tell the user when the ratio knob cannot do what it seems to ask, or None."""
    kind, _ = classify_ratio(value)
    if mode == "standalone":
        if kind in ("armed", "invalid"):
            return (f"summary_fork_min_span_ratio={value!r} has no effect with summary_call_mode="
                    "'standalone', which never forks; use summary_call_mode='auto' or 'fork' "
                    "to gate forks by span ratio")
        return None
    if kind == "invalid":
        return (f"summary_fork_min_span_ratio={value!r} is not a usable ratio (it must be a finite "
                f"number >= 0); the fork predicate is disabled, so summary_call_mode={mode!r} forks "
                f"every aligned summary. Pass a ratio such as {DEFAULT_FORK_MIN_SPAN_RATIO}, or None for the default.")
    return None


def fork_verdict(span_tokens: int, prefix_tokens: int, min_ratio: float) -> tuple[bool, dict[str, Any], str | None]:
    """``(fork, measure, decline kind)`` for one aligned fork of a ``span_tokens`` span off a ``prefix_tokens`` prefix.

    Fork iff the span is at least ``min_ratio`` of the prefix (a zero-token prefix gives no
    opinion: fork). A decline's kind says why: ``"cold-cache"`` (an infinite ratio),
    ``"ratio-above-one"``, or ``"span-below-ratio"``. ``measure`` holds the four numbers.
    """
    span_ratio = span_tokens / prefix_tokens if prefix_tokens > 0 else None
    measure = {"span_tokens": span_tokens, "prefix_tokens": prefix_tokens, "span_ratio": span_ratio,
               "min_span_ratio": min_ratio}
    if span_ratio is None or span_ratio >= min_ratio:
        return True, measure, None
    if math.isinf(min_ratio):
        kind = "cold-cache"
    elif min_ratio > 1:
        kind = "ratio-above-one"
    else:
        kind = "span-below-ratio"
    return False, measure, kind
