"""Contract: the catalogue of intensives, on every backend."""

from __future__ import annotations

import pytest

from saga.exceptions import ConflictError, DatabaseError, InvalidInput, NotFound
from tests.helpers import dump, execute


class TestAddIntensive:
    def test_new_intensive_has_every_seat_free(self, engine):
        """A new intensive starts with held = taken = 0."""
        intensive, created = engine.services.catalogue.add(
            "js-101", seats=30, price="49.90", currency="EUR"
        )
        assert created
        assert (30, 4990, "EUR", 0, 0, 30) == (
            intensive.capacity,
            intensive.price_minor,
            intensive.currency,
            intensive.held,
            intensive.taken,
            intensive.free,
        )

    def test_adding_the_same_intensive_again_is_idempotent(self, engine):
        """Equal values under the same id return the existing intensive."""
        first, _ = engine.services.catalogue.add("js-101", seats=30, price="49.90", currency="EUR")
        again, created = engine.services.catalogue.add(
            "js-101", seats=30, price="49.9", currency="EUR"
        )
        assert (first, False) == (again, created)

    def test_other_values_under_the_same_id_conflict_and_change_nothing(self, engine):
        """Another capacity, price or currency under an existing id is a conflict."""
        engine.services.catalogue.add("js-101", seats=30, price="49.90", currency="EUR")
        before = dump(engine)
        with pytest.raises(ConflictError, match="already exists"):
            engine.services.catalogue.add("js-101", seats=31, price="49.90", currency="EUR")
        assert before == dump(engine)

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"seats": -1}, "seats"),
            ({"seats": 0}, "seats"),
            ({"price": "-5"}, "price"),
            ({"price": "4.999"}, "price"),
            ({"currency": "euro"}, "currency"),
        ],
    )
    def test_bad_values_name_the_field_and_change_nothing(self, engine, kwargs, field):
        """Rejected input raises InvalidInput on the field and writes nothing."""
        before = dump(engine)
        values = {"seats": 5, "price": "10.00", "currency": "EUR", **kwargs}
        with pytest.raises(InvalidInput) as info:
            engine.services.catalogue.add("x", **values)
        assert field == info.value.field
        assert before == dump(engine)

    def test_unknown_intensive_is_not_found(self, engine):
        """Reading an id that does not exist raises NotFound."""
        with pytest.raises(NotFound):
            engine.services.catalogue.get("nope")

    def test_list_is_in_id_order(self, engine):
        """Listing returns intensives sorted by id."""
        for name in ("b", "a", "c"):
            engine.services.catalogue.add(name, seats=1, price="1", currency="EUR")
        assert ["a", "b", "c"] == [i.id for i in engine.services.catalogue.list()]


class TestSeatCountersInTheDatabase:
    def test_database_refuses_overselling_even_by_hand(self, engine):
        """A CHECK constraint keeps held + taken <= capacity whatever writes the row."""
        engine.services.catalogue.add("js", seats=2, price="1", currency="EUR")
        with pytest.raises(Exception, match="intensives_seats_in_range"):
            execute(engine, "UPDATE intensives SET held = 3 WHERE id = 'js'")

    def test_database_refuses_negative_counters(self, engine):
        """No counter can go below zero."""
        engine.services.catalogue.add("js", seats=2, price="1", currency="EUR")
        with pytest.raises(Exception, match="intensives_seats_in_range"):
            execute(engine, "UPDATE intensives SET taken = -1 WHERE id = 'js'")

    def test_translated_database_errors_keep_the_constraint(self, engine):
        """Driver errors become DatabaseError with the violated constraint named."""

        def work(tx):
            tx.run("move_seats", id="js", held_delta=0, taken_delta=0)
            tx.execute_sql("UPDATE intensives SET held = 99 WHERE id = 'js'")

        engine.services.catalogue.add("js", seats=2, price="1", currency="EUR")
        with pytest.raises(DatabaseError) as info:
            engine.db.transaction(work)
        assert "intensives_seats_in_range" == info.value.constraint
