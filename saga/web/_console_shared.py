"""
What the console's pages share.

The engine the application was made for, the money summaries and the
database clock a page shows, the engine's refusals turned into a message on
the page, and a whole number read from a form.  The pages are
:mod:`saga.web.console`'s, :mod:`saga.web._console_recon`'s and
:mod:`saga.web._console_dlq`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flask import current_app, flash

from saga.codec import as_utc
from saga.exceptions import ConflictError, InvalidInput, NotFound, ProviderUnavailable

if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime

    from saga.core.engine import Engine
    from saga.core.sagas.money import MoneySummary

MAX_ROWS = 500


def engine() -> Engine:
    """The engine the application was made for."""
    found: Engine = current_app.extensions["saga_engine"]
    return found


def money_of(saga_ids: list[str]) -> Mapping[str, MoneySummary]:
    """The application's money summaries of these sagas (none for sagas without money)."""
    return engine().app.money(engine(), list(dict.fromkeys(saga_ids)))


def database_now() -> datetime:
    """The database clock, for ages and deadlines on a page."""
    value = engine().db.transaction(lambda tx: tx.scalar("db_now"), write=False)
    return as_utc(value)


class refusals:  # noqa: N801 - used as a statement: `with refusals():`
    """Turn the engine's refusals into a message on the page; nothing was changed."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, InvalidInput):
            flash(f"refused: {exc.field}: {exc.problem}; nothing was changed", "error")
            return True
        if isinstance(exc, ConflictError | NotFound | ProviderUnavailable):
            flash(f"refused: {exc.message}", "error")
            return True
        return False


def whole(text: str | None, *, default: int, field: str) -> int:
    """A form's whole number from 1 to 10000 (``default`` when empty), else bad input."""
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise InvalidInput(field=field, problem=f"{text!r} is not a whole number from 1 to 10000")
    return int(text)
