"""Proposals that need no writing skill: train tasks become demonstrations, and only train tasks.

When the strategy holds demonstration slots (`agentdescent.merge.demonstrations`), a
worker need not ask a model to write anything: after a rollout it can offer the task
itself as a worked example.

- **labeled**: the rollout failed and the task's expected output is known —
  ``task.meta["answer"]`` (a str), or what the reward's ``expected_output(task)`` hook
  returns (an attribute of the reward callable: a function of the task giving the
  expected reply, or None) — so the task with that output becomes a demonstration;
- **bootstrapped**: the rollout scored full marks, so its own input and output become one.

`DemoChooser.kind` is the rule of ``evolve(..., proposal=...)``:

``"auto"`` (the default)
    With demonstration slots: a full-marks rollout of a task whose answer is not known
    is bootstrapped into an open slot (one whose answer is known is shown where it fails,
    labeled: a success only shows the model what it already does); a
    failing rollout with a known answer is labeled — into an open slot, or as a *swap*
    for a slot whose example the failed reply copied (the reply names that
    demonstration's output, which is not what the task wants), the slot drawn per task
    among those; any other failing rollout (no known answer, or every slot full and no
    example copied) asks the agent for a rule or rewrite. Without slots: the model's proposal, as
    always. Demonstrations come first because a small model follows examples far better
    than it writes rules, and a copied example is the one a swap can improve on; the
    paired test decides whether it did.
``"model"``
    Only the agent's proposals (rules, rewrites, edits): the behaviour before demonstrations.
``"labeled"`` / ``"bootstrapped"`` / ``"demos"`` (both)
    Only those kinds, into open slots and then as swaps (copied slots first, else a slot
    whose output differs from the task's); never a model call to propose.

`PromptGuard` keeps held-out and test prompts out of the artifact: a demonstration whose
input is a held-out or test task's prompt (or a rule that contains one) is refused and
counted, whatever proposed it. This module owns those two rules; it must not merge or
commit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..errors import InvalidArgument
from ..merge.demonstrations import Demonstration, demo_slots, is_demo_key
from ..rewards.builtin import named_choices
from ..types import Diff, Task, stable_hash

__all__ = ["PROPOSAL_RULES", "DemoChooser", "PromptGuard", "expected_output"]

#: The values of ``evolve(..., proposal=...)``.
PROPOSAL_RULES = ("auto", "model", "labeled", "bootstrapped", "demos")

#: A rule's text that contains a held-out prompt at least this long (in characters) is refused.
MIN_QUOTED_PROMPT = 24


def check_proposal_rule(value: object, strategy: object) -> str:
    """Validate ``proposal=`` against the run's strategy."""
    if value not in PROPOSAL_RULES:
        raise InvalidArgument(
            f"proposal={value!r}: use 'auto' (demonstrations while slots are open, then swaps and model "
            "proposals), 'model' (only the agent's rules/rewrites/edits), 'labeled', 'bootstrapped' or 'demos'")
    if value in ("labeled", "bootstrapped", "demos") and not demo_slots(strategy):
        raise InvalidArgument(
            f"proposal={value!r} proposes demonstrations, but strategy={strategy or 'AppendRules()'!r:.80} has no "
            "demonstration "
            "slots; use strategy=agentdescent.RulesAndDemos(demos=4) (or Demonstrations(slots=4)), or "
            "proposal='model'")
    return str(value)


def expected_output(task: Task, reward: Any) -> str | None:
    """The output ``task`` should get, when known: ``meta["answer"]``, else the reward's ``expected_output`` hook."""
    answer = task.meta.get("answer") if isinstance(task.meta, Mapping) else None
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    hook = getattr(reward, "expected_output", None)
    if callable(hook):
        value = hook(task)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


