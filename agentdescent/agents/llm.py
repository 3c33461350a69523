"""`LLMAgent`: the agent built on a `Provider` (templates, conversations, refusal counts).

This module owns how an agent turns a task and an artifact into model messages (the
solve, propose and rewrite templates), how it keeps one conversation per worker when
asked, and how it counts what its provider spent. How a reply becomes a proposal is
`agentdescent.agents.proposals`'s; the model seam it builds on is `agentdescent.model`'s and the
meters are `agentdescent.usage`'s (both re-exported here under the public
``agentdescent.agents.llm`` names). It must not import a provider SDK: the adapters live in
`agentdescent.providers` and load their SDKs lazily.
"""

from __future__ import annotations

import logging
import re
import string
import threading
from collections.abc import Mapping
from typing import Any

from ..context.compaction import ContextManager
from ..errors import InvalidArgument, InvalidArgumentType
from ..messages import messages_to_prompt
from ..model import Agent, Completion, Provider
from ..seams import adopt
from ..tokens import estimate_tokens
from ..types import Task, sanitize_text
from ..usage import Usage, current_worker, thread_tokens, usage_phase, worker_scope
from ..validation import RENAMED, check_int, check_real, check_renamed
from .proposals import (
    DEFAULT_MAX_CHARS,
    REFUSAL_KINDS,
    TRUNCATED_FINISH_REASONS,
    ParsedProposal,
    is_blank_artifact,
    parse_proposal,
)

__all__ = [
    "DEFAULT_EDIT_TEMPLATE",
    "DEFAULT_PROPOSE_TEMPLATE",
    "DEFAULT_REWRITE_TEMPLATE",
    "DEFAULT_SOLVE_TEMPLATE",
    "feedback_paragraph",
    "REFUSAL_KINDS",
    "TRUNCATED_FINISH_REASONS",
    "Agent",
    "Completion",
    "LLMAgent",
    "ParsedProposal",
    "Provider",
    "Usage",
    "current_worker",
    "estimate_tokens",
    "is_blank_artifact",
    "parse_proposal",
    "thread_tokens",
    "usage_phase",
    "worker_scope",
]

log = logging.getLogger("agentdescent.agents")

# --------------------------------------------------------------------------- templates

#: The user message of a solve call. Fields: ``{prompt}`` (required), ``{task_id}``, and
#: ``{artifact}``: a template that uses it puts the artifact in the user message and sends
#: no system message.
DEFAULT_SOLVE_TEMPLATE = "{prompt}"

#: The user message of a propose call in rule mode (the default). Fields: ``{artifact}``,
#: ``{prompt}`` (required), ``{output}`` (required), ``{reward}`` (a float, so
#: ``{reward:.2f}`` works), ``{task_id}``, ``{feedback}`` (the reward's feedback as a
#: paragraph — a blank line, then ``Feedback on the answer: ...`` — or nothing when the
#: reward gave none, so a float reward's prompt is unchanged) and ``{feedback_text}`` (the
#: feedback itself, or ``""``).
DEFAULT_PROPOSE_TEMPLATE = """\
You are improving the playbook an assistant follows. The assistant answered a task \
below and did not fully succeed.

Current playbook:
{artifact}

Task:
{prompt}

The assistant's answer:
{output}

Score: {reward:.2f} out of 1.{feedback}

Write ONE general rule, a single sentence, that would have helped the assistant on \
tasks like this one. It must be general (not the answer to this task) and must not \
repeat a rule already in the playbook. Reply with the rule only. If no rule would \
help, reply NONE."""

#: The user message of a propose call in rewrite mode (``proposal="rewrite"``, for
#: `agentdescent.SingleSlot`): the model returns the whole new text. Same fields as
#: `DEFAULT_PROPOSE_TEMPLATE`; ``{artifact}`` is required too.
DEFAULT_REWRITE_TEMPLATE = """\
You are improving the instructions an assistant follows. The assistant answered a task \
below and did not fully succeed.

Current instructions:
{artifact}

Task:
{prompt}

The assistant's answer:
{output}

Score: {reward:.2f} out of 1.{feedback}

Rewrite the instructions so that the assistant does better on tasks like this one. Keep \
what works, change as little as needed, and keep them general (never put the answer to \
this task in them). Reply with the complete new instructions only. If no change would \
help, reply NONE."""

