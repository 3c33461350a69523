"""`CallCache`: model calls already made, kept on disk and served again without a request.

This module owns the cache's key (a canonical JSON of the model, the messages and the
options that shape a reply, hashed with sha256), its files (one JSON file per call, written
atomically), which calls it keeps (temperature 0 by default), its counters, and the
per-thread scope the engines open around a run's calls (`call_cache_scope`,
`active_call_cache`). `LLMAgent` consults it before each call and fills it after.

It must not import a provider, the engine or anything that calls a model, and it never
unpickles anything: an entry is JSON, read back as a `Completion`, or it is a miss.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument, InvalidArgumentType
from ..model import Completion
from ..usage import Usage
from ..validation import is_real

__all__ = ["CallCache", "InCallCache", "active_call_cache", "as_call_cache", "call_cache_scope"]

log = logging.getLogger("agentdescent.agents.callcache")

#: The version of an entry's layout; an entry of another version is a miss.
FORMAT = 1
#: Which calls a cache keeps: ``"zero"`` (temperature 0 only) or ``"all"``.
TEMPERATURES = ("zero", "all")
#: Options that never enter a key nor an entry: they change how a call travels, not its reply,
#: or they are secrets. A name holding ``api_key``, ``secret`` or ``password`` is dropped too.
UNKEYED_OPTIONS = frozenset({"api_key", "authorization", "headers", "extra_headers", "timeout", "stream"})
_SECRET = re.compile(r"api_key|secret|password", re.IGNORECASE)
_NAME = re.compile(r"[0-9a-f]{64}")
_COUNTERS = ("hits", "misses", "stores", "saved_tokens", "skipped", "damaged", "write_errors")


def _plain(value: Any) -> Any:
    """``value`` as plain JSON data (mappings to dicts, sequences to lists), or TypeError."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise TypeError("a non-finite number")
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    raise TypeError(f"a {type(value).__name__}")


