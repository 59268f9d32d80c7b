-- The purchase application's tables on SQLite: the catalogue, purchases, money
-- (payments, refunds, movements outside the provider), access and the provider's inbox.
-- Databases created before the engine and its applications had separate migrations
-- got these tables from the engine's own migrations 0001-0004, in this very shape:
-- IF NOT EXISTS makes this first migration a no-op there, and a test checks that a
-- fresh database and a migrated one build identical catalogs.
-- Times are from the database clock; later changes get forward-only files here.

-- Catalogue: intensives and their seat counters.  A seat is free, held (by a
-- purchase in progress) or taken (paid); free = capacity - held - taken.
CREATE TABLE IF NOT EXISTS intensives (
    id           TEXT PRIMARY KEY,
    capacity     INTEGER NOT NULL,
    price_minor  INTEGER NOT NULL,
    currency     TEXT NOT NULL,
    held         INTEGER NOT NULL DEFAULT 0,
    taken        INTEGER NOT NULL DEFAULT 0,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT intensives_capacity_positive CHECK (capacity > 0),
    CONSTRAINT intensives_price_positive CHECK (price_minor > 0),
    CONSTRAINT intensives_currency_iso CHECK (length(currency) = 3 AND currency GLOB '[A-Z][A-Z][A-Z]'),
    -- The last line of defence against overselling: no update can break it.
    CONSTRAINT intensives_seats_in_range CHECK (held >= 0 AND taken >= 0 AND held + taken <= capacity)
) STRICT;

-- The purchase saga's own data: which intensive, and where the seat is.
CREATE TABLE IF NOT EXISTS purchases (
    saga_id       TEXT PRIMARY KEY REFERENCES sagas (id),
    intensive_id  TEXT NOT NULL REFERENCES intensives (id),
    student_id    TEXT NOT NULL,
    amount_minor  INTEGER NOT NULL,
    currency      TEXT NOT NULL,
    seat          TEXT NOT NULL,
    CONSTRAINT purchases_seat_known CHECK (seat IN ('held', 'taken', 'free'))
) STRICT;
CREATE INDEX IF NOT EXISTS purchases_intensive_seat ON purchases (intensive_id, seat);
-- A student holds at most one seat of an intensive at a time.
CREATE UNIQUE INDEX IF NOT EXISTS purchases_one_seat_per_student ON purchases (intensive_id, student_id)
    WHERE seat <> 'free';

-- The purchase saga's payment intent: written before the provider is called,
-- under a key derived from the saga, so a retry reuses it and never mints a
-- new one.  One payment per purchase.
CREATE TABLE IF NOT EXISTS payments (
    saga_id           TEXT PRIMARY KEY REFERENCES sagas (id),
    key               TEXT NOT NULL UNIQUE,
    amount_minor      INTEGER NOT NULL,
    currency          TEXT NOT NULL,
    method            TEXT NOT NULL,
    status            TEXT NOT NULL DEFAULT 'intent',
    provider_ref      TEXT UNIQUE,
    charged_minor     INTEGER,
    charged_currency  TEXT,
    created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    stale_writes        INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT payments_status_known CHECK (
        status IN ('intent', 'pending', 'succeeded', 'failed', 'cancelled', 'unknown')
    )
) STRICT;

-- Refunds: one per payment (the key is derived from the payment's key).
CREATE TABLE IF NOT EXISTS refunds (
    saga_id       TEXT PRIMARY KEY REFERENCES sagas (id),
    payment_key   TEXT NOT NULL UNIQUE REFERENCES payments (key),
    key           TEXT NOT NULL UNIQUE,
    amount_minor  INTEGER NOT NULL,
    currency      TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'intent',
    provider_ref  TEXT UNIQUE,
    reason        TEXT,
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    stale_writes    INTEGER NOT NULL DEFAULT 0,
    CONSTRAINT refunds_status_known CHECK (
        status IN ('intent', 'pending', 'succeeded', 'failed', 'unknown')
    )
) STRICT;

-- Access granted to a confirmed purchase (an effect inside this database).
CREATE TABLE IF NOT EXISTS access_grants (
    saga_id     TEXT PRIMARY KEY REFERENCES sagas (id),
    student_id  TEXT NOT NULL,
    granted_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    revoked_at  TEXT
) STRICT;

-- Inbox: provider events, deduplicated by event id in the transaction that
-- applies them.  The same id with other content is a conflict, recorded in
-- inbox_conflicts and never applied.
CREATE TABLE IF NOT EXISTS inbox (
    event_id      TEXT PRIMARY KEY,
    source        TEXT NOT NULL,
    type          TEXT NOT NULL,
    payment_ref   TEXT NOT NULL,
    digest        TEXT NOT NULL,
    payload       TEXT NOT NULL,
    saga_id       TEXT REFERENCES sagas (id),
    outcome       TEXT NOT NULL,
    detail        TEXT,
    received_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    evidence      TEXT
        CONSTRAINT inbox_evidence_json CHECK (evidence IS NULL OR json_valid(evidence)),
    CONSTRAINT inbox_payload_json CHECK (json_valid(payload)),
    CONSTRAINT inbox_outcome_known CHECK (
        outcome IN ('applied', 'absorbed', 'not_applicable', 'unmatched')
    )
) STRICT;
CREATE INDEX IF NOT EXISTS inbox_by_saga ON inbox (saga_id) WHERE saga_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS inbox_conflicts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id     TEXT NOT NULL REFERENCES inbox (event_id),
    digest       TEXT NOT NULL,
    payload      TEXT NOT NULL,
    received_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT inbox_conflicts_payload_json CHECK (json_valid(payload))
) STRICT;

-- Money that moved outside the provider (a bank transfer), recorded by an
-- operator with its trace when resolving a reconciliation item.  `verify`
-- counts it like provider money: direction 'in' is money received, 'out'
-- money given back.
CREATE TABLE IF NOT EXISTS external_movements (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_id       TEXT NOT NULL REFERENCES sagas (id),
    item_id       TEXT NOT NULL REFERENCES recon_items (id),
    direction     TEXT NOT NULL,
    reference     TEXT NOT NULL UNIQUE,
    amount_minor  INTEGER NOT NULL,
    currency      TEXT NOT NULL,
    operator      TEXT NOT NULL,
    reason        TEXT NOT NULL,
    at            TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    CONSTRAINT external_movements_direction_known CHECK (direction IN ('in', 'out')),
    CONSTRAINT external_movements_amount_positive CHECK (amount_minor > 0)
) STRICT;
CREATE INDEX IF NOT EXISTS external_movements_by_saga ON external_movements (saga_id);
