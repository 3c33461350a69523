"""A run directory's spec turned into the parts of a run: the reward, the strategy, the starting state, the agent.

``spec.json`` (written by ``agentdescent init``) names what to run; this module builds it:
`make_reward` (a built-in ``--reward`` name of `agentdescent.rewards.by_name`, or
``MODULE:FUNC``, imported from the run directory, then the current directory, then the
installed packages), `check_answers` (every task can be scored, before any call),
`make_strategy`, `initial_state`, `load_versions` (the artifact's versions in the run's
ledger) and `make_agent` (an `agentdescent.LLMAgent`, in rewrite
mode for the ``single`` strategy; keys read from their environment variables at the
moment it is built, never stored). It must not write files or print.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from . import rewards
from .errors import InvalidArgument, RewardContractError, UsageError
from .ledger import SqliteLedger
from .rundir import RunDir, load_tasks
from .strategies import AppendRules, KeyedRules, SingleSlot, Strategy
from .types import Task

__all__ = ["ARTIFACT_ID", "DEFAULT_KEY_ENV", "REWARD_HELP", "check_answers", "initial_state", "load_versions",
           "make_agent", "make_reward", "make_strategy", "proposal_mode"]

ARTIFACT_ID = "artifact"
REWARD_HELP = ("exact, normalized, contains, choice:A,B,..., number:TOL (number:1% relative), "
            "regex:PATTERN ({answer} in it is the task's answer) or MODULE:FUNC")
#: the kinds of the built-in ``--reward`` names (`agentdescent.rewards.by_name`)
_BUILTIN_KINDS = ("exact", "normalized", "contains", "choice", "number", "regex")
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


@contextlib.contextmanager
def _import_path(directories: Sequence[Path]) -> Iterator[None]:
    """``directories`` first on ``sys.path`` for one import, then as it was."""
    added = [str(d.resolve()) for d in directories]
    sys.path[:0] = added
    try:
        yield
    finally:
        for entry in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


def make_reward(spec: str, run_dir: Path | None = None) -> Callable[[Task, str], Any]:
    """The reward a ``--reward`` value names: a built-in of `agentdescent.rewards.by_name`, or ``MODULE:FUNC``.

    The built-ins (``exact``, ``normalized``, ``contains``, ``choice:A,B,...``,
    ``number:TOL``, ``regex:PATTERN``) return a `agentdescent.rewards.Score` with feedback.
    ``regex:PATTERN`` with ``{answer}`` in it is built from each task's answer; without it,
    it is one pattern for every task; either way it is searched as written (case counts
    unless the pattern starts with ``(?i)``).

    ``MODULE:FUNC`` is imported with ``run_dir`` (when given) and then the current
    directory first on the import path, so a ``myreward.py`` copied into the run
    directory, or next to where you run the command, is found without ``PYTHONPATH``;
    otherwise the installed packages are searched as usual.

    Raises:
        UsageError: an unknown name, a bad pattern or argument, or a function that cannot be imported.
    """
    kind, sep, arg = spec.partition(":")
    if kind in _BUILTIN_KINDS:
        try:
            return rewards.by_name(spec)
        except InvalidArgument as exc:
            text = str(exc)
            raise UsageError(text if text.startswith("--reward") else f"--reward {spec!r}: {text}") from None
    module, sep, func = spec.partition(":")
    if sep and module and func:
        where = [d for d in (run_dir, Path.cwd()) if d is not None]
        try:
            with _import_path(where):
                fn = getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError) as exc:
            searched = ", ".join(str(d) for d in where)
            raise UsageError(f"--reward {spec!r}: cannot import {func} from {module} ({exc}); looked in "
                             f"{searched} and the installed packages") from None
        if not callable(fn):
            raise UsageError(f"--reward {spec!r}: {module}.{func} is not callable")
        return fn
    raise UsageError(f"--reward {spec!r}: use {REWARD_HELP}")


def _needs_answer(spec: str) -> bool:
    kind, _, arg = spec.partition(":")
    return kind in ("exact", "normalized", "contains", "choice", "number") or (kind == "regex" and "{answer}" in arg)


def check_answers(spec: str, reward: Callable[[Task, str], Any], tasks: Sequence[Task], where: str) -> None:
    """Check, before any call, that a built-in reward can score every task of ``where``.

    Each task needs an ``answer`` when the reward compares with it; a ``choice:`` answer
    must be one of the choices and a ``number:`` answer a number. A ``MODULE:FUNC``
    reward is not called.

    Raises:
        UsageError: naming the reward, the file and the task.
    """
    if spec.partition(":")[0] not in _BUILTIN_KINDS or not _needs_answer(spec):
        return
    missing = [t.id for t in tasks if t.meta.get("answer") is None]
    if missing:
        raise UsageError(f'--reward {spec} compares with each task\'s "answer"; task {missing[0]!r} of {where} '
                         "has none")
    for task in tasks:
        try:
            reward(task, "")
        except RewardContractError as exc:
            raise UsageError(f"--reward {spec}: {where}: {exc}") from None


def make_strategy(spec: dict[str, Any], tasks: Sequence[Task]) -> Strategy:
    """The strategy the spec names (``keyed`` takes its categories from the tasks' ``category``)."""
    name = spec["strategy"]
    if name == "append":
        return AppendRules()
    if name == "single":
        return SingleSlot(initial_value=spec.get("initial_text") or "")
    categories = sorted({str(t.meta["category"]) for t in tasks if "category" in t.meta})
    if not categories:
        raise UsageError('--strategy keyed needs a "category" on the tasks (the slot names)')
    return KeyedRules(categories)


def initial_state(spec: dict[str, Any], strategy: Strategy) -> dict[str, str]:
    """The starting state: the strategy's, with each line of ``--initial`` added as a proposal."""
    state = strategy.initial()
    text = spec.get("initial_text")
    if text and not isinstance(strategy, SingleSlot):
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                diff = strategy.to_diff(state, line, "initial", 1, ARTIFACT_ID)
                if diff is not None:
                    state = diff.apply(state)
    return state


def _provider(model: str, kind: str, base_url: str | None, env_var: str | None, whose: str) -> Any:
    """A provider adapter; its key is read from ``env_var`` now (never stored)."""
    from .providers import anthropic, openai_compatible

    key = os.environ.get(env_var) if env_var else None
    if env_var and not key:
        raise UsageError(f"{whose} environment variable {env_var} is not set; export it and run again")
    factory = openai_compatible if kind == "openai" else anthropic
    options: dict[str, Any] = {"api_key": key}
    if base_url:
        options["base_url"] = base_url
    return factory(model, **options)


def proposal_mode(spec: dict[str, Any]) -> str:
    """``"rewrite"`` or ``"rule"``: the spec's ``proposal``, else rewrite for the ``single`` strategy.

    A single-slot artifact is one text: a proposal must be the whole new text (a rule
    would replace the starting prompt with one sentence), so ``single`` rewrites.
    """
    mode = spec.get("proposal")
    if mode in ("rule", "rewrite"):
        return str(mode)
    return "rewrite" if spec.get("strategy") == "single" else "rule"


def make_agent(spec: dict[str, Any], *, propose: bool = True) -> Any:
    """The `LLMAgent` the spec describes; keys are read from their environment variables now.

    With a ``proposer`` in the spec (``init --proposer-model``) a second provider writes
    the proposals (``LLMAgent(propose_with=..., propose_model=...)``) while the run's model
    answers the tasks. The proposal mode is `proposal_mode`'s. ``propose=False`` builds
    the solving side only (``eval``).
    """
    from .agents import LLMAgent

    provider = _provider(spec["model"], spec["provider"], spec.get("base_url"), spec.get("api_key_env"),
                         "the API key's")
    options: dict[str, Any] = {"max_tokens": spec.get("call_tokens"), "temperature": spec.get("temperature"),
                               "proposal": proposal_mode(spec)}
    proposer = spec.get("proposer")
    if propose and proposer:
        options["propose_with"] = _provider(proposer["model"], proposer["provider"], proposer.get("base_url"),
                                            proposer.get("api_key_env"), "the proposer's API key's")
        options["propose_model"] = proposer["model"]
    return LLMAgent(provider, **options)


def load_versions(run: RunDir) -> tuple[dict[int, dict[str, str]], Strategy]:
    """Every version of the run's artifact in its ledger (version -> state), and the strategy that renders them.

    Raises:
        UsageError: the run has no ledger yet.
    """
    spec = run.spec()
    if not run.ledger_file.exists():
        raise UsageError(f"{run.path} has no ledger yet; `agentdescent run {run.path}` first")
    ledger = SqliteLedger(run.ledger_file)
    try:
        states = {entry.version: dict(entry.state) for entry in ledger.history(ARTIFACT_ID)}
    finally:
        ledger.close()
    return states, make_strategy(spec, load_tasks(run.tasks_file))
