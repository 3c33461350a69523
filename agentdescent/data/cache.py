"""The dataloaders' on-disk cache: where it is, and rows kept there as JSON.

This module owns `cache_root` (read from the environment on every call, so a test or a
notebook can move it) and the cache files the loaders share: one path per request (a
readable slug plus a digest of the whole request), read back only when it was written for
that same request, and written atomically.

It must not talk HTTP or know a source's format, must not write anything outside the
cache root, and must never unpickle: the cache holds JSON only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from ..errors import DataLoadError
from ..types import stable_hash

__all__ = ["cache_root"]

logger = logging.getLogger("agentdescent.dataloader")

_CACHE_ENV = "AGENTDESCENT_CACHE"
_DEFAULT_CACHE = "~/.cache/agentdescent"
_CACHE_FORMAT = 1


def cache_root() -> Path:
    """The folder the loaders cache into, read from the environment on every call.

    Reading at call time (not import time) lets a test or a notebook point the cache
    somewhere else after ``import agentdescent``.

    Returns:
        ``$AGENTDESCENT_CACHE`` if set and non-empty, else ``~/.cache/agentdescent``,
        with ``~`` expanded. The folder is not created here.
    """
    return Path(os.environ.get(_CACHE_ENV) or _DEFAULT_CACHE).expanduser()


def _cache_path(key: dict[str, Any], label: str) -> Path:
    """The cache file for ``key``: a readable slug plus a digest of the whole key.

    The slug keeps only ``[A-Za-z0-9_-]`` (no ``/``, no dots), so no dataset or file
    name can climb out of the root; the digest keeps distinct keys apart after the slug
    folded them together; the final containment check guards against a symlinked or
    otherwise surprising root.
    """
    root = cache_root()
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", label).strip("-")[:80] or "data"
    digest = f"{stable_hash(json.dumps(key, sort_keys=True), bits=80):020x}"
    folder = root / "datasets"
    path = folder / f"{key['source']}-{slug}-{digest}.json"
    resolved_root = root.resolve()
    if not path.resolve().is_relative_to(resolved_root):
        raise DataLoadError(
            f"cache path {path} resolves outside the cache root {resolved_root}; point "
            f"{_CACHE_ENV} at a plain folder or pass cache=False"
        )
    return path


def _read_cache(path: Path, key: dict[str, Any]) -> list[dict[str, Any]] | None:
    if not path.is_file():
        return None
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable cache file %s (%s); fetching again", path, exc)
        return None
    if not isinstance(payload, dict):
        payload = {}
    rows = payload.get("rows")
    if (
        payload.get("format") != _CACHE_FORMAT
        or payload.get("key") != key
        or not isinstance(rows, list)
    ):
        logger.warning("ignoring cache file %s written for another request; fetching again", path)
        return None
    logger.info("%d rows from cache %s", len(rows), path)
    return rows


def _write_cache(path: Path, key: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Write atomically: a temp file in the same folder, then ``os.replace``."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"format": _CACHE_FORMAT, "key": key, "rows": rows}, fh, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
        logger.debug("cached %d rows in %s", len(rows), path)
    except (OSError, TypeError, ValueError) as exc:
        warnings.warn(
            f"could not write the dataset cache {path} ({type(exc).__name__}: {exc}); the "
            f"rows are returned but will be fetched again next time; point {_CACHE_ENV} at a "
            "writable folder or pass cache=False",
            RuntimeWarning,
            stacklevel=3,
        )
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
