"""The ``agentdescent`` argument parser: every command's flags, the run knobs' defaults read from the engines' config.

A flag that mirrors an engine knob (`KNOB_FLAGS`: ``--rounds``, ``--workers``,
``--max-tokens``, ``--patience``, ``--seed``, ``--held-out-frac``, ``--stratify``,
``--false-accept-rate``, ``eval --repeats``) takes its default from that knob's field in
`agentdescent.engine.config` (`RunConfig` and its families, or `AggregatorConfig`),
through `agentdescent.cli.runspec.knob_default`, and some take their help from the
field's own documentation (`knob_help`), so a default lives in one place and a test pins
each flag to it. `build_parser` is one step per command (`_add_init`, `_add_run`...);
every option's help ends with its default (`_DefaultsFormatter`), and a bad flag's error
line is one line, ending with where the usage is, and never echoes a key (`OneLineParser`).

This module owns the flags, their types, defaults and help. It must not read or write a
file, run a command or print anything but argparse's usage, help and error lines; which
function runs a command is `agentdescent.cli.main`'s.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
from collections.abc import Mapping
from typing import Any

from .._version import VERSION
from ..engine.config import RunConfig
from ..errors import InvalidArgument
from ..merge.aggregator_config import AggregatorConfig
from .runledger import DEFAULT_SCHEMA
from .runspec import REWARD_HELP, knob_default, redact
from .runtree import DEFAULT_SUITE_TIMEOUT
from .specvalues import PROVIDERS

__all__ = ["KNOB_FLAGS", "OneLineParser", "build_parser", "knob_help"]

#: The flags that mirror an engine knob: ``(command, flag)`` -> the knob (a keyword of
#: `agentdescent.evolve`, or a field of `AggregatorConfig`) whose default the flag takes.
KNOB_FLAGS: Mapping[tuple[str, str], str] = {
    ("init", "--seed"): "seed",
    ("init", "--held-out-frac"): "held_out_frac",
    ("init", "--stratify"): "stratify",
    ("init", "--false-accept-rate"): "false_accept_rate",
    ("init", "--run-id"): "run_id",
    ("plan", "--rounds"): "rounds",
    ("plan", "--workers"): "n_workers",
    ("plan", "--max-tokens"): "max_tokens",
    ("run", "--rounds"): "rounds",
    ("run", "--workers"): "n_workers",
    ("run", "--max-tokens"): "max_tokens",
    ("run", "--patience"): "patience",
    ("eval", "--repeats"): "test_repeats",
    ("eval", "--workers"): "n_workers",
}

_PROVIDERS = list(PROVIDERS)


# --------------------------------------------------------------------------- helpers


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: use a number >= 1")
    return n


def _knob_owner(name: str) -> type:
    """The config class whose field ``name`` is: `RunConfig`, one of its families, or `AggregatorConfig`."""
    families = [f.default_factory for f in dataclasses.fields(RunConfig) if isinstance(f.default_factory, type)]
    for cls in (RunConfig, *families, AggregatorConfig):
        if any(f.name == name for f in dataclasses.fields(cls)):
            return cls
    raise InvalidArgument(f"knob_help({name!r}): not a field of RunConfig, its families or AggregatorConfig; "
                          "name one of their fields")


def knob_help(name: str) -> str:
    """The first sentence of the knob ``name``'s entry in its config class's Args, as plain help text.

    Code references in parentheses are dropped and backticks stripped; ``%`` is escaped for
    argparse.

    Raises:
        InvalidArgument: ``name`` is no config field, or its class does not document it.
    """
    cls = _knob_owner(name)
    doc = inspect.getdoc(cls) or ""
    entry = re.search(rf"^    {re.escape(name)}: (.*?)(?=^    \w+: |^\S|\Z)", doc, re.M | re.S)
    if entry is None:
        raise InvalidArgument(f"knob_help({name!r}): {cls.__name__}'s docstring has no Args entry for it; add one")
    text = " ".join(entry.group(1).split())
    text = re.split(r"(?<=\.)\s", text, maxsplit=1)[0].rstrip(".")
    text = re.sub(r"\s*\(`[\w.]+`\)", "", text)
    return re.sub(r"``?([^`]+)``?", r"\1", text).replace("%", "%%")


def _knob(p: argparse.ArgumentParser, command: str, flag: str, *, help: str | None = None, **options: Any) -> None:
    """Add ``flag``, a mirror of `KNOB_FLAGS`' knob: its default is the knob's; its help, without one, the knob's."""
    knob = KNOB_FLAGS[(command, flag)]
    p.add_argument(flag, default=knob_default(knob), help=knob_help(knob) if help is None else help, **options)


