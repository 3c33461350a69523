"""Demonstrations in the artifact: input -> output pairs in a stated number of slots, as diffs.

A model that cannot write a useful rule can still be shown worked examples. Two
strategies hold them:

- `Demonstrations(slots=4)`: the artifact is demonstrations only;
- `RulesAndDemos(rules=AppendRules(), demos=4)`: instructions written by another strategy
  (rules, a rewritten prompt) *and* demonstrations.

Each demonstration lives under its slot's key (``demo:1`` ... ``demo:N``) as one JSON
value (`Demonstration`: the input, the output, the train task it came from and how it was
proposed). A diff adds, replaces or removes one slot, so everything the aggregator does to
a diff applies: two diffs for one slot with different values contradict (the better one is
kept), diffs for different slots fuse, and the paired test decides. ``render`` writes the
instructions, then the pairs in slot order in the block of `agentdescent.fewshot`, which
`agentdescent.LLMAgent` sends as few-shot chat turns.

A demonstration is proposed by the engine, not by a model: a failing train task whose
expected output is known (*labeled*) or a rollout that scored full marks (*bootstrapped*);
see `agentdescent.engine.demos`. This module owns the state's shape only; it must not know
the engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import InvalidArgument, InvalidArgumentType
from ..fewshot import render_demonstrations
from ..types import Diff, stable_hash
from .strategies import AppendRules, Strategy

__all__ = ["DEMO_KEY_PREFIX", "Demonstration", "Demonstrations", "RulesAndDemos", "demo_slots", "is_demo_key"]

#: Prefix of a demonstration slot's state key (``demo:1``, ``demo:2``, ...).
DEMO_KEY_PREFIX = "demo:"

#: How a demonstration may have been proposed.
DEMO_KINDS = ("labeled", "bootstrapped", "given")


def is_demo_key(key: str) -> bool:
    """Is ``key`` a demonstration slot's key?"""
    return key.startswith(DEMO_KEY_PREFIX)


