"""
Signed webhooks: an HMAC of the timestamp and the body, checked before anything is stored.

The scheme is the one Stripe documents (Adyen's is alike): the sender puts
``Saga-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` on
the request.  The receiver recomputes the HMAC over the exact bytes it got,
compares in constant time, and refuses a timestamp further than the
tolerance from its own clock (the database's), so a captured request cannot
be replayed later.  Several ``v1`` entries may be sent while a secret is
rotated; one match is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Final

from saga.exceptions import SagaError

SIGNATURE_HEADER: Final = "Saga-Signature"
DEFAULT_TOLERANCE_S: Final = 300.0
_SCHEME: Final = "v1"


class SignatureRefused(SagaError):
    """A webhook's signature is missing, malformed, wrong or too old; nothing was stored."""

    def __init__(self, *, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"signature refused ({reason}): {detail}")
        self._kwargs = {"reason": reason, "detail": detail}


@dataclass(frozen=True, slots=True)
class Signed:
    """What a sender puts on a request: the header's name and value."""

    header: str
    value: str


def sign(secret: str, body: bytes, *, timestamp: int) -> Signed:
    """The signature header for ``body`` sent at ``timestamp`` (unix seconds)."""
    return Signed(SIGNATURE_HEADER, f"t={timestamp},{_SCHEME}={_mac(secret, timestamp, body)}")


def check(
    secrets: tuple[str, ...],
    body: bytes,
    header: str | None,
    *,
    now: float,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> int:
    """
    Check ``header`` against ``body``; the signed timestamp, or :class:`SignatureRefused`.

    ``secrets`` are the provider's current secrets (more than one while one
    is rotated); ``now`` is the receiver's clock in unix seconds.
    """
    timestamp, macs = _parse(header)
    if abs(now - timestamp) > tolerance_s:
        raise SignatureRefused(
            reason="stale",
            detail=f"signed at {timestamp}, {now - timestamp:+.0f} s from now; the tolerance "
            f"is {tolerance_s:g} s (a replayed or delayed request)",
        )
    expected = [_mac(secret, timestamp, body).encode() for secret in secrets if secret]
    if not any(hmac.compare_digest(mac.encode(), want) for mac in macs for want in expected):
        raise SignatureRefused(
            reason="mismatch", detail="no signature matches the body with a configured secret"
        )
    return timestamp


def shape(header: str | None) -> None:
    """
    Refuse a header that is missing or out of shape, before any clock is read.

    A request without a usable signature costs the receiver no database
    round trip (:func:`check` repeats this; it is cheap).
    """
    _parse(header)


_TIMESTAMP = re.compile(r"\d{1,12}")
_HEX_MAC = re.compile(r"[0-9a-f]{64}")


def _parse(header: str | None) -> tuple[int, list[str]]:
    """The signed timestamp and the ``v1`` HMACs; no header: ``unsigned``, else ``malformed``."""
    if not header:
        raise SignatureRefused(reason="unsigned", detail=f"no {SIGNATURE_HEADER} header")
    timestamp: int | None = None
    macs: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and _TIMESTAMP.fullmatch(value):
            timestamp = int(value)
        elif key == _SCHEME and _HEX_MAC.fullmatch(value):
            macs.append(value)
    if timestamp is None or not macs:
        raise SignatureRefused(
            reason="malformed",
            detail=f"{SIGNATURE_HEADER} must read t=<unix seconds>,{_SCHEME}=<64 hex digits of "
            "HMAC-SHA256>",
        )
    return timestamp, macs


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
