"""Rows of real datasets over HTTP: the Hugging Face datasets-server and ModelScope, with a cache.

This module is the dataloaders' public home (SPEC §10; also importable as
``agentdescent.dataloader``): it gathers two loaders, `hf_rows`
(`agentdescent.data.huggingface`) and `hf_rows_modelscope` (`agentdescent.data.modelscope`),
the reader of BIG-bench JSON task files on the local disk, `bigbench_tasks`
(`agentdescent.data.bigbench`),
the HotpotQA row normalisation that makes both return the same shape
(`agentdescent.data.hotpotqa`), the on-disk JSON cache they share (`agentdescent.data.cache`)
and their checked arguments and HTTP request (`agentdescent.data.fetch`). The loaders talk
HTTP themselves through ``httpx`` (imported lazily, so the package imports without it)
instead of depending on the ``datasets`` library, which retries for a long time and then
fails when the machine is offline.

It must not hold state or logic of its own. The loaders must not be imported by the engines
(evolution, aggregation and allocation never do I/O on a dataset), must not read the
environment at import time (endpoints and the cache root are read on every call, so a test
or a notebook can change them), must not write anything outside the cache root, and must
never unpickle: the cache holds JSON only.
"""

from __future__ import annotations

from ..errors import DataLoadError
from .bigbench import bigbench_tasks
from .cache import _CACHE_ENV as _CACHE_ENV
from .cache import _CACHE_FORMAT as _CACHE_FORMAT
from .cache import _DEFAULT_CACHE as _DEFAULT_CACHE
from .cache import _cache_path as _cache_path
from .cache import _read_cache as _read_cache
from .cache import _write_cache as _write_cache
from .cache import cache_root
from .cache import logger as logger
from .fetch import _BACKOFF_BASE as _BACKOFF_BASE
from .fetch import _BACKOFF_CAP as _BACKOFF_CAP
from .fetch import _INSTALL_HINT as _INSTALL_HINT
from .fetch import _MAX_ATTEMPTS as _MAX_ATTEMPTS
from .fetch import _RETRY_AFTER_CAP as _RETRY_AFTER_CAP
from .fetch import _backoff as _backoff
from .fetch import _check_limit as _check_limit
from .fetch import _check_name as _check_name
from .fetch import _check_timeout as _check_timeout
from .fetch import _client as _client
from .fetch import _get as _get
from .fetch import _resolve_endpoint as _resolve_endpoint
from .fetch import _retry_after as _retry_after
from .fetch import _snippet as _snippet
from .hotpotqa import _is_pairs as _is_pairs
from .hotpotqa import normalize_hotpotqa_row
from .huggingface import _HF_ENV as _HF_ENV
from .huggingface import _PAGE as _PAGE
from .huggingface import DEFAULT_HF_ENDPOINT, hf_rows
from .huggingface import _Pages as _Pages
from .huggingface import _rows_page as _rows_page
from .modelscope import _MODELSCOPE_ENV as _MODELSCOPE_ENV
from .modelscope import DEFAULT_MODELSCOPE_ENDPOINT, hf_rows_modelscope
from .modelscope import _parse_json_records as _parse_json_records

__all__ = [
    "DEFAULT_HF_ENDPOINT",
    "DEFAULT_MODELSCOPE_ENDPOINT",
    "DataLoadError",
    "bigbench_tasks",
    "cache_root",
    "hf_rows",
    "hf_rows_modelscope",
    "normalize_hotpotqa_row",
]
