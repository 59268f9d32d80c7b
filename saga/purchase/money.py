"""Amounts of money: parsed from text into integer minor units, never floats."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

from saga.exceptions import InvalidInput

# ISO 4217 (list one, active codes usable for prices) and the decimal places
# of each currency's minor unit.  Funds, precious metals and testing codes
# (XAU, XTS, XXX…) have no minor unit and are not prices.
_MINOR_UNITS: Final = {
    2: """
        AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BOV BRL BSD BTN BWP BYN
        BZD CAD CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP
        GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP
        LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR
        NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP
        STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD USN UYU UZS VED VES WST XCD XCG YER
        ZAR ZMW ZWG ZWL
    """,
    0: "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF",
    3: "BHD IQD JOD KWD LYD OMR TND",
    4: "CLF UYW",
}
CURRENCIES: Final = {
    code: places for places, codes in _MINOR_UNITS.items() for code in codes.split()
}

_CURRENCY: Final = re.compile(r"[A-Z]{3}", re.ASCII)
_AMOUNT: Final = re.compile(r"[0-9]{1,15}(\.[0-9]{1,4})?", re.ASCII)
MAX_MINOR: Final = 10**12


def currency(value: object, *, field: str = "currency") -> str:
    """An active ISO 4217 currency code (``EUR``); its minor unit is :func:`exponent`."""
    if not isinstance(value, str) or not _CURRENCY.fullmatch(value):
        raise InvalidInput(
            field=field, problem=f"must be an ISO 4217 code such as EUR, got {value!r}", value=value
        )
    if value not in CURRENCIES:
        raise InvalidInput(
            field=field,
            problem=f"{value!r} is not an ISO 4217 currency with a minor unit (EUR, USD, JPY…)",
            value=value,
        )
    return value


def exponent(code: str) -> int:
    """Decimal places of the currency's minor unit (ISO 4217)."""
    return CURRENCIES.get(code, 2)


def parse_amount(value: object, code: str, *, field: str = "price") -> int:
    """
    A positive decimal amount (``49``, ``49.9``, ``49.90``) in minor units.

    Refuses signs, exponents, thousands separators, surrounding spaces, more
    decimals than the currency has, zero, and anything above a sane maximum.
    """
    text = value
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