class DemoChooser:
    """Which kind of proposal a worker makes after a rollout, and the demonstration diff it makes.

    Args:
        rule: one of `PROPOSAL_RULES`.
        strategy: the run's strategy (its ``demo_slots`` and ``demo_diff``).
        reward: the run's reward (for the ``expected_output`` hook).
        seed: seeds the swap draws.
    """

    def __init__(self, rule: str, strategy: Any, reward: Callable[..., Any], seed: int) -> None:
        self.rule = rule
        self.strategy = strategy
        self.slots = demo_slots(strategy)
        self.reward = reward
        self.seed = seed

    def _draw(self, task: Task, version: int, salt: str) -> int:
        return stable_hash(self.seed, salt, task.id, version)

    def kind(self, task: Task, version: int, state: Mapping[str, str], reward: float, output: str = "") -> str | None:
        """``"labeled"``, ``"bootstrapped"``, ``"model"`` or None (nothing to propose) for this rollout."""
        if not self.slots or self.rule == "model":
            return None if reward >= 1.0 else ("model" if self.rule in ("auto", "model") else None)
        open_slots = bool(self.strategy.open_slots(state))
        demos_only = self.rule != "auto"
        if reward >= 1.0:
            # under "auto", a task whose answer is known is better shown where it fails (labeled):
            # a success only shows the model what it already does
            wanted = self.rule in ("bootstrapped", "demos") or (
                self.rule == "auto" and expected_output(task, self.reward) is None)
            return "bootstrapped" if wanted and (open_slots or demos_only) else None
        shown = expected_output(task, self.reward) if self.rule in ("auto", "labeled", "demos") else None
        if shown is not None and (open_slots or demos_only or self._copied_slots(state, output, shown)):
            return "labeled"
        return "model" if self.rule == "auto" else None

    def _copied_slots(self, state: Mapping[str, str], output: str, shown: str) -> list[int]:
        """The filled slots whose example the failed reply copied: it names their output, which is not the task's."""
        demos = self.strategy.demonstrations(state)
        return [s for s, d in sorted(demos.items())
                if d.output.strip().casefold() != shown.casefold() and named_choices([d.output.strip()], output)]

    def _slots_for(self, state: Mapping[str, str], output: str, shown: str) -> list[int]:
        """The slots a labeled demonstration may take: the open ones and those the reply copied.

        Else (a demonstrations-only rule with every slot full and nothing copied) the slots
        whose output differs from the task's, else all. Concurrent proposals from several
        workers draw among the same slots by task, so they tend to take different ones,
        and their diffs fuse: a head that gives every question the label its examples show
        can have those examples replaced in one decision.
        """
        pool = self.strategy.open_slots(state) + self._copied_slots(state, output, shown)
        if pool:
            return sorted(pool)
        demos = self.strategy.demonstrations(state)
        differ = [s for s, d in sorted(demos.items()) if d.output.strip().casefold() != shown.casefold()]
        return differ or sorted(demos) or list(range(1, self.slots + 1))

    def diff(self, kind: str, task: Task, output: str, state: Mapping[str, str], *, author: str, version: int,
             target: str) -> Diff | None:
        """The diff that shows ``task`` as a demonstration (``kind`` labeled or bootstrapped), or None."""
        shown = output.strip() if kind == "bootstrapped" else expected_output(task, self.reward)
        if not shown:
            return None
        demo = Demonstration(task.prompt, shown, source=task.id, kind=kind)
        pool = self.strategy.open_slots(state) if kind == "bootstrapped" else self._slots_for(state, output, shown)
        slot = pool[self._draw(task, version, "slot") % len(pool)]
        return self.strategy.demo_diff(state, demo, slot=slot, author=author, base_version=version, target=target)


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


class PromptGuard:
    """Keeps every held-out and test prompt out of the artifact.

    A diff is refused (`refusal` names why) when a demonstration it writes has a held-out
    or test task's prompt as its input (compared blind to case and spacing), or when any
    value it writes contains such a prompt of at least `MIN_QUOTED_PROMPT` characters.

    Args:
        protected: the held-out and test tasks.
    """

    def __init__(self, protected: Iterable[Task]) -> None:
        self._prompts = {_norm(t.prompt): t.id for t in protected if t.prompt.strip()}
        self._long = [(p, i) for p, i in self._prompts.items() if len(p) >= MIN_QUOTED_PROMPT]
        self._pattern = (re.compile("|".join(re.escape(p) for p, _ in sorted(self._long, key=lambda x: -len(x[0]))))
                         if self._long else None)

    def refusal(self, diff: Diff) -> str | None:
        """Why ``diff`` may not reach the artifact, or None when it may."""
        for key, value in diff.ops.items():
            if value is None:
                continue
            if is_demo_key(key):
                try:
                    demo = Demonstration.from_value(value)
                except InvalidArgument:
                    return f"slot {key} does not hold a demonstration"
                task_id = self._prompts.get(_norm(demo.input))
                if task_id is not None:
                    return f"its demonstration's input is the prompt of held-out or test task {task_id!r}"
                text = _norm(demo.output)
            else:
                text = _norm(value)
            if self._pattern is not None:
                found = self._pattern.search(text)
                if found:
                    return f"it quotes the prompt of held-out or test task {self._prompts[found.group(0)]!r}"
        return None
