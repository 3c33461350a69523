"""Argument checks: the one set of helpers every knob of the package is validated with.

This module owns what counts as a valid integer, real number, duration, fraction, flag,
name or callable (and the refusal of a keyword under its old name, `check_renamed`), and
how a bad one is reported: an `InvalidArgument` (a value out of range) or an
`InvalidArgumentType` (a value of the wrong type) whose message names the knob, the
value, the accepted values and, where given, the fix. Two rules hold
everywhere: a ``bool`` is not a number (``True`` is not ``1`` workers) and a string is
not a number (``"3"`` is refused, not parsed).

It must not import anything of the package but `agentdescent.errors`, and must not
convert values silently: a check returns the value it accepted, as the type it names.
"""

from __future__ import annotations

import inspect
import math
import numbers
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

from .errors import InvalidArgument, InvalidArgumentType

__all__ = [
    "RENAMED",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_fraction",
    "check_int",
    "check_real",
    "check_renamed",
    "check_seconds",
    "check_text",
    "control_character",
    "is_int",
    "is_real",
]


def is_int(value: Any) -> bool:
    """True for an integer that is not a ``bool``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """True for a real number that is not a ``bool`` (strings are not numbers)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _label(name: str, value: Any, owner: str | None) -> str:
    return f"{owner}({name}={value!r})" if owner else f"{name}={value!r}"


def _tail(optional: bool, hint: str) -> str:
    return (" or None" if optional else "") + (f" ({hint})" if hint else "")