class _DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already says it (a flag has none)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if not action.option_strings or action.required or "(default" in text or action.default is False or \
                action.default == argparse.SUPPRESS:
            return text
        shown = "none" if action.default is None else "%(default)s"
        return f"{text} (default: {shown})".lstrip()


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose error is one line, never echoing a key-shaped value (`redact`).

    argparse prints the whole usage block before the line that matters; here the line says
    where the usage is instead: ``agentdescent run: error: argument --rounds: invalid int
    value: 'x' (see agentdescent run --help)``.
    """

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {redact(message)} (see {self.prog} --help)\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """As argparse's, but an unknown argument is refused by the command it was given to (its --help named)."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(parsed, "command", None)
            prog = f"{self.prog} {command}" if command else self.prog
            self.exit(2, f"{prog}: error: {redact('unrecognized arguments: ' + ' '.join(extras))} (see {prog} "
                      "--help)\n")
        return parsed


def _command(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A command's parser, with its ``RUN_DIR`` argument."""
    p = sub.add_parser(name, help=help, formatter_class=_DefaultsFormatter)
    p.add_argument("run_dir", metavar="RUN_DIR")
    return p


# --------------------------------------------------------------------------- init


def _init_tasks(p: argparse.ArgumentParser) -> None:
    """``init``'s tasks, reward, strategy and starting artifact."""
    p.add_argument("--tasks", metavar="FILE.jsonl", default=None,
                   help='one JSON object per line: "prompt", optional "id" and "answer" (default: none; required '
                   'without --tree)')
    p.add_argument("--reward", default=None, metavar="REWARD",
                   help=REWARD_HELP.replace("%", "%%") + " (default: contains)")
    p.add_argument("--test-tasks", metavar="FILE.jsonl", default=None,
                   help="a test set (same format, ids not in --tasks), scored at the run's start and end and "
                   "never used for a decision (default: none)")
    p.add_argument("--strategy", choices=["append", "keyed", "single"], default=None,
                   help="append: a playbook of rules; keyed: one rule per task category; single: one prompt, "
                   "rewritten whole (default: append)")
    p.add_argument("--initial", metavar="FILE", help="a starting prompt or playbook (one rule per line)")
    p.add_argument("--demos", metavar="N", type=int, default=None,
                   help="also hold N demonstrations (worked examples: train tasks with their answers, sent to the "
                   "model as chat turns), proposed with no model call while slots are open (default: none; 4 is a "
                   "good start for a small model)")
    p.add_argument("--proposal", choices=["rule", "rewrite"], default=None,
                   help="what the model proposes: one rule, or the whole new text (default: rewrite for "
                   "--strategy single, else rule)")


def _init_models(p: argparse.ArgumentParser) -> None:
    """``init``'s model, its API and key, and the proposer's."""
    p.add_argument("--model", required=True, metavar="M", help="the model that answers the tasks (with --tree: "
                   "the model that writes the edits)")
    p.add_argument("--provider", choices=_PROVIDERS, default="openai",
                   help="its API: an OpenAI-compatible server, or Anthropic's")
    p.add_argument("--base-url", metavar="U", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8090/v1")
    p.add_argument("--api-key-env", metavar="VAR",
                   help="the environment variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY); "
                   "only its name is stored")
    p.add_argument("--proposer-model", metavar="M", default=None,
                   help="a second model that writes the proposals while --model answers the tasks "
                   "(default: none, --model does both)")
    p.add_argument("--proposer-provider", choices=_PROVIDERS, default=None,
                   help="the proposer's API (default: --provider)")
    p.add_argument("--proposer-base-url", metavar="U", default=None,
                   help="the proposer's server (default: --base-url when the proposer uses --provider's API, "
                   "else that API's own endpoint)")
    p.add_argument("--proposer-api-key-env", metavar="VAR", default=None,
                   help="the environment variable holding the proposer's key (default: --api-key-env's when the "
                   "proposer uses --provider's API, else OPENAI_API_KEY / ANTHROPIC_API_KEY); only its name is "
                   "stored")


def _init_tree(p: argparse.ArgumentParser) -> None:
    """``init --tree``: a project's code evolving against its own tests."""
    p.add_argument("--tree", metavar="DIR", default=None,
                   help="evolve the code of the project in DIR against its own tests: DIR is copied into "
                   "RUN_DIR/tree, its tests are the tasks and the reward, and the model writes search/replace "
                   "edits (not with --tasks, --reward, --strategy, --initial, --proposal, --test-tasks)")
    p.add_argument("--test-cmd", metavar="CMD", default=None,
                   help="with --tree: the test command, writing JUnit XML to {junit} (default: pytest)")
    p.add_argument("--include", metavar="GLOB", action="append", default=None,
                   help="with --tree: the files the run may change, repeatable (default: *.py)")
    p.add_argument("--exclude", metavar="GLOB", action="append", default=None,
                   help="with --tree: files it must not change, repeatable, added to the tests (test_*.py, "
                   "*_test.py, conftest.py, tests/**, test/**), which are never changed (default: the tests)")
    p.add_argument("--pytest-plugins", metavar="NAMES", default=None,
                   help="with --tree and pytest: load only these pytest plugins (comma-separated; '' for none) "
                   "instead of every installed one, which starts each suite run faster (default: every installed)")
    p.add_argument("--suite-timeout", type=float, metavar="SECONDS", default=None,
                   help=f"with --tree: seconds one run of the whole suite may take (default: {DEFAULT_SUITE_TIMEOUT:g})")


def _init_knobs(p: argparse.ArgumentParser) -> None:
    """``init``'s engine knobs, stored in the spec: the seed, the split, the acceptance test's rate."""
    _knob(p, "init", "--seed", type=int, metavar="S")
    _knob(p, "init", "--held-out-frac", type=float, metavar="F")
    _knob(p, "init", "--stratify", metavar="FIELD",
          help="split the held-out tasks evenly over this task field, e.g. a label or category "
          "(default: none; with --tree, group: each test's class or file)")
    _knob(p, "init", "--false-accept-rate", type=float, metavar="A")


def _init_calls(p: argparse.ArgumentParser) -> None:
    """``init``'s settings of every model call: the per-call cap on a reply and the temperature."""
    p.add_argument("--call-tokens", type=_positive, default=None, metavar="N",
                   help="the per-call cap on each reply, in tokens (LLMAgent's call_tokens; the run's token budget "
                   "is run --max-tokens)")
    p.add_argument("--temperature", type=float, default=None, metavar="T", help="the model's sampling temperature "
                   "(default: the server's)")


def _init_ledger(p: argparse.ArgumentParser) -> None:
    """``init``'s ledger: RUN_DIR/ledger.sqlite, or a schema of a PostgreSQL database (`agentdescent.cli.runledger`)."""
    p.add_argument("--ledger", metavar="DSN", default=None,
                   help="keep the ledger in a PostgreSQL database, postgresql://USER@HOST:PORT/DBNAME, never with "
                   "a password in it (libpq reads it from PGPASSWORD or a PGPASSFILE, ~/.pgpass); checked now "
                   "(default: RUN_DIR/ledger.sqlite)")
    p.add_argument("--ledger-schema", metavar="NAME", default=None,
                   help="with --ledger: the schema holding the ledger's tables; each run needs its own, but run directories "
                   f"sharing one artifact (--run-id) give the same one (default: {DEFAULT_SCHEMA})")
    _knob(p, "init", "--run-id", metavar="ID",
          help="with --ledger: this run directory's driver name, to evolve one artifact from several run "
          "directories (on several hosts) in one database and schema, each with its own ID and progress "
          "(default: none, the run holds the artifact alone)")


def _add_init(sub: Any) -> None:
    p = _command(sub, "init", "make a run directory: spec.json and a copy of the tasks (with --tree, of a "
                 "project whose code evolves against its tests)")
    _init_tasks(p)
    _init_models(p)
    _init_tree(p)
    _init_knobs(p)
    _init_calls(p)
    _init_ledger(p)
    p.add_argument("--force", action="store_true", help="replace an existing spec")


# --------------------------------------------------------------------------- the run's commands


def _add_plan(sub: Any) -> None:
    p = _command(sub, "plan", "the calls and tokens a round and the run cost at most")
    _knob(p, "plan", "--rounds", type=_positive, metavar="R", help="rounds to plan for")
    _knob(p, "plan", "--workers", type=_positive, metavar="W", help="workers a round")
    _knob(p, "plan", "--max-tokens", type=_positive, metavar="N",
          help="the budget `run --max-tokens` would get: plan warns when it cannot cover the starting "
               "evaluation, and says how many rounds it covers (default: the last run's, else none)")
    p.add_argument("--probe", action="store_true",
                   help="time one real model call to estimate the wall time (spends one call)")


def _add_run(sub: Any) -> None:
    p = _command(sub, "run", "run it, writing ledger.sqlite (or its init --ledger database), rounds.jsonl, "
                 "status.json, result.json")
    _knob(p, "run", "--rounds", type=_positive, metavar="R",
          help="rounds to run (with --async: rounds x workers rollouts)")
    _knob(p, "run", "--workers", type=_positive, metavar="W", help="workers a round, each one task at a time")
    _knob(p, "run", "--max-tokens", type=_positive, metavar="N")
    _knob(p, "run", "--patience", type=_positive, metavar="N",
          help="stop after N rounds' worth of rollouts without a commit (default: never)")
    p.add_argument("--async", dest="asynchronous", action="store_true", help="the barrier-free runtime")
    p.add_argument("--restart", action="store_true",
                   help="delete the ledger and rounds and start over (a database ledger is never dropped: refused "
                   "while the database holds the run)")
    _accept_changed(p)


def _accept_changed(p: argparse.ArgumentParser) -> None:
    p.add_argument("--accept-changed-tasks", action="store_true",
                   help="go on though tasks.jsonl (or test_tasks.jsonl, or the starting artifact) changed since init: "
                   "adopt it as it is and record the change in spec.json (default: off, a changed file is refused)")


def _add_resume(sub: Any) -> None:
    p = _command(sub, "resume", "continue an interrupted, terminated or finished run")
    p.add_argument("--rounds", type=_positive, default=None, metavar="R",
                   help="rounds to add (default: what the run had left)")
    _accept_changed(p)


# --------------------------------------------------------------------------- the read-only commands


def _add_status(sub: Any) -> None:
    p = _command(sub, "status", "running / finished / failed / interrupted / terminated, with progress")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="every round: proposals (refused, by kind, with an example), each merge decision "
                   "with its numbers and its reason")


def _add_show(sub: Any) -> None:
    p = _command(sub, "show", "the artifact at a version, or a diff between two versions")
    p.add_argument("--version", type=_positive, default=None, help="default: the head")
    p.add_argument("--diff", type=_positive, nargs=2, metavar=("A", "B"), help="the diff from version A to B")
    p.add_argument("--round", type=_positive, default=None, metavar="N",
                   help="round N: its proposals, its decisions with their numbers, and the diff of each commit")


def _add_eval(sub: Any) -> None:
    p = _command(sub, "eval", "score a version on tasks (a test set), printing the mean, its interval and each "
                 "task; writes nothing into the run directory")
    p.add_argument("--tasks", metavar="FILE.jsonl", default=None,
                   help="the tasks to score on (same format as init's --tasks; at least one); required, except "
                   "for a tree run (init --tree), whose own tests are run on the version")
    p.add_argument("--version", type=_positive, default=None, metavar="V",
                   help="the version to score (default: the head)")
    _knob(p, "eval", "--repeats", type=_positive, metavar="K",
          help="draws per task (more with a sampled model narrows the interval)")
    _knob(p, "eval", "--workers", type=_positive, metavar="W", help="model calls at once")
    p.add_argument("--json", metavar="FILE", default=None,
                   help="also write the evaluation as JSON to FILE, outside the run directory (default: print only)")
    p.add_argument("--force", action="store_true", help="replace FILE if it exists (a regular file only)")


def _add_export(sub: Any) -> None:
    p = _command(sub, "export", "write the rendered artifact to a file (a tree run's files to a folder)")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the file to write, outside the run directory; for a tree run (init --tree) a folder, "
                   "new or empty")
    p.add_argument("--force", action="store_true",
                   help="replace FILE if it exists (a regular file only); for a tree run, write into a folder "
                   "with files in it (files of the same paths are replaced, the others kept)")
    p.add_argument("--version", type=_positive, default=None, help="the version to export (default: the head)")


