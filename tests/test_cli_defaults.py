"""The command line's run flags take the engines' defaults: one home for each, in `agentdescent.engine.config`.

Each flag of `KNOB_FLAGS` is pinned to its config field's default (read here off the
dataclass fields, not through the code under test), follows the field when the field
changes, and no other flag names a knob; a spec without a key reads the same default; and
``init --call-tokens`` reaches the agent as its per-call cap, ``call_tokens``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest

from agentdescent import evolve
from agentdescent.cli import demo
from agentdescent.cli.main import COMMANDS
from agentdescent.cli.parser import KNOB_FLAGS, build_parser, knob_help
from agentdescent.cli.runspec import knob_default, make_agent, spec_knob
from agentdescent.engine.config import Limits, Retry, RunConfig, Schedule, Split
from agentdescent.merge.aggregator_config import AggregatorConfig

CLI = Path(__file__).resolve().parents[1] / "agentdescent" / "cli"
CONFIGS = (RunConfig, Split, Limits, Retry, Schedule, AggregatorConfig)
#: Flags named otherwise than their knob.
ALIASES = {"workers": "n_workers", "repeats": "test_repeats"}
#: Flags that name a knob but do not take its default, and why.
NOT_MIRRORS = {
    ("resume", "--rounds"),  # default: the rounds the run had left
    ("init", "--test-tasks"),  # a file, read into Split.test_tasks
    ("init", "--strategy"),  # a name (append, keyed, single), made into a Strategy
    ("init", "--proposal"),  # LLMAgent's reply mode (rule, rewrite), not the engine's proposal= rule
    ("init", "--ledger"),  # a database DSN; without it the ledger is RUN_DIR/ledger.sqlite, not evolve's in-memory one
}


def _field(name: str) -> dataclasses.Field[Any]:
    for cls in CONFIGS:
        for fld in dataclasses.fields(cls):
            if fld.name == name:
                return fld
    raise AssertionError(f"{name} is no field of {[c.__name__ for c in CONFIGS]}")


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    return action


def _knob_named(dest: str) -> str | None:
    """The knob a flag or spec key names (a config field with a default), or None."""
    name = ALIASES.get(dest, dest)
    return name if any(name == f.name and f.default is not dataclasses.MISSING
                       for cls in CONFIGS for f in dataclasses.fields(cls)) else None


def test_every_knob_flag_defaults_to_its_config_field() -> None:
    commands = _subparsers(build_parser())
    for (command, flag), knob in KNOB_FLAGS.items():
        fld = _field(knob)
        assert fld.default is not dataclasses.MISSING, knob
        assert _option(commands[command], flag).default == fld.default, (command, flag, knob)
        if knob in inspect.signature(evolve).parameters:  # what evolve itself would use
            assert inspect.signature(evolve).parameters[knob].default == fld.default, knob
    assert _option(commands["run"], "--workers").default == Schedule().n_workers
    assert _option(commands["run"], "--rounds").default == Limits().rounds


def test_the_demo_flags_default_to_their_config_fields() -> None:
    parser = demo.demo_parser()
    for flag, knob in demo.KNOB_FLAGS.items():
        assert _option(parser, flag).default == _field(knob).default, flag
        assert str(_field(knob).default) in _option(parser, flag).help, flag


def test_no_other_flag_names_a_knob() -> None:
    for command, parser in _subparsers(build_parser()).items():
        for action in parser._actions:
            if action.option_strings and _knob_named(action.dest) is not None:
                key = (command, max(action.option_strings, key=len))
                assert key in KNOB_FLAGS or key in NOT_MIRRORS, f"{key} names {action.dest}: add it to KNOB_FLAGS"


def test_a_flag_follows_its_field_when_the_field_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    # the default is read from the config each time, never copied into the parser
    moved = {}
    for knob in set(KNOB_FLAGS.values()) | set(demo.KNOB_FLAGS.values()):
        moved[knob] = object()
        monkeypatch.setattr(_field(knob), "default", moved[knob])
    commands = _subparsers(build_parser())
    for (command, flag), knob in KNOB_FLAGS.items():
        assert _option(commands[command], flag).default is moved[knob], (command, flag)
    for flag, knob in demo.KNOB_FLAGS.items():
        assert _option(demo.demo_parser(), flag).default is moved[knob], flag
    assert spec_knob({}, "n_workers", "run_workers") is moved["n_workers"]


def test_a_spec_without_a_key_reads_the_engines_default() -> None:
    assert spec_knob({}, "rounds", "run_rounds") == Limits().rounds
    assert spec_knob({}, "n_workers", "run_workers") == Schedule().n_workers
    assert spec_knob({}, "held_out_frac") == Split().held_out_frac
    assert spec_knob({}, "seed") == 0 and spec_knob({}, "max_tokens", "run_max_tokens") is None
    assert spec_knob({"run_workers": 2}, "n_workers", "run_workers") == 2
    assert knob_default("false_accept_rate") == AggregatorConfig().false_accept_rate
    with pytest.raises(ValueError, match="n_worker.*did you mean 'n_workers'"):
        knob_default("n_worker")


def test_no_command_line_module_writes_a_knobs_default_again() -> None:
    # `spec.get("run_workers", 4)`: a second home for n_workers' default
    mirrored = {*KNOB_FLAGS.values(), *demo.KNOB_FLAGS.values(), *ALIASES}
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str) and isinstance(node.args[1], ast.Constant)):
                key = node.args[0].value.removeprefix("run_")
                assert key not in mirrored, f"{path.name}:{node.lineno}: {key}'s default again; use spec_knob"


def test_the_help_of_a_knob_flag_is_its_fields_and_says_its_default() -> None:
    commands = _subparsers(build_parser())
    run_help = commands["run"].format_help()
    assert "the run's token budget (default: none)" in " ".join(run_help.split())
    assert "(default: 15)" in run_help and "(default: 4)" in run_help
    assert knob_help("held_out_frac") == "share of tasks held out, strictly between 0 and 1"
    assert knob_help("max_tokens") == "the run's token budget"
    assert "`" not in knob_help("false_accept_rate") and "PairedTest" not in knob_help("false_accept_rate")


def test_every_command_has_a_function() -> None:
    assert set(_subparsers(build_parser())) == set(COMMANDS) | {"demo"}


def test_init_call_tokens_reaches_the_agent_as_its_per_call_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLI_DEFAULTS_KEY", "local")
    spec = {"model": "m", "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "CLI_DEFAULTS_KEY",
            "call_tokens": 33, "temperature": 0.0}
    assert make_agent(spec).call_tokens == 33
    assert make_agent({**spec, "call_tokens": None}).call_tokens is None
    args = build_parser().parse_args(["init", "r", "--model", "m", "--call-tokens", "33"])
    assert args.call_tokens == 33
