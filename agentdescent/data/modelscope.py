"""Rows of one raw JSON-array or JSONL file of a ModelScope dataset repository.

This module owns `hf_rows_modelscope` and `DEFAULT_MODELSCOPE_ENDPOINT`, and the reading of
the file it downloads: a JSON array or JSONL body into objects, ModelScope's error
envelope (a 200 that is not a file) refused. The request is `agentdescent.data.fetch`'s,
the cache `agentdescent.data.cache`'s, the row shape `agentdescent.data.hotpotqa`'s.

It must not be imported by the engines, must not read the environment at import time,
and must not write anything outside the cache root.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import quote, urlencode

from ..clock import Clock, as_clock
from ..errors import DataLoadError, InvalidArgument
from .cache import _cache_path, _read_cache, _write_cache
from .fetch import (
    _check_limit,
    _check_name,
    _check_timeout,
    _client,
    _get,
    _resolve_endpoint,
    _snippet,
)
from .hotpotqa import normalize_hotpotqa_row

__all__ = ["DEFAULT_MODELSCOPE_ENDPOINT", "hf_rows_modelscope"]

logger = logging.getLogger("agentdescent.dataloader")

DEFAULT_MODELSCOPE_ENDPOINT = "https://www.modelscope.cn"
"""The public ModelScope site, used when neither ``endpoint=`` nor the
``AGENTDESCENT_MODELSCOPE_ENDPOINT`` environment variable is set."""

_MODELSCOPE_ENV = "AGENTDESCENT_MODELSCOPE_ENDPOINT"


def hf_rows_modelscope(
    dataset: str,
    file: str,
    *,
    revision: str = "master",
    limit: int | None = None,
    cache: bool = True,
    timeout: float = 60.0,
    endpoint: str | None = None,
    clock: Clock | None = None,
) -> list[dict[str, Any]]:
    """The rows of one raw JSON-array or JSONL file of a ModelScope dataset repository.

    ModelScope is the mirror that is reachable where the Hugging Face Hub is not. It has
    no paged rows API, so the whole file comes from the repo file API
    (``{endpoint}/api/v1/datasets/{dataset}/repo?Revision=...&FilePath=...``) and is
    cut to ``limit``; HotpotQA rows are normalised to the datasets-server shape, so code
    written against `hf_rows` works unchanged.

    Args:
        dataset: the ModelScope dataset id, ``"owner/name"``.
        file: the path of the file inside the repository, for example
            ``"hotpot_dev_distractor_v1.json"``.
        revision: the branch, tag or commit.
        limit: how many rows at most (at least 1), or ``None`` for all of them.
        cache: read from and write to the cache; ``False`` does neither.
        timeout: seconds per HTTP request (connect, read, write, pool), > 0.
        endpoint: the ModelScope base URL; ``None`` reads
            ``AGENTDESCENT_MODELSCOPE_ENDPOINT``, else `DEFAULT_MODELSCOPE_ENDPOINT`.
        clock: the clock retry waits go through (None: real time).

    Returns:
        The file's objects in file order, HotpotQA rows normalised by
        `normalize_hotpotqa_row`.

    Raises:
        InvalidArgument: (a ``ValueError``) an argument is empty or out of range, or
            ``dataset`` has an empty, ``.`` or ``..`` path segment; the message names it.
        DataLoadError: the server failed after retries, or the file is neither a JSON
            array of objects nor JSONL; the message names the URL and status.
        ImportError: ``httpx`` is not installed and the rows are not cached.
    """
    _check_name("dataset", dataset, "hf_rows_modelscope")
    if any(part in ("", ".", "..") for part in dataset.split("/")):
        # The id goes into the URL path, where clients resolve dot segments: "../x" would
        # quietly request another API route instead of a dataset.
        raise InvalidArgument(
            f"hf_rows_modelscope(dataset={dataset!r}): a ModelScope dataset id is "
            "'owner/name'; empty, '.' and '..' path segments are not allowed"
        )
    _check_name("file", file, "hf_rows_modelscope")
    _check_name("revision", revision, "hf_rows_modelscope")
    _check_limit(limit, "hf_rows_modelscope", allow_none=True)
    _check_timeout(timeout, "hf_rows_modelscope")
    base = _resolve_endpoint(
        endpoint, _MODELSCOPE_ENV, DEFAULT_MODELSCOPE_ENDPOINT, "hf_rows_modelscope"
    )
    waits = as_clock(clock)

    key = {
        "source": "modelscope",
        "endpoint": base,
        "dataset": dataset,
        "revision": revision,
        "file": file,
        "limit": limit,
    }
    path = _cache_path(key, f"{dataset}-{revision}-{file}") if cache else None
    if path is not None:
        cached = _read_cache(path, key)
        if cached is not None:
            return cached

    url = f"{base}/api/v1/datasets/{quote(dataset, safe='/')}/repo?" + urlencode(
        {"Revision": revision, "FilePath": file}
    )
    hint = (
        f"check that dataset={dataset!r} has file={file!r} at revision={revision!r} "
        f"(browse it on {base}/datasets/{dataset}/files); set endpoint= or "
        f"{_MODELSCOPE_ENV} to use a mirror"
    )
    with _client(timeout) as client:
        response = _get(client, url, hint, waits)
        rows = _parse_json_records(response.content, url, response.status_code)
    if limit is not None:
        rows = rows[:limit]
    rows = [normalize_hotpotqa_row(r) for r in rows]
    logger.info("fetched %d rows of %s:%s@%s from %s", len(rows), dataset, file, revision, base)
    if path is not None:
        _write_cache(path, key, rows)
    return rows


def _parse_json_records(content: bytes, url: str, status: int) -> list[dict[str, Any]]:
    """Objects from a JSON array or a JSONL body; anything else is a DataLoadError."""
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataLoadError(
            f"GET {url} returned HTTP {status} but the file is not UTF-8 ({exc}); "
            "only JSON and JSONL files are supported",
            url=url,
        ) from exc
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(stripped)
        except ValueError as exc:
            raise DataLoadError(
                f"GET {url} returned HTTP {status} but the JSON array does not parse: {exc}",
                url=url,
            ) from exc
    else:
        rows = []
        # split on "\n" only: str.splitlines() also splits at U+2028, U+2029 and U+0085,
        # which a JSON string may hold raw
        for number, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise DataLoadError(
                    f"GET {url} returned HTTP {status} but line {number} is not JSON ({exc}): "
                    f"{_snippet(line, 80)}; only JSON-array and JSONL files are supported",
                    url=url,
                ) from exc
    bad = next((i for i, r in enumerate(rows) if not isinstance(r, dict)), None)
    if bad is not None:
        raise DataLoadError(
            f"GET {url} returned HTTP {status} but record {bad} is a "
            f"{type(rows[bad]).__name__}, not a JSON object; expected one object per row",
            url=url,
        )
    if len(rows) == 1 and rows[0].get("Success") is False and "Code" in rows[0]:
        # ModelScope reports some errors as a 200 with an API envelope instead of a file.
        raise DataLoadError(
            f"GET {url} returned an error envelope instead of a file: "
            f"Code={rows[0].get('Code')!r} Message={rows[0].get('Message')!r}",
            url=url,
            status=status,
        )
    return rows
