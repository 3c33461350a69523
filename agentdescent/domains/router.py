"""The offline reference domain: keyword -> label routing with a noisy proposer.

An "agent" routes a text to one of six labels by reading routing rules from the
evolving skill (lines ``- keyword: label``); with no matching rule it answers
``unknown``. After a failed rollout the simulated proposer suggests the rule that would
have helped, but with probability ``noise`` it suggests a wrong label. Every call
records simulated token usage proportional to the rendered skill and the prompt, so
token budgets work offline, and an optional heavy-tailed latency makes concurrency
measurable.

Everything is deterministic: each random draw is derived from
`agentdescent.stable_hash` of the domain seed and the call's inputs, never from a
shared RNG stream, so concurrent runs repeat too.

This module must not touch the network, the global RNG or any engine internals.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping

from ..errors import InvalidArgument, RewardContractError
from ..merge.strategies import KeyedRules
from ..tokens import estimate_tokens
from ..types import Task, stable_hash
from ..usage import Usage

__all__ = [
    "KEYWORDS",
    "LABELS",
    "RouterDomain",
    "make_tasks",
    "propose",
    "reward",
    "run",
    "strategy",
    "tasks",
]

LABELS: tuple[str, ...] = ("billing", "shipping", "returns", "technical", "account", "sales")

#: Four keywords per label, 24 in all.
KEYWORDS: dict[str, str] = {
    "invoice": "billing", "refund": "billing", "charge": "billing", "receipt": "billing",
    "courier": "shipping", "parcel": "shipping", "tracking": "shipping", "delivery": "shipping",
    "exchange": "returns", "damaged": "returns", "warranty": "returns", "label": "returns",
    "crash": "technical", "firmware": "technical", "bluetooth": "technical", "battery": "technical",
    "password": "account", "login": "account", "profile": "account", "username": "account",
    "quote": "sales", "discount": "sales", "bulk": "sales", "demo": "sales",
}

_OPENERS = (
    "Hello, I have a question about my {kw}.",
    "Hi team, something is wrong with the {kw}.",
    "Could you help me with a {kw} issue?",
    "Quick note regarding the {kw} from last week.",
    "I need assistance: the {kw} is not what I expected.",
    "Good morning, writing about a {kw} problem.",
    "Please advise on my {kw}, it has been days.",
    "Urgent: {kw} trouble again.",
    "My colleague mentioned the {kw}; can you check?",
    "Following up on the {kw} ticket.",
    "Is there an update on the {kw}?",
    "Regarding {kw}: what are my options?",
)

_RULE_LINE = re.compile(r"^\s*-\s*([A-Za-z][\w-]*)\s*:\s*([A-Za-z][\w-]*)\s*$")


def make_tasks(texts_per_keyword: int = 12) -> list[Task]:
    """The routing tasks, interleaved by keyword so that a positional split covers every keyword.

    Args:
        texts_per_keyword: texts generated per keyword (at most 12 distinct openers).
    """
    if not 1 <= texts_per_keyword <= len(_OPENERS):
        raise InvalidArgument(
            f"texts_per_keyword={texts_per_keyword!r}: use 1..{len(_OPENERS)}"
        )
    out = []
    for i in range(texts_per_keyword):
        for kw, label in KEYWORDS.items():
            out.append(
                Task(
                    id=f"route-{kw}-{i:02d}",
                    prompt=_OPENERS[i].format(kw=kw),
                    meta={"keyword": kw, "label": label},
                )
            )
    return out


def _tokens(text: str) -> int:
    return estimate_tokens(text)


def parse_rules(rendered: str) -> dict[str, str]:
    """The ``keyword -> label`` rules in a rendered skill (the first rule for a keyword wins)."""
    rules: dict[str, str] = {}
    for line in rendered.splitlines():
        m = _RULE_LINE.match(line)
        if m:
            rules.setdefault(m.group(1).lower(), m.group(2).lower())
    return rules


class RouterDomain:
    """A seeded instance of the routing domain.

    Args:
        seed: seeds every simulated draw (wrong-label proposals, latency).
        noise: probability that a proposal names a wrong label.
        silence: probability that the proposer has nothing to say.
        texts_per_keyword: tasks per keyword (24 keywords).
        latency: median simulated rollout latency in seconds (0: none).
        latency_sigma: log-normal shape of the latency (heavier tail when larger).
        usage: the meter simulated tokens are recorded into (a new one by default).
    """

    def __init__(
        self,
        seed: int = 0,
        noise: float = 0.25,
        silence: float = 0.0,
        texts_per_keyword: int = 12,
        latency: float = 0.0,
        latency_sigma: float = 1.0,
        usage: Usage | None = None,
    ) -> None:
        for name, value in (("noise", noise), ("silence", silence)):
            if not 0.0 <= value <= 1.0:
                raise InvalidArgument(f"{name}={value!r}: use a probability in [0, 1]")
        if latency < 0 or latency_sigma < 0:
            raise InvalidArgument(f"latency={latency!r}, latency_sigma={latency_sigma!r}: use values >= 0")
        self.seed = seed
        self.noise = noise
        self.silence = silence
        self.latency = latency
        self.latency_sigma = latency_sigma
        self.usage = usage if usage is not None else Usage()
        self.tasks = make_tasks(texts_per_keyword)
        self.strategy = KeyedRules(list(KEYWORDS), title="# Router skill")

    def _uniform(self, *parts: object) -> float:
        return stable_hash(self.seed, *parts) / 2.0**64

    def _sleep(self, *parts: object) -> None:
        if self.latency <= 0:
            return
        u1 = max(self._uniform("lat1", *parts), 1e-12)
        u2 = self._uniform("lat2", *parts)
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        time.sleep(self.latency * math.exp(self.latency_sigma * z))

    def run(self, rendered: str, task: Task) -> str:
        """Route ``task`` with the rules in ``rendered``; ``unknown`` when no rule matches."""
        self._sleep("run", rendered, task.id)
        rules = parse_rules(rendered)
        answer = "unknown"
        words = re.findall(r"[a-z]+", task.prompt.lower())
        for word in words:
            if word in rules:
                answer = rules[word]
                break
        self.usage.record(_tokens(rendered) + _tokens(task.prompt), 3)
        return answer

    @staticmethod
    def reward(task: Task, output: str) -> float:
        """1.0 when the routed label is the task's label, else 0.0."""
        label = task.meta.get("label")
        if label is None:
            raise RewardContractError(f"task {task.id!r} has no 'label' in meta")
        return 1.0 if output.strip().lower() == label else 0.0

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        """Suggest ``keyword: label`` for the failed task; a wrong label with probability ``noise``."""
        self.usage.record(_tokens(rendered) + _tokens(task.prompt) + 40, 12)
        if reward >= 1.0 or self._uniform("silence", rendered, task.id) < self.silence:
            return None
        kw = str(task.meta["keyword"])
        label = str(task.meta["label"])
        if self._uniform("noise", rendered, task.id) < self.noise:
            wrong = [lab for lab in LABELS if lab != label]
            label = wrong[int(self._uniform("pick", rendered, task.id) * len(wrong))]
        return f"{kw}: {label}"

    def evolve_kwargs(self) -> Mapping[str, object]:
        """The ``evolve()`` arguments that wire this domain in (tasks, callables, strategy, usage)."""
        return {
            "tasks": self.tasks,
            "reward": self.reward,
            "run": self.run,
            "propose": self.propose,
            "strategy": self.strategy,
            "usage": self.usage,
        }

    def __repr__(self) -> str:
        return f"RouterDomain(seed={self.seed}, noise={self.noise}, tasks={len(self.tasks)})"


_DEFAULT = RouterDomain()

#: Ready-made pieces of a default `RouterDomain` (seed 0, noise 0.25).
tasks = _DEFAULT.tasks
reward = _DEFAULT.reward
run = _DEFAULT.run
propose = _DEFAULT.propose
strategy = _DEFAULT.strategy
