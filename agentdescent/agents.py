"""`LLMAgent`: the agent built on a `Provider` (templates, proposal parsing, conversations).

This module owns how an agent turns a task and an artifact into model messages and a
reply into a proposal. The model seam it builds on (`Usage`, `Completion`, `Provider`,
`Agent`, the phase and worker scopes) lives in `agentdescent.model` and is re-exported
here for the public ``agentdescent.agents`` names. It must not import a provider SDK: the
adapters live in `agentdescent.providers` and load their SDKs lazily.
"""

from __future__ import annotations

import logging
import re
import string
import threading
from collections.abc import Mapping
from typing import Any

from .context import ContextManager
from .model import (
    Agent,
    Completion,
    Provider,
    Usage,
    current_worker,
    estimate_tokens,
    thread_tokens,
    usage_phase,
    worker_scope,
)
from .types import Task

__all__ = [
    "DEFAULT_PROPOSE_TEMPLATE",
    "DEFAULT_SOLVE_TEMPLATE",
    "Agent",
    "Completion",
    "LLMAgent",
    "Provider",
    "Usage",
    "current_worker",
    "estimate_tokens",
    "thread_tokens",
    "usage_phase",
    "worker_scope",
]

log = logging.getLogger("agentdescent.agents")

# --------------------------------------------------------------------------- LLMAgent

#: The user message of a solve call. Fields: ``{prompt}`` (required), ``{task_id}``.
DEFAULT_SOLVE_TEMPLATE = "{prompt}"

#: The user message of a propose call. Fields: ``{artifact}``, ``{prompt}`` (required),
#: ``{output}`` (required), ``{reward}`` (a float, so ``{reward:.2f}`` works), ``{task_id}``.
DEFAULT_PROPOSE_TEMPLATE = """\
You are improving the playbook an assistant follows. The assistant answered a task \
below and did not fully succeed.

Current playbook:
{artifact}

Task:
{prompt}

The assistant's answer:
{output}

Score: {reward:.2f} out of 1.

Write ONE general rule, a single sentence, that would have helped the assistant on \
tasks like this one. It must be general (not the answer to this task) and must not \
repeat a rule already in the playbook. Reply with the rule only. If no rule would \
help, reply NONE."""

_SOLVE_FIELDS = {"prompt", "task_id"}
_SOLVE_REQUIRED = ("prompt",)
_PROPOSE_FIELDS = {"artifact", "prompt", "output", "reward", "task_id"}
_PROPOSE_REQUIRED = ("prompt", "output")
_SAMPLE = {"artifact": "a", "prompt": "p", "output": "o", "reward": 0.5, "task_id": "t"}

_NONE_REPLY = re.compile(r"[\W_]*none[\W_]*", re.IGNORECASE)
_RULE_LABEL = re.compile(r"^(?:[-*\u2022]\s+|\d+[.)]\s+)?(?:rule\s*:\s*)?", re.IGNORECASE)


def _is_power_of_ten(n: int) -> bool:
    """1, 10, 100, ...: the occurrences a repeated condition is worth a log line at."""
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


def _check_template(template: Any, knob: str, fields: set[str], required: tuple[str, ...]) -> str:
    """Validate a ``str.format`` template now, so a typo fails at construction, not mid-run."""
    if not isinstance(template, str):
        raise TypeError(f"LLMAgent({knob}=...): expected a str.format template, got {type(template).__name__}")
    known = ", ".join("{" + f + "}" for f in sorted(fields))
    used: set[str] = set()
    try:
        for _, name, _, _ in string.Formatter().parse(template):
            if name is None:
                continue
            root = re.split(r"[.\[]", name, maxsplit=1)[0]
            if root == "" or root.isdigit():
                raise ValueError(
                    f"LLMAgent({knob}=...): positional field {{{name}}} in the template; "
                    f"use named fields ({known}), and double literal braces as {{{{ }}}}"
                )
            if root not in fields:
                raise ValueError(
                    f"LLMAgent({knob}=...): unknown field {{{root}}} in the template; the "
                    f"fields are {known} (double literal braces as {{{{ }}}})"
                )
            used.add(root)
    except ValueError as exc:
        if str(exc).startswith("LLMAgent("):
            raise
        raise ValueError(f"LLMAgent({knob}=...): not a valid str.format template: {exc}") from None
    for name in required:
        if name not in used:
            raise ValueError(
                f"LLMAgent({knob}=...): the template has no {{{name}}} field, so the model "
                f"would never see it; add {{{name}}} (fields: {known})"
            )
    try:
        template.format(**_SAMPLE)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise ValueError(f"LLMAgent({knob}=...): the template does not format: {exc!r}") from None
    return template


