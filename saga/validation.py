"""Checks on values that come from users, each naming the field it rejects."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from saga.exceptions import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "batch",
    "identifier",
    "json_document",
    "json_object",
    "one_of",
    "operation_id",
    "text",
    "whole_number",
]

_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*", re.ASCII)
ID_MAX: Final = 64
OPERATION_ID_MAX: Final = 128
REASON_MAX: Final = 500
# Rows or jobs per transaction: beyond this a batch holds its locks and its
# memory for long, and helps nothing (one of 10,000 already amortizes a commit).
BATCH_MAX: Final = 10_000


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


def batch(value: object, *, field: str = "batch") -> int:
    """A batch size: 1 to :data:`BATCH_MAX`."""
    return whole_number(field, value, minimum=1, maximum=BATCH_MAX)


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
    """
    A JSON object given as text (``None``: empty); anything else names ``field``.

    Stricter than :func:`json.loads`: ``NaN``, ``Infinity`` and numbers out of
    a double's range (``1e999``) are refused (they are not JSON, and
    PostgreSQL's ``jsonb`` refuses them), and so is nesting deeper than
    :data:`JSON_DEPTH_MAX` (60,000 levels would exhaust the parser's stack).
    """
    if text is None:
        return {}
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except InvalidInput as exc:
        raise InvalidInput(field=field, problem=exc.problem) from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(field=field, problem=f"not JSON: {exc.msg}") from exc
    except RecursionError:
        raise InvalidInput(field=field, problem=_TOO_DEEP) from None
    except ValueError:  # an integer of more digits than Python converts
        limit = sys.get_int_max_str_digits()
        raise InvalidInput(
            field=field, problem=f"numbers must have at most {limit} digits"
        ) from None
    if not isinstance(value, dict):
        raise InvalidInput(field=field, problem="must be a JSON object")
    return json_document(field, value)


JSON_DEPTH_MAX: Final = 64
_TOO_DEEP: Final = f"must not nest objects and arrays more than {JSON_DEPTH_MAX} levels deep"
_NOT_FINITE: Final = "numbers must be finite: NaN, Infinity and values beyond 1.8e308 are not JSON"


def json_document(field: str, value: Mapping[str, Any]) -> dict[str, Any]:
    """
    A JSON object given as a mapping (the Python API's payloads): as :func:`json_object` checks.

    Walked without recursion, so a document too deep for the parser is
    refused here rather than by a ``RecursionError`` later.
    """
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth > JSON_DEPTH_MAX:
                raise InvalidInput(field=field, problem=_TOO_DEEP)
            children = item.values() if isinstance(item, Mapping) else item
            pending.extend((child, depth + 1) for child in children)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInput(field=field, problem=_NOT_FINITE)
    return dict(value)


def _no_constant(name: str) -> object:
    raise InvalidInput(field="json", problem=f"{_NOT_FINITE} (got {name})")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise InvalidInput(field="json", problem=f"{_NOT_FINITE} (got {text[:20]})")
    return number
