"""The catalogue: intensives with a capacity, a price and seat counters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from saga import validation as _validation
from saga.codec import as_utc, iso
from saga.exceptions import ConflictError, NotFound
from saga.purchase import money as _money

if TYPE_CHECKING:
    from datetime import datetime

    from sqlalchemy.engine import RowMapping

    from saga import Tx
    from saga.store import Database

MAX_SEATS = 1_000_000
LIST_MAX = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class Intensive:
    """A course with a limited number of seats."""

    id: str
    capacity: int
    price_minor: int
    currency: str
    held: int
    taken: int
    created_at: datetime

    @property
    def free(self) -> int:
        """Seats neither held nor taken."""
        return self.capacity - self.held - self.taken

    @property
    def price(self) -> str:
        """The price as a decimal string in the currency's unit (``49.90``)."""
        return _money.format_minor(self.price_minor, self.currency)

    @classmethod
    def from_row(cls, row: RowMapping) -> Intensive:
        """Build it from an ``intensives`` row."""
        return cls(
            id=row["id"],
            capacity=int(row["capacity"]),
            price_minor=int(row["price_minor"]),
            currency=row["currency"],
            held=int(row["held"]),
            taken=int(row["taken"]),
            created_at=as_utc(row["created_at"]),
        )

    def to_json(self) -> dict[str, Any]:
        """The contract's intensive object, plus ``price_minor`` and ``created_at``."""
        return {
            "id": self.id,
            "capacity": self.capacity,
            "price": self.price,
            "price_minor": self.price_minor,
            "currency": self.currency,
            "seats": {"held": self.held, "taken": self.taken, "free": self.free},
            "created_at": iso(self.created_at),
        }


class Catalogue:
    """Add and read intensives."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self, intensive_id: str, *, seats: int, price: str, currency: str
    ) -> tuple[Intensive, bool]:
        """
        Add an intensive; ``(intensive, created)``.

        Adding the same id again with the same capacity, price and currency
        returns the existing one (``created=False``); with other values it is
        a :class:`ConflictError` and changes nothing.
        """
        intensive_id = _validation.identifier("intensive_id", intensive_id)
        seats = _validation.whole_number("seats", seats, minimum=1, maximum=MAX_SEATS)
        currency = _money.currency(currency)
        price_minor = _money.parse_amount(price, currency, field="price")

        def work(tx: Tx) -> tuple[Intensive, bool]:
            created = tx.one(
                "insert_intensive",
                id=intensive_id,
                capacity=seats,
                price_minor=price_minor,
                currency=currency,
            )
            intensive = get_intensive_in(tx, intensive_id)
            same = (intensive.capacity, intensive.price_minor, intensive.currency) == (
                seats,
                price_minor,
                currency,
            )
            if created is None and not same:
                msg = (
                    f"intensive {intensive_id!r} already exists with {intensive.capacity} seats "
                    f"at {intensive.price} {intensive.currency}; nothing was changed"
                )
                raise ConflictError(msg)
            return intensive, created is not None

        return self.db.transaction(work)

    def get(self, intensive_id: str) -> Intensive:
        """The intensive ``intensive_id``; :class:`NotFound` if there is none."""
        intensive_id = _validation.identifier("intensive_id", intensive_id)
        return self.db.transaction(lambda tx: get_intensive_in(tx, intensive_id), write=False)

    def list(self, *, limit: int = 1000, after: str = "") -> list[Intensive]:
        """Intensives in id order."""
        limit = _validation.whole_number("limit", limit, minimum=1, maximum=LIST_MAX)
        rows = self.db.transaction(
            lambda tx: tx.all("list_intensives", limit=limit, after=after), write=False
        )
        return [Intensive.from_row(row) for row in rows]


def get_intensive_in(tx: Tx, intensive_id: str) -> Intensive:
    """The intensive ``intensive_id`` read inside ``tx``."""
    row = tx.one("get_intensive", id=intensive_id)
    if row is None:
        raise NotFound(kind="intensive", key=intensive_id)
    return Intensive.from_row(row)
