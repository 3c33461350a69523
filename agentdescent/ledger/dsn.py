"""Database ledgers' connection strings: which values are DSNs, and the same DSN with its password taken out.

A ``postgresql://`` (or ``postgres://``) DSN names a database ledger wherever a ledger file's
path is accepted (`is_dsn`). Its password must never reach a log, a message, a ``repr`` or a
run's ``spec.json``: `redact_dsn` gives the DSN without it, `clean_error` an error's text
without it, `dsn_has_password` tells a run directory to refuse one. It must not connect to
anything.
"""

from __future__ import annotations

import re
import urllib.parse

__all__ = ["clean_error", "dsn_has_password", "is_dsn", "redact_dsn"]


def is_dsn(value: object) -> bool:
    """Whether ``value`` names a database ledger (a ``postgresql://`` or ``postgres://`` DSN), not a file."""
    return isinstance(value, str) and value.lstrip().lower().startswith(("postgresql://", "postgres://"))


def _secret(key: str) -> bool:
    """Whether a connection parameter holds a secret (``password``, ``sslpassword``)."""
    return "password" in key.strip().lower()


_PAIR = re.compile(r"(\w+)\s*=\s*('(?:[^'\\]|\\.)*'|\S*)")


def redact_dsn(dsn: str) -> str:
    """``dsn`` without its password, for messages, ``repr`` and a run's ``spec.json``.

    Both forms are handled: a URI (``postgresql://user:secret@host/db?password=...``) loses
    the password in its user part and every ``*password*`` parameter (``password``,
    ``sslpassword``); a key/value string (``host=h password=secret dbname=d``) loses those
    pairs. A DSN without a secret comes back as given.

    Examples:
        >>> redact_dsn("postgresql://ada:s3cret@db.example:5432/runs")
        'postgresql://ada@db.example:5432/runs'
        >>> redact_dsn("host=db.example password=s3cret dbname=runs")
        'host=db.example dbname=runs'
    """
    if not dsn_has_password(dsn):
        return dsn.strip()
    if is_dsn(dsn):
        parts = urllib.parse.urlsplit(dsn.strip())
        netloc = parts.netloc
        if "@" in netloc:
            user, host = netloc.rsplit("@", 1)
            netloc = f"{user.split(':', 1)[0]}@{host}"
        query = urllib.parse.urlencode(
            [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if not _secret(k)],
            safe="/")
        return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    kept = [m.group(0) for m in _PAIR.finditer(dsn) if not _secret(m.group(1))]
    return " ".join(kept)


def dsn_has_password(dsn: str) -> bool:
    """Whether ``dsn`` carries a password or another secret (which a run directory must never store)."""
    if is_dsn(dsn):
        parts = urllib.parse.urlsplit(dsn.strip())
        userinfo = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
        return ":" in userinfo or any(_secret(k) for k, _ in urllib.parse.parse_qsl(parts.query,
                                                                                    keep_blank_values=True))
    return any(_secret(m.group(1)) for m in _PAIR.finditer(dsn))


def clean_error(exc: BaseException, dsn: str) -> str:
    """``exc``'s text on one line, with the secrets of ``dsn`` (if it has any) replaced by ``***``."""
    text = " ".join(str(exc).split())
    for secret in _passwords(dsn):
        text = text.replace(secret, "***")
    return text


def _passwords(dsn: str) -> list[str]:
    found = []
    if is_dsn(dsn):
        parts = urllib.parse.urlsplit(dsn.strip())
        if parts.password:
            found += [parts.password, urllib.parse.quote(parts.password), urllib.parse.unquote(parts.password)]
        found += [v for k, v in urllib.parse.parse_qsl(parts.query) if _secret(k) and v]
    else:
        found += [m.group(2).strip("'") for m in _PAIR.finditer(dsn) if _secret(m.group(1))]
    return sorted({f for f in found if f}, key=len, reverse=True)