def _add_report(sub: Any) -> None:
    p = _command(sub, "report", "one self-contained HTML page about the run")
    p.add_argument("-o", "--output", metavar="FILE.html", default=None,
                   help="where to write it: outside the run directory, or its own RUN_DIR/report.html, replaced "
                   "freely (default: RUN_DIR/report.html)")
    p.add_argument("--force", action="store_true", help="replace FILE.html if it exists (a regular file only)")


def _add_mcp(sub: Any) -> None:
    p = sub.add_parser("mcp", help="serve these commands as MCP tools over stdio (the mcp extra)",
                       formatter_class=_DefaultsFormatter)
    p.add_argument("--root", metavar="DIR", default=".",
                   help="the folder whose run directories (and files) the tools may reach; a path outside it is "
                   "refused (default: the current directory)")


def build_parser() -> argparse.ArgumentParser:
    """The ``agentdescent`` argument parser (every command has ``--help``; ``args.command`` names the one given)."""
    parser = OneLineParser(prog="agentdescent", description="Parallel self-evolution of LLM agent artifacts.")
    parser.add_argument("--version", action="version", version=f"agentdescent {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # `agentdescent demo` has its own parser (agentdescent.cli.demo); listed here for the help
    sub.add_parser("demo", help="the offline demo (simulated domain, SQLite ledger, no API key)", add_help=False)
    for add in (_add_init, _add_plan, _add_run, _add_status, _add_show, _add_resume, _add_eval, _add_export,
                _add_report, _add_mcp):
        add(sub)
    return parser
