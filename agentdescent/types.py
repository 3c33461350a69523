"""The data model every other module speaks: tasks, diffs, evidence cards, merge reports, hashing.

This module owns plain values, their JSON round trips, and the two helpers every value
passes through: `stable_hash` (the process-independent hash behind every partition, seed
and content address) and `sanitize_text` (text that encodes as UTF-8). It must not import
any module of the package but `agentdescent.errors`, `agentdescent.validation` and
`agentdescent.fate` (the card fates a report carries), hold
state, or do I/O: everything here is safe to build in any thread and to serialise as JSON.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import EditRefused, InvalidArgument, InvalidArgumentType
from .fate import CardFate
from .textedits import apply_edits

__all__ = [
    "Diff",
    "EvidenceCard",
    "MergeOutcome",
    "MergeReport",
    "Task",
    "apply_ops",
    "clip_middle",
    "number_spans",
    "one_line",
    "sanitize_text",
    "stable_hash",
    "vv_staleness",
]


# --------------------------------------------------------------------------- helpers


def number_spans(numbers: list[int], most: int | None = None) -> str:
    """``[0, 1, 2, 7, 9, 10]`` -> ``"0-2, 7, 9-10"`` (``"none"`` for no number), for messages.

    With ``most``, at most that many spans are written, and how many more there are.
    """
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and spans[-1][1] + 1 == n:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    shown = spans if most is None else spans[:most]
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in shown) or "none"
    return text + (f", ... ({len(spans) - len(shown)} more spans)" if len(shown) < len(spans) else "")


def one_line(text: object, limit: int = 0) -> str:
    """``text`` on one line (white space collapsed), cut to ``limit`` characters with ``...`` (0: no limit)."""
    flat = " ".join(str(text).split())
    return flat if not limit or len(flat) <= limit else flat[: limit - 3] + "..."


def clip_middle(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, its head and tail kept, a marker saying how much went."""
    if len(text) <= limit:
        return text
    head = limit // 2
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[len(text) - (limit - head):]}"


