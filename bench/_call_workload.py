"""The calls-per-second workload both sides of `bench/scaling.py --baseline-python` run.

A keyword router (24 keywords, six labels, twelve texts per keyword: 288 tasks) whose
every model call sleeps a simulated log-normal latency: the rollout, the proposal, the
self-verify and each held-out evaluation. The agent reads ``- keyword: label`` lines from
the rendered artifact; after a failed rollout the proposer suggests ``keyword: label``
(a wrong label with probability ``noise``). The latency and the proposer's noise are
functions of (seed, kind of call, the rules the artifact holds, task id), never of the
artifact's title or formatting, so the two libraries' artifacts with the same rules draw
the same latencies.

Calls are counted where they happen, at the callable (`CountingWorkload.calls`), so both
libraries are counted the same way whatever they call a phase.

Standard library only, and it must stay so: the 0.7.0 driver (`bench/baseline_070.py`)
imports it in the other virtual environment, where ``agentdescent`` is the published
package. Offline.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from typing import Any

__all__ = ["KEYWORDS", "CountingWorkload", "task_specs"]

LABELS = ("billing", "shipping", "returns", "technical", "account", "sales")
KEYWORDS: dict[str, str] = {
    "invoice": "billing", "refund": "billing", "charge": "billing", "receipt": "billing",
    "courier": "shipping", "parcel": "shipping", "tracking": "shipping", "delivery": "shipping",
    "exchange": "returns", "damaged": "returns", "warranty": "returns", "label": "returns",
    "crash": "technical", "firmware": "technical", "bluetooth": "technical", "battery": "technical",
    "password": "account", "login": "account", "profile": "account", "username": "account",
    "quote": "sales", "discount": "sales", "bulk": "sales", "demo": "sales",
}
_OPENERS = (
    "Hello, I have a question about my {kw}.", "Hi team, something is wrong with the {kw}.",
    "Could you help me with a {kw} issue?", "Quick note regarding the {kw} from last week.",
    "I need assistance: the {kw} is not what I expected.", "Good morning, writing about a {kw} problem.",
    "Please advise on my {kw}, it has been days.", "Urgent: {kw} trouble again.",
    "My colleague mentioned the {kw}; can you check?", "Following up on the {kw} ticket.",
    "Is there an update on the {kw}?", "Regarding {kw}: what are my options?",
)
_RULE = re.compile(r"^\s*-\s*([A-Za-z][\w-]*)\s*:\s*([A-Za-z][\w-]*)\s*$")


def task_specs() -> list[dict[str, Any]]:
    """The 288 tasks as ``{"id", "prompt", "meta"}``, interleaved by keyword (a positional split covers them all)."""
    return [{"id": f"route-{kw}-{i:02d}", "prompt": opener.format(kw=kw), "meta": {"keyword": kw, "label": label}}
            for i, opener in enumerate(_OPENERS) for kw, label in KEYWORDS.items()]


def _rules(rendered: str) -> dict[str, str]:
    rules: dict[str, str] = {}
    for line in rendered.splitlines():
        m = _RULE.match(line)
        if m:
            rules.setdefault(m.group(1).lower(), m.group(2).lower())
    return rules


class CountingWorkload:
    """``run``, ``propose`` and ``reward`` of the router, each model call slept and counted.

    Args:
        latency: median latency of one model call, in seconds.
        sigma: log-normal shape of the latency.
        seed: seeds the latency and the proposer's noise.
        noise: probability that a proposal names a wrong label.
    """

    def __init__(self, latency: float, sigma: float, seed: int = 0, noise: float = 0.25) -> None:
        self.latency = latency
        self.sigma = sigma
        self.seed = seed
        self.noise = noise
        self.calls = {"run": 0, "propose": 0}
        self._lock = threading.Lock()

    def _uniform(self, *parts: object) -> float:
        digest = hashlib.blake2b(repr((self.seed, *parts)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2.0**64

    def _call(self, kind: str, rules: dict[str, str], task_id: str) -> None:
        with self._lock:
            self.calls[kind] += 1
        key = tuple(sorted(rules.items()))
        u1 = max(self._uniform("lat1", kind, key, task_id), 1e-12)
        u2 = self._uniform("lat2", kind, key, task_id)
        z = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
        time.sleep(self.latency * math.exp(self.sigma * z))

    @property
    def total(self) -> int:
        """Model calls so far (every ``run`` and every ``propose``)."""
        with self._lock:
            return sum(self.calls.values())

    def run(self, rendered: str, task: Any) -> str:
        """Route ``task`` by the first rule whose keyword occurs in its text (one model call)."""
        rules = _rules(rendered)
        self._call("run", rules, task.id)
        for word in re.findall(r"[a-z]+", task.prompt.lower()):
            if word in rules:
                return rules[word]
        return "unknown"

    def propose(self, rendered: str, task: Any, output: str, reward: float) -> str | None:
        """Suggest ``keyword: label`` for the failed task (one model call); None for a solved one."""
        rules = _rules(rendered)
        self._call("propose", rules, task.id)
        if reward >= 1.0:
            return None
        kw, label = str(task.meta["keyword"]), str(task.meta["label"])
        key = tuple(sorted(rules.items()))
        if self._uniform("noise", key, task.id) < self.noise:
            wrong = [lab for lab in LABELS if lab != label]
            label = wrong[int(self._uniform("pick", key, task.id) * len(wrong))]
        return f"{kw}: {label}"

    @staticmethod
    def reward(task: Any, output: str) -> float:
        """1.0 when the label is right, else 0.0 (not a model call)."""
        return 1.0 if output.strip().lower() == task.meta["label"] else 0.0
