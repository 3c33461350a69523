"""The failure rules, as pure functions: what to do with one failed attempt, and how long to back off.

This module owns two decisions and nothing else:

- `judge`: a run's call failed; retry it, drop it (the run goes on without it), end the
  run, or let the error propagate. A `ProviderError` is never retried here (the provider
  already did, with backoff): one that is not ``retryable`` ends the run at once, a
  retryable one is dropped. A call an executor already re-ran after worker deaths (Dask's
  ``KilledWorker``) is dropped too. A contract or governance error, or the run's own end,
  propagates. Anything else is retried until ``call_attempts`` attempts are spent, then
  dropped. `ends_run` says when dropped calls in a row of one phase end the run.
- `backoff_delay`: how long a provider or the dataloader waits before its next attempt
  (``Retry-After`` when the server said, else exponential, capped, optionally jittered).

It keeps no state and reads no clock: the run's call runner
(`agentdescent.engine.executors.CallRunner`) counts failures in a row and applies these rules,
the providers and the dataloader wait through their clock.
"""

from __future__ import annotations

import enum

from .errors import ContractError, GovernanceError, ProviderError, RunError

__all__ = ["Verdict", "backoff_delay", "ends_run", "judge"]


class Verdict(str, enum.Enum):
    """What to do with one failed attempt of a call."""

    #: Try the same call again.
    RETRY = "retry"
    #: The call failed for good; the run goes on without its result.
    DROP = "drop"
    #: The run cannot go on (retrying cannot fix this failure).
    END_RUN = "end-run"
    #: Not a backend failure: the caller's contract, a governance rule or the run's own end.
    PROPAGATE = "propagate"


def judge(exc: BaseException, attempt: int, call_attempts: int, *, rerun_by_executor: bool = False) -> Verdict:
    """The verdict on attempt ``attempt`` (1-based) of a call that raised ``exc``.

    Args:
        exc: what the attempt raised.
        attempt: which attempt it was.
        call_attempts: the attempts a call that raises something other than a
            `ProviderError` gets in all.
        rerun_by_executor: the executor already re-ran the call after worker deaths and
            gave up (Dask's ``KilledWorker``): never run it a second time.
    """
    if isinstance(exc, (ContractError, GovernanceError, RunError)):
        return Verdict.PROPAGATE
    if isinstance(exc, ProviderError):
        return Verdict.DROP if exc.retryable else Verdict.END_RUN
    if rerun_by_executor:
        return Verdict.DROP
    return Verdict.RETRY if attempt < call_attempts else Verdict.DROP


def ends_run(failures_in_a_row: int, failure_limit: int) -> bool:
    """True once ``failure_limit`` calls of one phase in a row were dropped."""
    return failures_in_a_row >= failure_limit


def backoff_delay(attempt: int, *, initial: float, cap: float, retry_after: float | None = None,
                  jitter: float | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1``, after attempt ``attempt`` (1-based) failed.

    ``retry_after`` (what the server asked for) wins. Otherwise the wait doubles per
    attempt from ``initial``, capped at ``cap``; with ``jitter`` (a draw in [0, 1)) it is
    "equal jitter": between half and all of that, so a herd of workers that failed
    together spreads out without any of them hammering the server at once.
    """
    if retry_after is not None:
        return max(0.0, float(retry_after))
    base = min(cap, initial * (2 ** (attempt - 1)))
    if jitter is None:
        return base
    return base * (0.5 + 0.5 * jitter)
