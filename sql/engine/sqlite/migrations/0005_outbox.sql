-- 0005: the transactional outbox, and how far retention has pruned.
-- An outbox row is written in the transaction of the transition that
-- declares it; a relay publishes it and marks it published only after the
-- broker confirmed.  event_id is stable (saga id, version, type), so a
-- republished row is recognisable downstream.  An event the broker keeps
-- refusing is dead-lettered (dead_at, with last_error as the reason).
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL UNIQUE,
    type            TEXT NOT NULL,
    schema_version  INTEGER NOT NULL,
    saga_id         TEXT NOT NULL REFERENCES sagas (id),
    saga_kind       TEXT NOT NULL,
    saga_version    INTEGER NOT NULL,
    occurred_at     TEXT NOT NULL,
    data            TEXT NOT NULL,
    created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    available_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    errors          INTEGER NOT NULL DEFAULT 0,
    refusals        INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    lease_token     TEXT,
    lease_until     TEXT,
    published_at    TEXT,
    dead_at         TEXT,
    CONSTRAINT outbox_data_json CHECK (json_valid(data)),
    CONSTRAINT outbox_lease_paired CHECK ((lease_token IS NULL) = (lease_until IS NULL)),
    CONSTRAINT outbox_published_unleased CHECK (published_at IS NULL OR lease_token IS NULL),
    CONSTRAINT outbox_dead_unpublished CHECK (
        dead_at IS NULL OR (published_at IS NULL AND lease_token IS NULL)
    )
) STRICT;
-- The relay's claim: the oldest unpublished row of each saga.
CREATE INDEX outbox_unpublished ON outbox (saga_id, id) WHERE published_at IS NULL;
CREATE INDEX outbox_due ON outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- Operators' replays of dead-lettered events: who, why, and what it had failed with.
CREATE TABLE outbox_replays (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL,
    batch           TEXT NOT NULL,
    actor           TEXT NOT NULL,
    reason          TEXT,
    previous_error  TEXT,
    at              TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) STRICT;

-- The newest cut-off of each kind of pruned row: verify checks outbox rows
-- only for transitions after it (older published rows may have been pruned).
CREATE TABLE prune_horizons (
    target   TEXT PRIMARY KEY,
    horizon  TEXT NOT NULL
) STRICT;

-- Sagas may predate their events: verify asks for the outbox rows of
-- transitions from here on.
INSERT INTO prune_horizons (target, horizon) VALUES ('outbox', strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
