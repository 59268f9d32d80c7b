-- The purchase application's tables on PostgreSQL: the catalogue, purchases, money
-- (payments, refunds, movements outside the provider), access and the provider's inbox.
-- Databases created before the engine and its applications had separate migrations
-- got these tables from the engine's own migrations 0001-0004, in this very shape:
-- IF NOT EXISTS makes this first migration a no-op there, and a test checks that a
-- fresh database and a migrated one build identical catalogs.
-- Times are from the database clock; later changes get forward-only files here.

-- Catalogue: intensives and their seat counters.  A seat is free, held (by a
-- purchase in progress) or taken (paid); free = capacity - held - taken.
CREATE TABLE IF NOT EXISTS intensives (
    id           text PRIMARY KEY,
    capacity     integer NOT NULL,
    price_minor  bigint NOT NULL,
    currency     text NOT NULL,
    held         integer NOT NULL DEFAULT 0,
    taken        integer NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT intensives_capacity_positive CHECK (capacity > 0),
    CONSTRAINT intensives_price_positive CHECK (price_minor > 0),
    CONSTRAINT intensives_currency_iso CHECK (currency ~ '^[A-Z]{3}$'),
    -- The last line of defence against overselling: no update can break it.
    CONSTRAINT intensives_seats_in_range CHECK (held >= 0 AND taken >= 0 AND held + taken <= capacity)
);

-- The purchase saga's own data: which intensive, and where the seat is.
CREATE TABLE IF NOT EXISTS purchases (
    saga_id       text PRIMARY KEY REFERENCES sagas (id),
    intensive_id  text NOT NULL REFERENCES intensives (id),
    student_id    text NOT NULL,
    amount_minor  bigint NOT NULL,
    currency      text NOT NULL,
    seat          text NOT NULL,
    CONSTRAINT purchases_seat_known CHECK (seat IN ('held', 'taken', 'free'))
);
CREATE INDEX IF NOT EXISTS purchases_intensive_seat ON purchases (intensive_id, seat);
-- A student holds at most one seat of an intensive at a time.
CREATE UNIQUE INDEX IF NOT EXISTS purchases_one_seat_per_student ON purchases (intensive_id, student_id)
    WHERE seat <> 'free';

-- The purchase saga's payment intent: written before the provider is called,
-- under a key derived from the saga, so a retry reuses it and never mints a
-- new one.  One payment per purchase.
CREATE TABLE IF NOT EXISTS payments (
    saga_id           text PRIMARY KEY REFERENCES sagas (id),
    key               text NOT NULL UNIQUE,
    amount_minor      bigint NOT NULL,
    currency          text NOT NULL,
    method            text NOT NULL,
    status            text NOT NULL DEFAULT 'intent',
    provider_ref      text UNIQUE,
    charged_minor     bigint,
    charged_currency  text,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    stale_writes        integer NOT NULL DEFAULT 0,
    CONSTRAINT payments_status_known CHECK (
        status IN ('intent', 'pending', 'succeeded', 'failed', 'cancelled', 'unknown')
    )
);

-- Refunds: one per payment (the key is derived from the payment's key).
CREATE TABLE IF NOT EXISTS refunds (
    saga_id       text PRIMARY KEY REFERENCES sagas (id),
    payment_key   text NOT NULL UNIQUE REFERENCES payments (key),
    key           text NOT NULL UNIQUE,
    amount_minor  bigint NOT NULL,
    currency      text NOT NULL,
    status        text NOT NULL DEFAULT 'intent',
    provider_ref  text UNIQUE,
    reason        text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    stale_writes    integer NOT NULL DEFAULT 0,
    CONSTRAINT refunds_status_known CHECK (
        status IN ('intent', 'pending', 'succeeded', 'failed', 'unknown')
    )
);

-- Access granted to a confirmed purchase (an effect inside this database).
CREATE TABLE IF NOT EXISTS access_grants (
    saga_id     text PRIMARY KEY REFERENCES sagas (id),
    student_id  text NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    revoked_at  timestamptz
);

-- Inbox: provider events, deduplicated by event id in the transaction that
-- applies them.  The same id with other content is a conflict, recorded in
-- inbox_conflicts and never applied.
CREATE TABLE IF NOT EXISTS inbox (
    event_id      text PRIMARY KEY,
    source        text NOT NULL,
    type          text NOT NULL,
    payment_ref   text NOT NULL,
    digest        text NOT NULL,
    payload       jsonb NOT NULL,
    saga_id       text REFERENCES sagas (id),
    outcome       text NOT NULL,
    detail        text,
    received_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    evidence      jsonb,
    CONSTRAINT inbox_outcome_known CHECK (
        outcome IN ('applied', 'absorbed', 'not_applicable', 'unmatched')
    )
);
CREATE INDEX IF NOT EXISTS inbox_by_saga ON inbox (saga_id) WHERE saga_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS inbox_conflicts (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id     text NOT NULL REFERENCES inbox (event_id),
    digest       text NOT NULL,
    payload      jsonb NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Money that moved outside the provider (a bank transfer), recorded by an
-- operator with its trace when resolving a reconciliation item.  `verify`
-- counts it like provider money: direction 'in' is money received, 'out'
-- money given back.
CREATE TABLE IF NOT EXISTS external_movements (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    saga_id       text NOT NULL REFERENCES sagas (id),
    item_id       text NOT NULL REFERENCES recon_items (id),
    direction     text NOT NULL,
    reference     text NOT NULL UNIQUE,
    amount_minor  bigint NOT NULL,
    currency      text NOT NULL,
    operator      text NOT NULL,
    reason        text NOT NULL,
    at            timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT external_movements_direction_known CHECK (direction IN ('in', 'out')),
    CONSTRAINT external_movements_amount_positive CHECK (amount_minor > 0)
);
CREATE INDEX IF NOT EXISTS external_movements_by_saga ON external_movements (saga_id);
