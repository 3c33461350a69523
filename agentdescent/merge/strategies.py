"""Strategies: what the evolving artifact is, how it renders, and how a proposal becomes a diff.

A strategy is pure: it owns the shape of the flat ``dict[str, str]`` state and never
touches the ledger, an RNG or the clock. Keys are content-addressed through
`agentdescent.types.stable_hash` so that workers in different processes who propose
the same rule produce the same key (and so fuse instead of duplicating).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import ClassVar

from ..errors import InvalidArgument, InvalidArgumentType
from ..seams import Seam
from ..types import Diff, stable_hash

__all__ = ["AppendRules", "KeyedRules", "SingleSlot", "Strategy", "same_value"]

#: Prefix of content-addressed rule keys: the key is derived from the rule's text, so two
#: values under such a key are the same rule whatever their case.
RULE_KEY_PREFIX = "rule-"


class Strategy(Seam):
    """Turns proposals into diffs of a flat ``dict[str, str]`` artifact.

    Called by the engines from worker threads; implementations must be pure and
    thread-safe (the shipped ones hold only immutable configuration). All three members
    are required (`agentdescent.testing.StrategyConformance` checks them).
    """

    REQUIRED: ClassVar[tuple[str, ...]] = ("initial", "render", "to_diff")

    def initial(self) -> dict[str, str]:
        """The state of a brand-new artifact."""
        raise NotImplementedError

    def render(self, state: Mapping[str, str]) -> str:
        """The text the agent sees for ``state``."""
        raise NotImplementedError

    def to_diff(
        self, state: Mapping[str, str], proposal: str, author: str, base_version: int, target: str
    ) -> Diff | None:
        """The diff that applies ``proposal`` to ``state``, or None when nothing would change."""
        raise NotImplementedError


_WS = re.compile(r"\s+")


def _clean(text: str) -> str:
    """Collapse inner white space, strip the ends and any leading list bullet."""
    text = _WS.sub(" ", text).strip()
    while text[:1] in {"-", "*", "•"}:
        text = text[1:].strip()
    return text


def _rule_key(text: str) -> str:
    """Content address of a rule: the same text in any case or outer spacing, the same key."""
    return f"{RULE_KEY_PREFIX}{stable_hash(_clean(text).lower()):016x}"


def same_value(key: str, a: str | None, b: str | None) -> bool:
    """Do two writes of ``key`` agree?

    Equal values agree; under a content-addressed rule key, values that differ only in
    case are the same rule (the key already says so) and agree too. Fusion calls this
    to decide what is a contradiction.
    """
    if a == b:
        return True
    return (
        key.startswith(RULE_KEY_PREFIX)
        and isinstance(a, str)
        and isinstance(b, str)
        and a.casefold() == b.casefold()
    )


def _diff_id(target: str, author: str, base_version: int, ops: Mapping[str, str | None]) -> str:
    payload = sorted((k, v if v is not None else "\0") for k, v in ops.items())
    return f"d{stable_hash(target, author, base_version, payload):016x}"


def _check_proposal(proposal: object) -> str:
    if not isinstance(proposal, str):
        raise InvalidArgumentType(f"a proposal must be a str, got {type(proposal).__name__}")
    return _clean(proposal)


class AppendRules(Strategy):
    """A playbook of independent rules, one content-addressed key per rule.

    Distinct proposals never contradict (different text, different key), so the
    aggregator can fuse any number of them.

    Args:
        title: the first line of the rendered playbook.
        separator: if set, a proposal holding several rules separated by it becomes one
            diff with one key per rule (for proposers that suggest several rules at once).
    """

    def __init__(self, title: str = "# Playbook", separator: str | None = None) -> None:
        if separator is not None and (not isinstance(separator, str) or not separator):
            raise InvalidArgument(f"separator={separator!r}: use a non-empty str or None")
        self.title = title
        self.separator = separator

    def initial(self) -> dict[str, str]:
        return {}

    def render(self, state: Mapping[str, str]) -> str:
        lines = [self.title]
        lines.extend(f"- {state[key]}" for key in sorted(state))
        return "\n".join(lines)

    def to_diff(
        self, state: Mapping[str, str], proposal: str, author: str, base_version: int, target: str
    ) -> Diff | None:
        _check_proposal(proposal)
        parts = proposal.split(self.separator) if self.separator else [proposal]
        ops: dict[str, str | None] = {}
        for part in parts:
            text = _clean(part)
            key = _rule_key(text) if text else ""
            if text and key not in state:
                ops.setdefault(key, text)
        if not ops:
            return None
        return Diff(_diff_id(target, author, base_version, ops), target, ops, author=author)

    def __repr__(self) -> str:
        sep = f", separator={self.separator!r}" if self.separator else ""
        return f"AppendRules(title={self.title!r}{sep})"


class KeyedRules(Strategy):
    """Rules with named slots: ``"category: text"`` writes that category's slot.

    Two proposals for the same category with different text contradict (same key,
    different value) and the aggregator keeps the better one; any other text becomes
    an independent content-addressed rule.

    Args:
        categories: the slot names (matched case-insensitively).
        title: the first line of the rendered text.
    """

    def __init__(self, categories: Iterable[str], title: str = "# Rules") -> None:
        cats = [str(c).strip() for c in categories]
        if not cats or any(not c for c in cats):
            raise InvalidArgument(f"categories={list(categories)!r}: give at least one non-empty name")
        self.categories = tuple(cats)
        self._by_lower = {c.lower(): c for c in cats}
        if len(self._by_lower) != len(cats):
            raise InvalidArgument(f"categories={cats!r}: names must differ ignoring case")
        self.title = title

    @staticmethod
    def slot_key(category: str) -> str:
        """The state key of a category's slot."""
        return f"slot:{category.lower()}"

    def initial(self) -> dict[str, str]:
        return {}

    def render(self, state: Mapping[str, str]) -> str:
        lines = [self.title]
        for cat in self.categories:
            key = self.slot_key(cat)
            if key in state:
                lines.append(f"- {cat}: {state[key]}")
        lines.extend(f"- {state[k]}" for k in sorted(state) if not k.startswith("slot:"))
        return "\n".join(lines)

    def to_diff(
        self, state: Mapping[str, str], proposal: str, author: str, base_version: int, target: str
    ) -> Diff | None:
        text = _check_proposal(proposal)
        if not text:
            return None
        head, sep, rest = text.partition(":")
        category = self._by_lower.get(head.strip().lower()) if sep else None
        if category is not None and rest.strip():
            key, value = self.slot_key(category), rest.strip()
        else:
            key, value = _rule_key(text), text
            if key in state:
                return None
        if state.get(key) == value:
            return None
        ops: dict[str, str | None] = {key: value}
        return Diff(_diff_id(target, author, base_version, ops), target, ops, author=author)

    def __repr__(self) -> str:
        return f"KeyedRules(categories={list(self.categories)!r}, title={self.title!r})"


class SingleSlot(Strategy):
    """One slot holding the whole artifact (a system prompt, say).

    Every two different proposals contradict, so the aggregator never fuses; it keeps
    the better of each contradicting pair.

    Args:
        initial_value: the starting text.
        key: the state key of the slot.
    """

    def __init__(self, initial_value: str = "", key: str = "value") -> None:
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"key={key!r}: use a non-empty str")
        self.initial_value = initial_value
        self.key = key

    def initial(self) -> dict[str, str]:
        return {self.key: self.initial_value}

    def render(self, state: Mapping[str, str]) -> str:
        return state.get(self.key, "")

    def to_diff(
        self, state: Mapping[str, str], proposal: str, author: str, base_version: int, target: str
    ) -> Diff | None:
        if not isinstance(proposal, str):
            raise InvalidArgumentType(f"a proposal must be a str, got {type(proposal).__name__}")
        value = proposal.strip()
        if not value or state.get(self.key) == value:
            return None
        ops: dict[str, str | None] = {self.key: value}
        return Diff(_diff_id(target, author, base_version, ops), target, ops, author=author)

    def __repr__(self) -> str:
        return f"SingleSlot(initial_value={self.initial_value!r}, key={self.key!r})"
