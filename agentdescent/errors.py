"""Every error the package raises, in one tree.

This module owns the error classes and nothing else: it imports no other module of the
package, so every layer can raise from it. Every error the package raises on purpose is
an `AgentDescentError`; a bad argument is an `InvalidArgument` (also a ``ValueError``),
or an `InvalidArgumentType` where its *type* is wrong (also a ``TypeError``). Messages
name the value, the knob, the accepted range and the fix.

The tree::

    AgentDescentError
    ├── ContractError (ValueError)             the caller broke a contract
    │   ├── InvalidArgument                    a bad knob or argument value
    │   │   ├── InvalidArgumentType (TypeError)   ... of the wrong type or shape
    │   │   └── UsageError                     a bad command-line flag or run-directory file
    │   ├── RewardContractError                a reward outside [0, 1], or not a number
    │   ├── ProposalContractError (TypeError)  a proposal neither str nor None
    │   └── EditRefused                        a code edit that does not apply (counted, not fatal)
    ├── GovernanceError (ValueError)           a governance rule (a frozen L0 artifact)
    ├── LedgerError                            the ledger cannot do what was asked
    │   ├── CASConflict                        a compare-and-swap commit lost
    │   ├── LedgerCorrupted                    the file was damaged outside agentdescent
    │   │   └── RunStateDamaged                a run's saved progress is damaged: no resume
    │   ├── LedgerTooNew                       the file was written by a newer agentdescent
    │   ├── LedgerBusy                         another driver holds the artifact's lease
    │   └── LedgerUnavailable                  the ledger's server stayed unreachable past the retry bound
    ├── ProviderError                          a model provider failed (``retryable`` says if
    │   │                                      a later call can help)
    │   ├── ProviderAuthError                  401/403, or no key
    │   ├── ProviderRateLimitError             429 after the provider's own retries
    │   ├── ProviderBadRequestError            400/404/422: the request cannot succeed
    │   ├── ProviderResponseError              a 2xx body that is not a valid reply
    │   ├── ProviderUnavailableError           5xx after retries
    │   │   ├── ProviderTimeoutError           timeouts after retries
    │   │   └── ProviderConnectionError        the endpoint cannot be reached
    │   └── ProviderDependencyError (ImportError)  the provider's SDK is not installed
    ├── DataLoadError                          a dataset could not be fetched or parsed
    ├── SandboxUnavailable                     the isolation a sandbox was asked for is missing here
    └── RunError                               a run's own failures (the engines catch them)
        ├── BackendFailure                     one call failed for good; the run goes on
        ├── RunFailed                          the run cannot go on (``result.error``)
        └── RunTimeout                         the hard deadline passed while waiting

It must not import anything from the package, and must not hold any state.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentDescentError",
    "BackendFailure",
    "CASConflict",
    "ContractError",
    "DataLoadError",
    "EditRefused",
    "GovernanceError",
    "InvalidArgument",
    "InvalidArgumentType",
    "LedgerBusy",
    "LedgerCorrupted",
    "LedgerError",
    "LedgerTooNew",
    "LedgerUnavailable",
    "ProposalContractError",
    "ProviderAuthError",
    "ProviderBadRequestError",
    "ProviderConnectionError",
    "ProviderDependencyError",
    "ProviderError",
    "ProviderRateLimitError",
    "ProviderResponseError",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "RewardContractError",
    "RunError",
    "RunFailed",
    "RunStateDamaged",
    "RunTimeout",
    "SandboxUnavailable",
    "UsageError",
]


class AgentDescentError(Exception):
    """Root of every error the package raises on purpose.

    Catch this to handle anything agentdescent reports; the subclasses say which side is
    at fault (the caller's contract, the ledger, a provider, governance, the run).
    """


# --------------------------------------------------------------------------- the caller's side


class ContractError(AgentDescentError, ValueError):
    """A caller broke the contract of a public function (a bad value or callable)."""


class InvalidArgument(ContractError):
    """A knob or argument has a bad value: the message names it, the accepted values and the fix.

    Raised before anything runs (an engine validates every knob before it opens a ledger
    or makes a call). Also a ``ValueError``.
    """


class InvalidArgumentType(InvalidArgument, TypeError):
    """A knob or argument has the wrong type or shape (a string where a number goes, a bool
    where an int goes, a callable with the wrong arguments). Also a ``TypeError``."""


class UsageError(InvalidArgument):
    """A bad command-line flag, or a missing or malformed run-directory file: exit code 2."""


class RewardContractError(ContractError):
    """A reward function returned something that is not a finite number in [0, 1]."""


class ProposalContractError(ContractError, TypeError):
    """A proposer returned something that is neither ``str`` nor ``None``."""


class EditRefused(ContractError):
    """A proposed code edit that does not apply: a search block not found (or found more
    than once), a path outside the tree, a malformed block.

    A strategy raises it from ``to_diff``; the worker step counts it
    (``counters["edits_refused"]``, and ``RoundInfo.proposals["edits_refused"]``) like a
    refused reply and goes on: it never ends a run.

    Args:
        message: what did not apply and why, naming the path and the block.
        path: the file the edit was for, when known.
        reason: a short kind: ``"not_found"``, ``"ambiguous"``, ``"outside"``,
            ``"excluded"``, ``"malformed"``, ``"no_edit"``, ``"too_big"``; for a file
            tree's paths (`agentdescent.code.paths`) also ``"control"``, ``"too_long"``,
            ``"hidden"``, ``"ignored"``, ``"shadowing"``, ``"through_file"``,
            ``"names_folder"``, ``"symlink"``, ``"untracked"``, ``"unchecked"``; and
            ``"machinery"`` for code that reaches into the test runner
            (`agentdescent.code.machinery`).
    """

    def __init__(self, message: str, *, path: str | None = None, reason: str = "malformed") -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


class GovernanceError(AgentDescentError, ValueError):
    """An operation would break a governance rule (for example evolving a frozen L0 artifact)."""


# --------------------------------------------------------------------------- the ledger


class LedgerError(AgentDescentError):
    """The ledger cannot do what was asked: unknown artifact, unreadable file, bad state."""


class CASConflict(LedgerError):
    """A compare-and-swap commit lost: the head moved past the caller's base version.

    Attributes:
        artifact_id: the artifact whose head moved.
        base_version: the version the caller built on.
        head_version: the version the ledger holds now.
    """

    def __init__(self, artifact_id: str, base_version: int, head_version: int) -> None:
        self.artifact_id = artifact_id
        self.base_version = base_version
        self.head_version = head_version
        super().__init__(
            f"compare-and-swap lost on artifact {artifact_id!r}: built on version "
            f"{base_version}, but the head is now version {head_version}; re-read the head "
            "and re-apply the diff"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.artifact_id, self.base_version, self.head_version))


class LedgerCorrupted(LedgerError):
    """A ledger file was damaged outside agentdescent: a version, the head or the file itself.

    Raised when a file is opened (a missing or altered version, a head that is not the
    last version, a 0-byte or truncated file) and when a damaged row is read or built
    on later. The file is left as it was. The message names the file, each artifact and
    version, what is missing or altered, and how to salvage what is intact.

    Attributes:
        path: the ledger file, when there is one.
        problems: one line per problem found (artifact, version, what is wrong).
    """

    def __init__(self, message: str, *, path: str | None = None, problems: tuple[str, ...] = ()) -> None:
        self.path = path
        self.problems = tuple(problems)
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_corrupted, (type(self), str(self), self.path, self.problems))


def _rebuild_corrupted(cls: type[LedgerCorrupted], message: str, path: str | None,
                       problems: tuple[str, ...]) -> LedgerCorrupted:
    return cls(message, path=path, problems=problems)


class RunStateDamaged(LedgerCorrupted):
    """A run's saved progress is damaged (its saved state or a saved round does not match
    its digest or is not UTF-8 text, a saved round is missing, or rounds are there without
    the state they belong to), so the run cannot resume as is.

    The artifact's versions are not affected. The message says what is missing and the
    ways on: start over with ``resume=False`` (on the same head) or use a new ledger.
    """


class LedgerTooNew(LedgerError):
    """The ledger file was written by a newer agentdescent (a newer schema than this one reads).

    Nothing was changed in the file. Upgrade agentdescent to open it.

    Attributes:
        path: the ledger file.
        found: the schema version the file holds.
        supported: the newest schema version this agentdescent reads.
    """

    def __init__(self, message: str, *, path: str | None = None, found: int | None = None,
                 supported: int | None = None) -> None:
        self.path = path
        self.found = found
        self.supported = supported
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_too_new, (type(self), str(self), self.path, self.found, self.supported))


def _rebuild_too_new(cls: type[LedgerTooNew], message: str, path: str | None, found: int | None,
                     supported: int | None) -> LedgerTooNew:
    return cls(message, path=path, found=found, supported=supported)


class LedgerBusy(LedgerError):
    """Another live driver holds the lease on this (ledger file, artifact) pair.

    Raised at once when a run opens (nothing was read or written for it), and when a
    running driver finds at its next write (a commit or a save) that its lease was taken
    over, whether the taker still holds it or has released it since (nothing of that write
    lands, and the run stops with it). The message names the holder (``host:pid:start
    time``), its run id, how long ago it renewed its heartbeat or took the lease over, and
    the ways on: wait for it, or give each driver its own run id to share the artifact.

    Attributes:
        path: the ledger file.
        artifact_id: the artifact asked for.
        holder: the holder's id, ``host:pid:start time`` (with ``pid`` and ``host`` None
            when the file does not say: a lost lease whose row was deleted with no note of
            a takeover).
        pid: the holder's process id.
        host: the holder's host name.
        run_id: the holder's run id (``""`` for an unshared driver).
    """

    def __init__(self, message: str, *, path: str | None = None, artifact_id: str | None = None,
                 holder: str | None = None, pid: int | None = None, host: str | None = None,
                 run_id: str | None = None) -> None:
        self.path = path
        self.artifact_id = artifact_id
        self.holder = holder
        self.pid = pid
        self.host = host
        self.run_id = run_id
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {"path": self.path, "artifact_id": self.artifact_id, "holder": self.holder,
                  "pid": self.pid, "host": self.host, "run_id": self.run_id}
        return (_rebuild_busy, (type(self), str(self), fields))


def _rebuild_busy(cls: type[LedgerBusy], message: str, fields: dict[str, Any]) -> LedgerBusy:
    return cls(message, **fields)


class LedgerUnavailable(LedgerError):
    """The ledger's database server could not be reached, and retrying for the bound did not help.

    Raised by `agentdescent.ledger.PostgresLedger` once its bounded retries are spent (the server
    is down, restarting, or unreachable), and at once when the connection is lost in the middle
    of a block of writes (`agentdescent.ledger.Ledger.atomic`), which cannot be replayed: none of
    the block landed, unless the connection was lost while the block was committing, when the
    message says its outcome is unknown. A run stopped by it is resumable: its saved progress
    and the artifact's versions are as the last whole write left them.

    Attributes:
        where: the database, as a DSN without its password.
        attempts: the connection attempts made.
        seconds: how long they took.
        outcome_unknown: True when the connection was lost while a transaction was committing.
    """

    def __init__(self, message: str, *, where: str | None = None, attempts: int = 0, seconds: float = 0.0,
                 outcome_unknown: bool = False) -> None:
        self.where = where
        self.attempts = attempts
        self.seconds = seconds
        self.outcome_unknown = outcome_unknown
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {"where": self.where, "attempts": self.attempts, "seconds": self.seconds,
                  "outcome_unknown": self.outcome_unknown}
        return (_rebuild_unavailable, (type(self), str(self), fields))


def _rebuild_unavailable(cls: type[LedgerUnavailable], message: str, fields: dict[str, Any]) -> LedgerUnavailable:
    return cls(message, **fields)


# --------------------------------------------------------------------------- providers


class ProviderError(AgentDescentError):
    """A model provider failed: authentication, rate limit, bad request or unavailability.

    Every provider error says whether trying the same call again can help, so that the
    engines never retry what cannot succeed and never multiply the provider's own retries.

    Attributes:
        retryable: True when the failure is transient (rate limit, 5xx, timeout) and the
            provider gave up only because its own retry bound ran out: a later call may
            succeed. False when the same request cannot succeed (rejected key, bad
            request, unknown model, unreachable endpoint): the engines end the run at once.
        model: the model the failed call asked for, when known.
        endpoint: the base URL the call went to (credentials and query stripped), when known.
        status_code: the HTTP status of the last response, when there was one.
        attempts: how many requests were sent before giving up, when known.
        retry_after: seconds the server asked to wait (429/503), when it said.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str = "",
        *,
        model: str | None = None,
        endpoint: str | None = None,
        status_code: int | None = None,
        attempts: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.endpoint: str | None = endpoint
        self.status_code = status_code
        self.attempts = attempts
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        fields = {"model": self.model, "endpoint": self.endpoint, "status_code": self.status_code,
                  "attempts": self.attempts, "retry_after": self.retry_after}
        return (_rebuild_provider_error, (type(self), str(self), fields))


