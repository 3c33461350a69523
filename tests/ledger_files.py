"""Editing a closed SQLite ledger file behind agentdescent's back (the damage tests share it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def damage(path: Path, *statements: tuple[str, tuple]) -> bytes:
    """Run ``statements`` on the closed ledger file ``path``; return its bytes afterwards."""
    raw = sqlite3.connect(path)
    try:
        for sql, params in statements:
            raw.execute(sql, params)
        raw.commit()
    finally:
        raw.close()
    return path.read_bytes()
