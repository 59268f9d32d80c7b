"""
The sandbox's card holds (the purchase's version 2), on both backends: authorize,
capture and void honour their keys like a real provider's, and one authorization
is captured or voided, never both.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from steps import OutcomeUnknown, PermanentError


@pytest.fixture
def sandbox(engine):
    return engine.services.sandbox


def authorize(sandbox, key="auth:1", method="pm_ok", amount=4900):
    return sandbox.authorize(
        key=key, amount_minor=amount, currency="EUR", method=method, reference="saga-1"
    )


def capture(sandbox, held, key="capture:auth:1", amount=4900):
    return sandbox.capture(key=key, authorization_id=held.authorization_id, amount_minor=amount)


def void(sandbox, held, key="void:auth:1"):
    return sandbox.void(key=key, authorization_id=held.authorization_id)


def test_one_authorization_per_key(sandbox):
    """The same key and parameters: the same authorization; other parameters: refused."""
    held = authorize(sandbox)
    assert (held, "authorized", 4900) == (authorize(sandbox), held.status, held.authorized_minor)
    with pytest.raises(PermanentError, match="already used with other parameters"):
        authorize(sandbox, amount=5000)
    assert 1 == len(sandbox.ledger()["authorizations"])
    assert held == sandbox.authorization_status(key="auth:1")


def test_a_capture_is_a_payment_read_by_its_key_once(sandbox):
    """The capture replays under its key, is a charge of the ledger, and marks the hold."""
    held = authorize(sandbox)
    taken = capture(sandbox, held)
    assert (taken, "succeeded", 4900) == (capture(sandbox, held), taken.status, taken.charged_minor)
    assert taken == sandbox.payment_status(key="capture:auth:1")
    with pytest.raises(PermanentError, match="already used with other parameters"):
        capture(sandbox, held, amount=100)
    ledger = sandbox.ledger()
    assert [taken.payment_id] == [c["payment_id"] for c in ledger["charges"]]
    [row] = ledger["authorizations"]
    assert ("captured", taken.payment_id, None) == (
        row["status"],
        row["capture_id"],
        row["void_key"],
    )


def test_a_void_after_the_capture_changes_nothing(sandbox):
    """Never both: the void answers "captured" and records no void."""
    held = authorize(sandbox)
    capture(sandbox, held)
    assert "captured" == void(sandbox, held).status
    [row] = sandbox.ledger()["authorizations"]
    assert ("captured", None) == (row["status"], row["void_key"])


def test_a_capture_after_the_void_fails_and_takes_nothing(sandbox):
    """Never both: the capture after a void is a failed charge."""
    held = authorize(sandbox)
    released = void(sandbox, held)
    assert (released, "voided") == (void(sandbox, held), released.status)
    taken = capture(sandbox, held)
    assert ("failed", None) == (taken.status, taken.charged_minor)
    [row] = sandbox.ledger()["authorizations"]
    assert ("voided", None, "void:auth:1") == (row["status"], row["capture_id"], row["void_key"])


def test_a_void_key_releases_one_authorization_only(sandbox):
    """A void key reused for another authorization is refused."""
    first = authorize(sandbox)
    other = authorize(sandbox, key="auth:2")
    void(sandbox, first)
    with pytest.raises(PermanentError, match="another authorization"):
        void(sandbox, other)
    assert "authorized" == sandbox.authorization_status(key="auth:2").status


def test_a_declined_authorization_holds_nothing(sandbox):
    """pm_declined: failed at once; nothing to capture, nothing to void."""
    held = authorize(sandbox, method="pm_declined")
    assert ("failed", None) == (held.status, held.authorized_minor)
    assert "failed" == capture(sandbox, held).status
    assert "failed" == void(sandbox, held).status


def test_another_amount_is_held_for_pm_amount_mismatch(sandbox):
    """pm_amount_mismatch: the hold is of another amount than asked."""
    held = authorize(sandbox, method="pm_amount_mismatch")
    assert ("authorized", 4900, 5000) == (held.status, held.amount_minor, held.authorized_minor)


def test_timeout_before_the_capture_takes_nothing(sandbox):
    """pm_timeout_before_charge: every capture call times out before anything happened."""
    held = authorize(sandbox, method="pm_timeout_before_charge")
    with pytest.raises(OutcomeUnknown, match="before anything happened"):
        capture(sandbox, held)
    assert sandbox.payment_status(key="capture:auth:1") is None
    assert "voided" == void(sandbox, held).status


def test_timeout_after_the_capture_took_the_money_then_replays(sandbox):
    """pm_timeout_after_charge: the first capture call times out after taking the money."""
    held = authorize(sandbox, method="pm_timeout_after_charge")
    with pytest.raises(OutcomeUnknown, match="after the money was taken"):
        capture(sandbox, held)
    assert "succeeded" == capture(sandbox, held).status
    assert "captured" == void(sandbox, held).status


def test_a_late_hold_cannot_be_stopped_then_is_voided(sandbox):
    """pm_late: pending; the first void only completes it (its webhook), the next releases it."""
    held = authorize(sandbox, method="pm_late")
    assert "pending" == held.status
    assert "pending" == void(sandbox, held).status
    assert "authorized" == sandbox.authorization_status(key="auth:1").status
    assert "voided" == void(sandbox, held).status
    types = [w.type for w in _webhooks(sandbox)]
    assert ["authorization.succeeded"] == types


def test_a_stale_failure_first_hold_settles_after_its_webhooks(sandbox):
    """pm_stale_failure_first: pending, a stale failure first, authorized a second later."""
    held = authorize(sandbox, method="pm_stale_failure_first")
    assert "pending" == held.status
    _age(sandbox, "created_at", seconds=5)
    assert "authorized" == sandbox.authorization_status(key="auth:1").status
    webhooks = _webhooks(sandbox)
    assert ["authorization.failed", "authorization.succeeded"] == [w.type for w in webhooks]
    assert ["failed", "authorized"] == [w.body["status"] for w in webhooks]


def test_a_hold_nobody_captured_lapses_after_a_week(sandbox):
    """Like a real provider's: an authorization left alone expires, and cannot be captured."""
    held = authorize(sandbox)
    _age(sandbox, "created_at", seconds=8 * 24 * 3600)
    assert "expired" == sandbox.authorization_status(key="auth:1").status
    assert "failed" == capture(sandbox, held).status


def _webhooks(sandbox):
    """The webhooks due now or later, taken (the test is their only deliverer)."""
    past = "2000-01-01T00:00:00.000Z" if sandbox.db.dialect == "sqlite" else "2000-01-01"
    with sandbox.db.engine.begin() as conn:
        conn.execute(sa.text("UPDATE sandbox_webhooks SET deliver_at = :past"), {"past": past})
    return sandbox.take_webhooks(limit=50)


def _age(sandbox, column, *, seconds):
    """Move every authorization's ``column`` ``seconds`` into the past."""
    if sandbox.db.dialect == "sqlite":
        sql = (
            f"UPDATE sandbox_authorizations SET {column} = strftime('%Y-%m-%dT%H:%M:%fZ', "
            f"julianday({column}) - {seconds} / 86400.0)"
        )
    else:
        sql = (
            f"UPDATE sandbox_authorizations "
            f"SET {column} = {column} - make_interval(secs => {seconds})"
        )
    with sandbox.db.engine.begin() as conn:
        conn.execute(sa.text(sql))
