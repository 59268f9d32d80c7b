"""The sandbox provider honours idempotency keys like real providers, on both backends."""

from __future__ import annotations

import pytest

from saga.cli import main
from saga.purchase.sandbox import sandbox_url_for
from steps import OutcomeUnknown, PermanentError
from tests.purchases import cli_json


def charge(sandbox, key="pay:1", method="pm_ok", amount=4900):
    return sandbox.create_payment(
        key=key, amount_minor=amount, currency="EUR", method=method, reference="saga-1"
    )


def test_same_key_returns_the_same_payment(engine):
    """A retried create with the same key and parameters is the same payment."""
    first = charge(engine.services.sandbox)
    assert first == charge(engine.services.sandbox)
    assert 1 == len(engine.services.sandbox.ledger()["charges"])


def test_same_key_other_parameters_is_refused(engine):
    """Reusing a key for another amount is an error, like at real providers."""
    charge(engine.services.sandbox)
    with pytest.raises(PermanentError, match="already used with other parameters"):
        charge(engine.services.sandbox, amount=5000)


def test_timeout_after_charge_charged_and_then_replays(engine):
    """The first call times out after charging; the same key then reports the charge."""
    with pytest.raises(OutcomeUnknown):
        charge(engine.services.sandbox, method="pm_timeout_after_charge")
    assert "succeeded" == charge(engine.services.sandbox, method="pm_timeout_after_charge").status


def test_timeout_before_charge_leaves_no_trace(engine):
    """The call times out before anything happened: the provider knows nothing."""
    with pytest.raises(OutcomeUnknown):
        charge(engine.services.sandbox, method="pm_timeout_before_charge")
    assert engine.services.sandbox.payment_status(key="pay:1") is None


def test_one_refund_per_key_and_never_more_than_charged(engine):
    """A refund key replays its refund; refunding past what was charged is refused."""
    payment = charge(engine.services.sandbox)
    refund = engine.services.sandbox.refund(
        key="refund:pay:1", payment_id=payment.payment_id, amount_minor=4900
    )
    again = engine.services.sandbox.refund(
        key="refund:pay:1", payment_id=payment.payment_id, amount_minor=4900
    )
    assert (refund, "succeeded") == (again, refund.status)
    with pytest.raises(PermanentError, match="exceeds"):
        engine.services.sandbox.refund(
            key="refund:other", payment_id=payment.payment_id, amount_minor=1
        )


def test_ledger_command_shows_the_contract_fields(engine, db_url, capsys):
    """`saga sandbox ledger --json` lists charges and refunds with the contract's fields."""
    payment = charge(engine.services.sandbox)
    engine.services.sandbox.refund(
        key="refund:pay:1", payment_id=payment.payment_id, amount_minor=4900
    )
    code, ledger = cli_json(capsys, "sandbox", "ledger", "--db", db_url)
    assert 0 == code
    assert {"payment_id", "key", "amount", "currency", "status"} <= set(ledger["charges"][0])
    assert {"refund_id", "payment_id", "key", "amount", "status"} <= set(ledger["refunds"][0])
    assert ("49.00", "succeeded") == (
        ledger["charges"][0]["amount"],
        ledger["refunds"][0]["status"],
    )


@pytest.mark.parametrize(
    ("engine_url", "sandbox"),
    [
        ("sqlite:///data/saga.db", "sqlite:///data/saga.sandbox.db"),
        ("sqlite:///saga", "sqlite:///saga.sandbox"),
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db?options=-csearch_path%3Dsaga_sandbox"),
        (
            "postgresql://u@h/db?options=-csearch_path%3Dshop",
            "postgresql+psycopg://u@h/db?options=-csearch_path%3Dshop_sandbox",
        ),
    ],
)
def test_sandbox_database_is_derived_from_the_engine_one(engine_url, sandbox):
    """A sibling SQLite file, or a schema of its own next to the engine's on PostgreSQL."""
    assert sandbox == sandbox_url_for(engine_url)


class TestWebhookCommand:
    def test_deliver_then_duplicate_then_conflict(self, engine, db_url, capsys):
        """deliver: 4 while no purchase knows the payment (retried), 3 for an id reused."""
        args = (
            "webhook",
            "deliver",
            "--event-id",
            "evt-1",
            "--type",
            "payment.succeeded",
            "--payment",
            "pay_x",
            "--amount",
            "49.00",
            "--currency",
            "EUR",
            "--db",
            db_url,
        )
        code, first = cli_json(capsys, *args)
        assert (4, "unmatched") == (code, first["outcome"])  # no purchase knows pay_x
        code, again = cli_json(capsys, *args)
        assert (4, "unmatched", False) == (code, again["outcome"], again["duplicate"])
        other = list(args)
        other[other.index("49.00")] = "10.00"
        code, conflict = cli_json(capsys, *other)
        assert (3, True) == (code, conflict["conflict"])

    @pytest.mark.parametrize(
        ("extra", "field"),
        [
            (("--type", "payment.maybe", "--payment", "p"), "--type"),
            (("--type", "payment.succeeded", "--payment", "p"), "--amount"),
            (
                (
                    "--type",
                    "payment.failed",
                    "--payment",
                    "p",
                    "--amount",
                    "x",
                    "--currency",
                    "EUR",
                ),
                "--amount",
            ),
        ],
    )
    def test_bad_events_exit_2(self, engine, db_url, capsys, extra, field):
        """An unknown type, or a success without its amount, is bad input naming the field."""
        capsys.readouterr()
        code = main(["webhook", "deliver", "--event-id", "e", *extra, "--db", db_url])
        assert 2 == code
        assert field in capsys.readouterr().err
