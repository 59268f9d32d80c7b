"""
Money as an application shows it: a summary per saga, rendered by the console and the CLI.

The engine knows nothing of money's meaning.  An application whose sagas hold money
gives :attr:`~saga.Application.money`: for some saga ids, a
:class:`MoneySummary` each (what the saga should hold now, what was charged
and given back, money moved outside the provider with its trace, and who or
what the saga is about).  The console's queue, item and saga pages and
``saga recon show`` render it; a saga the application says nothing about
shows no money.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga.codec import iso, maybe_utc

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

    from saga.core.sagas.registry import Context


def format_minor(minor: int, currency: str, exponent: int) -> str:
    """``4900, "EUR", 2`` -> ``"49.00 EUR"`` (a minus sign for negative amounts)."""
    sign = "-" if minor < 0 else ""
    whole, part = divmod(abs(minor), 10**exponent)
    digits = f"{whole}.{part:0{exponent}d}" if exponent else f"{whole}"
    return f"{sign}{digits} {currency}"


@dataclass(frozen=True, slots=True)
class Movement:
    """Money that moved outside the provider (a bank transfer), with its trace."""

    direction: str  # "in" (received) or "out" (given back)
    reference: str
    amount_minor: int
    operator: str
    reason: str
    at: datetime | str | None

    def to_json(self, currency: str, exponent: int) -> dict[str, Any]:
        """The movement as plain data, its amount in minor units and formatted."""
        at = self.at if isinstance(self.at, str) or self.at is None else iso(maybe_utc(self.at))
        return {
            "direction": self.direction,
            "reference": self.reference,
            "amount_minor": self.amount_minor,
            "amount": format_minor(self.amount_minor, currency, exponent),
            "operator": self.operator,
            "reason": self.reason,
            "at": at,
        }


@dataclass(frozen=True, slots=True)
class MoneySummary:
    """
    One saga's money, in one currency's minor units.

    ``expected_minor`` is what the saga should hold in its state now
    (``None`` while that is undecided), ``expected_note`` says why;
    ``charged_minor`` and ``refunded_minor`` count the provider's money and
    the money moved outside it (also listed in ``external``).
    """

    currency: str
    exponent: int
    expected_minor: int | None
    charged_minor: int
    refunded_minor: int
    expected_note: str = ""
    subject: str = ""
    external: tuple[Movement, ...] = ()

    @property
    def held_minor(self) -> int:
        """Charged minus given back."""
        return self.charged_minor - self.refunded_minor

    @property
    def difference_minor(self) -> int | None:
        """Held minus expected: 0 when the money matches, ``None`` while undecided."""
        if self.expected_minor is None:
            return None
        return self.held_minor - self.expected_minor

    def format(self, minor: int | None) -> str:
        """An amount of this summary's currency, ``49.00 EUR``; ``""`` for ``None``."""
        return "" if minor is None else format_minor(minor, self.currency, self.exponent)

    def to_json(self) -> dict[str, Any]:
        """The summary as plain data: minor units and formatted amounts."""
        return {
            "currency": self.currency,
            "subject": self.subject,
            "expected_minor": self.expected_minor,
            "expected": self.format(self.expected_minor),
            "expected_note": self.expected_note,
            "charged_minor": self.charged_minor,
            "charged": self.format(self.charged_minor),
            "refunded_minor": self.refunded_minor,
            "refunded": self.format(self.refunded_minor),
            "held_minor": self.held_minor,
            "held": self.format(self.held_minor),
            "difference_minor": self.difference_minor,
            "difference": self.format(self.difference_minor),
            "external": [m.to_json(self.currency, self.exponent) for m in self.external],
        }


def no_money(engine: Context, saga_ids: Sequence[str]) -> Mapping[str, MoneySummary]:
    """The default: the application's sagas hold no money."""
    del engine, saga_ids
    return {}
