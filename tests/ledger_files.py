"""Editing a closed SQLite ledger file behind agentdescent's back (the damage tests share it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentdescent.domains.router import RouterDomain


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


def stored_bytes(path: Path, table: str, column: str, where: str, params: tuple) -> bytes:
    """The bytes of ``column`` in the one row of ``table`` that ``where`` selects (read as a blob)."""
    raw = sqlite3.connect(path)
    try:
        row = raw.execute(f"SELECT CAST({column} AS BLOB) FROM {table} WHERE {where}", params).fetchone()
    finally:
        raw.close()
    assert row is not None, f"no row of {table} where {where} {params}"
    return bytes(row[0])


def write_bytes(path: Path, table: str, column: str, where: str, params: tuple, data: bytes) -> None:
    """Store ``data`` as the text of ``column`` in that row, byte for byte (valid UTF-8 or not).

    The file may be open in a ledger meanwhile (WAL): the ledger's next read sees it.
    """
    raw = sqlite3.connect(path)
    try:
        raw.execute("PRAGMA synchronous = OFF")  # a test file: no need to wait for the disk
        raw.execute(f"UPDATE {table} SET {column} = CAST(? AS TEXT) WHERE {where}", (data, *params))
        raw.commit()
    finally:
        raw.close()


def flipped(data: bytes, bit: int) -> bytes:
    """``data`` with bit ``bit`` flipped (bit 0 is the lowest bit of the first byte)."""
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def router(**kwargs):
    """The offline router domain's evolve() arguments (the run that writes the damaged files), with a counter of the rollout calls made."""
    domain = RouterDomain(seed=0, noise=0.25)
    calls = []

    def run(rendered, task):
        calls.append(task.id)
        return domain.run(rendered, task)

    return {**domain.evolve_kwargs(), "run": run, "shuffle": False, **kwargs}, calls
