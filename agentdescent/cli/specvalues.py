"""The values of a run's ``spec.json``: one check per key, for the flag that sets it and for the stored value.

Every key of a spec has one `Field`: the command and flag that set it, what it is, and
its check. A knob's check is the engines' own (a `Split`, `Schedule`, `Limits` or
`AggregatorConfig` built with the value, or the `agentdescent.validation` call the agent
makes on it), so ``init`` accepts exactly what ``run`` does. `check_values` runs the
checks on values that came from flags (``init`` on the spec it is about to write, ``run``
on its own settings): the error names the flag and the value (``--held-out-frac 1.5:
use a number in (0, 1) ...``). `check_spec` runs them on a stored spec, at every open of a
run directory (`agentdescent.cli.rundir.RunDir.spec`): the error names the file, the
key, the value and the fix, in one line. Either is a `UsageError` (exit 2).

The secrets rules are three keys' checks and live here too: `check_key_env` refuses a key
given where the NAME of its variable goes, `check_base_url` a URL holding a user name, a
password, a key-shaped query value or a ``#fragment``, neither echoing it, the ``ledger``
key's check a database DSN holding a password (`agentdescent.cli.runledger`), and `redact`
takes key-shaped strings out of any message.

It must not read or write a file, nor import another module of the command line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..engine.config import Limits, Schedule, Split
from ..errors import InvalidArgument, UsageError
from ..ledger.dsn import dsn_has_password, is_dsn
from ..merge.aggregator_config import AggregatorConfig
from ..merge.demonstrations import RulesAndDemos
from ..validation import check_bool, check_int, check_real, check_text

__all__ = ["DEFAULT_KEY_ENV", "FIELDS", "PROPOSER_FIELDS", "PROVIDERS", "Field", "check_base_url", "check_key_env",
           "check_spec", "check_values", "looks_like_key", "redact"]

#: The providers a spec may name, and the variable each one's key is read from by default.
PROVIDERS = ("openai", "anthropic")
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
_STRATEGIES = ("append", "keyed", "single", "tree")
_PROPOSALS = ("rule", "rewrite", "edit")


# --------------------------------------------------------------------------- secrets

#: how keys of the common providers begin (checked case-sensitively, with 8 or more characters after)
_KEY_PREFIXES = ("sk-", "sk_", "gsk_", "hf_", "ghp_", "gho_", "ghs_", "github_pat_", "glpat-", "xoxb-", "xoxp-",
                 "AKIA", "AIza", "pk_", "rk_", "pplx-", "xai-", "nvapi-", "r8_")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"[A-Za-z0-9_\-+/=]{16,}")


def looks_like_key(text: str) -> bool:
    """Whether ``text`` is shaped like an API key: a provider's key prefix, or a long mix of letters and digits.

    Long means a run of 20 or more letters and digits holding both, or 16 or more holding
    upper case, lower case and digits; variable names (``OPENAI_API_KEY``,
    ``AZURE_OPENAI_API_KEY_EASTUS2``) are words between underscores and are not.
    """
    text = text.strip()
    if any(text.startswith(p) and len(text) >= len(p) + 8 for p in _KEY_PREFIXES):
        return True
    for run in re.findall(r"[A-Za-z0-9]+", text):
        letters, digits = any(c.isalpha() for c in run), any(c.isdigit() for c in run)
        mixed_case = any(c.isupper() for c in run) and any(c.islower() for c in run)
        if (len(run) >= 20 and letters and digits) or (len(run) >= 16 and digits and mixed_case):
            return True
    return False


def redact(text: str) -> str:
    """``text`` with every key-shaped word (`looks_like_key`) and the value of every set variable
    whose name ends in KEY, TOKEN, SECRET or PASSWORD replaced by ``[redacted]``."""
    values = [v for k, v in os.environ.items() if len(v) >= 8 and re.search(r"(KEY|TOKEN|SECRET|PASSWORD)$", k.upper())]
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, "[redacted]")
    return _TOKEN.sub(lambda m: "[redacted]" if looks_like_key(m.group(0)) else m.group(0), text)


def _key_env(value: Any, flag: str) -> None:
    if not isinstance(value, str):
        raise InvalidArgument("use the NAME of an environment variable (a string)")
    if not _NAME.fullmatch(value) or looks_like_key(value):
        why = "looks like an API key" if looks_like_key(value) else "holds characters no variable name has"
        raise InvalidArgument(f"the value {why} (not shown); give the NAME of an environment variable, not the "
                              f"key: export MY_KEY=... and pass {flag} MY_KEY")


def _base_url(value: Any, flag: str) -> None:
    if not isinstance(value, str):
        raise InvalidArgument("use an http:// or https:// URL (a string), e.g. http://127.0.0.1:8090/v1")
    try:
        parts = urlsplit(value)
        credential = parts.username is not None or parts.password is not None or "@" in parts.netloc
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        raise InvalidArgument("not a URL; give an http:// or https:// URL, e.g. http://127.0.0.1:8090/v1") from None
    if credential:
        raise InvalidArgument("the URL holds a user name or password (USER:PASSWORD@HOST, not shown); put the "
                              "credential in the API key's environment variable (--api-key-env VAR) and give the "
                              "URL without it")
    if any(looks_like_key(v) for _, v in query):
        raise InvalidArgument("the URL's query holds what looks like an API key (not shown); put the key in the API "
                              "key's environment variable (--api-key-env VAR) and give the URL without it")
    if parts.fragment or "#" in value:
        raise InvalidArgument("the URL has a #fragment (not shown), which no server reads and which is where a "
                              "token is sometimes pasted; give the URL without it (a key goes in the API key's "
                              "environment variable, --api-key-env VAR)")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidArgument(f"{redact(value)[:80]!r} is not an http:// or https:// URL; give one, e.g. "
                              "http://127.0.0.1:8090/v1")


def check_key_env(value: str | None, flag: str) -> str | None:
    """``value`` when it is the NAME of an environment variable; a key given there is refused, never echoed.

    Raises:
        UsageError: ``value`` holds characters no variable name has, or looks like a key.
    """
    if value is not None:
        try:
            _key_env(value, flag)
        except InvalidArgument as exc:
            raise UsageError(f"{flag}: {exc}") from None
    return value


def check_base_url(value: str | None, flag: str) -> str | None:
    """``value`` when it is an http(s) URL without a credential or a fragment in it; never echoes either.

    Raises:
        UsageError: a user name or password in it (``http://user:pass@host``), a key-shaped
            query value, a ``#fragment``, or not an http(s) URL.
    """
    if value is not None:
        try:
            _base_url(value, flag)
        except InvalidArgument as exc:
            raise UsageError(f"{flag}: {exc}") from None
    return value


# --------------------------------------------------------------------------- the checks


def _reason(exc: InvalidArgument, value: Any) -> str:
    """The engine's message without its ``name=value:`` (or ``Owner(name=value):``) label: the flag or key names it."""
    text = str(exc)
    label = f"={value!r}"
    at = text.find(label)
    if at >= 0:
        text = text[at + len(label):].lstrip(")").removeprefix(":").strip()
    return re.sub(r" or None\b", "", text).replace("  ", " ").strip()


def _engine(build: Callable[[Any], Any]) -> Callable[[Any, str], None]:
    """A check that is the engines' own: ``build(value)`` raises their `InvalidArgument`, reworded without its label."""
    def check(value: Any, flag: str) -> None:
        try:
            build(value)
        except InvalidArgument as exc:
            raise InvalidArgument(_reason(exc, value)) from None
    return check


def _choice(choices: Sequence[str], what: str) -> Callable[[Any, str], None]:
    def check(value: Any, flag: str) -> None:
        if not isinstance(value, str) or value not in choices:
            raise InvalidArgument(f"not {what}; use one of {', '.join(choices)}")
    return check


def _string(value: Any, flag: str) -> None:
    if not isinstance(value, str):
        raise InvalidArgument("use a string")


def _is_sha(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value) is not None


def _inputs(value: Any, flag: str) -> None:
    """``{"tasks.jsonl": {"sha256": ..., "ids": [...], "digests": [...]}, ...}`` (`agentdescent.cli.runinputs`)."""
    ok = isinstance(value, dict) and all(isinstance(v, dict) and _is_sha(v.get("sha256")) for v in value.values())
    for entry in value.values() if ok else ():
        ids, digests = entry.get("ids"), entry.get("digests")
        if ids is None and digests is None:
            continue
        ok = ok and isinstance(ids, list) and isinstance(digests, list) and len(ids) == len(digests) and all(
            isinstance(x, str) for x in (*ids, *digests))
    if not ok:
        raise InvalidArgument('not the checksums init records ({"tasks.jsonl": {"sha256": HEX, "ids": [...], '
                              '"digests": [...]}, ...})')


def _changes(value: Any, flag: str) -> None:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise InvalidArgument("use a list of the changes recorded (objects)")


def _object(shape: str) -> Callable[[Any, str], None]:
    def check(value: Any, flag: str) -> None:
        if not isinstance(value, dict):
            raise InvalidArgument(f"use an object {shape}")
    return check


def _ledger(value: Any, flag: str) -> None:
    """``{"dsn": "postgresql://...", "schema": NAME, "run_id": ID or null}`` (`agentdescent.cli.runledger`)."""
    run_id = value.get("run_id") if isinstance(value, dict) else None
    if not (isinstance(value, dict) and is_dsn(value.get("dsn")) and isinstance(value.get("schema"), str)
            and value["schema"] and (run_id is None or (isinstance(run_id, str) and run_id.strip()))):
        raise InvalidArgument('not the ledger database init records ({"dsn": "postgresql://USER@HOST:PORT/DBNAME", '
                              '"schema": NAME, "run_id": null or a name})')
    if dsn_has_password(value["dsn"]):
        raise InvalidArgument("its DSN holds a password (not shown), which a run directory never stores; delete it "
                              "from the DSN and put it in PGPASSWORD or a PGPASSFILE (~/.pgpass)")


@dataclass(frozen=True)
class Field:
    """One key of ``spec.json``: the command and flag that set it, what it is, and its one check.

    ``check(value, flag)`` raises `InvalidArgument` saying what is wrong and what to use
    (without naming the key or the value: `check_values` and `check_spec` add those).
    ``required`` keys must be in every spec; ``nullable`` ones may be ``null``; a
    ``secret`` one's value is never shown.
    """

    key: str
    command: str
    flag: str
    what: str
    check: Callable[[Any, str], None]
    required: bool = False
    nullable: bool = False
    secret: bool = False
    fix: str = "or remove the key for the default"


_NONE = "or remove the key for none"

#: The proposer's own keys (``spec["proposer"]``, ``init --proposer-model``).
PROPOSER_FIELDS = (
    Field("model", "init", "--proposer-model", "the model that writes the proposals",
          _engine(lambda v: check_text(v, "model")), required=True),
    Field("provider", "init", "--proposer-provider", "the proposer's API", _choice(PROVIDERS, "a known provider"),
          required=True),
    Field("base_url", "init", "--proposer-base-url", "the proposer's server", _base_url, nullable=True, secret=True,
          fix=_NONE),
    Field("api_key_env", "init", "--proposer-api-key-env", "the variable holding the proposer's key", _key_env,
          nullable=True, secret=True, fix=_NONE),
)

#: Every key a spec holds: ``init``'s, then the settings ``run`` adds, then the bookkeeping.
FIELDS = (
    Field("model", "init", "--model", "the model that answers the tasks", _engine(lambda v: check_text(v, "model")),
          required=True),
    Field("provider", "init", "--provider", "the model's API", _choice(PROVIDERS, "a known provider"),
          required=True),
    Field("base_url", "init", "--base-url", "the model's server", _base_url, nullable=True, secret=True, fix=_NONE),
    Field("api_key_env", "init", "--api-key-env", "the variable holding the key", _key_env, nullable=True,
          secret=True, fix=_NONE),
    Field("proposer", "init", "--proposer-model", "the second model that writes the proposals",
          _object('{"model": ..., "provider": ..., "base_url": ..., "api_key_env": ...}'),
          nullable=True, fix=_NONE),
    Field("seed", "init", "--seed", "the run's seed", _engine(lambda v: check_int(v, "seed"))),
    Field("held_out_frac", "init", "--held-out-frac", "the share of tasks held out",
          _engine(lambda v: Split(held_out_frac=v))),
    Field("stratify", "init", "--stratify", "the task field the split is even over",
          _engine(lambda v: Split(stratify=v)), nullable=True, fix=_NONE),
    Field("false_accept_rate", "init", "--false-accept-rate", "the acceptance test's false-accept rate",
          _engine(lambda v: AggregatorConfig(false_accept_rate=v)), nullable=True),
    Field("call_tokens", "init", "--call-tokens", "the per-call cap on a reply",
          _engine(lambda v: check_int(v, "call_tokens", low=1)), nullable=True),
    Field("temperature", "init", "--temperature", "the sampling temperature",
          _engine(lambda v: check_real(v, "temperature", low=0.0)), nullable=True, fix="or remove the key for the "
          "server's default"),
    Field("reward", "init", "--reward", "the reward", _engine(lambda v: check_text(v, "reward")), required=True),
    Field("strategy", "init", "--strategy", "the strategy", _choice(_STRATEGIES, "a strategy"), required=True),
    Field("proposal", "init", "--proposal", "what the model proposes", _choice(_PROPOSALS, "a proposal mode"),
          nullable=True),
    Field("demos", "init", "--demos", "the demonstration slots",
          _engine(lambda v: RulesAndDemos(demos=v)), nullable=True, fix="or remove the key for none"),
    Field("initial_text", "init", "--initial", "the starting artifact", _string, nullable=True, fix=_NONE),
    Field("tasks", "init", "--tasks", "the tasks file's name in the run directory", _string, nullable=True),
    Field("test_tasks", "init", "--test-tasks", "the test set's file name in the run directory", _string,
          nullable=True, fix=_NONE),
    Field("tree", "init", "--tree", "the tree run's files and tests",
          _object('{"include": [...], "exclude": [...], "test_cmd": ..., "timeout": ...}'), nullable=True, fix=_NONE),
    Field("ledger", "init", "--ledger", "the database holding the run's ledger", _ledger, nullable=True,
          secret=True, fix="or remove the key to keep the ledger in RUN_DIR/ledger.sqlite"),
    Field("run_rounds", "run", "--rounds", "the rounds the run was given",
          _engine(lambda v: check_int(v, "rounds", low=1))),
    Field("run_workers", "run", "--workers", "the workers a round", _engine(lambda v: Schedule(n_workers=v))),
    Field("run_max_tokens", "run", "--max-tokens", "the run's token budget",
          _engine(lambda v: Limits(max_tokens=v)), nullable=True, fix="or remove the key for no budget"),
    Field("run_patience", "run", "--patience", "the rounds without a commit the run waits",
          _engine(lambda v: Limits(patience=v)), nullable=True, fix="or remove the key for never"),
    Field("run_async", "run", "--async", "whether the run is async", _engine(lambda v: check_bool(v, "async"))),
    Field("inputs", "init", "--tasks", "the checksums of the run's inputs", _inputs, nullable=True,
          fix="or remove the key: the next run or resume records them again from the files as they are"),
    Field("input_changes", "run", "--accept-changed-tasks", "the changes of the inputs adopted", _changes,
          nullable=True),
    *(Field(key, command, "", what, _string, nullable=True) for key, command, what in (
        ("command", "init", "the init command as typed"), ("run_command", "run", "the run command as typed"),
        ("created", "init", "when init made the run"), ("version", "init", "the agentdescent that made it"))),
)


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return redact(text if len(text) <= 80 else text[:77] + "...")


def _flagged(field: Field, value: Any) -> str | None:
    """What is wrong with ``value`` (from ``field``'s flag), in one line naming the flag; None if nothing."""
    if value is None and (field.nullable or not field.required):
        return None
    try:
        field.check(value, field.flag)
    except InvalidArgument as exc:
        name = field.flag or field.key
        return f"{name}: {exc}" if field.secret else f"{name} {_shown(value)}: {exc}"
    return None


def check_values(values: Mapping[str, Any], fields: Sequence[Field] = FIELDS) -> None:
    """Check the values ``init`` or ``run`` is about to store (each key of ``values`` that has a `Field`).

    Raises:
        UsageError: naming the flag, the value (never a secret's) and what to use.
    """
    for field in fields:
        if field.key in values:
            problem = _flagged(field, values[field.key])
            if problem:
                raise UsageError(problem)
    if isinstance(values.get("proposer"), dict):
        check_values(values["proposer"], PROPOSER_FIELDS)


def _stored(field: Field, spec: Mapping[str, Any], path: Path, prefix: str) -> str | None:
    key = f"{prefix}{field.key}"
    sets = f"as `agentdescent {field.command} {field.flag}` sets it" if field.flag else f"as {field.command} sets it"
    if field.key not in spec:
        return f'{path}: no "{key}" ({field.what}); add it, {sets}' if field.required else None
    value = spec[field.key]
    if value is None and field.nullable:
        return None
    try:
        field.check(value, field.flag)
    except InvalidArgument as exc:
        fix = "" if field.required else f", {field.fix}"
        shown = "" if field.secret else f" {_shown(value)}:"
        return f'{path}: "{key}":{shown} {exc}; set it right in spec.json ({field.what}, {sets}){fix}'
    return None


def check_spec(spec: Mapping[str, Any], path: Path) -> None:
    """Check a stored spec, key by key (`FIELDS`; the proposer's with `PROPOSER_FIELDS`); keys it does not know are left.

    Raises:
        UsageError: the first bad key, in one line naming the file, the key, the value
            (never a secret's) and the fix.
    """
    for field in FIELDS:
        problem = _stored(field, spec, path, "")
        if problem:
            raise UsageError(problem)
    if isinstance(spec.get("proposer"), dict):
        for field in PROPOSER_FIELDS:
            problem = _stored(field, spec["proposer"], path, "proposer.")
            if problem:
                raise UsageError(problem)
