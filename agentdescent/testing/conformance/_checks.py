"""What every conformance suite checks with: plain raises, never ``assert``.

``python -O`` strips asserts, and a suite that passes because its checks were compiled
away is worse than no suite; so the suites call `check` and `expect_raises`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["check", "expect_raises"]


def check(condition: bool, message: str) -> None:
    """Raise ``AssertionError(message)`` unless ``condition``."""
    if not condition:
        raise AssertionError(message)


def expect_raises(error: type[BaseException], call: Callable[[], object], what: str) -> Any:
    """Call ``call``; return the ``error`` it raised, else fail naming ``what``."""
    try:
        call()
    except error as exc:
        return exc
    except Exception as exc:
        raise AssertionError(
            f"{what}: expected {error.__name__}, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{what}: expected {error.__name__}, nothing was raised")
