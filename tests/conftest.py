"""Test-suite wiring: a test that needs an optional extra that is not installed is skipped, saying which.

The README's test command installs every extra, so in CI nothing is skipped. On a machine
with only some extras, a test that reaches a missing SDK (the package raises
`agentdescent.errors.ProviderDependencyError`, or an ``ImportError`` naming the module)
is reported as skipped with the extra to install, instead of failing.

Hypothesis runs without its per-example deadline (200 ms by default) and without its
too-slow health check: both are wall-clock bounds, which fail a property test on a busy
machine for no fault of the code. Tests assert behaviour; speed is measured in bench/.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentdescent.errors import ProviderDependencyError

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - the dev extra is not installed: no property test runs
    pass
else:
    settings.register_profile("agentdescent", deadline=None, suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("agentdescent")

#: Optional modules and the extra that installs each.
EXTRAS = {"openai": "openai", "anthropic": "anthropic", "httpx": "hf", "httpx2": "openai",
          "distributed": "dask", "dask": "dask", "matplotlib": "bench"}


@pytest.hookimpl(hookwrapper=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> Iterator[None]:
    outcome = yield
    exc = outcome.excinfo[1] if outcome.excinfo else None
    if exc is None:
        return
    missing = _missing_module(exc)
    if missing is not None:
        outcome.force_exception(pytest.skip.Exception(
            f"needs the optional {missing!r} package: pip install -e \".[{EXTRAS[missing]}]\"", _use_item_location=True))


def _missing_module(exc: BaseException) -> str | None:
    if isinstance(exc, ProviderDependencyError):
        for name in EXTRAS:
            if f"the {name!r} package" in str(exc):
                return name
    if isinstance(exc, ModuleNotFoundError) and exc.name in EXTRAS:
        return exc.name
    return None


# --------------------------------------------------------------------------- a real PostgreSQL server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """One throwaway PostgreSQL server for the session (`agentdescent.testing.pgcluster.PostgresCluster`).

    Never skipped: where no server can start, the tests that need one fail with the way to
    install one (`PostgresUnavailable`'s message); `.ci/run` installs Debian's package.
    """
    from agentdescent.testing.pgcluster import PostgresCluster, PostgresUnavailable

    try:
        server = PostgresCluster()
    except PostgresUnavailable as exc:
        pytest.fail(f"the PostgreSQL tests need a server and none could start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.close()