#: The user message of a propose call in edit mode (``proposal="edit"``, for
#: `agentdescent.code.FileTree`): the model returns search/replace blocks. Same fields as
#: `DEFAULT_PROPOSE_TEMPLATE`; ``{artifact}`` is required too. ``{prompt}`` is the failing
#: test (its id and source), ``{output}`` what the test run reported (its assertion
#: message: the same text as the reward's feedback, so ``{feedback}`` is left out).
DEFAULT_EDIT_TEMPLATE = """\
You are fixing the code of a project so that its tests pass. One test fails.

The project's files:
{artifact}

The failing test:
{prompt}

What the test run reported:
{output}

Fix the code (never the tests) with the smallest change that makes this test pass \
without breaking the others. Reply with one or more edits, each in exactly this form:

path/of/the/file.py
<<<<<<< SEARCH
the exact current lines to replace
=======
the new lines
>>>>>>> REPLACE

The SEARCH part must copy the current lines exactly, whitespace included, and occur \
once in the file. If no change would help, reply NONE."""

_SOLVE_FIELDS = {"artifact", "prompt", "task_id"}
_SOLVE_REQUIRED = ("prompt",)
_PROPOSE_FIELDS = {"artifact", "prompt", "output", "reward", "task_id", "feedback", "feedback_text"}
_PROPOSE_REQUIRED = ("prompt", "output")
_REWRITE_REQUIRED = ("artifact", "prompt", "output")
_SAMPLE = {"artifact": "a", "prompt": "p", "output": "o", "reward": 0.5, "task_id": "t", "feedback": "",
           "feedback_text": ""}


def feedback_paragraph(feedback: str) -> str:
    """The ``{feedback}`` field of a proposal template: a paragraph, or ``""`` when there is none."""
    return f"\n\nFeedback on the answer: {feedback}" if feedback else ""



def _is_power_of_ten(n: int) -> bool:
    """1, 10, 100, ...: the occurrences a repeated condition is worth a log line at."""
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


def _check_template(template: Any, knob: str, fields: set[str], required: tuple[str, ...]) -> str:
    """Validate a ``str.format`` template now, so a typo fails at construction, not mid-run."""
    if not isinstance(template, str):
        raise InvalidArgumentType(f"LLMAgent({knob}=...): expected a str.format template, got {type(template).__name__}")
    known = ", ".join("{" + f + "}" for f in sorted(fields))
    used: set[str] = set()
    try:
        for _, name, _, _ in string.Formatter().parse(template):
            if name is None:
                continue
            root = re.split(r"[.\[]", name, maxsplit=1)[0]
            if root == "" or root.isdigit():
                raise InvalidArgument(
                    f"LLMAgent({knob}=...): positional field {{{name}}} in the template; "
                    f"use named fields ({known}), and double literal braces as {{{{ }}}}"
                )
            if root not in fields:
                raise InvalidArgument(
                    f"LLMAgent({knob}=...): unknown field {{{root}}} in the template; the "
                    f"fields are {known} (double literal braces as {{{{ }}}})"
                )
            used.add(root)
    except InvalidArgument:
        raise
    except ValueError as exc:
        raise InvalidArgument(f"LLMAgent({knob}=...): not a valid str.format template: {exc}") from None
    for name in required:
        if name not in used:
            raise InvalidArgument(
                f"LLMAgent({knob}=...): the template has no {{{name}}} field, so the model "
                f"would never see it; add {{{name}}} (fields: {known})"
            )
    try:
        template.format(**_SAMPLE)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise InvalidArgument(f"LLMAgent({knob}=...): the template does not format: {exc!r}") from None
    return template


def _uses_field(template: str, field: str) -> bool:
    return any(
        name is not None and re.split(r"[.\[]", name, maxsplit=1)[0] == field
        for _, name, _, _ in string.Formatter().parse(template)
    )


# --------------------------------------------------------------------------- LLMAgent

_STAT_NAMES = ("solves", "solves_truncated", "proposals", "rules", "declined", *REFUSAL_KINDS, "cleaned")


