-- The sandbox payment provider's own ledger, in a file of its own, written
-- through its own connection and never inside an engine transaction.  It is a
-- test double of a real provider, created on first use (IF NOT EXISTS).

CREATE TABLE IF NOT EXISTS sandbox_charges (
    payment_id     TEXT PRIMARY KEY,
    key            TEXT NOT NULL UNIQUE,
    params_digest  TEXT NOT NULL,
    reference      TEXT NOT NULL,
    method         TEXT NOT NULL,
    amount_minor   INTEGER NOT NULL,
    charged_minor  INTEGER,
    currency       TEXT NOT NULL,
    status         TEXT NOT NULL,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT sandbox_charges_status_known CHECK (
        status IN ('pending', 'succeeded', 'failed', 'cancelled')
    )
) STRICT;

CREATE TABLE IF NOT EXISTS sandbox_refunds (
    refund_id      TEXT PRIMARY KEY,
    key            TEXT NOT NULL UNIQUE,
    params_digest  TEXT NOT NULL,
    payment_id     TEXT NOT NULL REFERENCES sandbox_charges (payment_id),
    amount_minor   INTEGER NOT NULL,
    status         TEXT NOT NULL,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT sandbox_refunds_status_known CHECK (status IN ('pending', 'succeeded', 'failed'))
) STRICT;

-- Card holds (version 2 purchases): money authorized on the buyer's card under
-- its key, then captured (a charge of sandbox_charges made under the capture's
-- key, named by capture_id) or voided (under void_key).  A real provider never
-- does both to one authorization; `saga verify` checks that this one did not.
CREATE TABLE IF NOT EXISTS sandbox_authorizations (
    authorization_id  TEXT PRIMARY KEY,
    key               TEXT NOT NULL UNIQUE,
    params_digest     TEXT NOT NULL,
    reference         TEXT NOT NULL,
    method            TEXT NOT NULL,
    amount_minor      INTEGER NOT NULL,
    authorized_minor  INTEGER,
    currency          TEXT NOT NULL,
    status            TEXT NOT NULL,
    capture_id        TEXT UNIQUE REFERENCES sandbox_charges (payment_id),
    void_key          TEXT UNIQUE,
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT sandbox_authorizations_status_known CHECK (
        status IN ('pending', 'authorized', 'failed', 'captured', 'voided', 'expired')
    )
) STRICT;

-- Webhooks waiting to be delivered to the engine's inbox.  Duplicates (the
-- same event id twice) are deliberate for some payment methods.
CREATE TABLE IF NOT EXISTS sandbox_webhooks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id      TEXT NOT NULL,
    type          TEXT NOT NULL,
    body          TEXT NOT NULL,
    deliver_at    TEXT NOT NULL,
    lease_until   TEXT,
    delivered_at  TEXT,
    CONSTRAINT sandbox_webhooks_body_json CHECK (json_valid(body))
) STRICT;
CREATE INDEX IF NOT EXISTS sandbox_webhooks_due ON sandbox_webhooks (deliver_at)
    WHERE delivered_at IS NULL;
