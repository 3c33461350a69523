"""`LLMAgent`: the agent built on a `Provider` (templates, conversations, refusal counts).

This module owns how an agent turns a task and an artifact into model messages (the
templates filled, the artifact's demonstrations sent as chat turns, other failures shown
to the proposer), how it keeps one conversation per worker when asked, how it consults a
call cache, and how it counts what its provider spent. The templates and the text that
fills them are `agentdescent.agents.templates`'s (re-exported here), the cache
`agentdescent.agents.callcache`'s; how a reply becomes a proposal is
`agentdescent.agents.proposals`'s; the model seam it builds on is `agentdescent.model`'s and the
meters are `agentdescent.usage`'s (both re-exported here under the public
``agentdescent.agents.llm`` names). It must not import a provider SDK: the adapters live in
`agentdescent.providers` and load their SDKs lazily.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..context.compaction import ContextManager
from ..errors import InvalidArgument, InvalidArgumentType
from ..fewshot import split_demonstrations
from ..messages import messages_to_prompt
from ..model import Agent, Completion, Provider
from ..seams import adopt
from ..tokens import estimate_tokens
from ..types import Task
from ..usage import Usage, current_worker, thread_tokens, usage_phase, worker_scope
from ..validation import RENAMED, check_int, check_real, check_renamed
from .callcache import CallCache, active_call_cache, as_call_cache
from .proposals import (
    DEFAULT_MAX_CHARS,
    REFUSAL_KINDS,
    TRUNCATED_FINISH_REASONS,
    ParsedProposal,
    is_blank_artifact,
    parse_proposal,
)
from .templates import (
    DEFAULT_EDIT_TEMPLATE,
    DEFAULT_PROPOSE_TEMPLATE,
    DEFAULT_REWRITE_TEMPLATE,
    DEFAULT_SOLVE_TEMPLATE,
    PROPOSE_FIELDS,
    PROPOSE_REQUIRED,
    REWRITE_REQUIRED,
    SOLVE_FIELDS,
    SOLVE_REQUIRED,
    check_template,
    feedback_of,
    feedback_paragraph,
    others_paragraph,
    shown_artifact,
    uses_field,
)

__all__ = [
    "DEFAULT_EDIT_TEMPLATE",
    "DEFAULT_PROPOSE_TEMPLATE",
    "DEFAULT_REWRITE_TEMPLATE",
    "DEFAULT_SOLVE_TEMPLATE",
    "CallCache",
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


def _is_power_of_ten(n: int) -> bool:
    """1, 10, 100, ...: the occurrences a repeated condition is worth a log line at."""
    while n >= 10 and n % 10 == 0:
        n //= 10
    return n == 1


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
    with ``""``. An artifact that holds demonstrations (the block of `agentdescent.fewshot`,
    rendered by `agentdescent.merge.demonstrations`) is split: its instructions take the
    artifact's place above, and each demonstration follows as two chat turns, in order (a
    user message, ``solve_template`` filled with the demonstration's input, ``task_id``
    ``"demo-1"``, ``"demo-2"``... and an empty ``{artifact}``; then an assistant message,
    its output), before the task's user message. Blank instructions with demonstrations
    send no system message, but still the turns. See `messages_for_solve`.

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
    each kind counted in `stats`. The artifact is shown as its instructions and, when it
    holds demonstrations, a short list of them (`shown_artifact`), never as raw markers.

    **Several failures.** With ``reflect_on=k`` (k > 1) the engines pass up to ``k - 1``
    other failed rollouts of the same worker on the same artifact version
    (``propose(..., failures=[(task, output, reward), ...])``); they are shown through the
    ``{others}`` field (`others_paragraph`), so one proposal can fix what several failures
    share. A reply that echoes any shown task or answer is refused as ``echoed``.

    **A cache of calls.** With ``call_cache=`` (a `CallCache` or a folder), or inside a
    run given ``evolve(call_cache=...)``, a call made before at temperature 0 is answered
    from disk: the provider is not called and no tokens are recorded anywhere.

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
            ``{feedback_text}``, ``{others}`` (the other failures, with ``reflect_on``).
            Default `DEFAULT_PROPOSE_TEMPLATE`
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
        reflect_on: how many failed rollouts one proposal request may show (an int in
            [1, 16]; default 1: only the one that prompts it, as always).
        call_cache: a `CallCache` (or its folder) this agent's calls use; None: the run's
            ``call_cache``, if any (`agentdescent.agents.callcache.active_call_cache`).
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
        reflect_on: int = 1,
        call_cache: CallCache | str | Any = None,
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
        self.solve_template = check_template(
            DEFAULT_SOLVE_TEMPLATE if solve_template is None else solve_template,
            "solve_template", SOLVE_FIELDS, SOLVE_REQUIRED,
        )
        self._artifact_in_user = uses_field(self.solve_template, "artifact")
        default_propose = {"rule": DEFAULT_PROPOSE_TEMPLATE, "rewrite": DEFAULT_REWRITE_TEMPLATE,
                           "edit": DEFAULT_EDIT_TEMPLATE}[proposal]
        self.propose_template = check_template(
            default_propose if propose_template is None else propose_template,
            "propose_template", PROPOSE_FIELDS,
            PROPOSE_REQUIRED if proposal == "rule" else REWRITE_REQUIRED,
        )
        self._shows_others = uses_field(self.propose_template, "others")
        self.reflect_on = check_int(
            reflect_on, "reflect_on", low=1, high=16, owner="LLMAgent",
            hint="how many failed rollouts one proposal request shows (1: only the one that prompts it)",
        )
        self.call_cache = as_call_cache(call_cache)
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
        """One call: answered by the call cache when it holds it (nothing sent, nothing recorded), else sent and metered.

        The cache is the agent's own (``call_cache=``), else the run's (`active_call_cache`).
        Its key has the ``model`` option, not the provider: the solver's and the proposer's
        calls are told apart by ``model`` / ``propose_model`` (and by their messages).
        """
        provider = self.proposer if propose else self.provider
        options = self._options(self.propose_model if propose else self.model)
        cache = self.call_cache if self.call_cache is not None else active_call_cache()
        if cache is not None:
            hit = cache.get(messages, options)
            if hit is not None:  # charged 0: no meter records it, the provider never sees it
                return Completion(hit.text, hit.usage, hit.finish_reason, tuple(hit.tool_calls or ()))
        result = provider.complete(messages, **options)
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
        spent = result.usage
        if not records:
            if meter is not None and spent is not None:
                self.usage.mirror(spent)  # the provider's own meter already counted it
            else:
                if spent is None:
                    spent = Usage.estimate(messages_to_prompt(messages), text)
                self.usage.add(spent)
        reply = Completion(text, result.usage, result.finish_reason, tuple(result.tool_calls or ()))
        if cache is not None:  # what the call cost, so a later hit knows what it saved
            cache.put(messages, options, Completion(text, spent, reply.finish_reason, reply.tool_calls))
        return reply

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

        The artifact's instructions (the whole rendered text when it holds no
        demonstrations: `agentdescent.fewshot.split_demonstrations`) are the system
        message, unless ``solve_template`` uses ``{artifact}`` (then they fill it in the
        task's user message); blank instructions (`is_blank_artifact`) send no system
        message. The demonstrations follow, in order, each as a user turn
        (``solve_template`` on its input, ``task_id`` ``"demo-<n>"``, ``{artifact}`` empty)
        and an assistant turn (its output); the task's user message comes last.
        """
        instructions, pairs = split_demonstrations(rendered)
        blank = is_blank_artifact(instructions)
        messages: list[dict[str, str]] = []
        if not blank and not self._artifact_in_user:
            messages.append({"role": "system", "content": instructions})
        for n, (given, expected) in enumerate(pairs, start=1):
            messages.append({"role": "user", "content": self._solve_user(given, f"demo-{n}", None)})
            messages.append({"role": "assistant", "content": expected})
        messages.append({"role": "user", "content": self._solve_user(task.prompt, task.id, None if blank else instructions)})
        return messages

    def _solve_user(self, prompt: str, task_id: str, artifact: str | None) -> str:
        """``solve_template`` filled; with ``{artifact}`` in it and no artifact (None), stripped."""
        if not self._artifact_in_user:
            return self.solve_template.format(prompt=prompt, task_id=task_id)
        user = self.solve_template.format(artifact="" if artifact is None else artifact, prompt=prompt, task_id=task_id)
        return user.strip() if artifact is None else user

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

    def propose(self, rendered: str, task: Task, output: str, reward: float, *,
                failures: Sequence[tuple[Task, str, float]] = ()) -> str | None:
        """Ask for one general rule (or, in rewrite mode, a new text) that would have helped.

        The reply goes through `parse_proposal`: a reply of NONE (any case, with
        punctuation or markup around it, or as its first line) is no change
        (``declined``); headings, list markers, labels, quotes and meta-commentary are
        stripped; a reply cut off by ``call_tokens``, one that restates the artifact or
        echoes the task, one over ``max_proposal_chars`` and one that is not a rule are
        refused. Every outcome is counted in `stats`. Empty and cut-off replies also log a
        warning at their 1st, 10th, 100th... occurrence (usually ``call_tokens`` is too
        small, for a reasoning model especially).

        Args:
            rendered: the artifact as the failing rollout ran it.
            task: the task that failed.
            output: the answer given.
            reward: its reward (a float, or a `agentdescent.rewards.builtin.Score` with feedback).
            failures: other failed rollouts ``(task, output, reward)`` of the same worker on
                the same artifact (the engines pass them when ``reflect_on > 1``); at most
                ``reflect_on - 1`` are shown, through ``{others}``.

        Returns:
            The rule (or rewritten text), or ``None`` for no change.

        Raises:
            ProviderError: the provider failed (after its own retries).
        """
        return self.explain_proposal(rendered, task, output, reward, failures=failures).text

    def explain_proposal(self, rendered: str, task: Task, output: str, reward: float, *,
                         failures: Sequence[tuple[Task, str, float]] = ()) -> ParsedProposal:
        """`propose`, with what became of the reply: its kind and, for a refused one, the reply cut short.

        The engines call this when the agent has it, so each proposal that returns no change
        is recorded with why (`agentdescent.fate.CardFate` of kind ``refused`` or
        ``declined``). Counted in `stats` as `propose` is.

        Returns:
            A `agentdescent.agents.proposals.ParsedProposal`: ``text`` is what `propose` returns.

        Raises:
            ProviderError: the provider failed (after its own retries).
        """
        instructions, pairs = split_demonstrations(rendered)
        blank = is_blank_artifact(instructions)
        feedback = feedback_of(reward)
        # a template without {others} shows none, and then none is checked for echoes
        others = list(failures)[: self.reflect_on - 1] if self._shows_others else []
        user = self.propose_template.format(
            artifact=shown_artifact(instructions, pairs, blank=blank),
            prompt=task.prompt,
            output=output,
            reward=float(reward),
            task_id=task.id,
            feedback=feedback_paragraph(feedback),
            feedback_text=feedback,
            others=others_paragraph(others),
        )
        if self.conversation:
            reply = self._converse(user)
        else:
            reply = self._call([{"role": "user", "content": user}], propose=True)
        parsed = self._parse(reply, "" if blank else instructions, [(task, output), *((t, o) for t, o, _ in others)])
        with self._lock:
            self._stats["proposals"] += 1
            self._stats["rules" if parsed.kind == "rule" else parsed.kind] += 1
            if parsed.kind == "rule" and parsed.cleaned:
                self._stats["cleaned"] += 1
            if parsed.kind in REFUSAL_KINDS:
                text = " ".join(str(reply.text or "").split())
                parsed = dataclasses.replace(parsed, example=text if len(text) <= 200 else text[:197] + "...")
                self._examples[parsed.kind] = parsed.example
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
        return parsed

    def _parse(self, reply: Completion, artifact: str, shown: Sequence[tuple[Task, str]]) -> ParsedProposal:
        """`parse_proposal` of ``reply``, echoing any shown task or answer counted as ``echoed``.

        The first of ``shown`` is the failure that prompts the proposal; the others were
        shown with it (``reflect_on``). The echo check comes where `parse_proposal` makes
        it (before ``not_a_rule`` and ``too_long``), for each of them in turn.
        """
        def parse(task: Task, output: str) -> ParsedProposal:
            return parse_proposal(
                reply.text, artifact=artifact, prompt=task.prompt, output=output, finish_reason=reply.finish_reason,
                mode=self.proposal, max_chars=self.max_proposal_chars,
            )

        parsed = parse(*shown[0])
        if parsed.kind not in ("rule", "not_a_rule", "too_long"):  # decided before the echo check
            return parsed
        return next((again for again in (parse(*other) for other in shown[1:]) if again.kind == "echoed"), parsed)


