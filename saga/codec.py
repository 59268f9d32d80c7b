"""Values in and out of the database: JSON documents, timestamps, digests."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["as_utc", "digest", "dump_json", "iso", "load_json", "maybe_utc"]


def dump_json(value: Mapping[str, Any]) -> str:
    """Canonical JSON: sorted keys, no spaces, so equal documents give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def load_json(value: object) -> dict[str, Any]:
    """A JSON object column: PostgreSQL hands back a dict, SQLite a string."""
    if value is None:
        return {}
    loaded = json.loads(value) if isinstance(value, str | bytes) else value
    if not isinstance(loaded, dict):
        msg = f"expected a JSON object, got {type(loaded).__name__}"
        raise TypeError(msg)
    return loaded


def digest(value: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``value``: the fingerprint of a request."""
    return hashlib.sha256(dump_json(value).encode()).hexdigest()


def as_utc(value: object) -> datetime:
    """
    A timestamp column as an aware UTC datetime.

    PostgreSQL returns aware datetimes; SQLite stores ISO 8601 text in UTC
    (``2026-11-30T07:08:55.123Z``), written by ``strftime`` in SQL.
    """
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        parsed = datetime.fromisoformat(value)
    else:
        msg = f"expected a timestamp, got {value!r}"
        raise TypeError(msg)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def maybe_utc(value: object) -> datetime | None:
    """Like :func:`as_utc`, passing ``None`` through."""
    return None if value is None else as_utc(value)


def iso(value: datetime | None) -> str | None:
    """An aware datetime as ISO 8601 with a ``Z`` and milliseconds, for JSON output."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