def check_int(value: Any, name: str, *, low: int | None = None, high: int | None = None,
              optional: bool = False, owner: str | None = None, hint: str = "") -> Any:
    """``value`` if it is an int in ``[low, high]`` (or None when ``optional``).

    Args:
        value: the value to check.
        name: the knob's name, for the message.
        low: the smallest accepted value (None: unbounded).
        high: the largest accepted value (None: unbounded).
        optional: None is accepted.
        owner: the class or function the knob belongs to, for the message.
        hint: what the knob does, or how to fix it, for the message.

    Raises:
        InvalidArgumentType: not an int (a bool, a float, a string...).
        InvalidArgument: out of range.
    """
    if optional and value is None:
        return None
    span = _int_span(low, high)
    if not is_int(value):
        raise InvalidArgumentType(f"{_label(name, value, owner)}: use an integer {span}{_tail(optional, hint)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise InvalidArgument(f"{_label(name, value, owner)}: use an integer {span}{_tail(optional, hint)}")
    return int(value)


def _int_span(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"in [{low}, {high}]"
    if low is not None:
        return f">= {low}"
    if high is not None:
        return f"<= {high}"
    return ""


def check_real(value: Any, name: str, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False, finite: bool = True,
               optional: bool = False, owner: str | None = None, hint: str = "") -> Any:
    """``value`` as a float if it is a real number in the given range (or None when ``optional``).

    Args:
        value: the value to check.
        name: the knob's name.
        low: the lower bound (None: unbounded below).
        high: the upper bound (None: unbounded above).
        low_open: the lower bound itself is refused.
        high_open: the upper bound itself is refused.
        finite: refuse NaN and infinities.
        optional: None is accepted.
        owner: the class or function the knob belongs to.
        hint: what the knob does, or how to fix it.

    Raises:
        InvalidArgumentType: not a real number (a bool, a string...).
        InvalidArgument: NaN, infinite (with ``finite``), or out of range.
    """
    if optional and value is None:
        return None
    span = _real_span(low, high, low_open, high_open, finite)
    if not is_real(value):
        raise InvalidArgumentType(f"{_label(name, value, owner)}: use a number {span}{_tail(optional, hint)}")
    number = float(value)
    bad = math.isnan(number) or (finite and math.isinf(number))
    if low is not None:
        bad = bad or number < low or (low_open and number == low)
    if high is not None:
        bad = bad or number > high or (high_open and number == high)
    if bad:
        raise InvalidArgument(f"{_label(name, value, owner)}: use a number {span}{_tail(optional, hint)}")
    return number


def _real_span(low: float | None, high: float | None, low_open: bool, high_open: bool, finite: bool) -> str:
    if low is not None and high is not None:
        return f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    if low is not None:
        return f"{'>' if low_open else '>='} {low:g}" + (" (finite)" if finite else "")
    if high is not None:
        return f"{'<' if high_open else '<='} {high:g}"
    return "(finite)" if finite else ""


def check_seconds(value: Any, name: str, *, positive: bool = False, optional: bool = False,
                  owner: str | None = None, hint: str = "") -> Any:
    """A finite duration in seconds: ``> 0`` with ``positive``, else ``>= 0``.

    Raises:
        InvalidArgumentType: not a number.
        InvalidArgument: negative, zero (with ``positive``), NaN or infinite.
    """
    if optional and value is None:
        return None
    what = "> 0" if positive else ">= 0"
    if not is_real(value):
        raise InvalidArgumentType(
            f"{_label(name, value, owner)}: use a finite number of seconds {what}{_tail(optional, hint)}"
        )
    number = float(value)
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise InvalidArgument(
            f"{_label(name, value, owner)}: use a finite number of seconds {what}{_tail(optional, hint)}"
        )
    return number


def check_fraction(value: Any, name: str, *, low_open: bool = False, high_open: bool = False,
                   optional: bool = False, owner: str | None = None, hint: str = "") -> Any:
    """A number in [0, 1] (each end excluded on request).

    Raises:
        InvalidArgumentType: not a number.
        InvalidArgument: outside the interval, or NaN.
    """
    return check_real(value, name, low=0.0, high=1.0, low_open=low_open, high_open=high_open,
                      optional=optional, owner=owner, hint=hint)


def check_bool(value: Any, name: str, *, optional: bool = False, owner: str | None = None) -> Any:
    """``value`` if it is a ``bool`` (0 and 1 are not flags).

    Raises:
        InvalidArgumentType: anything but True or False (or None when ``optional``).
    """
    if optional and value is None:
        return None
    if not isinstance(value, bool):
        raise InvalidArgumentType(f"{_label(name, value, owner)}: use True or False{_tail(optional, '')}")
    return value


def check_text(value: Any, name: str, *, optional: bool = False, owner: str | None = None,
               hint: str = "", identifier: bool = False) -> Any:
    """A non-empty (not only whitespace) ``str`` that encodes as UTF-8.

    Args:
        value: the value to check.
        name: the knob's name.
        optional: None is accepted.
        owner: the class or function the knob belongs to.
        hint: what the knob does, or how to fix it.
        identifier: the text names something (an artifact id): refuse a control
            character too (`control_character`).

    Raises:
        InvalidArgumentType: not a ``str``.
        InvalidArgument: empty, blank, holding a lone surrogate, or (an ``identifier``)
            holding a control character.
    """
    if optional and value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgumentType(f"{_label(name, value, owner)}: use a non-empty str{_tail(optional, hint)}")
    if not value.strip():
        raise InvalidArgument(f"{_label(name, value, owner)}: use a non-empty str{_tail(optional, hint)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(
            f"{_label(name, value, owner)}: holds a lone surrogate, which no file or database can "
            "store; use text that encodes as UTF-8"
        ) from None
    control = control_character(value) if identifier else None
    if control is not None:
        raise InvalidArgument(
            f"{_label(name, value, owner)}: holds the control character {control!r} (at position "
            f"{value.index(control)}); an id names files, log lines and ledger rows, so use printable "
            f"text{f' ({hint})' if hint else ''}"
        )
    return value


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (Unicode category Cc: NUL, tab, newline, DEL, C1), or None.

    An identifier (an artifact id) names files, log lines, command-line arguments and SQL
    rows; a NUL cuts it short in C APIs and a newline splits a log line, so identifiers are
    refused with one (`check_text` with ``identifier=True``, and the ledgers' id check).
    """
    if text.isprintable():  # the fast path: no Cc character is printable
        return None
    return next((ch for ch in text if unicodedata.category(ch) == "Cc"), None)


def check_choice(value: Any, name: str, choices: Iterable[Any], *, owner: str | None = None,
                 hint: str = "") -> Any:
    """``value`` if it is one of ``choices``.

    Raises:
        InvalidArgument: not one of them (the message lists them).
    """
    known = list(choices)
    if value not in known:
        listed = ", ".join(repr(c) for c in known)
        raise InvalidArgument(f"{_label(name, value, owner)}: use one of {listed}{f' ({hint})' if hint else ''}")
    return value


class _Renamed:
    """The type of `RENAMED`."""

    def __repr__(self) -> str:
        return "<renamed>"


#: The default of a keyword kept only to refuse its old name: tells "not given" from any value, None too.
RENAMED: Any = _Renamed()


def check_renamed(value: Any, old: str, new: str, *, owner: str, what: str, why: str) -> None:
    """Refuse a keyword given under its old name (whatever its value, None too), naming the new one.

    Args:
        value: what was given as ``old`` (`RENAMED` when nothing was).
        old: the old name.
        new: the name to use.
        owner: the class or function the keyword belongs to.
        what: what the keyword is, for the message (``"the per-call reply cap"``).
        why: why the old name is not it, for the message.

    Raises:
        InvalidArgument: ``old`` was given.
    """
    if value is not RENAMED:
        raise InvalidArgument(f"{owner}({old}={value!r:.40}): {what} is now called {new}; pass "
                              f"{owner}({new}={value!r:.40}) ({why})")


def check_callable(value: Any, name: str, shape: str, *, arity: int | None = None,
                   optional: bool = False, owner: str | None = None) -> Any:
    """``value`` if it is callable (with ``arity`` positional arguments, when given).

    Args:
        value: the callable.
        name: the knob's name.
        shape: how it is called, for the message: ``"reward(task, output) -> float"``.
        arity: positional arguments it must accept (checked when its signature can be read).
        optional: None is accepted.
        owner: the class or function the knob belongs to.

    Raises:
        InvalidArgumentType: not callable, or not callable with ``arity`` arguments.
    """
    if optional and value is None:
        return None
    if not callable(value):
        raise InvalidArgumentType(f"{_label(name, value, owner)} is not callable; pass {shape}")
    if arity is not None:
        check_arity(value, arity, name, shape)
    return value


def check_arity(fn: Callable[..., Any], n: int, name: str, shape: str) -> None:
    """Raise unless ``fn`` accepts ``n`` positional arguments (uninspectable callables pass).

    Raises:
        InvalidArgumentType: ``fn`` cannot be called with ``n`` positional arguments.
    """
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and some C callables cannot be inspected; trust them
    try:
        sig.bind(*range(n))
    except TypeError as exc:
        raise InvalidArgumentType(f"{name} must accept {n} positional arguments: {shape} ({exc})") from None
