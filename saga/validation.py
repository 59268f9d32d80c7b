"""Checks on values that come from users, each naming the field it rejects."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Final

from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Iterable

_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*", re.ASCII)
ID_MAX: Final = 64
OPERATION_ID_MAX: Final = 128
REASON_MAX: Final = 500


def identifier(field: str, value: object, *, max_length: int = ID_MAX) -> str:
    """
    An id such as an intensive or a student: letters, digits and ``._:@-``.

    Empty, over-long, whitespace or control characters are refused.
    """
    if not isinstance(value, str) or not value:
        raise InvalidInput(field=field, problem="must not be empty", value=value)
    if len(value) > max_length:
        raise InvalidInput(
            field=field, problem=f"must be at most {max_length} characters, got {len(value)}"
        )
    if not _ID.fullmatch(value):
        raise InvalidInput(
            field=field,
            problem=(
                "may hold only letters, digits and . _ : @ - "
                "(and must start with a letter or digit)"
            ),
            value=value,
        )
    return value


def operation_id(value: object, *, field: str = "operation_id") -> str:
    """
    An idempotency key chosen by the client: 1-128 printable characters.

    Like real providers' idempotency keys it may be any printable text, but
    never blank, whitespace-padded, or holding control characters.
    """
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field=field, problem="must not be empty", value=value)
    if len(value) > OPERATION_ID_MAX:
        raise InvalidInput(
            field=field,
            problem=f"must be at most {OPERATION_ID_MAX} characters, got {len(value)}",
        )
    if value != value.strip() or not value.isprintable():
        raise InvalidInput(
            field=field,
            problem="must be printable, with no control characters or surrounding spaces",
            value=value,
        )
    return value


def whole_number(field: str, value: object, *, minimum: int, maximum: int) -> int:
    """A whole number within ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field=field, problem="must be a whole number", value=value)
    if not minimum <= value <= maximum:
        raise InvalidInput(
            field=field,
            problem=f"must be between {minimum} and {maximum}, got {value}",
            value=value,
        )
    return value


def one_of(field: str, value: object, choices: Iterable[str]) -> str:
    """One of ``choices``, listed in the message when it is not."""
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        raise InvalidInput(
            field=field, problem=f"must be one of {', '.join(options)}; got {value!r}", value=value
        )
    return value


def text(field: str, value: object, *, max_length: int = REASON_MAX) -> str:
    """Free text such as a reason: not blank, bounded, no NUL or control characters."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field=field, problem="must not be empty", value=value)
    if len(value) > max_length:
        raise InvalidInput(
            field=field, problem=f"must be at most {max_length} characters, got {len(value)}"
        )
    if any(not ch.isprintable() and ch not in "\n\t" for ch in value):
        raise InvalidInput(field=field, problem="must not hold control characters", value=value)
    return value


def json_object(field: str, text: str | None) -> dict[str, Any]:
    """A JSON object given as text (``None``: empty); anything else names ``field``."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(field=field, problem=f"not JSON: {exc.msg}") from exc
    if not isinstance(value, dict):
        raise InvalidInput(field=field, problem="must be a JSON object")
    return value
