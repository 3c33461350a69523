"""HTTP details shared by the provider adapters and the dataloader.

This module owns the parsing of a server's "wait before retrying" headers. It holds no
state and does no I/O.
"""

from __future__ import annotations

import email.utils
import math
from datetime import datetime, timezone
from typing import Any

__all__ = ["parse_retry_after"]


def parse_retry_after(headers: Any) -> float | None:
    """Seconds a server asked to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be a number of seconds or an HTTP date. Header lookup goes
    through ``headers.get`` (case-insensitive for httpx-style headers).

    Returns:
        A finite number of seconds >= 0, or None when no usable header is present.
    """
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            seconds = float(ms) / 1000.0
            return max(0.0, seconds) if math.isfinite(seconds) else None
        value = headers.get("retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if value is None or not str(value).strip():
        return None
    value = str(value).strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
