"""What a run will cost before it runs: ``agentdescent plan`` (the maximum and the expected spend).

It reads the run directory's spec and tasks and spends nothing, unless ``--probe`` asks
it to time one real model call. It must not write files. A tree run (``init --tree``)
gets a plan of its own (`_plan_tree`): only its proposals call the model.

Two numbers, for the sync runtime ``agentdescent run`` drives. The **maximum** is a
bound read off the code (every rollout proposes, every round evaluates a candidate on
every held-out task with every re-draw the noise rule allows). The **expected** spend
follows the evaluation policy with the rough shares of `Typical` (most proposals are
declined, refused or fail the self-verify gate, so few rounds pay for a held-out
evaluation, and that evaluation stops once it is settled); the output states them.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..agents.llm import DEFAULT_EDIT_TEMPLATE, DEFAULT_PROPOSE_TEMPLATE, DEFAULT_REWRITE_TEMPLATE
from ..agents.proposals import DEFAULT_MAX_CHARS, is_blank_artifact
from ..code.suite import MAX_FEEDBACK_CHARS
from ..errors import ProviderAuthError, ProviderError, UsageError
from ..merge.acceptance import DRAWS_PER_UNIT
from ..merge.aggregator import AggregatorConfig
from ..rewards.builtin import FEEDBACK_LIMIT
from ..tokens import estimate_tokens
from ..types import Task, one_line
from .rundir import RunDir, load_tasks
from .runspec import (
    initial_state,
    is_tree,
    make_agent,
    make_strategy,
    proposal_mode,
    redact,
    spec_knob,
    spec_split,
)

__all__ = ["Probe", "Typical", "budget_line", "cmd_plan", "plan_numbers", "probe_call"]

#: Reply tokens the maximum assumes when the spec sets no per-call limit (then it is no bound).
UNLIMITED_REPLY = 512
#: Tokens a call may cost beyond its texts in the maximum (a chat template, a default system prompt).
FRAMING_MAX = 32


@dataclass(frozen=True)
class Typical:
    """What the expected spend assumes a typical run does; each share is a rough number.

    Read off the runs in docs/cli.md's ``plan`` section (a scripted model, the tutorial's
    stand-in, SmolLM2-135M): a half to two thirds of the rollouts failed, a quarter to
    all of the proposals changed the artifact, and 0 to 1 in 3 rounds evaluated a
    candidate, which scored 6 to 8 held-out tasks before its decision settled.

    Args:
        fail: share of rollouts that score below 1 (each one proposes).
        change: share of proposals that change the artifact (each is re-run on its task).
        improve: share of those changes that improve their own task (the self-verify gate
            lets a round's candidate through to the held-out evaluation if one of its
            cards did).
        scored: held-out tasks an evaluation scores the candidate on before it settles.
        discordant: share of those where the candidate and the head differ (each is drawn
            again when the evaluation is noisy).
        commit: share of evaluated candidates that commit.
        rule_tokens: a committed rule's tokens (the artifact grows by that much).
        framing: tokens a call costs beyond its texts (the chat template).
        reply: a reply's tokens when the spec sets no per-call limit (with one: half of it).
    """

    fail: float = 2 / 3
    change: float = 1 / 2
    improve: float = 1 / 3
    scored: int = 8
    discordant: float = 1 / 3
    commit: float = 0.5
    rule_tokens: int = 25
    framing: int = 8
    reply: int = 64


@dataclass(frozen=True)
class Probe:
    """One real solve call, timed (`probe_call`).

    Args:
        seconds: how long the call took.
        prompt_tokens: the prompt tokens the provider reported.
        completion_tokens: the reply tokens it reported.
        estimated_prompt: `estimate_tokens` of the same call's texts.
    """

    seconds: float
    prompt_tokens: int
    completion_tokens: int
    estimated_prompt: int


def _rendered_start(spec: dict[str, Any], tasks: Sequence[Task]) -> str:
    strategy = make_strategy(spec, tasks)
    return strategy.render(initial_state(spec, strategy))  # not a tree's: `_plan_tree` plans those


def _text_tokens(text: str) -> int:
    """Tokens of a text the agent sends (an empty artifact is not sent)."""
    return 0 if is_blank_artifact(text) else estimate_tokens(text)


def _mean(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class _Basis:
    """What both numbers of a plan are computed from: the split, the texts' tokens, the replies, the probe's fit.

    ``template``, ``start`` and ``longest`` are the proposal template's, the starting
    artifact's and the longest task prompt's tokens; ``p_train`` and ``p_held`` the mean
    prompt of each side; ``framing`` and ``ratio`` fit the expected spend's prompts to what
    a probe measured, ``scale`` the maximum's (see `_probe_fit`).
    """

    rounds: int
    workers: int
    typical: Typical
    train: Sequence[Task]
    held: Sequence[Task]
    stratify: str | None
    rule_mode: bool
    template: int
    start: int
    longest: int
    p_train: float
    p_held: float
    limit: int | None
    sampled: bool
    framing: float
    ratio: float
    scale: float
    reply_max: int
    reply: int
    cfg: AggregatorConfig = field(default_factory=AggregatorConfig)

    # ------------------------------------------------------------------ shared counts

    @property
    def head_sample(self) -> int:
        """Held-out tasks the starting head is scored on before the first round."""
        return min(len(self.held), self.cfg.head_sample)

    @property
    def changes(self) -> float:
        """Expected proposals a round that change the artifact."""
        return self.workers * self.typical.fail * self.typical.change

    @property
    def eval_share(self) -> float:
        """Expected share of rounds that evaluate a candidate (one of its changes improved its own task)."""
        return 1.0 - (1.0 - self.typical.improve) ** self.changes

    @property
    def scored(self) -> int:
        """Held-out tasks an expected evaluation scores (with ``stratify``, at least a group's and the sample)."""
        n_held, k = len(self.held), min(len(self.held), self.typical.scored)
        if self.stratify:  # the held-out tasks of a card's group count as affected: all scored, then the sample
            groups = {str(x.meta[self.stratify]) for x in self.held}
            k = min(n_held, max(k, math.ceil(n_held / len(groups)) + self.cfg.futility_sample))
        return k

    @property
    def grow(self) -> float:
        """Expected tokens the artifact grows by a round."""
        return self.eval_share * self.typical.commit * self.typical.rule_tokens

    # ------------------------------------------------------------------ a call's tokens, at most

    def art_max(self, r: int) -> int:
        """The longest the artifact can be after ``r`` rounds."""
        if not self.rule_mode:
            return max(self.start, estimate_tokens("x" * DEFAULT_MAX_CHARS["rewrite"]))
        rule_max = estimate_tokens("- " + "x" * DEFAULT_MAX_CHARS["rule"] + "\n") + 8  # a rendered rule, with room to spare
        return self.start + r * (self.workers + self.cfg.pool_draw) * rule_max

    def solve_max(self, a: int) -> int:
        """The most a solve call costs with an artifact of ``a`` tokens: the longest prompt, a reply at the cap."""
        return math.ceil((a + self.longest + FRAMING_MAX) * self.scale) + self.reply_max

    def propose_max(self, a: int) -> int:
        """The most a proposal call costs: the template, the artifact, the prompt, a quoted reply and feedback."""
        feedback = estimate_tokens("\n\nFeedback on the answer: ") + FEEDBACK_LIMIT // 4
        return math.ceil((self.template + a + self.longest + self.reply_max + feedback + FRAMING_MAX)
                         * self.scale) + self.reply_max

    # ------------------------------------------------------------------ a call's tokens, expected

    def solve_e(self, a: float, p: float) -> float:
        """The expected cost of a solve call with an artifact of ``a`` tokens and a prompt of ``p``."""
        return (a + p) * self.ratio + self.framing + self.reply

    def propose_e(self, a: float) -> float:
        """The expected cost of a proposal call (a rewrite answers with the whole artifact)."""
        reply, t = self.reply, self.typical
        feedback = 12 + min(reply, 40)  # a built-in reward's feedback quotes the reply, cut at 160 characters
        answer = reply if self.rule_mode else a + t.rule_tokens
        return (self.template + a + self.p_train + reply + feedback) * self.ratio + self.framing + answer


def _probe_fit(probe: Probe | None, typical: Typical) -> tuple[float, float, float]:
    """``(framing, ratio, scale)``: the probe's prompt, as its provider counted it, against the estimate of its texts.

    What is over the estimate is the chat template's framing (the expected spend's, and up
    to ``FRAMING_MAX`` the maximum's; beyond that the maximum scales every prompt up), what
    is under it a sparser tokenizer (the expected spend scales its prompts down).
    """
    framing, ratio, scale = float(typical.framing), 1.0, 1.0
    if probe is not None and probe.estimated_prompt > 0:
        extra = probe.prompt_tokens - probe.estimated_prompt
        framing, ratio = (float(extra), 1.0) if extra >= 0 else (0.0, probe.prompt_tokens / probe.estimated_prompt)
        scale = max(1.0, (probe.prompt_tokens - FRAMING_MAX) / probe.estimated_prompt)
    return framing, ratio, scale


def _basis(spec: dict[str, Any], tasks: Sequence[Task], rounds: int, workers: int, probe: Probe | None,
           typical: Typical) -> _Basis:
    """The plan's `_Basis`, read off the spec, the tasks and the probe."""
    train, held = spec_split(spec, tasks)
    rule_mode = proposal_mode(spec) == "rule"
    template = DEFAULT_PROPOSE_TEMPLATE if rule_mode else DEFAULT_REWRITE_TEMPLATE
    limit = spec.get("call_tokens")
    framing, ratio, scale = _probe_fit(probe, typical)
    return _Basis(
        rounds=rounds, workers=workers, typical=typical, train=train, held=held, stratify=spec.get("stratify"),
        rule_mode=rule_mode,
        template=estimate_tokens(template.format(artifact="", prompt="", output="", reward=0.0, task_id="",
                                                 feedback="", feedback_text="", others="")),
        start=_text_tokens(_rendered_start(spec, tasks)), longest=max(estimate_tokens(t.prompt) for t in tasks),
        p_train=_mean([estimate_tokens(x.prompt) for x in train]),
        p_held=_mean([estimate_tokens(x.prompt) for x in held]),
        limit=limit, sampled=spec.get("temperature") != 0,  # None: the provider's default, which samples
        framing=framing, ratio=ratio, scale=scale,
        reply_max=int(limit) if limit else max(UNLIMITED_REPLY, probe.completion_tokens if probe else 0),
        reply=probe.completion_tokens if probe else (limit // 2 if limit else typical.reply),
    )


def _maximum(b: _Basis) -> dict[str, Any]:
    """The most calls and tokens: every rollout proposes, every round evaluates a candidate with every re-draw."""
    cfg, w = b.cfg, b.workers
    cards = w + cfg.pool_draw
    # a noisy evaluation: up to DRAWS_PER_UNIT draws per task, both sides, each a would-be regression
    solves_round = 2 * w + 2 * cards + 2 * DRAWS_PER_UNIT * (1 + cfg.rescore_draws) * len(b.held)
    round_max = [solves_round * b.solve_max(b.art_max(r + 1)) + w * b.propose_max(b.art_max(r)) for r in range(b.rounds)]
    s0 = b.head_sample
    return {"calls": s0 + cfg.noise_probe + b.rounds * (solves_round + w),
            "tokens": s0 * b.solve_max(b.start) + cfg.noise_probe * b.solve_max(b.art_max(b.rounds)) + sum(round_max),
            "calls_per_round": solves_round + w, "tokens_per_round": max(round_max, default=0)}


def _expected(b: _Basis) -> dict[str, Any]:
    """The expected calls and tokens, with the shares of ``b.typical``."""
    t, w, k, eval_share = b.typical, b.workers, b.scored, b.eval_share
    proposals = w * t.fail
    changes = b.changes
    head = k * (max(0.0, 1.0 - b.head_sample / len(b.held)) + t.commit / 2)
    pairs = k * t.discordant
    # noisy: every scored task is a fresh draw on both sides; half the discordant ones look
    # like regressions and are confirmed with rescore_draws more draws a side
    eval_calls = (2 * k + b.cfg.rescore_draws * pairs) if b.sampled else k + head
    learning = float(min(b.cfg.noise_probe, len(b.held))) if not b.sampled else 1.0
    round_e = []
    for r in range(b.rounds):
        a = b.start + r * b.grow
        round_e.append(w * b.solve_e(a, b.p_train) + changes * b.solve_e(a + t.rule_tokens, b.p_train)
                       + proposals * b.propose_e(a) + eval_share * eval_calls * b.solve_e(a, b.p_held))
    calls = b.head_sample + learning + b.rounds * (w + proposals + changes + eval_share * eval_calls)
    tokens = (b.head_sample * b.solve_e(b.start, b.p_held)
              + learning * b.solve_e(b.start + b.rounds * b.grow / 2, b.p_held) + sum(round_e))
    return {"calls": round(calls), "tokens": round(tokens),
            "calls_per_round": round(w + proposals + changes + eval_share * eval_calls),
            "tokens_per_round": round(sum(round_e) / b.rounds)}


def _test_set(b: _Basis, test_tasks: Sequence[Task], repeats: int) -> tuple[int, int, int]:
    """``(calls, most tokens, expected tokens)`` of scoring the test set at the start and at the end."""
    prompts = [estimate_tokens(x.prompt) for x in test_tasks]
    most = sum(repeats * (b.solve_max(b.start) + b.solve_max(b.art_max(b.rounds))) for _ in prompts)
    expected = sum(repeats * (b.solve_e(b.start, p) + b.solve_e(b.start + b.rounds * b.grow, p)) for p in prompts)
    return 2 * len(test_tasks) * repeats, most, round(expected)


def _wall_times(out: dict[str, Any], probe: Probe) -> None:
    """Add the probe's wall times to ``out``: calls / workers x the probe's seconds (the maximum's replies slower)."""
    per_call = probe.seconds / out["workers"]
    test_calls = out["max"]["test_calls"]
    # a reply at the limit takes longer than the probe's: as many times as it is longer
    out["slowdown"] = max(1.0, out["reply_max"] / max(1, probe.completion_tokens))
    out["seconds_expected"] = (out["expected"]["calls"] + test_calls) * per_call
    out["seconds_max"] = (out["max"]["calls"] + test_calls) * per_call * out["slowdown"]


def plan_numbers(spec: dict[str, Any], tasks: Sequence[Task], rounds: int, workers: int, *,
                 probe: Probe | None = None, test_tasks: Sequence[Task] = (),
                 typical: Typical = Typical()) -> dict[str, Any]:
    """The most and the expected model calls and tokens of a run, from its spec (nothing is spent).

    **Maximum.** Before the first round the starting head is scored on ``head_sample`` =
    16 held-out tasks (all of them when fewer), and once in a run the noise probe may
    draw 16 more. Each round at most: ``workers`` rollouts, proposals and self-verify
    re-runs; two rebase re-verification calls for each of the round's cards and the
    ``pool_draw`` = 2 cards drawn from the evidence pool; and one candidate's held-out
    evaluation, ``12 * H`` calls for ``H`` held-out tasks: once the evaluation is noisy,
    up to 2 fresh draws of each task on both sides, and 2 more draws a side of every
    draw that looks like a regression (a deterministic evaluation scores each task once
    per state: at most ``2 * H``). Tokens per call: the longest task prompt, the artifact as
    long as that round's commits can make it (each proposal is at most 400 characters,
    a rewrite 4,000), the proposal template with the rollout's reply and the reward's
    feedback quoted, ``FRAMING_MAX`` for the chat template, and a reply at the per-call
    limit (without one, `UNLIMITED_REPLY` or the probe's reply if longer: then no bound).
    Prompts are counted at `estimate_tokens`' 4 characters a token, scaled up to what
    ``probe`` measured when its provider counted more beyond ``FRAMING_MAX``. Failed calls
    (and the retries of a merge that failed) are not counted; nor is ``run --async``,
    whose merges may each evaluate a candidate.

    **Expected.** The same steps with the shares of ``typical``: ``workers * fail``
    proposals a round, ``change`` of them re-run, and a round evaluates a candidate with
    probability ``1 - (1 - improve) ** (workers * fail * change)``, on ``scored`` held-out
    tasks (with ``stratify``, at least a group's held-out tasks and ``futility_sample`` = 8
    others); the head is scored where the starting sample did not cover them and on half
    of them after a commit; with a sampled model (a temperature other than 0) every
    scored task is a fresh draw on both sides (2 calls), and half the discordant ones are
    confirmed as regressions with 2 more draws a side; with temperature 0 the noise probe
    draws the head again on up to 16 tasks, once. Replies are ``probe``'s reply length, else half the
    per-call limit, else ``typical.reply``.

    Args:
        spec: the run directory's spec.
        tasks: its tasks.
        rounds: rounds planned.
        workers: workers (and calls at once).
        probe: a timed call (`probe_call`) that sets the reply length and the prompt scale.
        test_tasks: the test set (its calls are outside the run's budget).
        typical: the expected spend's shares.

    Returns:
        A dict with the split (``tasks``, ``train``, ``held_out``), ``start`` (the starting
        evaluation: ``calls``, expected ``tokens``, ``tokens_max``), ``max`` and ``expected``
        (each with ``calls``, ``tokens``, ``calls_per_round``, ``tokens_per_round`` and
        ``test_calls``, ``test_tokens``), the per-call assumptions (``reply_max``,
        ``reply``, ``sampled``, ``eval_share``, ``scored``) and, with ``probe``, the wall
        times in seconds (``seconds_expected``, ``seconds_max``: calls / ``workers`` x the
        probe's seconds, the maximum's replies at the limit taking as many times longer as
        they are longer than the probe's, ``slowdown``).
    """
    b = _basis(spec, tasks, rounds, workers, probe, typical)
    test_calls, test_max, test_e = _test_set(b, test_tasks, int(spec_knob(spec, "test_repeats")))
    out: dict[str, Any] = {
        "tasks": len(tasks), "train": len(b.train), "held_out": len(b.held), "rounds": rounds, "workers": workers,
        "start": {"calls": b.head_sample, "tokens": round(b.head_sample * b.solve_e(b.start, b.p_held)),
                  "tokens_max": b.head_sample * b.solve_max(b.start)},
        "reply_max": b.reply_max, "reply_limited": bool(b.limit), "reply": b.reply, "sampled": b.sampled,
        "eval_share": b.eval_share, "scored": b.scored, "ratio": b.ratio, "framing": b.framing,
        "max": {**_maximum(b), "test_calls": test_calls, "test_tokens": test_max},
        "expected": {**_expected(b), "test_calls": test_calls, "test_tokens": test_e},
    }
    if probe is not None:
        _wall_times(out, probe)
    return out


def probe_call(spec: dict[str, Any], tasks: Sequence[Task]) -> Probe:
    """Time one real solve call: the starting artifact on the first task, with the spec's per-call limit.

    The agent is the run's (`agentdescent.cli.runspec.make_agent`, solving side only); its key
    is read from the environment variable the spec names.

    Raises:
        ProviderError: the call failed.
        UsageError: the key's environment variable is not set.
    """
    agent = make_agent(spec, propose=False)
    rendered = _rendered_start(spec, tasks)
    task = tasks[0]
    estimated = _text_tokens(rendered) + estimate_tokens(task.prompt)
    before_p, before_c = agent.usage.prompt_tokens, agent.usage.completion_tokens
    began = time.monotonic()
    agent.solve(rendered, task)
    seconds = time.monotonic() - began
    return Probe(seconds, agent.usage.prompt_tokens - before_p, agent.usage.completion_tokens - before_c, estimated)


def budget_line(p: dict[str, Any], budget: int) -> str:
    """What a token budget covers of the plan ``p`` (`plan_numbers`): a warning when it cannot pay for the
    starting evaluation (expected, or at most), else how many of the planned rounds it covers."""
    start, e, m = p["start"], p["expected"], p["max"]
    cost = (f"scoring the starting artifact on {start['calls']} held-out tasks costs about {start['tokens']:,} "
            f"tokens, at most {start['tokens_max']:,}")
    if budget < start["tokens"]:
        return (f"warning: a budget of {budget:,} tokens cannot cover the starting evaluation ({cost}): the run "
                "would stop on its budget before its first round; raise --max-tokens")
    if budget < start["tokens_max"]:
        return (f"warning: a budget of {budget:,} tokens may not cover the starting evaluation ({cost}): with long "
                "replies the run stops on its budget before its first round")
    left = budget - start["tokens"]
    per_round = max(1, e["tokens_per_round"])
    covered = min(p["rounds"], left // per_round)
    if budget >= m["tokens"]:
        return f"budget: {budget:,} tokens cover the run even at most ({m['tokens']:,})"
    if covered >= p["rounds"]:
        return (f"budget: {budget:,} tokens cover the {p['rounds']} rounds as expected ({e['tokens']:,}), not at most "
                f"({m['tokens']:,}): the run may stop on its budget early")
    return (f"budget: {budget:,} tokens cover about {covered} of the {p['rounds']} rounds as expected ({cost}; "
            f"{e['tokens_per_round']:,} a round): the run is likely to stop on its budget")


def _duration(seconds: float) -> str:
    """``12 ms``, ``4.2 s``, ``42 s``, ``4 min 42 s``, ``2 h 05 min``."""
    s = round(seconds)
    if seconds < 0.1:
        return f"{seconds * 1000:.0f} ms"
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _share(x: float) -> str:
    """A share as a plain fraction when one is close (``1 in 3``, ``3 in 4``), else a percentage."""
    for d in (2, 3, 4, 5):
        for n in range(1, d):
            if abs(x - n / d) < 0.02:
                return f"{n} in {d}"
    return f"{x:.0%}"


def cmd_plan(args: argparse.Namespace) -> int:
    """``agentdescent plan RUN_DIR [--rounds R] [--workers W] [--max-tokens N] [--probe]``: print the plan (with
    what the budget covers: ``--max-tokens``, else the last run's); 1 if the probe call failed."""
    run = RunDir(args.run_dir)
    spec = run.spec()
    tasks = load_tasks(run.tasks_file)
    if is_tree(spec):
        return _plan_tree(run, spec, tasks, args.rounds, args.workers, probe=getattr(args, "probe", False))
    test = load_tasks(run.test_tasks_file, "--test-tasks", minimum=1) if spec.get("test_tasks") else []
    probe = None
    if getattr(args, "probe", False):
        try:
            probe = probe_call(spec, tasks)
        except ProviderError as exc:
            where = f"; the key is read from ${spec.get('api_key_env')}" if isinstance(exc, ProviderAuthError) else ""
            print(f"agentdescent plan: the probe call failed: {redact(one_line(exc, 300))}{where}", file=sys.stderr)
            return 1
    p = plan_numbers(spec, tasks, args.rounds, args.workers, probe=probe, test_tasks=test)
    e, m, t = p["expected"], p["max"], Typical()
    print(f"{p['tasks']} tasks: {p['train']} train, {p['held_out']} held out; {p['rounds']} rounds of "
          f"{p['workers']} workers (the run's numbers include scoring the starting artifact on "
          f"{min(p['held_out'], AggregatorConfig().head_sample)} held-out tasks)")
    rows = [("expected, a round", e["calls_per_round"], e["tokens_per_round"]),
            ("expected, the run", e["calls"], e["tokens"]),
            ("at most, a round", m["calls_per_round"], m["tokens_per_round"]),
            ("at most, the run", m["calls"], m["tokens"])]
    width = max(len(f"{m['calls']:,}"), 5)
    twidth = max(len(f"{m['tokens']:,}"), 6)
    print(f"  {'':<18} {'calls':>{width}}  {'tokens':>{twidth}}")
    for label, calls, tokens in rows:
        print(f"  {label:<18} {calls:>{width},}  {tokens:>{twidth},}")
    if probe is not None:
        fit = (f"{p['framing']:.0f} chat-template tokens a call" if p["ratio"] == 1.0
               else f"prompts at {p['ratio']:.2f} of the estimate")
        reply = f"replies of {p['reply']} tokens and {fit} (as the probe's one call measured)"
    elif p["reply_limited"]:
        reply = f"replies of {p['reply']} tokens (half the per-call limit)"
    else:
        reply = f"replies of {p['reply']} tokens"
    if p["sampled"]:
        temp = spec.get("temperature")
        noise = (f"a sampled model (temperature {temp if temp is not None else 'the provider default'}): "
                 "every scored task is a fresh draw on both sides")
    else:
        noise = "temperature 0: each task scored once per state, after a 16-draw noise probe"
    print(f"expected assumes {_share(t.fail)} rollouts fail and propose, {_share(t.change)} proposals change the "
          f"artifact, {_share(t.improve)} changes improve their own task: {_share(p['eval_share'])} rounds "
          f"evaluate a candidate, on {p['scored']} held-out tasks; {reply}; {noise}")
    limit = (f"the per-call limit ({p['reply_max']:,} tokens)" if p["reply_limited"]
             else f"{p['reply_max']} tokens (no per-call limit is set, so this is no bound: init --call-tokens)")
    print(f"at most: every rollout proposes, every round evaluates a candidate on all {p['held_out']} held-out tasks "
          f"with every re-draw; replies at {limit}")
    if test:
        draws = int(spec_knob(spec, "test_repeats"))
        each = f" x {draws} draws" if draws > 1 else ""
        print(f"plus {e['test_calls']:,} test-set calls ({len(test)} tasks{each}, at the start and the end), about "
              f"{e['test_tokens']:,} tokens (at most {m['test_tokens']:,}), outside --max-tokens")
    budget = args.max_tokens if getattr(args, "max_tokens", None) is not None else spec.get("run_max_tokens")
    if budget is not None:
        print(budget_line(p, int(budget)))
    if probe is None:
        print("time: unknown until probed (--probe times one real call)")
    else:
        took = _duration(probe.seconds)
        print(f"probe: one call took {took} ({probe.prompt_tokens:,} prompt + {probe.completion_tokens:,} reply "
              "tokens)")
        slower = f", every reply {p['slowdown']:.1f} times as long" if p["slowdown"] > 1 else ""
        print(f"time: about {_duration(p['seconds_expected'])} expected, at most {_duration(p['seconds_max'])} "
              f"(calls / {p['workers']} workers x {took}{slower}; assumes the server answers {p['workers']} calls "
              "at once)")
    return 0


def _plan_tree(run: RunDir, spec: dict[str, Any], tasks: Sequence[Task], rounds: int, workers: int, *,
               probe: bool) -> int:
    """``plan`` of a tree run (``init --tree``): only the proposals call the model; the tests cost no tokens.

    The most: one proposal per worker a round (a rollout whose test fails proposes), each
    sending the edit template, the tree as it is at the start (it grows as edits
    commit), the longest train test's prompt, what the run and the reward reported (each
    at most ``MAX_FEEDBACK_CHARS`` characters), and taking a reply at the per-call limit.
    The expected spend is not estimated: it depends on how many tests fail.

    Raises:
        UsageError: ``--probe`` (it times a solve call, which a tree run never makes).
    """
    if probe:
        raise UsageError("--probe: not for a tree run yet; its model only writes proposals (the tests run in the "
                         "sandbox), and the probe times a solve call")
    strategy = make_strategy(spec, tasks)
    start = estimate_tokens(strategy.render(initial_state(spec, strategy, run.path)))
    train, held = spec_split(spec, tasks)
    prompt = max(estimate_tokens(t.prompt) for t in train)
    reported = 2 * (MAX_FEEDBACK_CHARS // 4 + 40)  # the run's output and the reward's feedback, each a test's line
    limit = spec.get("call_tokens")
    reply = int(limit) if limit else UNLIMITED_REPLY
    template = estimate_tokens(DEFAULT_EDIT_TEMPLATE.format(artifact="", prompt="", output="", reward=0.0,
                                                            task_id="", feedback="", feedback_text=""))
    per_call = template + start + prompt + reported + FRAMING_MAX + reply
    proposer = spec.get("proposer") or {"model": spec.get("model")}
    print(f"{len(tasks)} tests: {len(train)} train, {len(held)} held out; {rounds} rounds of {workers} workers")
    print(f"the tests run in the sandbox and cost no tokens; only the proposals call the model ({proposer['model']}): "
          "at most one per worker a round, when its test fails")
    rows = [("at most, a round", workers, workers * per_call), ("at most, the run", rounds * workers,
                                                                 rounds * workers * per_call)]
    width, twidth = max(len(f"{rounds * workers:,}"), 5), max(len(f"{rounds * workers * per_call:,}"), 6)
    print(f"  {'':<18} {'calls':>{width}}  {'tokens':>{twidth}}")
    for label, calls, tokens in rows:
        print(f"  {label:<18} {calls:>{width},}  {tokens:>{twidth},}")
    bound = f"the per-call limit ({reply:,} tokens)" if limit else (
        f"{reply} tokens (no per-call limit is set, so this is no bound: init --call-tokens)")
    print(f"a proposal sends the tree ({start:,} tokens at the start; more as edits commit), the failing test (up to "
          f"{prompt:,}) and what its run reported (up to {reported:,}); replies at {bound}")
    timeout = (spec.get("tree") or {}).get("timeout")
    print(f"expected: not estimated for a tree run (it depends on how many tests fail); each new tree costs one "
          f"suite run in the sandbox (up to {timeout:g} s), no tokens")
    return 0
