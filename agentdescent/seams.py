"""How a seam accepts an implementation: subclass its base class, or bring any object with its required members.

Every seam of the package (`agentdescent.budget.allocator.AllocatorPolicy`,
`agentdescent.merge.aggregator.Evaluator`, `agentdescent.model.Provider`, the ledger, the
clock...) is a small base class: its **required** members are
named in one tuple (``REQUIRED``), its **optional** ones (``OPTIONAL``) are declared on
the class with a default. A subclass inherits the defaults. A duck-typed object (one that
does not subclass the base) is accepted too: `adopt` checks it against ``REQUIRED`` (the
same tuple writes the error message) and wraps it so the optional members it lacks come
from the base class, while the ones it has are its own. Nothing in the package looks for
an optional member with ``getattr`` afterwards: the wrapper always has it.

It must not import anything of the package but `agentdescent.errors`.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, TypeVar

from .errors import InvalidArgumentType

__all__ = ["Seam", "adopt", "unwrap"]

S = TypeVar("S", bound="Seam")


class Seam:
    """The base of every seam: ``REQUIRED`` members an implementation must have, ``OPTIONAL`` ones with defaults.

    Subclasses list their members by name; `adopt` reads the two tuples. An attribute
    that is required but not callable (``StalenessPolicy.name``) is listed in
    ``REQUIRED_ATTRIBUTES`` instead.
    """

    #: Methods an implementation must have.
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    #: Non-callable attributes an implementation must have.
    REQUIRED_ATTRIBUTES: ClassVar[tuple[str, ...]] = ()
    #: Members with a default on the base class; an implementation may override them.
    OPTIONAL: ClassVar[tuple[str, ...]] = ()


def missing_members(obj: Any, base: type[Seam]) -> list[str]:
    """The required members ``obj`` lacks, as ``"name()"`` for methods and ``"name"`` for attributes."""
    missing = [f"{name}()" for name in base.REQUIRED if not callable(getattr(obj, name, None))]
    missing += [name for name in base.REQUIRED_ATTRIBUTES if not hasattr(obj, name)]
    return missing


def adopt(obj: Any, base: type[S], knob: str, fix: str = "") -> S:
    """``obj`` as an implementation of ``base``: itself if it subclasses it, else a wrapper.

    Args:
        obj: the user's object.
        base: the seam's base class.
        knob: the argument it came in as, for the message (``"allocator"``).
        fix: another way out, added to the message (``"wrap a function with from_callable"``).

    Raises:
        InvalidArgumentType: ``obj`` lacks a required member (the message lists every
            member it lacks, every one required, and how to inherit the optional ones).
    """
    if isinstance(obj, base):
        return obj
    missing = missing_members(obj, base)
    if missing:
        required = [f"{n}()" for n in base.REQUIRED] + list(base.REQUIRED_ATTRIBUTES)
        optional = f"; optional, with defaults: {', '.join(base.OPTIONAL)}" if base.OPTIONAL else ""
        raise InvalidArgumentType(
            f"{knob}={obj!r:.100} is not a {base.__name__}: it lacks {', '.join(missing)}. A "
            f"{base.__name__} needs {', '.join(required)}{optional}. Give an object with those "
            f"members, or subclass {_public_path(base)}" + (f"; or {fix}" if fix else "")
        )
    return _adapter(base)(obj)


def _public_path(base: type) -> str:
    return f"agentdescent.{base.__name__}" if base.__module__.startswith("agentdescent") else base.__qualname__


def unwrap(obj: Any) -> Any:
    """The user's own object behind an `adopt` wrapper (``obj`` itself if it is not one)."""
    return obj.wrapped if isinstance(obj, _Adapted) else obj


class _Adapted:
    """Marker base of the wrappers `adopt` builds."""

    wrapped: Any


class _Forward:
    """A member of a wrapper: the wrapped object's own if it has one, else the base class's default."""

    def __init__(self, name: str, base: type[Seam]) -> None:
        self.name = name
        self.base = base

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        inner = instance.__dict__["wrapped"]
        try:
            return getattr(inner, self.name)
        except AttributeError:
            default = getattr(self.base, self.name)
            return default.__get__(instance, owner) if hasattr(default, "__get__") else default


@functools.cache
def _adapter(base: type[Seam]) -> type:
    def __init__(self: Any, inner: Any) -> None:
        self.__dict__["wrapped"] = inner

    def __getattr__(self: Any, name: str) -> Any:  # anything else the user's object carries
        return getattr(self.__dict__["wrapped"], name)

    def __repr__(self: Any) -> str:
        return repr(self.__dict__["wrapped"])

    namespace: dict[str, Any] = {
        "__init__": __init__, "__getattr__": __getattr__, "__repr__": __repr__,
        "__doc__": f"A duck-typed {base.__name__}, with the base class's defaults for what it lacks.",
    }
    for name in (*base.REQUIRED, *base.REQUIRED_ATTRIBUTES, *base.OPTIONAL):
        namespace[name] = _Forward(name, base)
    return type(f"Adopted{base.__name__}", (_Adapted, base), namespace)