class LLMAgent(Agent):
    """An `Agent` whose rollouts and proposals are calls to a `Provider`.

    **Solve.** By default the rendered artifact is the system message and the task
    (through ``solve_template``) the user message. A ``solve_template`` that uses
    ``{artifact}`` puts the artifact in the user message instead and sends no system
    message: use it for chat templates that drop system messages. An empty artifact
    (only white space and markdown headings, such as an `AppendRules` playbook with no
    rules yet: see `is_blank_artifact`) sends no system message and fills ``{artifact}``
    with ``""``.

    **Propose.** ``propose`` shows the model the artifact, the task, the output, its
    reward and, when the reward is a `agentdescent.rewards.builtin.Score` with feedback, what the
    reward said (through ``propose_template``) and turns the reply into exactly one proposal
    or ``None`` (`parse_proposal`). In ``proposal="rule"`` mode (the default, for
    `AppendRules` and `KeyedRules`) that is one general rule; in ``"rewrite"`` mode (for
    `SingleSlot`) the whole new text; in ``"edit"`` mode (for `agentdescent.code.FileTree`)
    search/replace blocks (`DEFAULT_EDIT_TEMPLATE`). Proposals stay small because the strategies turn a
    proposal into one diff, and small diffs are what the aggregator can verify and fuse.
    A reply cut off by the per-call limit, one that restates the artifact or echoes the
    task, one over ``max_proposal_chars`` and one that is not a rule are refused (None),
    each kind counted in `stats`.

    **Two models.** With ``propose_with=`` another provider writes the proposals (a
    stronger or a cheaper model) while ``provider`` answers the tasks; each records into
    its own meter, and both reach the run's meter, by phase.

    Every call's tokens land in ``agent.usage``, so an engine's ``max_tokens`` budget
    binds with real models. By default that meter *is* the provider's run meter (the
    provider records and the agent does not record again); with ``usage=`` given, or a
    provider without a ``usage`` meter, the agent records each call's usage itself
    (an offline estimate when the provider reports none).

    Thread-safe: the engines call ``solve`` and ``propose`` from several workers at once.

    Args:
        provider: anything with ``complete(messages, **options) -> Completion``.
        solve_template: ``str.format`` template of the solve user message; fields
            ``{prompt}`` (required), ``{task_id}``, ``{artifact}`` (moves the artifact
            from the system message into this message). Default `DEFAULT_SOLVE_TEMPLATE`.
        propose_template: template of the propose user message; fields ``{artifact}``,
            ``{prompt}`` and ``{output}`` (both required; ``{artifact}`` too in rewrite
            mode), ``{reward}`` (a float), ``{task_id}``, ``{feedback}`` (the reward's
            feedback as a paragraph, or nothing: see `DEFAULT_PROPOSE_TEMPLATE`) and
            ``{feedback_text}``. Default `DEFAULT_PROPOSE_TEMPLATE`
            (`DEFAULT_REWRITE_TEMPLATE` in rewrite mode, `DEFAULT_EDIT_TEMPLATE` in edit mode).
        proposal: ``"rule"`` (one rule per proposal), ``"rewrite"`` (the whole text) or
            ``"edit"`` (search/replace blocks for `agentdescent.code.FileTree`, passed on
            as written: the tree parses them strictly).
        max_proposal_chars: the longest proposal accepted, in characters (default 400
            for a rule, 4000 for a rewrite); a longer one is refused as ``too_long``.
        model: passed as ``model=`` on every call (``None``: the provider's default).
        call_tokens: the **per-call** cap on each reply's length, in tokens, sent as the
            provider's ``max_tokens=`` option (``None``: the provider's default); an int > 0.
            Not the run's token budget: that is ``evolve(max_tokens=...)``.
        temperature: passed as ``temperature=`` (``None``: the provider's default); a
            number >= 0.
        usage: the meter to record into (see above).
        conversation: keep one conversation per worker for proposals across rounds, so
            the proposer remembers what it suggested before; each conversation is a
            `ContextManager` that compacts itself.
        context_max_tokens: the window of each conversation.
        context_options: more ``ContextManager`` arguments (``summary_call_mode``,
            ``summary_fork_min_span_ratio``, ``summary_trigger``, ...).
        propose_with: a second provider that writes the proposals (and keeps the
            conversations); None: ``provider`` does both.
        propose_model: ``model=`` for the proposal calls (default: ``model`` when the
            proposer is ``provider``, else the proposer's own default).
        max_tokens: refused, whatever its value: the per-call cap's old name (now
            ``call_tokens``); ``max_tokens`` is the run's budget, given to `evolve`.

    Attributes:
        usage: the agent's token meter.
        empty_replies: proposals that came back empty (``stats()["empty"]``).
        declined: proposals the model answered with NONE (``stats()["declined"]``).

    Raises:
        TypeError: ``provider`` has no ``complete`` method, a template is not a str, or
            ``call_tokens`` / ``temperature`` / ``max_proposal_chars`` has the wrong type.
        ValueError: a template uses an unknown field or lacks a required one; a limit
            is out of range; ``proposal`` is not ``"rule"``, ``"rewrite"`` or ``"edit"``;
            ``max_tokens`` is given (an `agentdescent.errors.InvalidArgument` naming
            ``call_tokens``).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        solve_template: str | None = None,
        propose_template: str | None = None,
        proposal: str = "rule",
        max_proposal_chars: int | None = None,
        model: str | None = None,
        call_tokens: int | None = None,
        temperature: float | None = None,
        usage: Usage | None = None,
        conversation: bool = False,
        context_max_tokens: int = 16000,
        context_options: Mapping[str, Any] | None = None,
        propose_with: Provider | None = None,
        propose_model: str | None = None,
        max_tokens: Any = RENAMED,
    ) -> None:
        check_renamed(max_tokens, "max_tokens", "call_tokens", owner="LLMAgent", what="the per-call reply cap",
                      why="max_tokens is the run's token budget, given to evolve(max_tokens=...)")
        self.provider = adopt(provider, Provider, "provider",
                              fix="wrap a plain function with agentdescent.providers.from_callable(fn)")
        self.proposer = self.provider if propose_with is None else adopt(
            propose_with, Provider, "propose_with",
            fix="wrap a plain function with agentdescent.providers.from_callable(fn)")
        if propose_model is not None and not isinstance(propose_model, str):
            raise InvalidArgumentType(f"LLMAgent(propose_model={propose_model!r:.80}): give a model name")
        if proposal not in DEFAULT_MAX_CHARS:
            raise InvalidArgument(
                f"LLMAgent(proposal={proposal!r}): use 'rule' (one rule per proposal, for "
                "AppendRules/KeyedRules), 'rewrite' (the whole text, for SingleSlot) or 'edit' "
                "(search/replace blocks, for agentdescent.code.FileTree)"
            )
        self.proposal = proposal
        self.solve_template = _check_template(
            DEFAULT_SOLVE_TEMPLATE if solve_template is None else solve_template,
            "solve_template", _SOLVE_FIELDS, _SOLVE_REQUIRED,
        )
        self._artifact_in_user = _uses_field(self.solve_template, "artifact")
        default_propose = {"rule": DEFAULT_PROPOSE_TEMPLATE, "rewrite": DEFAULT_REWRITE_TEMPLATE,
                           "edit": DEFAULT_EDIT_TEMPLATE}[proposal]
        self.propose_template = _check_template(
            default_propose if propose_template is None else propose_template,
            "propose_template", _PROPOSE_FIELDS,
            _PROPOSE_REQUIRED if proposal == "rule" else _REWRITE_REQUIRED,
        )
        self.max_proposal_chars = check_int(
            DEFAULT_MAX_CHARS[proposal] if max_proposal_chars is None else max_proposal_chars,
            "max_proposal_chars", low=1, owner="LLMAgent",
            hint="the longest proposal accepted, in characters",
        )
        self.call_tokens = check_int(
            call_tokens, "call_tokens", low=1, optional=True, owner="LLMAgent",
            hint="the per-call cap on each reply's length in tokens (None: the provider's "
            "default); the run's token budget is evolve(max_tokens=...), not this",
        )
        self.temperature = check_real(temperature, "temperature", low=0.0, optional=True, owner="LLMAgent",
                                      hint="None: the provider's default")
        self.model = model
        self.propose_model = propose_model if propose_model is not None else (
            model if self.proposer is self.provider else None)
        provider_usage = self.provider.usage
        self._provider_meter = provider_usage if isinstance(provider_usage, Usage) else None
        if usage is None and isinstance(provider_usage, Usage):
            self.usage = provider_usage
            self._provider_records = True
        else:
            self.usage = usage if usage is not None else Usage()
            self._provider_records = provider_usage is self.usage
        proposer_usage = self.proposer.usage
        #: the proposer's own meter (its calls land there and, through the run's scopes, in the run meter)
        self.propose_usage = proposer_usage if isinstance(proposer_usage, Usage) else self.usage
        self._lock = threading.Lock()
        self._stats = dict.fromkeys(_STAT_NAMES, 0)
        self._examples: dict[str, str] = {}
        self.conversation = bool(conversation)
        self.context_max_tokens = check_int(context_max_tokens, "context_max_tokens", low=256, owner="LLMAgent")
        self.context_options = dict(context_options or {})
        self.conversations: dict[Any, Any] = {}
        if self.conversation:
            self._conversation_for(None)  # fail fast on bad context_options

    # -- counters ------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """What the agent did with the replies it got, as a consistent copy of its counters.

        Keys: ``solves`` (solve calls), ``solves_truncated`` (solve replies cut off by
        ``call_tokens``: an answer cut short usually scores 0), ``proposals`` (propose
        calls that returned), ``rules`` (proposals returned as a rule or rewrite),
        ``declined`` (the model answered NONE), one key per refusal kind in
        `REFUSAL_KINDS` (``truncated``, ``empty``, ``restated``, ``echoed``,
        ``too_long``, ``not_a_rule``), ``refused`` (their sum), and ``cleaned`` (rules
        returned after something was stripped from the reply). ``proposals == rules +
        declined + refused``.
        """
        with self._lock:
            out = dict(self._stats)
        out["refused"] = sum(out[k] for k in REFUSAL_KINDS)
        return out

    def refusal_examples(self) -> dict[str, str]:
        """The latest refused reply of each refusal kind (``REFUSAL_KINDS``), cut to 200 characters.

        What the command line's ``status --verbose`` shows next to the counts: one reply
        the agent could not use, per kind, so a user sees *why* (an explanation instead of
        a rule, a reply cut off by the per-call limit...).
        """
        with self._lock:
            return dict(self._examples)

    @property
    def empty_replies(self) -> int:
        """Proposals that came back empty (each treated as no change)."""
        with self._lock:
            return self._stats["empty"]

    @property
    def declined(self) -> int:
        """Proposals the model answered with NONE."""
        with self._lock:
            return self._stats["declined"]

    def _bump(self, name: str) -> int:
        with self._lock:
            self._stats[name] += 1
            return self._stats[name]

    # -- calls ---------------------------------------------------------------------------

    def _conversation_for(self, key: Any) -> Any:
        """The compacting conversation of one worker (created on first use)."""
        with self._lock:
            if key not in self.conversations:
                self.conversations[key] = ContextManager(
                    self.proposer, max_tokens=self.context_max_tokens, **self.context_options
                )
            return self.conversations[key]

    def __repr__(self) -> str:
        if self.proposer is not self.provider:
            return f"LLMAgent(provider={self.provider!r}, model={self.model!r}, propose_with={self.proposer!r})"
        return f"LLMAgent(provider={self.provider!r}, model={self.model!r})"

    def _options(self, model: str | None = None) -> dict[str, Any]:
        opts = {"model": model, "max_tokens": self.call_tokens, "temperature": self.temperature}
        return {k: v for k, v in opts.items() if v is not None}

    def _call(self, messages: list[dict[str, str]], *, propose: bool = False) -> Completion:
        provider = self.proposer if propose else self.provider
        result = provider.complete(messages, **self._options(self.propose_model if propose else self.model))
        if isinstance(result, str):
            result = Completion(result)
        if not isinstance(result, Completion):
            raise InvalidArgumentType(
                f"LLMAgent: {provider!r:.80}.complete() returned a "
                f"{type(result).__name__}; a provider must return a Completion"
            )
        text = result.text if isinstance(result.text, str) else ""
        if provider is self.provider:
            records, meter = self._provider_records, self._provider_meter
        else:  # the proposer: its own meter counts its calls, else the agent does
            meter = self.proposer.usage if isinstance(self.proposer.usage, Usage) else None
            records = meter is not None
        if not records:
            call = result.usage
            if meter is not None and call is not None:
                self.usage.mirror(call)  # the provider's own meter already counted it
            else:
                if call is None:
                    call = Usage.estimate(messages_to_prompt(messages), text)
                self.usage.add(call)
        return Completion(text, result.usage, result.finish_reason, tuple(result.tool_calls or ()))

    def _converse(self, user: str) -> Completion:
        """Send ``user`` inside this worker's conversation (compacted when it grows)."""
        worker = current_worker()
        key = worker if worker is not None else f"thread-{threading.get_ident()}"
        cm = self._conversation_for(key)
        cm.add_message({"role": "user", "content": user})
        view = cm.get_messages_for_request()
        reply = self._call(view, propose=True)
        cm.note_request_sent(view, model=self.propose_model)
        cm.add_message({"role": "assistant", "content": reply.text})
        return reply

    def messages_for_solve(self, rendered: str, task: Task) -> list[dict[str, str]]:
        """The messages ``solve`` sends for ``task`` (to check where the artifact goes).

        The artifact is the system message, unless ``solve_template`` uses
        ``{artifact}``; an empty artifact (`is_blank_artifact`) sends no system message.
        """
        blank = is_blank_artifact(rendered)
        fields = {"prompt": task.prompt, "task_id": task.id}
        if self._artifact_in_user:
            user = self.solve_template.format(artifact="" if blank else rendered, **fields)
            return [{"role": "user", "content": user.strip() if blank else user}]
        messages = [] if blank else [{"role": "system", "content": rendered}]
        messages.append({"role": "user", "content": self.solve_template.format(**fields)})
        return messages

    def solve(self, rendered: str, task: Task) -> str:
        """Run ``task`` with the rendered artifact (see `messages_for_solve` for where it goes).

        Returns:
            The model's reply (possibly empty). A reply cut off by ``call_tokens`` is
            returned as it is and counted (``stats()["solves_truncated"]``, with a
            warning at the 1st, 10th, 100th... one).

        Raises:
            ProviderError: the provider failed (after its own retries).
        """
        reply = self._call(self.messages_for_solve(rendered, task))
        self._bump("solves")
        if reply.finish_reason in TRUNCATED_FINISH_REASONS:
            n = self._bump("solves_truncated")
            if _is_power_of_ten(n):
                log.warning(
                    "LLMAgent: a solve reply was cut off by the per-call limit call_tokens=%s "
                    "(%d so far, model %r); a cut-off answer usually scores 0. Raise "
                    "LLMAgent(call_tokens=...) (the per-call limit, not evolve's budget)",
                    self.call_tokens, n, self.model,
                )
        return reply.text

    def propose(self, rendered: str, task: Task, output: str, reward: float) -> str | None:
        """Ask for one general rule (or, in rewrite mode, a new text) that would have helped.

        The reply goes through `parse_proposal`: a reply of NONE (any case, with
        punctuation or markup around it, or as its first line) is no change
        (``declined``); headings, list markers, labels, quotes and meta-commentary are
        stripped; a reply cut off by ``call_tokens``, one that restates the artifact or
        echoes the task, one over ``max_proposal_chars`` and one that is not a rule are
        refused. Every outcome is counted in `stats`. Empty and cut-off replies also log a
        warning at their 1st, 10th, 100th... occurrence (usually ``call_tokens`` is too
        small, for a reasoning model especially).

        Returns:
            The rule (or rewritten text), or ``None`` for no change.

        Raises:
            ProviderError: the provider failed (after its own retries).
        """
        blank = is_blank_artifact(rendered)
        feedback = sanitize_text(str(getattr(reward, "feedback", "") or "")).strip()
        user = self.propose_template.format(
            artifact="(empty)" if blank else rendered.strip(),
            prompt=task.prompt,
            output=output,
            reward=float(reward),
            task_id=task.id,
            feedback=feedback_paragraph(feedback),
            feedback_text=feedback,
        )
        if self.conversation:
            reply = self._converse(user)
        else:
            reply = self._call([{"role": "user", "content": user}], propose=True)
        parsed = parse_proposal(
            reply.text, artifact="" if blank else rendered, prompt=task.prompt, output=output,
            finish_reason=reply.finish_reason, mode=self.proposal, max_chars=self.max_proposal_chars,
        )
        with self._lock:
            self._stats["proposals"] += 1
            self._stats["rules" if parsed.kind == "rule" else parsed.kind] += 1
            if parsed.kind == "rule" and parsed.cleaned:
                self._stats["cleaned"] += 1
            if parsed.kind in REFUSAL_KINDS:
                text = " ".join(str(reply.text or "").split())
                self._examples[parsed.kind] = text if len(text) <= 200 else text[:197] + "..."
            n = self._stats["rules" if parsed.kind == "rule" else parsed.kind]
        if parsed.kind in ("empty", "truncated") and _is_power_of_ten(n):
            what = "empty" if parsed.kind == "empty" else "cut off by the per-call limit"
            log.warning(
                "LLMAgent: %d proposal(s) so far came back %s (model %r, call_tokens=%s); "
                "each is treated as no change. If this keeps happening, raise "
                "LLMAgent(call_tokens=...), the per-call limit (a reasoning model may spend "
                "it all before answering), or check propose_template",
                n, what, self.model, self.call_tokens,
            )
        elif parsed.kind != "rule":
            log.debug("LLMAgent: proposal refused (%s): %.120r", parsed.kind, reply.text)
        return parsed.text