def _rebuild_provider_error(cls: type[ProviderError], message: str, fields: dict[str, Any]) -> ProviderError:
    return cls(message, **fields)


class ProviderAuthError(ProviderError):
    """The endpoint rejected the credentials (HTTP 401/403), or no key was configured.

    Never retried (``retryable`` is False): a wrong key does not become right by waiting.
    """

    retryable = False


class ProviderRateLimitError(ProviderError):
    """HTTP 429 persisted through every retry the provider allows.

    ``retryable`` is True: the engines may try a later call, and the provider itself
    already honoured ``Retry-After`` and backed off.
    """

    retryable = True


class ProviderBadRequestError(ProviderError):
    """The endpoint refused the request itself (400, 404, 422: bad model name, bad parameter).

    ``retryable`` is False: the same request fails the same way.
    """

    retryable = False


class ProviderUnavailableError(ProviderError):
    """The endpoint kept failing on the server side (5xx) through every retry.

    ``retryable`` is True: a later call may succeed once the server recovers.
    """

    retryable = True


class ProviderTimeoutError(ProviderUnavailableError):
    """Every attempt timed out (the provider's per-request timeout, retried).

    ``retryable`` is True.
    """

    retryable = True


class ProviderConnectionError(ProviderUnavailableError):
    """The endpoint could not be reached at all (refused, unknown host, unreachable network).

    ``retryable`` is False: after the provider's short connection retries, nothing is
    listening there, which waiting longer does not fix (a wrong ``base_url`` fails fast).
    """

    retryable = False


