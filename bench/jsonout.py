"""Writing a benchmark's rows as JSON (``--json PATH``), one way for every script in bench/ (not named `_json`: a script's folder comes first on `sys.path`, and that name would hide the standard library's JSON accelerator)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_json(path: Path | None, data: Any) -> None:
    """Write ``data`` to ``path`` as indented JSON, making its folder; nothing when ``path`` is None."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
