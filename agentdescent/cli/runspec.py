"""A run directory's spec turned into the parts of a run: the reward, the strategy, the starting state, the agent.

``spec.json`` (written by ``agentdescent init``) names what to run; this module builds it:
`make_reward` (a built-in ``--reward`` name of `agentdescent.rewards.builtin.by_name`, or
``MODULE:FUNC``, imported from the run directory, then the current directory, then the
installed packages), `check_answers` (every task can be scored, before any call),
`make_strategy`, `initial_state`, `spec_knob` and `spec_split` (an engine knob the spec
holds, or the engines' own default: `knob_default`), `load_versions` (the artifact's versions in the run's
ledger) and `make_agent` (an
`agentdescent.LLMAgent`, in rewrite mode for the ``single`` strategy and edit mode for a
``tree``; keys read from their environment variables at the moment it is built, never
stored). A ``tree`` run (``init --tree``) evolves the files of its snapshot
``RUN_DIR/tree`` (`is_tree`, `tree_entry`; its suite is `agentdescent.cli.runtree`'s).

A ``MODULE:FUNC`` reward is checked before it is ever called: a Python function (not a
built-in or C function, not a class) defined in a file in the run directory, the current
directory, a ``PYTHONPATH`` entry or the installed packages (not the standard library),
whose signature takes ``(task, output)``; `check_reward_call` then calls it on a sample
task (``init``). Secrets stay out of the spec: `check_key_env`, `check_base_url` and
`redact` are `agentdescent.cli.specvalues`' (each spec key's one check), named here too, and
`ARTIFACT_ID`, `ledger_problem` and `no_ledger` `agentdescent.cli.runledger`'s (the one place
that opens a run's ledger).
It must not write files or print.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import inspect
import os
import site
import sys
import sysconfig
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .. import rewards
from ..code import FileTree
from ..engine.config import SYNC_ENGINE, Split, engine_signature
from ..errors import InvalidArgument, RewardContractError, UsageError
from ..merge.aggregator_config import AggregatorConfig
from ..merge.demonstrations import RulesAndDemos
from ..merge.strategies import AppendRules, KeyedRules, SingleSlot, Strategy
from ..types import Task
from .rundir import RunDir, load_tasks
from .runledger import ARTIFACT_ID, has_ledger, ledger_name, ledger_problem, no_ledger, open_ledger
from .specvalues import DEFAULT_KEY_ENV, check_base_url, check_key_env, looks_like_key, redact

__all__ = ["ARTIFACT_ID", "DEFAULT_KEY_ENV", "REWARD_HELP", "check_answers", "check_base_url",
           "check_key_env", "check_reward_call", "initial_state", "is_tree", "knob_default", "ledger_problem",
           "load_versions", "looks_like_key", "make_agent", "make_reward", "make_strategy", "no_ledger",
           "proposal_mode", "redact", "spec_knob", "spec_split", "tree_entry"]

REWARD_HELP = ("exact, normalized, contains, choice:A,B,..., number:TOL (number:1% relative), "
            "regex:PATTERN ({answer} in it is the task's answer) or MODULE:FUNC")
#: the kinds of the built-in ``--reward`` names (`agentdescent.rewards.builtin.by_name`)
_BUILTIN_KINDS = ("exact", "normalized", "contains", "choice", "number", "regex")


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
    """The reward a ``--reward`` value names: a built-in of `agentdescent.rewards.builtin.by_name`, or ``MODULE:FUNC``.

    The built-ins (``exact``, ``normalized``, ``contains``, ``choice:A,B,...``,
    ``number:TOL``, ``regex:PATTERN``) return a `agentdescent.rewards.builtin.Score` with feedback.
    ``regex:PATTERN`` with ``{answer}`` in it is built from each task's answer; without it,
    it is one pattern for every task; either way it is searched as written (case counts
    unless the pattern starts with ``(?i)``).

    ``MODULE:FUNC`` is imported with ``run_dir`` (when given) and then the current
    directory first on the import path, so a ``myreward.py`` copied into the run
    directory, or next to where you run the command, is found without ``PYTHONPATH``;
    otherwise the installed packages are searched as usual.

    Raises:
        UsageError: an unknown name, a bad pattern or argument, a function that cannot be
            imported, or one that is not a Python ``reward(task, output)`` of the user's (a
            built-in or C function, a class, the standard library's; checked without calling it).
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
        _check_reward_function(spec, fn, where)
        return fn
    raise UsageError(f"--reward {spec!r}: use {REWARD_HELP}")