class ProviderResponseError(ProviderError):
    """The endpoint answered 2xx with a body that is not a valid reply (bad JSON, no choices).

    ``retryable`` is False: the endpoint is not speaking the expected API.
    """

    retryable = False


class ProviderDependencyError(ProviderError, ImportError):
    """A provider's SDK (an optional extra) is not installed.

    Also an `ImportError`, so code that guards optional imports the usual way catches it.
    ``retryable`` is False.
    """

    retryable = False


# --------------------------------------------------------------------------- data


class DataLoadError(AgentDescentError):
    """A dataset could not be fetched or parsed: the server said no, or sent something unreadable.

    Raised only after the bounded retries are used up (for 429, 5xx and connection
    errors) or at once (for other HTTP errors and malformed bodies). Nothing is written
    to the cache when it is raised.

    Attributes:
        url: the full URL of the request that failed.
        status: the HTTP status of the last response, or ``None`` when no response came
            (connection refused, timeout) or the response was 2xx but unreadable.
    """

    def __init__(self, message: str, url: str | None = None, status: int | None = None) -> None:
        self.url = url
        self.status = status
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keep url/status across pickling (process pools, dask) - the default drops them.
        return (type(self), (str(self), self.url, self.status))


# --------------------------------------------------------------------------- a run's own


class SandboxUnavailable(AgentDescentError):
    """The isolation a `agentdescent.code.Sandbox` was asked to require is not available here.

    Raised before anything runs, naming what is missing (Landlock, a network namespace)
    and the way on: run on a platform that has it, or drop ``require_isolation``.
    """


class RunError(AgentDescentError):
    """What a run raises inside itself; the engines catch it and end the run cleanly."""


class BackendFailure(RunError):
    """One backend call (rollout, proposal, self-verify, evaluation) failed for good.

    The run goes on without that call's result; the failure rule (`agentdescent.failures`)
    says when failures end the run.
    """


class RunFailed(RunError):
    """The run cannot go on: a failure that retrying cannot fix, or too many in a row.

    The engines catch it and return the result with ``error`` set to its message and
    every commit already made intact.
    """


class RunTimeout(RunError):
    """The run's hard deadline (``max_seconds + grace_seconds``) passed while it waited."""
