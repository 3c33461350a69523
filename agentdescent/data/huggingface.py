"""Rows of a split from the Hugging Face datasets-server ``/rows`` API, page by page.

This module owns `hf_rows` and `DEFAULT_HF_ENDPOINT`, and the reading of the server's
answers: one ``/rows`` page checked for its shape, and the pages of one call refused when
they repeat rows already returned (a mirror that ignores ``offset``). The request is
`agentdescent.data.fetch`'s, the cache `agentdescent.data.cache`'s, the row shape
`agentdescent.data.hotpotqa`'s.

It must not be imported by the engines (evolution, aggregation and allocation never do
I/O on a dataset), must not read the environment at import time, and must not write
anything outside the cache root.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlencode

from ..clock import Clock, as_clock
from ..errors import DataLoadError
from ..types import number_spans
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

__all__ = ["DEFAULT_HF_ENDPOINT", "hf_rows"]

logger = logging.getLogger("agentdescent.dataloader")

DEFAULT_HF_ENDPOINT = "https://datasets-server.huggingface.co"
"""The public Hugging Face datasets-server, used when neither ``endpoint=`` nor the
``AGENTDESCENT_HF_ENDPOINT`` environment variable is set."""

_HF_ENV = "AGENTDESCENT_HF_ENDPOINT"

_PAGE = 100  # the datasets-server refuses length > 100


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
