"""Rows of real datasets over HTTP: the Hugging Face datasets-server and ModelScope, with a cache.

This module owns two loaders (`hf_rows`, `hf_rows_modelscope`), the HotpotQA
row normalisation that makes both return the same shape, and the on-disk JSON cache they
share. It talks HTTP itself through ``httpx`` (imported lazily, so the package imports
without it) instead of depending on the ``datasets`` library, which retries for a long
time and then fails when the machine is offline.

It must not be imported by the engines (evolution, aggregation and allocation never do
I/O on a dataset), must not read the environment at import time (endpoints and the cache
root are read on every call, so a test or a notebook can change them), must not write
anything outside the cache root, and must never unpickle: the cache holds JSON only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from .._http import parse_retry_after
from .._version import VERSION
from ..clock import Clock, as_clock
from ..errors import DataLoadError, InvalidArgument
from ..failures import backoff_delay
from ..types import number_spans, stable_hash

__all__ = [
    "DEFAULT_HF_ENDPOINT",
    "DEFAULT_MODELSCOPE_ENDPOINT",
    "DataLoadError",
    "cache_root",
    "hf_rows",
    "hf_rows_modelscope",
    "normalize_hotpotqa_row",
]

logger = logging.getLogger("agentdescent.dataloader")

DEFAULT_HF_ENDPOINT = "https://datasets-server.huggingface.co"
"""The public Hugging Face datasets-server, used when neither ``endpoint=`` nor the
``AGENTDESCENT_HF_ENDPOINT`` environment variable is set."""

DEFAULT_MODELSCOPE_ENDPOINT = "https://www.modelscope.cn"
"""The public ModelScope site, used when neither ``endpoint=`` nor the
``AGENTDESCENT_MODELSCOPE_ENDPOINT`` environment variable is set."""

_HF_ENV = "AGENTDESCENT_HF_ENDPOINT"
_MODELSCOPE_ENV = "AGENTDESCENT_MODELSCOPE_ENDPOINT"
_CACHE_ENV = "AGENTDESCENT_CACHE"
_DEFAULT_CACHE = "~/.cache/agentdescent"

_PAGE = 100  # the datasets-server refuses length > 100
_MAX_ATTEMPTS = 4  # one try plus three retries on 429 / 5xx / connection errors
_BACKOFF_BASE = 0.5  # seconds; doubles per retry
_BACKOFF_CAP = 8.0
_RETRY_AFTER_CAP = 60.0  # a server asking for longer than this is treated as down
_CACHE_FORMAT = 1
_INSTALL_HINT = 'pip install -e ".[hf]" from a checkout of this project'



# --------------------------------------------------------------------------- public


def cache_root() -> Path:
    """The folder the loaders cache into, read from the environment on every call.

    Reading at call time (not import time) lets a test or a notebook point the cache
    somewhere else after ``import agentdescent``.

    Returns:
        ``$AGENTDESCENT_CACHE`` if set and non-empty, else ``~/.cache/agentdescent``,
        with ``~`` expanded. The folder is not created here.
    """
    return Path(os.environ.get(_CACHE_ENV) or _DEFAULT_CACHE).expanduser()


def hf_rows(
    dataset: str,
    split: str,
    *,
    config: str = "default",
    limit: int = 100,
    cache: bool = True,
    timeout: float = 60.0,
    endpoint: str | None = None,
    clock: Clock | None = None,
) -> list[dict[str, Any]]:
    """The first ``limit`` rows of a split from the Hugging Face datasets-server ``/rows`` API.

    The datasets-server serves at most 100 rows per request, so the rows are fetched in
    pages of 100 (``offset=0, 100, ...``); fetching stops at ``limit``, when
    ``num_rows_total`` is reached, or on a short page. The result is cached as JSON so
    repeat runs (and A/B pairs) see identical rows without touching the network.

    A mirror that ignores ``offset`` answers every page with the first rows again;
    that is detected and refused rather than returned as a list of silent duplicates.
    A page repeats when it holds a ``row_idx`` already returned with the same row, or,
    for a server that sends no ``row_idx``, when it equals the page before it.

    Args:
        dataset: the Hub dataset id, for example ``"hotpotqa/hotpot_qa"``.
        split: the split name, for example ``"validation"``.
        config: the dataset configuration (subset), for example ``"distractor"``.
        limit: how many rows at most; at least 1.
        cache: read from and write to the cache; ``False`` does neither.
        timeout: seconds per HTTP request (connect, read, write, pool), > 0.
        endpoint: the datasets-server base URL; ``None`` reads
            ``AGENTDESCENT_HF_ENDPOINT``, else `DEFAULT_HF_ENDPOINT`.
        clock: the clock retry waits go through (None: real time;
            `agentdescent.testing.ManualClock` in tests).

    Returns:
        The ``row`` dicts in dataset order, HotpotQA rows normalised by
        `normalize_hotpotqa_row` (a no-op on the datasets-server's own shape).

    Raises:
        InvalidArgument: (a ``ValueError``) an argument is empty or out of range; the
            message names it.
        DataLoadError: the server failed after retries, answered with a body that is
            not a datasets-server ``/rows`` page, or repeated rows it had already
            returned (it does not honour ``offset``); the message names the URL and status.
        ImportError: ``httpx`` is not installed and the rows are not cached.
    """
    _check_name("dataset", dataset, "hf_rows")
    _check_name("split", split, "hf_rows")
    _check_name("config", config, "hf_rows")
    _check_limit(limit, "hf_rows", allow_none=False)
    _check_timeout(timeout, "hf_rows")
    base = _resolve_endpoint(endpoint, _HF_ENV, DEFAULT_HF_ENDPOINT, "hf_rows")
    waits = as_clock(clock)

    key = {
        "source": "hf",
        "endpoint": base,
        "dataset": dataset,
        "config": config,
        "split": split,
        "limit": limit,
    }
    path = _cache_path(key, f"{dataset}-{config}-{split}") if cache else None
    if path is not None:
        cached = _read_cache(path, key)
        if cached is not None:
            return cached

    hint = (
        f"check that dataset={dataset!r}, config={config!r} and split={split!r} exist "
        f"({base}/splits?{urlencode({'dataset': dataset})} lists them) and that the dataset is "
        f"public; set endpoint= or {_HF_ENV} to use a mirror"
    )
    pages = _Pages()
    with _client(timeout) as client:
        offset = 0
        while len(pages.rows) < limit:
            length = min(_PAGE, limit - len(pages.rows))
            query = urlencode(
                {
                    "dataset": dataset,
                    "config": config,
                    "split": split,
                    "offset": offset,
                    "length": length,
                }
            )
            url = f"{base}/rows?{query}"
            response = _get(client, url, hint, waits)
            page_rows, total, indices = _rows_page(response, url)
            pages.add(url, response.status_code, offset, page_rows, indices)
            offset += len(page_rows)
            if len(page_rows) < length or (total is not None and offset >= total):
                break
    rows = [normalize_hotpotqa_row(r) for r in pages.rows[:limit]]
    logger.info("fetched %d rows of %s/%s/%s from %s", len(rows), dataset, config, split, base)
    if path is not None:
        _write_cache(path, key, rows)
    return rows


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


def normalize_hotpotqa_row(row: dict[str, Any]) -> dict[str, Any]:
    """A HotpotQA row in the datasets-server shape, whichever source it came from.

    The original HotpotQA files (and so ModelScope) store ``context`` as
    ``[[title, [sentence, ...]], ...]`` and ``supporting_facts`` as
    ``[[title, sentence_index], ...]``; the Hugging Face datasets-server stores them
    column-wise as ``{"title": [...], "sentences": [[...], ...]}`` and
    ``{"title": [...], "sent_id": [...]}``. Normalising to one shape lets rewards and
    prompts be written once. Only fields in exactly the list-of-pairs shape change; any
    other row (another dataset, or one already normalised) comes back unchanged.

    Args:
        row: one dataset row.

    Returns:
        A new dict when something changed, else ``row`` itself. The input is never mutated.
    """
    if not isinstance(row, dict):
        return row
    out = row
    context = row.get("context")
    if _is_pairs(context, lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v)):
        out = dict(out)
        out["context"] = {
            "title": [title for title, _ in context],
            "sentences": [list(sentences) for _, sentences in context],
        }
    facts = row.get("supporting_facts")
    if _is_pairs(facts, lambda v: isinstance(v, int) and not isinstance(v, bool)):
        out = dict(out) if out is row else out
        out["supporting_facts"] = {
            "title": [title for title, _ in facts],
            "sent_id": [index for _, index in facts],
        }
    return out


# --------------------------------------------------------------------------- arguments


def _check_name(name: str, value: object, func: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{func}({name}={value!r}): {name} must be a non-empty string")


def _check_limit(limit: object, func: str, *, allow_none: bool) -> None:
    if limit is None and allow_none:
        return
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        also = " or None for every row" if allow_none else ""
        raise InvalidArgument(f"{func}(limit={limit!r}): limit must be an integer >= 1{also}")


def _check_timeout(timeout: object, func: str) -> None:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidArgument(
            f"{func}(timeout={timeout!r}): timeout must be a finite number of seconds > 0"
        )


def _resolve_endpoint(endpoint: str | None, env: str, default: str, func: str) -> str:
    source = "endpoint"
    if endpoint is None:
        endpoint = os.environ.get(env) or default
        source = env if os.environ.get(env) else "the default endpoint"
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        raise InvalidArgument(
            f"{func}: {source}={endpoint!r} is not an http(s) URL; pass endpoint="
            f"'https://host' or set {env}"
        )
    return endpoint.rstrip("/")


# --------------------------------------------------------------------------- HTTP


def _client(timeout: float) -> Any:
    try:
        import httpx
    except ImportError as exc:
        raise ImportError(
            f"agentdescent.data.loader needs httpx to download datasets; run "
            f"{_INSTALL_HINT} (rows already in the cache are served without it)"
        ) from exc
    return httpx.Client(
        timeout=httpx.Timeout(timeout),
        follow_redirects=True,  # ModelScope redirects file downloads to object storage
        headers={"User-Agent": f"agentdescent/{VERSION} (+dataloader)"},
    )


def _get(client: Any, url: str, hint: str, clock: Clock) -> Any:
    """GET ``url``, retrying 429 / 5xx / connection errors with backoff; errors name URL + status."""
    import httpx

    retryable_exc = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
    for attempt in range(1, _MAX_ATTEMPTS + 1):
        last = attempt == _MAX_ATTEMPTS
        tries = f"{attempt} attempt{'s' if attempt > 1 else ''}"
        try:
            logger.debug("GET %s (attempt %d)", url, attempt)
            response = client.get(url)
        except retryable_exc as exc:
            if last:
                raise DataLoadError(
                    f"GET {url} failed with no HTTP status after {tries}: "
                    f"{type(exc).__name__}: {exc}; check the network and the endpoint, "
                    f"raise timeout= if the server is slow, or {hint}",
                    url=url,
                ) from exc
            delay = _backoff(attempt)
            logger.warning(
                "GET %s: %s; retry %d/%d in %.1fs",
                url,
                type(exc).__name__,
                attempt,
                _MAX_ATTEMPTS - 1,
                delay,
            )
            clock.sleep(delay)
            continue
        except httpx.HTTPError as exc:  # not transient: bad URL, unsupported protocol, ...
            raise DataLoadError(
                f"GET {url} failed with no HTTP status: {type(exc).__name__}: {exc}; {hint}",
                url=url,
            ) from exc

        status = response.status_code
        if (status == 429 or status >= 500) and not last:
            delay = _retry_after(response)
            if delay is None:
                delay = _backoff(attempt)
            logger.warning(
                "GET %s: HTTP %d; retry %d/%d in %.1fs",
                url,
                status,
                attempt,
                _MAX_ATTEMPTS - 1,
                delay,
            )
            clock.sleep(delay)
            continue
        if status >= 400:
            advice = (
                "the server is rate limiting or down; retry later (cached rows need no request)"
                if status == 429 or status >= 500
                else hint
            )
            raise DataLoadError(
                f"GET {url} failed with HTTP {status} {response.reason_phrase} after {tries}: "
                f"{_snippet(response.text)}; {advice}",
                url=url,
                status=status,
            )
        return response
    raise AssertionError("unreachable")  # the loop returns or raises


def _backoff(attempt: int) -> float:
    return backoff_delay(attempt, initial=_BACKOFF_BASE, cap=_BACKOFF_CAP)


def _retry_after(response: Any) -> float | None:
    seconds = parse_retry_after(response.headers)
    return None if seconds is None else min(_RETRY_AFTER_CAP, seconds)


def _snippet(text: str, size: int = 200) -> str:
    text = " ".join(text.split())
    if not text:
        return "(empty body)"
    return repr(text if len(text) <= size else text[:size] + "...")


# --------------------------------------------------------------------------- parsing


def _rows_page(
    response: Any, url: str
) -> tuple[list[dict[str, Any]], int | None, list[int | None]]:
    """The ``row`` dicts, ``num_rows_total`` and ``row_idx`` values of one ``/rows`` page.

    ``row_idx`` is None for an item without an integer one (some mirrors leave it out).
    """
    try:
        payload = response.json()
    except ValueError as exc:
        raise DataLoadError(
            f"GET {url} returned HTTP {response.status_code} but the body is not JSON "
            f"({exc}): {_snippet(response.text)}; is the endpoint a datasets-server?",
            url=url,
        ) from exc
    items = payload.get("rows") if isinstance(payload, dict) else None
    if not isinstance(items, list) or not all(
        isinstance(item, dict) and isinstance(item.get("row"), dict) for item in items
    ):
        raise DataLoadError(
            f"GET {url} returned HTTP {response.status_code} but not a datasets-server /rows "
            f"page (expected {{'rows': [{{'row': {{...}}}}, ...]}}): {_snippet(response.text)}",
            url=url,
        )
    total = payload.get("num_rows_total")
    total = total if isinstance(total, int) and not isinstance(total, bool) else None
    indices = [
        item.get("row_idx")
        if isinstance(item.get("row_idx"), int) and not isinstance(item.get("row_idx"), bool)
        else None
        for item in items
    ]
    return [item["row"] for item in items], total, indices


class _Pages:
    """The rows of one `hf_rows` call so far, refusing a page that repeats them.

    A repeat is a ``row_idx`` seen before *with the same row* (so a mirror that numbers
    rows per page but does page correctly is not refused) or, when a page carries no
    ``row_idx`` at all, a page equal to the one before it. Either means the endpoint
    ignored ``offset``.
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        # row_idx -> (offset of the page that returned it, its position in ``rows``)
        self._seen: dict[int, tuple[int, int]] = {}
        self._previous: tuple[int, list[dict[str, Any]]] | None = None  # (offset, rows)

    def add(
        self,
        url: str,
        status: int,
        offset: int,
        page: list[dict[str, Any]],
        indices: list[int | None],
    ) -> None:
        """Append ``page``, the answer to ``url`` at ``offset``; raise if it repeats rows.

        Raises:
            DataLoadError: the page repeats rows already returned; it names the URL,
                the offset and the fix.
        """
        repeats: list[int] = []
        first_offset = offset
        for row_idx, row in zip(indices, page):
            earlier = self._seen.get(row_idx) if row_idx is not None else None
            if earlier is not None and self.rows[earlier[1]] == row:
                if not repeats:
                    first_offset = earlier[0]
                repeats.append(row_idx)
            elif row_idx is not None and earlier is None:
                self._seen[row_idx] = (offset, len(self.rows))
            self.rows.append(row)
        previous, self._previous = self._previous, (offset, page)
        if repeats:
            what = f"row_idx {number_spans(repeats, most=5)} (first returned at offset={first_offset})"
        elif (
            page
            and previous is not None
            and previous[1] == page
            and all(row_idx is None for row_idx in indices)
        ):
            what = f"the same {len(page)} rows as the page at offset={previous[0]}"
        else:
            return
        raise DataLoadError(
            f"GET {url} asked for offset={offset} but returned rows already returned: {what}. "
            "The endpoint does not honour offset, so paging on would silently duplicate rows; "
            f"point endpoint= or {_HF_ENV} at a datasets-server that pages by offset (the "
            f"public one is {DEFAULT_HF_ENDPOINT}), or ask for limit<={_PAGE} rows, which "
            "takes a single request at offset=0",
            url=url,
            status=status,
        )


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


def _is_pairs(value: object, second_ok: Callable[[object], bool]) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(pair, (list, tuple))
            and len(pair) == 2
            and isinstance(pair[0], str)
            and second_ok(pair[1])
            for pair in value
        )
    )


# --------------------------------------------------------------------------- cache


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