def sanitize_text(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate replaced by U+FFFD.

    A model reply may carry half of a surrogate pair (``"\\ud83d"``); such a string cannot
    be encoded as UTF-8, so it would break a hash, a diff, a JSON file or the ledger far
    from where it came in. The engines and the provider adapters pass every reply through
    this once, at the boundary. Valid pairs are kept as the character they encode.

    Args:
        text: any string.

    Returns:
        A string that encodes as UTF-8 (``text`` itself when it already does).
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def stable_hash(*parts: object, bits: int = 64) -> int:
    """A process-independent hash of ``parts`` (blake2b over their ``repr``/``str``).

    Python's ``hash()`` of a string changes between processes; every partition, seed
    and content address in the package goes through this function instead so that runs
    repeat bit for bit.

    Args:
        *parts: values joined by an unambiguous separator; strings are used as is,
            anything else through ``repr``.
        bits: width of the result, a multiple of 8 up to 512.

    Returns:
        A non-negative integer below ``2**bits``.
    """
    if isinstance(bits, bool) or not isinstance(bits, int) or bits <= 0 or bits % 8 or bits > 512:
        raise InvalidArgument(f"stable_hash(bits={bits!r}): use a multiple of 8 between 8 and 512")
    h = hashlib.blake2b(digest_size=bits // 8)
    for part in parts:
        text = part if isinstance(part, str) else repr(part)
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return int.from_bytes(h.digest(), "big")


def vv_staleness(head: Mapping[str, int], base: Mapping[str, int]) -> int:
    """Version-vector staleness: how many versions the head has moved past ``base``.

    Args:
        head: artifact id -> current head version.
        base: artifact id -> the version a diff was built on.

    Returns:
        ``max(head[k] - base[k])`` over the keys of ``base`` (an artifact missing from
        ``head`` counts as not moved); 0 for an empty base.
    """
    if not base:
        return 0
    return max(max(0, int(head.get(k, v)) - int(v)) for k, v in base.items())


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def apply_ops(state: Mapping[str, str], ops: Mapping[str, str | None]) -> dict[str, str]:
    """Return a new state with ``ops`` applied: a string writes the key, ``None`` deletes it."""
    new = dict(state)
    for key, value in ops.items():
        if value is None:
            new.pop(key, None)
        else:
            new[key] = value
    return new


# --------------------------------------------------------------------------- values

#: True while `Diff.from_json` rebuilds a stored diff, which may be empty (see `Diff`).
_LOADING_STORED: contextvars.ContextVar[bool] = contextvars.ContextVar("agentdescent_loading_stored_diff",
                                                                        default=False)


@dataclass(frozen=True)
class Task:
    """One unit of work a worker rolls out against the artifact.

    Equality and hash use ``id`` only, so a task can key dictionaries and sets even
    when ``meta`` holds unhashable values.

    Args:
        id: unique, stable identifier (duplicates are rejected by the engines).
        prompt: the input the agent sees.
        meta: anything the reward or the agent needs (gold answers, labels...).

    Raises:
        InvalidArgumentType: ``id`` or ``prompt`` is not a ``str``, or ``meta`` is not a mapping.
        InvalidArgument: ``id`` is empty, or a text holds a lone surrogate.
    """

    id: str
    prompt: str = field(compare=False)
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str):
            raise InvalidArgumentType(f"Task(id={self.id!r}): use a non-empty str")
        if not self.id:
            raise InvalidArgument("Task(id=''): use a non-empty str (ids key the held-out cache and the ledger)")
        if not isinstance(self.prompt, str):
            raise InvalidArgumentType(
                f"Task {self.id!r}: prompt must be a str, got {type(self.prompt).__name__}"
            )
        if not isinstance(self.meta, Mapping):
            raise InvalidArgumentType(
                f"Task {self.id!r}: meta={self.meta!r:.60} must be a mapping (a dict of what the "
                "reward or the agent needs, such as {'answer': ...})"
            )
        for what, text in (("id", self.id), ("prompt", self.prompt)):
            if not _encodes(text):
                raise InvalidArgument(
                    f"Task {self.id!r:.60}: its {what} holds a lone surrogate, which no file or database "
                    "can store; clean it with agentdescent.types.sanitize_text"
                )


@dataclass(frozen=True)
class Diff:
    """A proposed change to one artifact: key writes (``str``) and deletions (``None``).

    Args:
        diff_id: unique id of this proposal (content-derived by the strategies).
        target: the artifact id the diff applies to.
        ops: key -> new value, or ``None`` to delete the key.
        contract_breaking: the change alters an interface others rely on; a stale
            contract-breaking diff is discarded under every staleness policy.
        author: who proposed it (a worker id, "fusion", ...), for audit only.
        edits: key -> the ``(search, replace)`` edits that made its written value from
            the value the diff was built on (`agentdescent.textedits`), for writes a code
            edit made; empty for whole writes. `apply` re-applies them to a newer value
            of the key (a rebase: another diff's change to the same file is kept), and
            two edited writes of one key fuse when their edits are disjoint
            (`agentdescent.textedits.merge_writes`).

    An empty diff (``ops={}``) is refused when it is built. It changes nothing, yet it
    would pass through the staleness check, fusion and the paired test as a candidate; a
    strategy that means "nothing to change" returns None from ``to_diff``. The package
    itself never builds one: every shipped strategy and `agentdescent.code.FileTree`
    return None when no key changes, and a fusion's union (`agentdescent.merge.fusion`)
    holds its members' ops, each non-empty. The one exception is `from_json`: a diff an
    older agentdescent stored empty (in a saved evidence pool or merge report) still
    loads, so a ledger written before this check resumes; such a diff is a no-op on any
    head, so the merge skips it before fusion.

    Raises:
        InvalidArgumentType: an id, the target or the author is not a non-empty ``str``, an
            op key is not a ``str``, an op value is neither ``str`` nor ``None``, or
            ``edits`` is not key -> a list of ``(str, str)`` pairs for a key ``ops`` writes.
        InvalidArgument: ``ops`` is empty.
    """

    diff_id: str
    target: str
    ops: dict[str, str | None]
    contract_breaking: bool = False
    author: str = "unknown"
    edits: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("diff_id", "target", "author"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise InvalidArgumentType(f"Diff({name}={value!r}): use a non-empty str")
        if not isinstance(self.contract_breaking, bool):
            raise InvalidArgumentType(f"Diff(contract_breaking={self.contract_breaking!r}): use True or False")
        if not isinstance(self.ops, Mapping):
            raise InvalidArgumentType(f"Diff {self.diff_id!r}: ops must be a dict, got {type(self.ops).__name__}")
        if not self.ops and not _LOADING_STORED.get():
            raise InvalidArgument(
                f"Diff {self.diff_id!r}: ops={{}} changes nothing; a diff writes or deletes at least one "
                "key. To propose no change, return None from Strategy.to_diff"
            )
        for key, value in self.ops.items():
            if not isinstance(key, str):
                raise InvalidArgumentType(f"Diff {self.diff_id!r}: op key {key!r} must be a str")
            if value is not None and not isinstance(value, str):
                raise InvalidArgumentType(
                    f"Diff {self.diff_id!r}: op {key!r} has a {type(value).__name__} value; "
                    "use a str to write the key or None to delete it"
                )
        object.__setattr__(self, "ops", dict(self.ops))
        object.__setattr__(self, "edits", self._checked_edits())

    def _checked_edits(self) -> dict[str, tuple[tuple[str, str], ...]]:
        if not isinstance(self.edits, Mapping):
            raise InvalidArgumentType(f"Diff {self.diff_id!r}: edits must be a dict, got {type(self.edits).__name__}")
        out: dict[str, tuple[tuple[str, str], ...]] = {}
        for key, pairs in self.edits.items():
            if not isinstance(self.ops.get(key), str):
                raise InvalidArgumentType(
                    f"Diff {self.diff_id!r}: edits for {key!r}, which ops does not write; give edits "
                    "only for keys the diff writes")
            checked = tuple(tuple(p) for p in pairs if isinstance(p, (list, tuple))) if isinstance(pairs, (list, tuple)) else ()
            if not checked or len(checked) != len(pairs) or not all(
                    len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str) for p in checked):
                raise InvalidArgumentType(
                    f"Diff {self.diff_id!r}: edits for {key!r} must be a non-empty list of (search, "
                    "replace) pairs of str")
            out[key] = checked
        return out

    def size(self) -> int:
        """Number of keys the diff touches."""
        return len(self.ops)

    def chars(self) -> int:
        """Total characters the diff writes (its payload size for the trust region).

        An edited write counts its edits (search and replace text), not the whole value.
        """
        return sum(len(k) + (sum(len(s) + len(r) for s, r in self.edits[k]) if k in self.edits else len(v or ""))
                   for k, v in self.ops.items())

    def apply(self, state: Mapping[str, str]) -> dict[str, str]:
        """Return ``state`` with this diff's ops applied (``state`` is not modified).

        An edited write (`edits`) re-applies its edits to the key's value in ``state``
        when they apply there (on the state the diff was built on, that gives the written
        value; on a newer one, it keeps the other changes to that value); when they do not
        apply, the written value replaces it whole.
        """
        if not self.edits:
            return apply_ops(state, self.ops)
        ops = dict(self.ops)
        for key, pairs in self.edits.items():
            current = state.get(key)
            if current is not None:
                with contextlib.suppress(EditRefused):  # the edits no longer apply: the written value
                    ops[key] = apply_edits(current, pairs, path=key)
        return apply_ops(state, ops)

    def is_noop(self, state: Mapping[str, str]) -> bool:
        """True when applying the diff to ``state`` would change nothing."""
        new = self.apply(state) if self.edits else None
        return all(state.get(k) == (new.get(k) if new is not None else v) for k, v in self.ops.items())

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the diff."""
        return {
            "diff_id": self.diff_id,
            "target": self.target,
            "ops": dict(self.ops),
            "contract_breaking": self.contract_breaking,
            "author": self.author,
            **({"edits": {k: [list(p) for p in v] for k, v in self.edits.items()}} if self.edits else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Diff:
        """Rebuild a diff from `to_json` output (an empty one too: what an older agentdescent stored)."""
        token = _LOADING_STORED.set(True)
        try:
            return cls(
                diff_id=data["diff_id"],
                target=data["target"],
                ops=dict(data["ops"]),
                contract_breaking=bool(data.get("contract_breaking", False)),
                author=data.get("author", "unknown"),
                edits={k: tuple(tuple(p) for p in v) for k, v in (data.get("edits") or {}).items()},
            )
        finally:
            _LOADING_STORED.reset(token)


@dataclass
class EvidenceCard:
    """A diff plus the evidence behind it: the "gradient" a worker sends to the aggregator.

    Args:
        diff: the proposed change.
        base_version: artifact id -> the version the diff was built on.
        before_after_delta: self-verify result (reward after the patch minus before) on
            the task that prompted the proposal; ``None`` when never measured, ``0.0``
            when the budget skipped the self-verify rollout.
        advantage: group-relative z-score of the prompting rollout's reward among the
            rollouts of the same base version (known before any optional spend).
        trajectory_refs: the tasks whose rollouts back the proposal.
        cost_tokens: tokens spent producing the card.
        self_verified: the self-verify rollout actually ran (so ``before_after_delta`` is
            a measurement, not the 0.0 a skipped self-verify records).
        allocated: the budget's allocator judged the candidate worth its held-out evaluation
            (and its self-verify); a candidate none of whose cards is allocated is not
            evaluated, so not committed. Always True without a budget, and without an
            allocator (the spend floors alone refuse only the self-verify).
        feedback: what the reward said about the prompting rollout (a
            `agentdescent.rewards.builtin.Score`'s feedback; '' for a float reward): it reached the
            proposal request, and a commit's metadata keeps it.
        proposal_kind: how the diff was proposed: ``"model"`` (a rule, rewrite or edit the
            agent wrote), ``"labeled"`` or ``"bootstrapped"`` (a train task shown as a
            demonstration: see `agentdescent.engine.demos`); ``""`` when not said.
    """

    diff: Diff
    base_version: dict[str, int]
    before_after_delta: float | None
    advantage: float | None
    trajectory_refs: list[Task] = field(default_factory=list)
    cost_tokens: int = 0
    self_verified: bool = False
    allocated: bool = True
    feedback: str = ""
    proposal_kind: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the trajectory tasks by id)."""
        return {
            "diff": self.diff.to_json(), "base_version": dict(self.base_version),
            "before_after_delta": self.before_after_delta, "advantage": self.advantage,
            "trajectory_refs": [t.id for t in self.trajectory_refs], "cost_tokens": self.cost_tokens,
            "self_verified": self.self_verified, "allocated": self.allocated, "feedback": self.feedback,
            "proposal_kind": self.proposal_kind,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], tasks: Mapping[str, Task]) -> EvidenceCard:
        """Rebuild a card from `to_json` output; ``tasks`` maps ids back to tasks (unknown ids drop)."""
        return cls(
            diff=Diff.from_json(data["diff"]), base_version={str(k): int(v) for k, v in data["base_version"].items()},
            before_after_delta=data["before_after_delta"], advantage=data["advantage"],
            trajectory_refs=[tasks[i] for i in data["trajectory_refs"] if i in tasks],
            cost_tokens=int(data["cost_tokens"]), self_verified=bool(data["self_verified"]),
            allocated=bool(data["allocated"]), feedback=str(data.get("feedback", "")),
            proposal_kind=str(data.get("proposal_kind", "")),
        )


class MergeOutcome(str, enum.Enum):
    """How one merge decision ended."""

    COMMITTED = "committed"
    BELOW_THRESHOLD = "below-threshold"
    ORACLE_REJECTED = "oracle-rejected"
    CAS_CONFLICT = "cas-conflict"
    ALL_STALE = "all-stale"
    OVERSIZED = "oversized"

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value

    @property
    def measured(self) -> bool:
        """True for the outcomes that evaluated a candidate (and so train the allocator)."""
        return self not in (MergeOutcome.ALL_STALE, MergeOutcome.OVERSIZED)


@dataclass
class MergeReport:
    """The record of one merge decision for one artifact.

    Args:
        artifact_id: the artifact merged into.
        outcome: how the decision ended.
        accepted: the candidate: the diff that went to the acceptance test, committed or
            not (the name is the contract's; `to_json` writes it as ``"candidate"``), or
            None when nothing was measured.
        fused: the candidate was a union of several diffs.
        considered: cards that entered the decision.
        discarded_stale: cards dropped by the staleness policy (their evidence is pooled).
        conflicts_dropped: cards dropped as the weaker side of a contradiction.
        p_improve: the paired test's confidence ``1 - 1/E`` (E its e-value), when measured.
        committed_version: the new head version on commit.
        reason: a sentence saying why the decision went this way.
        feedback: the reward's feedback on the rollouts the candidate's cards were
            proposed from (what prompted the change), when the reward gave any.
        evidence: the paired test's numbers when the candidate was measured, or None:
            ``scored`` (held-out tasks scored) of ``held_out``, ``gains``, ``losses``,
            ``regressions``, ``e_value`` against ``threshold`` (``1 / false_accept_rate``),
            ``candidate_mean`` and ``head_mean`` over the scored tasks.
        trajectory: the tasks the candidate's cards were proposed from (its contributors'
            trajectories, in order) when it was measured; what the task walk presumes a
            commit solved. Not written by `to_json`.
        fates: the fate of every card that entered the decision (`agentdescent.fate.CardFate`),
            each recorded by the step that ended it; ``considered`` of them. Empty in a
            report saved before fates were kept.
    """

    artifact_id: str
    outcome: MergeOutcome
    accepted: Diff | None = None
    fused: bool = False
    considered: int = 0
    discarded_stale: int = 0
    conflicts_dropped: int = 0
    p_improve: float | None = None
    committed_version: int | None = None
    reason: str = ""
    feedback: list[str] = field(default_factory=list)
    evidence: dict[str, Any] | None = None
    #: the tasks behind a committed candidate (its contributors' trajectories; not saved)
    trajectory: tuple[Task, ...] = field(default=(), compare=False, repr=False)
    fates: list[CardFate] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the report (the candidate under ``"candidate"``, committed or not)."""
        return {
            "artifact_id": self.artifact_id,
            "outcome": self.outcome.value,
            "candidate": self.accepted.to_json() if self.accepted is not None else None,
            "fused": self.fused,
            "considered": self.considered,
            "discarded_stale": self.discarded_stale,
            "conflicts_dropped": self.conflicts_dropped,
            "p_improve": self.p_improve,
            "committed_version": self.committed_version,
            "reason": self.reason,
            "feedback": list(self.feedback),
            "evidence": dict(self.evidence) if self.evidence is not None else None,
            "fates": [f.to_json() for f in self.fates],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MergeReport:
        """Rebuild a report from `to_json` output."""
        accepted = data.get("candidate", data.get("accepted"))  # "accepted": older files
        return cls(
            artifact_id=data["artifact_id"],
            outcome=MergeOutcome(data["outcome"]),
            accepted=Diff.from_json(accepted) if accepted is not None else None,
            fused=bool(data.get("fused", False)),
            considered=int(data.get("considered", 0)),
            discarded_stale=int(data.get("discarded_stale", 0)),
            conflicts_dropped=int(data.get("conflicts_dropped", 0)),
            p_improve=data.get("p_improve"),
            committed_version=data.get("committed_version"),
            reason=data.get("reason", ""),
            feedback=[str(f) for f in data.get("feedback", [])],
            evidence=dict(data["evidence"]) if data.get("evidence") else None,
            fates=[CardFate.from_json(f) for f in data.get("fates", [])],
        )