class LLMAgent:
    """An `Agent` whose rollouts and proposals are calls to a `Provider`.

    ``solve`` sends the rendered artifact as the system message and the task (through
    ``solve_template``) as the user message, and returns the reply. ``propose`` shows
    the model the artifact, the task, the output and its reward (through
    ``propose_template``) and asks for ONE general rule, or NONE. Proposals stay one
    rule because the strategies turn a proposal into one diff, and small diffs are what
    the aggregator can verify and fuse.

    Every call's tokens land in ``agent.usage``, so an engine's ``max_tokens`` budget
    binds with real models. By default that meter *is* the provider's run meter (the
    provider records and the agent does not record again); with ``usage=`` given, or a
    provider without a ``usage`` meter, the agent records each call's usage itself
    (an offline estimate when the provider reports none).

    Thread-safe: the engines call ``solve`` and ``propose`` from several workers at once.

    Args:
        provider: anything with ``complete(messages, **options) -> Completion``.
        solve_template: ``str.format`` template of the solve user message; fields
            ``{prompt}`` (required) and ``{task_id}``. Default `DEFAULT_SOLVE_TEMPLATE`.
        propose_template: template of the propose user message; fields ``{artifact}``,
            ``{prompt}`` and ``{output}`` (both required), ``{reward}`` (a float),
            ``{task_id}``. Default `DEFAULT_PROPOSE_TEMPLATE`.
        model: passed as ``model=`` on every call (``None``: the provider's default).
        max_tokens: passed as ``max_tokens=`` (``None``: the provider's default).
        temperature: passed as ``temperature=`` (``None``: the provider's default).
        usage: the meter to record into (see above).
        conversation: keep one conversation per worker for proposals across rounds, so
            the proposer remembers what it suggested before; each conversation is a
            `ContextManager` that compacts itself.
        context_max_tokens: the window of each conversation.
        context_options: more ``ContextManager`` arguments (``summary_call_mode``,
            ``summary_fork_min_span_ratio``, ``summary_trigger``, ...).

    Attributes:
        usage: the agent's token meter.
        empty_replies: proposals that came back empty (each treated as no change).
        declined: proposals the model answered with NONE.

    Raises:
        TypeError: ``provider`` has no ``complete`` method, or a template is not a str.
        ValueError: a template uses an unknown field or lacks a required one.
    """

    def __init__(
        self,
        provider: Provider,
        *,
        solve_template: str | None = None,
        propose_template: str | None = None,
        model: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        usage: Usage | None = None,
        conversation: bool = False,
        context_max_tokens: int = 16000,
        context_options: Mapping[str, Any] | None = None,
    ) -> None:
        if not callable(getattr(provider, "complete", None)):
            raise TypeError(
                f"LLMAgent(provider={provider!r:.80}): a provider needs a "
                "complete(messages, **options) method; wrap a plain function with "
                "agentdescent.providers.from_callable(fn)"
            )
        self.provider = provider
        self.solve_template = _check_template(
            DEFAULT_SOLVE_TEMPLATE if solve_template is None else solve_template,
            "solve_template", _SOLVE_FIELDS, _SOLVE_REQUIRED,
        )
        self.propose_template = _check_template(
            DEFAULT_PROPOSE_TEMPLATE if propose_template is None else propose_template,
            "propose_template", _PROPOSE_FIELDS, _PROPOSE_REQUIRED,
        )
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        provider_usage = getattr(provider, "usage", None)
        self._provider_meter = provider_usage if isinstance(provider_usage, Usage) else None
        if usage is None and isinstance(provider_usage, Usage):
            self.usage = provider_usage
            self._provider_records = True
        else:
            self.usage = usage if usage is not None else Usage()
            self._provider_records = provider_usage is self.usage
        self._lock = threading.Lock()
        self.empty_replies = 0
        self.declined = 0
        self.conversation = bool(conversation)
        if isinstance(context_max_tokens, bool) or not isinstance(context_max_tokens, int) or context_max_tokens < 256:
            raise ValueError(f"context_max_tokens={context_max_tokens!r}: use an int >= 256")
        self.context_max_tokens = context_max_tokens
        self.context_options = dict(context_options or {})
        self.conversations: dict[Any, Any] = {}
        if self.conversation:
            self._conversation_for(None)  # fail fast on bad context_options

    def _conversation_for(self, key: Any) -> Any:
        """The compacting conversation of one worker (created on first use)."""
        with self._lock:
            if key not in self.conversations:
                self.conversations[key] = ContextManager(
                    self.provider, max_tokens=self.context_max_tokens, **self.context_options
                )
            return self.conversations[key]

    def __repr__(self) -> str:
        return f"LLMAgent(provider={self.provider!r}, model={self.model!r})"

    def _options(self) -> dict[str, Any]:
        opts = {"model": self.model, "max_tokens": self.max_tokens, "temperature": self.temperature}
        return {k: v for k, v in opts.items() if v is not None}

    def _call(self, messages: list[dict[str, str]]) -> str:
        result = self.provider.complete(messages, **self._options())
        if isinstance(result, str):
            result = Completion(result)
        if not isinstance(result, Completion):
            raise TypeError(
                f"LLMAgent: {self.provider!r:.80}.complete() returned a "
                f"{type(result).__name__}; a provider must return a Completion"
            )
        text = result.text if isinstance(result.text, str) else ""
        if not self._provider_records:
            call = result.usage
            if self._provider_meter is not None and call is not None:
                self.usage.mirror(call)  # the provider's own meter already counted it
            else:
                if call is None:
                    prompt = "\n\n".join(m["content"] for m in messages)
                    call = Usage(estimate_tokens(prompt), estimate_tokens(text), 0, 1)
                self.usage.add(call)
        return text

    def _converse(self, user: str) -> str:
        """Send ``user`` inside this worker's conversation (compacted when it grows)."""
        worker = current_worker()
        key = worker if worker is not None else f"thread-{threading.get_ident()}"
        cm = self._conversation_for(key)
        cm.add_message({"role": "user", "content": user})
        view = cm.get_messages_for_request()
        text = self._call(view)
        cm.note_request_sent(view, model=self.model)
        cm.add_message({"role": "assistant", "content": text})
        return text

    def solve(self, rendered: str, task: Task) -> str:
        """Run ``task`` with the rendered artifact as the system message.

        Returns:
            The model's reply (possibly empty).

        Raises:
            ProviderError: the provider failed (after its own retries).
        """
        messages = []
        if rendered.strip():
            messages.append({"role": "system", "content": rendered})
        user = self.solve_template.format(prompt=task.prompt, task_id=task.id)
        messages.append({"role": "user", "content": user})
        return self._call(messages)

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        """Ask for one general rule that would have helped on ``task``, or ``None``.

        A reply of NONE (any case, with punctuation or markup around it, or as its
        first line) means no change. An empty reply is also no change, with a warning
        at the 1st, 10th, 100th... occurrence (an empty proposal usually means a
        ``max_tokens`` too small for a reasoning model, which is worth hearing about
        once, not per call). A leading bullet or ``Rule:`` label is stripped.

        Returns:
            The rule text, or ``None`` for no change.

        Raises:
            ProviderError: the provider failed (after its own retries).
        """
        user = self.propose_template.format(
            artifact=rendered.strip() or "(empty)",
            prompt=task.prompt,
            output=output,
            reward=float(reward),
            task_id=task.id,
        )
        if self.conversation:
            text = self._converse(user)
        else:
            text = self._call([{"role": "user", "content": user}])
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if lines and _NONE_REPLY.fullmatch(lines[0]):
            with self._lock:
                self.declined += 1
            return None
        rule = _RULE_LABEL.sub("", text.strip(), count=1).strip()
        if not rule:
            with self._lock:
                self.empty_replies += 1
                n = self.empty_replies
            if _is_power_of_ten(n):
                log.warning(
                    "LLMAgent: the provider returned an empty proposal (%d so far, model "
                    "%r); each is treated as no change. If this keeps happening, raise "
                    "max_tokens (a reasoning model may spend it all before answering) or "
                    "check propose_template",
                    n, self.model,
                )
            return None
        return rule
