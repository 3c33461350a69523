"""Data: rows from the Hugging Face datasets-server and ModelScope, with an on-disk cache; BIG-bench task files.

Owns the dataloaders (`huggingface`, `modelscope`, over `fetch`, `cache` and `hotpotqa`) and
the BIG-bench JSON task reader (`bigbench`),
gathered in `loader` (also importable as ``agentdescent.dataloader``, SPEC §10). Imports only
the ground floor (the HTTP helper, the clock, the failure rule); it must not import the
engine, the merge or the command line.
"""

from .loader import (
    DEFAULT_HF_ENDPOINT,
    DEFAULT_MODELSCOPE_ENDPOINT,
    DataLoadError,
    bigbench_tasks,
    cache_root,
    hf_rows,
    hf_rows_modelscope,
    normalize_hotpotqa_row,
)

__all__ = [
    "bigbench_tasks",
    "cache_root",
    "DataLoadError",
    "DEFAULT_HF_ENDPOINT",
    "DEFAULT_MODELSCOPE_ENDPOINT",
    "hf_rows",
    "hf_rows_modelscope",
    "normalize_hotpotqa_row",
]
