"""
An application's services: one object of its own class, reached as ``engine.services``.

No attribute of the engine or of a context hands a service out by name any
more; the object is built once per engine, given to the application's
factories as ``ctx.services``, and closed with the engine.
"""

from __future__ import annotations

import dataclasses

import pytest
import sqlalchemy as sa

from saga import Application, Context, Engine, Route, by_saga_id
from saga.exceptions import ApplicationError
from saga.purchase.catalogue import Catalogue
from saga.purchase.services import PurchaseServices
from tests import counter_app


class Shop:
    """A user's services: built with the engine, seen by its factories, closed with it."""

    def __init__(self, ctx: Context) -> None:
        self.db = ctx.db
        self.closed = 0
        self.seen_by: list[str] = []

    def close(self) -> None:
        self.closed += 1


def _figures(ctx: Context[Shop]) -> dict[str, object]:
    ctx.services.seen_by.append("figures")
    return {"shop": ctx.services.db is ctx.db}


def _shop_app() -> Application[Shop]:
    return dataclasses.replace(counter_app.app(), services=Shop, figures=_figures)


def test_the_services_are_the_object_the_application_built(db_url):
    """Built once for the engine, the same object its factories see, closed with it."""
    engine = Engine(db_url, app=_shop_app())
    shop = engine.services
    assert isinstance(shop, Shop)
    assert shop.db is engine.db
    assert {"shop": True} == engine.app.figures(engine)
    assert ["figures"] == engine.services.seen_by
    assert engine.services is shop
    engine.close()
    assert 1 == shop.closed


def test_no_service_is_handed_out_by_name(db_url):
    """The older form (``engine.purchases``) is gone: an attribute error, not a lookup."""
    with Engine(db_url, check_schema=False) as engine:
        assert isinstance(engine.services, PurchaseServices)
        assert isinstance(engine.services.catalogue, Catalogue)
        for name in ("purchases", "catalogue", "sandbox", "inbox", "judge", "provider_getter"):
            with pytest.raises(AttributeError):
                getattr(engine, name)


def test_an_application_without_services_has_none(db_url):
    """Nothing to build: ``engine.services`` is ``None`` and closing the engine is fine."""
    with Engine(db_url, app=counter_app.app(), check_schema=False) as engine:
        assert engine.services is None


class Connects(Shop):
    """Services that reach the database as they are built."""

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        with ctx.db.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        BUILT.append(self)


BUILT: list[Connects] = []


def test_a_refused_application_leaves_no_connection_open(db_url):
    """The engine refuses the application after its services connected: all released."""
    BUILT.clear()
    wrong = Route(source="x", type="y", correlate=by_saga_id("ref"), event="no_such_event")
    app = dataclasses.replace(counter_app.app(), services=Connects, routes=(wrong,))
    with pytest.raises(ApplicationError, match="no_such_event"):
        Engine(db_url, app=app, check_schema=False)
    (shop,) = BUILT
    assert 1 == shop.closed
    assert 0 == shop.db.engine.pool.checkedin()  # disposed: the pool holds nothing
