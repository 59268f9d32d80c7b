"""Amounts of money: parsed from text into integer minor units, never floats."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

from saga.exceptions import InvalidInput

# ISO 4217 currencies whose minor unit is not 1/100.  Any other well-formed
# code has two decimals, like most of the world's currencies.
_EXPONENTS: Final = {
    **dict.fromkeys(
        (
            "BIF",
            "CLP",
            "DJF",
            "GNF",
            "ISK",
            "JPY",
            "KMF",
            "KRW",
            "PYG",
            "RWF",
            "UGX",
            "UYI",
            "VND",
            "VUV",
            "XAF",
            "XOF",
            "XPF",
        ),
        0,
    ),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
}
_CURRENCY: Final = re.compile(r"[A-Z]{3}", re.ASCII)
_AMOUNT: Final = re.compile(r"[0-9]{1,15}(\.[0-9]{1,4})?", re.ASCII)
MAX_MINOR: Final = 10**12


def currency(value: object, *, field: str = "currency") -> str:
    """An ISO 4217 code: three upper-case letters (``EUR``)."""
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        raise InvalidInput(
            field=field, problem=f"must be an ISO 4217 code such as EUR, got {value!r}", value=value
        )
    return value


def exponent(code: str) -> int:
    """Decimal places of the currency's minor unit."""
    return _EXPONENTS.get(code, 2)


def parse_amount(value: object, code: str, *, field: str = "price") -> int:
    """
    A positive decimal amount (``49``, ``49.9``, ``49.90``) in minor units.

    Refuses signs, exponents, thousands separators, more decimals than the
    currency has, zero, and anything above a sane maximum.
    """
    text = value.strip() if isinstance(value, str) else value
    if not isinstance(text, str) or not _AMOUNT.fullmatch(text):
        raise InvalidInput(
            field=field, problem=f"must be a positive decimal amount such as 49.90, got {value!r}"
        )
    places = exponent(code)
    try:
        amount = Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the pattern already checked it
        raise InvalidInput(field=field, problem=f"not a decimal amount: {value!r}") from exc
    minor = amount.scaleb(places)
    if minor != minor.to_integral_value():
        raise InvalidInput(
            field=field,
            problem=f"{code} has {places} decimal places; {value!r} has more",
        )
    if minor <= 0:
        raise InvalidInput(field=field, problem=f"must be greater than zero, got {value!r}")
    if minor > MAX_MINOR:
        raise InvalidInput(field=field, problem=f"is above the maximum amount, got {value!r}")
    return int(minor)


def format_minor(minor: int, code: str) -> str:
    """Minor units as a decimal string with the currency's places: ``4990`` → ``49.90``."""
    places = exponent(code)
    if places == 0:
        return str(minor)
    sign = "-" if minor < 0 else ""
    whole, frac = divmod(abs(minor), 10**places)
    return f"{sign}{whole}.{frac:0{places}d}"