def _python_code(fn: Any) -> Any:
    """The Python function a reward runs when called, or None (a built-in, a C function, a class)."""
    if inspect.isclass(fn):
        return None
    if inspect.ismethod(fn):
        fn = fn.__func__
    if inspect.isfunction(fn):
        return fn
    call = inspect.getattr_static(type(fn), "__call__", None)  # an object with a Python __call__
    return call if inspect.isfunction(call) else None


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _check_reward_function(spec: str, fn: Any, where: Sequence[Path]) -> None:
    """Refuse, without calling it, a reward that is not a Python ``reward(task, output)`` of the user's.

    A built-in or C function (``os:system``), a class, a function of the standard library
    (``subprocess:call``) or one whose signature does not take two positional arguments
    is refused: calling it with a task and an output could do anything.
    """
    code = _python_code(fn)
    if code is None:
        raise UsageError(f"--reward {spec!r}: a built-in or C function (or a class), refused without calling it; "
                         "give MODULE:FUNC of a reward(task, output) written in a .py file")
    try:
        source = Path(os.path.realpath(inspect.getsourcefile(code) or code.__code__.co_filename))
    except TypeError:
        source = Path(os.path.realpath(code.__code__.co_filename))
    packages = [*site.getsitepackages(), site.getusersitepackages()]
    packages += [p for p in sys.path if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")]
    package_roots = [Path(os.path.realpath(p)) for p in packages if p]
    stdlib = [Path(os.path.realpath(sysconfig.get_paths()[k])) for k in ("stdlib", "platstdlib")]
    user = [Path(os.path.realpath(d)) for d in where]
    user += [Path(os.path.realpath(p)) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    in_packages = _under(source, package_roots)
    if (_under(source, stdlib) and not in_packages) or not (in_packages or _under(source, user)):
        raise UsageError(f"--reward {spec!r}: defined in {source}, which is not in the run directory, the current "
                         "directory, PYTHONPATH or the installed packages (the standard library is refused); give "
                         "MODULE:FUNC of a reward(task, output) of your own")
    try:
        inspect.signature(fn).bind(Task("sample", "sample"), "")
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--reward {spec!r}: its signature does not take (task, output) ({exc}); a reward is "
                         "reward(task, output) -> float in [0, 1] or Score") from None


def check_reward_call(spec: str, reward: Callable[[Task, str], Any], tasks: Sequence[Task], where: str) -> None:
    """Call a ``MODULE:FUNC`` reward on a sample task (the first of ``tasks``): with ``""`` and with its answer.

    Each must return a real number in [0, 1] or a `agentdescent.rewards.builtin.Score`. A
    built-in reward is checked by `check_answers` instead.

    Raises:
        UsageError: it raised, or returned something else (naming the task and the output).
    """
    if spec.partition(":")[0] in _BUILTIN_KINDS or not tasks:
        return
    task = tasks[0]
    answer = task.meta.get("answer")
    for output in ("", *([str(answer)] if answer is not None and str(answer) else [])):
        try:
            value = reward(task, output)
        except Exception as exc:  # the user's code: any exception is its own
            raise UsageError(f"--reward {spec}: on task {task.id!r} of {where} with the output {output!r} it "
                             f"raised {type(exc).__name__}: {exc}") from None
        try:
            rewards.check_reward(task, value)
        except RewardContractError as exc:
            raise UsageError(f"--reward {spec}: {where}, with the output {output!r}: {exc}") from None


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


def is_tree(spec: dict[str, Any]) -> bool:
    """Does the spec evolve a file tree checked by its tests (``init --tree``)?"""
    return spec.get("strategy") == "tree"


def tree_entry(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec's ``tree`` entry (``include``, ``exclude``, ``test_cmd``, ``timeout``, optional ``plugins``), checked.

    Raises:
        UsageError: missing or malformed (the spec was edited by hand).
    """
    entry = spec.get("tree")
    ok = isinstance(entry, dict) and all(
        isinstance(entry.get(k), list) and all(isinstance(p, str) for p in entry[k]) for k in ("include", "exclude"))
    ok = ok and isinstance(entry.get("test_cmd"), (str, type(None))) and isinstance(entry.get("timeout"), (int, float))
    plugins = entry.get("plugins") if isinstance(entry, dict) else None
    ok = ok and (plugins is None or (isinstance(plugins, list) and all(isinstance(p, str) for p in plugins)))
    if not ok:
        raise UsageError('spec.json: a "tree" run needs a "tree" entry {"include": [globs], "exclude": [globs], '
                         '"test_cmd": a command or null, "timeout": seconds}; `agentdescent init RUN_DIR --tree DIR '
                         '--force` writes it again')
    return entry


def make_strategy(spec: dict[str, Any], tasks: Sequence[Task]) -> Strategy:
    """The strategy the spec names (``keyed`` takes its categories from the tasks' ``category``;
    ``tree`` is an `agentdescent.code.FileTree` with the spec's include and exclude globs), in a
    `agentdescent.RulesAndDemos` with the spec's ``demos`` slots when it has them."""
    strategy = _named_strategy(spec, tasks)
    demos = spec.get("demos")
    if demos and spec.get("strategy") == "tree":
        raise UsageError("--demos does not apply to --tree (code is evolved by edits, not examples)")
    return RulesAndDemos(strategy, demos=int(demos)) if demos else strategy


def _named_strategy(spec: dict[str, Any], tasks: Sequence[Task]) -> Strategy:
    name = spec.get("strategy")
    if name not in ("append", "keyed", "single", "tree"):
        raise UsageError(f"spec.json: strategy {str(name)[:80]!r} is not one of append, keyed, single, tree")
    if name == "append":
        return AppendRules()
    if name == "single":
        return SingleSlot(initial_value=spec.get("initial_text") or "")
    if name == "tree":
        entry = tree_entry(spec)
        return FileTree(include=entry["include"], exclude=entry["exclude"])
    categories = sorted({str(t.meta["category"]) for t in tasks if "category" in t.meta})
    if not categories:
        raise UsageError('--strategy keyed needs a "category" on the tasks (the slot names)')
    return KeyedRules(categories)


def initial_state(spec: dict[str, Any], strategy: Strategy, run_dir: Path | None = None) -> dict[str, str]:
    """The starting state: the strategy's, with each line of ``--initial`` added as a proposal;
    for a tree, the files of the run directory's snapshot ``RUN_DIR/tree`` that the tree holds.

    Raises:
        UsageError: a tree run without its snapshot (or without ``run_dir``).
    """
    if isinstance(strategy, FileTree):
        folder = RunDir(run_dir or ".").tree_dir
        if run_dir is None or not folder.is_dir():
            raise UsageError(f"{folder}: missing; it is the run's copy of the project, made by `agentdescent init "
                             "RUN_DIR --tree DIR` (run it again with --force to make it anew)")
        return strategy.load(folder)
    state = strategy.initial()
    text = spec.get("initial_text")
    if text and not isinstance(getattr(strategy, "rules", strategy), SingleSlot):
        for line in text.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                diff = strategy.to_diff(state, line, "initial", 1, ARTIFACT_ID)
                if diff is not None:
                    state = diff.apply(state)
    return state


def _provider(model: str, kind: str, base_url: str | None, env_var: str | None, whose: str) -> Any:
    """A provider adapter; its key is read from ``env_var`` now (never stored)."""
    from ..providers import anthropic, openai_compatible

    key = os.environ.get(env_var) if env_var else None
    if env_var and not key:
        raise UsageError(f"{whose} environment variable {env_var} is not set; export it and run again")
    factories = {"openai": openai_compatible, "anthropic": anthropic}
    if kind not in factories:  # a spec is checked when opened (`check_spec`): this is the last guard, never silent
        raise UsageError(f"provider {str(kind)[:40]!r}: not a known provider; use one of {', '.join(factories)}")
    factory = factories[kind]
    options: dict[str, Any] = {"api_key": key}
    if base_url:
        options["base_url"] = base_url
    return factory(model, **options)


def knob_default(name: str) -> Any:
    """The engines' default of the knob ``name``, read where the engines read it.

    A keyword of `agentdescent.evolve` (a field of `agentdescent.engine.config.RunConfig`
    or of one of its families, through `agentdescent.engine.config.engine_signature`), or
    a field of `agentdescent.merge.aggregator_config.AggregatorConfig` (``agg_config``).
    The command line's flags and a spec's missing keys fall back on it, so a default lives
    in one place.

    Raises:
        InvalidArgument: ``name`` is neither (with the closest knob).
    """
    params = engine_signature(SYNC_ENGINE).parameters
    if name in params and params[name].default is not inspect.Parameter.empty:
        return params[name].default
    for fld in dataclasses.fields(AggregatorConfig):
        if fld.name == name and fld.default is not dataclasses.MISSING:
            return fld.default
    known = [*params, *(f.name for f in dataclasses.fields(AggregatorConfig))]
    close = difflib.get_close_matches(name, known, n=1)
    raise InvalidArgument(f"knob_default({name!r}): not a defaulted keyword of evolve nor a field of AggregatorConfig"
                          + (f"; did you mean {close[0]!r}?" if close else "; name one of RunConfig's knobs"))


def spec_knob(spec: dict[str, Any], knob: str, key: str | None = None) -> Any:
    """The spec's value of an engine knob (under ``key``, default the knob's name), else the engines' default.

    A spec written before the key existed (or by a ``run`` that did not set it) reads as
    the default the engines would have used (`knob_default`).
    """
    name = knob if key is None else key
    return spec[name] if name in spec else knob_default(knob)


def spec_split(spec: dict[str, Any], tasks: Sequence[Task]) -> tuple[list[Task], list[Task]]:
    """``(train, held_out)``: the split the run makes of ``tasks`` (its seed, share and ``stratify`` key)."""
    split = Split(held_out_frac=spec_knob(spec, "held_out_frac"), stratify=spec.get("stratify"))
    return split.split(tasks, int(spec_knob(spec, "seed")))


def proposal_mode(spec: dict[str, Any]) -> str:
    """``"rewrite"``, ``"rule"`` or ``"edit"``: ``edit`` for a tree, else the spec's ``proposal``,
    else rewrite for the ``single`` strategy.

    A single-slot artifact is one text: a proposal must be the whole new text (a rule
    would replace the starting prompt with one sentence), so ``single`` rewrites. A file
    tree is changed by search/replace blocks only (`agentdescent.code.FileTree`).
    """
    if is_tree(spec):
        return "edit"
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
    from ..agents.llm import LLMAgent

    provider = _provider(spec["model"], spec["provider"], spec.get("base_url"), spec.get("api_key_env"),
                         "the API key's")
    options: dict[str, Any] = {"call_tokens": spec.get("call_tokens"), "temperature": spec.get("temperature"),
                               "proposal": proposal_mode(spec)}
    proposer = spec.get("proposer")
    if propose and proposer:
        options["propose_with"] = _provider(proposer["model"], proposer["provider"], proposer.get("base_url"),
                                            proposer.get("api_key_env"), "the proposer's API key's")
        options["propose_model"] = proposer["model"]
    return LLMAgent(provider, **options)


def load_versions(run: RunDir) -> tuple[dict[int, dict[str, str]], Strategy]:
    """Every version of the run's artifact in its ledger (version -> state), and the strategy that renders them.

    The ledger (its file, or its database: `agentdescent.cli.runledger`) is opened read-only:
    its history is checked, nothing is written, and a run directory on a read-only mount
    reads as any other.

    Raises:
        UsageError: the run has no ledger yet.
    """
    spec = run.spec()
    if not has_ledger(run, spec):
        raise no_ledger(run, spec)
    ledger = open_ledger(run, spec, read_only=True)
    try:
        states = {entry.version: dict(entry.state) for entry in ledger.history(ARTIFACT_ID)}
    finally:
        ledger.close()
    if not states:
        raise UsageError(f"{ledger_name(run, spec)}: holds no version of the run's artifact; `agentdescent run "
                         f"{run.path} --restart` starts over")
    return states, make_strategy(spec, load_tasks(run.tasks_file))
