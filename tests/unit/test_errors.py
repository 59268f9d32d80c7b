"""One exception tree with typed attributes, surviving pickling."""

from __future__ import annotations

import pickle

import pytest

from saga import exceptions
from state_machine.errors import SagaError

EXAMPLES = [
    exceptions.InvalidInput(field="price", problem="must be positive", value="-1"),
    exceptions.NotFound(kind="intensive", key="js"),
    exceptions.IdempotencyConflict(operation_id="op", saga_id="s"),
    exceptions.VersionConflict(saga_id="s", expected_version=1, actual_version=2),
    exceptions.SoldOut(intensive_id="js"),
    exceptions.DuplicatePurchase(intensive_id="js", student_id="st"),
    exceptions.JobConflict(job_id="j"),
    exceptions.DatabaseError("boom", sqlstate="23505", constraint="c"),
    exceptions.SchemaOutOfDate(current=0, required=1),
    exceptions.TransitionNotAllowed(state="a", event="b"),
    exceptions.ConflictError("plain message"),
]


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_every_error_shares_one_root(error):
    """Callers can catch everything the engine raises with SagaError."""
    assert isinstance(error, SagaError)
    assert exceptions.SagaError is SagaError


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_errors_survive_pickling(error):
    """An error raised in a worker process reaches its parent with its attributes."""
    copy = pickle.loads(pickle.dumps(error))
    assert type(error) is type(copy)
    assert str(error) == str(copy)
    assert vars(error) == vars(copy)


def test_invalid_input_is_a_value_error():
    """InvalidInput is also a ValueError, NotFound also a LookupError."""
    assert isinstance(exceptions.InvalidInput(field="f", problem="p"), ValueError)
    assert isinstance(exceptions.NotFound(kind="k", key="x"), LookupError)


def test_public_names_are_exported():
    """Every name in saga.exceptions.__all__ exists."""
    for name in exceptions.__all__:
        assert hasattr(exceptions, name)
