-- The sandbox payment provider's own ledger, in a schema of its own, written
-- through its own connection and never inside an engine transaction.  It is a
-- test double of a real provider, created on first use (IF NOT EXISTS).

CREATE TABLE IF NOT EXISTS sandbox_charges (
    payment_id     text PRIMARY KEY,
    key            text NOT NULL UNIQUE,
    params_digest  text NOT NULL,
    reference      text NOT NULL,
    method         text NOT NULL,
    amount_minor   bigint NOT NULL,
    charged_minor  bigint,
    currency       text NOT NULL,
    status         text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT sandbox_charges_status_known CHECK (
        status IN ('pending', 'succeeded', 'failed', 'cancelled')
    )
);

CREATE TABLE IF NOT EXISTS sandbox_refunds (
    refund_id      text PRIMARY KEY,
    key            text NOT NULL UNIQUE,
    params_digest  text NOT NULL,
    payment_id     text NOT NULL REFERENCES sandbox_charges (payment_id),
    amount_minor   bigint NOT NULL,
    status         text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT sandbox_refunds_status_known CHECK (status IN ('pending', 'succeeded', 'failed'))
);

-- Card holds (version 2 purchases): money authorized on the buyer's card under
-- its key, then captured (a charge of sandbox_charges made under the capture's
-- key, named by capture_id) or voided (under void_key).  A real provider never
-- does both to one authorization; `saga verify` checks that this one did not.
CREATE TABLE IF NOT EXISTS sandbox_authorizations (
    authorization_id  text PRIMARY KEY,
    key               text NOT NULL UNIQUE,
    params_digest     text NOT NULL,
    reference         text NOT NULL,
    method            text NOT NULL,
    amount_minor      bigint NOT NULL,
    authorized_minor  bigint,
    currency          text NOT NULL,
    status            text NOT NULL,
    capture_id        text UNIQUE REFERENCES sandbox_charges (payment_id),
    void_key          text UNIQUE,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT sandbox_authorizations_status_known CHECK (
        status IN ('pending', 'authorized', 'failed', 'captured', 'voided', 'expired')
    )
);

-- Webhooks waiting to be delivered to the engine's inbox.  Duplicates (the
-- same event id twice) are deliberate for some payment methods.
CREATE TABLE IF NOT EXISTS sandbox_webhooks (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id      text NOT NULL,
    type          text NOT NULL,
    body          jsonb NOT NULL,
    deliver_at    timestamptz NOT NULL,
    lease_until   timestamptz,
    delivered_at  timestamptz
);
CREATE INDEX IF NOT EXISTS sandbox_webhooks_due ON sandbox_webhooks (deliver_at)
    WHERE delivered_at IS NULL;