def _canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class CallCache:
    """An on-disk cache of model calls: a call made before is answered from disk, for free.

    **The key.** A call is named by the sha256 (hex) of a canonical JSON (sorted keys, no
    spaces) of its ``model`` option, its messages and its other options that shape the
    reply (``max_tokens``, ``temperature``, ``tools``, and any other a provider takes, such
    as ``stop``, ``top_p`` or ``seed``); transport options and secrets (`UNKEYED_OPTIONS`)
    are left out. The provider itself is not in the key: two providers asked for the same
    model with the same messages and options share an entry, and an `LLMAgent` whose
    solver and proposer differ tells them apart only by their ``model=`` options
    (``model`` / ``propose_model``). A call whose options are not plain JSON data is not
    cached (counted as ``skipped``).

    **What is kept.** Only calls whose ``temperature`` option is 0, by default
    (``temperatures="zero"``): a call with another temperature samples, and a call with no
    ``temperature`` option at all is not cached either, because the provider's default
    temperature may sample. ``temperatures="all"`` keeps every call (a replay: the same
    sample each time). Each entry is one JSON file, ``<key>.json`` in ``path`` (created on
    the first write), written to a temporary file and moved into place, holding the key's
    data (messages and options), the reply's text, ``finish_reason``, ``tool_calls`` and
    the usage the call reported: never an API key, never a pickle. An entry that cannot
    be read, is not valid JSON or does not hold that call is a miss (counted as
    ``damaged`` too), replaced by the next call's reply. A cache that cannot write (a
    read-only disk) logs a warning and goes on (``write_errors``).

    **What it charges.** Nothing: `LLMAgent` returns a hit without calling its provider
    and records no tokens anywhere, so a run's budget is charged 0 for it; the call's
    original spend is counted in ``saved_tokens``. Note that at temperature 0 repeats of one
    call within a run are served from the cache too, so a model that is not deterministic
    at temperature 0 looks deterministic through a cache.

    **Clearing it.** Delete the folder (or call `clear`); entries never expire, and a change
    of model, messages or options makes a new key rather than reusing an old entry.

    Thread-safe. A cache pickles as its folder, its setting and its counters: a copy in
    another process (a process pool, a Dask worker) reads and writes the same folder, but
    counts into its own counters, which do not come back to the driver.

    Args:
        path: the folder of the entries (a ``str`` or a path).
        temperatures: ``"zero"`` (the default) or ``"all"``.

    Attributes:
        path: the folder.
        temperatures: which calls are kept.
        hits: calls answered from disk.
        misses: cacheable calls not found (or found damaged).
        stores: entries written.
        saved_tokens: the tokens the calls answered from disk originally spent.
        skipped: calls not cached (their temperature, or options that are not JSON data).
        damaged: entries found unreadable or not matching their call.
        write_errors: entries that could not be written.
    """

    def __init__(self, path: str | os.PathLike[str], *, temperatures: str = "zero") -> None:
        if not isinstance(path, (str, os.PathLike)) or not str(path):
            raise InvalidArgumentType(f"CallCache(path={path!r:.80}): give the cache's folder as a str or a path")
        if temperatures not in TEMPERATURES:
            raise InvalidArgument(
                f"CallCache(temperatures={temperatures!r:.40}): use 'zero' (only temperature-0 calls, "
                "the default) or 'all' (every call, replayed with the same reply)"
            )
        self.path = Path(path)
        self.temperatures = temperatures
        self._lock = threading.Lock()
        for name in _COUNTERS:
            setattr(self, name, 0)

    def __repr__(self) -> str:
        return f"CallCache({str(self.path)!r}, temperatures={self.temperatures!r})"

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            state = {"path": str(self.path), "temperatures": self.temperatures}
            state.update({name: getattr(self, name) for name in _COUNTERS})
        return state

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self._lock = threading.Lock()
        self.path = Path(state["path"])
        self.temperatures = state["temperatures"]
        for name in _COUNTERS:
            setattr(self, name, int(state.get(name, 0)))

    # ----------------------------------------------------------------- counters

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + n)

    def stats(self) -> dict[str, int]:
        """A consistent copy of the counters (``hits``, ``misses``, ``stores``, ``saved_tokens``, ...)."""
        with self._lock:
            return {name: getattr(self, name) for name in _COUNTERS}

    # ----------------------------------------------------------------- the key

    def cacheable(self, options: Mapping[str, Any]) -> bool:
        """Whether a call with ``options`` is kept: temperature 0 (or any, with ``temperatures="all"``)."""
        if self.temperatures == "all":
            return True
        temperature = options.get("temperature")
        return is_real(temperature) and temperature == 0

    def key(self, messages: Sequence[Mapping[str, Any]], options: Mapping[str, Any]) -> str | None:
        """The entry name (64 hex digits) of a call, or None when the call is not cached."""
        data = self._key_data(messages, options)
        return None if data is None else hashlib.sha256(_canonical(data).encode("utf-8")).hexdigest()

    def _key_data(self, messages: Sequence[Mapping[str, Any]], options: Mapping[str, Any]) -> dict[str, Any] | None:
        if not self.cacheable(options):
            return None
        kept = {k: v for k, v in options.items()
                if k != "model" and k not in UNKEYED_OPTIONS and not _SECRET.search(k) and v is not None}
        try:
            return {"model": _plain(options.get("model")), "messages": _plain(list(messages)),
                    "options": _plain(kept)}
        except TypeError:
            return None

    def _file(self, name: str) -> Path:
        if not _NAME.fullmatch(name):  # only a sha256 hex digest ever names a file
            raise InvalidArgument(f"CallCache: {name!r:.80} is not an entry name (64 hex digits)")
        return self.path / f"{name}.json"

    # ----------------------------------------------------------------- get / put

    def get(self, messages: Sequence[Mapping[str, Any]], options: Mapping[str, Any]) -> Completion | None:
        """The stored reply of this call, or None (a miss, a damaged entry, or a call not cached)."""
        data = self._key_data(messages, options)
        if data is None:
            self._count("skipped")
            return None
        canonical = _canonical(data)
        path = self._file(hashlib.sha256(canonical.encode("utf-8")).hexdigest())
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self._count("misses")
            return None
        except (OSError, UnicodeError) as exc:
            log.debug("CallCache: cannot read %s (%s): a miss", path, exc)
            raw = None
        completion = None if raw is None else self._read(raw, canonical)
        if completion is None:
            log.debug("CallCache: entry %s is damaged or holds another call: a miss", path.name)
            with self._lock:
                self.misses += 1
                self.damaged += 1
            return None
        spent = completion.usage.total_tokens if completion.usage is not None else 0
        with self._lock:
            self.hits += 1
            self.saved_tokens += spent
        return completion

    @staticmethod
    def _read(raw: str, canonical: str) -> Completion | None:
        try:
            entry = json.loads(raw)
            if entry.get("format") != FORMAT or _canonical(entry["key"]) != canonical:
                return None
            reply = entry["completion"]
            text, finish, calls, usage = reply["text"], reply.get("finish_reason"), reply.get("tool_calls", []), \
                reply.get("usage")
            if not isinstance(text, str) or not (finish is None or isinstance(finish, str)) or not isinstance(
                    calls, list):
                return None
            meter = None if usage is None else Usage(
                usage["prompt_tokens"], usage["completion_tokens"], usage.get("cached_tokens", 0),
                usage.get("calls", 1), cache_write_tokens=usage.get("cache_write_tokens", 0))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None
        return Completion(text, meter, finish, tuple(calls))

    def put(self, messages: Sequence[Mapping[str, Any]], options: Mapping[str, Any], completion: Completion) -> bool:
        """Store ``completion`` as the reply of this call (atomically); False when it is not kept.

        Nothing is stored for a call that is not cached, nor for a reply whose tool calls
        are not plain JSON data. A write that fails is logged and counted, never raised.
        """
        data = self._key_data(messages, options)
        if data is None:
            return False
        usage = completion.usage.snapshot() if isinstance(completion.usage, Usage) else None
        if usage is not None:
            usage.pop("total_tokens", None)
        try:
            reply = {"text": completion.text, "finish_reason": completion.finish_reason,
                     "tool_calls": _plain(list(completion.tool_calls or ())), "usage": usage}
            body = json.dumps({"format": FORMAT, "key": data, "completion": reply}, ensure_ascii=False,
                              allow_nan=False, sort_keys=True, indent=1)
        except (TypeError, ValueError):
            self._count("skipped")
            return False
        path = self._file(hashlib.sha256(_canonical(data).encode("utf-8")).hexdigest())
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.path, prefix=f".{path.stem[:16]}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(body)
                os.replace(temp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
                raise
        except OSError as exc:
            with self._lock:
                self.write_errors += 1
                first = self.write_errors == 1
            if first:
                log.warning("CallCache: cannot write to %s (%s); calls are made but not kept", self.path, exc)
            return False
        self._count("stores")
        return True

    def clear(self) -> int:
        """Delete every entry (the folder stays); returns how many were deleted."""
        removed = 0
        if not self.path.is_dir():
            return 0
        for entry in self.path.iterdir():
            if entry.suffix == ".json" and _NAME.fullmatch(entry.stem):
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                    removed += 1
        return removed

    def __len__(self) -> int:
        """The entries on disk now."""
        if not self.path.is_dir():
            return 0
        return sum(1 for e in self.path.iterdir() if e.suffix == ".json" and _NAME.fullmatch(e.stem))


def as_call_cache(value: Any) -> Any:
    """A cache from what a user gave: a `CallCache` as it is, a folder path as ``CallCache(path)``, None as None.

    An object of your own with ``get(messages, options)`` and ``put(messages, options,
    completion)`` is used as it is (its counters are then yours to read).

    Raises:
        InvalidArgumentType: anything else.
    """
    if value is None or isinstance(value, CallCache):
        return value
    if isinstance(value, (str, os.PathLike)):
        return CallCache(value)
    if callable(getattr(value, "get", None)) and callable(getattr(value, "put", None)):
        return value
    raise InvalidArgumentType(
        f"call_cache={value!r:.80}: pass an agentdescent.CallCache, a folder path, or None"
    )


_LOCAL = threading.local()


@contextlib.contextmanager
def call_cache_scope(cache: Any) -> Iterator[None]:
    """Let every `LLMAgent` call made *in this thread* in the block use ``cache``.

    The engines open it around each of a run's calls with the run's ``call_cache``; an
    agent with a cache of its own (``LLMAgent(call_cache=...)``) uses its own instead.
    ``cache=None`` changes nothing (the cache already in force, if any, stays), so a
    run without a cache can open the scope unconditionally.
    """
    previous = getattr(_LOCAL, "cache", None)
    if cache is not None:
        _LOCAL.cache = cache
    try:
        yield
    finally:
        _LOCAL.cache = previous


def active_call_cache() -> Any:
    """The cache `call_cache_scope` set in this thread, or None."""
    return getattr(_LOCAL, "cache", None)


class InCallCache:
    """``fn`` run inside `call_cache_scope` of ``cache``: a call that travels with the run's cache.

    What the engine submits to another executor (a process pool, a Dask worker) in place
    of a call's callable, so the call uses the run's cache where it lands. It pickles when
    ``fn`` does; the cache travels as a copy (its folder and its counts), so the hits made
    there are counted in that process only, not in the driver's
    ``result.counters["cache_hits"]`` (they still cost the run no tokens).
    """

    def __init__(self, fn: Any, cache: Any) -> None:
        self.fn = fn
        self.cache = cache

    def __call__(self, *args: Any) -> Any:
        with call_cache_scope(self.cache):
            return self.fn(*args)

    def __repr__(self) -> str:
        return f"InCallCache({self.fn!r}, {self.cache!r})"