@dataclass(frozen=True)
class Demonstration:
    """One worked example: what the model is shown, and where it came from.

    Args:
        input: the user turn (a train task's prompt).
        output: the assistant turn (the expected output, or a full-marks reply).
        source: the id of the train task it came from (``""`` for one given by hand).
        kind: ``"labeled"`` (the task's known answer), ``"bootstrapped"`` (a full-marks
            reply) or ``"given"`` (written by hand, e.g. in ``initial_state``).
    """

    input: str
    output: str
    source: str = ""
    kind: str = "given"

    def __post_init__(self) -> None:
        for name in ("input", "output", "source", "kind"):
            if not isinstance(getattr(self, name), str):
                raise InvalidArgumentType(f"Demonstration({name}={getattr(self, name)!r:.60}): use a str")
        if not self.input.strip() or not self.output.strip():
            raise InvalidArgument(f"Demonstration(input={self.input!r:.40}, output={self.output!r:.40}): "
                                  "both must be non-empty")
        if self.kind not in DEMO_KINDS:
            raise InvalidArgument(f"Demonstration(kind={self.kind!r}): use one of {', '.join(DEMO_KINDS)}")

    def to_value(self) -> str:
        """The slot's state value (JSON, keys sorted: the same demonstration, the same value)."""
        return json.dumps({"input": self.input, "output": self.output, "source": self.source, "kind": self.kind},
                          sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_value(cls, value: str) -> Demonstration:
        """Read a slot's state value back.

        Raises:
            InvalidArgument: the value is not a demonstration's JSON.
        """
        try:
            data = json.loads(value)
            return cls(str(data["input"]), str(data["output"]), str(data.get("source", "")),
                       str(data.get("kind", "given")))
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidArgument(f"a demonstration slot holds {value!r:.80}, not a demonstration's JSON "
                                  f"({exc}); write it with Demonstration(...).to_value()") from None

    def describe(self, limit: int = 80) -> str:
        """One line for reports: ``input -> output (kind, from task)``."""
        def cut(text: str) -> str:
            text = " ".join(text.split())
            return text if len(text) <= limit else text[: limit - 3] + "..."
        origin = f"{self.kind}, from task {self.source}" if self.source else self.kind
        return f"{cut(self.input)!r} -> {cut(self.output)!r} ({origin})"


def _check_slots(slots: object, knob: str) -> int:
    if isinstance(slots, bool) or not isinstance(slots, int):
        raise InvalidArgumentType(f"{knob}={slots!r}: give the number of demonstration slots, an int")
    if not 1 <= slots <= 64:
        raise InvalidArgument(f"{knob}={slots}: give between 1 and 64 demonstration slots "
                              "(a small model's context fills fast; 4 is a good start)")
    return slots


class _DemoSlots:
    """What both demonstration strategies share: the slots, reading them, and the diff of one."""

    demo_slots: int

    @staticmethod
    def slot_key(slot: int) -> str:
        """The state key of slot ``slot`` (1-based)."""
        return f"{DEMO_KEY_PREFIX}{slot}"

    def demonstrations(self, state: Mapping[str, str]) -> dict[int, Demonstration]:
        """Slot number -> its demonstration, for the filled slots of ``state``."""
        out = {}
        for slot in range(1, self.demo_slots + 1):
            value = state.get(self.slot_key(slot))
            if value is not None:
                out[slot] = Demonstration.from_value(value)
        return out

    def open_slots(self, state: Mapping[str, str]) -> list[int]:
        """The slots of ``state`` with no demonstration, in order."""
        return [s for s in range(1, self.demo_slots + 1) if self.slot_key(s) not in state]

    def render_demos(self, state: Mapping[str, str]) -> str:
        """The demonstrations block of ``state`` (`agentdescent.fewshot`), or ``""``."""
        demos = self.demonstrations(state)
        return render_demonstrations([(d.input, d.output) for _, d in sorted(demos.items())])

    def demo_diff(self, state: Mapping[str, str], demo: Demonstration | None, *, slot: int, author: str,
                  base_version: int, target: str) -> Diff | None:
        """The diff that writes ``demo`` into ``slot`` (``None``: empties it), or None when nothing changes.

        A demonstration whose input is already shown in another slot is no change (None):
        the artifact never shows one example twice.

        Raises:
            InvalidArgument: ``slot`` is not one of the strategy's slots.
        """
        if isinstance(slot, bool) or not isinstance(slot, int) or not 1 <= slot <= self.demo_slots:
            raise InvalidArgument(f"slot={slot!r}: this strategy has slots 1..{self.demo_slots}")
        key = self.slot_key(slot)
        if demo is None:
            if key not in state:
                return None
            ops: dict[str, str | None] = {key: None}
        else:
            value = demo.to_value()
            if state.get(key) == value:
                return None
            shown = {d.input.strip() for s, d in self.demonstrations(state).items() if s != slot}
            if demo.input.strip() in shown:
                return None
            ops = {key: value}
        payload = sorted((k, v if v is not None else "\0") for k, v in ops.items())
        return Diff(f"d{stable_hash(target, author, base_version, payload):016x}", target, ops, author=author)


class Demonstrations(_DemoSlots, Strategy):
    """An artifact of demonstrations only, in ``slots`` slots.

    Text proposals (a model's rule) have nowhere to go and change nothing; demonstrations
    come from the engine (``evolve(..., proposal="auto")``). ``render`` is the
    `agentdescent.fewshot` block alone (``""`` while every slot is empty).

    Args:
        slots: how many demonstrations the artifact may hold (1..64).
    """

    def __init__(self, slots: int = 4) -> None:
        self.demo_slots = _check_slots(slots, "Demonstrations(slots)")

    def initial(self) -> dict[str, str]:
        return {}

    def render(self, state: Mapping[str, str]) -> str:
        return self.render_demos(state)

    def to_diff(self, state: Mapping[str, str], proposal: str, author: str, base_version: int,
                target: str) -> Diff | None:
        if not isinstance(proposal, str):
            raise InvalidArgumentType(f"a proposal must be a str, got {type(proposal).__name__}")
        return None

    def __repr__(self) -> str:
        return f"Demonstrations(slots={self.demo_slots})"


class RulesAndDemos(_DemoSlots, Strategy):
    """Instructions written by another strategy, and ``demos`` demonstration slots.

    The instructions part is ``rules`` (default `AppendRules`: a playbook; `SingleSlot` for
    a rewritten prompt; `KeyedRules`): a model's text proposal goes to it unchanged. The
    demonstrations are the slots of `Demonstrations`. ``render`` is the instructions'
    rendering, a blank line, then the demonstrations block; with no demonstrations it is
    exactly what ``rules`` renders.

    Args:
        rules: the strategy of the instructions part (its keys must not start with ``demo:``).
        demos: how many demonstration slots (1..64).
    """

    def __init__(self, rules: Strategy | None = None, demos: int = 4) -> None:
        if rules is not None and not all(callable(getattr(rules, m, None)) for m in Strategy.REQUIRED):
            raise InvalidArgumentType(f"RulesAndDemos(rules={rules!r:.80}): give a strategy (initial, render, "
                                      "to_diff), e.g. AppendRules()")
        self.rules = rules if rules is not None else AppendRules()
        self.demo_slots = _check_slots(demos, "RulesAndDemos(demos)")
        mode = getattr(self.rules, "proposal_mode", None)
        if isinstance(mode, str):
            self.proposal_mode = mode

    @staticmethod
    def _instructions(state: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in state.items() if not is_demo_key(k)}

    def initial(self) -> dict[str, str]:
        state = dict(self.rules.initial())
        if any(is_demo_key(k) for k in state):
            raise InvalidArgument(f"RulesAndDemos(rules={self.rules!r:.60}): its initial state uses a "
                                  f"'{DEMO_KEY_PREFIX}' key, which the demonstrations own")
        return state

    def render(self, state: Mapping[str, str]) -> str:
        text = self.rules.render(self._instructions(state))
        block = self.render_demos(state)
        return f"{text}\n\n{block}" if block else text

    def to_diff(self, state: Mapping[str, str], proposal: str, author: str, base_version: int,
                target: str) -> Diff | None:
        diff = self.rules.to_diff(self._instructions(state), proposal, author, base_version, target)
        if diff is not None and any(is_demo_key(k) for k in diff.ops):
            raise InvalidArgument(f"RulesAndDemos(rules={self.rules!r:.60}) wrote a '{DEMO_KEY_PREFIX}' key; "
                                  "the instructions strategy must keep to its own keys")
        return diff

    def __repr__(self) -> str:
        return f"RulesAndDemos(rules={self.rules!r}, demos={self.demo_slots})"


def demo_slots(strategy: object) -> int:
    """How many demonstration slots ``strategy`` has (0: it holds none)."""
    slots = getattr(strategy, "demo_slots", 0)
    return slots if isinstance(slots, int) and not isinstance(slots, bool) and callable(
        getattr(strategy, "demo_diff", None)) else 0
